//! `window-aggregate` (DESIGN §10): a count, sum, min, max or average per key and event-time window —
//! tumbling, sliding or session — emitted as `(key, window_start, window_end, value)` when the watermark passes
//! the window's end, and again for a late record within the allowed lateness.
//!
//! It is the window operator (`window/operator.rs`) configured with the built-in aggregates. Fired by event time,
//! its contents are [`Accumulators`]: a fixed-size accumulator per slice (namespace: the slice's start) or session
//! in state `window-<aggregate>`, and for count, sum and avg of sliding windows the running part consecutive
//! windows share, so a firing reads two slices, not `size / slide`. Other triggers and global windows keep a
//! [`StoredAcc`] per window in `window-contents`, as the operator's own accumulating contents do. Everything —
//! accumulators, sessions and timers — is keyed state: checkpointed, restored and rescaled by key group.

use super::declare::*;
use crate::api::batch::{EVENT_TIME, KEY};
use crate::api::operator::{Collector, Operator, OperatorError};
use crate::window::accumulate::{Acc, AccResult, Running};
use crate::window::assign::{TimeWindow, WindowKind};
use crate::window::config::{
    LateRecords, WindowAggregate as Aggregate, WindowAggregateConfig, WindowShape, WindowTrigger,
};
use crate::window::contents::{fire_combined, Aggregating, Contents, WindowAggregator};
use crate::window::operator::{WindowOperator, WindowingError, SESSIONS_STATE, TRIGGER_STATE};
use crate::window::slicing::Slicing;
use crate::window::trigger::Trigger;
use arrow_array::builder::{ArrayBuilder, BinaryBuilder, Float64Builder, Int64Builder, TimestampMillisecondBuilder};
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use std::sync::Arc;
use weir_state::signature::{Shape, TypeSignature};
use weir_state::{KeyedStateBackend, StateCodec, StateError, StateId, StateKind, StateOptions};

/// Rows gathered before they go downstream.
const OUT_ROWS: usize = 1024;

/// The state holding the accumulators of `aggregate` (one name per aggregate, so a job restored with another
/// aggregate starts afresh instead of reading another layout).
pub fn accumulator_state(aggregate: Aggregate) -> String {
    format!("window-{}", aggregate.name())
}

/// The state holding, per key, the part of the last fired sliding window the next one shares (count, sum, avg).
pub const RUN_STATE: &str = "window-run";

/// The output schema: key, window start and end, the value (a float for `avg`) and the event time `end − 1`.
pub fn output_schema(aggregate: Aggregate) -> SchemaRef {
    let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
    let value = match aggregate {
        Aggregate::Avg => DataType::Float64,
        _ => DataType::Int64,
    };
    Arc::new(Schema::new(vec![
        Field::new(KEY, DataType::Binary, false),
        Field::new("window_start", ts.clone(), false),
        Field::new("window_end", ts.clone(), false),
        Field::new("value", value, false),
        Field::new(EVENT_TIME, ts, true),
    ]))
}

/// Output rows being gathered.
struct WindowRows {
    schema: SchemaRef,
    keys: BinaryBuilder,
    starts: TimestampMillisecondBuilder,
    ends: TimestampMillisecondBuilder,
    ints: Int64Builder,
    floats: Float64Builder,
    times: TimestampMillisecondBuilder,
}

impl WindowRows {
    fn new(aggregate: Aggregate) -> Self {
        WindowRows {
            schema: output_schema(aggregate),
            keys: BinaryBuilder::with_capacity(OUT_ROWS, OUT_ROWS * 8),
            starts: TimestampMillisecondBuilder::with_capacity(OUT_ROWS),
            ends: TimestampMillisecondBuilder::with_capacity(OUT_ROWS),
            ints: Int64Builder::with_capacity(OUT_ROWS),
            floats: Float64Builder::new(),
            times: TimestampMillisecondBuilder::with_capacity(OUT_ROWS),
        }
    }

    fn push(&mut self, key: &[u8], window: TimeWindow, value: AccResult) {
        self.keys.append_value(key);
        self.starts.append_value(window.start);
        self.ends.append_value(window.end);
        match value {
            AccResult::Int(v) => self.ints.append_value(v),
            AccResult::Float(v) => self.floats.append_value(v),
        }
        self.times.append_value(window.max_timestamp());
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    /// Gathers a window's row, sending the rows downstream once [`OUT_ROWS`] are gathered.
    fn emit(
        &mut self,
        key: &[u8],
        window: TimeWindow,
        value: AccResult,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        self.push(key, window, value);
        if self.len() >= OUT_ROWS {
            self.flush(out)?;
        }
        Ok(())
    }

    fn flush(&mut self, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        if self.len() == 0 {
            return Ok(());
        }
        let value: ArrayRef = match self.schema.field(3).data_type() {
            DataType::Float64 => Arc::new(self.floats.finish()),
            _ => Arc::new(self.ints.finish()),
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.keys.finish()),
            Arc::new(self.starts.finish()),
            Arc::new(self.ends.finish()),
            value,
            Arc::new(self.times.finish()),
        ];
        let batch = RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| OperatorError::Records(format!("window-aggregate output: {e}")))?;
        out.emit_batch(batch)
    }
}

/// The windows of a config, as the window library sees them.
fn window_kind(cfg: &WindowAggregateConfig) -> WindowKind {
    let offset = cfg.offset_ms;
    match cfg.window {
        WindowShape::Tumbling { size_ms } => WindowKind::Tumbling { size: size_ms as i64, offset },
        WindowShape::Sliding { size_ms, slide_ms } => {
            WindowKind::Sliding { size: size_ms as i64, slide: slide_ms as i64, offset }
        }
        WindowShape::Session { gap_ms } => WindowKind::Session { gap: gap_ms as i64 },
        WindowShape::Global => WindowKind::Global,
    }
}

/// The window operator of a `window-aggregate` config: [`Accumulators`] for windows fired by event time, a
/// [`BuiltinAggregator`] per window otherwise. A global window fired by a count is emptied each time (Flink's
/// `countWindow`); other windows keep accumulating until purged.
pub fn window_aggregate(cfg: WindowAggregateConfig) -> Result<Box<dyn Operator>, WindowingError> {
    fn boxed<C: Contents + 'static>(op: WindowOperator<C>, side: bool) -> Box<dyn Operator> {
        Box::new(if side { op.with_late_side_output() } else { op })
    }
    let kind = window_kind(&cfg);
    let lateness = cfg.allowed_lateness_ms as i64;
    let side = cfg.late == LateRecords::SideOutput;
    Ok(match cfg.trigger {
        WindowTrigger::EventTime if kind != WindowKind::Global => {
            let contents = Accumulators::new(&cfg, kind);
            boxed(WindowOperator::new(kind, Trigger::EventTime, lateness, false, contents)?, side)
        }
        trigger => {
            let purge = matches!((kind, trigger), (WindowKind::Global, WindowTrigger::Count(_)));
            let contents = Aggregating::new(BuiltinAggregator::new(cfg));
            boxed(WindowOperator::new(kind, Trigger::from(trigger), lateness, purge, contents)?, side)
        }
    })
}

/// The index of the int64 column `field` of `batch` that `aggregate` reads (`None` for a count, which reads
/// none).
fn aggregated_column(batch: &RecordBatch, field: &str, aggregate: Aggregate) -> Result<Option<usize>, OperatorError> {
    if aggregate == Aggregate::Count {
        return Ok(None);
    }
    match batch.schema().index_of(field) {
        Ok(i) if batch.column(i).data_type() == &DataType::Int64 => Ok(Some(i)),
        _ => Err(OperatorError::Records(format!(
            "window-aggregate: the input has no int64 column {field:?} to {} (schema {})",
            aggregate.name(),
            batch.schema()
        ))),
    }
}

/// Column `column` of `batch` as the int64 values it was checked to hold.
fn int64s(batch: &RecordBatch, column: usize) -> Result<&Int64Array, OperatorError> {
    batch
        .columns()
        .get(column)
        .and_then(|c| c.as_any().downcast_ref::<Int64Array>())
        .ok_or_else(|| OperatorError::Misuse("window-aggregate: a row added before its batch began".into()))
}

/// A built-in aggregate's accumulator as a typed state value (`None` until a non-null value arrives): a tag
/// byte, then [`Acc`]'s bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoredAcc(Option<Acc>);

impl StateCodec for StoredAcc {
    fn encode(&self, out: &mut Vec<u8>) {
        let mut buf = [0u8; 16];
        match &self.0 {
            None => out.push(0xff),
            Some(acc) => {
                out.push(match acc {
                    Acc::Count(_) => 0,
                    Acc::Sum(..) => 1,
                    Acc::Min(_) => 2,
                    Acc::Max(_) => 3,
                    Acc::Avg(..) => 4,
                });
                let n = acc.encode(&mut buf);
                out.extend_from_slice(&buf[..n]);
            }
        }
    }

    fn decode(bytes: &[u8]) -> Result<Self, StateError> {
        let agg = match bytes.first() {
            Some(0xff) if bytes.len() == 1 => return Ok(StoredAcc(None)),
            Some(0) => Aggregate::Count,
            Some(1) => Aggregate::Sum,
            Some(2) => Aggregate::Min,
            Some(3) => Aggregate::Max,
            Some(4) => Aggregate::Avg,
            _ => {
                return Err(StateError::Corrupt(format!(
                    "a window accumulator of {} bytes has no known tag",
                    bytes.len()
                )))
            }
        };
        Acc::decode(agg, &bytes[1..])
            .map(|a| StoredAcc(Some(a)))
            .ok_or_else(|| StateError::Corrupt(format!("a {} window accumulator of {} bytes", agg.name(), bytes.len())))
    }
}

impl TypeSignature for StoredAcc {
    fn shape() -> Shape {
        Shape::custom("window-aggregate accumulator", 1)
    }
}

/// The built-in aggregates as a window function (other triggers and global windows).
struct BuiltinAggregator {
    cfg: WindowAggregateConfig,
    rows: WindowRows,
    /// The index of the aggregated column in the batch at hand (`None`: a count, which reads none).
    column: Option<usize>,
}

impl BuiltinAggregator {
    fn new(cfg: WindowAggregateConfig) -> Self {
        BuiltinAggregator { rows: WindowRows::new(cfg.aggregate), cfg, column: None }
    }
}

impl WindowAggregator for BuiltinAggregator {
    type Acc = StoredAcc;

    fn create(&self) -> StoredAcc {
        StoredAcc(None)
    }

    fn begin_batch(&mut self, batch: &RecordBatch) -> Result<(), OperatorError> {
        // Checks the column's type once; `add` then only indexes.
        self.column = aggregated_column(batch, &self.cfg.field, self.cfg.aggregate)?;
        Ok(())
    }

    fn add(&mut self, acc: &mut StoredAcc, batch: &RecordBatch, row: usize) -> Result<(), OperatorError> {
        let value = match self.column {
            None => 0,
            Some(i) => {
                let column = int64s(batch, i)?;
                // Nulls are skipped, as SQL aggregates skip them.
                if column.is_null(row) {
                    return Ok(());
                }
                column.value(row)
            }
        };
        let one = Acc::of(self.cfg.aggregate, value);
        match &mut acc.0 {
            Some(a) => a.merge(&one),
            None => acc.0 = Some(one),
        }
        Ok(())
    }

    fn merge(&self, acc: &mut StoredAcc, other: &StoredAcc) {
        match (&mut acc.0, other.0) {
            (Some(a), Some(b)) => a.merge(&b),
            (None, b) => acc.0 = b,
            (Some(_), None) => {}
        }
    }

    fn emit(
        &mut self,
        key: &[u8],
        window: TimeWindow,
        acc: &StoredAcc,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        match acc.0 {
            Some(acc) => self.rows.emit(key, window, acc.result(), out),
            None => Ok(()),
        }
    }

    fn flush(&mut self, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        self.rows.flush(out)
    }
}

/// The contents of `window-aggregate` fired by event time: an [`Acc`] of fixed size per slice or session in state
/// `window-<aggregate>`, and, for count, sum and avg of sliding windows, the running part of consecutive windows
/// in `window-run`.
pub struct Accumulators {
    aggregate: Aggregate,
    field: String,
    /// Sliding windows of count, sum or avg: fired from the running part.
    running: bool,
    acc: Option<StateId>,
    run: Option<StateId>,
    /// The index of the aggregated column in the batch at hand (`None`: a count, which reads none).
    column: Option<usize>,
    rows: WindowRows,
}

impl Accumulators {
    /// The contents of `cfg`'s windows of `kind`.
    pub fn new(cfg: &WindowAggregateConfig, kind: WindowKind) -> Self {
        Accumulators {
            aggregate: cfg.aggregate,
            field: cfg.field.clone(),
            running: matches!(kind, WindowKind::Sliding { .. }) && Running::applies(cfg.aggregate),
            acc: None,
            run: None,
            column: None,
            rows: WindowRows::new(cfg.aggregate),
        }
    }

    fn acc_state(&self) -> Result<StateId, OperatorError> {
        self.acc.ok_or_else(|| OperatorError::Misuse("window-aggregate used before initialize_state".into()))
    }

    /// The accumulator of row `row` (its value checked non-null by `ignores`).
    fn of_row(&self, batch: &RecordBatch, row: usize) -> Result<Acc, OperatorError> {
        let value = match self.column {
            None => 0,
            Some(i) => int64s(batch, i)?.value(row),
        };
        Ok(Acc::of(self.aggregate, value))
    }

    /// The accumulator under namespace `ns` of the current key.
    fn read(&self, b: &mut dyn KeyedStateBackend, ns: i64) -> Result<Option<Acc>, OperatorError> {
        b.set_current_namespace(&ns.to_be_bytes());
        match b.get_value(self.acc_state()?)? {
            None => Ok(None),
            Some(bytes) => Acc::decode(self.aggregate, bytes).map(Some).ok_or_else(|| {
                OperatorError::Records(format!(
                    "window-aggregate: a stored accumulator of {} bytes is not a {} accumulator",
                    bytes.len(),
                    self.aggregate.name()
                ))
            }),
        }
    }

    fn write(&self, b: &mut dyn KeyedStateBackend, ns: i64, acc: &Acc) -> Result<(), OperatorError> {
        let mut buf = [0u8; 16];
        let n = acc.encode(&mut buf);
        b.set_current_namespace(&ns.to_be_bytes());
        b.put_value(self.acc_state()?, &buf[..n])?;
        Ok(())
    }

    /// Folds `acc` into namespace `ns`; whether it held nothing before.
    fn fold(&self, b: &mut dyn KeyedStateBackend, ns: i64, mut acc: Acc) -> Result<bool, OperatorError> {
        let old = self.read(b, ns)?;
        if let Some(old) = &old {
            acc.merge(old);
        }
        self.write(b, ns, &acc)?;
        Ok(old.is_none())
    }

    /// Fires the sliding window ending at `end` from the running part the last window left plus the window's
    /// newest slices — two slices read, not `size / slide` —, and keeps what it leaves for the next one.
    fn fire_running(
        &mut self,
        b: &mut dyn KeyedStateBackend,
        run_state: StateId,
        key: &[u8],
        sl: &Slicing,
        end: i64,
        out: &mut Collector<'_>,
    ) -> Result<Option<bool>, OperatorError> {
        let stored = b.get_value(run_state)?.map(Running::decode);
        let mut run = match stored {
            Some(Some((at, mut run))) if sl.next_end(at) == end => {
                for slice in sl.first_in(end) {
                    if let Some(acc) = self.read(b, slice)? {
                        run.add(&acc);
                    }
                }
                run
            }
            Some(None) => return Err(malformed_run()),
            _ => {
                let mut run = Running::default();
                for slice in sl.slices(end) {
                    if let Some(acc) = self.read(b, slice)? {
                        run.add(&acc);
                    }
                }
                run
            }
        };
        let held = run.n > 0;
        if held {
            let window = TimeWindow { start: end - sl.size(), end };
            self.rows.emit(key, window, run.result(self.aggregate), out)?;
        }
        for slice in sl.last_in(end) {
            if let Some(acc) = self.read(b, slice)? {
                run.remove(&acc);
            }
        }
        let continues = run.n > 0;
        if continues {
            b.put_value(run_state, &run.encode(end))?;
        } else {
            b.delete_value(run_state)?;
        }
        Ok(held.then_some(continues))
    }
}

fn malformed_run() -> OperatorError {
    OperatorError::UnreadableState("window-aggregate: a stored running window is malformed".into())
}

impl Contents for Accumulators {
    fn register(&mut self, b: &mut dyn KeyedStateBackend) -> Result<(), OperatorError> {
        let ns = StateOptions::default().namespaced();
        self.acc = Some(b.register_state_with_options(&accumulator_state(self.aggregate), StateKind::Value, &ns)?);
        if self.running {
            self.run = Some(b.register_state(RUN_STATE, StateKind::Value)?);
        }
        Ok(())
    }

    fn begin_batch(&mut self, batch: &RecordBatch) -> Result<(), OperatorError> {
        self.column = aggregated_column(batch, &self.field, self.aggregate)?;
        Ok(())
    }

    fn ignores(&self, batch: &RecordBatch, row: usize) -> bool {
        // Nulls are skipped, as SQL aggregates skip them.
        self.column.is_some_and(|i| batch.column(i).is_null(row))
    }

    fn add(
        &mut self,
        b: &mut dyn KeyedStateBackend,
        ns: i64,
        batch: &RecordBatch,
        row: usize,
    ) -> Result<bool, OperatorError> {
        let acc = self.of_row(batch, row)?;
        self.fold(b, ns, acc)
    }

    fn add_rows(
        &mut self,
        b: &mut dyn KeyedStateBackend,
        ns: i64,
        batch: &RecordBatch,
        rows: &[u32],
    ) -> Result<bool, OperatorError> {
        let acc = match self.column {
            // A count of n rows is n: nothing to read per row.
            None if !rows.is_empty() => Acc::Count(rows.len() as u64),
            None => return Ok(false),
            Some(i) => {
                let values = int64s(batch, i)?;
                let Some((&first, rest)) = rows.split_first() else { return Ok(false) };
                let mut acc = Acc::of(self.aggregate, values.value(first as usize));
                for &row in rest {
                    acc.merge(&Acc::of(self.aggregate, values.value(row as usize)));
                }
                acc
            }
        };
        self.fold(b, ns, acc)
    }

    fn add_to_fired(
        &mut self,
        b: &mut dyn KeyedStateBackend,
        sl: &Slicing,
        slice: i64,
        batch: &RecordBatch,
        row: usize,
    ) -> Result<(), OperatorError> {
        let Some(run_state) = self.run else { return Ok(()) };
        let Some(bytes) = b.get_value(run_state)? else { return Ok(()) };
        let (end, mut run) = Running::decode(bytes).ok_or_else(malformed_run)?;
        // The running part is the slices of window `end` that the next window shares.
        if sl.next_end(end) - sl.size() <= slice && slice < end {
            run.add(&self.of_row(batch, row)?);
            b.put_value(run_state, &run.encode(end))?;
        }
        Ok(())
    }

    fn merge(&mut self, b: &mut dyn KeyedStateBackend, from: i64, into: i64) -> Result<(), OperatorError> {
        let Some(acc) = self.read(b, from)? else { return Ok(()) };
        self.clear(b, from)?;
        self.fold(b, into, acc)?;
        Ok(())
    }

    fn clear(&mut self, b: &mut dyn KeyedStateBackend, ns: i64) -> Result<(), OperatorError> {
        b.set_current_namespace(&ns.to_be_bytes());
        b.delete_value(self.acc_state()?)?;
        Ok(())
    }

    fn fire(
        &mut self,
        b: &mut dyn KeyedStateBackend,
        key: &[u8],
        window: TimeWindow,
        parts: &mut dyn Iterator<Item = i64>,
        out: &mut Collector<'_>,
    ) -> Result<Option<i64>, OperatorError> {
        let mut total: Option<Acc> = None;
        let mut last = None;
        for ns in parts {
            if let Some(acc) = self.read(b, ns)? {
                last = Some(ns);
                match &mut total {
                    Some(t) => t.merge(&acc),
                    None => total = Some(acc),
                }
            }
        }
        if let Some(total) = total {
            self.rows.emit(key, window, total.result(), out)?;
        }
        Ok(last)
    }

    fn fire_slices(
        &mut self,
        b: &mut dyn KeyedStateBackend,
        key: &[u8],
        sl: &Slicing,
        end: i64,
        out: &mut Collector<'_>,
    ) -> Result<Option<bool>, OperatorError> {
        match self.run {
            Some(run_state) => self.fire_running(b, run_state, key, sl, end, out),
            None => fire_combined(self, b, key, sl, end, out),
        }
    }

    fn flush(&mut self, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        self.rows.flush(out)
    }

    fn sign(signature: StateSignature) -> StateSignature {
        // One state per aggregate, so a job restored with another aggregate starts afresh instead of reading
        // another layout; the shared part of consecutive sliding windows (count, sum, avg): window end, sum,
        // count.
        signature
            .value::<u64>("window-count")
            .in_namespace::<i64>("window-count")
            .value::<(i64, u64)>("window-sum")
            .in_namespace::<i64>("window-sum")
            .value::<i64>("window-min")
            .in_namespace::<i64>("window-min")
            .value::<i64>("window-max")
            .in_namespace::<i64>("window-max")
            .value::<(i64, u64)>("window-avg")
            .in_namespace::<i64>("window-avg")
            .value::<(i64, i64, u64)>(RUN_STATE)
    }
}

/// The `window-aggregate` kind (DESIGN §10): count, sum, min, max or avg per key and window.
pub struct WindowAggregateKind;

impl Kind for WindowAggregateKind {
    type Config = WindowAggregateConfig;

    fn info(&self) -> KindInfo {
        // The value is a float for `avg`, an integer otherwise: declared per job by the config, not here.
        builtin_info(
            "window-aggregate",
            Role::Operator,
            true,
            "Count, sum, min, max or avg per key and window",
            WindowAggregateConfig::FIELDS,
        )
        .with_states(&[
            ("window-<aggregate>", StateClass::Value, "accumulator per window slice"),
            ("window-contents", StateClass::Value, "accumulator per slice (other triggers)"),
            ("window-trigger", StateClass::Value, "trigger state per window"),
        ])
        .with_input(vec![key_column()])
        .on_event_time()
    }

    fn signature(&self) -> Option<StateSignature> {
        // Every config's states: the event-time accumulators, a key's open sessions, and for other triggers and
        // global windows an accumulator per slice, session or global window and a trigger's state per window;
        // timers in namespace `w` (window) or `n` + the window's id (continuous firing).
        let s = Accumulators::sign(StateSignature::keyed::<Vec<u8>>());
        let s = Aggregating::<BuiltinAggregator>::sign(s.value::<Vec<(i64, i64, i64)>>(SESSIONS_STATE));
        Some(s.value::<Vec<u8>>(TRIGGER_STATE).in_namespace::<i64>(TRIGGER_STATE).timers::<Vec<u8>>())
    }

    fn config(&self, config: &OperatorConfig) -> Result<WindowAggregateConfig, ConfigFieldError> {
        WindowAggregateConfig::from_map(config)
    }

    fn side_outputs(&self, config: &WindowAggregateConfig) -> SideOutputs {
        use crate::window::operator::LATE_TAG;
        let tags = match config.late {
            LateRecords::SideOutput => vec![LATE_TAG.to_string()],
            LateRecords::Drop => vec![],
        };
        SideOutputs { tags, elsewhere: vec![(LATE_TAG.into(), "set late: side-output in its config".into())] }
    }

    fn check_input(&self, config: &WindowAggregateConfig, input: &[Column]) -> Result<(), ConfigFieldError> {
        match config.aggregate {
            Aggregate::Count => Ok(()),
            _ => weir_common::job::kind::input_column(input, "field", &config.field, &["int64"]),
        }
    }

    fn build(&self, config: WindowAggregateConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Operator(window_aggregate(config)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::batch::{batch_of, event_times, keys};
    use crate::api::record::Record;
    use crate::testing::Harness;
    use crate::window::config::LateRecords;
    use crate::window::contents::{Listing, ProcessWindowFunction};
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Float64Type, Int64Type, TimestampMillisecondType};
    use arrow_array::Int64Array;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use weir_common::job::spec::StateBackend;

    /// What reaches the operator: a batch of `(key, ts, value)`, a watermark, or the processing-time clock
    /// moving to a time.
    #[derive(Debug, Clone)]
    enum Ev {
        Rows(Vec<(u8, i64, i64)>),
        Watermark(i64),
        Clock(i64),
    }

    /// An output row: key, start, end, value (an average times 1000, rounded).
    type Row = (u8, i64, i64, i64);

    fn rows_of(batch: &RecordBatch, out: &mut Vec<Row>) {
        let keys = batch.column(0).as_binary::<i32>();
        let starts = batch.column(1).as_primitive::<TimestampMillisecondType>();
        let ends = batch.column(2).as_primitive::<TimestampMillisecondType>();
        let times = batch.column(4).as_primitive::<TimestampMillisecondType>();
        for i in 0..batch.num_rows() {
            let value = match batch.column(3).data_type() {
                DataType::Float64 => (batch.column(3).as_primitive::<Float64Type>().value(i) * 1000.0).round() as i64,
                _ => batch.column(3).as_primitive::<Int64Type>().value(i),
            };
            assert_eq!(times.value(i), ends.value(i) - 1, "a window's row is stamped with its last millisecond");
            out.push((keys.value(i)[0], starts.value(i), ends.value(i), value));
        }
    }

    /// Runs the operator of `cfg` over `events` (then the final watermark), firing timers as the task does.
    fn run(cfg: WindowAggregateConfig, backend: StateBackend, events: &[Ev]) -> Vec<Row> {
        run_op(window_aggregate(cfg).unwrap(), backend, events)
    }

    /// Runs `op` over `events` (then the final watermark), firing timers as the task does; processing time is a
    /// manual clock that `Ev::Clock` moves.
    fn run_op(op: Box<dyn Operator>, backend: StateBackend, events: &[Ev]) -> Vec<Row> {
        run_op_with_late(op, backend, events).0
    }

    /// [`run_op`], and the `(key, timestamp)` of the records the operator sent to its side output `late`.
    fn run_op_with_late(op: Box<dyn Operator>, backend: StateBackend, events: &[Ev]) -> (Vec<Row>, Vec<(u8, i64)>) {
        let mut h = Harness::keyed(backend).uid("win").open_boxed(op).unwrap();
        let mut rows = Vec::new();
        let mut late = Vec::new();
        for ev in events.iter().cloned().chain([Ev::Watermark(i64::MAX)]) {
            match ev {
                Ev::Rows(r) => {
                    let records: Vec<Record> = r.iter().map(|(k, ts, v)| Record::new_i64(&[*k], *v).at(*ts)).collect();
                    h.process(&batch_of(&records).unwrap()).unwrap();
                }
                Ev::Watermark(w) => h.watermark(w).unwrap(),
                Ev::Clock(now) => h.set_processing_time(now as u64).unwrap(),
            }
            for batch in h.take_output() {
                rows_of(&batch, &mut rows);
            }
            for (tag, batches) in h.take_side_outputs() {
                assert_eq!(tag, "late");
                for batch in batches {
                    let times = event_times(&batch).unwrap();
                    let keys = keys(&batch).unwrap();
                    late.extend((0..batch.num_rows()).map(|r| (keys.value(r)[0], times.value(r))));
                }
            }
        }
        // Everything fired and was cleaned up: no state and no timer is left behind.
        let summaries = h.keyed().unwrap().state_summaries().unwrap();
        let timers: u64 = summaries.iter().filter_map(|s| s.entries).sum();
        assert_eq!(timers, 0, "timers left: {summaries:?}");
        (rows, late)
    }

    fn result(agg: Aggregate, values: &[i64]) -> i64 {
        match agg {
            Aggregate::Count => values.len() as i64,
            Aggregate::Sum => values.iter().sum(),
            Aggregate::Min => *values.iter().min().unwrap(),
            Aggregate::Max => *values.iter().max().unwrap(),
            Aggregate::Avg => ((values.iter().sum::<i64>() as f64 / values.len() as f64) * 1000.0).round() as i64,
        }
    }

    /// Flink's window semantics by brute force, window by window: a record joins every window that is not past
    /// its allowed lateness (dropped if none); a window fires when the watermark reaches its last millisecond,
    /// and again at once for a record joining it after that.
    fn model_fixed(
        windows_of: impl Fn(i64) -> Vec<TimeWindow>,
        agg: Aggregate,
        lateness: i64,
        events: &[Ev],
        late: &mut Vec<(u8, i64)>,
    ) -> Vec<Row> {
        let mut wins: BTreeMap<(u8, TimeWindow), (Vec<i64>, bool)> = BTreeMap::new();
        let mut out = Vec::new();
        let mut wm = i64::MIN;
        for ev in events.iter().cloned().chain([Ev::Watermark(i64::MAX)]) {
            match ev {
                Ev::Rows(rows) => {
                    for (k, ts, v) in rows {
                        if windows_of(ts).iter().all(|w| w.max_timestamp() + lateness <= wm) {
                            late.push((k, ts));
                        }
                        for w in windows_of(ts) {
                            if w.max_timestamp() + lateness <= wm {
                                continue;
                            }
                            let e = wins.entry((k, w)).or_default();
                            e.0.push(v);
                            if w.max_timestamp() <= wm {
                                out.push((k, w.start, w.end, result(agg, &e.0)));
                            } else {
                                e.1 = true;
                            }
                        }
                    }
                }
                Ev::Clock(_) => {}
                Ev::Watermark(w) => {
                    wm = wm.max(w);
                    for ((k, win), (values, pending)) in wins.iter_mut() {
                        if *pending && win.max_timestamp() <= wm {
                            out.push((*k, win.start, win.end, result(agg, values)));
                            *pending = false;
                        }
                    }
                }
            }
        }
        out
    }

    /// Session windows by brute force: sessions per key with their values, merged as records arrive.
    fn model_sessions(gap: i64, agg: Aggregate, lateness: i64, events: &[Ev], late: &mut Vec<(u8, i64)>) -> Vec<Row> {
        // Per key: (window, values, pending).
        let mut sessions: BTreeMap<u8, Vec<(TimeWindow, Vec<i64>, bool)>> = BTreeMap::new();
        let mut out = Vec::new();
        let mut wm = i64::MIN;
        for ev in events.iter().cloned().chain([Ev::Watermark(i64::MAX)]) {
            match ev {
                Ev::Rows(rows) => {
                    for (k, ts, v) in rows {
                        let list = sessions.entry(k).or_default();
                        let mut w = TimeWindow { start: ts, end: ts + gap };
                        let mut values = vec![v];
                        let (touching, rest): (Vec<_>, Vec<_>) = list.drain(..).partition(|s| s.0.intersects(&w));
                        for s in &touching {
                            w = w.cover(&s.0);
                        }
                        *list = rest;
                        if w.max_timestamp() + lateness <= wm {
                            list.extend(touching);
                            late.push((k, ts));
                            continue;
                        }
                        for s in touching {
                            values.extend(s.1);
                        }
                        let pending = w.max_timestamp() > wm;
                        if !pending {
                            out.push((k, w.start, w.end, result(agg, &values)));
                        }
                        list.push((w, values, pending));
                    }
                }
                Ev::Clock(_) => {}
                Ev::Watermark(w) => {
                    wm = wm.max(w);
                    for (k, list) in sessions.iter_mut() {
                        for s in list.iter_mut() {
                            if s.2 && s.0.max_timestamp() <= wm {
                                out.push((*k, s.0.start, s.0.end, result(agg, &s.1)));
                                s.2 = false;
                            }
                        }
                        list.retain(|s| s.0.max_timestamp() + lateness > wm);
                    }
                }
            }
        }
        out
    }

    /// A window of the trigger model: its values, count since the last count firing, next continuous firing,
    /// whether its processing-time timer and its end firing are pending.
    #[derive(Debug, Clone, Default)]
    struct MWin {
        values: Vec<i64>,
        count: u64,
        fire_at: Option<i64>,
        pt: bool,
        end: bool,
    }

    /// Flink's triggers by brute force (`CountTrigger`, `ContinuousEventTimeTrigger`, `ProcessingTimeTrigger`;
    /// a global count window is emptied when it fires, as `countWindow`), window by window, for any window shape.
    /// A continuous firing the watermark passed fires once, then at the first interval boundary after it.
    fn model_triggered(
        shape: WindowShape,
        trigger: WindowTrigger,
        agg: Aggregate,
        lateness: i64,
        events: &[Ev],
    ) -> Vec<Row> {
        let kind = window_kind(&config(shape, agg, lateness as u64));
        let global = kind == WindowKind::Global;
        let mut wins: BTreeMap<u8, Vec<(TimeWindow, MWin)>> = BTreeMap::new();
        let mut out = Vec::new();
        let mut wm = i64::MIN;
        let emit = |out: &mut Vec<Row>, k: u8, w: TimeWindow, m: &MWin| {
            if !m.values.is_empty() {
                out.push((k, w.start, w.end, result(agg, &m.values)));
            }
        };
        for ev in events.iter().cloned().chain([Ev::Watermark(i64::MAX)]) {
            match ev {
                Ev::Rows(rows) => {
                    for (k, ts, v) in rows {
                        let list = wins.entry(k).or_default();
                        // The windows the record joins, each with its state (sessions merged first).
                        let mut targets: Vec<usize> = Vec::new();
                        if let WindowKind::Session { gap } = kind {
                            let mut w = TimeWindow { start: ts, end: ts + gap };
                            let mut merged = MWin::default();
                            let mut touching = Vec::new();
                            list.retain(|(sw, m)| {
                                if sw.intersects(&TimeWindow { start: ts, end: ts + gap }) {
                                    touching.push((*sw, m.clone()));
                                    false
                                } else {
                                    true
                                }
                            });
                            for (sw, _) in &touching {
                                w = w.cover(sw);
                            }
                            if w.max_timestamp() + lateness <= wm {
                                list.extend(touching);
                                continue;
                            }
                            for (_, m) in touching {
                                merged.values.extend(m.values);
                                merged.count += m.count;
                                merged.fire_at = match (merged.fire_at, m.fire_at) {
                                    (Some(a), Some(b)) => Some(a.min(b)),
                                    (a, b) => a.or(b),
                                };
                            }
                            list.push((w, merged));
                            targets.push(list.len() - 1);
                        } else {
                            for w in kind.windows_of(ts) {
                                if !global && w.max_timestamp() + lateness <= wm {
                                    continue;
                                }
                                match list.iter().position(|(x, _)| *x == w) {
                                    Some(p) => targets.push(p),
                                    None => {
                                        list.push((w, MWin::default()));
                                        targets.push(list.len() - 1);
                                    }
                                }
                            }
                        }
                        for p in targets {
                            let (w, m) = &mut list[p];
                            m.values.push(v);
                            match trigger {
                                WindowTrigger::Count(n) => {
                                    m.count += 1;
                                    if m.count >= n {
                                        emit(&mut out, k, *w, m);
                                        m.count = 0;
                                        if global {
                                            m.values.clear();
                                        }
                                    }
                                }
                                WindowTrigger::ContinuousEventTime(i) => {
                                    let i = i as i64;
                                    if w.max_timestamp() <= wm {
                                        emit(&mut out, k, *w, m);
                                    } else {
                                        m.end = true;
                                        if m.fire_at.is_none() {
                                            m.fire_at = Some((ts - ts.rem_euclid(i) + i).min(w.max_timestamp()));
                                        }
                                    }
                                }
                                WindowTrigger::ProcessingTime => m.pt = true,
                                WindowTrigger::EventTime => unreachable!("the event-time model is model_fixed"),
                            }
                        }
                    }
                }
                // Only a watermark that advances reaches the operator.
                Ev::Watermark(to) if to > wm => {
                    wm = to;
                    for (k, list) in wins.iter_mut() {
                        for (w, m) in list.iter_mut() {
                            let max = w.max_timestamp();
                            if let (WindowTrigger::ContinuousEventTime(i), Some(f)) = (trigger, m.fire_at) {
                                let i = i as i64;
                                if f < max && f <= wm {
                                    emit(&mut out, *k, *w, m);
                                    let next = f as i128 + i as i128 * ((wm as i128 - f as i128) / i as i128 + 1);
                                    m.fire_at = Some(next.min(max as i128) as i64);
                                }
                            }
                            if m.end && max <= wm {
                                emit(&mut out, *k, *w, m);
                                m.end = false;
                            }
                        }
                        if !global {
                            list.retain(|(w, _)| w.max_timestamp() + lateness > wm);
                        }
                    }
                }
                Ev::Watermark(_) => {}
                Ev::Clock(now) => {
                    for (k, list) in wins.iter_mut() {
                        for (w, m) in list.iter_mut() {
                            if m.pt && w.max_timestamp() <= now {
                                emit(&mut out, *k, *w, m);
                                m.pt = false;
                            }
                        }
                    }
                }
            }
        }
        out
    }

    fn config(window: WindowShape, aggregate: Aggregate, lateness: u64) -> WindowAggregateConfig {
        WindowAggregateConfig {
            window,
            offset_ms: 0,
            aggregate,
            field: "value".into(),
            allowed_lateness_ms: lateness,
            late: LateRecords::Drop,
            trigger: WindowTrigger::EventTime,
        }
    }

    fn check(
        window: WindowShape,
        agg: Aggregate,
        lateness: u64,
        events: &[Ev],
        backend: StateBackend,
    ) -> Result<(), TestCaseError> {
        // Late records go to the side output (the windows' rows are the same as when they are dropped).
        let cfg = WindowAggregateConfig { late: LateRecords::SideOutput, ..config(window, agg, lateness) };
        let (mut got, mut got_late) = run_op_with_late(window_aggregate(cfg.clone()).unwrap(), backend, events);
        let l = lateness as i64;
        let mut late = Vec::new();
        let mut want = match window {
            WindowShape::Tumbling { size_ms } => {
                let kind = WindowKind::Tumbling { size: size_ms as i64, offset: 0 };
                model_fixed(|ts| kind.windows_of(ts), agg, l, events, &mut late)
            }
            WindowShape::Sliding { size_ms, slide_ms } => {
                let kind = WindowKind::Sliding { size: size_ms as i64, slide: slide_ms as i64, offset: 0 };
                model_fixed(|ts| kind.windows_of(ts), agg, l, events, &mut late)
            }
            WindowShape::Session { gap_ms } => model_sessions(gap_ms as i64, agg, l, events, &mut late),
            WindowShape::Global => unreachable!("global windows need a trigger"),
        };
        // The operator with the general accumulating contents agrees too.
        let general = WindowOperator::new(
            window_kind(&cfg),
            Trigger::EventTime,
            l,
            false,
            Aggregating::new(BuiltinAggregator::new(cfg.clone())),
        )
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (mut general, mut general_late) =
            run_op_with_late(Box::new(general.with_late_side_output()), backend, events);
        general.sort();
        // So does a process-window function computing the aggregate from every element (dropping late records).
        let listed = WindowOperator::new(
            window_kind(&cfg),
            Trigger::EventTime,
            l,
            false,
            Listing::new(Elements { agg, rows: WindowRows::new(agg) }),
        )
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (mut listed, listed_late) = run_op_with_late(Box::new(listed), backend, events);
        listed.sort();
        got.sort();
        want.sort();
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(general, want.clone(), "the general accumulating contents");
        prop_assert_eq!(listed, want, "a process-window function");
        late.sort();
        got_late.sort();
        general_late.sort();
        prop_assert_eq!(&got_late, &late, "late records on the side output");
        prop_assert_eq!(general_late, late, "late records on the general operator's side output");
        prop_assert!(listed_late.is_empty(), "dropped without a side output");
        Ok(())
    }

    fn events() -> impl Strategy<Value = Vec<Ev>> {
        proptest::collection::vec(
            prop_oneof![
                3 => proptest::collection::vec((0u8..4, 0i64..120, -5i64..20), 1..6).prop_map(Ev::Rows),
                1 => (0i64..130).prop_map(Ev::Watermark),
            ],
            1..25,
        )
    }

    fn aggregates() -> impl Strategy<Value = Aggregate> {
        prop_oneof![
            Just(Aggregate::Count),
            Just(Aggregate::Sum),
            Just(Aggregate::Min),
            Just(Aggregate::Max),
            Just(Aggregate::Avg)
        ]
    }

    /// A process-window function that keeps each record's value and aggregates them when the window fires.
    struct Elements {
        agg: Aggregate,
        rows: WindowRows,
    }

    impl ProcessWindowFunction for Elements {
        type Element = i64;

        fn element(&mut self, batch: &RecordBatch, row: usize) -> Result<i64, OperatorError> {
            let values = batch.column_by_name("value").and_then(|c| c.as_any().downcast_ref::<Int64Array>());
            values.map(|v| v.value(row)).ok_or_else(|| OperatorError::Misuse("no value column".into()))
        }

        fn process(
            &mut self,
            key: &[u8],
            window: TimeWindow,
            elements: &[i64],
            _: &mut Collector<'_>,
        ) -> Result<(), OperatorError> {
            let mut acc = Acc::of(self.agg, elements[0]);
            for v in &elements[1..] {
                acc.merge(&Acc::of(self.agg, *v));
            }
            self.rows.push(key, window, acc.result());
            Ok(())
        }

        fn flush(&mut self, out: &mut Collector<'_>) -> Result<(), OperatorError> {
            self.rows.flush(out)
        }
    }

    fn check_triggered(
        shape: WindowShape,
        trigger: WindowTrigger,
        agg: Aggregate,
        lateness: u64,
        events: &[Ev],
        backend: StateBackend,
    ) -> Result<(), TestCaseError> {
        let cfg = WindowAggregateConfig { trigger, ..config(shape, agg, lateness) };
        let mut got = run(cfg, backend, events);
        let mut want = model_triggered(shape, trigger, agg, lateness as i64, events);
        got.sort();
        want.sort();
        prop_assert_eq!(got, want);
        Ok(())
    }

    #[test]
    fn count_continuous_and_processing_time_triggers_on_rocksdb() {
        let events = vec![
            Ev::Rows(vec![(1, 5, 1), (1, 12, 2), (2, 3, 7), (1, 6, 5)]),
            Ev::Watermark(9),
            Ev::Clock(9),
            Ev::Rows(vec![(1, 7, 4), (2, 40, 1), (1, 8, 2)]),
            Ev::Watermark(30),
            Ev::Clock(100),
            Ev::Rows(vec![(1, 25, 3), (1, 26, 3)]),
        ];
        for shape in [
            WindowShape::Tumbling { size_ms: 10 },
            WindowShape::Sliding { size_ms: 10, slide_ms: 4 },
            WindowShape::Session { gap_ms: 6 },
            WindowShape::Global,
        ] {
            for trigger in
                [WindowTrigger::Count(2), WindowTrigger::ContinuousEventTime(3), WindowTrigger::ProcessingTime]
            {
                if shape == WindowShape::Global && trigger == WindowTrigger::ProcessingTime {
                    continue;
                }
                for lateness in [0, 8] {
                    check_triggered(shape, trigger, Aggregate::Sum, lateness, &events, StateBackend::Rocksdb)
                        .unwrap_or_else(|e| panic!("{shape:?} {trigger:?} lateness {lateness}: {e}"));
                }
            }
        }
    }

    #[test]
    fn a_global_count_window_fires_every_n_records_and_starts_afresh() {
        let cfg = WindowAggregateConfig {
            trigger: WindowTrigger::Count(2),
            ..config(WindowShape::Global, Aggregate::Sum, 0)
        };
        let rows =
            run(cfg, StateBackend::Heap, &[Ev::Rows(vec![(1, 0, 1), (1, 0, 2), (2, 0, 5), (1, 0, 4), (1, 0, 8)])]);
        let (lo, hi) = (i64::MIN, i64::MAX);
        assert_eq!(rows, [(1, lo, hi, 3), (1, lo, hi, 12)], "key 2's single record never fires");
    }

    /// What `window-aggregate` stored before it ran on the window operator: a count per slice in `window-count`,
    /// a firing timer in namespace `f` at an unfired window's end, a cleanup timer in `c` past a fired one's
    /// lateness. Each record `(key, slice, count, timer namespace, timer time)` is written as such.
    struct OldLayout {
        acc: Option<StateId>,
    }

    impl Operator for OldLayout {
        fn initialize_state(&mut self, ctx: &mut crate::api::operator::InitContext<'_>) -> Result<(), OperatorError> {
            let keyed = ctx.keyed.as_mut().ok_or_else(|| OperatorError::Misuse("keyed".into()))?;
            let ns = StateOptions::default().namespaced();
            self.acc = Some(keyed.register_state_with_options("window-count", StateKind::Value, &ns)?);
            Ok(())
        }

        fn process_batch(
            &mut self,
            batch: &RecordBatch,
            ctx: &mut crate::api::operator::ProcessContext<'_>,
            _: &mut Collector<'_>,
        ) -> Result<(), OperatorError> {
            let keys = keys(batch)?;
            let times = event_times(batch).ok_or_else(|| OperatorError::Misuse("times".into()))?;
            let mut t = ctx.timers()?;
            for i in 0..batch.num_rows() {
                // The key is the record's; its time says which slice, timer and count: slice, then timer.
                let (slice, timer_ns, timer_at, count): (i64, &[u8], i64, u64) = match times.value(i) {
                    1 => (10, b"f", 19, 2),
                    _ => (0, b"c", 14, 1),
                };
                crate::api::batch::set_current_key_of_row(t.keyed(), keys, None, i);
                t.keyed().set_current_namespace(&slice.to_be_bytes());
                let mut buf = [0u8; 16];
                let n = Acc::Count(count).encode(&mut buf);
                t.keyed().put_value(self.acc.unwrap(), &buf[..n])?;
                t.keyed().set_current_namespace(timer_ns);
                t.register_event_time_timer(timer_at)?;
            }
            Ok(())
        }
    }

    #[test]
    fn windows_open_in_the_old_layout_fire_and_clean_up_once_restored() {
        for backend in [StateBackend::Heap, StateBackend::Rocksdb] {
            // Tumbling 10 ms, 5 ms of lateness, at watermark 10: key 1's window [10, 20) is open with a count of
            // 2; key 2's window [0, 10) has fired with a count of 1 and is cleaned up at 14.
            let cfg = config(WindowShape::Tumbling { size_ms: 10 }, Aggregate::Count, 5);
            let old = [Record::new_i64(&[1], 0).at(1), Record::new_i64(&[2], 0).at(2)];
            let mut h = Harness::keyed(backend).uid("win").open(OldLayout { acc: None }).unwrap();
            h.process(&batch_of(&old).unwrap()).unwrap();
            h.watermark(10).unwrap();
            let snapshot = h.snapshot(1).unwrap();

            let h = Harness::keyed(backend).uid("win").restore(&snapshot);
            let mut h = h.open_boxed(window_aggregate(cfg).unwrap()).unwrap();
            let mut got = Vec::new();
            // A late record of key 2 within the lateness fires its window again, from the stored count.
            h.process(&batch_of(&[Record::new_i64(&[2], 0).at(5)]).unwrap()).unwrap();
            h.take_output().iter().for_each(|b| rows_of(b, &mut got));
            assert_eq!(got, vec![(2, 0, 10, 2)], "{backend:?}");
            // The `c` timer purges key 2's window (it fires nothing): a record for it is now too late.
            h.watermark(14).unwrap();
            h.process(&batch_of(&[Record::new_i64(&[2], 0).at(6)]).unwrap()).unwrap();
            // The `f` timer fires key 1's window once.
            h.watermark(i64::MAX).unwrap();
            h.take_output().iter().for_each(|b| rows_of(b, &mut got));
            assert_eq!(got, vec![(2, 0, 10, 2), (1, 10, 20, 2)], "{backend:?}");
            let summaries = h.keyed().unwrap().state_summaries().unwrap();
            let left: u64 = summaries.iter().filter_map(|s| s.entries).sum();
            assert_eq!(left, 0, "{backend:?}: {summaries:?}");
        }
    }

    #[test]
    fn a_growing_session_keeps_only_its_own_timers() {
        for backend in [StateBackend::Heap, StateBackend::Rocksdb] {
            for lateness in [0, 4] {
                let cfg = config(WindowShape::Session { gap_ms: 10 }, Aggregate::Count, lateness);
                let mut h = Harness::keyed(backend).open_boxed(window_aggregate(cfg).unwrap()).unwrap();
                // One key's session grows by a record a millisecond, then a second session opens.
                for ts in (0..100).chain([200]) {
                    h.process(&batch_of(&[Record::new_i64(&[7], 1).at(ts)]).unwrap()).unwrap();
                }
                let summaries = h.keyed().unwrap().state_summaries().unwrap();
                let timers: u64 = summaries.iter().filter_map(|s| s.entries).sum();
                let per_session = if lateness > 0 { 2 } else { 1 };
                assert_eq!(timers, 2 * per_session, "{backend:?} lateness {lateness}: {summaries:?}");
                h.watermark(i64::MAX).unwrap();
                let mut got = Vec::new();
                h.take_output().iter().for_each(|b| rows_of(b, &mut got));
                assert_eq!(got, vec![(7, 0, 109, 100), (7, 200, 210, 1)], "{backend:?}");
            }
        }
    }

    #[test]
    fn tumbling_sliding_and_session_windows_on_rocksdb() {
        let events = vec![
            Ev::Rows(vec![(1, 5, 1), (1, 12, 2), (2, 3, 7)]),
            Ev::Watermark(9),
            Ev::Rows(vec![(1, 7, 4), (2, 40, 1)]),
            Ev::Watermark(30),
            Ev::Rows(vec![(1, 25, 3)]),
        ];
        for window in [
            WindowShape::Tumbling { size_ms: 10 },
            WindowShape::Sliding { size_ms: 10, slide_ms: 4 },
            WindowShape::Session { gap_ms: 6 },
        ] {
            for lateness in [0, 8] {
                check(window, Aggregate::Sum, lateness, &events, StateBackend::Rocksdb).unwrap();
            }
        }
    }

    /// Windows still open at a snapshot of one subtask, restored as two: each subtask fires the windows of its own
    /// keys (its restored slices and timers), and both together fire what one would.
    #[test]
    fn open_windows_restored_at_another_parallelism_fire_in_the_subtask_of_their_key() {
        for backend in [StateBackend::Heap, StateBackend::Rocksdb] {
            for window in [WindowShape::Tumbling { size_ms: 10 }, WindowShape::Session { gap_ms: 6 }] {
                let cfg = config(window, Aggregate::Sum, 0);
                let rows: Vec<Record> = (0..24u8)
                    .flat_map(|k| [Record::new_i64(&[k], 1).at(3), Record::new_i64(&[k], k as i64).at(21)])
                    .collect();
                let batch = batch_of(&rows).unwrap();
                let mut one = Harness::keyed(backend).open_boxed(window_aggregate(cfg.clone()).unwrap()).unwrap();
                one.process(&batch).unwrap();
                one.watermark(12).unwrap();
                assert_eq!(one.take_output().iter().map(RecordBatch::num_rows).sum::<usize>(), 24, "the first windows");
                let snapshot = one.snapshot(1).unwrap();
                one.watermark(i64::MAX).unwrap();
                let mut expected = Vec::new();
                one.take_output().iter().for_each(|b| rows_of(b, &mut expected));
                expected.sort_unstable();
                assert_eq!(expected.len(), 24, "{backend:?} {window:?}");

                let mut union = Vec::new();
                for i in 0..2 {
                    let h = Harness::keyed(backend).subtask(i, 2).restore(&snapshot);
                    let mut h = h.open_boxed(window_aggregate(cfg.clone()).unwrap()).unwrap();
                    assert_eq!(h.current_watermark(), 12, "restored at its old watermark");
                    h.watermark(i64::MAX).unwrap();
                    let mut got = Vec::new();
                    h.take_output().iter().for_each(|b| rows_of(b, &mut got));
                    let range = h.info().key_group_range;
                    for row in &got {
                        let group = weir_common::state::keygroup::key_group_for_key(&[row.0], 128);
                        assert!(range.contains(group), "subtask {i} fired key {}'s window", row.0);
                    }
                    assert!(!got.is_empty() && got.len() < 24, "subtask {i}: {got:?}");
                    union.extend(got);
                }
                union.sort_unstable();
                assert_eq!(union, expected, "{backend:?} {window:?}: two subtasks fire what one does");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// The operator's rows equal the brute-force model's, for any stream, watermarks, aggregate and lateness.
        #[test]
        fn windows_match_a_brute_force_model(
            events in events(),
            agg in aggregates(),
            lateness in prop_oneof![Just(0u64), 1u64..30],
            shape in prop_oneof![
                (1u64..30).prop_map(|size_ms| WindowShape::Tumbling { size_ms }),
                (1u64..8, 1u64..5).prop_map(|(k, slide_ms)| WindowShape::Sliding { size_ms: slide_ms * k + (k > 2) as u64, slide_ms }),
                (1u64..15).prop_map(|gap_ms| WindowShape::Session { gap_ms }),
            ],
        ) {
            let shape = match shape {
                WindowShape::Sliding { size_ms, slide_ms } if slide_ms > size_ms => WindowShape::Sliding { size_ms: slide_ms, slide_ms },
                s => s,
            };
            check(shape, agg, lateness, &events, StateBackend::Heap)?;
        }

        /// Count, continuous and processing-time triggers equal their brute-force model, for any stream,
        /// watermarks, clock, window shape (global included) and lateness.
        #[test]
        fn triggers_match_a_brute_force_model(
            events in proptest::collection::vec(
                prop_oneof![
                    3 => proptest::collection::vec((0u8..3, 0i64..120, -5i64..20), 1..6).prop_map(Ev::Rows),
                    1 => (0i64..130).prop_map(Ev::Watermark),
                    1 => (0i64..130).prop_map(Ev::Clock),
                ],
                1..25,
            ),
            agg in aggregates(),
            lateness in prop_oneof![Just(0u64), 1u64..30],
            shape in prop_oneof![
                (1u64..30).prop_map(|size_ms| WindowShape::Tumbling { size_ms }),
                (1u64..8, 1u64..5).prop_map(|(k, slide_ms)| WindowShape::Sliding { size_ms: slide_ms * k + (k > 2) as u64, slide_ms }),
                (1u64..15).prop_map(|gap_ms| WindowShape::Session { gap_ms }),
                Just(WindowShape::Global),
            ],
            trigger in prop_oneof![
                (1u64..5).prop_map(WindowTrigger::Count),
                (1u64..25).prop_map(WindowTrigger::ContinuousEventTime),
                Just(WindowTrigger::ProcessingTime),
            ],
        ) {
            let shape = match shape {
                WindowShape::Sliding { size_ms, slide_ms } if slide_ms > size_ms => WindowShape::Sliding { size_ms: slide_ms, slide_ms },
                s => s,
            };
            let trigger = match (shape, trigger) {
                (WindowShape::Global, WindowTrigger::ProcessingTime) => WindowTrigger::Count(2),
                (_, t) => t,
            };
            // The clock only moves forward.
            let mut now = 0;
            let events: Vec<Ev> = events.into_iter().map(|e| match e {
                Ev::Clock(t) => { now = now.max(t); Ev::Clock(now) }
                e => e,
            }).collect();
            check_triggered(shape, trigger, agg, lateness, &events, StateBackend::Heap)?;
        }
    }
}
