//! `keyed-count`: a per-key count in `ValueState<u64>`, emitted as `(key, count)` at end of input
//! (`emit: end`, the default) or as `(key, new count)` after every record (`emit: updates`, like a Flink
//! `KeyedProcessFunction` emitting running counts).

use super::declare::*;
use crate::api::batch::KvRows;
use crate::api::operator::{Collector, InitContext, Operator, OperatorError, ProcessContext};
use arrow_array::RecordBatch;

use weir_state::ValueState;

/// When `keyed-count` emits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeyedCountEmit {
    /// One `(key, count)` per key at end of input.
    #[default]
    End,
    /// `(key, new count)` after every record, nothing at end of input.
    Updates,
}

/// Config of `keyed-count`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyedCountConfig {
    /// When counts are emitted.
    pub emit: KeyedCountEmit,
}

impl KeyedCountConfig {
    /// The config fields it reads: what `weir kinds` lists and what any other field is refused against.
    pub const FIELDS: &'static [ConfigField] = &[field(
        "emit",
        "end: (key, count) once, at end of input (default); updates: (key, new count) after every record",
    )];

    /// Reads and checks a keyed-count config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, Self::FIELDS)?;
        let emit = match r.string("emit")?.as_deref().map(str::trim) {
            None | Some("end") => KeyedCountEmit::End,
            Some("updates") => KeyedCountEmit::Updates,
            Some(other) => {
                return Err(field_err(
                    "emit",
                    format!("expected end or updates, got {}", weir_common::text::echo(other)),
                ))
            }
        };
        Ok(KeyedCountConfig { emit })
    }
}

/// Counts records per key.
#[derive(Default)]
pub struct KeyedCount {
    emit: KeyedCountEmit,
    count: Option<ValueState<u64>>,
}

impl KeyedCount {
    /// A counter emitting as the config says.
    pub fn new(cfg: KeyedCountConfig) -> Self {
        KeyedCount { emit: cfg.emit, count: None }
    }

    fn state(&mut self) -> Result<&mut ValueState<u64>, OperatorError> {
        self.count.as_mut().ok_or_else(|| OperatorError::Misuse("keyed-count used before initialize_state".into()))
    }
}

impl Operator for KeyedCount {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let keyed = ctx.keyed.as_mut().ok_or_else(|| OperatorError::Misuse("keyed-count needs keyed state".into()))?;
        self.count = Some(ValueState::register(&mut **keyed, "count")?);
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let updates = self.emit == KeyedCountEmit::Updates;
        let rows = KvRows::new(batch)?;
        let backend = ctx.keyed()?;
        let state = self.state()?;
        for i in 0..rows.len() {
            // With the key group the data plane computed when it routed the row.
            rows.set_current_key(backend, i);
            let n = state.value(backend)?.unwrap_or(0) + 1;
            state.update(backend, &n)?;
            if updates {
                out.emit_i64(rows.key(i), n as i64, rows.timestamp(i))?;
            }
        }
        Ok(())
    }

    fn end_of_input(&mut self, ctx: &mut ProcessContext<'_>, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        if self.emit == KeyedCountEmit::Updates {
            // Every count was emitted when it changed.
            return Ok(());
        }
        let backend = ctx.keyed()?;
        let state = self.state()?;
        // The state visitor speaks StateError; keep the collector's own error to return it unchanged.
        let mut emit_error = None;
        let visited = state.for_each(backend, |k, n| {
            out.emit_i64(k, n as i64, None).map_err(|e| {
                let msg = e.to_string();
                emit_error = Some(e);
                weir_state::StateError::Corrupt(format!("emitting counts failed: {msg}"))
            })
        });
        if let Some(e) = emit_error {
            return Err(e);
        }
        visited?;
        Ok(())
    }
}

/// The `keyed-count` kind (DESIGN §10): a count per key.
pub struct KeyedCountKind;

impl Kind for KeyedCountKind {
    type Config = KeyedCountConfig;

    fn info(&self) -> KindInfo {
        builtin_info("keyed-count", Role::Operator, true, "A count per key", KeyedCountConfig::FIELDS)
            .with_states(&[("count", StateClass::Value, "u64")])
            .with_input(vec![key_column()])
            .with_output(OutputSchema::Columns(key_value("int64")))
    }

    fn signature(&self) -> Option<StateSignature> {
        // Keys are the records' raw key bytes.
        Some(StateSignature::keyed::<Vec<u8>>().value::<u64>("count"))
    }

    fn config(&self, config: &OperatorConfig) -> Result<KeyedCountConfig, ConfigFieldError> {
        KeyedCountConfig::from_map(config)
    }

    fn build(&self, config: KeyedCountConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Operator(Box::new(KeyedCount::new(config))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::batch::batch_of;
    use crate::api::record::{Record, Value};
    use crate::testing::{partition, Harness, OperatorHarness, Snapshot};
    use weir_common::job::spec::StateBackend;

    /// `(key, count)` records as numbers.
    type Counts = Vec<(u64, i64)>;

    fn counts(records: Vec<Record>) -> Counts {
        let decode = |r: Record| {
            let Value::I64(n) = r.value else { panic!("non-i64 count {r:?}") };
            (u64::from_be_bytes(r.key.as_slice().try_into().unwrap()), n)
        };
        records.into_iter().map(decode).collect()
    }

    fn batch(keys: &[u64]) -> RecordBatch {
        let records: Vec<Record> = keys.iter().map(|k| Record::new_i64(&k.to_be_bytes(), 1)).collect();
        batch_of(&records).unwrap()
    }

    fn counter(emit: KeyedCountEmit, h: Harness) -> OperatorHarness<KeyedCount> {
        h.uid("counts").open(KeyedCount::new(KeyedCountConfig { emit })).unwrap()
    }

    /// Runs a counter with `emit` over `batches`; returns what it emitted while processing and at the end.
    fn run(emit: KeyedCountEmit, batches: &[&[u64]]) -> (Counts, Counts) {
        let mut h = counter(emit, Harness::keyed(StateBackend::Heap));
        let mut during = Vec::new();
        for keys in batches {
            h.process(&batch(keys)).unwrap();
            during.extend(counts(h.take_records().unwrap()));
        }
        h.end_input().unwrap();
        let mut at_end = counts(h.take_records().unwrap());
        at_end.sort_unstable();
        (during, at_end)
    }

    #[test]
    fn end_emits_each_key_once_at_end_of_input() {
        let (during, at_end) = run(KeyedCountEmit::End, &[&[1, 2, 1], &[3, 1, 2]]);
        assert!(during.is_empty(), "{during:?}");
        assert_eq!(at_end, vec![(1, 3), (2, 2), (3, 1)]);
    }

    #[test]
    fn updates_emit_every_new_count_and_nothing_at_the_end() {
        let (during, at_end) = run(KeyedCountEmit::Updates, &[&[1, 2, 1], &[3, 1, 2]]);
        assert_eq!(during, vec![(1, 1), (2, 1), (1, 2), (3, 1), (1, 3), (2, 2)]);
        assert!(at_end.is_empty(), "{at_end:?}");
    }

    /// Counted by one subtask, then restored as two (and those two merged back into one): each subtask counts on
    /// from the restored counts of its own key groups only, and together they count what one would.
    #[test]
    fn counts_restored_at_another_parallelism_go_on_per_key_group() {
        for backend in [StateBackend::Heap, StateBackend::Rocksdb] {
            let keys: Vec<u64> = (0..40).collect();
            let mut one = counter(KeyedCountEmit::End, Harness::keyed(backend));
            one.process(&batch(&keys)).unwrap();
            one.process(&batch(&keys[..10])).unwrap();
            let snapshot = one.snapshot(1).unwrap();
            let more = batch(&keys[5..25]);
            one.process(&more).unwrap();
            one.end_input().unwrap();
            let mut expected = counts(one.take_records().unwrap());
            expected.sort_unstable();

            let mut halves = Vec::new();
            let mut union = Vec::new();
            for (i, rows) in partition(&more, 2, 128).unwrap().iter().enumerate() {
                let mut h =
                    counter(KeyedCountEmit::End, Harness::keyed(backend).subtask(i as u32, 2).restore(&snapshot));
                assert!(h.is_restored());
                h.process(rows).unwrap();
                let twice = h.snapshot(2).unwrap();
                h.end_input().unwrap();
                let got = counts(h.take_records().unwrap());
                let range = h.info().key_group_range;
                for (k, _) in &got {
                    let group = weir_common::state::keygroup::key_group_for_key(&k.to_be_bytes(), 128);
                    assert!(range.contains(group), "subtask {i} emitted key {k} of key group {}", group.0);
                }
                assert!(!got.is_empty() && got.len() < keys.len(), "subtask {i}: {got:?}");
                union.extend(got);
                halves.push(twice);
            }
            union.sort_unstable();
            assert_eq!(union, expected, "{backend:?}: two subtasks count what one does");
            // A row of the other subtask's key groups never reaches a subtask.
            let other = partition(&more, 2, 128).unwrap().remove(1);
            let mut first = counter(KeyedCountEmit::End, Harness::keyed(backend).subtask(0, 2).restore(&snapshot));
            let e = first.process(&other).unwrap_err();
            assert!(e.to_string().contains("not one of this subtask's"), "{e}");

            // The two halves merged back into one subtask.
            let merged = Snapshot::combine(&halves).unwrap();
            let mut whole = counter(KeyedCountEmit::End, Harness::keyed(backend).restore(&merged));
            whole.end_input().unwrap();
            let mut got = counts(whole.take_records().unwrap());
            got.sort_unstable();
            assert_eq!(got, expected, "{backend:?}: merged back");
        }
    }

    #[test]
    fn the_registry_reads_emit() {
        let r = crate::builtins::registry();
        let config = crate::builtins::declare::config_map(&[("emit", "updates")]);
        assert!(r.build("keyed-count", &config).is_ok());
        let config = crate::builtins::declare::config_map(&[("emit", "later")]);
        let err = r.build("keyed-count", &config).err().expect("unknown emit refused");
        let err = err.to_string();
        assert!(err.contains("emit") && err.contains("later"), "{err}");
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::builtins::declare::config_map as m;

    #[test]
    fn keyed_count_emit() {
        assert_eq!(KeyedCountConfig::from_map(&m(&[])).unwrap().emit, KeyedCountEmit::End);
        assert_eq!(KeyedCountConfig::from_map(&m(&[("emit", "end")])).unwrap().emit, KeyedCountEmit::End);
        assert_eq!(KeyedCountConfig::from_map(&m(&[("emit", "updates")])).unwrap().emit, KeyedCountEmit::Updates);
        let e = KeyedCountConfig::from_map(&m(&[("emit", "always")])).unwrap_err();
        assert_eq!(e.field, "emit");
        assert!(e.message.contains("end or updates") && e.message.contains("always"), "{e}");
        assert_eq!(KeyedCountConfig::from_map(&m(&[("emitt", "end")])).unwrap_err().field, "emitt");
        assert_eq!(KeyedCountConfig::from_map(&m(&[("emit", "x")])).unwrap_err().field, "emit");
    }
}
