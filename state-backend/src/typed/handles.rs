//! The typed state handles operators use, on top of the byte-level [`KeyedStateBackend`].
//!
//! | handle | per key | operations |
//! |---|---|---|
//! | [`ValueState<T>`] | one `T` | `value`, `update`, `clear`, `for_each` (all keys) |
//! | [`ListState<T>`] | a list of `T` | `get`, `add`, `add_all`, `add_all_encoded`, `update`, `clear` |
//! | [`MapState<K, V>`] | a map `K → V`, one row per entry | `get`, `put`, `remove`, `contains`, `is_empty`, `entries`, `keys`, `for_each`, `clear` |
//! | [`ReducingState<T>`] | one `T`, folded by a reduce function | `get`, `add`, `clear` |
//! | [`AggregatingState<In, Acc, Out>`] | one `Acc` of an [`AggregateFunction`] | `get`, `add`, `clear` |
//!
//! Every handle also has `clear_all`, which empties the state for every key of the backend at once (RocksDB:
//! one range delete over the backend's key-group range; heap: clearing the maps).
//!
//! ## Time-to-live
//!
//! A handle registered with a [`StateDescriptor`] carrying a [`StateTtlConfig`] reads expired values as absent
//! (see [`crate::keyed::ttl`] for the semantics, the stored format and the cleanup strategies). The handles implement
//! the TTL semantics (stamping, expiry on read, re-stamping); the backends only store the stamped bytes. The
//! clock is the backend's ([`KeyedStateBackend::set_clock`]).

use crate::error::StateError;
use crate::keyed::layout::encode_list_element;
use crate::keyed::meta::{StateDescriptor, StateKind};
use crate::keyed::ttl::{split_ts, stamp, StateTtlConfig};
use crate::keyed::{KeyedStateBackend, StateId};
use crate::typed::codec::{decode_state, StateCodec};
use std::marker::PhantomData;

/// Scopes following accesses to namespaced states to `namespace` (see
/// [`KeyedStateBackend::set_current_namespace`]).
pub fn set_namespace<N: StateCodec>(backend: &mut dyn KeyedStateBackend, namespace: &N) {
    let mut bytes = Vec::new();
    namespace.encode(&mut bytes);
    backend.set_current_namespace(&bytes);
}

/// Reads the current key's value row of a TTL state: an expired row is deleted (and returned only with
/// [`crate::keyed::ttl::TtlVisibility::ReturnExpiredIfNotCleanedUp`] and not `for_update`); an unexpired one is
/// re-stamped on reads with [`crate::keyed::ttl::TtlUpdateType::OnReadAndWrite`]. Returns the user value's bytes.
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
        let mut row = Vec::with_capacity(user.len() + crate::keyed::ttl::TS_LEN);
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

/// A typed value state: one `T` per key.
pub struct ValueState<T> {
    id: StateId,
    /// The state's name (what a value that does not decode is reported under).
    name: String,
    ttl: Option<StateTtlConfig>,
    scratch: Vec<u8>,
    _t: PhantomData<fn() -> T>,
}

impl<T: StateCodec> ValueState<T> {
    /// Registers (or finds) the state a descriptor names (a bare name, or
    /// [`StateDescriptor`] with TTL and namespaces).
    pub fn register<'a>(
        backend: &mut dyn KeyedStateBackend,
        descriptor: impl Into<StateDescriptor<'a>>,
    ) -> Result<Self, StateError> {
        let StateDescriptor { name, options } = descriptor.into();
        let id = backend.register_state_with_options(name, StateKind::Value, &options)?;
        Ok(ValueState { id, name: name.to_string(), ttl: options.ttl, scratch: Vec::new(), _t: PhantomData })
    }

    /// The current key's value.
    pub fn value(&self, backend: &mut dyn KeyedStateBackend) -> Result<Option<T>, StateError> {
        match &self.ttl {
            None => backend.get_value(self.id)?.map(|v| decode_state::<T>(&self.name, v)).transpose(),
            Some(ttl) => {
                ttl_value(backend, self.id, ttl, false)?.map(|v| decode_state::<T>(&self.name, &v)).transpose()
            }
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
            None => backend.for_each_value(self.id, &mut |k, v| f(k, decode_state::<T>(&self.name, v)?)),
            Some(ttl) => {
                let now = backend.now_ms();
                backend.for_each_value(self.id, &mut |k, v| {
                    let (ts, user) = split_ts("value", v)?;
                    if ttl.is_expired(ts, now) && !ttl.returns_expired() {
                        return Ok(());
                    }
                    f(k, decode_state::<T>(&self.name, user)?)
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
    /// The state's name (what a value that does not decode is reported under).
    name: String,
    ttl: Option<StateTtlConfig>,
    scratch: Vec<u8>,
    elem: Vec<u8>,
    _t: PhantomData<fn() -> T>,
}

impl<T: StateCodec> ListState<T> {
    /// Registers (or finds) the list state a descriptor names (a bare name, or
    /// [`StateDescriptor`] with TTL and namespaces).
    pub fn register<'a>(
        backend: &mut dyn KeyedStateBackend,
        descriptor: impl Into<StateDescriptor<'a>>,
    ) -> Result<Self, StateError> {
        let StateDescriptor { name, options } = descriptor.into();
        let id = backend.register_state_with_options(name, StateKind::List, &options)?;
        Ok(ListState {
            id,
            name: name.to_string(),
            ttl: options.ttl,
            scratch: Vec::new(),
            elem: Vec::new(),
            _t: PhantomData,
        })
    }

    /// Every element of the current key's list, in insertion order (empty if none). With TTL, expired
    /// elements are dropped from the stored list (and returned only if the visibility says so).
    pub fn get(&self, backend: &mut dyn KeyedStateBackend) -> Result<Vec<T>, StateError> {
        let mut out = Vec::new();
        let Some(ttl) = self.ttl else {
            backend.for_each_list_element(self.id, &mut |e| {
                out.push(decode_state::<T>(&self.name, e)?);
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
                    out.push(decode_state::<T>(&self.name, user)?);
                }
            } else {
                out.push(decode_state::<T>(&self.name, user)?);
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

    /// Visits the current key's elements in insertion order as their encoded bytes, without decoding or
    /// copying them (what [`StateCodec::encode`] wrote). With TTL, expired elements are skipped unless the
    /// visibility returns them; nothing is written back.
    pub fn visit_encoded(
        &self,
        backend: &mut dyn KeyedStateBackend,
        f: &mut dyn FnMut(&[u8]) -> Result<(), StateError>,
    ) -> Result<(), StateError> {
        let Some(ttl) = self.ttl else {
            return backend.for_each_list_element(self.id, &mut |e| f(e));
        };
        let now = backend.now_ms();
        backend.for_each_list_element(self.id, &mut |e| {
            let (ts, user) = split_ts("list", e)?;
            if !ttl.is_expired(ts, now) || ttl.returns_expired() {
                f(user)?;
            }
            Ok(())
        })
    }

    fn encode_all<'a>(&mut self, ts: Option<u64>, values: impl IntoIterator<Item = &'a T>)
    where
        T: 'a,
    {
        self.frame_all(ts, values, |v, out| v.encode(out));
    }

    /// Frames each item (`write` puts its encoding after the TTL timestamp) into `scratch`.
    fn frame_all<I>(&mut self, ts: Option<u64>, items: impl IntoIterator<Item = I>, write: impl Fn(I, &mut Vec<u8>)) {
        self.scratch.clear();
        for item in items {
            self.elem.clear();
            if let Some(ts) = ts {
                self.elem.extend_from_slice(&ts.to_be_bytes());
            }
            write(item, &mut self.elem);
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

    /// Appends elements given as their encoded bytes (what [`StateCodec::encode`] writes), in one write: rows
    /// gathered per key from a batch go in without a decode.
    pub fn add_all_encoded<'a>(
        &mut self,
        backend: &mut dyn KeyedStateBackend,
        encoded: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<(), StateError> {
        let ts = self.ttl.map(|_| backend.now_ms());
        self.frame_all(ts, encoded, |e, out| out.extend_from_slice(e));
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
    /// The state's name (what a value that does not decode is reported under).
    name: String,
    ttl: Option<StateTtlConfig>,
    key_buf: Vec<u8>,
    val_buf: Vec<u8>,
    _t: PhantomData<fn() -> (K, V)>,
}

impl<K: StateCodec, V: StateCodec> MapState<K, V> {
    /// Registers (or finds) the map state a descriptor names (a bare name, or
    /// [`StateDescriptor`] with TTL and namespaces).
    pub fn register<'a>(
        backend: &mut dyn KeyedStateBackend,
        descriptor: impl Into<StateDescriptor<'a>>,
    ) -> Result<Self, StateError> {
        let StateDescriptor { name, options } = descriptor.into();
        let id = backend.register_state_with_options(name, StateKind::Map, &options)?;
        Ok(MapState {
            id,
            name: name.to_string(),
            ttl: options.ttl,
            key_buf: Vec::new(),
            val_buf: Vec::new(),
            _t: PhantomData,
        })
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
    /// entries are removed, unexpired ones re-stamped with [`crate::keyed::ttl::TtlUpdateType::OnReadAndWrite`].
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
            return self.ttl_get(backend, &ttl)?.map(|v| decode_state::<V>(&self.name, &v)).transpose();
        }
        let id = self.id;
        backend.map_get(id, self.key_bytes(key))?.map(|v| decode_state::<V>(&self.name, &v)).transpose()
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
                f(decode_state::<K>(&self.name, &k)?, decode_state::<V>(&self.name, &v)?)?;
            }
            return Ok(());
        }
        backend.for_each_map_entry(self.id, &mut |k, v| {
            f(decode_state::<K>(&self.name, k)?, decode_state::<V>(&self.name, v)?)
        })
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
            return self
                .ttl_entries(backend, &ttl)?
                .into_iter()
                .map(|(k, _)| decode_state::<K>(&self.name, &k))
                .collect();
        }
        let mut out = Vec::new();
        backend.for_each_map_entry(self.id, &mut |k, _| {
            out.push(decode_state::<K>(&self.name, k)?);
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
    /// The state's name (what a value that does not decode is reported under).
    name: String,
    ttl: Option<StateTtlConfig>,
    reduce: ReduceFn<T>,
    scratch: Vec<u8>,
}

impl<T: StateCodec> ReducingState<T> {
    /// Registers (or finds) the reducing state a descriptor names (a bare name, or
    /// [`StateDescriptor`] with TTL and namespaces), with its reduce function.
    pub fn register<'a>(
        backend: &mut dyn KeyedStateBackend,
        descriptor: impl Into<StateDescriptor<'a>>,
        reduce: impl Fn(T, T) -> T + Send + 'static,
    ) -> Result<Self, StateError> {
        let StateDescriptor { name, options } = descriptor.into();
        let id = backend.register_state_with_options(name, StateKind::Reducing, &options)?;
        Ok(ReducingState {
            id,
            name: name.to_string(),
            ttl: options.ttl,
            reduce: Box::new(reduce),
            scratch: Vec::new(),
        })
    }

    /// The current key's reduced value.
    pub fn get(&self, backend: &mut dyn KeyedStateBackend) -> Result<Option<T>, StateError> {
        match &self.ttl {
            None => backend.get_value(self.id)?.map(|v| decode_state::<T>(&self.name, v)).transpose(),
            Some(ttl) => {
                ttl_value(backend, self.id, ttl, false)?.map(|v| decode_state::<T>(&self.name, &v)).transpose()
            }
        }
    }

    /// Folds `value` into the current key's value (or stores it, if there is none or it expired).
    pub fn add(&mut self, backend: &mut dyn KeyedStateBackend, value: T) -> Result<(), StateError> {
        let old = match &self.ttl {
            None => self.get(backend)?,
            Some(ttl) => {
                ttl_value(backend, self.id, ttl, true)?.map(|v| decode_state::<T>(&self.name, &v)).transpose()?
            }
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
    /// The state's name (what a value that does not decode is reported under).
    name: String,
    ttl: Option<StateTtlConfig>,
    function: Box<dyn AggregateFunction<In, Acc, Out>>,
    scratch: Vec<u8>,
}

impl<In, Acc: StateCodec, Out> AggregatingState<In, Acc, Out> {
    /// Registers (or finds) the aggregating state a descriptor names (a bare name, or
    /// [`StateDescriptor`] with TTL and namespaces), with its aggregate function.
    pub fn register<'a>(
        backend: &mut dyn KeyedStateBackend,
        descriptor: impl Into<StateDescriptor<'a>>,
        function: impl AggregateFunction<In, Acc, Out> + 'static,
    ) -> Result<Self, StateError> {
        let StateDescriptor { name, options } = descriptor.into();
        let id = backend.register_state_with_options(name, StateKind::Aggregating, &options)?;
        Ok(AggregatingState {
            id,
            name: name.to_string(),
            ttl: options.ttl,
            function: Box::new(function),
            scratch: Vec::new(),
        })
    }

    /// The result for the current key, if anything was added since the last clear.
    pub fn get(&self, backend: &mut dyn KeyedStateBackend) -> Result<Option<Out>, StateError> {
        let acc = match &self.ttl {
            None => backend.get_value(self.id)?.map(|v| decode_state::<Acc>(&self.name, v)).transpose()?,
            Some(ttl) => {
                ttl_value(backend, self.id, ttl, false)?.map(|v| decode_state::<Acc>(&self.name, &v)).transpose()?
            }
        };
        Ok(acc.map(|a| self.function.get_result(&a)))
    }

    /// Adds `value` to the current key's accumulator (created if there is none or it expired).
    pub fn add(&mut self, backend: &mut dyn KeyedStateBackend, value: In) -> Result<(), StateError> {
        let old = match &self.ttl {
            None => backend.get_value(self.id)?.map(|v| decode_state::<Acc>(&self.name, v)).transpose()?,
            Some(ttl) => {
                ttl_value(backend, self.id, ttl, true)?.map(|v| decode_state::<Acc>(&self.name, &v)).transpose()?
            }
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
