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
    use crate::api::batch::{batch_of, records as records_of};
    use crate::api::operator::RuntimeInfo;
    use crate::api::record::{Record, Value};
    use weir_common::ids::SubtaskIndex;
    use weir_common::keygroup::KeyGroupRange;
    use weir_common::spec::StateBackend;
    use weir_state::{open_keyed_backend, KeyedStateBackend, OperatorStateStore};

    fn info() -> RuntimeInfo {
        RuntimeInfo {
            uid: "counts".into(),
            job_id: "j".into(),
            attempt: 1,
            subtask: SubtaskIndex(0),
            parallelism: 1,
            max_parallelism: 128,
            key_group_range: KeyGroupRange { start: 0, end: 127 },
        }
    }

    /// `(key, count)` records as numbers.
    type Counts = Vec<(u64, i64)>;

    /// Runs a counter with `emit` over `batches`; returns what it emitted while processing and at the end.
    fn run(emit: KeyedCountEmit, batches: &[&[u64]]) -> (Counts, Counts) {
        let dir = tempfile::tempdir().unwrap();
        let i = info();
        let mut b: Box<dyn KeyedStateBackend> = open_keyed_backend(
            StateBackend::Heap,
            dir.path(),
            i.max_parallelism,
            i.key_group_range,
            None,
            &Default::default(),
        )
        .unwrap();
        let mut op = KeyedCount::new(KeyedCountConfig { emit });
        let mut store = OperatorStateStore::new();
        op.initialize_state(&mut InitContext {
            info: &i,
            restored: false,
            operator_state: &mut store,
            keyed: Some(&mut *b),
        })
        .unwrap();
        let decode = |r: Record| {
            let Value::I64(n) = r.value else { panic!("non-i64 count {r:?}") };
            (u64::from_be_bytes(r.key.as_slice().try_into().unwrap()), n)
        };
        let mut during = Vec::new();
        for batch in batches {
            let records: Vec<Record> = batch.iter().map(|k| Record::new_i64(&k.to_be_bytes(), 1)).collect();
            let mut sink = |chunk: RecordBatch| {
                during.extend(records_of(&chunk).unwrap().into_iter().map(decode));
                Ok(())
            };
            let mut out = Collector::new(&mut sink);
            op.process_batch(&batch_of(&records).unwrap(), &mut ProcessContext::new(&i, Some(&mut *b)), &mut out)
                .unwrap();
            out.flush().unwrap();
        }
        let mut at_end = Vec::new();
        let mut sink = |chunk: RecordBatch| {
            at_end.extend(records_of(&chunk).unwrap().into_iter().map(decode));
            Ok(())
        };
        let mut out = Collector::new(&mut sink);
        op.end_of_input(&mut ProcessContext::new(&i, Some(&mut *b)), &mut out).unwrap();
        out.flush().unwrap();
        drop(out);
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
