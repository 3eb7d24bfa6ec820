//! The RocksDB keyed backend: one column family `state.<name>` per state, and a write-back cache in front of
//! RocksDB for the value rows, so that hot keys cost a hash lookup, not a RocksDB read and write. The cache is
//! flushed into RocksDB in one write batch before every snapshot and whenever it grows past its byte budget.
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
//! share a prefix; the entries of one key are the interval starting at `kg | len | key`, iterated by seek. A
//! future namespace (windows, timers) goes between the key and the user key — `kg | key | namespace` for value
//! and list rows would then need the same length prefix on the key.
//!
//! Every state's kind is stored in the default column family (row `weir.kind.<name>`, one byte), so the kind is
//! checked again when the state is registered after a restore; a column family without that row predates
//! kinds and is a value state.

use crate::cache::{Cached, RowCache};
use crate::keyed::{
    decode_list, kind_conflict, prefix_successor, too_large, wrong_kind, ElementVisitor, KeyedStateBackend,
    LocalSnapshot, RowKeyBuilder, RowVisitor, StateId, StateKind, DEFAULT_MAX_VALUE_BYTES,
};
use crate::StateError;
use rocksdb::{
    ColumnFamily, Direction, IteratorMode, MergeOperands, Options, ReadOptions, WriteBatch, WriteOptions, DB,
};
use std::path::{Path, PathBuf};
use weir_common::keygroup::KeyGroupRange;

/// Tuning of the RocksDB backend.
#[derive(Clone)]
pub struct RocksOptions {
    /// Bytes the write-back cache may use (measured cost of entries) before it is flushed and emptied.
    pub cache_bytes: usize,
    /// RocksDB memtable size per column family.
    pub write_buffer_bytes: usize,
    /// Block cache shared by every backend that is given the same options (one per task manager).
    pub block_cache: Option<rocksdb::Cache>,
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
            .finish()
    }
}

impl Default for RocksOptions {
    fn default() -> Self {
        RocksOptions { cache_bytes: 64 << 20, write_buffer_bytes: 8 << 20, block_cache: None }
    }
}

/// Rows per write batch when the cache is flushed.
const FLUSH_BATCH_ROWS: usize = 32 * 1024;

/// Largest cache budget: offsets inside a cache's arena are 32-bit.
const MAX_CACHE_BYTES: usize = 2 << 30;

struct RocksState {
    name: String,
    kind: StateKind,
    /// Value rows (value kinds), or the byte length of touched lists (list kind, clean rows only).
    cache: RowCache,
}

/// Name of the list merge operator.
const MERGE_OPERATOR: &str = "weir.list-concat";

/// Row of the default column family that stores a state's kind.
fn kind_row(name: &str) -> Vec<u8> {
    format!("weir.kind.{name}").into_bytes()
}

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

fn cf_handle<'a>(db: &'a DB, name: &str) -> Result<&'a ColumnFamily, StateError> {
    db.cf_handle(&RocksDbBackend::cf_name(name))
        .ok_or_else(|| StateError::Corrupt(format!("column family of state {name:?} vanished")))
}

/// Keyed state in a local RocksDB instance.
pub struct RocksDbBackend {
    db: DB,
    path: PathBuf,
    range: KeyGroupRange,
    row: RowKeyBuilder,
    states: Vec<RocksState>,
    opts: RocksOptions,
    write_opts: WriteOptions,
    max_value_bytes: usize,
    /// Scratch row key of map rows.
    map_row: Vec<u8>,
}

fn cf_options(opts: &RocksOptions) -> Options {
    let mut o = Options::default();
    o.set_write_buffer_size(opts.write_buffer_bytes);
    o.set_max_write_buffer_number(2);
    o.set_compression_type(rocksdb::DBCompressionType::Lz4);
    o.set_merge_operator_associative(MERGE_OPERATOR, concat_merge);
    if let Some(cache) = &opts.block_cache {
        let mut table = rocksdb::BlockBasedOptions::default();
        table.set_block_cache(cache);
        o.set_block_based_table_factory(&table);
    }
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
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(|e| StateError::io(format!("clear {}", path.display()), e))?;
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
        let db = if existing.is_empty() {
            DB::open(&db_opts, &path)?
        } else {
            let cfs = existing.iter().map(|n| rocksdb::ColumnFamilyDescriptor::new(n, cf_options(&opts)));
            DB::open_cf_descriptors(&db_opts, &path, cfs)?
        };
        let mut write_opts = WriteOptions::default();
        // Durability comes from checkpoints, not from the WAL (as in Flink).
        write_opts.disable_wal(true);
        Ok(RocksDbBackend {
            db,
            path,
            range,
            row: RowKeyBuilder::new(max_parallelism),
            states: Vec::new(),
            opts: RocksOptions { cache_bytes: opts.cache_bytes.min(MAX_CACHE_BYTES), ..opts },
            write_opts,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            map_row: Vec::new(),
        })
    }

    fn cf_name(state: &str) -> String {
        format!("state.{state}")
    }

    /// Writes every dirty cache entry into RocksDB in one batch; with `clear`, empties the cache too.
    pub fn flush(&mut self, clear: bool) -> Result<(), StateError> {
        // Several moderate batches rather than one huge one: the batch is a copy of every dirty row.
        let mut batch = WriteBatch::default();
        let mut write_error = None;
        for st in &mut self.states {
            let cf = self
                .db
                .cf_handle(&Self::cf_name(&st.name))
                .ok_or_else(|| StateError::Corrupt(format!("column family of state {:?} vanished", st.name)))?;
            let (db, write_opts) = (&self.db, &self.write_opts);
            st.cache.drain_dirty(|k, v| {
                match v {
                    Some(v) => batch.put_cf(cf, k, v),
                    None => batch.delete_cf(cf, k),
                }
                if batch.len() >= FLUSH_BATCH_ROWS && write_error.is_none() {
                    write_error = db.write_opt(std::mem::take(&mut batch), write_opts).err();
                }
            });
        }
        if let Some(e) = write_error {
            return Err(e.into());
        }
        if !batch.is_empty() {
            self.db.write_opt(batch, &self.write_opts)?;
        }
        if clear {
            for st in &mut self.states {
                st.cache.clear();
            }
        }
        Ok(())
    }

    fn cache_bytes(&self) -> usize {
        self.states.iter().map(|s| s.cache.memory_bytes()).sum()
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
        if let Cached::Hit(Some(len)) = self.states[state.0].cache.get(&self.row.row) {
            if let Ok(len) = <[u8; 8]>::try_from(len) {
                return Ok(u64::from_le_bytes(len) as usize);
            }
        }
        let cf = cf_handle(&self.db, &self.states[state.0].name)?;
        let len = self.db.get_pinned_cf(cf, &self.row.row)?.map_or(0, |v| v.len());
        self.remember_list_len(state, len)?;
        Ok(len)
    }

    /// Caches the current key's list length (a clean row: never written to RocksDB).
    fn remember_list_len(&mut self, state: StateId, len: usize) -> Result<(), StateError> {
        self.make_room(state)?;
        self.states[state.0].cache.insert_clean(&self.row.row, Some(&(len as u64).to_le_bytes()));
        Ok(())
    }

    /// Sets the map-row scratch key to the current key's row of `user_key`.
    fn set_map_row(&mut self, user_key: &[u8]) {
        self.row.map_prefix(&mut self.map_row);
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

    /// Flushes and empties the cache when a new row would not fit its budget.
    fn make_room(&mut self, state: StateId) -> Result<(), StateError> {
        if matches!(self.states[state.0].cache.get(&self.row.row), Cached::Miss)
            && self.cache_bytes() > self.opts.cache_bytes
        {
            self.flush(true)?;
        }
        Ok(())
    }
}

impl KeyedStateBackend for RocksDbBackend {
    fn register_state(&mut self, name: &str, kind: StateKind) -> Result<StateId, StateError> {
        if let Some(i) = self.states.iter().position(|s| s.name == name) {
            let existing = self.states[i].kind;
            if existing != kind {
                return Err(kind_conflict(name, existing, kind));
            }
            return Ok(StateId(i));
        }
        let cf = Self::cf_name(name);
        let stored = match self.db.get(kind_row(name))? {
            Some(b) if b.len() == 1 => Some(StateKind::from_byte(b[0])?),
            Some(_) => return Err(StateError::Corrupt(format!("kind row of state {name:?} is malformed"))),
            // A column family from before kinds were recorded holds value rows.
            None if self.db.cf_handle(&cf).is_some() => Some(StateKind::Value),
            None => None,
        };
        if let Some(existing) = stored {
            if existing != kind {
                return Err(kind_conflict(name, existing, kind));
            }
        }
        if self.db.cf_handle(&cf).is_none() {
            self.db.create_cf(&cf, &cf_options(&self.opts))?;
        }
        self.db.put_opt(kind_row(name), [kind.to_byte()], &self.write_opts)?;
        self.states.push(RocksState { name: name.to_string(), kind, cache: RowCache::default() });
        Ok(StateId(self.states.len() - 1))
    }

    fn set_max_value_bytes(&mut self, limit: usize) {
        self.max_value_bytes = limit;
    }

    fn set_current_key(&mut self, key: &[u8]) {
        self.row.set(key);
    }

    fn get_value(&mut self, state: StateId) -> Result<Option<&[u8]>, StateError> {
        self.check(state, "get_value", StateKind::is_value_row)?;
        if matches!(self.states[state.0].cache.get(&self.row.row), Cached::Miss) {
            self.make_room(state)?;
            let st = &mut self.states[state.0];
            let cf = self
                .db
                .cf_handle(&Self::cf_name(&st.name))
                .ok_or_else(|| StateError::Corrupt(format!("column family of state {:?} vanished", st.name)))?;
            let value = self.db.get_pinned_cf(cf, &self.row.row)?;
            st.cache.insert_clean(&self.row.row, value.as_deref());
        }
        match self.states[state.0].cache.get(&self.row.row) {
            Cached::Hit(v) => Ok(v),
            Cached::Miss => Err(StateError::Corrupt("cache entry vanished".into())),
        }
    }

    fn put_value(&mut self, state: StateId, value: &[u8]) -> Result<(), StateError> {
        self.check(state, "put_value", StateKind::is_value_row)?;
        if value.len() > self.max_value_bytes {
            let st = &self.states[state.0];
            return Err(too_large(&st.name, st.kind, value.len(), self.max_value_bytes));
        }
        // A write needs no read: the row is cached dirty and reaches RocksDB at the next flush.
        self.make_room(state)?;
        self.states[state.0].cache.put(&self.row.row, value);
        Ok(())
    }

    fn delete_value(&mut self, state: StateId) -> Result<(), StateError> {
        self.check(state, "delete_value", StateKind::is_value_row)?;
        self.make_room(state)?;
        self.states[state.0].cache.delete(&self.row.row);
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
        for item in self.db.iterator_cf_opt(cf, ro, IteratorMode::From(&lo, Direction::Forward)) {
            let (k, v) = item?;
            f(&k[prefix..], &v)?;
        }
        Ok(())
    }

    fn for_each_list_element(&mut self, state: StateId, f: &mut ElementVisitor<'_>) -> Result<(), StateError> {
        self.check(state, "list get", |k| k == StateKind::List)?;
        let st = &self.states[state.0];
        let cf = cf_handle(&self.db, &st.name)?;
        match self.db.get_pinned_cf(cf, &self.row.row)? {
            Some(v) => decode_list(&st.name, &v, f),
            None => Ok(()),
        }
    }

    fn append_list(&mut self, state: StateId, encoded: &[u8]) -> Result<(), StateError> {
        self.check(state, "list add", |k| k == StateKind::List)?;
        let old = self.list_len(state)?;
        let st = &mut self.states[state.0];
        let total = old + encoded.len();
        if total > self.max_value_bytes {
            return Err(too_large(&st.name, st.kind, total, self.max_value_bytes));
        }
        let cf = cf_handle(&self.db, &st.name)?;
        self.db.merge_cf_opt(cf, &self.row.row, encoded, &self.write_opts)?;
        st.cache.insert_clean(&self.row.row, Some(&(total as u64).to_le_bytes()));
        Ok(())
    }

    fn replace_list(&mut self, state: StateId, encoded: &[u8]) -> Result<(), StateError> {
        self.check(state, "list update", |k| k == StateKind::List)?;
        let st = &self.states[state.0];
        if encoded.len() > self.max_value_bytes {
            return Err(too_large(&st.name, st.kind, encoded.len(), self.max_value_bytes));
        }
        let cf = cf_handle(&self.db, &st.name)?;
        if encoded.is_empty() {
            self.db.delete_cf_opt(cf, &self.row.row, &self.write_opts)?;
        } else {
            self.db.put_cf_opt(cf, &self.row.row, encoded, &self.write_opts)?;
        }
        self.remember_list_len(state, encoded.len())
    }

    fn map_get(&mut self, state: StateId, user_key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.check(state, "map get", |k| k == StateKind::Map)?;
        self.set_map_row(user_key);
        let cf = cf_handle(&self.db, &self.states[state.0].name)?;
        Ok(self.db.get_cf(cf, &self.map_row)?)
    }

    fn map_put(&mut self, state: StateId, user_key: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.check(state, "map put", |k| k == StateKind::Map)?;
        let st = &self.states[state.0];
        if value.len() > self.max_value_bytes {
            return Err(too_large(&st.name, st.kind, value.len(), self.max_value_bytes));
        }
        self.set_map_row(user_key);
        let cf = cf_handle(&self.db, &self.states[state.0].name)?;
        Ok(self.db.put_cf_opt(cf, &self.map_row, value, &self.write_opts)?)
    }

    fn map_remove(&mut self, state: StateId, user_key: &[u8]) -> Result<(), StateError> {
        self.check(state, "map remove", |k| k == StateKind::Map)?;
        self.set_map_row(user_key);
        let cf = cf_handle(&self.db, &self.states[state.0].name)?;
        Ok(self.db.delete_cf_opt(cf, &self.map_row, &self.write_opts)?)
    }

    fn for_each_map_entry(&mut self, state: StateId, f: &mut RowVisitor<'_>) -> Result<(), StateError> {
        self.check(state, "map iteration", |k| k == StateKind::Map)?;
        self.row.map_prefix(&mut self.map_row);
        let cf = cf_handle(&self.db, &self.states[state.0].name)?;
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
        self.row.map_prefix(&mut self.map_row);
        let cf = cf_handle(&self.db, &self.states[state.0].name)?;
        match self.map_iter(cf, &self.map_row).next() {
            None => Ok(true),
            Some(item) => Ok(!item?.0.starts_with(&self.map_row)),
        }
    }

    fn clear_key(&mut self, state: StateId) -> Result<(), StateError> {
        match self.states[state.0].kind {
            StateKind::Value | StateKind::Reducing | StateKind::Aggregating => self.delete_value(state),
            StateKind::List => self.replace_list(state, &[]),
            StateKind::Map => {
                self.row.map_prefix(&mut self.map_row);
                let cf = cf_handle(&self.db, &self.states[state.0].name)?;
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
        // Cached rows of this state (dirty or not) would outlive the range delete: drop them unwritten.
        let st = &mut self.states[state.0];
        st.cache.clear();
        let cf = cf_handle(&self.db, &st.name)?;
        let (lo, hi) = self.row.range_bounds(self.range);
        self.db.delete_range_cf_opt(cf, lo, hi, &self.write_opts)?;
        Ok(())
    }

    fn snapshot_sync(&mut self, dir: &Path) -> Result<LocalSnapshot, StateError> {
        self.flush(false)?;
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(|e| StateError::io(format!("create {}", parent.display()), e))?;
        }
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint(dir)?;
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| StateError::io(format!("list {}", dir.display()), e))? {
            let entry = entry.map_err(|e| StateError::io(format!("list {}", dir.display()), e))?;
            let meta = entry.metadata().map_err(|e| StateError::io("stat snapshot file", e))?;
            if meta.is_file() {
                files.push((entry.file_name().to_string_lossy().into_owned(), meta.len()));
            }
        }
        files.sort();
        Ok(LocalSnapshot { dir: dir.to_path_buf(), files, backend: "rocksdb", key_group_range: self.range })
    }

    fn kind(&self) -> &'static str {
        "rocksdb"
    }
}

impl Drop for RocksDbBackend {
    fn drop(&mut self) {
        tracing::debug!(path = %self.path.display(), "closing rocksdb backend");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyed::{StateKind, ValueState};

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
        let snap = b.snapshot_sync(&tmp.path().join("snap")).unwrap();
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
        use crate::keyed::{ListState, MapState};
        use weir_common::keygroup::key_group_for_key;
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
            let snap = a.snapshot_sync(&tmp.path().join("s1")).unwrap();
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
            let snap = b.snapshot_sync(&tmp.path().join("s2")).unwrap();
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
}
