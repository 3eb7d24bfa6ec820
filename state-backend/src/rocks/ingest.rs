//! The short synchronous checkpoint of the RocksDB backend.
//!
//! A RocksDB checkpoint must flush the memtable, and the write-back cache must reach RocksDB first: written
//! through the memtable at the barrier, 100k dirty rows of 100 bytes cost ~120 ms of task pause. Instead, at
//! the barrier the backend *freezes* the dirty rows — copies them into one buffer (`FrozenRows`, ~1-6 ms
//! for 100k rows) and marks them clean in the cache — and checkpoints the database as it is, without them
//! (with nothing in the memtable, that is hard links only). A background thread (`Background`) then sorts
//! the frozen rows of each state into an SST file (with `SstFileWriter`) that belongs to the snapshot, and
//! ingests a hard link of the same file into the live database. The snapshot's files are the checkpoint's plus
//! these SSTs and a manifest ([`INGEST_MANIFEST`]) naming each SST's column family; a restore opens the
//! checkpoint and ingests them (they are newer than everything in it).
//!
//! The live database only gets the frozen rows when the ingestion is done, so the task thread settles the
//! background work (joins it) before anything that writes a value column family, drops cached rows or takes
//! the next snapshot. Ingestion gives the file a sequence number newer than everything in the database, which
//! is right because nothing wrote those column families since the barrier. If the thread fails (or panics),
//! settling writes the frozen rows through a write batch instead: nothing is lost, and rewriting rows that were
//! ingested already is harmless.
//!
//! After ingestion the live file *is* the snapshot's SST (a hard link; RocksDB does not rewrite ingested files),
//! so the snapshot names the SST after the live file: the next incremental checkpoint finds it among the files
//! the completed one uploaded and does not upload it again.

use crate::error::StateError;
use crate::keyed::PendingFiles;
use crate::timers::set::TimerSetSnapshot;
use rocksdb::{IngestExternalFileOptions, Options, SstFileWriter, DB};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use tokio::sync::oneshot;

/// The snapshot file naming the SSTs a restore ingests after opening the checkpoint.
pub const INGEST_MANIFEST: &str = "WEIR-INGEST";

/// A value length marking a deleted row.
const DELETED: u32 = u32::MAX;

/// The dirty rows of one column family at a barrier.
#[derive(Default)]
pub(crate) struct FrozenRows {
    /// Column family name.
    pub(crate) column_family: String,
    /// Timer rows not in the live database yet (`RocksDbBackend`'s pending timers): the snapshot's file holds
    /// them, the live database does not ingest it — they stay pending in memory.
    timers: Option<TimerSetSnapshot>,
    arena: Vec<u8>,
    /// Offset of the key in `arena`, key length, value length (or [`DELETED`]); the value follows the key.
    rows: Vec<(usize, u32, u32)>,
}

impl FrozenRows {
    /// An empty set for `column_family`.
    pub(crate) fn new(column_family: String) -> Self {
        FrozenRows { column_family, ..Default::default() }
    }

    /// The pending timer rows of `column_family`, for the snapshot only.
    pub(crate) fn pending_timers(column_family: String, rows: TimerSetSnapshot) -> Self {
        FrozenRows { column_family, timers: Some(rows), ..Default::default() }
    }

    /// Whether the live database gets these rows too (all but pending timers).
    pub(crate) fn live(&self) -> bool {
        self.timers.is_none()
    }

    /// Adds a row (`None`: deleted).
    pub(crate) fn push(&mut self, key: &[u8], value: Option<&[u8]>) {
        let off = self.arena.len();
        self.arena.extend_from_slice(key);
        let len = match value {
            Some(v) => {
                self.arena.extend_from_slice(v);
                v.len() as u32
            }
            None => DELETED,
        };
        self.rows.push((off, key.len() as u32, len));
    }

    /// Whether no row was frozen.
    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty() && self.timers.as_ref().is_none_or(|t| t.len() == 0)
    }

    fn row(&self, i: usize) -> (&[u8], Option<&[u8]>) {
        let (off, klen, vlen) = self.rows[i];
        let key = &self.arena[off..off + klen as usize];
        let value = (vlen != DELETED).then(|| &self.arena[off + klen as usize..off + klen as usize + vlen as usize]);
        (key, value)
    }

    /// Every row, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> + '_ {
        (0..self.rows.len()).map(|i| self.row(i))
    }

    /// Writes the rows, sorted by key, into a new SST file at `path`; returns its size and its smallest and
    /// largest keys.
    fn write_sst(&self, path: &Path) -> Result<(u64, Option<KeyBounds>), StateError> {
        if let Some(timers) = &self.timers {
            // In order already; the bounds are taken on the way.
            let (mut first, mut last): (Option<&[u8]>, Option<&[u8]>) = (None, None);
            let rows = timers.iter().inspect(|r| {
                first.get_or_insert(r);
                last = Some(r);
            });
            let size = write_sst(path, rows.map(|r| (r, Some(&[][..]))))?;
            return Ok((size, first.zip(last).map(|(a, b)| (a.to_vec(), b.to_vec()))));
        }
        let mut order: Vec<u32> = (0..self.rows.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| self.row(a as usize).0.cmp(self.row(b as usize).0));
        let bounds = match (order.first(), order.last()) {
            (Some(&first), Some(&last)) => {
                Some((self.row(first as usize).0.to_vec(), self.row(last as usize).0.to_vec()))
            }
            _ => None,
        };
        Ok((write_sst(path, order.into_iter().map(|i| self.row(i as usize)))?, bounds))
    }
}

/// Options of every SST file the backend writes for ingestion.
pub(crate) fn sst_options() -> Options {
    let mut opts = Options::default();
    opts.set_compression_type(rocksdb::DBCompressionType::Lz4);
    // The column families' own table format: without their Bloom filter, a point read of an absent row (a new
    // window slice, a key not seen yet) reads a data block of every ingested file whose key range covers it —
    // and a flush's file covers every key group of the subtask.
    opts.set_block_based_table_factory(&table_options(None));
    opts
}

/// The table format of every SST file of the backend, the column families' and those written for ingestion:
/// a whole-key Bloom filter (10 bits per key), so that point reads of absent rows — a timer registered for the
/// first time, a new window slice, a key not seen yet — read no data block; the shared block cache, if any.
pub(crate) fn table_options(block_cache: Option<&rocksdb::Cache>) -> rocksdb::BlockBasedOptions {
    let mut table = rocksdb::BlockBasedOptions::default();
    if let Some(cache) = block_cache {
        table.set_block_cache(cache);
    }
    table.set_bloom_filter(10.0, false);
    table
}

/// An SST file being written from rows in ascending key order; the file is only created with the first row
/// (RocksDB refuses to finish an empty one).
pub(crate) struct SstSink<'o> {
    writer: SstFileWriter<'o>,
    path: PathBuf,
    rows: u64,
}

impl<'o> SstSink<'o> {
    /// A sink that writes `path` with `opts` (from [`sst_options`]).
    pub(crate) fn new(opts: &'o Options, path: PathBuf) -> Self {
        SstSink { writer: SstFileWriter::create(opts), path, rows: 0 }
    }

    /// Adds a row; keys must come in strictly ascending order.
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        if self.rows == 0 {
            self.writer.open(&self.path)?;
        }
        self.writer.put(key, value)?;
        self.rows += 1;
        Ok(())
    }

    /// Rows added so far.
    pub(crate) fn rows(&self) -> u64 {
        self.rows
    }

    /// Finishes the file; returns its path, or `None` if no row was added (and no file made).
    pub(crate) fn finish(mut self) -> Result<Option<PathBuf>, StateError> {
        if self.rows == 0 {
            return Ok(None);
        }
        self.writer.finish()?;
        Ok(Some(self.path))
    }
}

/// Writes rows sorted by key (`None`: deleted) into a new SST file at `path`; returns its size.
pub(crate) fn write_sst<'a>(
    path: &Path,
    rows: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>,
) -> Result<u64, StateError> {
    let opts = sst_options();
    let mut w = SstFileWriter::create(&opts);
    w.open(path)?;
    for row in rows {
        match row {
            (k, Some(v)) => w.put(k, v)?,
            (k, None) => w.delete(k)?,
        }
    }
    w.finish()?;
    Ok(w.file_size())
}

/// The smallest and largest row key of an SST file.
pub(crate) type KeyBounds = (Vec<u8>, Vec<u8>);

/// One SST of a snapshot to ingest on restore.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct IngestEntry {
    /// File name inside the snapshot.
    pub(crate) file: String,
    /// Column family it belongs to.
    pub(crate) column_family: String,
    /// Its smallest and largest row key, which a rescaled restore checks before importing the file (absent in
    /// snapshots of earlier versions, whose files it then copies row by row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) keys: Option<KeyBounds>,
}

/// The content of [`INGEST_MANIFEST`].
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct IngestManifest {
    /// The SSTs, in the order to ingest them.
    pub(crate) files: Vec<IngestEntry>,
}

/// Options of every ingestion: the file is hard-linked in, and RocksDB removes the link it was given.
fn ingest_options() -> IngestExternalFileOptions {
    let mut o = IngestExternalFileOptions::default();
    o.set_move_files(true);
    o
}

/// Ingests `path` (moved) into `column_family`.
pub(crate) fn ingest(db: &DB, column_family: &str, path: &Path) -> Result<(), StateError> {
    let cf = db
        .cf_handle(column_family)
        .ok_or_else(|| StateError::Corrupt(format!("no column family {column_family:?} to ingest into")))?;
    db.ingest_external_file_cf_opts(cf, &ingest_options(), vec![path])?;
    Ok(())
}

/// The live file of `column_family` that is the same file (inode) as `path`, if any.
fn live_name_of(db: &DB, column_family: &str, path: &Path) -> Option<String> {
    let ino = std::fs::metadata(path).ok()?.ino();
    let db_dir = db.path().to_path_buf();
    db.live_files().ok()?.into_iter().filter(|f| f.column_family_name == column_family).find_map(|f| {
        let name = f.name.trim_start_matches('/').to_string();
        (std::fs::metadata(db_dir.join(&name)).ok()?.ino() == ino).then_some(name)
    })
}

/// The background half of a snapshot: writes and ingests the frozen rows.
pub(crate) struct Background {
    handle: JoinHandle<bool>,
    frozen: Arc<Vec<FrozenRows>>,
}

impl Background {
    /// Starts writing `frozen` into `snapshot_dir` (files named after `tag`, unique to the backend instance and
    /// snapshot: a file not ingested keeps that name, and incremental snapshots reuse files by name) and
    /// ingesting them into `db` through
    /// hard links made in `link_dir`; the snapshot's extra files are sent on the returned channel.
    pub(crate) fn spawn(
        db: Arc<DB>,
        frozen: Arc<Vec<FrozenRows>>,
        snapshot_dir: PathBuf,
        link_dir: PathBuf,
        tag: String,
        fail_for_test: bool,
    ) -> Result<(Self, PendingFiles), StateError> {
        let (tx, rx) = oneshot::channel();
        let rows = frozen.clone();
        let handle = std::thread::Builder::new()
            .name("weir-snapshot-sst".into())
            .spawn(move || {
                let (files, ingested) =
                    match write_and_ingest(&db, &rows, &snapshot_dir, &link_dir, &tag, fail_for_test) {
                        Ok((files, ingested)) => (Ok(files), ingested),
                        Err(e) => (Err(e), false),
                    };
                let _ = tx.send(files);
                ingested
            })
            .map_err(|e| StateError::io("start the snapshot SST writer", e))?;
        Ok((Background { handle, frozen }, PendingFiles(rx)))
    }

    /// Waits for the thread; returns the frozen rows if the live database may lack them (to be written again).
    pub(crate) fn settle(self) -> Option<Arc<Vec<FrozenRows>>> {
        match self.handle.join() {
            Ok(true) => None,
            Ok(false) => Some(self.frozen),
            Err(_) => {
                tracing::error!("snapshot SST writer panicked; writing its rows through a batch");
                Some(self.frozen)
            }
        }
    }
}

/// Writes one SST per column family, ingests each live one (until one ingestion fails), writes the manifest;
/// returns the snapshot's files and whether every live SST was ingested.
fn write_and_ingest(
    db: &DB,
    frozen: &[FrozenRows],
    snapshot_dir: &Path,
    link_dir: &Path,
    tag: &str,
    fail_for_test: bool,
) -> Result<(Vec<(String, u64)>, bool), StateError> {
    if fail_for_test {
        return Err(StateError::Corrupt("SST writer failure injected by a test".to_string()));
    }
    std::fs::create_dir_all(link_dir).map_err(|e| StateError::io(format!("create {}", link_dir.display()), e))?;
    let mut manifest = IngestManifest::default();
    let mut files = Vec::with_capacity(frozen.len() + 1);
    let mut ingested = true;
    for (i, rows) in frozen.iter().enumerate() {
        let name = format!("ingest-{tag}-{i}.sst");
        let path = snapshot_dir.join(&name);
        let (size, keys) = rows.write_sst(&path)?;
        let mut final_name = name.clone();
        if ingested && rows.live() {
            let link = link_dir.join(&name);
            let _ = std::fs::remove_file(&link);
            let result = std::fs::hard_link(&path, &link)
                .map_err(|e| StateError::io(format!("link {}", link.display()), e))
                .and_then(|()| ingest(db, &rows.column_family, &link));
            match result {
                Ok(()) => {
                    if let Some(live) = live_name_of(db, &rows.column_family, &path) {
                        let renamed = snapshot_dir.join(&live);
                        std::fs::rename(&path, &renamed)
                            .map_err(|e| StateError::io(format!("rename {}", path.display()), e))?;
                        final_name = live;
                    }
                }
                Err(e) => {
                    tracing::warn!(column_family = %rows.column_family, error = %e, "ingesting snapshot rows failed");
                    let _ = std::fs::remove_file(&link);
                    ingested = false;
                }
            }
        }
        manifest.files.push(IngestEntry { file: final_name.clone(), column_family: rows.column_family.clone(), keys });
        files.push((final_name, size));
    }
    let json = serde_json::to_vec(&manifest).map_err(|e| StateError::Corrupt(e.to_string()))?;
    let path = snapshot_dir.join(INGEST_MANIFEST);
    std::fs::write(&path, &json).map_err(|e| StateError::io(format!("write {}", path.display()), e))?;
    files.push((INGEST_MANIFEST.to_string(), json.len() as u64));
    Ok((files, ingested))
}

/// The SSTs a snapshot in `dir` ingests on restore, in order (none without a manifest).
pub(crate) fn read_manifest(dir: &Path) -> Result<Vec<IngestEntry>, StateError> {
    let manifest_path = dir.join(INGEST_MANIFEST);
    let bytes = match std::fs::read(&manifest_path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StateError::io(format!("read {}", manifest_path.display()), e)),
    };
    let manifest: IngestManifest = serde_json::from_slice(&bytes)
        .map_err(|e| StateError::Corrupt(format!("snapshot file {INGEST_MANIFEST}: {e}")))?;
    for entry in &manifest.files {
        if entry.file.contains('/') || entry.file.starts_with('.') {
            return Err(StateError::Corrupt(format!("snapshot file {INGEST_MANIFEST} names {:?}", entry.file)));
        }
    }
    Ok(manifest.files)
}

/// Moves a restored snapshot's SSTs to ingest (and its manifest) out of the database directory `db_dir` into
/// `aside`, before the database is opened; returns what to ingest, in order.
pub(crate) fn set_aside(db_dir: &Path, aside: &Path) -> Result<Vec<IngestEntry>, StateError> {
    let files = read_manifest(db_dir)?;
    let manifest_path = db_dir.join(INGEST_MANIFEST);
    if !manifest_path.exists() {
        return Ok(files);
    }
    std::fs::create_dir_all(aside).map_err(|e| StateError::io(format!("create {}", aside.display()), e))?;
    for entry in &files {
        let (from, to) = (db_dir.join(&entry.file), aside.join(&entry.file));
        std::fs::rename(&from, &to)
            .map_err(|e| StateError::io(format!("snapshot file {} listed in {INGEST_MANIFEST}", entry.file), e))?;
    }
    std::fs::remove_file(&manifest_path)
        .map_err(|e| StateError::io(format!("remove {}", manifest_path.display()), e))?;
    Ok(files)
}
