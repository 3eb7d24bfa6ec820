//! `distinct-values`: per key, the number of distinct values seen recently — a keyed user operator with
//! time-to-live state (Flink's `StateTtlConfig` on a `MapState`).
//!
//! # State
//!
//! - `distinct-values`, a `MapState<i64, u64>` per key: each value seen → how often it was seen. It is
//!   registered with a TTL of `ttl_ms` (default update type: a value's clock restarts each time it is seen
//!   again; default visibility: an expired value is never read). A value not seen for `ttl_ms` is therefore
//!   forgotten, and counts as new if it comes back.
//! - `keys`, a `ValueState` marker per key with the same TTL, written with every record. A map state cannot
//!   be iterated over all keys, a value state can: the marker lists the keys at end of input. Being written
//!   with every record of its key, it expires exactly when the key's last value does.
//!
//! Both states are keyed state, snapshotted by the runtime at every checkpoint and restored after a
//! failure; expired entries are dropped on read, by the heap backend's snapshots and incremental cleanup,
//! and by RocksDB compaction filters.
//!
//! # Output
//!
//! At end of input, one record per key that still has an unexpired value: the key and the number of its
//! distinct unexpired values (`Value::I64`). A key whose values all expired has no state left and, as a key
//! that was never seen, emits nothing.
//!
//! Input values must be `Value::I64`; any other value fails the task with an error naming the key.
//!
//! Config: `ttl_ms` (the time-to-live in milliseconds, default 60000, at least 1).

use arrow_array::RecordBatch;
use std::time::Duration;
use weir_common::job::kind::{
    field, field_err, ConfigField, ConfigFieldError, ConfigReader, KindInfo, OperatorConfig, Role, StateClass,
};
use weir_state::signature::StateSignature;
use weir_state::{KeyedStateBackend, MapState, StateDescriptor, StateError, StateTtlConfig, ValueState};
use weir_taskmanager::api::operator::{Collector, InitContext, Operator, OperatorError, ProcessContext};
use weir_taskmanager::api::record::{Record, Value};

/// The kind's name in the registry.
pub const KIND: &str = "distinct-values";
/// Time-to-live unless the config says otherwise: one minute.
pub const DEFAULT_TTL_MS: u64 = 60_000;

/// Keyed map state: value → times seen, with TTL.
pub const VALUES_STATE: &str = "distinct-values";
/// Keyed value state: a marker per key (same TTL), to list the keys at end of input.
pub const KEYS_STATE: &str = "keys";

/// What the job manager learns about `distinct-values` when a task manager with it registers.
pub fn kind_info() -> KindInfo {
    let signature = StateSignature::keyed::<Vec<u8>>().map::<i64, u64>(VALUES_STATE).value::<()>(KEYS_STATE);
    weir_taskmanager::api::registry::signed(
        KindInfo::new(KIND, Role::Operator, true, env!("CARGO_PKG_VERSION"))
            .with_fields(FIELDS)
            .with_states(&[(VALUES_STATE, StateClass::Map, "i64 -> u64"), (KEYS_STATE, StateClass::Value, "()")])
            .with_input(weir_common::job::schema::key_value("int64"))
            .with_output(weir_common::job::schema::OutputSchema::Columns(weir_common::job::schema::key_value("int64"))),
        &signature,
    )
}

/// The config fields of `distinct-values`.
pub const FIELDS: &[ConfigField] =
    &[field("ttl_ms", "how long a value is remembered after it was last seen, in ms (default 60000)")];

/// Config of `distinct-values`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DistinctValuesConfig {
    /// How long a value is remembered after it was last seen, in milliseconds.
    pub ttl_ms: u64,
}

impl Default for DistinctValuesConfig {
    fn default() -> Self {
        DistinctValuesConfig { ttl_ms: DEFAULT_TTL_MS }
    }
}

impl DistinctValuesConfig {
    /// Reads and checks the config; an error names the field.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, FIELDS)?;
        let ttl_ms = match r.u64("ttl_ms")? {
            None => DEFAULT_TTL_MS,
            Some(0) => return Err(field_err("ttl_ms", "expected a positive integer, got 0")),
            Some(t) => t,
        };
        Ok(DistinctValuesConfig { ttl_ms })
    }

    /// The TTL of both states: `ttl_ms`, default update type and visibility.
    pub fn ttl(&self) -> StateTtlConfig {
        StateTtlConfig::new(Duration::from_millis(self.ttl_ms))
    }
}

/// The registered states.
struct States {
    values: MapState<i64, u64>,
    keys: ValueState<Vec<u8>>,
}

/// The operator; see the module docs.
pub struct DistinctValues {
    ttl: StateTtlConfig,
    states: Option<States>,
}

impl DistinctValues {
    /// An operator with the config's TTL.
    pub fn new(cfg: DistinctValuesConfig) -> Self {
        DistinctValues { ttl: cfg.ttl(), states: None }
    }

    fn states(&mut self) -> Result<&mut States, OperatorError> {
        self.states.as_mut().ok_or_else(|| OperatorError::Misuse(format!("{KIND} used before initialize_state")))
    }
}

/// The number of distinct unexpired values of the backend's current key (expired ones are removed).
fn distinct(values: &MapState<i64, u64>, backend: &mut dyn KeyedStateBackend) -> Result<u64, StateError> {
    let mut n = 0;
    values.for_each(backend, |_, _| {
        n += 1;
        Ok(())
    })?;
    Ok(n)
}

impl Operator for DistinctValues {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let backend = ctx
            .keyed
            .as_mut()
            .ok_or_else(|| OperatorError::Misuse(format!("{KIND} needs keyed state (declare the kind keyed)")))?;
        let values = MapState::register(&mut **backend, StateDescriptor::new(VALUES_STATE).with_ttl(self.ttl))?;
        let keys = ValueState::register(&mut **backend, StateDescriptor::new(KEYS_STATE).with_ttl(self.ttl))?;
        self.states = Some(States { values, keys });
        tracing::debug!(restored = ctx.restored, ttl_ms = self.ttl.ttl_ms(), "distinct-values initialized");
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let records = weir_taskmanager::api::batch::records(batch)?;
        let backend = ctx.keyed()?;
        let states = self.states()?;
        let marker = Vec::new();
        for r in records {
            let Value::I64(v) = r.value else {
                return Err(OperatorError::Records(format!(
                    "{KIND}: record of key {} has a {} value; only i64 values are counted",
                    r.key_text(),
                    match r.value {
                        Value::Unit => "unit",
                        _ => "bytes",
                    }
                )));
            };
            backend.set_current_key(&r.key);
            let seen = states.values.get(backend, &v)?.unwrap_or(0);
            states.values.put(backend, &v, &(seen + 1))?;
            states.keys.update(backend, &marker)?;
        }
        Ok(())
    }

    fn end_of_input(&mut self, ctx: &mut ProcessContext<'_>, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        let backend = ctx.keyed()?;
        let states = self.states()?;
        // The visitor borrows the backend, which the map reads need too: list the keys first.
        let mut keys = Vec::new();
        states.keys.for_each(backend, |k, _| {
            keys.push(k.to_vec());
            Ok(())
        })?;
        for key in keys {
            backend.set_current_key(&key);
            let n = distinct(&states.values, backend)?;
            if n > 0 {
                out.emit(Record { key: key.as_slice().into(), value: Value::I64(n as i64), timestamp: None })?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use weir_common::job::spec::StateBackend;
    use weir_state::rocks::RocksOptions;
    use weir_taskmanager::testing::{partition, Harness, OperatorHarness, Snapshot};

    const T0: u64 = 1_000_000;
    const TTL_MS: u64 = 1000;

    type Distinct = OperatorHarness<DistinctValues>;

    /// The operator on a backend of `kind` whose clock shows `now`, restored from `from` if given.
    fn open(kind: StateBackend, now: u64, from: Option<&Snapshot>) -> Distinct {
        open_at(kind, now, from, (0, 1))
    }

    /// [`open`] as subtask `i` of `p`.
    fn open_at(kind: StateBackend, now: u64, from: Option<&Snapshot>, (i, p): (u32, u32)) -> Distinct {
        // A tiny RocksDB write-back cache, so that rows are flushed to RocksDB mid-test.
        let rocks = RocksOptions { cache_bytes: 2048, ..Default::default() };
        let h = Harness::keyed(kind).uid("distinct").rocks(rocks).processing_time(now).subtask(i, p);
        let h = match from {
            Some(snapshot) => h.restore(snapshot),
            None => h,
        };
        h.open(DistinctValues::new(DistinctValuesConfig { ttl_ms: TTL_MS })).unwrap()
    }

    fn rec(key: u64, value: i64) -> Record {
        Record::new_i64(&key.to_be_bytes(), value)
    }

    fn batch(records: &[(u64, i64)]) -> RecordBatch {
        let records: Vec<Record> = records.iter().map(|&(k, v)| rec(k, v)).collect();
        weir_taskmanager::api::batch::batch_of(&records).unwrap()
    }

    fn process(h: &mut Distinct, records: &[(u64, i64)]) {
        h.process(&batch(records)).unwrap();
    }

    /// What `end_of_input` emits, by key.
    fn output(h: &mut Distinct) -> BTreeMap<u64, i64> {
        h.end_input().unwrap();
        let mut by_key = BTreeMap::new();
        for r in h.take_records().unwrap() {
            let key = u64::from_be_bytes(r.key.as_slice().try_into().unwrap());
            let Value::I64(n) = r.value else { panic!("non-i64 output {r:?}") };
            assert!(by_key.insert(key, n).is_none(), "key {key} emitted twice");
        }
        by_key
    }

    /// The stored map (value → times seen) of `key`, read through a handle of the same state.
    fn stored(h: &mut Distinct, key: u64) -> Vec<(i64, u64)> {
        let b = h.keyed().unwrap();
        let ttl = DistinctValuesConfig { ttl_ms: TTL_MS }.ttl();
        let values = MapState::<i64, u64>::register(b, StateDescriptor::new(VALUES_STATE).with_ttl(ttl)).unwrap();
        b.set_current_key(&key.to_be_bytes());
        let mut entries = values.entries(b).unwrap();
        entries.sort_unstable(); // stored in the byte order of the big-endian encoding: negatives last
        entries
    }

    /// Runs `scenario` on RocksDB and on the heap, naming the backend in a failure.
    fn both(scenario: fn(StateBackend)) {
        for kind in [StateBackend::Rocksdb, StateBackend::Heap] {
            let result = std::panic::catch_unwind(|| scenario(kind));
            if let Err(e) = result {
                eprintln!("scenario failed on the {kind:?} backend");
                std::panic::resume_unwind(e);
            }
        }
    }

    #[test]
    fn config_defaults_and_errors() {
        let m = |pairs: &[(&str, &str)]| -> OperatorConfig {
            pairs.iter().map(|(k, v)| (k.to_string(), (*v).into())).collect()
        };
        assert_eq!(DistinctValuesConfig::from_map(&m(&[])).unwrap(), DistinctValuesConfig { ttl_ms: 60_000 });
        assert_eq!(DistinctValuesConfig::default().ttl_ms, DEFAULT_TTL_MS);
        assert_eq!(DistinctValuesConfig::from_map(&m(&[("ttl_ms", "5_000")])).unwrap().ttl_ms, 5000);
        let ttl = DistinctValuesConfig { ttl_ms: 250 }.ttl();
        assert_eq!(ttl, StateTtlConfig::new(Duration::from_millis(250)));
        for bad in ["0", "-1", "soon", ""] {
            let err = DistinctValuesConfig::from_map(&m(&[("ttl_ms", bad)])).unwrap_err().to_string();
            assert!(err.contains("ttl_ms"), "{err}");
        }
        let err = DistinctValuesConfig::from_map(&m(&[("ttl", "5")])).unwrap_err().to_string();
        assert!(err.contains("\"ttl\"") && err.contains("unknown"), "{err}");
    }

    #[test]
    fn kind_info_declares_the_keyed_ttl_states() {
        let info = kind_info();
        assert_eq!(info.kind, KIND);
        assert_eq!(info.role, Role::Operator);
        assert!(info.keyed);
        assert!(info
            .states
            .iter()
            .any(|s| s.name == VALUES_STATE && s.kind == StateClass::Map && s.type_name == "i64 -> u64"));
    }

    #[test]
    fn counts_distinct_values_per_key() {
        both(|kind| {
            let mut h = open(kind, T0, None);
            process(&mut h, &[(1, 10), (2, 10), (1, 10), (1, -3), (1, 10), (3, i64::MIN)]);
            process(&mut h, &[(2, 10), (1, 7), (2, 11)]);
            assert_eq!(output(&mut h), BTreeMap::from([(1, 3), (2, 2), (3, 1)]));
            assert_eq!(stored(&mut h, 1), vec![(-3, 1), (7, 1), (10, 3)], "value -> times seen");
            assert_eq!(stored(&mut h, 2), vec![(10, 2), (11, 1)]);
        });
    }

    #[test]
    fn values_older_than_the_ttl_are_not_counted() {
        both(|kind| {
            let mut h = open(kind, T0, None);
            process(&mut h, &[(1, 1), (1, 2), (1, 3), (2, 5), (4, 8)]);
            h.set_processing_time(T0 + 600).unwrap();
            // Seeing 3 again restarts its TTL (written again); 4 is new. Key 3 starts here.
            process(&mut h, &[(1, 3), (1, 4), (3, 7)]);
            h.set_processing_time(T0 + TTL_MS - 1).unwrap();
            assert_eq!(output(&mut h), BTreeMap::from([(1, 4), (2, 1), (3, 1), (4, 1)]), "nothing expired yet");
            // At T0 + ttl everything last seen at T0 has expired.
            h.set_processing_time(T0 + TTL_MS).unwrap();
            process(&mut h, &[(4, 8)]); // back after expiring: counted again, from 1
            assert_eq!(
                output(&mut h),
                BTreeMap::from([(1, 2), (3, 1), (4, 1)]),
                "key 1 keeps 3 and 4; key 2 has only expired values and is not emitted"
            );
            assert_eq!(stored(&mut h, 1), vec![(3, 2), (4, 1)]);
            assert_eq!(stored(&mut h, 4), vec![(8, 1)], "an expired value that comes back starts over");
            h.set_processing_time(T0 + 600 + TTL_MS).unwrap();
            assert_eq!(output(&mut h), BTreeMap::from([(4, 1)]));
            h.set_processing_time(T0 + 10 * TTL_MS).unwrap();
            assert!(output(&mut h).is_empty(), "everything expired");
        });
    }

    #[test]
    fn snapshot_and_restore_keep_the_unexpired_entries() {
        both(|kind| {
            let mut h = open(kind, T0, None);
            process(&mut h, &[(1, 1), (1, 2), (2, 9), (2, 9)]);
            h.set_processing_time(T0 + 600).unwrap();
            process(&mut h, &[(1, 3), (1, 3), (3, 4)]);
            h.set_processing_time(T0 + 700).unwrap();
            let snap = h.snapshot(1).unwrap();
            // After the barrier: not in the snapshot.
            process(&mut h, &[(1, 99), (5, 5)]);
            drop(h);

            // Restored before anything expired: every entry is back, counts included.
            let mut r = open(kind, T0 + 800, Some(&snap));
            assert_eq!(stored(&mut r, 1), vec![(1, 1), (2, 1), (3, 2)]);
            assert_eq!(stored(&mut r, 2), vec![(9, 2)]);
            process(&mut r, &[(1, 2), (6, 6)]); // the restored state goes on
            assert_eq!(output(&mut r), BTreeMap::from([(1, 3), (2, 1), (3, 1), (6, 1)]));
            assert_eq!(stored(&mut r, 1), vec![(1, 1), (2, 2), (3, 2)]);
            drop(r);

            // Restored after the TTL of the first values: only the later ones are counted.
            let mut r = open(kind, T0 + TTL_MS, Some(&snap));
            assert_eq!(output(&mut r), BTreeMap::from([(1, 1), (3, 1)]));
            assert_eq!(stored(&mut r, 1), vec![(3, 2)]);
            assert!(stored(&mut r, 2).is_empty());
        });
    }

    #[test]
    fn restored_entries_expire_when_the_clock_passes_their_ttl() {
        both(|kind| {
            let mut h = open(kind, T0, None);
            process(&mut h, &[(1, 1), (1, 2), (2, 9)]);
            h.set_processing_time(T0 + 600).unwrap();
            process(&mut h, &[(1, 3), (3, 4)]);
            h.set_processing_time(T0 + 700).unwrap();
            let snap = h.snapshot(1).unwrap();
            drop(h);

            // Restored before any TTL ran out: everything is back, with the times it was written at (not the
            // time of the restore), which the clock moving on after the restore must show.
            let mut r = open(kind, T0 + 800, Some(&snap));
            assert_eq!(stored(&mut r, 1), vec![(1, 1), (2, 1), (3, 1)], "key 1 restored");
            assert_eq!(stored(&mut r, 2), vec![(9, 1)], "key 2 restored");
            assert_eq!(stored(&mut r, 3), vec![(4, 1)], "key 3 restored");
            // Seen again after the restore: value 2's TTL restarts now. Key 4 is new.
            process(&mut r, &[(1, 2), (4, 5)]);
            r.set_processing_time(T0 + TTL_MS - 1).unwrap();
            assert_eq!(output(&mut r), BTreeMap::from([(1, 3), (2, 1), (3, 1), (4, 1)]), "nothing expired yet");

            // The values written at T0, before the snapshot, expire; later and refreshed ones stay.
            r.set_processing_time(T0 + TTL_MS).unwrap();
            assert_eq!(
                output(&mut r),
                BTreeMap::from([(1, 2), (3, 1), (4, 1)]),
                "written at T0: key 1's value 1 and all of key 2 expired"
            );
            assert_eq!(stored(&mut r, 1), vec![(2, 2), (3, 1)]);
            assert!(stored(&mut r, 2).is_empty(), "key 2 expired");
            process(&mut r, &[(2, 9)]); // an expired value that comes back starts over
            assert_eq!(stored(&mut r, 2), vec![(9, 1)]);

            // Written at T0 + 600 before the snapshot: gone at T0 + 600 + ttl.
            r.set_processing_time(T0 + 600 + TTL_MS).unwrap();
            assert_eq!(output(&mut r), BTreeMap::from([(1, 1), (2, 1), (4, 1)]), "key 3 expired");
            assert_eq!(stored(&mut r, 1), vec![(2, 2)], "only the value refreshed after the restore is left");
            r.set_processing_time(T0 + TTL_MS + TTL_MS).unwrap();
            assert!(output(&mut r).is_empty(), "everything expired");
        });
    }

    #[test]
    fn a_non_i64_value_fails_with_the_key() {
        let mut h = open(StateBackend::Heap, T0, None);
        let records = [Record {
            key: 42u64.to_be_bytes().as_slice().into(),
            value: Value::Bytes(b"x".to_vec()),
            timestamp: None,
        }];
        let err = h.process(&weir_taskmanager::api::batch::batch_of(&records).unwrap()).unwrap_err();
        assert!(err.to_string().contains("key 42") && err.to_string().contains("bytes"), "{err}");
    }

    #[test]
    fn an_operator_without_keyed_state_is_refused() {
        let err = Harness::stateless().open(DistinctValues::new(DistinctValuesConfig::default())).unwrap_err();
        assert!(err.to_string().contains("keyed"), "{err}");
    }

    /// Values seen by one subtask, restored as two and then as three: each subtask holds the values of its own
    /// keys only, with the times they were written (so they expire when they would have), and together the
    /// subtasks count what one would.
    #[test]
    fn distinct_values_restored_at_another_parallelism_stay_with_their_keys() {
        both(|kind| {
            let keys: Vec<(u64, i64)> = (0..30).flat_map(|k| [(k, 1), (k, k as i64), (k, 1)]).collect();
            let mut one = open(kind, T0, None);
            process(&mut one, &keys);
            one.set_processing_time(T0 + 600).unwrap();
            process(&mut one, &[(3, 7), (4, 7)]);
            let snapshot = one.snapshot(1).unwrap();
            let later = batch(&(0..30).map(|k| (k, 100)).collect::<Vec<_>>());
            one.set_processing_time(T0 + TTL_MS).unwrap();
            one.process(&later).unwrap();
            let expected = output(&mut one);
            assert_eq!(expected[&3], 2, "key 3: 7 and 100; 1 and 3 expired");

            let mut halves = Vec::new();
            let mut union = BTreeMap::new();
            for (i, rows) in partition(&later, 2, 128).unwrap().iter().enumerate() {
                let mut h = open_at(kind, T0 + 800, Some(&snapshot), (i as u32, 2));
                let range = h.info().key_group_range;
                for k in 0..30u64 {
                    let mine = range.contains(weir_common::state::keygroup::key_group_for_key(&k.to_be_bytes(), 128));
                    assert_eq!(!stored(&mut h, k).is_empty(), mine, "subtask {i}, key {k}");
                }
                h.set_processing_time(T0 + TTL_MS).unwrap();
                h.process(rows).unwrap();
                halves.push(h.snapshot(2).unwrap());
                union.extend(output(&mut h));
            }
            assert_eq!(union, expected, "two subtasks count what one does");
            let pair = Snapshot::combine(&halves).unwrap();
            let mut thirds = BTreeMap::new();
            for i in 0..3 {
                let mut h = open_at(kind, T0 + TTL_MS, Some(&pair), (i, 3));
                thirds.extend(output(&mut h));
            }
            assert_eq!(thirds, expected, "restored again as three subtasks");
        });
    }
}
