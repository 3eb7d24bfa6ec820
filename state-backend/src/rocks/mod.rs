//! The RocksDB keyed backend: one column family `state.<name>` per state, and a write-back cache in front of
//! RocksDB for the value rows, so that hot keys cost a hash lookup, not a RocksDB read and write. When the cache
//! grows past its byte budget its dirty rows are written as a sorted SST per state and ingested; at a snapshot
//! they are frozen and written in the background (see [`crate::rocks::ingest`]).
//!
//! ## Row layout
//!
//! `kg` is the key group, big-endian (1 byte if max parallelism ≤ 128, else 2); `key` the serialized key.
//!
//! | kind | row key | row value |
//! |---|---|---|
//! | value, reducing, aggregating | `kg \| key` | the serialized value (accumulator) |
//! | list | `kg \| key` | elements, each a little-endian `u32` length + bytes |
//! | map | `kg \| u32 BE len(key) \| key \| user key` | the serialized value |
//!
//! Lists are appended with a RocksDB merge operator (`weir.list-concat`, set on every column family) whose
//! merge is a plain concatenation, so an append never reads the list. Their total size is still checked against
//! the value-size limit: the write-back cache of a list state holds each touched key's list length (clean rows
//! only, never written), read once from RocksDB when the key is first appended to.
//!
//! A map row length-prefixes the key so that the rows of key `ab` (user key `c…`) and of key `abc` can never
//! share a prefix; the entries of one key are the interval starting at `kg | len | key`, iterated by seek.
//!
//! A state declared with namespaces (window and timer state, [`StateOptions::namespaced`]) scopes each row to
//! the backend's current namespace `ns`: value and list rows are `kg | key | ns | u32 BE len(ns)` (read from
//! the end, a row splits into key and namespace unambiguously), map rows
//! `kg | u32 BE len(key) | key | u32 BE len(ns) | ns | user key`. Whether a state has namespaces is stored
//! with its kind, so the layout cannot change under it.
//!
//! Every state's kind is stored in the default column family (row `weir.kind.<name>`, one byte), so the kind is
//! checked again when the state is registered after a restore; a column family without that row predates
//! kinds and is a value state. A state with TTL stores a kind record with its TTL config there instead (see
//! [`crate::keyed::ttl`]); rows of TTL states carry an 8-byte timestamp before each value, list element and map value.
//!
//! ## Restore
//!
//! [`RocksDbBackend::open`] moves one snapshot into place (a rename, no copy) and ingests the SSTs its
//! [`crate::rocks::ingest::INGEST_MANIFEST`] names. Restoring from several snapshots, clipped to a key-group range, is
//! `restore/rescale.rs`: the largest native snapshot opened this way, cut with range deletes, the others merged
//! through SST ingestion (`clip`, `adopt_state`, `scan` and `ingest_state_file` here).
//!
//! ## TTL compaction filter
//!
//! Every state column family gets a compaction filter factory (`weir.ttl-filter-factory`) and periodic
//! compaction every [`DEFAULT_PERIODIC_COMPACTION_SECS`] (so that cold files are filtered too; changed with
//! [`RocksDbBackend::set_periodic_compaction_seconds`]). States without TTL keep their rows: their filter keeps
//! everything. A RocksDB snapshot is a checkpoint of the files, so it may hold expired rows; they are never
//! returned and are dropped by the next read or compaction. Each compaction's
//! filter looks up the TTL config of its state by name in a registry the backend fills from the kind rows right
//! after opening (so also after a restore, before the state is registered again) and on every registration;
//! a state without TTL keeps every row. The filter drops value and map rows whose timestamp expired and list rows
//! whose every element expired (a partly expired list is trimmed when it is read: RocksDB's filter API here can
//! only keep or drop a row); it reads the clock once per 1000 rows.
//!
//! ## Modules
//!
//! [`cache`]: the write-back cache. [`ingest`]: the short synchronous snapshot (dirty rows frozen at the barrier,
//! written as SST files and ingested by a background thread) and the SST writing and ingestion every bulk write
//! goes through. `import.rs`: RocksDB's column-family import through its C API, for a snapshot's files and the
//! merge of several snapshots in a rescaled restore.

pub mod cache;
pub(crate) mod import;
pub mod ingest;

use crate::error::StateError;
use crate::keyed::layout::{decode_list, outside_bounds, prefix_successor, RowKeyBuilder, TimerRow, TimerScan};
use crate::keyed::layout::{ElementVisitor, RowVisitor};
use crate::keyed::meta::TtlChange;
use crate::keyed::meta::{
    check_redeclaration, decode_kind_record, encode_kind_record, rocks_kind_row, too_large, ttl_change, wrong_kind,
    KindRecord, StateKind, StateOptions, ROCKS_KIND_ROW_PREFIX,
};
use crate::keyed::migrate::{RowRewrite, ValueMigration};
use crate::keyed::ttl::{
    list_all_expired, row_expired, Clock, SharedClock, StateTtlConfig, DEFAULT_PERIODIC_COMPACTION_SECS,
    FILTER_CLOCK_REFRESH_ROWS,
};
use crate::keyed::{KeyedStateBackend, LocalSnapshot, StateId, DEFAULT_MAX_VALUE_BYTES};
use crate::rocks::cache::{Cached, StateCache};
use crate::rocks::import::SstFile;
use crate::rocks::ingest::Background;
use crate::timers::set::TimerSet;
use rocksdb::compaction_filter::{CompactionFilter, Decision};
use rocksdb::compaction_filter_factory::{CompactionFilterContext, CompactionFilterFactory};
use rocksdb::{
    ColumnFamily, Direction, IteratorMode, MergeOperands, Options, ReadOptions, WriteBatch, WriteOptions, DB,
};
use std::collections::{BTreeMap, HashMap};
use std::ffi::CStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use weir_common::state::keygroup::KeyGroupRange;

/// Tuning of the RocksDB backend.
#[derive(Clone)]
pub struct RocksOptions {
    /// Bytes the write-back cache may use (measured cost of entries) before it is flushed and emptied.
    pub cache_bytes: usize,
    /// RocksDB memtable size per column family.
    pub write_buffer_bytes: usize,
    /// Block cache shared by every backend that is given the same options (one per task manager).
    pub block_cache: Option<rocksdb::Cache>,
    /// The TTL clock from the moment the database opens (default: the system clock). The TTL compaction
    /// filters may run as soon as a restored database opens, before [`KeyedStateBackend::set_clock`] could
    /// be called.
    pub clock: Option<Arc<dyn Clock>>,
}

impl RocksOptions {
    /// A block cache of `bytes` to share between backends (keeps RocksDB types out of other crates).
    pub fn shared_block_cache(bytes: usize) -> rocksdb::Cache {
        rocksdb::Cache::new_lru_cache(bytes)
    }
}

impl std::fmt::Debug for RocksOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksOptions")
            .field("cache_bytes", &self.cache_bytes)
            .field("write_buffer_bytes", &self.write_buffer_bytes)
            .field("shared_block_cache", &self.block_cache.is_some())
            .field("clock", &self.clock.is_some())
            .finish()
    }
}

impl Default for RocksOptions {
    fn default() -> Self {
        RocksOptions { cache_bytes: 64 << 20, write_buffer_bytes: 8 << 20, block_cache: None, clock: None }
    }
}

/// RocksDB properties reported per state (Flink's `state.backend.rocksdb.metrics.*`). The block cache is
/// shared, so `block-cache-usage` is the same for every state of a task manager: do not sum it.
pub const MONITORED_PROPERTIES: &[&str] = &[
    "rocksdb.block-cache-usage",
    "rocksdb.mem-table-flush-pending",
    "rocksdb.compaction-pending",
    "rocksdb.num-running-compactions",
    "rocksdb.num-running-flushes",
    "rocksdb.estimate-num-keys",
    "rocksdb.estimate-live-data-size",
    "rocksdb.total-sst-files-size",
    "rocksdb.cur-size-all-mem-tables",
];

/// Rows per write batch when rows are written through the memtable (the fallback when an SST cannot be
/// written or ingested).
const FLUSH_BATCH_ROWS: usize = 32 * 1024;

/// Bytes of rows per SST file a migration writes.
const MIGRATION_FILE_BYTES: usize = 256 << 20;

/// Largest cache budget: offsets inside a cache's arena are 32-bit.
const MAX_CACHE_BYTES: usize = 2 << 30;

struct RocksState {
    name: String,
    /// Its column family's name.
    cf: String,
    kind: StateKind,
    ttl: Option<StateTtlConfig>,
    /// Whether rows are scoped to namespaces (see [`RowKeyBuilder::key`]).
    namespaced: bool,
    /// Value rows (value kinds), or the byte length of touched lists (list kind, clean rows only). A new
    /// state's cache starts complete (`RowCache::is_complete`): a window's new slices are then not read from
    /// RocksDB at all (Nexmark q5 at 20M events spent a fifth of its window tasks in such reads).
    cache: StateCache,
    /// Timer states: how many timers the state holds (column family and `pending`), once counted (counted on
    /// first need after a restore, then kept by every add and removal).
    timers: std::cell::Cell<Option<u64>>,
    /// Timer states: timers registered since the last flush, not in the column family (a row is in one of the
    /// two, never both). Most timers of a window fire soon after they are set: kept here they cost neither a
    /// write nor a delete in RocksDB. A snapshot holds them as a file of its own; past
    /// [`PENDING_TIMER_BYTES`], or when the cache is flushed, they move into the column family.
    pending: TimerSet,
}

impl RocksState {
    /// Timer states: whether the column family is known to hold no timer (every timer is pending).
    fn all_pending(&self) -> bool {
        self.timers.get() == Some(self.pending.len() as u64)
    }
}

/// Bytes of pending timer rows (per timer state) before they are written into the column family: a snapshot
/// writes them all (a few MB), so they are bounded well below the cache.
#[cfg(not(test))]
const PENDING_TIMER_BYTES: u64 = 8 << 20;
/// Tests: timers move into the column family often, so that both halves hold some.
#[cfg(test)]
const PENDING_TIMER_BYTES: u64 = 2048;

/// Name of the list merge operator.
const MERGE_OPERATOR: &str = "weir.list-concat";

/// The list merge: operands are concatenations of length-prefixed elements, so merging concatenates.
fn concat_merge(_key: &[u8], existing: Option<&[u8]>, operands: &MergeOperands) -> Option<Vec<u8>> {
    let len = existing.map_or(0, |e| e.len()) + operands.iter().map(|o| o.len()).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    if let Some(e) = existing {
        out.extend_from_slice(e);
    }
    for o in operands {
        out.extend_from_slice(o);
    }
    Some(out)
}

/// The TTL configs of the states that have one, by state name, shared with the compaction filters.
type TtlRegistry = Arc<RwLock<HashMap<String, (StateKind, StateTtlConfig)>>>;

/// Creates a [`TtlFilter`] per compaction of one state's column family.
struct TtlFilterFactory {
    state: String,
    registry: TtlRegistry,
    clock: SharedClock,
}

impl CompactionFilterFactory for TtlFilterFactory {
    type Filter = TtlFilter;

    fn create(&mut self, _context: CompactionFilterContext) -> TtlFilter {
        let config = self.registry.read().unwrap_or_else(|e| e.into_inner()).get(&self.state).copied();
        TtlFilter { config, clock: self.clock.clone(), now: self.clock.now_ms(), rows: 0 }
    }

    fn name(&self) -> &CStr {
        c"weir.ttl-filter-factory"
    }
}

/// Drops expired rows of a TTL state during one compaction.
struct TtlFilter {
    config: Option<(StateKind, StateTtlConfig)>,
    clock: SharedClock,
    now: u64,
    rows: u32,
}

impl CompactionFilter for TtlFilter {
    fn filter(&mut self, _level: u32, _key: &[u8], value: &[u8]) -> Decision {
        let Some((kind, ttl)) = &self.config else { return Decision::Keep };
        self.rows += 1;
        if self.rows >= FILTER_CLOCK_REFRESH_ROWS {
            self.rows = 0;
            self.now = self.clock.now_ms();
        }
        let expired = if *kind == StateKind::List {
            list_all_expired(ttl, self.now, value)
        } else {
            row_expired(ttl, self.now, value)
        };
        if expired {
            Decision::Remove
        } else {
            Decision::Keep
        }
    }

    fn name(&self) -> &CStr {
        c"weir.ttl-filter"
    }
}

/// The files of a directory (name, size), sorted.
fn list_files(dir: &Path) -> Result<Vec<(String, u64)>, StateError> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| StateError::io(format!("list {}", dir.display()), e))? {
        let entry = entry.map_err(|e| StateError::io(format!("list {}", dir.display()), e))?;
        let meta = entry.metadata().map_err(|e| StateError::io("stat snapshot file", e))?;
        if meta.is_file() {
            files.push((entry.file_name().to_string_lossy().into_owned(), meta.len()));
        }
    }
    files.sort();
    Ok(files)
}

/// The column family of a registered state (its name made once, at registration: this is on every access).
fn state_cf<'a>(db: &'a DB, st: &RocksState) -> Result<&'a ColumnFamily, StateError> {
    db.cf_handle(&st.cf).ok_or_else(|| StateError::Corrupt(format!("column family of state {:?} vanished", st.name)))
}

fn cf_handle<'a>(db: &'a DB, name: &str) -> Result<&'a ColumnFamily, StateError> {
    db.cf_handle(&RocksDbBackend::cf_name(name))
        .ok_or_else(|| StateError::Corrupt(format!("column family of state {name:?} vanished")))
}

/// Every state column family of `cfs` in `db` with its kind record, sorted by name.
fn stored_states_of(db: &DB, cfs: &[String]) -> Result<Vec<(String, KindRecord)>, StateError> {
    let mut out = Vec::new();
    for cf in cfs {
        let Some(name) = cf.strip_prefix("state.") else { continue };
        let record = match db.get(rocks_kind_row(name))? {
            Some(b) => decode_kind_record(&b)?,
            None => (StateKind::Value, None, false),
        };
        out.push((name.to_string(), record));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Whether every row of column family `cf` is in its SST files as written — none in a memtable, no range
/// deletion —, so that importing the files carries the rows exactly ([`crate::rocks::import`]).
fn rows_exactly_in_files(db: &DB, cf: &ColumnFamily) -> Result<bool, StateError> {
    for prop in ["rocksdb.num-entries-active-mem-table", "rocksdb.num-entries-imm-mem-tables"] {
        if db.property_int_value_cf(cf, prop)? != Some(0) {
            return Ok(false);
        }
    }
    Ok(import::range_deletions(db, cf)? == 0)
}

/// A native snapshot's states and files, as [`RocksDbBackend::read_snapshot_files`] reads them.
pub(crate) struct SnapshotFiles {
    /// Every state with its kind record, by name.
    pub(crate) states: Vec<(String, KindRecord)>,
    /// Each state's SST files, and whether they hold its rows exactly as the snapshot does — no range deletion,
    /// no row in a memtable, the key range of every file known — so that importing them is a restore.
    pub(crate) files: BTreeMap<String, (Vec<SstFile>, bool)>,
}

/// Keyed state in a local RocksDB instance.
pub struct RocksDbBackend {
    /// Shared with the background half of a snapshot ([`crate::rocks::ingest`]).
    db: Arc<DB>,
    /// The background half of the last snapshot, until settled.
    background: Option<Background>,
    /// Snapshots taken (names the SSTs of frozen rows).
    snapshot_seq: u64,
    /// Distinguishes this backend instance's snapshot file names from another's (a restored job's first
    /// snapshots count from 1 again).
    instance: u64,
    /// Cache flushes (names their SST files).
    flush_seq: u64,
    /// Every column family but the default one.
    column_families: Vec<String>,
    /// Makes the background half fail (tests of the fallback).
    fail_background: bool,
    path: PathBuf,
    range: KeyGroupRange,
    row: RowKeyBuilder,
    states: Vec<RocksState>,
    opts: RocksOptions,
    write_opts: WriteOptions,
    max_value_bytes: usize,
    /// Scratch row key of map rows.
    map_row: Vec<u8>,
    clock: SharedClock,
    ttl_registry: TtlRegistry,
    periodic_compaction_secs: u64,
    /// Timer counts of restored timer states not registered yet (counted once, kept for their registration).
    restored_timer_counts: std::cell::RefCell<HashMap<String, u64>>,
}

/// A number unlikely to repeat between backend instances: the clock's nanoseconds and the process id.
fn instance_nonce() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 40)
}

fn cf_options(opts: &RocksOptions) -> Options {
    let mut o = Options::default();
    o.set_write_buffer_size(opts.write_buffer_bytes);
    o.set_max_write_buffer_number(2);
    o.set_compression_type(rocksdb::DBCompressionType::Lz4);
    o.set_merge_operator_associative(MERGE_OPERATOR, concat_merge);
    o.set_block_based_table_factory(&ingest::table_options(opts.block_cache.as_ref()));
    // A whole-key Bloom filter in the memtable too: an absent row is answered without a skip-list search (a timer set for the
    // first time is looked up in a memtable of hundreds of thousands of timers).
    o.set_memtable_prefix_bloom_ratio(0.1);
    o.set_memtable_whole_key_filtering(true);
    o
}

/// Options of a state's column family: [`cf_options`] plus the TTL compaction filter factory and periodic
/// compaction.
fn state_cf_options(
    opts: &RocksOptions,
    state: &str,
    registry: &TtlRegistry,
    clock: &SharedClock,
    periodic_compaction_secs: u64,
) -> Options {
    let mut o = cf_options(opts);
    o.set_compaction_filter_factory(TtlFilterFactory {
        state: state.to_string(),
        registry: registry.clone(),
        clock: clock.clone(),
    });
    o.set_periodic_compaction_seconds(periodic_compaction_secs);
    o
}

impl RocksDbBackend {
    /// Opens (creating) the database in `work_dir/db`; with `restore_dir`, the snapshot's files are moved
    /// there first.
    pub fn open(
        work_dir: &Path,
        max_parallelism: u32,
        range: KeyGroupRange,
        restore_dir: Option<&Path>,
        opts: RocksOptions,
    ) -> Result<Self, StateError> {
        let path = work_dir.join("db");
        // A previous backend's database and the SST files it had not ingested yet.
        for dir in [path.clone(), work_dir.join("ingest"), work_dir.join("restore-ingest")] {
            if dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(|e| StateError::io(format!("clear {}", dir.display()), e))?;
            }
        }
        std::fs::create_dir_all(work_dir).map_err(|e| StateError::io(format!("create {}", work_dir.display()), e))?;
        if let Some(src) = restore_dir {
            std::fs::rename(src, &path)
                .map_err(|e| StateError::io(format!("move restored snapshot {} into place", src.display()), e))?;
        }
        let mut db_opts = cf_options(&opts);
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        db_opts.increase_parallelism(2);
        let existing = if restore_dir.is_some() { DB::list_cf(&db_opts, &path).unwrap_or_default() } else { vec![] };
        // The SSTs of rows frozen at the snapshot's barrier are not part of the RocksDB checkpoint: they are
        // ingested once it is open (see `crate::rocks::ingest`).
        let aside = work_dir.join("restore-ingest");
        let to_ingest = if restore_dir.is_some() { ingest::set_aside(&path, &aside)? } else { Vec::new() };
        let (clock, ttl_registry) = (SharedClock::default(), TtlRegistry::default());
        if let Some(c) = &opts.clock {
            clock.set(c.clone());
        }
        let db = if existing.is_empty() {
            DB::open(&db_opts, &path)?
        } else {
            let cfs = existing.iter().map(|n| {
                let o = match n.strip_prefix("state.") {
                    Some(state) => {
                        state_cf_options(&opts, state, &ttl_registry, &clock, DEFAULT_PERIODIC_COMPACTION_SECS)
                    }
                    None => cf_options(&opts),
                };
                rocksdb::ColumnFamilyDescriptor::new(n, o)
            });
            DB::open_cf_descriptors(&db_opts, &path, cfs)?
        };
        for entry in &to_ingest {
            ingest::ingest(&db, &entry.column_family, &aside.join(&entry.file))?;
        }
        if !to_ingest.is_empty() {
            let _ = std::fs::remove_dir_all(&aside);
        }
        // The compaction filters must know the TTL of restored states before they are registered again.
        {
            let mut registry = ttl_registry.write().unwrap_or_else(|e| e.into_inner());
            let prefix = ROCKS_KIND_ROW_PREFIX.as_bytes();
            for item in db.iterator(IteratorMode::From(prefix, Direction::Forward)) {
                let (k, v) = item?;
                let Some(name) = k.strip_prefix(prefix) else { break };
                if let Ok((kind, Some(ttl), _)) = decode_kind_record(&v) {
                    registry.insert(String::from_utf8_lossy(name).into_owned(), (kind, ttl));
                }
            }
        }
        let mut write_opts = WriteOptions::default();
        // Durability comes from checkpoints, not from the WAL (as in Flink).
        write_opts.disable_wal(true);
        Ok(RocksDbBackend {
            db: Arc::new(db),
            background: None,
            snapshot_seq: 0,
            instance: instance_nonce(),
            flush_seq: 0,
            column_families: existing.into_iter().filter(|n| n != "default").collect(),
            fail_background: false,
            path,
            range,
            row: RowKeyBuilder::new(max_parallelism),
            states: Vec::new(),
            opts: RocksOptions { cache_bytes: opts.cache_bytes.min(MAX_CACHE_BYTES), ..opts },
            write_opts,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            map_row: Vec::new(),
            clock,
            ttl_registry,
            periodic_compaction_secs: DEFAULT_PERIODIC_COMPACTION_SECS,
            restored_timer_counts: Default::default(),
        })
    }

    /// Sets the periodic compaction of every state column family, open ones included (default
    /// [`DEFAULT_PERIODIC_COMPACTION_SECS`]; 0 turns it off): files older than `secs` are compacted, so that the
    /// TTL compaction filter also reaches data that no write compacts.
    pub fn set_periodic_compaction_seconds(&mut self, secs: u64) -> Result<(), StateError> {
        self.periodic_compaction_secs = secs;
        let value = secs.to_string();
        for name in DB::list_cf(&Options::default(), &self.path)? {
            if name.starts_with("state.") {
                if let Some(cf) = self.db.cf_handle(&name) {
                    self.db.set_options_cf(cf, &[("periodic_compaction_seconds", value.as_str())])?;
                }
            }
        }
        Ok(())
    }

    pub(crate) fn cf_name(state: &str) -> String {
        format!("state.{state}")
    }

    /// Bytes of the key-group prefix of row keys.
    pub(crate) fn prefix_len(&self) -> usize {
        self.row.prefix_len
    }

    /// Every state the database holds (restored ones included) with its kind record, sorted by name. A column
    /// family without a kind row predates kinds and holds value rows.
    pub(crate) fn stored_states(&self) -> Result<Vec<(String, KindRecord)>, StateError> {
        stored_states_of(&self.db, &self.column_families)
    }

    /// Reads what a rescaled restore needs to import the native snapshot in `dir` without opening it for
    /// writing (a read-only open costs a fifth of one): its states and the SST files of each, those it would
    /// ingest on restore included, with the sequence numbers the ingestion would give them.
    pub(crate) fn read_snapshot_files(dir: &Path, opts: &RocksOptions) -> Result<SnapshotFiles, StateError> {
        let o = cf_options(opts);
        let cfs = DB::list_cf(&o, dir)?;
        let db = DB::open_cf_for_read_only(&o, dir, &cfs, false)?;
        let states = stored_states_of(&db, &cfs)?;
        let mut live = import::live_files(&db)?;
        let mut files = BTreeMap::new();
        for (state, _) in &states {
            let cf_name = Self::cf_name(state);
            let cf =
                db.cf_handle(&cf_name).ok_or_else(|| StateError::Corrupt(format!("no column family {cf_name:?}")))?;
            let exact = rows_exactly_in_files(&db, cf)?;
            let (mine, rest) = live.into_iter().partition(|f| f.column_family == cf_name);
            live = rest;
            files.insert(state.clone(), (mine, exact));
        }
        let mut seqno = db.latest_sequence_number();
        for entry in ingest::read_manifest(dir)? {
            let Some(state) = entry.column_family.strip_prefix("state.") else { continue };
            let Some((state_files, exact)) = files.get_mut(state) else {
                return Err(StateError::Corrupt(format!(
                    "snapshot {} ingests {} into column family {:?}, which it does not have",
                    dir.display(),
                    entry.file,
                    entry.column_family
                )));
            };
            let path = dir.join(&entry.file);
            let size =
                std::fs::metadata(&path).map_err(|e| StateError::io(format!("stat {}", path.display()), e))?.len();
            // Ingested one after the other, each newer than everything before it.
            seqno += 1;
            let (smallest_key, largest_key) = entry.keys.unwrap_or_else(|| {
                *exact = false;
                Default::default()
            });
            state_files.push(SstFile {
                column_family: entry.column_family,
                path,
                level: 0,
                size: size as usize,
                smallest_key,
                largest_key,
                smallest_seqno: seqno,
                largest_seqno: seqno,
                entries: 0,
                deletions: 0,
            });
        }
        Ok(SnapshotFiles { states, files })
    }

    /// Deletes the rows of every state outside key groups `range`: one range delete per interval and column
    /// family, so the cost does not depend on how many rows go.
    pub(crate) fn clip(&self, range: KeyGroupRange) -> Result<(), StateError> {
        let outside = outside_bounds(range, self.row.max_parallelism);
        for cf_name in &self.column_families {
            if !cf_name.starts_with("state.") {
                continue;
            }
            let cf = self
                .db
                .cf_handle(cf_name)
                .ok_or_else(|| StateError::Corrupt(format!("column family {cf_name:?} vanished")))?;
            for (lo, hi) in &outside {
                self.db.delete_range_cf_opt(cf, lo, hi, &self.write_opts)?;
            }
        }
        Ok(())
    }

    /// Makes the database hold state `name` as `record` declares it: tells the compaction filters its TTL (before
    /// any of its rows arrive), creates its column family with the state options (TTL compaction filter,
    /// periodic compaction) and stores its kind record. Used by registration and for states another snapshot
    /// restored into this database holds.
    pub(crate) fn adopt_state(&mut self, name: &str, record: &KindRecord) -> Result<(), StateError> {
        let (kind, ttl, namespaced) = *record;
        {
            let mut registry = self.ttl_registry.write().unwrap_or_else(|e| e.into_inner());
            match ttl {
                Some(t) => registry.insert(name.to_string(), (kind, t)),
                None => registry.remove(name),
            };
        }
        let cf = Self::cf_name(name);
        if self.db.cf_handle(&cf).is_none() {
            let o = state_cf_options(&self.opts, name, &self.ttl_registry, &self.clock, self.periodic_compaction_secs);
            // Creating a column family needs the database to itself: no snapshot thread may hold it.
            self.settle()?;
            Arc::get_mut(&mut self.db)
                .ok_or_else(|| StateError::Corrupt("the database is still shared with a snapshot thread".into()))?
                .create_cf(&cf, &o)?;
            self.column_families.push(cf);
        }
        self.db.put_opt(rocks_kind_row(name), encode_kind_record(kind, ttl.as_ref(), namespaced), &self.write_opts)?;
        Ok(())
    }

    /// Calls `f(row key, value)` for every row of `state` in key groups `range`, in key order (list rows merged).
    /// Reads the database, not the write-back cache: meant for a backend opened on a snapshot.
    pub(crate) fn scan(&self, state: &str, range: KeyGroupRange, f: &mut RowVisitor<'_>) -> Result<(), StateError> {
        let cf = cf_handle(&self.db, state)?;
        let (lo, hi) = self.row.range_bounds(range);
        let mut ro = ReadOptions::default();
        ro.set_iterate_upper_bound(hi);
        // A bulk scan: keep the shared block cache for the live backends' hot blocks.
        ro.fill_cache(false);
        ro.set_readahead_size(2 << 20);
        let mut it = self.db.raw_iterator_cf_opt(cf, ro);
        it.seek(&lo);
        while let (Some(k), Some(v)) = (it.key(), it.value()) {
            f(k, v)?;
            it.next();
        }
        it.status()?;
        Ok(())
    }

    /// Flushes and fully compacts `state`'s column family, twice (merged list rows reach the TTL filter only
    /// once they are plain values); tests of the compaction filter.
    #[cfg(test)]
    pub(crate) fn compact_state(&mut self, state: &str) {
        self.flush(true).unwrap();
        let cf = cf_handle(&self.db, state).unwrap();
        self.db.flush_cf(cf).unwrap();
        for _ in 0..2 {
            self.db.compact_range_cf(cf, None::<&[u8]>, None::<&[u8]>);
        }
    }

    /// Rows of `state`'s column family (tests).
    #[cfg(test)]
    pub(crate) fn row_count(&self, state: &str) -> usize {
        self.db.iterator_cf(cf_handle(&self.db, state).unwrap(), IteratorMode::Start).count()
    }

    /// The live SST files of each state column family, kept on disk as listed until the backend closes, and
    /// whether the column family's rows are all in them as written — none in a memtable, no range deletion —
    /// so that a rescaled restore may import the files whole ([`crate::rocks::import`]).
    pub(crate) fn freeze_state_files(&self) -> Result<BTreeMap<String, (Vec<SstFile>, bool)>, StateError> {
        let mut files = import::freeze_live_files(&self.db)?;
        let mut out = BTreeMap::new();
        for cf_name in &self.column_families {
            let Some(state) = cf_name.strip_prefix("state.") else { continue };
            let cf = self
                .db
                .cf_handle(cf_name)
                .ok_or_else(|| StateError::Corrupt(format!("column family {cf_name:?} vanished")))?;
            let whole = rows_exactly_in_files(&self.db, cf)?;
            let (mine, rest) = files.into_iter().partition(|f| f.column_family == *cf_name);
            files = rest;
            out.insert(state.to_string(), (mine, whole));
        }
        Ok(out)
    }

    /// Creates in `path` a database, closed again, whose state column families hold the SST files `files`
    /// (by state name; imported, so the files move). Opened with [`RocksDbBackend::open`] as a restore, it is a
    /// backend; its states need [`RocksDbBackend::adopt_state`] then (the kind rows), before anything else.
    pub(crate) fn create_imported(
        path: &Path,
        files: &BTreeMap<String, Vec<SstFile>>,
        opts: &RocksOptions,
    ) -> Result<(), StateError> {
        let mut o = cf_options(opts);
        o.create_if_missing(true);
        // Nothing may rewrite the files before the backend opens them with its compaction filters.
        o.set_disable_auto_compactions(true);
        let db = DB::open(&o, path)?;
        for (state, files) in files {
            import::create_column_family_with_import(&db, &Self::cf_name(state), &o, files)?;
        }
        drop(db);
        Ok(())
    }

    /// Rewrites every row of `state`'s column family with `ttl` and `values` ([`crate::keyed::migrate`]): in key order
    /// into sorted SST files of at most [`MIGRATION_FILE_BYTES`], then ingested over the old rows. Logs progress
    /// every [`crate::keyed::migrate::PROGRESS_EVERY`] values; returns how many were rewritten.
    fn rewrite_state(
        &mut self,
        state: &str,
        kind: StateKind,
        ttl: TtlChange,
        values: Option<&mut ValueMigration<'_>>,
    ) -> Result<u64, StateError> {
        self.settle()?;
        let started = std::time::Instant::now();
        let dir = self.ingest_dir();
        std::fs::create_dir_all(&dir).map_err(|e| StateError::io(format!("create {}", dir.display()), e))?;
        let db = self.db.clone();
        let cf = cf_handle(&db, state)?;
        let opts = ingest::sst_options();
        let mut rewrite = RowRewrite::new(state, kind, ttl, values);
        let mut files: Vec<PathBuf> = Vec::new();
        let mut sink: Option<ingest::SstSink<'_>> = None;
        let mut sink_bytes = 0usize;
        let mut out = Vec::new();
        let mut next_progress = crate::keyed::migrate::PROGRESS_EVERY;
        let mut ro = ReadOptions::default();
        ro.fill_cache(false);
        ro.set_readahead_size(2 << 20);
        let mut it = db.raw_iterator_cf_opt(cf, ro);
        it.seek_to_first();
        let written: Result<(), StateError> = (|| {
            while let (Some(k), Some(v)) = (it.key(), it.value()) {
                out.clear();
                rewrite.row(v, &mut out)?;
                let s = sink.get_or_insert_with(|| {
                    let path = dir.join(format!("migrate-{}-{}.sst", self.flush_seq, files.len()));
                    ingest::SstSink::new(&opts, path)
                });
                s.put(k, &out)?;
                sink_bytes += k.len() + out.len();
                if sink_bytes >= MIGRATION_FILE_BYTES {
                    files.extend(sink.take().map(ingest::SstSink::finish).transpose()?.flatten());
                    sink_bytes = 0;
                }
                if rewrite.count >= next_progress {
                    tracing::info!(
                        state,
                        values = rewrite.count,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "migrating state"
                    );
                    next_progress += crate::keyed::migrate::PROGRESS_EVERY;
                }
                it.next();
            }
            it.status()?;
            files.extend(sink.take().map(ingest::SstSink::finish).transpose()?.flatten());
            Ok(())
        })();
        drop(it);
        let ingested =
            written.and_then(|()| files.iter().try_for_each(|f| ingest::ingest(&self.db, &Self::cf_name(state), f)));
        if let Err(e) = ingested {
            for f in &files {
                let _ = std::fs::remove_file(f);
            }
            return Err(e);
        }
        self.flush_seq += 1;
        tracing::info!(
            state,
            values = rewrite.count,
            files = files.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "state migrated"
        );
        Ok(rewrite.count)
    }

    /// How many timers timer state `name` holds: kept since its registration, or counted now (and kept).
    fn count_timers(&self, name: &str) -> Result<u64, StateError> {
        let st = self.states.iter().find(|s| s.name == name);
        let known = match st {
            Some(s) => s.timers.get(),
            None => self.restored_timer_counts.borrow().get(name).copied(),
        };
        if let Some(n) = known {
            return Ok(n);
        }
        let mut ro = ReadOptions::default();
        ro.fill_cache(false);
        let mut it = self.db.raw_iterator_cf_opt(cf_handle(&self.db, name)?, ro);
        it.seek_to_first();
        let mut n = 0u64;
        while it.valid() {
            n += 1;
            it.next();
        }
        it.status()?;
        n += st.map_or(0, |s| s.pending.len() as u64);
        match st {
            Some(st) => st.timers.set(Some(n)),
            None => {
                self.restored_timer_counts.borrow_mut().insert(name.to_string(), n);
            }
        }
        Ok(n)
    }

    /// Ingests an SST file (moved into the database) into `state`'s column family.
    pub(crate) fn ingest_state_file(&mut self, state: &str, path: &Path) -> Result<(), StateError> {
        // Rows that bypass the cache: once the state is registered, its cached rows (and its completeness)
        // would hide them. Imports ingest before any state is registered, so this flush is for safety, not speed.
        if self.states.iter().any(|s| s.name == state) {
            self.flush(true)?;
        }
        ingest::ingest(&self.db, &Self::cf_name(state), path)
    }

    /// Waits for the background half of the last snapshot; if it did not get its rows into the database,
    /// writes them now. Called before anything that writes a value column family, drops cached rows or
    /// snapshots: until then the frozen rows are only in the cache (clean) and in the thread's hands.
    fn settle(&mut self) -> Result<(), StateError> {
        let Some(background) = self.background.take() else { return Ok(()) };
        match background.settle() {
            Some(frozen) => self.write_frozen(&frozen),
            None => Ok(()),
        }
    }

    /// Writes frozen rows through write batches.
    fn write_frozen(&self, frozen: &[ingest::FrozenRows]) -> Result<(), StateError> {
        // Pending timers stay pending: the live database never gets them from a snapshot.
        for rows in frozen.iter().filter(|r| r.live()) {
            self.write_rows(&rows.column_family, rows.iter())?;
        }
        Ok(())
    }

    /// Writes rows (`None`: deleted) of column family `cf` through write batches of moderate size (a batch is a
    /// copy of its rows).
    fn write_rows<'a>(
        &self,
        cf: &str,
        rows: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) -> Result<(), StateError> {
        let handle =
            self.db.cf_handle(cf).ok_or_else(|| StateError::Corrupt(format!("column family {cf:?} vanished")))?;
        let mut batch = WriteBatch::default();
        for (k, v) in rows {
            match v {
                Some(v) => batch.put_cf(handle, k, v),
                None => batch.delete_cf(handle, k),
            }
            if batch.len() >= FLUSH_BATCH_ROWS {
                self.db.write_opt(std::mem::take(&mut batch), &self.write_opts)?;
            }
        }
        self.db.write_opt(batch, &self.write_opts)?;
        Ok(())
    }

    /// Whether every memtable is empty (range deletions count as entries too).
    fn memtables_empty(&self) -> Result<bool, StateError> {
        const PROPS: [&str; 2] = ["rocksdb.num-entries-active-mem-table", "rocksdb.num-entries-imm-mem-tables"];
        for prop in PROPS {
            if self.db.property_int_value(prop)? != Some(0) {
                return Ok(false);
            }
        }
        for name in &self.column_families {
            let Some(cf) = self.db.cf_handle(name) else { continue };
            for prop in PROPS {
                if self.db.property_int_value_cf(cf, prop)? != Some(0) {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// A RocksDB checkpoint in `dir`. The WAL is off, so rows in a memtable reach the checkpoint only through a
    /// flush; with every memtable empty the flush is skipped, because RocksDB's flush first waits until one
    /// more L0 file would not stall writes — which, while a large compaction runs, took over a second.
    fn create_checkpoint(&self, dir: &Path) -> Result<(), StateError> {
        let log_size_for_flush = if self.memtables_empty()? { u64::MAX } else { 0 };
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint_with_log_size(dir, log_size_for_flush)?;
        Ok(())
    }

    /// Makes the next snapshot's background half fail, to test that its rows still reach the database.
    #[cfg(test)]
    pub(crate) fn fail_next_background(&mut self) {
        self.fail_background = true;
    }

    /// Writes every dirty cache row into RocksDB; with `clear`, empties the cache too.
    ///
    /// The rows of each state are written as one sorted SST file that is ingested, not through the memtable:
    /// value rows then never sit in a memtable, so a checkpoint has nothing to flush — and RocksDB's flush
    /// waits for compactions whenever one more L0 file would stall writes (over a second was measured).
    pub fn flush(&mut self, clear: bool) -> Result<(), StateError> {
        self.settle()?;
        for i in 0..self.states.len() {
            self.flush_pending(i)?;
        }
        let dir = self.ingest_dir();
        for i in 0..self.states.len() {
            let rows = self.states[i].cache.dirty_sorted();
            if rows.is_empty() {
                continue;
            }
            self.flush_seq += 1;
            let st = &self.states[i];
            let cf = Self::cf_name(&st.name);
            let path = dir.join(format!("flush-{}.sst", self.flush_seq));
            let ingested = std::fs::create_dir_all(&dir)
                .map_err(|e| StateError::io(format!("create {}", dir.display()), e))
                .and_then(|()| ingest::write_sst(&path, rows.iter().map(|&r| st.cache.row(r))))
                .and_then(|_| ingest::ingest(&self.db, &cf, &path));
            if let Err(e) = ingested {
                tracing::warn!(state = %st.name, error = %e, "writing cached rows as an SST failed; using a write batch");
                let _ = std::fs::remove_file(&path);
                self.write_rows(&cf, rows.iter().map(|&r| st.cache.row(r)))?;
            }
            self.states[i].cache.mark_clean(&rows);
        }
        if clear {
            for st in &mut self.states {
                st.cache.evict_all();
            }
        }
        Ok(())
    }

    /// Where SST files are made before they are ingested.
    fn ingest_dir(&self) -> PathBuf {
        self.path.with_file_name("ingest")
    }

    fn cache_bytes(&self) -> usize {
        self.states.iter().map(|s| s.cache.memory_bytes() + s.pending.bytes() as usize).sum()
    }

    /// Moves state `i`'s pending timers into its column family, as one ingested SST file (they are in order).
    fn flush_pending(&mut self, i: usize) -> Result<(), StateError> {
        if self.states[i].pending.len() == 0 {
            return Ok(());
        }
        self.flush_seq += 1;
        let dir = self.ingest_dir();
        let st = &self.states[i];
        let cf = &st.cf;
        let path = dir.join(format!("timers-{}.sst", self.flush_seq));
        let rows = || st.pending.iter().map(|r| (r, Some(&[][..])));
        let ingested = std::fs::create_dir_all(&dir)
            .map_err(|e| StateError::io(format!("create {}", dir.display()), e))
            .and_then(|()| ingest::write_sst(&path, rows()))
            .and_then(|_| ingest::ingest(&self.db, cf, &path));
        if let Err(e) = ingested {
            tracing::warn!(state = %st.name, error = %e, "writing pending timers as an SST failed; using a write batch");
            let _ = std::fs::remove_file(&path);
            self.write_rows(cf, rows())?;
        }
        self.states[i].pending.clear();
        Ok(())
    }

    /// Fails unless `state`'s kind supports the operation `op`.
    fn check(&self, state: StateId, op: &str, ok: impl Fn(StateKind) -> bool) -> Result<(), StateError> {
        let st = &self.states[state.0];
        if ok(st.kind) {
            Ok(())
        } else {
            Err(wrong_kind(&st.name, st.kind, op))
        }
    }

    /// Byte length of the current key's list: cached, or read once from RocksDB.
    fn list_len(&mut self, state: StateId) -> Result<usize, StateError> {
        let ns = self.states[state.0].namespaced;
        if let Cached::Hit(Some(len)) = self.states[state.0].cache.get(self.row.key(ns)) {
            if let Ok(len) = <[u8; 8]>::try_from(len) {
                return Ok(u64::from_le_bytes(len) as usize);
            }
        }
        let cf = state_cf(&self.db, &self.states[state.0])?;
        let len = self.db.get_pinned_cf(cf, self.row.key(ns))?.map_or(0, |v| v.len());
        self.remember_list_len(state, len)?;
        Ok(len)
    }

    /// Caches the current key's list length (a clean row: never written to RocksDB).
    fn remember_list_len(&mut self, state: StateId, len: usize) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        self.make_room(state)?;
        self.states[state.0].cache.insert_clean(self.row.key(ns), Some(&(len as u64).to_le_bytes()));
        Ok(())
    }

    /// Sets the map-row scratch key to the prefix of the current key's (and namespace's) rows in `state`.
    fn set_map_prefix(&mut self, state: StateId) {
        self.row.map_prefix(self.states[state.0].namespaced, &mut self.map_row);
    }

    /// Sets the map-row scratch key to the current key's (and namespace's) row of `user_key` in `state`.
    fn set_map_row(&mut self, state: StateId, user_key: &[u8]) {
        self.set_map_prefix(state);
        self.map_row.extend_from_slice(user_key);
    }

    /// An iterator over the rows starting at `prefix`, bounded by the prefix's successor.
    fn map_iter<'a>(&'a self, cf: &'a ColumnFamily, prefix: &[u8]) -> rocksdb::DBIteratorWithThreadMode<'a, DB> {
        let mut ro = ReadOptions::default();
        if let Some(hi) = prefix_successor(prefix) {
            ro.set_iterate_upper_bound(hi);
        }
        self.db.iterator_cf_opt(cf, ro, IteratorMode::From(prefix, Direction::Forward))
    }

    /// Flushes the cache when a new row would not fit its budget, then forgets the rows known to be absent; if
    /// the rows left still take half the budget, it forgets them all. A window's state is mostly rows deleted
    /// when their window was cleaned up: emptying the whole cache each time it filled with those made every
    /// live slice a RocksDB read again (q5 at 20M events: 59 MB of cached rows of which 2 MB were live).
    fn make_room(&mut self, state: StateId) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        // The budget check is a few additions; the hash lookup only happens once the cache is full.
        if self.cache_bytes() > self.opts.cache_bytes
            && matches!(self.states[state.0].cache.get(self.row.key(ns)), Cached::Miss)
        {
            self.flush(false)?;
            for st in &mut self.states {
                st.cache.retain_present();
            }
            if self.cache_bytes() > self.opts.cache_bytes / 2 {
                for st in &mut self.states {
                    st.cache.evict_all();
                }
            }
        }
        Ok(())
    }
}

impl KeyedStateBackend for RocksDbBackend {
    fn register_state_with_options(
        &mut self,
        name: &str,
        kind: StateKind,
        options: &StateOptions,
    ) -> Result<StateId, StateError> {
        let (ttl, namespaced) = (options.ttl, options.namespaced);
        if let Some(i) = self.states.iter().position(|s| s.name == name) {
            let st = &self.states[i];
            check_redeclaration(name, (st.kind, st.ttl.as_ref(), st.namespaced), kind, options, false)?;
            return Ok(StateId(i));
        }
        let cf = Self::cf_name(name);
        let stored = match self.db.get(rocks_kind_row(name))? {
            Some(b) => Some(
                decode_kind_record(&b)
                    .map_err(|_| StateError::Corrupt(format!("kind row of state {name:?} is malformed")))?,
            ),
            // A column family from before kinds were recorded holds value rows.
            None if self.db.cf_handle(&cf).is_some() => Some((StateKind::Value, None, false)),
            None => None,
        };
        if let Some((existing, stored_ttl, stored_namespaced)) = stored {
            check_redeclaration(name, (existing, stored_ttl.as_ref(), stored_namespaced), kind, options, true)?;
            let change = ttl_change(stored_ttl.as_ref(), ttl.as_ref(), self.clock.now_ms());
            if !matches!(change, TtlChange::Keep { .. }) {
                self.rewrite_state(name, kind, change, None)?;
            }
        }
        self.adopt_state(name, &(kind, ttl, namespaced))?;
        self.states.push(RocksState {
            name: name.to_string(),
            cf: Self::cf_name(name),
            kind,
            ttl,
            namespaced,
            cache: StateCache::for_rows(namespaced, stored.is_none()),
            // A new state has no timers; a restored one is counted when first asked (or was already).
            timers: std::cell::Cell::new(match stored {
                None => (kind == StateKind::Timers).then_some(0),
                Some(_) => self.restored_timer_counts.borrow().get(name).copied(),
            }),
            pending: TimerSet::new(self.row.prefix_len),
        });
        Ok(StateId(self.states.len() - 1))
    }

    fn set_current_namespace(&mut self, namespace: &[u8]) {
        self.row.set_namespace(namespace);
    }

    fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock.set(clock);
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn set_max_value_bytes(&mut self, limit: usize) {
        self.max_value_bytes = limit;
    }

    fn set_current_key(&mut self, key: &[u8]) {
        self.row.set(key);
    }

    fn set_current_key_in_group(&mut self, key: &[u8], key_group: u32) {
        self.row.set_in_group(key, key_group);
    }

    fn get_value(&mut self, state: StateId) -> Result<Option<&[u8]>, StateError> {
        let ns = self.states[state.0].namespaced;
        self.check(state, "get_value", StateKind::is_value_row)?;
        if matches!(self.states[state.0].cache.get(self.row.key(ns)), Cached::Miss) {
            // A miss in a complete cache is an absent row: nothing to read, and nothing to cache either (a
            // window reads the slices of each window it fires, and one already cleaned up must not come back
            // as an entry that nothing deletes) — so no room to make.
            if self.states[state.0].cache.is_complete() {
                return Ok(None);
            }
            self.make_room(state)?;
            let st = &mut self.states[state.0];
            let cf = state_cf(&self.db, st)?;
            let value = self.db.get_pinned_cf(cf, self.row.key(ns))?;
            st.cache.insert_clean(self.row.key(ns), value.as_deref());
        }
        match self.states[state.0].cache.get(self.row.key(ns)) {
            Cached::Hit(v) => Ok(v),
            Cached::Miss => Err(StateError::Corrupt("cache entry vanished".into())),
        }
    }

    fn put_value(&mut self, state: StateId, value: &[u8]) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        self.check(state, "put_value", StateKind::is_value_row)?;
        if value.len() > self.max_value_bytes {
            let st = &self.states[state.0];
            return Err(too_large(&st.name, st.kind, value.len(), self.max_value_bytes));
        }
        // A write needs no read: the row is cached dirty and reaches RocksDB at the next flush.
        self.make_room(state)?;
        self.states[state.0].cache.put(self.row.key(ns), value);
        Ok(())
    }

    fn delete_value(&mut self, state: StateId) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        self.check(state, "delete_value", StateKind::is_value_row)?;
        self.make_room(state)?;
        self.states[state.0].cache.delete(self.row.key(ns));
        Ok(())
    }

    fn for_each_value(&mut self, state: StateId, f: &mut RowVisitor<'_>) -> Result<(), StateError> {
        self.check(state, "for_each_value", StateKind::is_value_row)?;
        self.flush(false)?;
        let name = Self::cf_name(&self.states[state.0].name);
        let cf = self.db.cf_handle(&name).ok_or_else(|| StateError::Corrupt(format!("no column family {name}")))?;
        let (lo, hi) = self.row.bounds(self.range);
        let mut ro = ReadOptions::default();
        if let Some(hi) = hi {
            ro.set_iterate_upper_bound(hi);
        }
        let prefix = self.row.prefix_len;
        let ns = self.states[state.0].namespaced;
        for item in self.db.iterator_cf_opt(cf, ro, IteratorMode::From(&lo, Direction::Forward)) {
            let (k, v) = item?;
            if let Some(key) = self.row.visible_key(ns, &k[prefix..]) {
                f(key, &v)?;
            }
        }
        Ok(())
    }

    fn for_each_list_element(&mut self, state: StateId, f: &mut ElementVisitor<'_>) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        self.check(state, "list get", |k| k == StateKind::List)?;
        let st = &self.states[state.0];
        let cf = state_cf(&self.db, st)?;
        match self.db.get_pinned_cf(cf, self.row.key(ns))? {
            Some(v) => decode_list(&st.name, &v, f),
            None => Ok(()),
        }
    }

    fn append_list(&mut self, state: StateId, encoded: &[u8]) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        self.check(state, "list add", |k| k == StateKind::List)?;
        let old = self.list_len(state)?;
        let st = &mut self.states[state.0];
        let total = old + encoded.len();
        if total > self.max_value_bytes {
            return Err(too_large(&st.name, st.kind, total, self.max_value_bytes));
        }
        let cf = state_cf(&self.db, st)?;
        self.db.merge_cf_opt(cf, self.row.key(ns), encoded, &self.write_opts)?;
        st.cache.insert_clean(self.row.key(ns), Some(&(total as u64).to_le_bytes()));
        Ok(())
    }

    fn replace_list(&mut self, state: StateId, encoded: &[u8]) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        self.check(state, "list update", |k| k == StateKind::List)?;
        let st = &self.states[state.0];
        if encoded.len() > self.max_value_bytes {
            return Err(too_large(&st.name, st.kind, encoded.len(), self.max_value_bytes));
        }
        let cf = state_cf(&self.db, st)?;
        if encoded.is_empty() {
            self.db.delete_cf_opt(cf, self.row.key(ns), &self.write_opts)?;
        } else {
            self.db.put_cf_opt(cf, self.row.key(ns), encoded, &self.write_opts)?;
        }
        self.remember_list_len(state, encoded.len())
    }

    fn map_get(&mut self, state: StateId, user_key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.check(state, "map get", |k| k == StateKind::Map)?;
        self.set_map_row(state, user_key);
        let cf = state_cf(&self.db, &self.states[state.0])?;
        Ok(self.db.get_cf(cf, &self.map_row)?)
    }

    fn map_put(&mut self, state: StateId, user_key: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.check(state, "map put", |k| k == StateKind::Map)?;
        let st = &self.states[state.0];
        if value.len() > self.max_value_bytes {
            return Err(too_large(&st.name, st.kind, value.len(), self.max_value_bytes));
        }
        self.set_map_row(state, user_key);
        let cf = state_cf(&self.db, &self.states[state.0])?;
        Ok(self.db.put_cf_opt(cf, &self.map_row, value, &self.write_opts)?)
    }

    fn map_remove(&mut self, state: StateId, user_key: &[u8]) -> Result<(), StateError> {
        self.check(state, "map remove", |k| k == StateKind::Map)?;
        self.set_map_row(state, user_key);
        let cf = state_cf(&self.db, &self.states[state.0])?;
        Ok(self.db.delete_cf_opt(cf, &self.map_row, &self.write_opts)?)
    }

    fn for_each_map_entry(&mut self, state: StateId, f: &mut RowVisitor<'_>) -> Result<(), StateError> {
        self.check(state, "map iteration", |k| k == StateKind::Map)?;
        self.set_map_prefix(state);
        let cf = state_cf(&self.db, &self.states[state.0])?;
        let prefix = &self.map_row;
        for item in self.map_iter(cf, prefix) {
            let (k, v) = item?;
            if !k.starts_with(prefix) {
                break;
            }
            f(&k[prefix.len()..], &v)?;
        }
        Ok(())
    }

    fn map_is_empty(&mut self, state: StateId) -> Result<bool, StateError> {
        self.check(state, "map is_empty", |k| k == StateKind::Map)?;
        self.set_map_prefix(state);
        let cf = state_cf(&self.db, &self.states[state.0])?;
        match self.map_iter(cf, &self.map_row).next() {
            None => Ok(true),
            Some(item) => Ok(!item?.0.starts_with(&self.map_row)),
        }
    }

    fn clear_key(&mut self, state: StateId) -> Result<(), StateError> {
        match self.states[state.0].kind {
            StateKind::Value | StateKind::Reducing | StateKind::Aggregating => self.delete_value(state),
            StateKind::Timers => Err(wrong_kind(&self.states[state.0].name, StateKind::Timers, "clear")),
            StateKind::List => self.replace_list(state, &[]),
            StateKind::Map => {
                self.set_map_prefix(state);
                let cf = state_cf(&self.db, &self.states[state.0])?;
                let mut batch = WriteBatch::default();
                for item in self.map_iter(cf, &self.map_row) {
                    let (k, _) = item?;
                    if !k.starts_with(&self.map_row) {
                        break;
                    }
                    batch.delete_cf(cf, k);
                }
                Ok(self.db.write_opt(batch, &self.write_opts)?)
            }
        }
    }

    fn clear_all(&mut self, state: StateId) -> Result<(), StateError> {
        // Frozen rows ingested after the range delete would come back.
        self.settle()?;
        // Cached rows of this state (dirty or not) would outlive the range delete: drop them unwritten.
        let st = &mut self.states[state.0];
        st.cache.clear();
        let cf = state_cf(&self.db, st)?;
        let (lo, hi) = self.row.range_bounds(self.range);
        self.db.delete_range_cf_opt(cf, lo, hi, &self.write_opts)?;
        if st.kind == StateKind::Timers {
            st.pending.clear();
            st.timers.set(Some(0));
        }
        Ok(())
    }

    fn current_key_and_namespace(&self) -> (&[u8], &[u8]) {
        self.row.current()
    }

    fn current_key_group(&self) -> Result<u32, StateError> {
        self.row.key_group()
    }

    fn add_timer(&mut self, state: StateId, timestamp: i64) -> Result<(u32, bool), StateError> {
        self.check(state, "add_timer", |k| k == StateKind::Timers)?;
        let kg = self.row.timer_row(timestamp, &mut self.map_row)?;
        let st = &self.states[state.0];
        if st.pending.contains(&self.map_row) {
            return Ok((kg, false));
        }
        // The read stays: only it tells a new timer from one set again, which `timer_count` (exact, kept per
        // add and removal; a count by iteration would walk every timer at each checkpoint's summary) and
        // `TimerService::register`'s answer need. The read is cheap where it is common: a first-time timer is
        // absent, which the whole-key Bloom filters (memtable and files) answer without a block read — and it
        // is skipped while every timer is pending (the column family has none).
        let cf = state_cf(&self.db, st)?;
        if !st.all_pending() && self.db.get_pinned_cf(cf, &self.map_row)?.is_some() {
            return Ok((kg, false));
        }
        let st = &mut self.states[state.0];
        st.pending.insert(&self.map_row)?;
        if let Some(n) = st.timers.get() {
            st.timers.set(Some(n + 1));
        }
        if st.pending.bytes() > PENDING_TIMER_BYTES {
            self.flush_pending(state.0)?;
        }
        Ok((kg, true))
    }

    fn delete_timer(&mut self, state: StateId, timestamp: i64) -> Result<bool, StateError> {
        self.check(state, "delete_timer", |k| k == StateKind::Timers)?;
        self.row.timer_row(timestamp, &mut self.map_row)?;
        let st = &mut self.states[state.0];
        if !st.pending.remove(&self.map_row) {
            let cf = state_cf(&self.db, st)?;
            if st.all_pending() || self.db.get_pinned_cf(cf, &self.map_row)?.is_none() {
                return Ok(false);
            }
            self.db.delete_cf_opt(cf, &self.map_row, &self.write_opts)?;
        }
        if let Some(n) = st.timers.get() {
            st.timers.set(Some(n.saturating_sub(1)));
        }
        Ok(true)
    }

    fn first_timer(
        &mut self,
        state: StateId,
        key_group: u32,
        from: i64,
        after: Option<&TimerRow>,
        out: &mut TimerRow,
    ) -> Result<bool, StateError> {
        self.check(state, "first_timer", |k| k == StateKind::Timers)?;
        let st = &self.states[state.0];
        let cf = state_cf(&self.db, st)?;
        let (mut lo, hi) = self.row.timer_bounds(key_group, from);
        if let Some(after) = after {
            // Past the timers fired before it: their tombstones are not walked again.
            self.row.timer_after(key_group, after, &mut lo);
        }
        let pending = st.pending.range(&lo, Some(&hi)).next();
        let mut ro = ReadOptions::default();
        ro.set_iterate_upper_bound(hi.clone());
        let mut it = self.db.raw_iterator_cf_opt(cf, ro);
        it.seek(&lo);
        let first = match (it.key(), pending) {
            (Some(k), Some(p)) => Some(k.min(p)),
            (k, p) => k.or(p),
        };
        match first {
            Some(row) => {
                out.read(&row[self.row.prefix_len..])?;
                Ok(true)
            }
            None => {
                it.status()?;
                Ok(false)
            }
        }
    }

    fn scan_timers(
        &mut self,
        state: StateId,
        key_group: u32,
        from: i64,
        after: Option<&[u8]>,
        f: &mut TimerScan<'_>,
    ) -> Result<(), StateError> {
        self.check(state, "scan_timers", |k| k == StateKind::Timers)?;
        let st = &self.states[state.0];
        let cf = state_cf(&self.db, st)?;
        let mut hi = Vec::new();
        self.row.timer_scan_bounds(key_group, from, after, &mut self.map_row, &mut hi);
        let prefix = self.row.prefix_len;
        // The pending rows and the column family's, merged in order (no row is in both).
        let mut pending = st.pending.range(&self.map_row, Some(&hi)).peekable();
        let mut ro = ReadOptions::default();
        // Bounded by the key group, so that the tombstones of the next one's fired timers are never walked.
        ro.set_iterate_upper_bound(hi.clone());
        let mut it = self.db.raw_iterator_cf_opt(cf, ro);
        it.seek(&self.map_row);
        loop {
            let from_pending = match (it.key(), pending.peek()) {
                (None, None) => break,
                (None, Some(_)) => true,
                (Some(k), Some(p)) => *p < k,
                (Some(_), None) => false,
            };
            if from_pending {
                let Some(row) = pending.next() else { break };
                if !f(&row[prefix..])? {
                    return Ok(());
                }
            } else {
                let Some(k) = it.key() else { break };
                if !f(&k[prefix..])? {
                    return Ok(());
                }
                it.next();
            }
        }
        Ok(it.status()?)
    }

    fn remove_timer(&mut self, state: StateId, key_group: u32, timer: &TimerRow) -> Result<(), StateError> {
        self.check(state, "remove_timer", |k| k == StateKind::Timers)?;
        self.row.timer_row_of(key_group, timer, &mut self.map_row);
        let st = &mut self.states[state.0];
        // A timer that fires before it was flushed never reaches RocksDB.
        if !st.pending.remove(&self.map_row) {
            let cf = state_cf(&self.db, st)?;
            self.db.delete_cf_opt(cf, &self.map_row, &self.write_opts)?;
        }
        if let Some(n) = st.timers.get() {
            st.timers.set(Some(n.saturating_sub(1)));
        }
        Ok(())
    }

    fn timer_count(&mut self, state: StateId) -> Result<u64, StateError> {
        self.check(state, "timer_count", |k| k == StateKind::Timers)?;
        let name = self.states[state.0].name.clone();
        self.count_timers(&name)
    }

    fn snapshot_sync(&mut self, dir: &Path) -> Result<LocalSnapshot, StateError> {
        // The database must hold everything up to the last barrier before this checkpoint is taken of it.
        self.settle()?;
        let mut frozen = Vec::new();
        for st in &mut self.states {
            let mut rows = ingest::FrozenRows::new(st.cf.clone());
            st.cache.drain_dirty(|k, v| rows.push(k, v));
            if !rows.is_empty() {
                frozen.push(rows);
            }
            if st.pending.len() > 0 {
                // Pointers to the rows as they are now (`timers/set.rs`): the pause does not grow with them.
                frozen.push(ingest::FrozenRows::pending_timers(st.cf.clone(), st.pending.snapshot()));
            }
        }
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(|e| StateError::io(format!("create {}", parent.display()), e))?;
        }
        // List the checkpoint's files before the background thread adds its own to the directory.
        let listed = self.create_checkpoint(dir).and_then(|()| list_files(dir));
        let pending = if frozen.is_empty() {
            None
        } else {
            self.snapshot_seq += 1;
            // Started even if the checkpoint failed: the live database needs the frozen rows either way.
            let frozen = Arc::new(frozen);
            let link_dir = self.ingest_dir();
            let fail = std::mem::take(&mut self.fail_background);
            match Background::spawn(
                self.db.clone(),
                frozen.clone(),
                dir.to_path_buf(),
                link_dir,
                format!("{:x}-{}", self.instance, self.snapshot_seq),
                fail,
            ) {
                Ok((background, pending)) => {
                    self.background = Some(background);
                    Some(pending)
                }
                Err(e) => {
                    self.write_frozen(&frozen)?;
                    return Err(e);
                }
            }
        };
        let files = listed?;
        Ok(LocalSnapshot { dir: dir.to_path_buf(), files, backend: "rocksdb", key_group_range: self.range, pending })
    }

    fn properties(&self) -> Vec<(String, &'static str, u64)> {
        let mut out = Vec::new();
        for st in &self.states {
            let Some(cf) = self.db.cf_handle(&Self::cf_name(&st.name)) else { continue };
            for prop in MONITORED_PROPERTIES {
                if let Ok(Some(v)) = self.db.property_int_value_cf(cf, *prop) {
                    out.push((st.name.clone(), *prop, v));
                }
            }
        }
        out
    }

    fn migrate_state(&mut self, name: &str, migration: &mut ValueMigration<'_>) -> Result<u64, StateError> {
        if self.states.iter().any(|s| s.name == name) {
            return Err(StateError::Declaration {
                name: name.to_string(),
                message: "already registered: a state is migrated before the operator registers it".into(),
            });
        }
        let (kind, ttl, _) =
            self.stored_states()?.into_iter().find(|(n, _)| n == name).map(|(_, record)| record).ok_or_else(|| {
                StateError::Restore(format!("state {name:?} to migrate is not in the restored state"))
            })?;
        self.rewrite_state(name, kind, TtlChange::Keep { stamped: ttl.is_some() }, Some(migration))
    }

    fn kind(&self) -> &'static str {
        "rocksdb"
    }

    fn state_summaries(&self) -> Result<Vec<crate::keyed::meta::StateSummary>, StateError> {
        let mut out = Vec::new();
        for (name, (kind, ttl, _)) in self.stored_states()? {
            let in_files = self
                .db
                .cf_handle(&Self::cf_name(&name))
                .and_then(|cf| self.db.property_int_value_cf(cf, "rocksdb.estimate-live-data-size").ok().flatten())
                .unwrap_or(0);
            // Rows the write-back cache holds may not have reached a file yet (those frozen at the last barrier
            // are still being written): count the cache too. An estimate either way.
            let cached = self.states.iter().find(|s| s.name == name).map_or(0, |s| s.cache.memory_bytes() as u64);
            let bytes = in_files + cached;
            let entries = match kind {
                StateKind::Timers => Some(self.count_timers(&name)?),
                _ => None,
            };
            out.push(crate::keyed::meta::StateSummary { name, kind, ttl, bytes, entries });
        }
        Ok(out)
    }

    #[cfg(test)]
    fn stored(&mut self) -> crate::keyed::StoredContent {
        self.flush(false).unwrap();
        let mut out = crate::keyed::StoredContent::default();
        let mut row = Vec::new();
        for (name, record) in self.stored_states().unwrap() {
            let cf = cf_handle(&self.db, &name).unwrap();
            for item in self.db.iterator_cf(cf, IteratorMode::Start) {
                let (k, v) = item.unwrap();
                let entry = if record.0 == StateKind::Map {
                    let uk = crate::keyed::layout::split_map_row(&k, self.row.prefix_len, record.2, &mut row).unwrap();
                    (name.clone(), row.clone(), Some(uk.to_vec()), v.to_vec())
                } else {
                    (name.clone(), k.to_vec(), None, v.to_vec())
                };
                out.1.insert(entry);
            }
            out.0.insert(name, record);
        }
        out
    }
}

impl Drop for RocksDbBackend {
    fn drop(&mut self) {
        if let Some(background) = self.background.take() {
            background.settle();
        }
        tracing::debug!(path = %self.path.display(), "closing rocksdb backend");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyed::meta::StateKind;
    use crate::typed::handles::ValueState;

    /// Every value of state "v" through `for_each_value` (which settles the background half first).
    fn all_values(b: &mut RocksDbBackend, id: StateId) -> std::collections::BTreeMap<u64, u64> {
        let mut out = std::collections::BTreeMap::new();
        b.for_each_value(id, &mut |k, v| {
            out.insert(u64::from_be_bytes(k.try_into().unwrap()), u64::from_le_bytes(v.try_into().unwrap()));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn absent_rows_are_answered_by_the_bloom_filter_of_flushed_files() {
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let mut b = RocksDbBackend::open(&tmp.path().join("a"), 128, range, None, Default::default()).unwrap();
        let id = b.register_state("v", StateKind::Value).unwrap();
        for k in 0..10_000u64 {
            b.set_current_key(&k.to_be_bytes());
            b.put_value(id, &k.to_le_bytes()).unwrap();
        }
        // The cache's rows become an ingested SST file (the path of every flush and snapshot).
        b.flush(true).unwrap();
        rocksdb::perf::set_perf_stats(rocksdb::perf::PerfStatsLevel::EnableCount);
        let mut perf = rocksdb::perf::PerfContext::default();
        perf.reset();
        for k in 1_000_000..1_001_000u64 {
            b.set_current_key(&k.to_be_bytes());
            assert_eq!(b.get_value(id).unwrap(), None);
        }
        let answered = perf.metric(rocksdb::perf::PerfMetric::BloomSstMissCount);
        rocksdb::perf::set_perf_stats(rocksdb::perf::PerfStatsLevel::Disable);
        // About 1 % false positives at 10 bits per key; without a filter every read seeks a data block.
        assert!(answered > 900, "the filter answered {answered} of 1000 reads of absent rows");
        b.set_current_key(&7u64.to_be_bytes());
        assert_eq!(b.get_value(id).unwrap(), Some(&7u64.to_le_bytes()[..]));
    }

    #[test]
    fn a_new_state_reads_no_absent_row_from_rocksdb_until_rows_bypass_its_cache() {
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let mut b = RocksDbBackend::open(&tmp.path().join("a"), 128, range, None, Default::default()).unwrap();
        let id = b.register_state("v", StateKind::Value).unwrap();
        // A row put behind the cache's back (no real path does this) shows that a miss is not read.
        b.set_current_key(&3u64.to_be_bytes());
        let hidden = b.row.key(false).to_vec();
        b.db.put_cf(b.db.cf_handle("state.v").unwrap(), &hidden, b"hidden").unwrap();
        assert_eq!(b.get_value(id).unwrap(), None, "every row of a new state is in its cache: nothing to read");
        for k in 100..200u64 {
            b.set_current_key(&k.to_be_bytes());
            assert_eq!(b.get_value(id).unwrap(), None);
        }
        assert!(b.states[id.0].cache.is_empty(), "a read of an absent row leaves no entry behind");
        // A row ingested into the column family is not in the cache (which knows it as absent): reads must go
        // to RocksDB from then on.
        b.set_current_key(&7u64.to_be_bytes());
        assert_eq!(b.get_value(id).unwrap(), None);
        let key = b.row.key(false).to_vec();
        let sst = tmp.path().join("row.sst");
        ingest::write_sst(&sst, std::iter::once((&key[..], Some(&b"ingested"[..])))).unwrap();
        b.ingest_state_file("v", &sst).unwrap();
        b.set_current_key(&7u64.to_be_bytes());
        assert_eq!(b.get_value(id).unwrap(), Some(&b"ingested"[..]));
    }

    #[test]
    fn rows_frozen_at_the_barrier_reach_the_snapshot_and_the_live_db() {
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let mut b = RocksDbBackend::open(&tmp.path().join("a"), 128, range, None, Default::default()).unwrap();
        let id = b.register_state("v", StateKind::Value).unwrap();
        let put = |b: &mut RocksDbBackend, k: u64, v: u64| {
            b.set_current_key(&k.to_be_bytes());
            b.put_value(id, &v.to_le_bytes()).unwrap();
        };
        for k in 0..10_000u64 {
            put(&mut b, k, k);
        }
        b.set_current_key(&5u64.to_be_bytes());
        b.delete_value(id).unwrap();
        let mut s1 = b.snapshot_sync(&tmp.path().join("s1")).unwrap();
        assert!(s1.pending.is_some(), "the dirty rows are written in the background");
        // After the barrier, while the background half may still run: newer values, reads, and a flush that
        // must not be overtaken by the ingestion of the older, frozen rows.
        for k in (0..10_000u64).step_by(2) {
            put(&mut b, k, k + 1_000_000);
        }
        b.set_current_key(&3u64.to_be_bytes());
        assert_eq!(b.get_value(id).unwrap(), Some(&3u64.to_le_bytes()[..]));
        b.flush(true).unwrap();
        s1.ready_blocking().unwrap();
        let ingest: Vec<_> = s1.files.iter().filter(|(n, _)| n.ends_with(".sst")).cloned().collect();
        assert!(s1.files.iter().any(|(n, _)| n == ingest::INGEST_MANIFEST), "{:?}", s1.files);
        let live = all_values(&mut b, id);
        assert_eq!(live.len(), 9_999);
        for (k, v) in &live {
            assert_eq!(*v, if k % 2 == 0 { k + 1_000_000 } else { *k }, "live value of key {k}");
        }

        // The frozen rows' SST is named after the live file it became: the next snapshot holds the same file.
        let mut s2 = b.snapshot_sync(&tmp.path().join("s2")).unwrap();
        s2.ready_blocking().unwrap();
        assert!(!ingest.is_empty() && ingest.iter().all(|f| s2.files.contains(f)), "{ingest:?} not in {:?}", s2.files);

        let mut r =
            RocksDbBackend::open(&tmp.path().join("r1"), 128, range, Some(&s1.dir), Default::default()).unwrap();
        let id1 = r.register_state("v", StateKind::Value).unwrap();
        let restored = all_values(&mut r, id1);
        assert_eq!(restored.len(), 9_999, "key 5 was deleted before the barrier");
        assert!(restored.iter().all(|(k, v)| k == v), "values as of the barrier");
        let mut r =
            RocksDbBackend::open(&tmp.path().join("r2"), 128, range, Some(&s2.dir), Default::default()).unwrap();
        let id2 = r.register_state("v", StateKind::Value).unwrap();
        assert_eq!(all_values(&mut r, id2), live);

        // With every memtable empty the checkpoint skips RocksDB's flush; a row written straight to RocksDB (a
        // list append) makes it flush again.
        put(&mut b, 1, 77);
        assert!(b.memtables_empty().unwrap());
        let l = b.register_state("l", StateKind::List).unwrap();
        b.set_current_key(&1u64.to_be_bytes());
        b.append_list(l, &[1, 0, 0, 0, 9]).unwrap();
        assert!(!b.memtables_empty().unwrap());
        let mut s3 = b.snapshot_sync(&tmp.path().join("s3")).unwrap();
        s3.ready_blocking().unwrap();
        assert!(b.memtables_empty().unwrap());
        let mut r =
            RocksDbBackend::open(&tmp.path().join("r3"), 128, range, Some(&s3.dir), Default::default()).unwrap();
        let id3 = r.register_state("v", StateKind::Value).unwrap();
        let l3 = r.register_state("l", StateKind::List).unwrap();
        assert_eq!(all_values(&mut r, id3)[&1], 77);
        r.set_current_key(&1u64.to_be_bytes());
        let mut elements = Vec::new();
        r.for_each_list_element(l3, &mut |e| {
            elements.push(e.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!(elements, [vec![9]]);
    }

    #[test]
    fn a_failed_background_half_fails_the_snapshot_and_loses_no_row() {
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let mut b = RocksDbBackend::open(&tmp.path().join("a"), 128, range, None, Default::default()).unwrap();
        let id = b.register_state("v", StateKind::Value).unwrap();
        for k in 0..1000u64 {
            b.set_current_key(&k.to_be_bytes());
            b.put_value(id, &k.to_le_bytes()).unwrap();
        }
        b.fail_next_background();
        let mut s1 = b.snapshot_sync(&tmp.path().join("s1")).unwrap();
        let err = s1.ready_blocking().unwrap_err().to_string();
        assert!(err.contains("injected"), "{err}");
        // The cache holds the rows as clean: evict them, then read from RocksDB.
        b.flush(true).unwrap();
        for k in (0..1000u64).step_by(37) {
            b.set_current_key(&k.to_be_bytes());
            assert_eq!(b.get_value(id).unwrap(), Some(&k.to_le_bytes()[..]), "key {k}");
        }
        let mut s2 = b.snapshot_sync(&tmp.path().join("s2")).unwrap();
        s2.ready_blocking().unwrap();
        let mut r = RocksDbBackend::open(&tmp.path().join("r"), 128, range, Some(&s2.dir), Default::default()).unwrap();
        let id = r.register_state("v", StateKind::Value).unwrap();
        assert_eq!(all_values(&mut r, id).len(), 1000);
    }

    #[test]
    fn a_snapshot_naming_a_missing_sst_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let mut b = RocksDbBackend::open(&tmp.path().join("a"), 128, range, None, Default::default()).unwrap();
        let id = b.register_state("v", StateKind::Value).unwrap();
        b.set_current_key(b"k");
        b.put_value(id, b"v").unwrap();
        let mut s = b.snapshot_sync(&tmp.path().join("s")).unwrap();
        s.ready_blocking().unwrap();
        let manifest: ingest::IngestManifest =
            serde_json::from_slice(&std::fs::read(s.dir.join(ingest::INGEST_MANIFEST)).unwrap()).unwrap();
        let sst = manifest.files[0].file.clone();
        std::fs::remove_file(s.dir.join(&sst)).unwrap();
        let err = RocksDbBackend::open(&tmp.path().join("r"), 128, range, Some(&s.dir), Default::default())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains(&sst) && err.contains(ingest::INGEST_MANIFEST), "{err}");
    }

    #[test]
    fn values_survive_flush_snapshot_and_restore() {
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let tiny = RocksOptions { cache_bytes: 1000, ..Default::default() };
        let mut b = RocksDbBackend::open(&tmp.path().join("a"), 128, range, None, tiny.clone()).unwrap();
        let mut st = ValueState::<u64>::register(&mut b, "count").unwrap();
        for i in 0u64..500 {
            b.set_current_key(&i.to_be_bytes());
            let v = st.value(&mut b).unwrap().unwrap_or(0);
            st.update(&mut b, &(v + i)).unwrap();
        }
        b.set_current_key(&7u64.to_be_bytes());
        st.clear(&mut b).unwrap();
        let mut snap = b.snapshot_sync(&tmp.path().join("snap")).unwrap();
        snap.ready_blocking().unwrap();
        assert!(snap.files.iter().any(|(n, _)| n == "CURRENT"));
        // Writes after the snapshot must not show up in it.
        b.set_current_key(&1u64.to_be_bytes());
        st.update(&mut b, &999).unwrap();
        drop(b);
        let mut r = RocksDbBackend::open(&tmp.path().join("b"), 128, range, Some(&snap.dir), tiny).unwrap();
        let st2 = ValueState::<u64>::register(&mut r, "count").unwrap();
        let mut seen = 0;
        st2.for_each(&mut r, |k, v| {
            let key = u64::from_be_bytes(k.try_into().unwrap());
            assert_eq!(v, key);
            assert_ne!(key, 7);
            seen += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, 499);
    }

    #[test]
    fn clear_all_deletes_only_the_backends_key_groups() {
        use crate::typed::handles::{ListState, MapState};
        use weir_common::state::keygroup::key_group_for_key;
        for m in [128u32, 32768] {
            let tmp = tempfile::tempdir().unwrap();
            let full = KeyGroupRange { start: 0, end: m - 1 };
            let half = KeyGroupRange { start: 0, end: m / 2 - 1 };
            let mut a = RocksDbBackend::open(&tmp.path().join("a"), m, full, None, Default::default()).unwrap();
            let mut v = ValueState::<u64>::register(&mut a, "v").unwrap();
            let mut l = ListState::<u64>::register(&mut a, "l").unwrap();
            let mut mp = MapState::<u64, u64>::register(&mut a, "m").unwrap();
            for i in 0u64..1000 {
                a.set_current_key(&i.to_be_bytes());
                v.update(&mut a, &i).unwrap();
                l.add(&mut a, &i).unwrap();
                mp.put(&mut a, &i, &i).unwrap();
            }
            let mut snap = a.snapshot_sync(&tmp.path().join("s1")).unwrap();
            snap.ready_blocking().unwrap();
            // A backend owning half of the key groups, opened on all of them (as before clipping on rescale).
            let mut b =
                RocksDbBackend::open(&tmp.path().join("b"), m, half, Some(&snap.dir), Default::default()).unwrap();
            for name in ["v", "l", "m"] {
                let kind = match name {
                    "v" => StateKind::Value,
                    "l" => StateKind::List,
                    _ => StateKind::Map,
                };
                let id = b.register_state(name, kind).unwrap();
                b.clear_all(id).unwrap();
            }
            let mut snap = b.snapshot_sync(&tmp.path().join("s2")).unwrap();
            snap.ready_blocking().unwrap();
            let mut c =
                RocksDbBackend::open(&tmp.path().join("c"), m, full, Some(&snap.dir), Default::default()).unwrap();
            let v = ValueState::<u64>::register(&mut c, "v").unwrap();
            let l = ListState::<u64>::register(&mut c, "l").unwrap();
            let mut mp = MapState::<u64, u64>::register(&mut c, "m").unwrap();
            let (mut kept, mut cleared) = (0, 0);
            for i in 0u64..1000 {
                let k = i.to_be_bytes();
                c.set_current_key(&k);
                let owned = half.contains(key_group_for_key(&k, m));
                let want = (!owned).then_some(i);
                assert_eq!(v.value(&mut c).unwrap(), want, "m={m} key {i}");
                assert_eq!(l.get(&mut c).unwrap(), want.into_iter().collect::<Vec<_>>());
                assert_eq!(mp.get(&mut c, &i).unwrap(), want);
                if owned {
                    cleared += 1;
                } else {
                    kept += 1;
                }
            }
            assert!(kept > 0 && cleared > 0);
        }
    }

    #[test]
    fn ttl_compaction_filter_drops_expired_rows() {
        use crate::keyed::meta::StateDescriptor;
        use crate::keyed::ttl::{ManualClock, StateTtlConfig};
        use crate::typed::handles::{ListState, MapState};
        use std::time::Duration;
        fn rows(b: &RocksDbBackend, name: &str) -> usize {
            let cf = b.db.cf_handle(&RocksDbBackend::cf_name(name)).unwrap();
            b.db.iterator_cf(cf, IteratorMode::Start).count()
        }
        fn compact(b: &mut RocksDbBackend, names: &[&str]) {
            b.flush(true).unwrap();
            for name in names {
                let cf = b.db.cf_handle(&RocksDbBackend::cf_name(name)).unwrap();
                b.db.flush_cf(cf).unwrap();
                // Twice: merged list rows only reach the filter once they are plain values.
                for _ in 0..2 {
                    b.db.compact_range_cf(cf, None::<&[u8]>, None::<&[u8]>);
                }
            }
        }
        let names = ["v", "l", "m", "plain"];
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let mut b = RocksDbBackend::open(&tmp.path().join("a"), 128, range, None, Default::default()).unwrap();
        let clock = Arc::new(ManualClock::new(1000));
        b.set_clock(clock.clone());
        let ttl = StateTtlConfig::new(Duration::from_millis(100));
        let mut v = ValueState::<u64>::register(&mut b, StateDescriptor::new("v").with_ttl(ttl)).unwrap();
        let mut l = ListState::<u64>::register(&mut b, StateDescriptor::new("l").with_ttl(ttl)).unwrap();
        let mut m = MapState::<u64, u64>::register(&mut b, StateDescriptor::new("m").with_ttl(ttl)).unwrap();
        let mut plain = ValueState::<u64>::register(&mut b, "plain").unwrap();
        for i in 0u64..100 {
            clock.set(if i < 50 { 1000 } else { 1050 });
            b.set_current_key(&i.to_be_bytes());
            v.update(&mut b, &i).unwrap();
            l.add(&mut b, &i).unwrap();
            m.put(&mut b, &i, &i).unwrap();
            m.put(&mut b, &(i + 1000), &i).unwrap();
            plain.update(&mut b, &i).unwrap();
        }
        // A list with an expired and an unexpired element is kept whole (and trimmed when read).
        b.set_current_key(&0u64.to_be_bytes());
        clock.set(1050);
        l.add(&mut b, &7).unwrap();
        compact(&mut b, &names);
        assert_eq!(names.map(|n| rows(&b, n)), [100, 100, 200, 100], "nothing expired yet");
        clock.set(1100);
        let mut snap = b.snapshot_sync(&tmp.path().join("snap")).unwrap();
        snap.ready_blocking().unwrap();
        compact(&mut b, &names);
        assert_eq!(names.map(|n| rows(&b, n)), [50, 51, 100, 100]);
        b.set_current_key(&0u64.to_be_bytes());
        assert_eq!(l.get(&mut b).unwrap(), [7]);

        // After a restore the filters know the TTL from the stored kind rows, before the states are registered.
        let mut r =
            RocksDbBackend::open(&tmp.path().join("b"), 128, range, Some(&snap.dir), Default::default()).unwrap();
        let clock = Arc::new(ManualClock::new(1100));
        r.set_clock(clock.clone());
        assert_eq!(names.map(|n| rows(&r, n)), [100, 100, 200, 100]);
        compact(&mut r, &names);
        assert_eq!(names.map(|n| rows(&r, n)), [50, 51, 100, 100]);
        clock.set(1150);
        compact(&mut r, &names);
        assert_eq!(names.map(|n| rows(&r, n)), [0, 0, 0, 100]);
    }

    #[test]
    fn periodic_compaction_is_set_on_state_column_families() {
        fn options_file(b: &RocksDbBackend) -> String {
            let mut files: Vec<_> = std::fs::read_dir(&b.path)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("OPTIONS-"))
                .collect();
            files.sort_by_key(|n| n[8..].parse::<u64>().unwrap_or(0));
            std::fs::read_to_string(b.path.join(files.last().unwrap())).unwrap()
        }
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let mut b = RocksDbBackend::open(tmp.path(), 128, range, None, Default::default()).unwrap();
        b.register_state("a", StateKind::Value).unwrap();
        let default = format!("periodic_compaction_seconds={DEFAULT_PERIODIC_COMPACTION_SECS}");
        assert!(options_file(&b).contains(&default));
        b.set_periodic_compaction_seconds(3600).unwrap();
        b.register_state("b", StateKind::Map).unwrap();
        let opts = options_file(&b);
        assert_eq!(opts.matches("periodic_compaction_seconds=3600").count(), 2, "{opts}");
    }
}
