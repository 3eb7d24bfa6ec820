//! The keyed-state backend trait, shared by RocksDB and heap, and the typed state handles operators use.
//!
//! Every access is scoped to the *current key*, set once per record with
//! [`KeyedStateBackend::set_current_key`]. Rows are addressed by `key_group | key`, so that the state of a
//! key-group range is one contiguous interval.

use crate::codec::StateCodec;
use crate::{heap::HeapBackend, rocks::RocksDbBackend, StateError};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use weir_common::keygroup::KeyGroupRange;
use weir_common::spec::StateBackendKind;

/// The handle of a registered state inside one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateId(pub(crate) usize);

/// A local, immutable copy of a backend's state, ready for upload.
#[derive(Clone, Debug)]
pub struct LocalSnapshot {
    /// Directory holding the files.
    pub dir: PathBuf,
    /// File names (inside `dir`) and sizes.
    pub files: Vec<(String, u64)>,
    /// `rocksdb` or `heap`.
    pub backend: &'static str,
    /// Key groups the snapshot holds.
    pub key_group_range: KeyGroupRange,
}

/// A visitor of `(key, value)` rows.
pub type RowVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), StateError> + 'a;

/// Keyed state storage for one operator subtask.
pub trait KeyedStateBackend: Send {
    /// Registers a value state, or returns the existing one of that name.
    fn register_value_state(&mut self, name: &str) -> Result<StateId, StateError>;
    /// Sets the key that following accesses are scoped to (its serialized bytes).
    fn set_current_key(&mut self, key: &[u8]);
    /// The value of the current key, if any.
    fn get_value(&mut self, state: StateId) -> Result<Option<&[u8]>, StateError>;
    /// Sets the value of the current key.
    fn put_value(&mut self, state: StateId, value: &[u8]) -> Result<(), StateError>;
    /// Removes the value of the current key.
    fn delete_value(&mut self, state: StateId) -> Result<(), StateError>;
    /// Calls `f(key, value)` for every key of this backend's key-group range that has a value.
    fn for_each_value(&mut self, state: StateId, f: &mut RowVisitor<'_>) -> Result<(), StateError>;
    /// The synchronous part of a snapshot: writes an immutable copy of all state into `dir` (which must not
    /// exist yet, and should be on the same filesystem as the backend so RocksDB can hard-link).
    fn snapshot_sync(&mut self, dir: &Path) -> Result<LocalSnapshot, StateError>;
    /// Name of the backend kind.
    fn kind(&self) -> &'static str;
}

/// Opens a keyed backend in `work_dir`, restoring from a downloaded snapshot directory if given.
pub fn open_keyed_backend(
    kind: StateBackendKind,
    work_dir: &Path,
    max_parallelism: u32,
    range: KeyGroupRange,
    restore_dir: Option<&Path>,
    rocks: &crate::rocks::RocksOptions,
) -> Result<Box<dyn KeyedStateBackend>, StateError> {
    Ok(match kind {
        StateBackendKind::Rocksdb => {
            Box::new(RocksDbBackend::open(work_dir, max_parallelism, range, restore_dir, rocks.clone())?)
        }
        StateBackendKind::Heap => Box::new(HeapBackend::open(max_parallelism, range, restore_dir)?),
    })
}

/// A typed value state: one `T` per key.
pub struct ValueState<T> {
    id: StateId,
    scratch: Vec<u8>,
    _t: PhantomData<fn() -> T>,
}

impl<T: StateCodec> ValueState<T> {
    /// Registers (or finds) the state `name` in a backend.
    pub fn register(backend: &mut dyn KeyedStateBackend, name: &str) -> Result<Self, StateError> {
        Ok(ValueState { id: backend.register_value_state(name)?, scratch: Vec::new(), _t: PhantomData })
    }

    /// The current key's value.
    pub fn value(&self, backend: &mut dyn KeyedStateBackend) -> Result<Option<T>, StateError> {
        backend.get_value(self.id)?.map(T::decode).transpose()
    }

    /// Sets the current key's value.
    pub fn update(&mut self, backend: &mut dyn KeyedStateBackend, v: &T) -> Result<(), StateError> {
        self.scratch.clear();
        v.encode(&mut self.scratch);
        backend.put_value(self.id, &self.scratch)
    }

    /// Removes the current key's value.
    pub fn clear(&self, backend: &mut dyn KeyedStateBackend) -> Result<(), StateError> {
        backend.delete_value(self.id)
    }

    /// Calls `f(key, value)` for every key with a value.
    pub fn for_each(
        &self,
        backend: &mut dyn KeyedStateBackend,
        mut f: impl FnMut(&[u8], T) -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        backend.for_each_value(self.id, &mut |k, v| f(k, T::decode(v)?))
    }
}

/// Builds row keys (`key_group | key`) for the current key, shared by both backends.
#[derive(Debug)]
pub(crate) struct RowKeyBuilder {
    pub max_parallelism: u32,
    pub prefix_len: usize,
    pub row: Vec<u8>,
}

impl RowKeyBuilder {
    pub fn new(max_parallelism: u32) -> Self {
        RowKeyBuilder {
            max_parallelism,
            prefix_len: weir_common::keygroup::key_group_prefix_len(max_parallelism),
            row: Vec::with_capacity(32),
        }
    }

    pub fn set(&mut self, key: &[u8]) {
        let kg = weir_common::keygroup::key_group_for_key(key, self.max_parallelism);
        self.row.clear();
        weir_common::keygroup::write_key_group_prefix(kg, self.max_parallelism, &mut self.row);
        self.row.extend_from_slice(key);
    }

    /// First row-key byte string of a key-group range and the first one past it.
    pub fn bounds(&self, range: KeyGroupRange) -> (Vec<u8>, Option<Vec<u8>>) {
        use weir_common::ids::KeyGroup;
        let mut lo = Vec::new();
        weir_common::keygroup::write_key_group_prefix(KeyGroup(range.start), self.max_parallelism, &mut lo);
        let hi = if range.end + 1 >= self.max_parallelism {
            None
        } else {
            let mut hi = Vec::new();
            weir_common::keygroup::write_key_group_prefix(KeyGroup(range.end + 1), self.max_parallelism, &mut hi);
            Some(hi)
        };
        (lo, hi)
    }
}
