//! The keyed-state backend trait, shared by RocksDB and heap, and the typed state handles operators use.
//!
//! Every access is scoped to the *current key*, set once per record with
//! [`KeyedStateBackend::set_current_key`]. Rows are addressed by `key_group | key`, so that the state of a
//! key-group range is one contiguous interval.
//!
//! ## State kinds
//!
//! A state is registered under a name with a [`StateKind`]; registering the same name again returns the same
//! state if the kind matches and fails with [`StateError::Declaration`] naming both kinds if not. The kind is
//! part of the snapshot, so the check holds across restores. The typed handles:
//!
//! | handle | per key | operations |
//! |---|---|---|
//! | [`ValueState<T>`] | one `T` | `value`, `update`, `clear`, `for_each` (all keys) |
//! | [`ListState<T>`] | a list of `T` | `get`, `add`, `add_all`, `update`, `clear` |
//! | [`MapState<K, V>`] | a map `K → V`, one row per entry | `get`, `put`, `remove`, `contains`, `is_empty`, `entries`, `keys`, `for_each`, `clear` |
//! | [`ReducingState<T>`] | one `T`, folded by a reduce function | `get`, `add`, `clear` |
//! | [`AggregatingState<In, Acc, Out>`] | one `Acc` of an [`AggregateFunction`] | `get`, `add`, `clear` |
//!
//! Every handle also has `clear_all`, which empties the state for every key of the backend at once (RocksDB:
//! one range delete over the backend's key-group range; heap: clearing the maps).
//!
//! ## Value size limit
//!
//! A write whose serialized value — for a list, the list's total after the write — exceeds the backend's limit
//! ([`DEFAULT_MAX_VALUE_BYTES`], changed with [`KeyedStateBackend::set_max_value_bytes`]) is refused with a
//! [`StateError::Declaration`] naming the state and the size and suggesting [`MapState`]; nothing is written.
//!
//! ## Time-to-live
//!
//! Every handle also has `register_with_ttl`, taking a [`StateTtlConfig`]; expired values read as absent
//! (see [`crate::ttl`] for the semantics, the stored format and the cleanup strategies). The clock is the
//! backend's ([`KeyedStateBackend::set_clock`]).
//!
//! Namespaces (windows, timers) do not exist yet; the RocksDB module docs say where they will go in row keys.

use crate::codec::StateCodec;
use crate::ttl::{split_ts, stamp, Clock, StateTtlConfig};
use crate::{heap::HeapBackend, rocks::RocksDbBackend, StateError};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use weir_common::keygroup::KeyGroupRange;
use weir_common::spec::StateBackendKind;

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
    /// `rocksdb` or `heap`.
    pub backend: &'static str,
    /// Key groups the snapshot holds.
    pub key_group_range: KeyGroupRange,
    /// Files still being written in the background (RocksDB: the SSTs of rows frozen at the barrier); they
    /// join `files` through [`LocalSnapshot::ready`].
    pub pending: Option<crate::ingest::PendingFiles>,
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

/// A visitor of `(key, value)` rows.
pub type RowVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), StateError> + 'a;

/// A visitor of single byte strings (list elements).
pub type ElementVisitor<'a> = dyn FnMut(&[u8]) -> Result<(), StateError> + 'a;

/// The largest serialized value (or list total) a state accepts by default: 256 MiB.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 256 << 20;

/// How a state is declared besides its name and kind: what a Flink state descriptor adds (the value types are
/// the typed handle's).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StateOptions {
    /// Time-to-live of the state's values (see [`crate::ttl`]).
    pub ttl: Option<StateTtlConfig>,
    /// Whether the state is scoped to a namespace within each key (window and timer state, see
    /// [`KeyedStateBackend::set_current_namespace`]). Stored with the state: it cannot change across a restore.
    pub namespaced: bool,
}

impl StateOptions {
    /// With a time-to-live.
    pub fn with_ttl(mut self, ttl: StateTtlConfig) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Scoped to namespaces.
    pub fn namespaced(mut self) -> Self {
        self.namespaced = true;
        self
    }
}

/// Checks a registration of `name` as `kind` with `wanted` against how the state exists (`existing`: kind,
/// TTL, namespaced — registered in this backend's lifetime, or only `restored`): another kind, TTL config
/// (after a restore: TTL on or off) or choice of namespaces is a [`StateError::Declaration`].
pub(crate) fn check_redeclaration(
    name: &str,
    (existing_kind, existing_ttl, existing_namespaced): (StateKind, Option<&StateTtlConfig>, bool),
    kind: StateKind,
    wanted: &StateOptions,
    restored: bool,
) -> Result<(), StateError> {
    if existing_kind != kind {
        return Err(kind_conflict(name, existing_kind, kind));
    }
    crate::ttl::check_ttl(name, existing_ttl, wanted.ttl.as_ref(), restored)?;
    if existing_namespaced != wanted.namespaced {
        let how = |ns: bool| if ns { "with namespaces" } else { "without namespaces" };
        return Err(StateError::Declaration {
            name: name.to_string(),
            message: format!(
                "registered {} but it already exists {}",
                how(wanted.namespaced),
                how(existing_namespaced)
            ),
        });
    }
    Ok(())
}

/// Scopes following accesses to namespaced states to `namespace` (see
/// [`KeyedStateBackend::set_current_namespace`]).
pub fn set_namespace<N: StateCodec>(backend: &mut dyn KeyedStateBackend, namespace: &N) {
    let mut bytes = Vec::new();
    namespace.encode(&mut bytes);
    backend.set_current_namespace(&bytes);
}

/// What a state holds per key; declared when the state is registered and fixed for the state's lifetime
/// (it is stored with the state, so it is checked again after a restore).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateKind {
    /// One value per key ([`ValueState`]).
    Value,
    /// A list of elements per key ([`ListState`]).
    List,
    /// A map of user keys to values per key ([`MapState`]).
    Map,
    /// One value per key folded by a reduce function ([`ReducingState`]).
    Reducing,
    /// One accumulator per key of an aggregate function ([`AggregatingState`]).
    Aggregating,
}

impl StateKind {
    /// The kind's name, as used in errors.
    pub fn name(self) -> &'static str {
        match self {
            StateKind::Value => "value",
            StateKind::List => "list",
            StateKind::Map => "map",
            StateKind::Reducing => "reducing",
            StateKind::Aggregating => "aggregating",
        }
    }

    /// The byte that stores the kind (RocksDB meta row, heap snapshot).
    pub(crate) fn to_byte(self) -> u8 {
        match self {
            StateKind::Value => 0,
            StateKind::List => 1,
            StateKind::Map => 2,
            StateKind::Reducing => 3,
            StateKind::Aggregating => 4,
        }
    }

    /// The kind stored as `b`.
    pub(crate) fn from_byte(b: u8) -> Result<Self, StateError> {
        Ok(match b {
            0 => StateKind::Value,
            1 => StateKind::List,
            2 => StateKind::Map,
            3 => StateKind::Reducing,
            4 => StateKind::Aggregating,
            _ => return Err(StateError::Corrupt(format!("unknown state kind byte {b}"))),
        })
    }

    /// Whether the state is stored as one value row per key (value, reducing, aggregating).
    pub(crate) fn is_value_row(self) -> bool {
        matches!(self, StateKind::Value | StateKind::Reducing | StateKind::Aggregating)
    }
}

impl std::fmt::Display for StateKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The error for registering `name` as `wanted` when it exists as `existing`.
fn kind_conflict(name: &str, existing: StateKind, wanted: StateKind) -> StateError {
    StateError::Declaration {
        name: name.to_string(),
        message: format!("registered as {wanted} state but it already exists as {existing} state"),
    }
}

/// The error for using a state through an operation of another kind.
pub(crate) fn wrong_kind(name: &str, kind: StateKind, op: &str) -> StateError {
    StateError::Declaration { name: name.to_string(), message: format!("{op} is not an operation of {kind} state") }
}

/// The error for a value (or list) larger than the limit; nothing has been written when it is returned.
pub(crate) fn too_large(name: &str, kind: StateKind, size: usize, limit: usize) -> StateError {
    StateError::Declaration {
        name: name.to_string(),
        message: format!(
            "{kind} state value of {size} bytes exceeds the limit of {limit} bytes; nothing was written. \
             Split large values over many rows with MapState instead"
        ),
    }
}

/// Keyed state storage for one operator subtask.
///
/// The byte-level methods below are what the typed handles ([`ValueState`], [`ListState`], [`MapState`],
/// [`ReducingState`], [`AggregatingState`]) call; operators use the handles. Each method checks that the
/// state was registered with a kind that supports it.
pub trait KeyedStateBackend: Send {
    /// Registers a state of `kind` with `options`, or returns the existing one of that name if it was declared
    /// the same way. Another kind is a [`StateError::Declaration`] naming both kinds; so is another TTL config
    /// (after a restore, only turning TTL on or off) and a different choice of namespaces.
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
    /// Registers a state of `kind` with an optional time-to-live (see [`crate::ttl`]).
    fn register_state_with_ttl(
        &mut self,
        name: &str,
        kind: StateKind,
        ttl: Option<StateTtlConfig>,
    ) -> Result<StateId, StateError> {
        self.register_state_with_options(name, kind, &StateOptions { ttl, namespaced: false })
    }
    /// Sets the namespace (its serialized bytes) that following accesses to *namespaced* states are scoped to,
    /// as Flink scopes window and timer state to a window; other states have no namespace. Empty until set.
    fn set_current_namespace(&mut self, namespace: &[u8]);
    /// Sets the processing-time clock of TTL (default [`crate::ttl::SystemClock`]).
    fn set_clock(&mut self, clock: Arc<dyn Clock>);
    /// The TTL clock's current time in milliseconds.
    fn now_ms(&self) -> u64;
    /// Registers a value state, or returns the existing one of that name.
    fn register_value_state(&mut self, name: &str) -> Result<StateId, StateError> {
        self.register_state(name, StateKind::Value)
    }
    /// Sets the largest serialized value (or list total) a write may produce; larger writes are refused and
    /// write nothing. Default [`DEFAULT_MAX_VALUE_BYTES`].
    fn set_max_value_bytes(&mut self, limit: usize);
    /// Sets the key that following accesses are scoped to (its serialized bytes).
    fn set_current_key(&mut self, key: &[u8]);
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
    /// The synchronous part of a snapshot: an immutable copy of all state in `dir` (which must not exist yet,
    /// and should be on the same filesystem as the backend so RocksDB can hard-link). Some files may still be
    /// written in the background: [`LocalSnapshot::ready`] waits for them.
    fn snapshot_sync(&mut self, dir: &Path) -> Result<LocalSnapshot, StateError>;
    /// Name of the backend kind.
    fn kind(&self) -> &'static str;
    /// Engine properties per state for monitoring, as `(state, property, value)` (RocksDB's native
    /// `rocksdb.*` properties; none for the heap).
    fn properties(&self) -> Vec<(String, &'static str, u64)> {
        Vec::new()
    }
}

/// Appends one list element in the stored list format: little-endian `u32` length, then the bytes.
pub fn encode_list_element(element: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(element.len() as u32).to_le_bytes());
    out.extend_from_slice(element);
}

/// Calls `f` for every element of a stored list (concatenated length-prefixed elements).
pub(crate) fn decode_list(name: &str, mut bytes: &[u8], f: &mut ElementVisitor<'_>) -> Result<(), StateError> {
    while !bytes.is_empty() {
        let corrupt = || StateError::Corrupt(format!("list state {name:?}: truncated element"));
        let len: [u8; 4] = bytes.get(..4).ok_or_else(corrupt)?.try_into().map_err(|_| corrupt())?;
        let len = u32::from_le_bytes(len) as usize;
        let elem = bytes.get(4..4 + len).ok_or_else(corrupt)?;
        f(elem)?;
        bytes = &bytes[4 + len..];
    }
    Ok(())
}

/// Reads the current key's value row of a TTL state: an expired row is deleted (and returned only with
/// [`crate::ttl::TtlVisibility::ReturnExpiredIfNotCleanedUp`] and not `for_update`); an unexpired one is
/// re-stamped on reads with [`crate::ttl::TtlUpdateType::OnReadAndWrite`]. Returns the user value's bytes.
fn ttl_value(
    backend: &mut dyn KeyedStateBackend,
    id: StateId,
    ttl: &StateTtlConfig,
    for_update: bool,
) -> Result<Option<Vec<u8>>, StateError> {
    let now = backend.now_ms();
    let Some(row) = backend.get_value(id)? else { return Ok(None) };
    let (ts, user) = split_ts("value", row)?;
    if ttl.is_expired(ts, now) {
        let user = (ttl.returns_expired() && !for_update).then(|| user.to_vec());
        backend.delete_value(id)?;
        return Ok(user);
    }
    let user = user.to_vec();
    if ttl.refreshes_on_read() && !for_update {
        let mut row = Vec::with_capacity(user.len() + crate::ttl::TS_LEN);
        stamp(now, &user, &mut row);
        backend.put_value(id, &row)?;
    }
    Ok(Some(user))
}

/// Clears `out` and, for a TTL state, writes the current timestamp into it (the prefix of a TTL value).
fn start_value(backend: &dyn KeyedStateBackend, ttl: Option<&StateTtlConfig>, out: &mut Vec<u8>) {
    out.clear();
    if ttl.is_some() {
        out.extend_from_slice(&backend.now_ms().to_be_bytes());
    }
}

/// Opens a keyed backend in `work_dir`, restoring from a downloaded snapshot directory if given. `rocks` tunes
/// the RocksDB backend; its `clock`, if set, is the TTL clock of either backend.
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
        StateBackendKind::Heap => {
            let mut b = HeapBackend::open(max_parallelism, range, restore_dir)?;
            if let Some(clock) = &rocks.clock {
                b.set_clock(clock.clone());
            }
            Box::new(b)
        }
    })
}

/// A typed value state: one `T` per key.
pub struct ValueState<T> {
    id: StateId,
    ttl: Option<StateTtlConfig>,
    scratch: Vec<u8>,
    _t: PhantomData<fn() -> T>,
}

impl<T: StateCodec> ValueState<T> {
    /// Registers (or finds) the state `name` in a backend.
    pub fn register(backend: &mut dyn KeyedStateBackend, name: &str) -> Result<Self, StateError> {
        Ok(ValueState { id: backend.register_value_state(name)?, ttl: None, scratch: Vec::new(), _t: PhantomData })
    }

    /// Registers (or finds) the state `name` with a time-to-live (see [`crate::ttl`]).
    pub fn register_with_ttl(
        backend: &mut dyn KeyedStateBackend,
        name: &str,
        ttl: StateTtlConfig,
    ) -> Result<Self, StateError> {
        Self::register_with_options(backend, name, StateOptions::default().with_ttl(ttl))
    }

    /// Registers (or finds) the state `name` declared with `options` (TTL, namespaces).
    pub fn register_with_options(
        backend: &mut dyn KeyedStateBackend,
        name: &str,
        options: StateOptions,
    ) -> Result<Self, StateError> {
        let id = backend.register_state_with_options(name, StateKind::Value, &options)?;
        Ok(ValueState { id, ttl: options.ttl, scratch: Vec::new(), _t: PhantomData })
    }

    /// The current key's value.
    pub fn value(&self, backend: &mut dyn KeyedStateBackend) -> Result<Option<T>, StateError> {
        match &self.ttl {
            None => backend.get_value(self.id)?.map(T::decode).transpose(),
            Some(ttl) => ttl_value(backend, self.id, ttl, false)?.map(|v| T::decode(&v)).transpose(),
        }
    }

    /// Sets the current key's value.
    pub fn update(&mut self, backend: &mut dyn KeyedStateBackend, v: &T) -> Result<(), StateError> {
        start_value(backend, self.ttl.as_ref(), &mut self.scratch);
        v.encode(&mut self.scratch);
        backend.put_value(self.id, &self.scratch)
    }

    /// Removes the current key's value.
    pub fn clear(&self, backend: &mut dyn KeyedStateBackend) -> Result<(), StateError> {
        backend.delete_value(self.id)
    }

    /// Calls `f(key, value)` for every key with a value (with TTL: expired values only if the visibility
    /// returns them; nothing is deleted or re-stamped).
    pub fn for_each(
        &self,
        backend: &mut dyn KeyedStateBackend,
        mut f: impl FnMut(&[u8], T) -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        match self.ttl {
            None => backend.for_each_value(self.id, &mut |k, v| f(k, T::decode(v)?)),
            Some(ttl) => {
                let now = backend.now_ms();
                backend.for_each_value(self.id, &mut |k, v| {
                    let (ts, user) = split_ts("value", v)?;
                    if ttl.is_expired(ts, now) && !ttl.returns_expired() {
                        return Ok(());
                    }
                    f(k, T::decode(user)?)
                })
            }
        }
    }

    /// Removes the value of every key of the backend.
    pub fn clear_all(&self, backend: &mut dyn KeyedStateBackend) -> Result<(), StateError> {
        backend.clear_all(self.id)
    }
}

/// A typed list state: a list of `T` per key. Appends never read the list (RocksDB merges them).
pub struct ListState<T> {
    id: StateId,
    ttl: Option<StateTtlConfig>,
    scratch: Vec<u8>,
    elem: Vec<u8>,
    _t: PhantomData<fn() -> T>,
}

impl<T: StateCodec> ListState<T> {
    /// Registers (or finds) the list state `name` in a backend.
    pub fn register(backend: &mut dyn KeyedStateBackend, name: &str) -> Result<Self, StateError> {
        let id = backend.register_state(name, StateKind::List)?;
        Ok(ListState { id, ttl: None, scratch: Vec::new(), elem: Vec::new(), _t: PhantomData })
    }

    /// Registers (or finds) the list state `name` with a time-to-live per element (see [`crate::ttl`]).
    pub fn register_with_ttl(
        backend: &mut dyn KeyedStateBackend,
        name: &str,
        ttl: StateTtlConfig,
    ) -> Result<Self, StateError> {
        Self::register_with_options(backend, name, StateOptions::default().with_ttl(ttl))
    }

    /// Registers (or finds) the list state `name` declared with `options` (TTL, namespaces).
    pub fn register_with_options(
        backend: &mut dyn KeyedStateBackend,
        name: &str,
        options: StateOptions,
    ) -> Result<Self, StateError> {
        let id = backend.register_state_with_options(name, StateKind::List, &options)?;
        Ok(ListState { id, ttl: options.ttl, scratch: Vec::new(), elem: Vec::new(), _t: PhantomData })
    }

    /// Every element of the current key's list, in insertion order (empty if none). With TTL, expired
    /// elements are dropped from the stored list (and returned only if the visibility says so).
    pub fn get(&self, backend: &mut dyn KeyedStateBackend) -> Result<Vec<T>, StateError> {
        let mut out = Vec::new();
        let Some(ttl) = self.ttl else {
            backend.for_each_list_element(self.id, &mut |e| {
                out.push(T::decode(e)?);
                Ok(())
            })?;
            return Ok(out);
        };
        let now = backend.now_ms();
        let mut kept = Vec::new();
        let mut elem = Vec::new();
        let mut dropped = false;
        backend.for_each_list_element(self.id, &mut |e| {
            let (ts, user) = split_ts("list", e)?;
            if ttl.is_expired(ts, now) {
                dropped = true;
                if ttl.returns_expired() {
                    out.push(T::decode(user)?);
                }
            } else {
                out.push(T::decode(user)?);
                if ttl.refreshes_on_read() {
                    elem.clear();
                    stamp(now, user, &mut elem);
                    encode_list_element(&elem, &mut kept);
                } else {
                    encode_list_element(e, &mut kept);
                }
            }
            Ok(())
        })?;
        if dropped || (ttl.refreshes_on_read() && !kept.is_empty()) {
            backend.replace_list(self.id, &kept)?;
        }
        Ok(out)
    }

    fn encode_all<'a>(&mut self, ts: Option<u64>, values: impl IntoIterator<Item = &'a T>)
    where
        T: 'a,
    {
        self.scratch.clear();
        for v in values {
            self.elem.clear();
            if let Some(ts) = ts {
                self.elem.extend_from_slice(&ts.to_be_bytes());
            }
            v.encode(&mut self.elem);
            encode_list_element(&self.elem, &mut self.scratch);
        }
    }

    /// Appends one element to the current key's list.
    pub fn add(&mut self, backend: &mut dyn KeyedStateBackend, value: &T) -> Result<(), StateError> {
        let ts = self.ttl.map(|_| backend.now_ms());
        self.encode_all(ts, std::iter::once(value));
        backend.append_list(self.id, &self.scratch)
    }

    /// Appends elements to the current key's list.
    pub fn add_all<'a>(
        &mut self,
        backend: &mut dyn KeyedStateBackend,
        values: impl IntoIterator<Item = &'a T>,
    ) -> Result<(), StateError>
    where
        T: 'a,
    {
        let ts = self.ttl.map(|_| backend.now_ms());
        self.encode_all(ts, values);
        if self.scratch.is_empty() {
            return Ok(());
        }
        backend.append_list(self.id, &self.scratch)
    }

    /// Replaces the current key's list (an empty slice removes it).
    pub fn update(&mut self, backend: &mut dyn KeyedStateBackend, values: &[T]) -> Result<(), StateError> {
        let ts = self.ttl.map(|_| backend.now_ms());
        self.encode_all(ts, values);
        backend.replace_list(self.id, &self.scratch)
    }

    /// Removes the current key's list.
    pub fn clear(&self, backend: &mut dyn KeyedStateBackend) -> Result<(), StateError> {
        backend.clear_key(self.id)
    }

    /// Removes the list of every key of the backend.
    pub fn clear_all(&self, backend: &mut dyn KeyedStateBackend) -> Result<(), StateError> {
        backend.clear_all(self.id)
    }
}

/// A typed map state: a map of `K` to `V` per key, one storage row per entry, so a large map never has to
/// be read or written whole.
pub struct MapState<K, V> {
    id: StateId,
    ttl: Option<StateTtlConfig>,
    key_buf: Vec<u8>,
    val_buf: Vec<u8>,
    _t: PhantomData<fn() -> (K, V)>,
}

impl<K: StateCodec, V: StateCodec> MapState<K, V> {
    /// Registers (or finds) the map state `name` in a backend.
    pub fn register(backend: &mut dyn KeyedStateBackend, name: &str) -> Result<Self, StateError> {
        let id = backend.register_state(name, StateKind::Map)?;
        Ok(MapState { id, ttl: None, key_buf: Vec::new(), val_buf: Vec::new(), _t: PhantomData })
    }

    /// Registers (or finds) the map state `name` with a time-to-live per entry (see [`crate::ttl`]).
    pub fn register_with_ttl(
        backend: &mut dyn KeyedStateBackend,
        name: &str,
        ttl: StateTtlConfig,
    ) -> Result<Self, StateError> {
        Self::register_with_options(backend, name, StateOptions::default().with_ttl(ttl))
    }

    /// Registers (or finds) the map state `name` declared with `options` (TTL, namespaces).
    pub fn register_with_options(
        backend: &mut dyn KeyedStateBackend,
        name: &str,
        options: StateOptions,
    ) -> Result<Self, StateError> {
        let id = backend.register_state_with_options(name, StateKind::Map, &options)?;
        Ok(MapState { id, ttl: options.ttl, key_buf: Vec::new(), val_buf: Vec::new(), _t: PhantomData })
    }

    /// The user value bytes of `key` of a TTL map (in `key_buf`), after expiry handling and read refresh.
    fn ttl_get(
        &mut self,
        backend: &mut dyn KeyedStateBackend,
        ttl: &StateTtlConfig,
    ) -> Result<Option<Vec<u8>>, StateError> {
        let now = backend.now_ms();
        let Some(row) = backend.map_get(self.id, &self.key_buf)? else { return Ok(None) };
        let (ts, user) = split_ts("map", &row)?;
        if ttl.is_expired(ts, now) {
            backend.map_remove(self.id, &self.key_buf)?;
            return Ok(ttl.returns_expired().then(|| user.to_vec()));
        }
        if ttl.refreshes_on_read() {
            self.val_buf.clear();
            stamp(now, user, &mut self.val_buf);
            backend.map_put(self.id, &self.key_buf, &self.val_buf)?;
        }
        Ok(Some(user.to_vec()))
    }

    /// The visible entries (user key and value bytes) of the current key's TTL map, in key order; expired
    /// entries are removed, unexpired ones re-stamped with [`crate::ttl::TtlUpdateType::OnReadAndWrite`].
    fn ttl_entries(
        &self,
        backend: &mut dyn KeyedStateBackend,
        ttl: &StateTtlConfig,
    ) -> Result<Vec<ByteEntry>, StateError> {
        let now = backend.now_ms();
        let mut rows = Vec::new();
        backend.for_each_map_entry(self.id, &mut |k, v| {
            rows.push((k.to_vec(), v.to_vec()));
            Ok(())
        })?;
        let mut out = Vec::with_capacity(rows.len());
        let mut buf = Vec::new();
        for (k, v) in rows {
            let (ts, user) = split_ts("map", &v)?;
            if ttl.is_expired(ts, now) {
                backend.map_remove(self.id, &k)?;
                if !ttl.returns_expired() {
                    continue;
                }
            } else if ttl.refreshes_on_read() {
                buf.clear();
                stamp(now, user, &mut buf);
                backend.map_put(self.id, &k, &buf)?;
            }
            out.push((k, user.to_vec()));
        }
        Ok(out)
    }

    fn key_bytes(&mut self, key: &K) -> &[u8] {
        self.key_buf.clear();
        key.encode(&mut self.key_buf);
        &self.key_buf
    }

    /// The value of `key` in the current key's map.
    pub fn get(&mut self, backend: &mut dyn KeyedStateBackend, key: &K) -> Result<Option<V>, StateError> {
        if let Some(ttl) = self.ttl {
            self.key_bytes(key);
            return self.ttl_get(backend, &ttl)?.map(|v| V::decode(&v)).transpose();
        }
        let id = self.id;
        backend.map_get(id, self.key_bytes(key))?.map(|v| V::decode(&v)).transpose()
    }

    /// Sets `key` to `value` in the current key's map.
    pub fn put(&mut self, backend: &mut dyn KeyedStateBackend, key: &K, value: &V) -> Result<(), StateError> {
        start_value(backend, self.ttl.as_ref(), &mut self.val_buf);
        value.encode(&mut self.val_buf);
        self.key_buf.clear();
        key.encode(&mut self.key_buf);
        backend.map_put(self.id, &self.key_buf, &self.val_buf)
    }

    /// Removes `key` from the current key's map.
    pub fn remove(&mut self, backend: &mut dyn KeyedStateBackend, key: &K) -> Result<(), StateError> {
        let id = self.id;
        backend.map_remove(id, self.key_bytes(key))
    }

    /// Whether the current key's map holds `key`.
    pub fn contains(&mut self, backend: &mut dyn KeyedStateBackend, key: &K) -> Result<bool, StateError> {
        if let Some(ttl) = self.ttl {
            self.key_bytes(key);
            return Ok(self.ttl_get(backend, &ttl)?.is_some());
        }
        let id = self.id;
        Ok(backend.map_get(id, self.key_bytes(key))?.is_some())
    }

    /// Whether the current key's map is empty (with TTL: whether it has a visible entry; this reads, cleans
    /// up and, with `OnReadAndWrite`, re-stamps every entry).
    pub fn is_empty(&self, backend: &mut dyn KeyedStateBackend) -> Result<bool, StateError> {
        if let Some(ttl) = self.ttl {
            return Ok(self.ttl_entries(backend, &ttl)?.is_empty());
        }
        backend.map_is_empty(self.id)
    }

    /// Calls `f(key, value)` for every entry of the current key's map, in the byte order of the encoded keys.
    pub fn for_each(
        &self,
        backend: &mut dyn KeyedStateBackend,
        mut f: impl FnMut(K, V) -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        if let Some(ttl) = self.ttl {
            for (k, v) in self.ttl_entries(backend, &ttl)? {
                f(K::decode(&k)?, V::decode(&v)?)?;
            }
            return Ok(());
        }
        backend.for_each_map_entry(self.id, &mut |k, v| f(K::decode(k)?, V::decode(v)?))
    }

    /// Every entry of the current key's map, in the byte order of the encoded keys.
    pub fn entries(&self, backend: &mut dyn KeyedStateBackend) -> Result<Vec<(K, V)>, StateError> {
        let mut out = Vec::new();
        self.for_each(backend, |k, v| {
            out.push((k, v));
            Ok(())
        })?;
        Ok(out)
    }

    /// Every key of the current key's map, in the byte order of the encoded keys.
    pub fn keys(&self, backend: &mut dyn KeyedStateBackend) -> Result<Vec<K>, StateError> {
        if let Some(ttl) = self.ttl {
            return self.ttl_entries(backend, &ttl)?.into_iter().map(|(k, _)| K::decode(&k)).collect();
        }
        let mut out = Vec::new();
        backend.for_each_map_entry(self.id, &mut |k, _| {
            out.push(K::decode(k)?);
            Ok(())
        })?;
        Ok(out)
    }

    /// Removes every entry of the current key's map.
    pub fn clear(&self, backend: &mut dyn KeyedStateBackend) -> Result<(), StateError> {
        backend.clear_key(self.id)
    }

    /// Removes the map of every key of the backend.
    pub fn clear_all(&self, backend: &mut dyn KeyedStateBackend) -> Result<(), StateError> {
        backend.clear_all(self.id)
    }
}

/// A map entry's user key and value bytes.
type ByteEntry = (Vec<u8>, Vec<u8>);

/// The reduce function of a [`ReducingState`]: folds a new value into the stored one.
pub type ReduceFn<T> = Box<dyn Fn(T, T) -> T + Send>;

/// A typed reducing state: one `T` per key; [`ReducingState::add`] folds a value into it with the reduce
/// function given at registration. Stored as a value row.
pub struct ReducingState<T> {
    id: StateId,
    ttl: Option<StateTtlConfig>,
    reduce: ReduceFn<T>,
    scratch: Vec<u8>,
}

impl<T: StateCodec> ReducingState<T> {
    /// Registers (or finds) the reducing state `name` in a backend, with its reduce function.
    pub fn register(
        backend: &mut dyn KeyedStateBackend,
        name: &str,
        reduce: impl Fn(T, T) -> T + Send + 'static,
    ) -> Result<Self, StateError> {
        let id = backend.register_state(name, StateKind::Reducing)?;
        Ok(ReducingState { id, ttl: None, reduce: Box::new(reduce), scratch: Vec::new() })
    }

    /// Registers (or finds) the reducing state `name` with a time-to-live (see [`crate::ttl`]).
    pub fn register_with_ttl(
        backend: &mut dyn KeyedStateBackend,
        name: &str,
        reduce: impl Fn(T, T) -> T + Send + 'static,
        ttl: StateTtlConfig,
    ) -> Result<Self, StateError> {
        Self::register_with_options(backend, name, reduce, StateOptions::default().with_ttl(ttl))
    }

    /// Registers (or finds) the reducing state `name` declared with `options` (TTL, namespaces).
    pub fn register_with_options(
        backend: &mut dyn KeyedStateBackend,
        name: &str,
        reduce: impl Fn(T, T) -> T + Send + 'static,
        options: StateOptions,
    ) -> Result<Self, StateError> {
        let id = backend.register_state_with_options(name, StateKind::Reducing, &options)?;
        Ok(ReducingState { id, ttl: options.ttl, reduce: Box::new(reduce), scratch: Vec::new() })
    }

    /// The current key's reduced value.
    pub fn get(&self, backend: &mut dyn KeyedStateBackend) -> Result<Option<T>, StateError> {
        match &self.ttl {
            None => backend.get_value(self.id)?.map(T::decode).transpose(),
            Some(ttl) => ttl_value(backend, self.id, ttl, false)?.map(|v| T::decode(&v)).transpose(),
        }
    }

    /// Folds `value` into the current key's value (or stores it, if there is none or it expired).
    pub fn add(&mut self, backend: &mut dyn KeyedStateBackend, value: T) -> Result<(), StateError> {
        let old = match &self.ttl {
            None => self.get(backend)?,
            Some(ttl) => ttl_value(backend, self.id, ttl, true)?.map(|v| T::decode(&v)).transpose()?,
        };
        let folded = match old {
            Some(old) => (self.reduce)(old, value),
            None => value,
        };
        start_value(backend, self.ttl.as_ref(), &mut self.scratch);
        folded.encode(&mut self.scratch);
        backend.put_value(self.id, &self.scratch)
    }

    /// Removes the current key's value.
    pub fn clear(&self, backend: &mut dyn KeyedStateBackend) -> Result<(), StateError> {
        backend.clear_key(self.id)
    }

    /// Removes the value of every key of the backend.
    pub fn clear_all(&self, backend: &mut dyn KeyedStateBackend) -> Result<(), StateError> {
        backend.clear_all(self.id)
    }
}

/// The aggregate function of an [`AggregatingState`] (Flink's `AggregateFunction`).
pub trait AggregateFunction<In, Acc, Out>: Send {
    /// A new, empty accumulator.
    fn create_accumulator(&self) -> Acc;
    /// Adds `value` to `acc`.
    fn add(&self, value: In, acc: Acc) -> Acc;
    /// The result of an accumulator.
    fn get_result(&self, acc: &Acc) -> Out;
}

/// A typed aggregating state: one accumulator `Acc` per key, fed `In` values, read as `Out`. Stored as a
/// value row holding the accumulator.
pub struct AggregatingState<In, Acc, Out> {
    id: StateId,
    ttl: Option<StateTtlConfig>,
    function: Box<dyn AggregateFunction<In, Acc, Out>>,
    scratch: Vec<u8>,
}

impl<In, Acc: StateCodec, Out> AggregatingState<In, Acc, Out> {
    /// Registers (or finds) the aggregating state `name` in a backend, with its aggregate function.
    pub fn register(
        backend: &mut dyn KeyedStateBackend,
        name: &str,
        function: impl AggregateFunction<In, Acc, Out> + 'static,
    ) -> Result<Self, StateError> {
        let id = backend.register_state(name, StateKind::Aggregating)?;
        Ok(AggregatingState { id, ttl: None, function: Box::new(function), scratch: Vec::new() })
    }

    /// Registers (or finds) the aggregating state `name` with a time-to-live (see [`crate::ttl`]).
    pub fn register_with_ttl(
        backend: &mut dyn KeyedStateBackend,
        name: &str,
        function: impl AggregateFunction<In, Acc, Out> + 'static,
        ttl: StateTtlConfig,
    ) -> Result<Self, StateError> {
        Self::register_with_options(backend, name, function, StateOptions::default().with_ttl(ttl))
    }

    /// Registers (or finds) the aggregating state `name` declared with `options` (TTL, namespaces).
    pub fn register_with_options(
        backend: &mut dyn KeyedStateBackend,
        name: &str,
        function: impl AggregateFunction<In, Acc, Out> + 'static,
        options: StateOptions,
    ) -> Result<Self, StateError> {
        let id = backend.register_state_with_options(name, StateKind::Aggregating, &options)?;
        Ok(AggregatingState { id, ttl: options.ttl, function: Box::new(function), scratch: Vec::new() })
    }

    /// The result for the current key, if anything was added since the last clear.
    pub fn get(&self, backend: &mut dyn KeyedStateBackend) -> Result<Option<Out>, StateError> {
        let acc = match &self.ttl {
            None => backend.get_value(self.id)?.map(Acc::decode).transpose()?,
            Some(ttl) => ttl_value(backend, self.id, ttl, false)?.map(|v| Acc::decode(&v)).transpose()?,
        };
        Ok(acc.map(|a| self.function.get_result(&a)))
    }

    /// Adds `value` to the current key's accumulator (created if there is none or it expired).
    pub fn add(&mut self, backend: &mut dyn KeyedStateBackend, value: In) -> Result<(), StateError> {
        let old = match &self.ttl {
            None => backend.get_value(self.id)?.map(Acc::decode).transpose()?,
            Some(ttl) => ttl_value(backend, self.id, ttl, true)?.map(|v| Acc::decode(&v)).transpose()?,
        };
        let acc = match old {
            Some(acc) => acc,
            None => self.function.create_accumulator(),
        };
        let acc = self.function.add(value, acc);
        start_value(backend, self.ttl.as_ref(), &mut self.scratch);
        acc.encode(&mut self.scratch);
        backend.put_value(self.id, &self.scratch)
    }

    /// Removes the current key's accumulator.
    pub fn clear(&self, backend: &mut dyn KeyedStateBackend) -> Result<(), StateError> {
        backend.clear_key(self.id)
    }

    /// Removes the accumulator of every key of the backend.
    pub fn clear_all(&self, backend: &mut dyn KeyedStateBackend) -> Result<(), StateError> {
        backend.clear_all(self.id)
    }
}

/// The smallest byte string greater than every string starting with `prefix`, if there is one.
pub(crate) fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.last_mut() {
        if *last == 0xff {
            s.pop();
        } else {
            *last += 1;
            return Some(s);
        }
    }
    None
}

/// Builds row keys (`key_group | key`) for the current key, shared by both backends.
#[derive(Debug)]
pub(crate) struct RowKeyBuilder {
    pub max_parallelism: u32,
    pub prefix_len: usize,
    /// `key_group | key` of the current key.
    pub row: Vec<u8>,
    /// The current namespace of namespaced states (empty: none set).
    namespace: Vec<u8>,
    /// `key_group | key | namespace | u32 BE namespace length`: the current row of namespaced states. Read
    /// from the end, it splits unambiguously into key and namespace.
    ns_row: Vec<u8>,
}

impl RowKeyBuilder {
    pub fn new(max_parallelism: u32) -> Self {
        RowKeyBuilder {
            max_parallelism,
            prefix_len: weir_common::keygroup::key_group_prefix_len(max_parallelism),
            row: Vec::with_capacity(32),
            namespace: Vec::new(),
            ns_row: Vec::new(),
        }
    }

    pub fn set(&mut self, key: &[u8]) {
        let kg = weir_common::keygroup::key_group_for_key(key, self.max_parallelism);
        self.row.clear();
        weir_common::keygroup::write_key_group_prefix(kg, self.max_parallelism, &mut self.row);
        self.row.extend_from_slice(key);
        self.ns_row.clear();
    }

    /// Sets the namespace of namespaced states.
    pub fn set_namespace(&mut self, namespace: &[u8]) {
        self.namespace.clear();
        self.namespace.extend_from_slice(namespace);
        self.ns_row.clear();
    }

    /// The current row of a state: `key_group | key`, or for a namespaced state (`namespaced`) that followed by
    /// `namespace | u32 BE namespace length`.
    pub fn key(&mut self, namespaced: bool) -> &[u8] {
        if !namespaced {
            return &self.row;
        }
        if self.ns_row.is_empty() {
            self.ns_row.extend_from_slice(&self.row);
            self.ns_row.extend_from_slice(&self.namespace);
            self.ns_row.extend_from_slice(&(self.namespace.len() as u32).to_be_bytes());
        }
        &self.ns_row
    }

    /// The prefix of the current key's map rows: `key_group | u32 BE key length | key`, for a namespaced state
    /// followed by `u32 BE namespace length | namespace`.
    pub fn map_prefix(&self, namespaced: bool, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.row[..self.prefix_len]);
        out.extend_from_slice(&((self.row.len() - self.prefix_len) as u32).to_be_bytes());
        out.extend_from_slice(&self.row[self.prefix_len..]);
        if namespaced {
            out.extend_from_slice(&(self.namespace.len() as u32).to_be_bytes());
            out.extend_from_slice(&self.namespace);
        }
    }

    /// The key of a value or list row (without its key-group prefix) as iteration shows it: the whole rest for
    /// a plain state; for a namespaced state the key, if the row belongs to the current namespace.
    pub fn visible_key<'a>(&self, namespaced: bool, rest: &'a [u8]) -> Option<&'a [u8]> {
        if !namespaced {
            return Some(rest);
        }
        let len_at = rest.len().checked_sub(4)?;
        let ns_len = u32::from_be_bytes(rest[len_at..].try_into().ok()?) as usize;
        let ns_at = len_at.checked_sub(ns_len)?;
        (rest[ns_at..len_at] == self.namespace[..]).then_some(&rest[..ns_at])
    }

    /// The first row key of a key-group range and the first one past it (the key-group prefix of
    /// `range.end + 1` always fits the prefix width, since key groups are `< max_parallelism`).
    pub fn range_bounds(&self, range: KeyGroupRange) -> (Vec<u8>, Vec<u8>) {
        use weir_common::ids::KeyGroup;
        let mut lo = Vec::new();
        weir_common::keygroup::write_key_group_prefix(KeyGroup(range.start), self.max_parallelism, &mut lo);
        let mut hi = Vec::new();
        weir_common::keygroup::write_key_group_prefix(KeyGroup(range.end + 1), self.max_parallelism, &mut hi);
        (lo, hi)
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
