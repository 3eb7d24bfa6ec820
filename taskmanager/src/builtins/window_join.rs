//! `window-join`: the inner join of two inputs keyed alike within tumbling windows (Flink's window join). Each
//! row goes into its side's list for its key and window (namespace: the window's end) and sets an event-time
//! timer at `end − 1`; when it fires, every row of the first side is joined with every row of the second, the
//! joined rows get `window_start`, `window_end` and event time `end − 1`, `where` and `select` apply
//! (`join::Plan`), `distinct` keeps each output row once, and both lists are cleared. The inputs' columns are
//! kept beside the rows in union operator state, as the join does.

use crate::api::batch::{event_times, key_groups, keys, set_current_key_of_row, EVENT_TIME};
use crate::api::operator::{Collector, InitContext, Operator, OperatorError, ProcessContext, SnapshotContext};
use crate::api::stored_rows::{encode_row, restore_kept, snapshot_kept, KeptColumns, RowsBuilder};
use crate::api::timers::TimeDomain;
use crate::builtins::join::Plan;
use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch, TimestampMillisecondArray, UInt32Array};
use arrow_schema::{DataType, Field, SchemaRef, TimeUnit};
use std::collections::HashSet;
use std::sync::Arc;
use weir_common::builtin::WindowJoinConfig;
use weir_state::{ListState, StateDescriptor};

const COLUMNS_STATE: &str = "window-join-columns";
const SIDE_NAMES: [&str; 2] = ["first", "second"];
const STATES: [&str; 2] = ["window-join-first", "window-join-second"];

/// The window-join operator.
pub struct WindowJoin {
    cfg: WindowJoinConfig,
    rows: [Option<ListState<Vec<u8>>>; 2],
    columns: [KeptColumns; 2],
    plan: Option<Plan>,
    row: Vec<u8>,
}

impl WindowJoin {
    /// A window join with the given config.
    pub fn new(cfg: WindowJoinConfig) -> Self {
        WindowJoin { cfg, rows: [None, None], columns: Default::default(), plan: None, row: Vec::new() }
    }

    fn process(&mut self, s: usize, batch: &RecordBatch, ctx: &mut ProcessContext<'_>) -> Result<(), OperatorError> {
        let what = format!("the {} input", SIDE_NAMES[s]);
        let (idx, learned) = self.columns[s].of_batch(&what, &batch.schema())?;
        if learned {
            self.plan = None;
        }
        let own: Vec<ArrayRef> = idx.iter().map(|&i| batch.column(i).clone()).collect();
        let times = event_times(batch)
            .ok_or_else(|| OperatorError::Other("window-join needs event time: its input has no timestamps".into()))?;
        let (keys, groups) = (keys(batch)?, key_groups(batch));
        let watermark = ctx.current_watermark();
        let size = self.cfg.size_ms as i64;
        let list = self.rows[s].as_mut().ok_or_else(|| OperatorError::Other("window-join used before init".into()))?;
        let mut timers = ctx.timers()?;
        for i in 0..batch.num_rows() {
            if !times.is_valid(i) {
                continue;
            }
            let end = times.value(i).div_euclid(size) * size + size;
            if end - 1 <= watermark {
                continue;
            }
            let backend = timers.keyed();
            set_current_key_of_row(backend, keys, groups, i);
            backend.set_current_namespace(&end.to_be_bytes());
            self.row.clear();
            encode_row(&own, i, &mut self.row);
            list.add(backend, &self.row)?;
            timers.register_event_time_timer(end - 1)?;
        }
        Ok(())
    }
}

impl Operator for WindowJoin {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let keyed = ctx.keyed.as_mut().ok_or_else(|| OperatorError::Other("window-join needs keyed state".into()))?;
        for (slot, name) in self.rows.iter_mut().zip(STATES) {
            *slot = Some(ListState::register(&mut **keyed, StateDescriptor::new(name).namespaced())?);
        }
        let [a, b] = &mut self.columns;
        restore_kept(ctx.operator_state, COLUMNS_STATE, &mut [(SIDE_NAMES[0], a), (SIDE_NAMES[1], b)])
    }

    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        _out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        self.process(0, batch, ctx)
    }

    fn process_second_batch(
        &mut self,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        _out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        self.process(1, batch, ctx)
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        domain: TimeDomain,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        if domain != TimeDomain::EventTime {
            return Err(OperatorError::Other("window-join sets no processing-time timers".into()));
        }
        let backend = ctx.keyed()?;
        let mut sides: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
        for (rows, list) in sides.iter_mut().zip(&self.rows) {
            let list = list.as_ref().ok_or_else(|| OperatorError::Other("window-join used before init".into()))?;
            list.visit_encoded(backend, &mut |e| {
                rows.push(e.to_vec());
                Ok(())
            })?;
            list.clear(backend)?;
        }
        if sides.iter().any(Vec::is_empty) {
            return Ok(());
        }
        let key = backend.current_key_and_namespace().0.to_vec();
        let (Some(a), Some(b)) = (self.columns[0].stored.clone(), self.columns[1].stored.clone()) else {
            return Err(OperatorError::Other("window-join: stored rows of an input whose columns are unknown".into()));
        };
        if self.plan.is_none() {
            let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
            let extra = [Field::new("window_start", ts.clone(), false), Field::new("window_end", ts, false)];
            self.plan = Some(Plan::new(&self.cfg.join, &a, &b, &extra)?);
        }
        let Some(plan) = &self.plan else { unreachable!("planned above") };
        // Every pair: the first side's rows, each repeated for every row of the second.
        let (n, m) = (sides[0].len(), sides[1].len());
        let decode = |schema: &SchemaRef, rows: &[Vec<u8>], picks: Vec<u32>| -> Result<Vec<ArrayRef>, OperatorError> {
            let mut b = RowsBuilder::new(schema.clone())?;
            for r in rows {
                b.push(r)?;
            }
            let picks = UInt32Array::from(picks);
            b.finish()
                .iter()
                .map(|c| arrow_select::take::take(c.as_ref(), &picks, None))
                .collect::<Result<_, _>>()
                .map_err(|e| OperatorError::Other(e.to_string()))
        };
        let first = decode(&a, &sides[0], (0..n * m).map(|p| (p / m) as u32).collect())?;
        let second = decode(&b, &sides[1], (0..n * m).map(|p| (p % m) as u32).collect())?;
        let rows = n * m;
        let mut columns: Vec<ArrayRef> = vec![Arc::new(BinaryArray::from_iter_values(std::iter::repeat_n(&key, rows)))];
        for (cols, schema) in [(&first, &a), (&second, &b)] {
            columns.extend(
                cols.iter().zip(schema.fields()).filter(|(_, f)| f.name() != EVENT_TIME).map(|(c, _)| c.clone()),
            );
        }
        let (end, size) = (timestamp + 1, self.cfg.size_ms as i64);
        columns.push(Arc::new(TimestampMillisecondArray::from(vec![end - size; rows])));
        columns.push(Arc::new(TimestampMillisecondArray::from(vec![end; rows])));
        columns.push(Arc::new(TimestampMillisecondArray::from(vec![timestamp; rows])));
        let joined = RecordBatch::try_new(plan.joined.clone(), columns)
            .map_err(|e| OperatorError::Other(format!("window-join: building joined rows: {e}")))?;
        let Some(result) = plan.apply(joined)? else { return Ok(()) };
        let result = if self.cfg.distinct { distinct(&result)? } else { result };
        out.emit_batch(result)
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        let [a, b] = &self.columns;
        snapshot_kept(ctx.operator_state, COLUMNS_STATE, &[(SIDE_NAMES[0], a), (SIDE_NAMES[1], b)])
    }
}

/// The batch's distinct rows (by every column), first occurrences in order.
fn distinct(batch: &RecordBatch) -> Result<RecordBatch, OperatorError> {
    let mut seen = HashSet::new();
    let mut keep = Vec::new();
    let mut row = Vec::new();
    for i in 0..batch.num_rows() {
        row.clear();
        encode_row(batch.columns(), i, &mut row);
        if seen.insert(row.clone()) {
            keep.push(i as u32);
        }
    }
    if keep.len() == batch.num_rows() {
        return Ok(batch.clone());
    }
    arrow_select::take::take_record_batch(batch, &UInt32Array::from(keep))
        .map_err(|e| OperatorError::Other(e.to_string()))
}
