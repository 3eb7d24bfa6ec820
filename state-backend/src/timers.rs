//! Timer services: an operator's event-time and processing-time timers, kept as keyed state.
//!
//! Each time domain is one state of kind [`StateKind::Timers`] ([`EVENT_TIMERS`], [`PROCESSING_TIMERS`]) whose
//! rows are `kg | timestamp | key | namespace | u32 BE len(namespace)` (`layout.rs`): key group first, so a
//! key-group range is one interval and timers move with their key groups through every snapshot, restore and
//! rescale path other keyed state takes (RocksDB: a column family per domain, imported whole or cut by range
//! deletes; heap: an ordered set per domain written as rows); then timestamp, so each key group's timers are
//! read in firing order. A timer is unique per (key, namespace, timestamp, domain): the row is the timer.
//!
//! In memory the service keeps only each key group's earliest timestamp — a lower bound, exact after every
//! read — in one ordered set, Flink's `KeyGroupPartitionedPriorityQueue` of heads: the next timer overall is the
//! first timer of the key group at the front, one seek away. Deleting a timer leaves the bound as it is; the
//! next read finds the real head. Reads seek from the bound, so the tombstones of fired timers before it are
//! skipped, not walked.

use crate::error::StateError;
use crate::keyed::{KeyedStateBackend, StateId};
use crate::layout::TimerRow;
use crate::meta::{StateKind, StateOptions};
use std::collections::BTreeSet;
use weir_common::keygroup::KeyGroupRange;

/// The state holding an operator's event-time timers.
pub const EVENT_TIMERS: &str = "_timers.event";
/// The state holding an operator's processing-time timers.
pub const PROCESSING_TIMERS: &str = "_timers.processing";

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

/// One domain's timers: the state and the earliest timestamp of each key group.
#[derive(Debug)]
struct TimerQueue {
    state: StateId,
    range: KeyGroupRange,
    /// Per key group of `range`: a lower bound of its earliest timer (exact after a read), `None` if it has none.
    head: Vec<Option<i64>>,
    /// `(head, key group)` of every key group with timers: the first is the next to fire.
    heads: BTreeSet<(i64, u32)>,
    /// The timer being fired.
    current: TimerRow,
    /// The key group and timer fired last: the next read of that key group starts after it (so the tombstones
    /// of timers fired at one time are not walked again for each), until a timer at or before it is set.
    resume: Option<(u32, TimerRow)>,
}

impl TimerQueue {
    fn open(
        backend: &mut dyn KeyedStateBackend,
        domain: TimeDomain,
        range: KeyGroupRange,
    ) -> Result<TimerQueue, StateError> {
        let state =
            backend.register_state_with_options(domain.state_name(), StateKind::Timers, &StateOptions::default())?;
        let mut q = TimerQueue {
            state,
            range,
            head: vec![None; (range.end - range.start + 1) as usize],
            heads: BTreeSet::new(),
            current: TimerRow::default(),
            resume: None,
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
        if let Some(old) = self.head[i] {
            self.heads.remove(&(old, kg));
        }
        if let Some(new) = head {
            self.heads.insert((new, kg));
        }
        self.head[i] = head;
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
        if q.resume.as_ref().is_some_and(|(rkg, last)| *rkg == kg && timestamp <= last.timestamp) {
            q.resume = None;
        }
        if q.head[i].is_none_or(|h| timestamp < h) {
            q.set_head(kg, Some(timestamp));
        }
        Ok(new)
    }

    /// Deletes the current key and namespace's timer at `timestamp`; whether there was one.
    pub fn delete(
        &mut self,
        backend: &mut dyn KeyedStateBackend,
        domain: TimeDomain,
        timestamp: i64,
    ) -> Result<bool, StateError> {
        // The key group's head stays a lower bound; the next read finds the real one.
        backend.delete_timer(self.queue(domain).state, timestamp)
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
            let after = q.resume.as_ref().filter(|(rkg, last)| *rkg == kg && last.timestamp >= bound).map(|(_, t)| t);
            if !backend.first_timer(q.state, kg, bound, after, &mut q.current)? {
                q.set_head(kg, None);
                continue;
            }
            let ts = q.current.timestamp;
            q.set_head(kg, Some(ts));
            // The bound was below the real head: another key group's timer may come first.
            if ts > time || q.heads.first() != Some(&(ts, kg)) {
                continue;
            }
            backend.remove_timer(q.state, kg, &q.current)?;
            match &mut q.resume {
                Some((rkg, last)) => {
                    *rkg = kg;
                    last.clone_from(&q.current);
                }
                None => q.resume = Some((kg, q.current.clone())),
            }
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
    use std::collections::BTreeMap;

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
        let group = |k: &[u8]| weir_common::keygroup::key_group_for_key(k, 128).0;
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
}
