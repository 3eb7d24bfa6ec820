//! `keyed-count`: a per-key count in `ValueState<u64>`, emitted as `(key, count)` at end of input.

use crate::operator::{Collector, InitContext, Operator, OperatorError, ProcessContext};
use crate::record::{Record, Value};
use weir_state::ValueState;

/// Counts records per key.
#[derive(Default)]
pub struct KeyedCount {
    count: Option<ValueState<u64>>,
}

impl KeyedCount {
    fn state(&mut self) -> Result<&mut ValueState<u64>, OperatorError> {
        self.count.as_mut().ok_or_else(|| OperatorError::Other("keyed-count used before initialize_state".into()))
    }
}

impl Operator for KeyedCount {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let keyed = ctx.keyed.as_mut().ok_or_else(|| OperatorError::Other("keyed-count needs keyed state".into()))?;
        self.count = Some(ValueState::register(&mut **keyed, "count")?);
        Ok(())
    }

    fn process_batch(
        &mut self,
        records: &[Record],
        ctx: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let backend = ctx.keyed()?;
        let state = self.state()?;
        for r in records {
            backend.set_current_key(&r.key);
            let n = state.value(backend)?.unwrap_or(0);
            state.update(backend, &(n + 1))?;
        }
        Ok(())
    }

    fn end_of_input(&mut self, ctx: &mut ProcessContext<'_>, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        let backend = ctx.keyed()?;
        let state = self.state()?;
        // The state visitor speaks StateError; keep the collector's own error to return it unchanged.
        let mut emit_error = None;
        let visited = state.for_each(backend, |k, n| {
            out.emit(Record { key: k.into(), value: Value::I64(n as i64) }).map_err(|e| {
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
