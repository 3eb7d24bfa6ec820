//! The heap keyed backend: hash maps per state. Same behaviour as RocksDB, for small state and tests.
//!
//! Value, reducing and aggregating states map the row key `key_group | key` to the value; list states map it
//! to the concatenated length-prefixed elements (the same bytes RocksDB stores); map states map it to an
//! ordered map of user key to value.
//!
//! A snapshot is one file, `WEIRHP02`: the state count, then per state its name, its kind byte and its rows —
//! `(row key, value)` pairs for value and list kinds, `(row key, entry count, (user key, value)*)` for maps —
//! every number a little-endian `u32` and every byte string length-prefixed (read and written as a stream by
//! `statefile.rs`, which canonical snapshots share). `WEIRHP01` files (value states only, no kind byte) are still
//! read. A state with TTL stores its kind as a kind record with the TTL config instead of the kind byte
//! (`kind | 0x80` and 10 more bytes, see [`crate::keyed::meta`]); states without TTL are written exactly as before.
//! Timer states come last: the synchronous part of a snapshot takes a pointer per chunk of their rows
//! (`timers/set.rs`) and a thread writes them while the task goes on ([`LocalSnapshot::ready`] waits for it).
//!
//! A restore may read several files, heap or canonical, keeping the rows of the backend's key groups (on
//! rescaling, see `restore/rescale.rs`); a native RocksDB snapshot cannot be restored into the heap.
//!
//! TTL states are cleaned incrementally: every access of a TTL state checks the next
//! [`DEFAULT_INCREMENTAL_CLEANUP_ENTRIES`] rows of that state ([`HeapBackend::set_incremental_cleanup_entries`])
//! from a queue of its row keys, refilled with every row key once it runs empty, skipping the current key. A
//! snapshot writes no expired value, list element or map entry.

pub(crate) mod statefile;

use crate::error::StateError;
use crate::heap::statefile::{Row, StateFileReader, HEAP_V1, HEAP_V2};
use crate::keyed::layout::{decode_list, row_in, RowKeyBuilder, TimerRow, TimerScan};
use crate::keyed::layout::{ElementVisitor, RowVisitor};
use crate::keyed::meta::TtlChange;
use crate::keyed::meta::{
    check_redeclaration, check_same_declaration, encode_kind_record, too_large, ttl_change, wrong_kind, StateKind,
    StateOptions,
};
use crate::keyed::migrate::{RowRewrite, ValueMigration};
use crate::keyed::ttl::{
    retain_unexpired, row_expired, Clock, StateTtlConfig, SystemClock, DEFAULT_INCREMENTAL_CLEANUP_ENTRIES,
};
use crate::keyed::PendingFiles;
use crate::keyed::{KeyedStateBackend, LocalSnapshot, StateId, DEFAULT_MAX_VALUE_BYTES};
use crate::timers::set::{TimerSet, TimerSetSnapshot};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;
use weir_common::state::keygroup::KeyGroupRange;

/// The entries of one map row: user key to value.
type UserMap = BTreeMap<Vec<u8>, Vec<u8>>;

/// A map row's key and its entries that go into a snapshot.
type LiveMap<'a> = (&'a Vec<u8>, Vec<(&'a Vec<u8>, &'a Vec<u8>)>);

const MAGIC_V1: &[u8; 8] = HEAP_V1;
const MAGIC: &[u8; 8] = HEAP_V2;
/// The file of a heap snapshot.
pub(crate) const FILE: &str = "heap-state.bin";

struct HeapState {
    name: String,
    kind: StateKind,
    /// Value and list rows.
    rows: HashMap<Vec<u8>, Vec<u8>>,
    /// Map rows: row key to user key to value.
    maps: HashMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>>,
    /// Timer rows (timer states): ordered, so each key group's timers are a range in firing order — the
    /// per-key-group priority queues; a snapshot copies a pointer per chunk of them, not the rows.
    timers: TimerSet,
    ttl: Option<StateTtlConfig>,
    /// Whether the state is scoped to namespaces (its rows end with `namespace | u32 BE length`).
    namespaced: bool,
    /// Whether the state was registered since the backend opened (else it is only restored).
    registered: bool,
    /// Row keys still to check by incremental TTL cleanup.
    cleanup_queue: Vec<Vec<u8>>,
    /// The snapshot file the state was first restored from (for errors; empty if registered).
    origin: String,
}

impl HeapState {
    fn new(
        name: String,
        kind: StateKind,
        ttl: Option<StateTtlConfig>,
        namespaced: bool,
        registered: bool,
        prefix_len: usize,
    ) -> Self {
        HeapState {
            name,
            kind,
            rows: HashMap::new(),
            maps: HashMap::new(),
            timers: TimerSet::new(prefix_len),
            ttl,
            namespaced,
            registered,
            cleanup_queue: Vec::new(),
            origin: String::new(),
        }
    }
}

impl HeapState {
    /// Rewrites every stored value in place ([`crate::keyed::migrate`]); returns how many.
    fn rewrite(&mut self, ttl: TtlChange, values: Option<&mut ValueMigration<'_>>) -> Result<u64, StateError> {
        let started = std::time::Instant::now();
        let mut rewrite = RowRewrite::new(&self.name, self.kind, ttl, values);
        let mut out = Vec::new();
        let rows = self.rows.values_mut().chain(self.maps.values_mut().flat_map(|m| m.values_mut()));
        for v in rows {
            out.clear();
            rewrite.row(v, &mut out)?;
            std::mem::swap(v, &mut out);
        }
        let count = rewrite.count;
        tracing::info!(state = %self.name, values = count, elapsed_ms = started.elapsed().as_millis() as u64, "state migrated");
        Ok(count)
    }
}

/// Keyed state in memory.
pub struct HeapBackend {
    range: KeyGroupRange,
    row: RowKeyBuilder,
    states: Vec<HeapState>,
    max_value_bytes: usize,
    clock: Arc<dyn Clock>,
    cleanup_entries: usize,
    /// Bytes of each state's rows as the last snapshot wrote them.
    snapshot_bytes: HashMap<String, u64>,
    /// Scratch: the timer row being looked up, or the start of a scan.
    timer_row: Vec<u8>,
    /// Scratch: the end of a timer scan.
    timer_hi: Vec<u8>,
}

fn write_bytes(w: &mut impl Write, b: &[u8]) -> std::io::Result<()> {
    w.write_all(&(b.len() as u32).to_le_bytes())?;
    w.write_all(b)
}

/// Writes the timer states `(name, kind record, rows)` at the end of a heap snapshot file and closes it;
/// returns the file's size.
fn finish_timers(mut w: BufWriter<File>, timers: &[(String, Vec<u8>, TimerSetSnapshot)]) -> Result<u64, StateError> {
    let io = |e| StateError::io("write heap snapshot", e);
    for (name, record, rows) in timers {
        write_bytes(&mut w, name.as_bytes()).map_err(io)?;
        w.write_all(record).map_err(io)?;
        w.write_all(&(rows.len() as u32).to_le_bytes()).map_err(io)?;
        for row in rows.iter() {
            write_bytes(&mut w, row).map_err(io)?;
            write_bytes(&mut w, &[]).map_err(io)?;
        }
    }
    let file = w.into_inner().map_err(|e| io(e.into_error()))?;
    Ok(file.metadata().map_err(io)?.len())
}

impl HeapBackend {
    /// An empty backend, or one restored from a snapshot directory.
    pub fn open(max_parallelism: u32, range: KeyGroupRange, restore_dir: Option<&Path>) -> Result<Self, StateError> {
        let mut b = HeapBackend {
            range,
            row: RowKeyBuilder::new(max_parallelism),
            states: Vec::new(),
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            clock: Arc::new(SystemClock),
            cleanup_entries: DEFAULT_INCREMENTAL_CLEANUP_ENTRIES,
            snapshot_bytes: HashMap::new(),
            timer_row: Vec::new(),
            timer_hi: Vec::new(),
        };
        if let Some(dir) = restore_dir {
            b.load(&dir.join(FILE), &[MAGIC, MAGIC_V1], None)?;
        }
        Ok(b)
    }

    /// Adds the states and rows of a heap or canonical snapshot file (its magic one of `accepted`) whose key
    /// group lies in `keep` (`None`: every row, for a snapshot of the backend's own range). A state that an earlier
    /// file declared must be declared alike ([`crate::keyed::meta::check_same_declaration`]); rows of one row key
    /// in two files are not expected (snapshots of one job hold disjoint key groups), the later file's would win.
    pub(crate) fn load(
        &mut self,
        path: &Path,
        accepted: &[&[u8; 8]],
        keep: Option<KeyGroupRange>,
    ) -> Result<(), StateError> {
        let mut r = StateFileReader::open(path, accepted)?;
        let origin = path.display().to_string();
        let prefix_len = self.row.prefix_len;
        let in_range = |key: &[u8]| row_in(key, prefix_len, keep);
        while let Some(header) = r.next_state()? {
            let (kind, ttl, namespaced) = header.record;
            let i = match self.states.iter().position(|s| s.name == header.name) {
                Some(i) => {
                    let st = &self.states[i];
                    let first = (st.kind, st.ttl, st.namespaced);
                    check_same_declaration(&header.name, (&first, &st.origin), (&header.record, &origin))?;
                    i
                }
                None => {
                    let mut st = HeapState::new(header.name.clone(), kind, ttl, namespaced, false, prefix_len);
                    st.origin = origin.clone();
                    self.states.push(st);
                    self.states.len() - 1
                }
            };
            let st = &mut self.states[i];
            // The map row being filled: entries of one row key come one after the other.
            let mut open: Option<(Vec<u8>, UserMap)> = None;
            r.rows(&mut |row| {
                match row {
                    Row::Value { key, value } => {
                        if in_range(key)? {
                            if st.kind == StateKind::Timers {
                                st.timers.insert(key)?;
                            } else {
                                st.rows.insert(key.to_vec(), value.to_vec());
                            }
                        }
                    }
                    Row::MapEntry { key, user_key, value } => {
                        if open.as_ref().is_none_or(|(k, _)| k.as_slice() != key) {
                            if let Some((k, m)) = open.take() {
                                st.maps.insert(k, m);
                            }
                            if in_range(key)? {
                                open = Some((key.to_vec(), BTreeMap::new()));
                            }
                        }
                        if let Some((_, m)) = &mut open {
                            m.insert(user_key.to_vec(), value.to_vec());
                        }
                    }
                }
                Ok(())
            })?;
            if let Some((k, m)) = open {
                st.maps.insert(k, m);
            }
        }
        Ok(())
    }

    /// Sets how many rows of a TTL state every access checks for expiry (0 turns incremental cleanup off).
    pub fn set_incremental_cleanup_entries(&mut self, entries: usize) {
        self.cleanup_entries = entries;
    }

    /// Incremental TTL cleanup: checks the next rows of `state` (not the current key's) and drops what expired.
    fn incremental_cleanup(&mut self, state: StateId) {
        let Some(ttl) = self.states[state.0].ttl else { return };
        let now = self.clock.now_ms();
        let current = self.row.key(self.states[state.0].namespaced);
        let st = &mut self.states[state.0];
        for _ in 0..self.cleanup_entries {
            if st.cleanup_queue.is_empty() {
                st.cleanup_queue = if st.kind == StateKind::Map {
                    st.maps.keys().cloned().collect()
                } else {
                    st.rows.keys().cloned().collect()
                };
            }
            let Some(k) = st.cleanup_queue.pop() else { return };
            if k == current {
                continue;
            }
            match st.kind {
                StateKind::Map => {
                    if let Some(m) = st.maps.get_mut(&k) {
                        m.retain(|_, v| !row_expired(&ttl, now, v));
                        if m.is_empty() {
                            st.maps.remove(&k);
                        }
                    }
                }
                StateKind::List => {
                    if let Some(kept) = st.rows.get(&k).and_then(|v| retain_unexpired(&ttl, now, v)) {
                        if kept.is_empty() {
                            st.rows.remove(&k);
                        } else {
                            st.rows.insert(k, kept);
                        }
                    }
                }
                _ => {
                    if st.rows.get(&k).is_some_and(|v| row_expired(&ttl, now, v)) {
                        st.rows.remove(&k);
                    }
                }
            }
        }
    }

    fn state(
        &mut self,
        state: StateId,
        op: &str,
        ok: impl Fn(StateKind) -> bool,
    ) -> Result<&mut HeapState, StateError> {
        let st = &mut self.states[state.0];
        if !ok(st.kind) {
            return Err(wrong_kind(&st.name, st.kind, op));
        }
        Ok(st)
    }
}

impl KeyedStateBackend for HeapBackend {
    fn register_state_with_options(
        &mut self,
        name: &str,
        kind: StateKind,
        options: &StateOptions,
    ) -> Result<StateId, StateError> {
        let ttl = options.ttl;
        if let Some(i) = self.states.iter().position(|s| s.name == name) {
            let now = self.clock.now_ms();
            let st = &mut self.states[i];
            check_redeclaration(name, (st.kind, st.ttl.as_ref(), st.namespaced), kind, options, !st.registered)?;
            let change = ttl_change(st.ttl.as_ref(), ttl.as_ref(), now);
            if !st.registered && !matches!(change, TtlChange::Keep { .. }) {
                st.rewrite(change, None)?;
            }
            st.ttl = ttl;
            st.registered = true;
            return Ok(StateId(i));
        }
        let prefix_len = self.row.prefix_len;
        self.states.push(HeapState::new(name.to_string(), kind, ttl, options.namespaced, true, prefix_len));
        Ok(StateId(self.states.len() - 1))
    }

    fn set_current_namespace(&mut self, namespace: &[u8]) {
        self.row.set_namespace(namespace);
    }

    fn set_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
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
        self.incremental_cleanup(state);
        self.state(state, "get_value", StateKind::is_value_row)?;
        Ok(self.states[state.0].rows.get(self.row.key(ns)).map(|v| v.as_slice()))
    }

    fn put_value(&mut self, state: StateId, value: &[u8]) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        self.incremental_cleanup(state);
        let limit = self.max_value_bytes;
        let st = self.state(state, "put_value", StateKind::is_value_row)?;
        if value.len() > limit {
            return Err(too_large(&st.name, st.kind, value.len(), limit));
        }
        let map = &mut self.states[state.0].rows;
        match map.get_mut(self.row.key(ns)) {
            Some(v) => {
                v.clear();
                v.extend_from_slice(value);
            }
            None => {
                map.insert(self.row.key(ns).to_vec(), value.to_vec());
            }
        }
        Ok(())
    }

    fn delete_value(&mut self, state: StateId) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        self.incremental_cleanup(state);
        self.state(state, "delete_value", StateKind::is_value_row)?;
        self.states[state.0].rows.remove(self.row.key(ns));
        Ok(())
    }

    fn for_each_value(&mut self, state: StateId, f: &mut RowVisitor<'_>) -> Result<(), StateError> {
        self.state(state, "for_each_value", StateKind::is_value_row)?;
        let ns = self.states[state.0].namespaced;
        let prefix = self.row.prefix_len;
        // Key-group order, like RocksDB, so both backends emit the same sequence.
        let mut rows: Vec<(&Vec<u8>, &Vec<u8>)> = self.states[state.0].rows.iter().collect();
        rows.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (k, v) in rows {
            if let Some(key) = self.row.visible_key(ns, &k[prefix..]) {
                f(key, v)?;
            }
        }
        Ok(())
    }

    fn for_each_list_element(&mut self, state: StateId, f: &mut ElementVisitor<'_>) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        self.incremental_cleanup(state);
        let row = self.row.key(ns);
        let st = &self.states[state.0];
        if st.kind != StateKind::List {
            return Err(wrong_kind(&st.name, st.kind, "list get"));
        }
        match st.rows.get(row) {
            Some(v) => decode_list(&st.name, v, f),
            None => Ok(()),
        }
    }

    fn append_list(&mut self, state: StateId, encoded: &[u8]) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        self.incremental_cleanup(state);
        let limit = self.max_value_bytes;
        let row = self.row.key(ns);
        let st = &mut self.states[state.0];
        if st.kind != StateKind::List {
            return Err(wrong_kind(&st.name, st.kind, "list add"));
        }
        let old = st.rows.get(row).map_or(0, |v| v.len());
        if old + encoded.len() > limit {
            return Err(too_large(&st.name, st.kind, old + encoded.len(), limit));
        }
        match st.rows.get_mut(row) {
            Some(v) => v.extend_from_slice(encoded),
            None => {
                st.rows.insert(row.to_vec(), encoded.to_vec());
            }
        }
        Ok(())
    }

    fn replace_list(&mut self, state: StateId, encoded: &[u8]) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        self.incremental_cleanup(state);
        let limit = self.max_value_bytes;
        let row = self.row.key(ns);
        let st = &mut self.states[state.0];
        if st.kind != StateKind::List {
            return Err(wrong_kind(&st.name, st.kind, "list update"));
        }
        if encoded.len() > limit {
            return Err(too_large(&st.name, st.kind, encoded.len(), limit));
        }
        if encoded.is_empty() {
            st.rows.remove(row);
        } else {
            st.rows.insert(row.to_vec(), encoded.to_vec());
        }
        Ok(())
    }

    fn map_get(&mut self, state: StateId, user_key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        let ns = self.states[state.0].namespaced;
        self.incremental_cleanup(state);
        let st = &self.states[state.0];
        if st.kind != StateKind::Map {
            return Err(wrong_kind(&st.name, st.kind, "map get"));
        }
        Ok(st.maps.get(self.row.key(ns)).and_then(|m| m.get(user_key)).cloned())
    }

    fn map_put(&mut self, state: StateId, user_key: &[u8], value: &[u8]) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        self.incremental_cleanup(state);
        let limit = self.max_value_bytes;
        let row = self.row.key(ns);
        let st = &mut self.states[state.0];
        if st.kind != StateKind::Map {
            return Err(wrong_kind(&st.name, st.kind, "map put"));
        }
        if value.len() > limit {
            return Err(too_large(&st.name, st.kind, value.len(), limit));
        }
        match st.maps.get_mut(row) {
            Some(m) => {
                m.insert(user_key.to_vec(), value.to_vec());
            }
            None => {
                st.maps.insert(row.to_vec(), BTreeMap::from([(user_key.to_vec(), value.to_vec())]));
            }
        }
        Ok(())
    }

    fn map_remove(&mut self, state: StateId, user_key: &[u8]) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        self.incremental_cleanup(state);
        let row = self.row.key(ns);
        let st = &mut self.states[state.0];
        if st.kind != StateKind::Map {
            return Err(wrong_kind(&st.name, st.kind, "map remove"));
        }
        if let Some(m) = st.maps.get_mut(row) {
            m.remove(user_key);
            if m.is_empty() {
                st.maps.remove(row);
            }
        }
        Ok(())
    }

    fn for_each_map_entry(&mut self, state: StateId, f: &mut RowVisitor<'_>) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        self.incremental_cleanup(state);
        let st = &self.states[state.0];
        if st.kind != StateKind::Map {
            return Err(wrong_kind(&st.name, st.kind, "map iteration"));
        }
        if let Some(m) = st.maps.get(self.row.key(ns)) {
            for (k, v) in m {
                f(k, v)?;
            }
        }
        Ok(())
    }

    fn map_is_empty(&mut self, state: StateId) -> Result<bool, StateError> {
        let ns = self.states[state.0].namespaced;
        self.incremental_cleanup(state);
        let st = &self.states[state.0];
        if st.kind != StateKind::Map {
            return Err(wrong_kind(&st.name, st.kind, "map is_empty"));
        }
        Ok(st.maps.get(self.row.key(ns)).is_none_or(|m| m.is_empty()))
    }

    fn clear_key(&mut self, state: StateId) -> Result<(), StateError> {
        let ns = self.states[state.0].namespaced;
        let st = &mut self.states[state.0];
        st.rows.remove(self.row.key(ns));
        st.maps.remove(self.row.key(ns));
        Ok(())
    }

    fn clear_all(&mut self, state: StateId) -> Result<(), StateError> {
        let st = &mut self.states[state.0];
        st.rows.clear();
        st.maps.clear();
        st.timers.clear();
        Ok(())
    }

    fn current_key_and_namespace(&self) -> (&[u8], &[u8]) {
        self.row.current()
    }

    fn current_key_group(&self) -> Result<u32, StateError> {
        self.row.key_group()
    }

    fn add_timer(&mut self, state: StateId, timestamp: i64) -> Result<(u32, bool), StateError> {
        let kg = self.row.timer_row(timestamp, &mut self.timer_row)?;
        let st = &mut self.states[state.0];
        if st.kind != StateKind::Timers {
            return Err(wrong_kind(&st.name, st.kind, "add_timer"));
        }
        Ok((kg, st.timers.insert(&self.timer_row)?))
    }

    fn delete_timer(&mut self, state: StateId, timestamp: i64) -> Result<bool, StateError> {
        self.row.timer_row(timestamp, &mut self.timer_row)?;
        let st = &mut self.states[state.0];
        if st.kind != StateKind::Timers {
            return Err(wrong_kind(&st.name, st.kind, "delete_timer"));
        }
        Ok(st.timers.remove(&self.timer_row))
    }

    fn first_timer(
        &mut self,
        state: StateId,
        key_group: u32,
        from: i64,
        after: Option<&TimerRow>,
        out: &mut TimerRow,
    ) -> Result<bool, StateError> {
        let (mut lo, hi) = self.row.timer_bounds(key_group, from);
        if let Some(after) = after {
            self.row.timer_after(key_group, after, &mut lo);
        }
        let prefix_len = self.row.prefix_len;
        let st = self.state(state, "first_timer", |k| k == StateKind::Timers)?;
        match st.timers.range(&lo, Some(&hi)).next() {
            Some(row) => {
                out.read(&row[prefix_len..])?;
                Ok(true)
            }
            None => Ok(false),
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
        self.row.timer_scan_bounds(key_group, from, after, &mut self.timer_row, &mut self.timer_hi);
        let prefix_len = self.row.prefix_len;
        let st = &self.states[state.0];
        if st.kind != StateKind::Timers {
            return Err(wrong_kind(&st.name, st.kind, "scan_timers"));
        }
        for row in st.timers.range(&self.timer_row, Some(&self.timer_hi)) {
            if !f(&row[prefix_len..])? {
                break;
            }
        }
        Ok(())
    }

    fn remove_timer(&mut self, state: StateId, key_group: u32, timer: &TimerRow) -> Result<(), StateError> {
        self.row.timer_row_of(key_group, timer, &mut self.timer_row);
        let st = &mut self.states[state.0];
        if st.kind != StateKind::Timers {
            return Err(wrong_kind(&st.name, st.kind, "remove_timer"));
        }
        st.timers.remove(&self.timer_row);
        Ok(())
    }

    fn timer_count(&mut self, state: StateId) -> Result<u64, StateError> {
        Ok(self.state(state, "timer_count", |k| k == StateKind::Timers)?.timers.len() as u64)
    }

    fn snapshot_sync(&mut self, dir: &Path) -> Result<LocalSnapshot, StateError> {
        std::fs::create_dir_all(dir).map_err(|e| StateError::io(format!("create {}", dir.display()), e))?;
        let path = dir.join(FILE);
        let file = std::fs::File::create(&path).map_err(|e| StateError::io(format!("create {}", path.display()), e))?;
        let mut w = BufWriter::new(file);
        let io = |e| StateError::io("write heap snapshot", e);
        w.write_all(MAGIC).map_err(io)?;
        w.write_all(&(self.states.len() as u32).to_le_bytes()).map_err(io)?;
        let now = self.clock.now_ms();
        let mut bytes = HashMap::with_capacity(self.states.len());
        let mut timers = Vec::new();
        for st in &self.states {
            if st.kind == StateKind::Timers {
                // Written last, by a thread, from pointers to the rows as they are now (see `timers/set.rs`).
                bytes.insert(st.name.clone(), st.timers.bytes());
                let record = encode_kind_record(st.kind, st.ttl.as_ref(), st.namespaced);
                timers.push((st.name.clone(), record, st.timers.snapshot()));
                continue;
            }
            let mut n = 0u64;
            write_bytes(&mut w, st.name.as_bytes()).map_err(io)?;
            w.write_all(&encode_kind_record(st.kind, st.ttl.as_ref(), st.namespaced)).map_err(io)?;
            // Full-snapshot TTL cleanup: expired values, elements and entries are left out.
            let live = |v: &Vec<u8>| st.ttl.is_none_or(|t| !row_expired(&t, now, v));
            if st.kind == StateKind::Map {
                let maps: Vec<LiveMap<'_>> = st
                    .maps
                    .iter()
                    .map(|(k, m)| (k, m.iter().filter(|(_, v)| live(v)).collect::<Vec<_>>()))
                    .filter(|(_, m)| st.ttl.is_none() || !m.is_empty())
                    .collect();
                w.write_all(&(maps.len() as u32).to_le_bytes()).map_err(io)?;
                for (k, m) in maps {
                    write_bytes(&mut w, k).map_err(io)?;
                    w.write_all(&(m.len() as u32).to_le_bytes()).map_err(io)?;
                    n += k.len() as u64;
                    for (uk, v) in m {
                        write_bytes(&mut w, uk).map_err(io)?;
                        write_bytes(&mut w, v).map_err(io)?;
                        n += (uk.len() + v.len()) as u64;
                    }
                }
            } else {
                let rows: Vec<(&Vec<u8>, Cow<'_, [u8]>)> = st
                    .rows
                    .iter()
                    .filter_map(|(k, v)| match (&st.ttl, st.kind) {
                        (None, _) => Some((k, Cow::Borrowed(v.as_slice()))),
                        (Some(t), StateKind::List) => match retain_unexpired(t, now, v) {
                            None => Some((k, Cow::Borrowed(v.as_slice()))),
                            Some(kept) if kept.is_empty() => None,
                            Some(kept) => Some((k, Cow::Owned(kept))),
                        },
                        (Some(_), _) => live(v).then_some((k, Cow::Borrowed(v.as_slice()))),
                    })
                    .collect();
                w.write_all(&(rows.len() as u32).to_le_bytes()).map_err(io)?;
                for (k, v) in rows {
                    write_bytes(&mut w, k).map_err(io)?;
                    write_bytes(&mut w, &v).map_err(io)?;
                    n += (k.len() + v.len()) as u64;
                }
            }
            bytes.insert(st.name.clone(), n);
        }
        self.snapshot_bytes = bytes;
        let mut snapshot = LocalSnapshot {
            dir: dir.to_path_buf(),
            files: Vec::new(),
            backend: "heap",
            key_group_range: self.range,
            pending: None,
        };
        if timers.iter().all(|(_, _, rows)| rows.len() == 0) {
            snapshot.files.push((FILE.to_string(), finish_timers(w, &timers)?));
            return Ok(snapshot);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("weir-heap-timers".into())
            .spawn(move || {
                let _ = tx.send(finish_timers(w, &timers).map(|size| vec![(FILE.to_string(), size)]));
            })
            .map_err(|e| StateError::io("start the heap snapshot's timer writer", e))?;
        snapshot.pending = Some(PendingFiles(rx));
        Ok(snapshot)
    }

    fn migrate_state(&mut self, name: &str, migration: &mut ValueMigration<'_>) -> Result<u64, StateError> {
        let st =
            self.states.iter_mut().find(|s| s.name == name).ok_or_else(|| {
                StateError::Restore(format!("state {name:?} to migrate is not in the restored state"))
            })?;
        if st.registered {
            return Err(StateError::Declaration {
                name: name.to_string(),
                message: "already registered: a state is migrated before the operator registers it".into(),
            });
        }
        let stamped = st.ttl.is_some();
        st.rewrite(TtlChange::Keep { stamped }, Some(migration))
    }

    fn kind(&self) -> &'static str {
        "heap"
    }

    fn state_summaries(&self) -> Result<Vec<crate::keyed::meta::StateSummary>, StateError> {
        let mut out: Vec<_> = self
            .states
            .iter()
            .map(|st| crate::keyed::meta::StateSummary {
                name: st.name.clone(),
                kind: st.kind,
                ttl: st.ttl,
                bytes: self.snapshot_bytes.get(&st.name).copied().unwrap_or(0),
                entries: (st.kind == StateKind::Timers).then_some(st.timers.len() as u64),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    #[cfg(test)]
    fn stored(&mut self) -> crate::keyed::StoredContent {
        let mut out = crate::keyed::StoredContent::default();
        for st in &self.states {
            out.0.insert(st.name.clone(), (st.kind, st.ttl, st.namespaced));
            for (k, v) in &st.rows {
                out.1.insert((st.name.clone(), k.clone(), None, v.clone()));
            }
            for (k, m) in &st.maps {
                for (uk, v) in m {
                    out.1.insert((st.name.clone(), k.clone(), Some(uk.clone()), v.clone()));
                }
            }
            for k in st.timers.iter() {
                out.1.insert((st.name.clone(), k.to_vec(), None, Vec::new()));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::typed::handles::ValueState;

    #[test]
    fn snapshot_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let mut b = HeapBackend::open(128, range, None).unwrap();
        let mut st = ValueState::<u64>::register(&mut b, "c").unwrap();
        for i in 0u64..100 {
            b.set_current_key(&i.to_be_bytes());
            st.update(&mut b, &(i * 2)).unwrap();
        }
        let mut snap = b.snapshot_sync(&tmp.path().join("s")).unwrap();
        snap.ready_blocking().unwrap();
        let mut r = HeapBackend::open(128, range, Some(&snap.dir)).unwrap();
        let st2 = ValueState::<u64>::register(&mut r, "c").unwrap();
        r.set_current_key(&21u64.to_be_bytes());
        assert_eq!(st2.value(&mut r).unwrap(), Some(42));
        std::fs::write(snap.dir.join(FILE), b"garbage").unwrap();
        assert!(HeapBackend::open(128, range, Some(&snap.dir)).is_err());
    }

    #[test]
    fn reads_version_1_snapshots_as_value_states() {
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let mut row = RowKeyBuilder::new(128);
        row.set(b"k");
        let mut file = MAGIC_V1.to_vec();
        file.extend_from_slice(&1u32.to_le_bytes());
        write_bytes(&mut file, b"old").unwrap();
        file.extend_from_slice(&1u32.to_le_bytes());
        write_bytes(&mut file, &row.row).unwrap();
        write_bytes(&mut file, &7u64.to_be_bytes()).unwrap();
        std::fs::write(tmp.path().join(FILE), file).unwrap();
        let mut r = HeapBackend::open(128, range, Some(tmp.path())).unwrap();
        assert!(r.register_state("old", StateKind::List).is_err());
        let st = ValueState::<u64>::register(&mut r, "old").unwrap();
        r.set_current_key(b"k");
        assert_eq!(st.value(&mut r).unwrap(), Some(7));
    }

    #[test]
    fn ttl_incremental_cleanup_and_snapshot_filtering() {
        use crate::keyed::meta::StateDescriptor;
        use crate::keyed::ttl::{ManualClock, StateTtlConfig};
        use crate::typed::handles::{ListState, MapState};
        use std::time::Duration;
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        let mut b = HeapBackend::open(128, range, None).unwrap();
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
            plain.update(&mut b, &i).unwrap();
        }
        clock.set(1100);
        // The snapshot leaves out what expired.
        let mut snap = b.snapshot_sync(&tmp.path().join("s")).unwrap();
        snap.ready_blocking().unwrap();
        let r = HeapBackend::open(128, range, Some(&snap.dir)).unwrap();
        for (st, want) in r.states.iter().zip([50, 50, 50, 100]) {
            assert_eq!(st.rows.len() + st.maps.len(), want, "state {}", st.name);
        }
        // Accesses of one key check 5 other rows of the state each: 40 accesses see every row.
        b.set_current_key(&7u64.to_be_bytes());
        v.value(&mut b).unwrap();
        assert!(b.states[0].rows.len() > 50);
        for _ in 0..40 {
            v.value(&mut b).unwrap();
        }
        assert_eq!(b.states[0].rows.len(), 50);
        assert_eq!(b.states[3].rows.len(), 100, "states without TTL are never cleaned");
        b.set_incremental_cleanup_entries(0);
        clock.set(2000);
        for _ in 0..10 {
            l.get(&mut b).unwrap();
        }
        assert!(b.states[1].rows.len() > 1, "cleanup turned off");
    }
}
