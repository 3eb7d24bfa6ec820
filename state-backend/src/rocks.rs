//! The RocksDB keyed backend: one column family per state, row key `key_group | key`, and a write-back cache
//! in front of RocksDB so that hot keys cost a hash lookup, not a RocksDB read and write. The cache is flushed
//! into RocksDB in one write batch before every snapshot and whenever it grows past its byte budget.

use crate::cache::{Cached, RowCache};
use crate::keyed::{KeyedStateBackend, LocalSnapshot, RowKeyBuilder, RowVisitor, StateId};
use crate::StateError;
use rocksdb::{Direction, IteratorMode, Options, ReadOptions, WriteBatch, WriteOptions, DB};
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
    cache: RowCache,
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
}

fn cf_options(opts: &RocksOptions) -> Options {
    let mut o = Options::default();
    o.set_write_buffer_size(opts.write_buffer_bytes);
    o.set_max_write_buffer_number(2);
    o.set_compression_type(rocksdb::DBCompressionType::Lz4);
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
    fn register_value_state(&mut self, name: &str) -> Result<StateId, StateError> {
        if let Some(i) = self.states.iter().position(|s| s.name == name) {
            return Ok(StateId(i));
        }
        let cf = Self::cf_name(name);
        if self.db.cf_handle(&cf).is_none() {
            self.db.create_cf(&cf, &cf_options(&self.opts))?;
        }
        self.states.push(RocksState { name: name.to_string(), cache: RowCache::default() });
        Ok(StateId(self.states.len() - 1))
    }

    fn set_current_key(&mut self, key: &[u8]) {
        self.row.set(key);
    }

    fn get_value(&mut self, state: StateId) -> Result<Option<&[u8]>, StateError> {
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
        // A write needs no read: the row is cached dirty and reaches RocksDB at the next flush.
        self.make_room(state)?;
        self.states[state.0].cache.put(&self.row.row, value);
        Ok(())
    }

    fn delete_value(&mut self, state: StateId) -> Result<(), StateError> {
        self.make_room(state)?;
        self.states[state.0].cache.delete(&self.row.row);
        Ok(())
    }

    fn for_each_value(&mut self, state: StateId, f: &mut RowVisitor<'_>) -> Result<(), StateError> {
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
    use crate::keyed::ValueState;

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
}
