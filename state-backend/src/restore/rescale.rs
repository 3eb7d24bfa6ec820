//! Restoring one keyed backend from several snapshots, clipped to its key-group range: what a subtask does when
//! a job's parallelism changes. The new subtask owns key groups `R` and receives every old snapshot whose
//! key-group range overlaps `R` ([`RestoreSource`]); [`open_keyed_backend_from`] gives it exactly the rows of
//! those snapshots whose key group lies in `R` — every state kind, TTL timestamps, namespaces and kind records
//! included — and nothing else.
//!
//! ## RocksDB target
//!
//! As Flink's `RocksDBIncrementalRestoreOperation` with its "ingest DB" mode, but importing whole SST files
//! where Flink copies records:
//!
//! 1. A single native RocksDB source is moved into place and opened as any restore (its ingest files applied,
//!    the TTL registry filled from its kind rows) — a rename, no copy. If its key-group range is not `R`, the
//!    rows outside `R` are cut with one `delete_range` per interval and state column family (a key-group range
//!    is one byte interval of row keys, see [`crate::keyed::layout`]).
//! 2. Several native RocksDB sources are merged into a new database by RocksDB's column-family import
//!    ([`crate::rocks::import`]): each source is read without opening it for writing, and every state's column
//!    family is created from the SST files of all of them at once, each file keeping its level and sequence
//!    numbers (an ingest file gets the one its restore would give it). Their key ranges cannot overlap: each
//!    source holds only its own key groups, which is checked file by file. Rows outside `R` that came along
//!    are then cut as above. A source's state that an import could not carry exactly — range deletions (from
//!    an earlier clip; RocksDB recomputes a file's bounds from its content, which a range tombstone may
//!    overstate), a file whose key range is unknown or outside the source's key groups — is copied instead:
//!    its rows within `R` are written into an SST file with `SstFileWriter` and ingested.
//! 3. Heap and canonical sources are merged the same way: a canonical file is already in RocksDB's order and
//!    is streamed; a heap file is sorted one state at a time. A state the database lacks gets its column
//!    family (with the options registration would give it: TTL compaction filter, periodic compaction), its
//!    kind row and its TTL registry entry first.
//!
//! Without a native RocksDB source the database starts empty and every source is ingested. Merging never
//! writes rows through the memtable.
//!
//! ## Heap target
//!
//! Every source (heap or canonical) is read, keeping the rows whose key group (a row key's first 1 or 2 bytes)
//! lies in `R`. A native RocksDB snapshot is refused: moving from RocksDB to the heap goes through a canonical
//! savepoint.
//!
//! ## Declarations
//!
//! Two sources that declare one state differently (kind, namespacing, TTL on or off) fail the restore with a
//! [`StateError::Declaration`] naming both snapshots (`meta::check_same_declaration`).
//!
//! Sources' directories are consumed: RocksDB ones are moved, and every directory may be changed or deleted.

use crate::error::StateError;
use crate::heap::statefile::{Row, SortBuffer, StateFileReader};
use crate::heap::HeapBackend;
use crate::keyed::layout::{map_prefix_of_row, row_in, RowKeyBuilder};
use crate::keyed::meta::{check_same_declaration, KindRecord, StateKind};
use crate::keyed::KeyedStateBackend;
use crate::rocks::import::SstFile;
use crate::rocks::ingest::{sst_options, SstSink};
use crate::rocks::{RocksDbBackend, RocksOptions};
pub use crate::snapshot::format::SnapshotFormat;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;
use weir_common::job::spec::StateBackend;
use weir_common::state::keygroup::KeyGroupRange;

/// One downloaded snapshot a backend is restored from.
#[derive(Clone, Debug)]
pub struct RestoreSource {
    /// The directory holding the snapshot's files (consumed by the restore).
    pub dir: PathBuf,
    /// How the files are laid out.
    pub format: SnapshotFormat,
    /// The key groups the snapshot holds.
    pub key_group_range: KeyGroupRange,
}

/// The key groups whose rows to keep from `source`: every row of a snapshot of exactly `range` (it holds only
/// those, by construction — and the RocksDB fast path takes it whole too), else those in `range`.
fn keep(source: &RestoreSource, range: KeyGroupRange) -> Option<KeyGroupRange> {
    (source.key_group_range != range).then_some(range)
}

/// Opens a keyed backend in `work_dir`, restoring from a downloaded snapshot directory if given (one snapshot of
/// exactly `range`, in the backend's native format or canonical; the directory is consumed — a RocksDB snapshot
/// is moved into place, not copied). `rocks` tunes the RocksDB backend; its `clock`, if set, is the TTL clock of
/// either backend. [`open_keyed_backend_from`] restores from several snapshots of other ranges.
pub fn open_keyed_backend(
    kind: StateBackend,
    work_dir: &Path,
    max_parallelism: u32,
    range: KeyGroupRange,
    restore_dir: Option<&Path>,
    rocks: &RocksOptions,
) -> Result<Box<dyn KeyedStateBackend>, StateError> {
    let sources = restore_dir
        .map(|dir| RestoreSource {
            dir: dir.to_path_buf(),
            format: SnapshotFormat::detect(dir).unwrap_or(SnapshotFormat::native(kind)),
            key_group_range: range,
        })
        .into_iter()
        .collect();
    open_keyed_backend_from(kind, work_dir, max_parallelism, range, sources, rocks)
}

/// Opens a keyed backend in `work_dir` owning key groups `range`, restored from `sources` (every snapshot whose
/// range overlaps `range`; others are skipped): it holds exactly their rows whose key group lies in `range`.
/// `rocks` tunes the RocksDB backend; its `clock`, if set, is the TTL clock of either backend. See the module
/// docs for how; the sources' directories are consumed.
pub fn open_keyed_backend_from(
    kind: StateBackend,
    work_dir: &Path,
    max_parallelism: u32,
    range: KeyGroupRange,
    sources: Vec<RestoreSource>,
    rocks: &RocksOptions,
) -> Result<Box<dyn KeyedStateBackend>, StateError> {
    open_keyed_backend_reporting(kind, work_dir, max_parallelism, range, sources, rocks).map(|(b, _)| b)
}

/// How a keyed backend got its restored rows: what [`open_keyed_backend_reporting`] reports and the task
/// manager logs (`restore_path`) for each restored operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestorePath {
    /// No snapshot held any of the backend's key groups: it starts empty.
    Empty,
    /// One native RocksDB snapshot moved into place and opened (rows outside the range cut by range deletes).
    Open,
    /// Several native RocksDB snapshots merged by importing every state's SST files whole.
    Import,
    /// Several native RocksDB snapshots merged by import, with some state's rows copied (an import could not
    /// carry it exactly: range deletions from an earlier clip, say).
    ImportAndCopy,
    /// Rows copied through SST files into RocksDB: heap or canonical snapshots, or native ones none of whose
    /// files could be imported.
    Copy,
    /// Rows read into the heap backend.
    Load,
}

impl RestorePath {
    /// The name logged: `empty`, `open`, `import`, `import+copy`, `copy` or `load`.
    pub fn name(self) -> &'static str {
        match self {
            RestorePath::Empty => "empty",
            RestorePath::Open => "open",
            RestorePath::Import => "import",
            RestorePath::ImportAndCopy => "import+copy",
            RestorePath::Copy => "copy",
            RestorePath::Load => "load",
        }
    }

    /// The path of a restore into the heap backend (`heap`) or RocksDB from `natives` native RocksDB snapshots and
    /// `others` heap or canonical ones (those overlapping the range), having imported `imported_files` SST files
    /// and copied `copied_states` states of the native snapshots.
    pub fn of(heap: bool, natives: usize, others: usize, imported_files: usize, copied_states: usize) -> Self {
        if natives + others == 0 {
            return RestorePath::Empty;
        }
        if heap {
            return RestorePath::Load;
        }
        let copied = others > 0 || copied_states > 0;
        // Several native snapshots go through the import; with nothing copied it is an import even if every
        // state was empty (no file to import).
        let imported = natives > 1 && (imported_files > 0 || !copied);
        match (imported, copied) {
            (true, false) => RestorePath::Import,
            (true, true) => RestorePath::ImportAndCopy,
            (false, true) => RestorePath::Copy,
            (false, false) => RestorePath::Open,
        }
    }
}

impl std::fmt::Display for RestorePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a restore did: its path, the snapshots it read, the SST files it imported and the states it copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestoreReport {
    /// How the rows got there.
    pub path: RestorePath,
    /// Snapshots overlapping the range (others were skipped).
    pub sources: usize,
    /// SST files imported whole.
    pub imported_files: usize,
    /// States of native snapshots whose rows were copied instead.
    pub copied_states: usize,
}

/// [`open_keyed_backend_from`], also saying how the backend was restored.
pub fn open_keyed_backend_reporting(
    kind: StateBackend,
    work_dir: &Path,
    max_parallelism: u32,
    range: KeyGroupRange,
    sources: Vec<RestoreSource>,
    rocks: &RocksOptions,
) -> Result<(Box<dyn KeyedStateBackend>, RestoreReport), StateError> {
    let started = Instant::now();
    let count = sources.len();
    let mut overlapping = Vec::with_capacity(sources.len());
    for s in sources {
        match s.key_group_range.intersection(&range) {
            Some(_) => overlapping.push(s),
            None => tracing::debug!(dir = %s.dir.display(), source_range = ?s.key_group_range, range = ?range,
                "skipping a snapshot that holds none of the backend's key groups"),
        }
    }
    let natives = overlapping.iter().filter(|s| s.format == SnapshotFormat::Rocksdb).count();
    let others = overlapping.len() - natives;
    let heap = kind == StateBackend::Heap;
    let (backend, (imported_files, copied_states)): (Box<dyn KeyedStateBackend>, _) = match kind {
        StateBackend::Rocksdb | StateBackend::Unspecified => {
            let (db, counts) = restore_rocksdb(work_dir, max_parallelism, range, overlapping, rocks)?;
            (Box::new(db), counts)
        }
        StateBackend::Heap => {
            let mut b = restore_heap(max_parallelism, range, &overlapping)?;
            if let Some(clock) = &rocks.clock {
                b.set_clock(clock.clone());
            }
            (Box::new(b), (0, 0))
        }
    };
    if count > 1 {
        tracing::info!(backend = backend.kind(), range = ?range, sources = count,
            ms = started.elapsed().as_millis() as u64, "restored keyed state from several snapshots");
    }
    let path = RestorePath::of(heap, natives, others, imported_files, copied_states);
    Ok((backend, RestoreReport { path, sources: natives + others, imported_files, copied_states }))
}

/// The heap backend holding the rows of `sources` in `range`.
fn restore_heap(
    max_parallelism: u32,
    range: KeyGroupRange,
    sources: &[RestoreSource],
) -> Result<HeapBackend, StateError> {
    let mut b = HeapBackend::open(max_parallelism, range, None)?;
    for s in sources {
        let Some((file, magics)) = s.format.state_file() else {
            return Err(StateError::Restore(format!(
                "snapshot {} is a native RocksDB snapshot, which the heap backend cannot read; take a canonical \
                 savepoint to move from RocksDB to heap",
                s.dir.display()
            )));
        };
        b.load(&s.dir.join(file), magics, keep(s, range))?;
    }
    Ok(b)
}

/// The declarations seen so far, by state name: the kind record and the snapshot it came from.
#[derive(Default)]
struct Declarations(BTreeMap<String, (KindRecord, String)>);

impl Declarations {
    /// Records that snapshot `from` declares `name` as `record`; returns whether no earlier snapshot did.
    fn add(&mut self, name: &str, record: KindRecord, from: &Path) -> Result<bool, StateError> {
        let from = from.display().to_string();
        match self.0.get(name) {
            Some((first, first_from)) => {
                check_same_declaration(name, (first, first_from), (&record, &from))?;
                Ok(false)
            }
            None => {
                self.0.insert(name.to_string(), (record, from));
                Ok(true)
            }
        }
    }
}

/// A scratch directory removed when dropped (also when a restore fails half-way).
struct Scratch(PathBuf);

impl Scratch {
    fn create(path: PathBuf) -> Result<Self, StateError> {
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(|e| StateError::io(format!("clear {}", path.display()), e))?;
        }
        std::fs::create_dir_all(&path).map_err(|e| StateError::io(format!("create {}", path.display()), e))?;
        Ok(Scratch(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0) {
            tracing::warn!(dir = %self.0.display(), error = %e, "removing restore scratch space failed");
        }
    }
}

/// The RocksDB backend holding the rows of `sources` (all overlapping `range`) in `range`, with the SST files it
/// imported and the states of native snapshots it copied.
pub(crate) fn restore_rocksdb(
    work_dir: &Path,
    max_parallelism: u32,
    range: KeyGroupRange,
    sources: Vec<RestoreSource>,
    rocks: &RocksOptions,
) -> Result<(RocksDbBackend, (usize, usize)), StateError> {
    let (mut natives, others): (Vec<_>, Vec<_>) =
        sources.into_iter().partition(|s| s.format == SnapshotFormat::Rocksdb);
    let mut declared = Declarations::default();
    let scratch_dir = work_dir.join("rescale");
    // Removed when this returns (also on failure).
    let _scratch =
        if natives.len() > 1 || !others.is_empty() { Some(Scratch::create(scratch_dir.clone())?) } else { None };
    let (mut db, counts) = if natives.len() > 1 {
        import_rocksdb(work_dir, &scratch_dir, max_parallelism, range, natives, &mut declared, rocks)?
    } else if let Some(base) = natives.pop() {
        let db = RocksDbBackend::open(work_dir, max_parallelism, range, Some(&base.dir), rocks.clone())?;
        if base.key_group_range != range {
            db.clip(range)?;
        }
        (db, (0, 0))
    } else {
        (RocksDbBackend::open(work_dir, max_parallelism, range, None, rocks.clone())?, (0, 0))
    };
    for (i, source) in others.iter().enumerate() {
        let started = Instant::now();
        let rows = merge_state_file(&mut db, &mut declared, source, &scratch_dir.join(format!("file-{i}")), range)?;
        tracing::debug!(dir = %source.dir.display(), format = %source.format, rows,
            ms = started.elapsed().as_millis() as u64, "merged a snapshot into the restored database");
    }
    Ok((db, counts))
}

/// The RocksDB backend holding the rows of the native RocksDB snapshots `natives` in `range`, built in
/// `scratch`.
///
/// Each snapshot is opened (its ingest files applied), and each of its states' column families is *imported*
/// whole into a new database when that is exact — its rows all in SST files, no range deletion, every file within
/// the snapshot's key-group range (so files of different snapshots never overlap) —, else its rows within
/// `range` are copied through an SST file. Rows outside `range` that came along are then cut with range deletes.
/// Returns the backend, the SST files imported and the states copied.
fn import_rocksdb(
    work_dir: &Path,
    scratch: &Path,
    max_parallelism: u32,
    range: KeyGroupRange,
    natives: Vec<RestoreSource>,
    declared: &mut Declarations,
    rocks: &RocksOptions,
) -> Result<(RocksDbBackend, (usize, usize)), StateError> {
    let started = Instant::now();
    let row = RowKeyBuilder::new(max_parallelism);
    let mut opened = BTreeMap::new();
    let mut imports: BTreeMap<String, Vec<SstFile>> = BTreeMap::new();
    let mut records = BTreeMap::new();
    let mut copies = Vec::new();
    let mut cut = false;
    for (i, source) in natives.iter().enumerate() {
        let (lo, hi) = row.range_bounds(source.key_group_range);
        let inside = |files: &[SstFile]| files.iter().all(|f| f.smallest_key >= lo && f.largest_key < hi);
        let partial = source.key_group_range.intersection(&range) != Some(source.key_group_range);
        // Most snapshots import whole, read without opening them for writing; one that does not is opened as a
        // restore of its own (its ingest files applied), so that the states it cannot import can be copied.
        let snapshot = RocksDbBackend::read_snapshot_files(&source.dir, rocks)?;
        let (states, mut files) = if snapshot.files.values().all(|(files, exact)| *exact && inside(files)) {
            (snapshot.states, snapshot.files)
        } else {
            let src = RocksDbBackend::open(
                &scratch.join(i.to_string()),
                max_parallelism,
                source.key_group_range,
                Some(&source.dir),
                rocks.clone(),
            )?;
            let found = (src.stored_states()?, src.freeze_state_files()?);
            opened.insert(i, src);
            found
        };
        for (name, record) in states {
            declared.add(&name, record, &source.dir)?;
            records.insert(name.clone(), record);
            let Some((state_files, exact)) = files.remove(&name).filter(|(f, _)| !f.is_empty()) else { continue };
            if exact && inside(&state_files) {
                cut |= partial;
                imports.entry(name).or_default().extend(state_files);
            } else {
                tracing::debug!(dir = %source.dir.display(), state = %name, exact,
                    "copying a state's rows instead of importing its files");
                copies.push((i, name));
            }
        }
    }
    let imported = scratch.join("import");
    RocksDbBackend::create_imported(&imported, &imports, rocks)?;
    let mut db = RocksDbBackend::open(work_dir, max_parallelism, range, Some(&imported), rocks.clone())?;
    for (name, record) in &records {
        db.adopt_state(name, record)?;
    }
    let opts = sst_options();
    let mut copied = 0;
    for (j, (i, name)) in copies.iter().enumerate() {
        let part = natives[*i].key_group_range.intersection(&range).unwrap_or(range);
        let mut sink = SstSink::new(&opts, scratch.join(format!("copy-{j}.sst")));
        let src = opened.get(i).ok_or_else(|| StateError::Restore(format!("snapshot {i} was not opened")))?;
        src.scan(name, part, &mut |k, v| sink.put(k, v))?;
        copied += sink.rows();
        if let Some(path) = sink.finish()? {
            db.ingest_state_file(name, &path)?;
        }
    }
    if cut {
        db.clip(range)?;
    }
    let imported_files = imports.values().map(Vec::len).sum::<usize>();
    #[cfg(test)]
    LAST_IMPORT.with(|c| c.set((imported_files, copies.len())));
    tracing::debug!(
        snapshots = natives.len(),
        imported_files,
        copied_states = copies.len(),
        copied_rows = copied,
        ms = started.elapsed().as_millis() as u64,
        "merged native RocksDB snapshots"
    );
    Ok((db, (imported_files, copies.len())))
}

#[cfg(test)]
thread_local! {
    /// SST files imported and states copied by this thread's last [`import_rocksdb`] (tests).
    static LAST_IMPORT: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
}

/// Merges the rows of a heap or canonical snapshot within `range` into `db`, one SST file per state made in
/// `scratch`; returns how many rows (map entries) it merged.
fn merge_state_file(
    db: &mut RocksDbBackend,
    declared: &mut Declarations,
    source: &RestoreSource,
    scratch: &Path,
    range: KeyGroupRange,
) -> Result<u64, StateError> {
    let Some((file, magics)) = source.format.state_file() else { return Ok(0) };
    std::fs::create_dir_all(scratch).map_err(|e| StateError::io(format!("create {}", scratch.display()), e))?;
    let mut r = StateFileReader::open(&source.dir.join(file), magics)?;
    // Canonical rows come in RocksDB's order; a heap snapshot's come from hash maps and are sorted first.
    let sorted = source.format == SnapshotFormat::Canonical;
    let prefix_len = db.prefix_len();
    let keep = keep(source, range);
    let in_range = |key: &[u8]| row_in(key, prefix_len, keep);
    let opts = sst_options();
    let mut total = 0;
    let mut j = 0;
    while let Some(header) = r.next_state()? {
        let name = header.name.clone();
        if declared.add(&name, header.record, &source.dir)? {
            db.adopt_state(&name, &header.record)?;
        }
        let (kind, _, namespaced) = header.record;
        j += 1;
        let mut sink = SstSink::new(&opts, scratch.join(format!("merge-{j}.sst")));
        // RocksDB row keys of map entries: the prefix of the current map row, then the user key.
        let (mut prefix_of, mut prefix, mut row) = (Vec::new(), Vec::new(), Vec::new());
        let mut unsorted = SortBuffer::default();
        let mut put = |key_parts: &[&[u8]], v: &[u8]| -> Result<(), StateError> {
            if !sorted {
                unsorted.push(key_parts, v);
                return Ok(());
            }
            row.clear();
            for part in key_parts {
                row.extend_from_slice(part);
            }
            sink.put(&row, v)
        };
        r.rows(&mut |row_read| match row_read {
            Row::Value { key, value } if kind != StateKind::Map => {
                if in_range(key)? {
                    put(&[key], value)?;
                }
                Ok(())
            }
            Row::MapEntry { key, user_key, value } if kind == StateKind::Map => {
                if !in_range(key)? {
                    return Ok(());
                }
                if prefix_of != key {
                    map_prefix_of_row(key, prefix_len, namespaced, &mut prefix)?;
                    prefix_of.clear();
                    prefix_of.extend_from_slice(key);
                }
                put(&[&prefix, user_key], value)
            }
            _ => Err(StateError::Corrupt(format!(
                "{kind} state {name:?} in {} holds a row of another kind",
                source.dir.display()
            ))),
        })?;
        if !sorted {
            unsorted.sort();
            unsorted.for_each(&mut |k, v| sink.put(k, v))?;
        }
        total += sink.rows();
        if let Some(path) = sink.finish()? {
            db.ingest_state_file(&name, &path)?;
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyed::layout::row_key_group;
    use crate::keyed::meta::{StateDescriptor, StateOptions};
    use crate::keyed::ttl::{ManualClock, StateTtlConfig};
    use crate::keyed::{LocalSnapshot, StateId, StoredContent};
    use crate::snapshot::canonical::{write_canonical, CANONICAL_FILE};
    use crate::typed::handles::{
        set_namespace, AggregateFunction, AggregatingState, ListState, MapState, ReducingState, ValueState,
    };
    use std::collections::BTreeSet;
    use std::sync::Arc;
    use std::time::Duration;
    use weir_common::ids::{KeyGroup, SubtaskIndex};
    use weir_common::state::keygroup::key_group_for_key;

    /// The TTL clock of every backend: nothing written at T0 expires during a test.
    const T0: u64 = 1_000_000;
    /// Keys written: enough that every one of 256 key groups gets some.
    const KEYS: u64 = 3000;

    fn rocks_options() -> RocksOptions {
        // A small write-back cache, so some value rows reach RocksDB by flushes and others at the barrier.
        RocksOptions { cache_bytes: 16 << 10, clock: Some(Arc::new(ManualClock::new(T0))), ..Default::default() }
    }

    /// Keys of different lengths, so that map rows of RocksDB (length-prefixed keys) and of the heap sort
    /// differently.
    fn key(i: u64) -> Vec<u8> {
        i.to_string().into_bytes()
    }

    fn ttl() -> StateTtlConfig {
        StateTtlConfig::new(Duration::from_secs(3600))
    }

    struct Sum;

    impl AggregateFunction<u64, u64, u64> for Sum {
        fn create_accumulator(&self) -> u64 {
            0
        }
        fn add(&self, value: u64, acc: u64) -> u64 {
            acc + value
        }
        fn get_result(&self, acc: &u64) -> u64 {
            acc * 10
        }
    }

    /// The handles of every state the tests write: each kind, with and without TTL and namespaces.
    struct Handles {
        value: ValueState<u64>,
        list: ListState<u64>,
        map: MapState<u64, String>,
        reducing: ReducingState<u64>,
        aggregating: AggregatingState<u64, u64, u64>,
        ttl_value: ValueState<u64>,
        ttl_list: ListState<u64>,
        ttl_map: MapState<u64, u64>,
        ns_value: ValueState<u64>,
        ns_map: MapState<u64, u64>,
        ns_ttl_list: ListState<u64>,
        event_timers: StateId,
        processing_timers: StateId,
    }

    impl Handles {
        fn register(b: &mut dyn KeyedStateBackend) -> Self {
            let ns = StateOptions::default().namespaced();
            ValueState::<u64>::register(b, "declared-only").unwrap();
            Handles {
                value: ValueState::register(b, "value").unwrap(),
                list: ListState::register(b, "list").unwrap(),
                map: MapState::register(b, "map").unwrap(),
                reducing: ReducingState::register(b, "reducing", |a, x| a + x).unwrap(),
                aggregating: AggregatingState::register(b, "aggregating", Sum).unwrap(),
                ttl_value: ValueState::register(b, StateDescriptor::new("ttl-value").with_ttl(ttl())).unwrap(),
                ttl_list: ListState::register(b, StateDescriptor::new("ttl-list").with_ttl(ttl())).unwrap(),
                ttl_map: MapState::register(b, StateDescriptor::new("ttl-map").with_ttl(ttl())).unwrap(),
                ns_value: ValueState::register(b, StateDescriptor::new("ns-value").with_options(ns)).unwrap(),
                ns_map: MapState::register(b, StateDescriptor::new("ns-map").with_options(ns)).unwrap(),
                ns_ttl_list: ListState::register(
                    b,
                    StateDescriptor::new("ns-ttl-list").with_options(ns.with_ttl(ttl())),
                )
                .unwrap(),
                event_timers: b.register_state(crate::timers::EVENT_TIMERS, StateKind::Timers).unwrap(),
                processing_timers: b.register_state(crate::timers::PROCESSING_TIMERS, StateKind::Timers).unwrap(),
            }
        }

        fn write(&mut self, b: &mut dyn KeyedStateBackend, i: u64) {
            b.set_current_key(&key(i));
            self.value.update(b, &(i * 3)).unwrap();
            if !i.is_multiple_of(3) {
                // Two appends: RocksDB holds merge operands until compaction, the snapshot the merged list.
                self.list.add(b, &i).unwrap();
                self.list.add_all(b, &(1..i % 4 + 1).map(|j| i + j).collect::<Vec<_>>()).unwrap();
            }
            if i.is_multiple_of(2) {
                for j in 0..i % 5 + 1 {
                    self.map.put(b, &(j * 7), &format!("{i}-{j}")).unwrap();
                }
            }
            self.reducing.add(b, i).unwrap();
            self.reducing.add(b, 1).unwrap();
            self.aggregating.add(b, i).unwrap();
            self.aggregating.add(b, 2).unwrap();
            if i % 2 == 1 {
                self.ttl_value.update(b, &i).unwrap();
            }
            self.ttl_list.add(b, &i).unwrap();
            self.ttl_list.add(b, &(i + 1)).unwrap();
            self.ttl_map.put(b, &i, &(i * 2)).unwrap();
            for ns in 0..2u64 {
                set_namespace(b, &ns);
                self.ns_value.update(b, &(i + ns)).unwrap();
                self.ns_map.put(b, &ns, &i).unwrap();
                if i % 2 == ns {
                    self.ns_ttl_list.add(b, &i).unwrap();
                }
                b.add_timer(self.event_timers, event_timer(i, ns)).unwrap();
            }
            if i.is_multiple_of(5) {
                b.delete_timer(self.event_timers, event_timer(i, 1)).unwrap();
            }
            b.set_current_namespace(&[]);
            b.add_timer(self.processing_timers, -(i as i64)).unwrap();
        }

        /// What key `i` holds, through the handles.
        fn read(&mut self, b: &mut dyn KeyedStateBackend, i: u64) -> String {
            b.set_current_key(&key(i));
            let mut out = format!(
                "value {:?} list {:?} map {:?} reducing {:?} aggregating {:?} ttl {:?} {:?} {:?}",
                self.value.value(b).unwrap(),
                self.list.get(b).unwrap(),
                self.map.entries(b).unwrap(),
                self.reducing.get(b).unwrap(),
                self.aggregating.get(b).unwrap(),
                self.ttl_value.value(b).unwrap(),
                self.ttl_list.get(b).unwrap(),
                self.ttl_map.entries(b).unwrap(),
            );
            for ns in 0..2u64 {
                set_namespace(b, &ns);
                out += &format!(
                    " ns{ns} {:?} {:?} {:?}",
                    self.ns_value.value(b).unwrap(),
                    self.ns_map.entries(b).unwrap(),
                    self.ns_ttl_list.get(b).unwrap()
                );
            }
            out
        }
    }

    /// The event-time timer [`Handles::write`] sets for key `i` in namespace `ns` (removed again for ns 1 of
    /// every fifth key).
    fn event_timer(i: u64, ns: u64) -> i64 {
        (i * 10 + ns) as i64
    }

    /// Fires every timer of the backend (its key groups `range`) through a timer service and checks that they
    /// are exactly those [`Handles::write`] set for the keys of `range`, in timestamp order.
    fn check_timers(what: &str, b: &mut dyn KeyedStateBackend, m: u32, range: KeyGroupRange) {
        use crate::timers::{TimeDomain, TimerService};
        let owned: Vec<u64> = (0..KEYS).filter(|k| range.contains(key_group_for_key(&key(*k), m))).collect();
        let mut want: Vec<(i64, Vec<u8>)> = owned
            .iter()
            .flat_map(|&k| (0..2).filter(move |ns| k % 5 != 0 || *ns == 0).map(move |ns| (event_timer(k, ns), key(k))))
            .collect();
        want.sort();
        let mut service = TimerService::open(b, range).unwrap();
        assert_eq!(service.count(b, TimeDomain::EventTime).unwrap(), want.len() as u64, "{what}: timer count");
        let mut fired = Vec::new();
        while let Some(ts) = service.pop_due(b, TimeDomain::EventTime, i64::MAX).unwrap() {
            fired.push((ts, b.current_key_and_namespace().0.to_vec()));
        }
        assert!(fired == want, "{what}: {} timers fired, {} expected, in order", fired.len(), want.len());
        let mut processing = 0;
        while service.pop_due(b, TimeDomain::ProcessingTime, 0).unwrap().is_some() {
            processing += 1;
        }
        assert_eq!(processing, owned.len(), "{what}: processing-time timers");
    }

    /// What key `i` holds after [`Handles::write`].
    fn expected(i: u64) -> String {
        let list: Vec<u64> = if !i.is_multiple_of(3) { (0..i % 4 + 1).map(|j| i + j).collect() } else { vec![] };
        let map: Vec<(u64, String)> =
            if i.is_multiple_of(2) { (0..i % 5 + 1).map(|j| (j * 7, format!("{i}-{j}"))).collect() } else { vec![] };
        let mut out = format!(
            "value {:?} list {list:?} map {map:?} reducing {:?} aggregating {:?} ttl {:?} {:?} {:?}",
            Some(i * 3),
            Some(i + 1),
            Some((i + 2) * 10),
            (i % 2 == 1).then_some(i),
            vec![i, i + 1],
            vec![(i, i * 2)],
        );
        for ns in 0..2u64 {
            let ttl_list: Vec<u64> = if i % 2 == ns { vec![i] } else { vec![] };
            out += &format!(" ns{ns} {:?} {:?} {ttl_list:?}", Some(i + ns), vec![(ns, i)]);
        }
        out
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            assert!(entry.file_type().unwrap().is_file(), "snapshots are flat: {:?}", entry.path());
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }

    /// The native and canonical snapshots of `p` old subtasks of one backend kind, and what they stored.
    struct Old {
        native: Vec<RestoreSource>,
        canonical: Vec<RestoreSource>,
        stored: StoredContent,
    }

    /// Writes keys `0..KEYS` into `p` backends of `kind`, each the keys of its key groups, and snapshots them.
    fn old_subtasks(tmp: &Path, kind: StateBackend, m: u32, p: u32) -> Old {
        let rocks = rocks_options();
        let dir = tmp.join(format!("old-{}-{m}-{p}", SnapshotFormat::native(kind)));
        let mut old = Old { native: Vec::new(), canonical: Vec::new(), stored: StoredContent::default() };
        for i in 0..p {
            let range = KeyGroupRange::for_subtask(SubtaskIndex(i), p, m);
            let mut b = open_keyed_backend(kind, &dir.join(format!("w{i}")), m, range, None, &rocks).unwrap();
            let mut h = Handles::register(b.as_mut());
            for k in (0..KEYS).filter(|k| range.contains(key_group_for_key(&key(*k), m))) {
                h.write(b.as_mut(), k);
            }
            let mut snap = b.snapshot_sync(&dir.join(format!("native-{i}"))).unwrap();
            snap.ready_blocking().unwrap();
            let (records, rows) = b.stored();
            assert_eq!(records.len(), 14);
            old.stored.0 = records;
            old.stored.1.extend(rows);
            drop(b);
            let copy = dir.join(format!("copy-{i}"));
            copy_dir(&snap.dir, &copy);
            let native = LocalSnapshot {
                dir: copy,
                files: snap.files.clone(),
                backend: snap.backend,
                key_group_range: range,
                pending: None,
            };
            let canonical =
                write_canonical(native, &dir.join(format!("cw{i}")), &dir.join(format!("canonical-{i}")), m, &rocks)
                    .unwrap();
            assert_eq!(canonical.backend, "canonical");
            assert_eq!(canonical.files, [(CANONICAL_FILE.to_string(), canonical.files[0].1)]);
            let format = SnapshotFormat::from_name(snap.backend).unwrap();
            old.native.push(RestoreSource { dir: snap.dir, format, key_group_range: range });
            old.canonical.push(RestoreSource {
                dir: canonical.dir,
                format: SnapshotFormat::Canonical,
                key_group_range: range,
            });
        }
        let covered: BTreeSet<u32> =
            old.stored.1.iter().map(|r| row_key_group(&r.1, key_group_prefix_len(m)).unwrap()).collect();
        assert_eq!(covered.len(), m as usize, "every key group holds rows");
        old
    }

    fn key_group_prefix_len(m: u32) -> usize {
        weir_common::state::keygroup::key_group_prefix_len(m)
    }

    /// Restores `p_new` subtasks of `target` from `sources` (each given copies of exactly the sources that overlap
    /// its range) and checks that together they hold what the old subtasks stored, each only its key groups.
    fn restore_and_check(
        tmp: &Path,
        what: &str,
        target: StateBackend,
        (m, p_new): (u32, u32),
        old: &[RestoreSource],
        stored: &StoredContent,
        copy_expected: bool,
    ) -> Vec<RestoreSource> {
        let rocks = rocks_options();
        let mut snapshots = Vec::new();
        let dir = tmp.join(format!("new-{what}"));
        let mut union = BTreeSet::new();
        for j in 0..p_new {
            let range = KeyGroupRange::for_subtask(SubtaskIndex(j), p_new, m);
            let mut sources = Vec::new();
            for (i, s) in old.iter().enumerate().filter(|(_, s)| s.key_group_range.intersection(&range).is_some()) {
                let copy = dir.join(format!("src-{j}-{i}"));
                copy_dir(&s.dir, &copy);
                sources.push(RestoreSource { dir: copy, ..s.clone() });
            }
            let work = dir.join(format!("w{j}"));
            let natives = sources.iter().filter(|s| s.format == SnapshotFormat::Rocksdb).count();
            let others = sources.len() - natives;
            LAST_IMPORT.with(|c| c.set((0, 0)));
            let (mut b, report) = open_keyed_backend_reporting(target, &work, m, range, sources, &rocks)
                .unwrap_or_else(|e| panic!("{what}: subtask {j}: {e}"));
            let (imported, copied) = LAST_IMPORT.with(|c| c.get());
            if natives > 1 {
                match copy_expected {
                    false => assert!(
                        imported > 0 && copied == 0,
                        "{what}: subtask {j}: {imported} files imported, {copied} states copied"
                    ),
                    true => assert!(copied > 0, "{what}: subtask {j}: clipped snapshots are copied, not imported"),
                }
                assert_eq!((report.imported_files, report.copied_states), (imported, copied), "{what}: {report:?}");
            }
            // The path reported (and logged by the task manager) is the one taken.
            let path_ok = match (target, natives, others) {
                (StateBackend::Heap, _, _) => report.path == RestorePath::Load,
                (_, 0, 0) => report.path == RestorePath::Empty,
                (_, 1, 0) => report.path == RestorePath::Open,
                (_, _, 1..) => report.path == RestorePath::Copy || report.path == RestorePath::ImportAndCopy,
                (_, _, 0) if copy_expected => matches!(report.path, RestorePath::ImportAndCopy | RestorePath::Copy),
                (_, _, 0) => report.path == RestorePath::Import,
            };
            assert!(path_ok, "{what}: subtask {j}: {natives} native and {others} other sources: {report:?}");
            assert_eq!(report.sources, natives + others, "{what}: {report:?}");
            assert!(!work.join("rescale").exists(), "{what}: scratch space is removed");
            let (records, rows) = b.stored();
            assert_eq!(records, stored.0, "{what}: subtask {j} knows every state as declared");
            for row in &rows {
                let kg = row_key_group(&row.1, key_group_prefix_len(m)).unwrap();
                assert!(
                    range.contains(KeyGroup(kg)),
                    "{what}: subtask {j} {range:?} holds a row of key group {kg}: {row:?}"
                );
            }
            // The restored backend snapshots and restores as any other.
            let mut snap = b.snapshot_sync(&dir.join(format!("again-{j}"))).unwrap();
            snap.ready_blocking().unwrap();
            let copy = dir.join(format!("again-copy-{j}"));
            copy_dir(&snap.dir, &copy);
            snapshots.push(RestoreSource {
                dir: copy,
                format: SnapshotFormat::from_name(snap.backend).unwrap(),
                key_group_range: range,
            });
            if j == 0 {
                let mut again =
                    open_keyed_backend(target, &dir.join("again-w"), m, range, Some(&snap.dir), &rocks).unwrap();
                assert!(
                    again.stored() == (records.clone(), rows.clone()),
                    "{what}: a snapshot of the restored backend"
                );
            }
            union.extend(rows);
            // The restored states register again as declared and read what was written.
            let mut h = Handles::register(b.as_mut());
            let owned: Vec<u64> = (0..KEYS).filter(|k| range.contains(key_group_for_key(&key(*k), m))).collect();
            for &k in &owned {
                assert_eq!(h.read(b.as_mut(), k), expected(k), "{what}: subtask {j} key {k}");
            }
            let mut seen = 0;
            h.value
                .for_each(b.as_mut(), |_, _| {
                    seen += 1;
                    Ok(())
                })
                .unwrap();
            assert_eq!(seen, owned.len(), "{what}: subtask {j} iterates its keys");
            check_timers(&format!("{what}: subtask {j}"), b.as_mut(), m, range);
        }
        assert!(
            union == stored.1,
            "{what}: the new subtasks hold {} rows, the old ones {}",
            union.len(),
            stored.1.len()
        );
        snapshots
    }

    /// Rescales from `p_old` to `p_new` subtasks: both max parallelism prefix widths, every source format and
    /// both targets (RocksDB → heap only through canonical snapshots).
    fn rescale(p_old: u32, p_new: u32) {
        let tmp = tempfile::tempdir().unwrap();
        for m in [128u32, 256] {
            let from_rocks = old_subtasks(tmp.path(), StateBackend::Rocksdb, m, p_old);
            let from_heap = old_subtasks(tmp.path(), StateBackend::Heap, m, p_old);
            assert!(from_rocks.stored == from_heap.stored, "both backends store the same rows");
            for (a, b) in from_rocks.canonical.iter().zip(&from_heap.canonical) {
                let (a, b) = (
                    std::fs::read(a.dir.join(CANONICAL_FILE)).unwrap(),
                    std::fs::read(b.dir.join(CANONICAL_FILE)).unwrap(),
                );
                assert!(a == b, "m={m}: the canonical files of both backends are the same bytes");
            }
            let cases = [
                ("rocksdb", StateBackend::Rocksdb, &from_rocks.native),
                ("canonical-from-rocksdb", StateBackend::Rocksdb, &from_rocks.canonical),
                ("canonical-from-rocksdb", StateBackend::Heap, &from_rocks.canonical),
                ("heap", StateBackend::Rocksdb, &from_heap.native),
                ("heap", StateBackend::Heap, &from_heap.native),
                ("canonical-from-heap", StateBackend::Rocksdb, &from_heap.canonical),
                ("canonical-from-heap", StateBackend::Heap, &from_heap.canonical),
            ];
            for (source, target, sources) in cases {
                let what = format!("{p_old}->{p_new} m={m} {source} into {}", SnapshotFormat::native(target));
                restore_and_check(tmp.path(), &what, target, (m, p_new), sources, &from_rocks.stored, false);
            }
        }
    }

    #[test]
    fn rescale_3_to_5() {
        rescale(3, 5);
    }

    #[test]
    fn rescale_5_to_2() {
        rescale(5, 2);
    }

    #[test]
    fn rescale_2_to_4() {
        rescale(2, 4);
    }

    #[test]
    fn rescale_4_to_2() {
        rescale(4, 2);
    }

    #[test]
    fn rescale_1_to_3() {
        rescale(1, 3);
    }

    #[test]
    fn rescale_3_to_1() {
        rescale(3, 1);
    }

    /// 2 -> 3 -> 2 on RocksDB: the middle subtasks' databases were clipped with range deletions, which an
    /// import could not carry exactly, so the second restore copies those states; the rows stay exact.
    #[test]
    fn a_rescale_of_clipped_databases_copies_them() {
        let tmp = tempfile::tempdir().unwrap();
        let m = 128;
        let old = old_subtasks(tmp.path(), StateBackend::Rocksdb, m, 2);
        let rocks = StateBackend::Rocksdb;
        let middle = restore_and_check(tmp.path(), "2->3", rocks, (m, 3), &old.native, &old.stored, false);
        restore_and_check(tmp.path(), "3->2", rocks, (m, 2), &middle, &old.stored, true);
    }

    /// A second snapshot holds rows of the first one in its checkpoint files (an ingested file, whose rows carry
    /// sequence number 0) and newer values and deletions of the same keys in files it ingests on restore: merged
    /// by import, the newest version of every row wins.
    #[test]
    fn imported_snapshots_keep_the_newest_version_of_each_row() {
        let tmp = tempfile::tempdir().unwrap();
        let (m, keys) = (128u32, 2000u64);
        let rocks = rocks_options();
        let mut sources = Vec::new();
        for i in 0..2 {
            let range = KeyGroupRange::for_subtask(SubtaskIndex(i), 2, m);
            let dir = tmp.path().join(format!("old{i}"));
            let mut b = open_keyed_backend(StateBackend::Rocksdb, &dir.join("w"), m, range, None, &rocks).unwrap();
            let mut st = ValueState::<u64>::register(b.as_mut(), "v").unwrap();
            let mine: Vec<u64> = (0..keys).filter(|k| range.contains(key_group_for_key(&key(*k), m))).collect();
            for &k in &mine {
                b.set_current_key(&key(k));
                st.update(b.as_mut(), &k).unwrap();
            }
            let mut first = b.snapshot_sync(&dir.join("first")).unwrap();
            first.ready_blocking().unwrap();
            for &k in mine.iter().filter(|k| *k % 3 == 0) {
                b.set_current_key(&key(k));
                match k % 2 {
                    0 => st.clear(b.as_mut()).unwrap(),
                    _ => st.update(b.as_mut(), &(k * 10)).unwrap(),
                }
            }
            let mut second = b.snapshot_sync(&dir.join("second")).unwrap();
            second.ready_blocking().unwrap();
            assert!(
                second.dir.join(crate::rocks::ingest::INGEST_MANIFEST).exists(),
                "the newer rows are ingested on restore"
            );
            sources.push(RestoreSource { dir: second.dir, format: SnapshotFormat::Rocksdb, key_group_range: range });
        }
        let all = KeyGroupRange { start: 0, end: m - 1 };
        LAST_IMPORT.with(|c| c.set((0, 0)));
        let mut b =
            open_keyed_backend_from(StateBackend::Rocksdb, &tmp.path().join("new"), m, all, sources, &rocks).unwrap();
        let (imported, copied) = LAST_IMPORT.with(|c| c.get());
        assert!(imported >= 4 && copied == 0, "{imported} files imported, {copied} states copied");
        let st = ValueState::<u64>::register(b.as_mut(), "v").unwrap();
        for k in 0..keys {
            b.set_current_key(&key(k));
            let want = match (k % 3, k % 2) {
                (0, 0) => None,
                (0, _) => Some(k * 10),
                _ => Some(k),
            };
            assert_eq!(st.value(b.as_mut()).unwrap(), want, "key {k}");
        }
    }

    /// One backend of `kind` owning `range`, with `f` run on it, snapshotted into `dir`.
    fn snapshot_of(
        kind: StateBackend,
        dir: &Path,
        m: u32,
        range: KeyGroupRange,
        f: impl FnOnce(&mut dyn KeyedStateBackend),
    ) -> RestoreSource {
        let mut b = open_keyed_backend(kind, &dir.join("w"), m, range, None, &rocks_options()).unwrap();
        f(b.as_mut());
        let mut snap = b.snapshot_sync(&dir.join("snap")).unwrap();
        snap.ready_blocking().unwrap();
        RestoreSource { dir: snap.dir, format: SnapshotFormat::native(kind), key_group_range: range }
    }

    #[test]
    fn a_native_rocksdb_snapshot_is_refused_for_a_heap_target() {
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let source = snapshot_of(StateBackend::Rocksdb, &tmp.path().join("a"), 128, range, |b| {
            Handles::register(b).write(b, 1);
        });
        let want = "take a canonical savepoint to move from RocksDB to heap";
        let dir = source.dir.clone();
        match open_keyed_backend_from(
            StateBackend::Heap,
            &tmp.path().join("h"),
            128,
            range,
            vec![source],
            &rocks_options(),
        ) {
            Err(StateError::Restore(e)) => assert!(e.contains(want) && e.contains(&dir.display().to_string()), "{e}"),
            Err(e) => panic!("expected a restore error, got {e}"),
            Ok(_) => panic!("a heap backend restored a native RocksDB snapshot"),
        }
        // The single-directory open tells the format from the files.
        let e = open_keyed_backend(StateBackend::Heap, &tmp.path().join("h"), 128, range, Some(&dir), &rocks_options())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(want), "{e}");
    }

    #[test]
    fn sources_declaring_a_state_differently_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let m = 128;
        let halves = [KeyGroupRange { start: 0, end: 63 }, KeyGroupRange { start: 64, end: 127 }];
        let others = [
            ("list state", StateKind::List, StateOptions::default()),
            ("with TTL", StateKind::Value, StateOptions::default().with_ttl(ttl())),
            ("namespaced", StateKind::Value, StateOptions::default().namespaced()),
        ];
        for (n, (other, kind, options)) in others.into_iter().enumerate() {
            for source_kind in [StateBackend::Rocksdb, StateBackend::Heap] {
                let dir = tmp.path().join(format!("{n}-{}", SnapshotFormat::native(source_kind)));
                let first = snapshot_of(source_kind, &dir.join("0"), m, halves[0], |b| {
                    b.register_state("s", StateKind::Value).unwrap();
                });
                let second = snapshot_of(source_kind, &dir.join("1"), m, halves[1], |b| {
                    b.register_state_with_options("s", kind, &options).unwrap();
                });
                let targets: &[StateBackend] = match source_kind {
                    StateBackend::Rocksdb | StateBackend::Unspecified => &[StateBackend::Rocksdb],
                    StateBackend::Heap => &[StateBackend::Rocksdb, StateBackend::Heap],
                };
                for &target in targets {
                    let mut sources = Vec::new();
                    for (i, s) in [&first, &second].into_iter().enumerate() {
                        let copy = dir.join(format!("copy-{}-{i}", SnapshotFormat::native(target)));
                        copy_dir(&s.dir, &copy);
                        sources.push(RestoreSource { dir: copy, ..s.clone() });
                    }
                    let (a, b) = (sources[0].dir.display().to_string(), sources[1].dir.display().to_string());
                    let work = dir.join(format!("w-{}", SnapshotFormat::native(target)));
                    let all = KeyGroupRange { start: 0, end: m - 1 };
                    match open_keyed_backend_from(target, &work, m, all, sources, &rocks_options()) {
                        Err(StateError::Declaration { name, message }) => {
                            assert_eq!(name, "s");
                            assert!(message.contains(&a) && message.contains(&b), "{other}: {message}");
                            assert!(message.contains("declare it differently"), "{other}: {message}");
                        }
                        Err(e) => panic!("{other}: expected a declaration error, got {e}"),
                        Ok(_) => panic!("{other}: {source_kind:?} into {target:?} restored conflicting declarations"),
                    }
                }
            }
        }
    }

    #[test]
    fn the_ttl_of_merged_states_reaches_the_compaction_filter_before_registration() {
        let tmp = tempfile::tempdir().unwrap();
        let m = 128;
        let halves = [KeyGroupRange { start: 0, end: 63 }, KeyGroupRange { start: 64, end: 127 }];
        let keys_of =
            |range: KeyGroupRange| (0..500u64).filter(move |k| range.contains(key_group_for_key(&key(*k), m)));
        // The base (first of equal overlaps) lacks the TTL state; only the merged snapshot declares it.
        let base = snapshot_of(StateBackend::Rocksdb, &tmp.path().join("0"), m, halves[0], |b| {
            let mut v = ValueState::<u64>::register(b, "plain").unwrap();
            for k in keys_of(halves[0]) {
                b.set_current_key(&key(k));
                v.update(b, &k).unwrap();
            }
        });
        let merged = snapshot_of(StateBackend::Rocksdb, &tmp.path().join("1"), m, halves[1], |b| {
            let mut v = ValueState::<u64>::register(b, StateDescriptor::new("t").with_ttl(ttl())).unwrap();
            for k in keys_of(halves[1]) {
                b.set_current_key(&key(k));
                v.update(b, &k).unwrap();
            }
        });
        let clock = Arc::new(ManualClock::new(T0));
        let rocks = RocksOptions { clock: Some(clock.clone()), ..rocks_options() };
        let all = KeyGroupRange { start: 0, end: m - 1 };
        let mut db = restore_rocksdb(&tmp.path().join("w"), m, all, vec![base, merged], &rocks).unwrap().0;
        let rows = keys_of(halves[1]).count();
        assert!(rows > 100);
        db.compact_state("t");
        assert_eq!(db.row_count("t"), rows, "nothing expired yet");
        clock.advance(Duration::from_secs(3600));
        db.compact_state("t");
        db.compact_state("plain");
        assert_eq!(db.row_count("t"), 0, "the filter dropped the expired rows");
        assert_eq!(db.row_count("plain"), keys_of(halves[0]).count());
        ValueState::<u64>::register(&mut db, StateDescriptor::new("t").with_ttl(ttl())).unwrap();
    }

    #[test]
    fn a_single_snapshot_of_the_range_is_moved_into_place() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 63 };
        let source = snapshot_of(StateBackend::Rocksdb, &tmp.path().join("a"), 128, range, |b| {
            let mut h = Handles::register(b);
            for k in 0..2000 {
                h.write(b, k);
            }
            // Flushed, so the checkpoint has SST files of its own besides the ingested ones.
            b.snapshot_sync(&tmp.path().join("first")).unwrap().ready_blocking().unwrap();
        });
        let inodes = |dir: &Path| -> BTreeMap<String, u64> {
            std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap())
                .filter(|e| e.file_name().to_string_lossy().ends_with(".sst"))
                .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().ino()))
                .collect()
        };
        let before = inodes(&source.dir);
        assert!(!before.is_empty());
        let dir = source.dir.clone();
        let work = tmp.path().join("w");
        let mut b =
            open_keyed_backend_from(StateBackend::Rocksdb, &work, 128, range, vec![source], &rocks_options()).unwrap();
        assert!(!dir.exists(), "the snapshot was moved");
        // The opened database may have compacted some files away already; those left are the same files.
        let after = inodes(&work.join("db"));
        let kept: Vec<_> = before.iter().filter_map(|(name, ino)| after.get(name).map(|a| (a, ino))).collect();
        assert!(!kept.is_empty() && kept.iter().all(|(a, b)| a == b), "its files were not copied");
        let mut h = Handles::register(b.as_mut());
        for k in (0..2000).filter(|k| range.contains(key_group_for_key(&key(*k), 128))) {
            assert_eq!(h.read(b.as_mut(), k), expected(k));
        }
    }

    #[test]
    fn a_canonical_directory_opens_as_a_single_snapshot() {
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let mut b =
            open_keyed_backend(StateBackend::Heap, &tmp.path().join("w"), 128, range, None, &rocks_options()).unwrap();
        let mut h = Handles::register(b.as_mut());
        for k in 0..300 {
            h.write(b.as_mut(), k);
        }
        let snap = b.snapshot_sync(&tmp.path().join("native")).unwrap();
        let canonical =
            write_canonical(snap, &tmp.path().join("cw"), &tmp.path().join("canonical"), 128, &rocks_options())
                .unwrap();
        for kind in [StateBackend::Rocksdb, StateBackend::Heap] {
            let copy = tmp.path().join(format!("copy-{}", SnapshotFormat::native(kind)));
            copy_dir(&canonical.dir, &copy);
            assert_eq!(SnapshotFormat::detect(&copy), Some(SnapshotFormat::Canonical));
            let work = tmp.path().join(format!("r-{}", SnapshotFormat::native(kind)));
            let mut r = open_keyed_backend(kind, &work, 128, range, Some(&copy), &rocks_options()).unwrap();
            let mut h = Handles::register(r.as_mut());
            for k in 0..300 {
                assert_eq!(h.read(r.as_mut(), k), expected(k), "{kind:?} key {k}");
            }
        }
    }

    /// The restore path follows from the sources and what the import did: one native snapshot is opened,
    /// several are imported (and copied where an import cannot carry a state), other formats are copied into
    /// RocksDB and loaded into the heap.
    #[test]
    fn restore_paths_are_named_by_what_the_restore_did() {
        use RestorePath::*;
        // (heap, natives, others, imported files, copied states) -> path
        let cases = [
            ((false, 0, 0, 0, 0), Empty),
            ((true, 0, 0, 0, 0), Empty),
            ((true, 0, 2, 0, 0), Load),
            ((true, 1, 0, 0, 0), Load),
            ((false, 1, 0, 0, 0), Open),
            ((false, 3, 0, 12, 0), Import),
            ((false, 3, 0, 0, 0), Import),
            ((false, 3, 0, 5, 2), ImportAndCopy),
            ((false, 3, 0, 0, 4), Copy),
            ((false, 0, 2, 0, 0), Copy),
            ((false, 1, 1, 0, 0), Copy),
            ((false, 2, 1, 7, 0), ImportAndCopy),
        ];
        for ((heap, natives, others, files, copied), want) in cases {
            assert_eq!(
                RestorePath::of(heap, natives, others, files, copied),
                want,
                "{heap} {natives} {others} {files} {copied}"
            );
        }
        let names: BTreeSet<&str> = [Empty, Open, Import, ImportAndCopy, Copy, Load].iter().map(|p| p.name()).collect();
        assert_eq!(names.len(), 6, "every path has a name of its own");
        assert_eq!(Import.to_string(), "import");
    }
}
