//! The keyed-state backend trait, shared by RocksDB and heap, and the local snapshot it produces (opening a
//! backend, fresh or restored, is `restore/rescale.rs`'s `open_keyed_backend`).
//!
//! Every access is scoped to the *current key*, set once per record with
//! [`KeyedStateBackend::set_current_key`]. Rows are addressed by `key_group | key` (the row layout, `layout.rs`), so that
//! the state of a key-group range is one contiguous interval.
//!
//! A state is registered under a name with a [`StateKind`]; registering the same name again returns the same
//! state if the kind matches and fails with [`StateError::Declaration`] naming both kinds if not. The kind is
//! part of the snapshot, so the check holds across restores (`meta.rs`). Operators use the typed handles of
//! `typed/handles.rs` (`ValueState` and the others), which call this trait.
//!
//! ## Value size limit
//!
//! A write whose serialized value — for a list, the list's total after the write — exceeds the backend's limit
//! ([`DEFAULT_MAX_VALUE_BYTES`], changed with [`KeyedStateBackend::set_max_value_bytes`]) is refused with a
//! [`StateError::Declaration`] naming the state and the size and suggesting `MapState`; nothing is written.
//!
//! ## Modules
//!
//! What the trait's bytes mean, which every backend shares: [`layout`], the row layout (row keys
//! `key_group | key [| namespace]`, the list format, the byte bounds of a key-group range) and the row and element
//! visitors that walk it; [`meta`], a state's kind and options, the kind record that stores them and the
//! declaration checks; [`ttl`], state time-to-live and the clock it reads; [`migrate`], rewriting a restored
//! state's stored values ([`KeyedStateBackend::migrate_state`]).

pub mod layout;
pub mod meta;
pub mod migrate;
pub mod ttl;

use crate::error::StateError;
use crate::keyed::layout::{ElementVisitor, RowVisitor, TimerRow, TimerScan};
use crate::keyed::meta::{StateKind, StateOptions};
use crate::keyed::ttl::Clock;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::oneshot;
use weir_common::state::keygroup::KeyGroupRange;

/// The handle of a registered state inside one backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateId(pub(crate) usize);

/// A local, immutable copy of a backend's state, ready for upload.
#[derive(Debug)]
pub struct LocalSnapshot {
    /// Directory holding the files.
    pub dir: PathBuf,
    /// File names (inside `dir`) and sizes.
    pub files: Vec<(String, u64)>,
    /// `rocksdb`, `heap` or `canonical` (the names `SnapshotFormat::from_name` in `snapshot/format.rs` reads).
    pub backend: &'static str,
    /// Key groups the snapshot holds.
    pub key_group_range: KeyGroupRange,
    /// Files still being written in the background (RocksDB: the SSTs of rows frozen at the barrier; heap: the
    /// file, while its timers are written); they join `files` through [`LocalSnapshot::ready`].
    pub pending: Option<PendingFiles>,
}

impl LocalSnapshot {
    /// Waits until every file of the snapshot is written.
    pub async fn ready(&mut self) -> Result<(), StateError> {
        if let Some(pending) = self.pending.take() {
            let more = pending.wait().await?;
            self.files.extend(more);
            self.files.sort();
        }
        Ok(())
    }

    /// [`LocalSnapshot::ready`] for callers outside an async runtime (it blocks the thread).
    pub fn ready_blocking(&mut self) -> Result<(), StateError> {
        if let Some(pending) = self.pending.take() {
            let more = pending
                .0
                .blocking_recv()
                .map_err(|_| StateError::Corrupt("the snapshot's SST writer stopped before finishing".to_string()))??;
            self.files.extend(more);
            self.files.sort();
        }
        Ok(())
    }
}

/// Snapshot files a background thread is still writing.
pub struct PendingFiles(pub(crate) oneshot::Receiver<Result<Vec<(String, u64)>, StateError>>);

impl std::fmt::Debug for PendingFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PendingFiles")
    }
}

impl PendingFiles {
    /// Waits for the files (name inside the snapshot directory, size).
    pub async fn wait(self) -> Result<Vec<(String, u64)>, StateError> {
        self.0
            .await
            .map_err(|_| StateError::Corrupt("the snapshot's SST writer stopped before finishing".to_string()))?
    }
}

/// The largest serialized value (or list total) a state accepts by default: 256 MiB.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 256 << 20;

/// Keyed state storage for one operator subtask.
///
/// The byte-level methods below are what the typed handles (`ValueState`, `ListState`, `MapState`,
/// `ReducingState`, `AggregatingState`) call; operators use the handles. Each method checks that the
/// state was registered with a kind that supports it.
pub trait KeyedStateBackend: Send {
    /// Registers a state of `kind` with `options`, or returns the existing one of that name if it was declared
    /// the same way. Another kind is a [`StateError::Declaration`] naming both kinds; so is another TTL config
    /// and a different choice of namespaces. After a restore the TTL config may change, and turning TTL on or off
    /// migrates the state's stored values (timestamps added, stamped now, or stripped).
    fn register_state_with_options(
        &mut self,
        name: &str,
        kind: StateKind,
        options: &StateOptions,
    ) -> Result<StateId, StateError>;
    /// Registers a state of `kind` without TTL or namespaces (see
    /// [`KeyedStateBackend::register_state_with_options`]).
    fn register_state(&mut self, name: &str, kind: StateKind) -> Result<StateId, StateError> {
        self.register_state_with_options(name, kind, &StateOptions::default())
    }
    /// Sets the namespace (its serialized bytes) that following accesses to *namespaced* states are scoped to,
    /// as Flink scopes window and timer state to a window; other states have no namespace. Empty until set.
    fn set_current_namespace(&mut self, namespace: &[u8]);
    /// Sets the processing-time clock of TTL (default [`crate::keyed::ttl::SystemClock`]).
    fn set_clock(&mut self, clock: Arc<dyn Clock>);
    /// The TTL clock's current time in milliseconds.
    fn now_ms(&self) -> u64;
    /// Sets the largest serialized value (or list total) a write may produce; larger writes are refused and
    /// write nothing. Default [`DEFAULT_MAX_VALUE_BYTES`].
    fn set_max_value_bytes(&mut self, limit: usize);
    /// Sets the key that following accesses are scoped to (its serialized bytes).
    fn set_current_key(&mut self, key: &[u8]);
    /// Sets the current key whose key group the caller already knows (the data plane computes it once per row,
    /// when it routes the row): saves hashing the key a second time. `key_group` must be the key's.
    fn set_current_key_in_group(&mut self, key: &[u8], key_group: u32) {
        let _ = key_group;
        self.set_current_key(key);
    }
    /// The value of the current key, if any (value, reducing and aggregating states).
    fn get_value(&mut self, state: StateId) -> Result<Option<&[u8]>, StateError>;
    /// Sets the value of the current key.
    fn put_value(&mut self, state: StateId, value: &[u8]) -> Result<(), StateError>;
    /// Removes the value of the current key.
    fn delete_value(&mut self, state: StateId) -> Result<(), StateError>;
    /// Calls `f(key, value)` for every key of this backend's key-group range that has a value (in the current
    /// namespace, for a namespaced state).
    fn for_each_value(&mut self, state: StateId, f: &mut RowVisitor<'_>) -> Result<(), StateError>;
    /// Calls `f(element)` for every element of the current key's list, in order.
    fn for_each_list_element(&mut self, state: StateId, f: &mut ElementVisitor<'_>) -> Result<(), StateError>;
    /// Appends elements to the current key's list; `encoded` is their concatenation, each element a
    /// little-endian `u32` length and its bytes (see [`encode_list_element`]).
    fn append_list(&mut self, state: StateId, encoded: &[u8]) -> Result<(), StateError>;
    /// Replaces the current key's list by `encoded` (same format; empty removes the list).
    fn replace_list(&mut self, state: StateId, encoded: &[u8]) -> Result<(), StateError>;
    /// The value of `user_key` in the current key's map.
    fn map_get(&mut self, state: StateId, user_key: &[u8]) -> Result<Option<Vec<u8>>, StateError>;
    /// Sets `user_key` to `value` in the current key's map.
    fn map_put(&mut self, state: StateId, user_key: &[u8], value: &[u8]) -> Result<(), StateError>;
    /// Removes `user_key` from the current key's map.
    fn map_remove(&mut self, state: StateId, user_key: &[u8]) -> Result<(), StateError>;
    /// Calls `f(user_key, value)` for every entry of the current key's map, in user-key byte order.
    fn for_each_map_entry(&mut self, state: StateId, f: &mut RowVisitor<'_>) -> Result<(), StateError>;
    /// Whether the current key's map has no entry.
    fn map_is_empty(&mut self, state: StateId) -> Result<bool, StateError>;
    /// Removes everything the current key holds in `state` (any kind).
    fn clear_key(&mut self, state: StateId) -> Result<(), StateError>;
    /// Removes `state`'s data for every key (and every namespace) of this backend (any kind), without visiting
    /// keys one by one.
    fn clear_all(&mut self, state: StateId) -> Result<(), StateError>;
    /// The current key (its serialized bytes, without the key-group prefix) and namespace.
    fn current_key_and_namespace(&self) -> (&[u8], &[u8]);
    /// The key group of the current key.
    fn current_key_group(&self) -> Result<u32, StateError>;
    /// Adds a timer at `timestamp` for the current key and namespace to `state` (of kind
    /// [`StateKind::Timers`]). A timer is unique per key, namespace and timestamp: returns the key's group and
    /// whether the timer is new.
    fn add_timer(&mut self, state: StateId, timestamp: i64) -> Result<(u32, bool), StateError>;
    /// Removes the current key and namespace's timer at `timestamp` from `state`; whether there was one.
    fn delete_timer(&mut self, state: StateId, timestamp: i64) -> Result<bool, StateError>;
    /// Reads the earliest timer of key group `key_group` at or after `from` — and after `after`, if given, a
    /// timer of that key group — into `out`; false if there is none. The timers of a key group are ordered by
    /// timestamp (then key and namespace bytes).
    fn first_timer(
        &mut self,
        state: StateId,
        key_group: u32,
        from: i64,
        after: Option<&TimerRow>,
        out: &mut TimerRow,
    ) -> Result<bool, StateError>;
    /// Calls `f` with key group `key_group`'s timer rows (no key-group prefix) in order from `from` or past `after`.
    fn scan_timers(
        &mut self,
        state: StateId,
        key_group: u32,
        from: i64,
        after: Option<&[u8]>,
        f: &mut TimerScan<'_>,
    ) -> Result<(), StateError>;
    /// Removes `timer` of key group `key_group` from `state`.
    fn remove_timer(&mut self, state: StateId, key_group: u32, timer: &TimerRow) -> Result<(), StateError>;
    /// How many timers `state` holds.
    fn timer_count(&mut self, state: StateId) -> Result<u64, StateError>;
    /// The synchronous part of a snapshot: an immutable copy of all state in `dir` (which must not exist yet,
    /// and should be on the same filesystem as the backend so RocksDB can hard-link). Some files may still be
    /// written in the background: [`LocalSnapshot::ready`] waits for them.
    fn snapshot_sync(&mut self, dir: &Path) -> Result<LocalSnapshot, StateError>;
    /// Rewrites every stored value of state `name` — restored, and not registered since — through `migration`
    /// (value rows, list elements, map values; TTL timestamps and keys stay as they are), before the operator
    /// reads it: the state's serializer changed in a way that needs it. Returns the number of values rewritten.
    fn migrate_state(
        &mut self,
        name: &str,
        migration: &mut crate::keyed::migrate::ValueMigration<'_>,
    ) -> Result<u64, StateError>;
    /// Name of the backend kind.
    fn kind(&self) -> &'static str;
    /// Every state the backend holds (registered, or restored and not registered again), by name.
    fn state_summaries(&self) -> Result<Vec<crate::keyed::meta::StateSummary>, StateError>;
    /// Engine properties per state for monitoring, as `(state, property, value)` (RocksDB's native
    /// `rocksdb.*` properties; none for the heap).
    fn properties(&self) -> Vec<(String, &'static str, u64)> {
        Vec::new()
    }
    /// Every stored state and row, in one form for both backends (tests compare backends by it).
    #[cfg(test)]
    fn stored(&mut self) -> StoredContent;
}

/// What a backend stores: every state's kind record, and every row as `(state, row key, map user key, value)`
/// with map rows split as the heap keeps them (tests only).
#[cfg(test)]
pub(crate) type StoredContent = (
    std::collections::BTreeMap<String, crate::keyed::meta::KindRecord>,
    std::collections::BTreeSet<(String, Vec<u8>, Option<Vec<u8>>, Vec<u8>)>,
);
