//! Timer services: an operator's event-time and processing-time timers, kept as keyed state.
//!
//! Each time domain is one state of kind [`StateKind::Timers`] ([`EVENT_TIMERS`], [`PROCESSING_TIMERS`]) whose
//! rows are `kg | timestamp | key | namespace | u32 BE len(namespace)` (`keyed/layout.rs`): key group first, so a
//! key-group range is one interval and timers move with their key groups through every snapshot, restore and
//! rescale path other keyed state takes (RocksDB: a column family per domain, imported whole or cut by range
//! deletes; heap: an ordered set per domain written as rows); then timestamp, so each key group's timers are
//! read in firing order. A timer is unique per (key, namespace, timestamp, domain): the row is the timer.
//!
//! In memory the service keeps each key group's earliest timestamp — a lower bound, exact after every read — in
//! one ordered set, Flink's `KeyGroupPartitionedPriorityQueue` of heads: the next timer overall is the first timer
//! of the key group at the front. Deleting a timer leaves the bound as it is; the next read finds the real head.
//!
//! Firing reads a key group's due timers ahead, up to 128 of them with one seek (Flink's per-key-group
//! cache of RocksDB timer heads), and fires the following ones from that batch, which stays exact: every timer
//! of the key group up to the last row read is in it. So a timer set or deleted at or before that row while the
//! batch lasts is added to it (in order: it fires next if it sorts first) or taken out of it, while a later
//! one only lowers the bound of what follows the batch. The next read seeks past the last row read, so the
//! tombstones of fired timers are skipped, not walked. The batches are volatile: they hold copies of rows that
//! stay in the backend until fired, so snapshots, restores and rescales never see them. Every change of the
//! timer states goes through the service.
//!
//! The backends keep timer rows in memory in the ordered sets of `set.rs`, whose snapshot copies pointers to
//! chunks of rows: the heap all of them, RocksDB those registered since its last flush.

pub(crate) mod set;

use crate::error::StateError;
use crate::keyed::layout::{append_timer, timer_row_timestamp, TimerRow};
use crate::keyed::meta::{StateKind, StateOptions};
use crate::keyed::{KeyedStateBackend, StateId};
use std::collections::{BTreeSet, VecDeque};
use weir_common::state::keygroup::KeyGroupRange;

/// The state holding an operator's event-time timers.
pub const EVENT_TIMERS: &str = "_timers.event";
/// The state holding an operator's processing-time timers.
pub const PROCESSING_TIMERS: &str = "_timers.processing";

/// Due timers read ahead per key group at most, with one seek.
const BATCH: usize = 128;
/// Due timers read ahead over all key groups of a domain at most: a subtask with many key groups reads fewer
/// per key group (down to [`MIN_BATCH`]), so that the memory they take stays bounded.
const CACHED_ROWS: usize = 16_384;
/// Due timers read ahead per key group at least.
const MIN_BATCH: usize = 8;

/// The clock a timer follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeDomain {
    /// Fires when the watermark reaches its timestamp.
    EventTime,
    /// Fires when the wall clock (the backend's clock) reaches its timestamp.
    ProcessingTime,
}

impl TimeDomain {
    /// The domain's name, as `savepoint inspect` shows it.
    pub fn name(self) -> &'static str {
        match self {
            TimeDomain::EventTime => "event-time",
            TimeDomain::ProcessingTime => "processing-time",
        }
    }

    /// The state holding the domain's timers.
    pub fn state_name(self) -> &'static str {
        match self {
            TimeDomain::EventTime => EVENT_TIMERS,
            TimeDomain::ProcessingTime => PROCESSING_TIMERS,
        }
    }

    /// The domain whose timers state `name` holds.
    pub fn of_state(name: &str) -> Option<TimeDomain> {
        match name {
            EVENT_TIMERS => Some(TimeDomain::EventTime),
            PROCESSING_TIMERS => Some(TimeDomain::ProcessingTime),
            _ => None,
        }
    }
}

/// One key group's timers read ahead of firing.
#[derive(Debug, Default)]
struct Batch {
    /// Whether the batch covers the key group up to `last`: its timers up to that row are exactly `pending`.
    covered: bool,
    /// The last row read (without key-group prefix), if `covered`.
    last: Vec<u8>,
    /// The rows (slots of [`TimerQueue::rows`]) read and not fired yet, in firing order.
    pending: VecDeque<u32>,
    /// A lower bound of the key group's first timer after `last` (exact when read); `None`: it has none.
    next: Option<i64>,
}

/// One domain's timers: the state, the earliest timestamp of each key group and the batches read ahead.
#[derive(Debug)]
struct TimerQueue {
    state: StateId,
    range: KeyGroupRange,
    /// Per key group of `range`: a lower bound of its earliest timer (exact after a read), `None` if it has none.
    head: Vec<Option<i64>>,
    /// `(head, key group)` of every key group with timers: the first is the next to fire.
    heads: BTreeSet<(i64, u32)>,
    /// Per key group of `range`: its batch.
    batches: Vec<Batch>,
    /// How many due timers a read takes at most.
    batch: usize,
    /// The rows of all batches, each a buffer kept for reuse once its timer fired (`free`).
    rows: Vec<Vec<u8>>,
    free: Vec<u32>,
    /// Scratch: the row of a timer being set or deleted.
    row: Vec<u8>,
    /// The timer being fired.
    current: TimerRow,
}

impl TimerQueue {
    fn open(
        backend: &mut dyn KeyedStateBackend,
        domain: TimeDomain,
        range: KeyGroupRange,
    ) -> Result<TimerQueue, StateError> {
        let state =
            backend.register_state_with_options(domain.state_name(), StateKind::Timers, &StateOptions::default())?;
        let groups = (range.end - range.start + 1) as usize;
        let mut q = TimerQueue {
            state,
            range,
            head: vec![None; groups],
            heads: BTreeSet::new(),
            batches: (0..groups).map(|_| Batch::default()).collect(),
            batch: (CACHED_ROWS / groups).clamp(MIN_BATCH, BATCH),
            rows: Vec::new(),
            free: Vec::new(),
            row: Vec::new(),
            current: TimerRow::default(),
        };
        for kg in range.start..=range.end {
            if backend.first_timer(state, kg, i64::MIN, None, &mut q.current)? {
                q.set_head(kg, Some(q.current.timestamp));
            }
        }
        Ok(q)
    }

    fn slot(&self, kg: u32) -> Result<usize, StateError> {
        if kg < self.range.start || kg > self.range.end {
            return Err(StateError::Declaration {
                name: "timers".into(),
                message: format!("a timer of key group {kg} is outside this subtask's key groups {:?}", self.range),
            });
        }
        Ok((kg - self.range.start) as usize)
    }

    fn set_head(&mut self, kg: u32, head: Option<i64>) {
        let i = (kg - self.range.start) as usize;
        if self.head[i] == head {
            return;
        }
        if let Some(old) = self.head[i] {
            self.heads.remove(&(old, kg));
        }
        if let Some(new) = head {
            self.heads.insert((new, kg));
        }
        self.head[i] = head;
    }

    /// A free row buffer.
    fn take_row(rows: &mut Vec<Vec<u8>>, free: &mut Vec<u32>) -> u32 {
        free.pop().unwrap_or_else(|| {
            rows.push(Vec::new());
            (rows.len() - 1) as u32
        })
    }

    /// Whether the current key and namespace's timer at `ts` falls inside key group slot `i`'s batch; if so,
    /// its row is in `self.row`.
    fn in_batch(&mut self, backend: &dyn KeyedStateBackend, i: usize, ts: i64) -> Result<bool, StateError> {
        let b = &self.batches[i];
        if !b.covered || ts > timer_row_timestamp(&b.last)? {
            return Ok(false);
        }
        let (key, namespace) = backend.current_key_and_namespace();
        self.row.clear();
        append_timer(ts, key, namespace, &mut self.row);
        Ok(self.row <= b.last)
    }

    /// A new timer at `ts` (its row in `self.row` if [`TimerQueue::in_batch`]) joins slot `i`'s batch, or
    /// lowers the bound of what follows it.
    fn added(&mut self, backend: &dyn KeyedStateBackend, i: usize, ts: i64) -> Result<(), StateError> {
        if !self.in_batch(backend, i, ts)? {
            let b = &mut self.batches[i];
            if b.covered {
                b.next = Some(b.next.map_or(ts, |n| n.min(ts)));
            }
            return Ok(());
        }
        let r = Self::take_row(&mut self.rows, &mut self.free);
        self.rows[r as usize].clone_from(&self.row);
        let b = &mut self.batches[i];
        let rows = &self.rows;
        let at = b.pending.partition_point(|&p| rows[p as usize] < self.row);
        b.pending.insert(at, r);
        if b.pending.len() > self.batch {
            // Too many: the last one is read again after the batch.
            if let Some(dropped) = b.pending.pop_back() {
                self.free.push(dropped);
                let ts = timer_row_timestamp(&self.rows[dropped as usize])?;
                b.next = Some(b.next.map_or(ts, |n| n.min(ts)));
            }
            if let Some(&l) = b.pending.back() {
                b.last.clone_from(&self.rows[l as usize]);
            }
        }
        Ok(())
    }

    /// A deleted timer at `ts` leaves slot `i`'s batch, if it was in it.
    fn deleted(&mut self, backend: &dyn KeyedStateBackend, i: usize, ts: i64) -> Result<(), StateError> {
        if !self.in_batch(backend, i, ts)? {
            return Ok(());
        }
        let b = &mut self.batches[i];
        let rows = &self.rows;
        match b.pending.binary_search_by(|&p| rows[p as usize].cmp(&self.row)) {
            Ok(at) => {
                if let Some(r) = b.pending.remove(at) {
                    self.free.push(r);
                }
            }
            // Every timer up to `last` is in the batch; if not, reading again is right in any case.
            Err(_) => self.drop_batch(i),
        }
        Ok(())
    }

    /// Forgets slot `i`'s batch; the key group's head stays a lower bound of its timers.
    fn drop_batch(&mut self, i: usize) {
        let b = &mut self.batches[i];
        self.free.extend(b.pending.drain(..));
        b.covered = false;
        b.next = None;
    }

    /// Reads the next due timers (timestamp ≤ `time`) of key group `kg` (slot `i`, head `bound`) into its
    /// batch, which is empty; returns the key group's new head.
    fn read(
        &mut self,
        backend: &mut dyn KeyedStateBackend,
        kg: u32,
        i: usize,
        bound: i64,
        time: i64,
    ) -> Result<Option<i64>, StateError> {
        let b = &mut self.batches[i];
        // Past the rows read last: the tombstones of the timers fired since are not walked again.
        let after = match b.covered && timer_row_timestamp(&b.last)? >= bound {
            true => Some(&b.last[..]),
            false => None,
        };
        let (rows, free, limit) = (&mut self.rows, &mut self.free, self.batch);
        let mut next = None;
        backend.scan_timers(self.state, kg, bound, after, &mut |row| {
            let ts = timer_row_timestamp(row)?;
            if ts > time || b.pending.len() >= limit {
                next = Some(ts);
                return Ok(false);
            }
            let r = Self::take_row(rows, free);
            let buf = &mut rows[r as usize];
            buf.clear();
            buf.extend_from_slice(row);
            b.pending.push_back(r);
            Ok(true)
        })?;
        match (b.pending.front(), b.pending.back()) {
            (Some(&first), Some(&l)) => {
                b.covered = true;
                b.last.clone_from(&rows[l as usize]);
                b.next = next;
                Ok(Some(timer_row_timestamp(&rows[first as usize])?))
            }
            // Nothing due: what was covered still is (nothing up to `last` is left).
            _ => {
                b.next = next;
                Ok(next)
            }
        }
    }
}

/// An operator's timers in both domains, stored in its keyed backend (see the module docs).
#[derive(Debug)]
pub struct TimerService {
    event: TimerQueue,
    processing: TimerQueue,
}

impl TimerService {
    /// Opens the timer service of `backend` (whose key groups are `range`): registers its two timer states —
    /// restored ones keep their timers — and reads each key group's earliest timer.
    pub fn open(backend: &mut dyn KeyedStateBackend, range: KeyGroupRange) -> Result<TimerService, StateError> {
        Ok(TimerService {
            event: TimerQueue::open(backend, TimeDomain::EventTime, range)?,
            processing: TimerQueue::open(backend, TimeDomain::ProcessingTime, range)?,
        })
    }

    /// Reads at most `n` due timers ahead per key group (tests: batches refilled and overflowing often).
    #[cfg(test)]
    fn with_batch(mut self, n: usize) -> TimerService {
        self.event.batch = n;
        self.processing.batch = n;
        self
    }

    fn queue(&mut self, domain: TimeDomain) -> &mut TimerQueue {
        match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcessingTime => &mut self.processing,
        }
    }

    /// Registers a timer at `timestamp` for the backend's current key and namespace; false if it existed.
    pub fn register(
        &mut self,
        backend: &mut dyn KeyedStateBackend,
        domain: TimeDomain,
        timestamp: i64,
    ) -> Result<bool, StateError> {
        let q = self.queue(domain);
        let (kg, new) = backend.add_timer(q.state, timestamp)?;
        let i = q.slot(kg)?;
        if !new {
            return Ok(false);
        }
        q.added(backend, i, timestamp)?;
        if q.head[i].is_none_or(|h| timestamp < h) {
            q.set_head(kg, Some(timestamp));
        }
        Ok(true)
    }

    /// Deletes the current key and namespace's timer at `timestamp`; whether there was one.
    pub fn delete(
        &mut self,
        backend: &mut dyn KeyedStateBackend,
        domain: TimeDomain,
        timestamp: i64,
    ) -> Result<bool, StateError> {
        let q = self.queue(domain);
        if !backend.delete_timer(q.state, timestamp)? {
            return Ok(false);
        }
        let i = q.slot(backend.current_key_group()?)?;
        // The key group's head stays a lower bound; the next read finds the real one.
        q.deleted(backend, i, timestamp)?;
        Ok(true)
    }

    /// A lower bound of the earliest timer of `domain` (exact unless timers were deleted since it was read).
    pub fn next_timestamp(&self, domain: TimeDomain) -> Option<i64> {
        let q = match domain {
            TimeDomain::EventTime => &self.event,
            TimeDomain::ProcessingTime => &self.processing,
        };
        q.heads.first().map(|(ts, _)| *ts)
    }

    /// Removes the earliest timer of `domain` due at `time` (timestamp ≤ `time`), makes its key and namespace
    /// the backend's current ones and returns its timestamp; `None` if no timer is due. Timers fire in
    /// timestamp order across key groups; one registered while firing, if due, is returned by a later call.
    pub fn pop_due(
        &mut self,
        backend: &mut dyn KeyedStateBackend,
        domain: TimeDomain,
        time: i64,
    ) -> Result<Option<i64>, StateError> {
        let q = self.queue(domain);
        while let Some(&(bound, kg)) = q.heads.first() {
            if bound > time {
                return Ok(None);
            }
            let i = (kg - q.range.start) as usize;
            let Some(&r) = q.batches[i].pending.front() else {
                let head = q.read(backend, kg, i, bound, time)?;
                q.set_head(kg, head);
                continue;
            };
            let ts = timer_row_timestamp(&q.rows[r as usize])?;
            // The bound was below the real head: another key group's timer may come first.
            if ts != bound {
                q.set_head(kg, Some(ts));
                continue;
            }
            q.current.read(&q.rows[r as usize])?;
            backend.remove_timer(q.state, kg, &q.current)?;
            let b = &mut q.batches[i];
            b.pending.pop_front();
            q.free.push(r);
            let head = match b.pending.front() {
                Some(&n) => Some(timer_row_timestamp(&q.rows[n as usize])?),
                None => b.next,
            };
            q.set_head(kg, head);
            backend.set_current_key_in_group(&q.current.key, kg);
            backend.set_current_namespace(&q.current.namespace);
            return Ok(Some(ts));
        }
        Ok(None)
    }

    /// The key (serialized) of the timer [`TimerService::pop_due`] returned last in `domain`.
    pub fn fired_key(&self, domain: TimeDomain) -> &[u8] {
        match domain {
            TimeDomain::EventTime => &self.event.current.key,
            TimeDomain::ProcessingTime => &self.processing.current.key,
        }
    }

    /// How many timers `domain` holds.
    pub fn count(&mut self, backend: &mut dyn KeyedStateBackend, domain: TimeDomain) -> Result<u64, StateError> {
        backend.timer_count(self.queue(domain).state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::HeapBackend;
    use crate::rocks::{RocksDbBackend, RocksOptions};
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn backends(dir: &std::path::Path, range: KeyGroupRange) -> Vec<Box<dyn KeyedStateBackend>> {
        vec![
            Box::new(HeapBackend::open(128, range, None).unwrap()),
            Box::new(RocksDbBackend::open(&dir.join("rocks"), 128, range, None, RocksOptions::default()).unwrap()),
        ]
    }

    /// Fires every timer of `domain` due at `time`, as `(timestamp, key, namespace)`.
    fn fire(
        s: &mut TimerService,
        b: &mut dyn KeyedStateBackend,
        domain: TimeDomain,
        time: i64,
    ) -> Vec<(i64, Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(ts) = s.pop_due(b, domain, time).unwrap() {
            let (key, ns) = b.current_key_and_namespace();
            assert_eq!(key, s.fired_key(domain));
            out.push((ts, key.to_vec(), ns.to_vec()));
        }
        out
    }

    #[test]
    fn timers_fire_in_timestamp_order_once_and_deduplicated_on_both_backends() {
        let tmp = tempfile::tempdir().unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        for mut b in backends(tmp.path(), range) {
            let b = &mut *b;
            let mut s = TimerService::open(b, range).unwrap();
            for (key, ns, ts) in
                [("a", "", 30), ("b", "w", 10), ("a", "", 30), ("c", "", 20), ("a", "x", 30), ("d", "", 5)]
            {
                b.set_current_key(key.as_bytes());
                b.set_current_namespace(ns.as_bytes());
                s.register(b, TimeDomain::EventTime, ts).unwrap();
            }
            b.set_current_key(b"p");
            b.set_current_namespace(b"");
            s.register(b, TimeDomain::ProcessingTime, 7).unwrap();
            assert_eq!(
                s.count(b, TimeDomain::EventTime).unwrap(),
                5,
                "{}: one timer per key, namespace, time",
                b.kind()
            );
            b.set_current_key(b"d");
            assert!(s.delete(b, TimeDomain::EventTime, 5).unwrap());
            assert!(!s.delete(b, TimeDomain::EventTime, 5).unwrap());
            assert_eq!(s.next_timestamp(TimeDomain::EventTime), Some(5), "a deleted head stays a lower bound");
            assert!(fire(&mut s, b, TimeDomain::EventTime, 9).is_empty());
            let fired = fire(&mut s, b, TimeDomain::EventTime, 30);
            let got: Vec<(i64, &str, &str)> = fired
                .iter()
                .map(|(t, k, n)| (*t, std::str::from_utf8(k).unwrap(), std::str::from_utf8(n).unwrap()))
                .collect();
            assert_eq!(got[..2], [(10, "b", "w"), (20, "c", "")], "{}", b.kind());
            let mut last: Vec<_> = got[2..].to_vec();
            last.sort();
            assert_eq!(last, [(30, "a", ""), (30, "a", "x")], "{}", b.kind());
            assert!(fire(&mut s, b, TimeDomain::EventTime, i64::MAX).is_empty(), "{}: fired once", b.kind());
            assert_eq!(s.count(b, TimeDomain::EventTime).unwrap(), 0);
            let fired = fire(&mut s, b, TimeDomain::ProcessingTime, 7);
            assert_eq!(fired, [(7, b"p".to_vec(), vec![])]);
            assert_eq!(s.next_timestamp(TimeDomain::ProcessingTime), None);
        }
    }

    #[test]
    fn a_timer_registered_while_firing_fires_in_the_same_pass_if_due() {
        let range = KeyGroupRange { start: 0, end: 127 };
        let tmp = tempfile::tempdir().unwrap();
        for mut b in backends(tmp.path(), range) {
            let b = &mut *b;
            let mut s = TimerService::open(b, range).unwrap();
            b.set_current_key(b"k");
            s.register(b, TimeDomain::EventTime, 10).unwrap();
            assert_eq!(s.pop_due(b, TimeDomain::EventTime, 100).unwrap(), Some(10));
            // Another key, earlier than a pending one: still in timestamp order.
            b.set_current_key(b"z");
            s.register(b, TimeDomain::EventTime, 50).unwrap();
            b.set_current_key(b"y");
            s.register(b, TimeDomain::EventTime, 11).unwrap();
            assert_eq!(s.pop_due(b, TimeDomain::EventTime, 100).unwrap(), Some(11));
            assert_eq!(s.pop_due(b, TimeDomain::EventTime, 100).unwrap(), Some(50));
            assert_eq!(s.pop_due(b, TimeDomain::EventTime, 100).unwrap(), None);
        }
    }

    /// A timer set while a key group fires, at the time being fired and sorting before the last fired one
    /// (here: the same timer again), is not skipped by the read that resumes after the last fired timer.
    #[test]
    fn a_timer_set_behind_the_last_fired_one_still_fires() {
        let range = KeyGroupRange { start: 0, end: 127 };
        let group = |k: &[u8]| weir_common::state::keygroup::key_group_for_key(k, 128).0;
        let a = b"a".to_vec();
        let b = (0u32..).map(|i| format!("b{i}").into_bytes()).find(|k| group(k) == group(&a)).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        for mut backend in backends(tmp.path(), range) {
            let bk = &mut *backend;
            let mut s = TimerService::open(bk, range).unwrap();
            for k in [&a, &b] {
                bk.set_current_key(k);
                s.register(bk, TimeDomain::EventTime, 7).unwrap();
            }
            assert_eq!(s.pop_due(bk, TimeDomain::EventTime, 10).unwrap(), Some(7));
            assert_eq!(bk.current_key_and_namespace().0, &a[..]);
            bk.set_current_key(&a);
            assert!(s.register(bk, TimeDomain::EventTime, 7).unwrap(), "{}: set again once fired", bk.kind());
            let mut fired = Vec::new();
            while s.pop_due(bk, TimeDomain::EventTime, 10).unwrap().is_some() {
                fired.push(bk.current_key_and_namespace().0.to_vec());
            }
            assert_eq!(fired, [a.clone(), b.clone()], "{}", bk.kind());
        }
    }

    /// Timers set and deleted in a key group whose due timers were read ahead: one set earlier than those read
    /// fires first, one deleted never fires, one in another key group takes its place in the order, and each
    /// fired timer leaves the backend.
    #[test]
    fn timers_set_and_deleted_while_a_key_group_is_read_ahead_fire_in_order() {
        let range = KeyGroupRange { start: 0, end: 127 };
        let group = |k: &[u8]| weir_common::state::keygroup::key_group_for_key(k, 128).0;
        let a = b"a".to_vec();
        let same: Vec<Vec<u8>> =
            (0u32..).map(|i| format!("s{i}").into_bytes()).filter(|k| group(k) == group(&a)).take(3).collect();
        let other = (0u32..).map(|i| format!("o{i}").into_bytes()).find(|k| group(k) != group(&a)).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        for mut backend in backends(tmp.path(), range) {
            let b = &mut *backend;
            let mut s = TimerService::open(b, range).unwrap();
            for (k, ts) in [(&a, 10), (&same[0], 20), (&same[1], 30), (&same[2], 40)] {
                b.set_current_key(k);
                s.register(b, TimeDomain::EventTime, ts).unwrap();
            }
            // Reads the key group's four timers, fires the first.
            assert_eq!(s.pop_due(b, TimeDomain::EventTime, 100).unwrap(), Some(10));
            b.set_current_key(&a);
            assert!(s.register(b, TimeDomain::EventTime, 15).unwrap());
            assert!(s.register(b, TimeDomain::EventTime, 10).unwrap(), "{}: set again once fired", b.kind());
            b.set_current_key(&same[1]);
            assert!(s.delete(b, TimeDomain::EventTime, 30).unwrap());
            assert!(!s.delete(b, TimeDomain::EventTime, 30).unwrap());
            b.set_current_key(&other);
            s.register(b, TimeDomain::EventTime, 35).unwrap();
            b.set_current_key(&same[2]);
            assert!(!s.register(b, TimeDomain::EventTime, 40).unwrap(), "{}: read ahead, still there", b.kind());
            let fired = fire(&mut s, b, TimeDomain::EventTime, 100);
            let got: Vec<(i64, Vec<u8>)> = fired.into_iter().map(|(t, k, _)| (t, k)).collect();
            let want = [(10, &a), (15, &a), (20, &same[0]), (35, &other), (40, &same[2])];
            assert_eq!(got, want.map(|(t, k)| (t, k.clone())), "{}", b.kind());
            assert_eq!(s.count(b, TimeDomain::EventTime).unwrap(), 0, "{}: fired timers are removed", b.kind());
            assert_eq!(s.next_timestamp(TimeDomain::EventTime), None);
        }
    }

    /// A snapshot holds the timers as they were when it was taken, though they change (fire, are set and
    /// deleted) while its files are still being written; restored, exactly those fire.
    #[test]
    fn a_snapshot_keeps_the_timers_of_its_barrier_while_they_change() {
        use crate::restore::rescale::open_keyed_backend;
        use weir_common::job::spec::StateBackend;
        let range = KeyGroupRange { start: 0, end: 127 };
        let tmp = tempfile::tempdir().unwrap();
        for kind in [StateBackend::Heap, StateBackend::Rocksdb] {
            let dir = tmp.path().join(format!("{kind:?}"));
            let mut b = open_keyed_backend(kind, &dir.join("w"), 128, range, None, &Default::default()).unwrap();
            let b = &mut *b;
            let mut s = TimerService::open(b, range).unwrap();
            let mut at_barrier = BTreeSet::new();
            for i in 0u64..3000 {
                let (key, ts) = ((i % 700).to_be_bytes(), (i * 7919 % 1000) as i64);
                b.set_current_key(&key);
                s.register(b, TimeDomain::EventTime, ts).unwrap();
                at_barrier.insert((ts, key.to_vec()));
            }
            let mut snap = b.snapshot_sync(&dir.join("snap")).unwrap();
            // Every chunk of the heap's rows changes before the snapshot's rows are written.
            let due = at_barrier.iter().filter(|(t, _)| *t <= 400).count();
            assert_eq!(fire(&mut s, b, TimeDomain::EventTime, 400).len(), due);
            for i in 0u64..700 {
                b.set_current_key(&i.to_be_bytes());
                s.register(b, TimeDomain::EventTime, 2000 + i as i64).unwrap();
                s.delete(b, TimeDomain::EventTime, (i * 7919 % 1000) as i64).unwrap();
            }
            snap.ready_blocking().unwrap();
            let mut r =
                open_keyed_backend(kind, &dir.join("r"), 128, range, Some(&snap.dir), &Default::default()).unwrap();
            let r = &mut *r;
            let mut s = TimerService::open(r, range).unwrap();
            let restored: BTreeSet<(i64, Vec<u8>)> =
                fire(&mut s, r, TimeDomain::EventTime, i64::MAX).into_iter().map(|(t, k, _)| (t, k)).collect();
            assert_eq!(restored, at_barrier, "{kind:?}");
        }
    }

    #[test]
    fn timers_are_refused_by_other_kinds_and_other_operations_by_timer_states() {
        let range = KeyGroupRange { start: 0, end: 127 };
        let tmp = tempfile::tempdir().unwrap();
        for mut b in backends(tmp.path(), range) {
            let b = &mut *b;
            let v = b.register_state("v", StateKind::Value).unwrap();
            b.set_current_key(b"k");
            assert!(b.add_timer(v, 1).is_err());
            let t = b.register_state(EVENT_TIMERS, StateKind::Timers).unwrap();
            assert!(b.get_value(t).is_err());
            assert!(b.register_state(EVENT_TIMERS, StateKind::Value).is_err());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Against a model: any registrations and deletions, then firing in steps, fire each live timer exactly
        /// once, in timestamp order, on both backends.
        #[test]
        fn timers_match_a_model(
            ops in proptest::collection::vec((0u8..3, 0u16..40, 0u8..3, -50i64..50), 1..120),
            steps in proptest::collection::vec(-60i64..60, 1..5),
        ) {
            let range = KeyGroupRange { start: 0, end: 127 };
            let tmp = tempfile::tempdir().unwrap();
            for mut b in backends(tmp.path(), range) {
                let b = &mut *b;
                let mut s = TimerService::open(b, range).unwrap();
                let mut model: BTreeMap<(i64, Vec<u8>, Vec<u8>), ()> = BTreeMap::new();
                for (op, key, ns, ts) in &ops {
                    let (key, ns) = (key.to_be_bytes().to_vec(), vec![*ns; *ns as usize]);
                    b.set_current_key(&key);
                    b.set_current_namespace(&ns);
                    if *op < 2 {
                        let new = s.register(b, TimeDomain::EventTime, *ts).unwrap();
                        prop_assert_eq!(new, model.insert((*ts, key, ns), ()).is_none());
                    } else {
                        let had = s.delete(b, TimeDomain::EventTime, *ts).unwrap();
                        prop_assert_eq!(had, model.remove(&(*ts, key, ns)).is_some());
                    }
                }
                let mut steps = steps.clone();
                steps.sort();
                steps.push(i64::MAX);
                for t in steps {
                    let fired = fire(&mut s, b, TimeDomain::EventTime, t);
                    let times: Vec<i64> = fired.iter().map(|f| f.0).collect();
                    prop_assert!(times.windows(2).all(|w| w[0] <= w[1]), "in order: {:?}", times);
                    let mut fired = fired;
                    fired.sort();
                    let due: Vec<_> = model.keys().filter(|k| k.0 <= t).cloned().collect();
                    for k in &due {
                        model.remove(k);
                    }
                    prop_assert_eq!(fired, due);
                }
                prop_assert_eq!(s.count(b, TimeDomain::EventTime).unwrap(), 0);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Against a model, with firing interleaved with registrations and deletions (as operators set and delete
        /// timers from `on_timer`) and tiny read-ahead batches: each pop fires a timer of the earliest due
        /// timestamp, and every live timer fires exactly once. Deletions mostly hit live timers (often read
        /// ahead), and fired timers are set again.
        #[test]
        fn timers_changed_while_firing_match_a_model(
            ops in proptest::collection::vec((0u8..8, 0u16..12, 0u8..3, -30i64..30), 1..200),
            batch in 1usize..5,
        ) {
            let range = KeyGroupRange { start: 0, end: 127 };
            let tmp = tempfile::tempdir().unwrap();
            for mut b in backends(tmp.path(), range) {
                let b = &mut *b;
                let mut s = TimerService::open(b, range).unwrap().with_batch(batch);
                let mut model: BTreeSet<(i64, Vec<u8>, Vec<u8>)> = BTreeSet::new();
                let mut fired_before: Vec<(i64, Vec<u8>, Vec<u8>)> = Vec::new();
                for (op, key, ns, ts) in &ops {
                    let pick = |from: &mut dyn Iterator<Item = &(i64, Vec<u8>, Vec<u8>)>, n: usize| {
                        from.nth(*key as usize % n.max(1)).cloned()
                    };
                    let random = (*ts, key.to_be_bytes().to_vec(), vec![*ns; *ns as usize]);
                    let (op, (ts, key, ns)) = match op {
                        0 | 1 => (0, random),
                        2 => (0, pick(&mut fired_before.iter(), fired_before.len()).unwrap_or(random)),
                        3 => (1, pick(&mut model.iter(), model.len()).unwrap_or(random)),
                        4 => (1, random),
                        _ => (2, random),
                    };
                    match op {
                        0 => {
                            b.set_current_key(&key);
                            b.set_current_namespace(&ns);
                            let new = s.register(b, TimeDomain::EventTime, ts).unwrap();
                            prop_assert_eq!(new, model.insert((ts, key, ns)), "{}", b.kind());
                        }
                        1 => {
                            b.set_current_key(&key);
                            b.set_current_namespace(&ns);
                            let had = s.delete(b, TimeDomain::EventTime, ts).unwrap();
                            prop_assert_eq!(had, model.remove(&(ts, key, ns)), "{}", b.kind());
                        }
                        _ => {
                            let earliest = model.first().map(|t| t.0);
                            let next = s.next_timestamp(TimeDomain::EventTime);
                            // Deleted timers may leave it below the earliest, or set with none left.
                            let bound = earliest.is_none_or(|e| next.is_some_and(|n| n <= e));
                            prop_assert!(bound, "{}: {:?} is a lower bound of {:?}", b.kind(), next, earliest);
                            let due = earliest.filter(|t| *t <= ts);
                            let got = s.pop_due(b, TimeDomain::EventTime, ts).unwrap();
                            prop_assert_eq!(got, due, "{}: the earliest due timestamp", b.kind());
                            if let Some(t) = got {
                                let (k, n) = b.current_key_and_namespace();
                                prop_assert_eq!(k, s.fired_key(TimeDomain::EventTime));
                                let fired = (t, k.to_vec(), n.to_vec());
                                prop_assert!(model.remove(&fired), "{}: fired {:?}, not live", b.kind(), fired);
                                fired_before.push(fired);
                            }
                        }
                    }
                    prop_assert_eq!(s.count(b, TimeDomain::EventTime).unwrap(), model.len() as u64);
                }
                let fired = fire(&mut s, b, TimeDomain::EventTime, i64::MAX);
                let times: Vec<i64> = fired.iter().map(|f| f.0).collect();
                prop_assert!(times.windows(2).all(|w| w[0] <= w[1]), "in order: {:?}", times);
                let mut fired = fired;
                fired.sort();
                prop_assert_eq!(fired, model.into_iter().collect::<Vec<_>>(), "{}", b.kind());
                prop_assert_eq!(s.count(b, TimeDomain::EventTime).unwrap(), 0);
            }
        }
    }
}
