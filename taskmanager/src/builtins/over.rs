//! `over`: Flink's `OVER` aggregation on event time (`ROWS BETWEEN n PRECEDING AND CURRENT ROW`). Every row
//! waits in keyed state, in a list per key and event time (namespace: the time), with an event-time timer at
//! that time; when the watermark passes it, the rows of that time go out in order (arrival, or `ties_by`), each
//! with the aggregates over it and the rows of its key before it. What the next row needs of those rows — the
//! last `n` rows' aggregated values, or running accumulators for an unbounded frame — is one value per key.
//!
//! Rows fired by the timers of one watermark are gathered and emitted as one batch in `on_watermark`, which
//! runs after the timers and before the watermark goes on.

use super::aggregate::{aggregate_columns, check_column, own_columns, parse_aggregates, INTEGERS};
use super::declare::*;
use super::relational::{output_schema, ready, times, Inputs, Relational, EMIT_AT};
use crate::api::batch::int_column;
use crate::api::batch::{key_groups, keys, set_current_key_of_row, OP};
use crate::api::operator::{Collector, OperatorError, ProcessContext};
use crate::api::stored_rows::{encode_row, RowsBuilder};
use crate::builtins::aggregate::AggregateFn;
use crate::builtins::aggregate::{accumulate, finish};
use arrow_array::builder::{Int64Builder, TimestampMillisecondBuilder};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, SchemaRef};
use std::collections::VecDeque;
use std::sync::Arc;
use weir_state::{KeyedStateBackend, ListState, StateDescriptor, StateId, StateKind};

/// Config of the `over` kind (Flink's `OVER` aggregation on event time, `ROWS BETWEEN n PRECEDING AND CURRENT
/// ROW`): every input row, once the watermark passes its event time, with `aggregates` (as `aggregate`'s) over
/// it and the `rows_preceding` rows of its key before it in event-time order (`unbounded`: all of them).
/// Rows of equal event time go in arrival order, as in Flink, or in the order of the integer column `ties_by`
/// (arrival order across parallel inputs is not repeatable). Rows late on arrival (at or behind the watermark)
/// are dropped, as Flink does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverConfig {
    /// The aggregates: function, input column (none for `COUNT(*)`), output name.
    pub aggregates: Vec<(AggregateFn, Option<String>, String)>,
    /// Rows before the current one in the frame (`None`: unbounded).
    pub rows_preceding: Option<u64>,
    /// The integer column that orders rows of equal event time.
    pub ties_by: Option<String>,
}

impl OverConfig {
    /// The config fields it reads: what `weir kinds` lists and what any other field is refused against.
    pub const FIELDS: &'static [ConfigField] = &[
        state_field("aggregates", "the aggregates over each row's frame, as aggregate's (required)"),
        state_field("rows_preceding", "rows of the key before the current one in the frame (default: unbounded)"),
        field("ties_by", "the integer column that orders rows of equal event time (default: arrival order)"),
    ];

    /// Reads and checks an over config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, Self::FIELDS)?;
        let aggregates = parse_aggregates(r.string("aggregates")?)?;
        let rows_preceding = match r.string("rows_preceding")?.as_deref().map(str::trim) {
            None => {
                return Err(field_err("rows_preceding", "is required: the rows before the current one, or unbounded"))
            }
            Some(t) if t.eq_ignore_ascii_case("unbounded") => None,
            Some(_) => r.u64("rows_preceding")?,
        };
        Ok(OverConfig { aggregates, rows_preceding, ties_by: r.string("ties_by")? })
    }

    /// The columns it emits over rows of `input`: the input's (but the key and the runtime's), then the
    /// aggregates.
    pub fn output(
        &self,
        input: &[weir_common::job::schema::Column],
    ) -> Result<Vec<weir_common::job::schema::Column>, ConfigFieldError> {
        if let Some(t) = &self.ties_by {
            check_column(input, t, INTEGERS, "ties_by", "the input")?;
        }
        let mut out = own_columns(input);
        out.extend(aggregate_columns(&self.aggregates, input)?);
        weir_common::job::schema::validate_columns(&out).map_err(|e| field_err("aggregates", e.to_string()))?;
        Ok(out)
    }
}

const ROWS: &str = "over-rows";
const FRAME: &str = "over-frame";
const COLUMNS_STATE: &str = "over-columns";

/// What the aggregates of a key's next row need of the rows before it.
#[derive(Clone, Debug, PartialEq)]
enum Frame {
    /// The last rows' aggregated values, oldest first, one value per aggregate and row (at most the frame's
    /// preceding rows).
    Bounded(VecDeque<Option<i64>>),
    /// Per aggregate its running accumulator, as `aggregate`'s (`aggregate::accumulate`).
    Unbounded(Vec<(i64, i64)>),
}

impl Frame {
    fn empty(preceding: Option<u64>, n: usize) -> Frame {
        match preceding {
            Some(_) => Frame::Bounded(VecDeque::new()),
            None => Frame::Unbounded(vec![(0, 0); n]),
        }
    }

    /// Makes `self` the frame of a key without rows, reusing its buffers.
    fn reset(&mut self, n: usize) {
        match self {
            Frame::Bounded(rows) => rows.clear(),
            Frame::Unbounded(acc) => {
                acc.clear();
                acc.resize(n, (0, 0));
            }
        }
    }

    /// Adds a row's aggregated values and writes into `out` the aggregates over the frame that ends with it.
    fn push(
        &mut self,
        fns: &[AggregateFn],
        preceding: Option<u64>,
        values: &[Option<i64>],
        out: &mut Vec<Option<i64>>,
    ) {
        let n = fns.len();
        out.clear();
        match self {
            Frame::Bounded(rows) => {
                rows.extend(values);
                let keep = preceding.unwrap_or(0).saturating_add(1) as usize * n;
                while rows.len() > keep {
                    rows.pop_front();
                }
                for (j, f) in fns.iter().enumerate() {
                    let mut acc = (0, 0);
                    for x in rows.iter().skip(j).step_by(n.max(1)) {
                        // Adding never fails: only taking a value back out of MIN or MAX does.
                        let _ = accumulate(*f, &mut acc, *x, 1);
                    }
                    out.push(finish(*f, acc));
                }
                // Only the preceding rows are needed by the next row.
                while rows.len() + n > keep {
                    rows.pop_front();
                }
            }
            Frame::Unbounded(acc) => {
                for ((f, acc), x) in fns.iter().zip(acc.iter_mut()).zip(values) {
                    let _ = accumulate(*f, acc, *x, 1);
                    out.push(finish(*f, *acc));
                }
            }
        }
    }

    /// As stored: a tag byte (0 bounded, 1 unbounded), then the bounded rows (`u32` count, each value a
    /// presence byte and a little-endian `i64`) or the accumulators' pairs.
    fn encode(&self, n: usize, out: &mut Vec<u8>) {
        out.clear();
        match self {
            Frame::Bounded(rows) => {
                out.push(0);
                out.extend_from_slice(&((rows.len() / n.max(1)) as u32).to_le_bytes());
                for v in rows {
                    encode_value(*v, out);
                }
            }
            Frame::Unbounded(acc) => {
                out.push(1);
                for (a, b) in acc {
                    out.extend_from_slice(&a.to_le_bytes());
                    out.extend_from_slice(&b.to_le_bytes());
                }
            }
        }
    }

    /// Reads a stored frame of `n` aggregates into `self`, reusing its buffers.
    fn decode_into(&mut self, bytes: &[u8], n: usize) -> Result<(), OperatorError> {
        let bad =
            || OperatorError::UnreadableState("over: a stored frame is corrupt (or of another frame's config)".into());
        let mut b = bytes.get(1..).ok_or_else(bad)?;
        match (bytes[0], &mut *self) {
            (0, Frame::Bounded(rows)) => {
                let count = u32::from_le_bytes(take::<4>(&mut b).ok_or_else(bad)?) as usize;
                rows.clear();
                for _ in 0..count * n {
                    rows.push_back(decode_value(&mut b).ok_or_else(bad)?);
                }
            }
            (1, Frame::Unbounded(acc)) => {
                acc.clear();
                for _ in 0..n {
                    let a = i64::from_le_bytes(take::<8>(&mut b).ok_or_else(bad)?);
                    acc.push((a, i64::from_le_bytes(take::<8>(&mut b).ok_or_else(bad)?)));
                }
            }
            _ => return Err(bad()),
        }
        if !b.is_empty() {
            return Err(bad());
        }
        Ok(())
    }
}

fn encode_value(v: Option<i64>, out: &mut Vec<u8>) {
    match v {
        Some(x) => {
            out.push(1);
            out.extend_from_slice(&x.to_le_bytes());
        }
        None => out.push(0),
    }
}

fn take<const N: usize>(b: &mut &[u8]) -> Option<[u8; N]> {
    let (head, rest) = b.split_at_checked(N)?;
    *b = rest;
    head.try_into().ok()
}

fn decode_value(b: &mut &[u8]) -> Option<Option<i64>> {
    match take::<1>(b)?[0] {
        0 => Some(None),
        _ => Some(Some(i64::from_le_bytes(take::<8>(b)?))),
    }
}

/// Rows fired and not yet emitted.
struct Fired {
    rows: RowsBuilder,
    values: Vec<Int64Builder>,
    times: TimestampMillisecondBuilder,
    len: usize,
}

/// The over operator.
pub struct Over {
    cfg: OverConfig,
    fns: Vec<AggregateFn>,
    /// Its input's columns, and the output schema built of them.
    inputs: Inputs<SchemaRef>,
    /// The rows waiting for the watermark and each key's frame, once registered.
    states: Option<(ListState<Vec<u8>>, StateId)>,
    row: Vec<u8>,
    value: Vec<u8>,
    fired: Option<Fired>,
    /// A timer's rows, read from state: their bytes one after another, and each one's tie and span.
    waiting: Vec<u8>,
    spans: Vec<(i64, usize, usize)>,
    /// The key's frame, a row's aggregated values and its aggregates (buffers reused from row to row).
    frame_buf: Option<Frame>,
    values: Vec<Option<i64>>,
    result: Vec<Option<i64>>,
}

impl Over {
    /// An over aggregation with the given config.
    pub fn new(cfg: OverConfig) -> Self {
        let fns = cfg.aggregates.iter().map(|a| a.0).collect();
        Over {
            cfg,
            fns,
            inputs: Inputs::one(Self::KIND, COLUMNS_STATE),
            states: None,
            row: Vec::new(),
            value: Vec::new(),
            fired: None,
            waiting: Vec::new(),
            spans: Vec::new(),
            frame_buf: None,
            values: Vec::new(),
            result: Vec::new(),
        }
    }

    fn fired(&mut self) -> Result<&mut Fired, OperatorError> {
        if self.fired.is_none() {
            self.fired = Some(Fired {
                rows: RowsBuilder::new(self.inputs.stored(0)?)?,
                values: self.fns.iter().map(|_| Int64Builder::new()).collect(),
                times: TimestampMillisecondBuilder::new(),
                len: 0,
            });
        }
        self.fired.as_mut().ok_or_else(|| OperatorError::Misuse("over: no output".into()))
    }
}

impl Relational for Over {
    const KIND: &'static str = "over";
    type Built = SchemaRef;

    fn inputs(&mut self) -> &mut Inputs<SchemaRef> {
        &mut self.inputs
    }

    fn register(&mut self, keyed: &mut dyn KeyedStateBackend) -> Result<(), OperatorError> {
        let rows = ListState::register(&mut *keyed, StateDescriptor::new(ROWS).namespaced())?;
        self.states = Some((rows, keyed.register_state(FRAME, StateKind::Value)?));
        Ok(())
    }

    fn process(
        &mut self,
        _: usize,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        if batch.column_by_name(OP).is_some() {
            return Err(OperatorError::Records(
                "over takes rows that are only added; its input is an updating result (it has changes)".into(),
            ));
        }
        let own = self.inputs.read(0, batch)?;
        let values: Vec<Vec<Option<i64>>> = self
            .cfg
            .aggregates
            .iter()
            .map(|(_, c, _)| match c {
                Some(c) => int_column(batch, c, "over"),
                None => Ok(vec![None; batch.num_rows()]),
            })
            .collect::<Result<_, _>>()?;
        let ties = self.cfg.ties_by.as_deref().map(|c| int_column(batch, c, "over")).transpose()?;
        let times = times(batch, Self::KIND)?;
        let (keys, groups) = (keys(batch)?, key_groups(batch));
        let (list, _) = ready(&mut self.states, Self::KIND)?;
        let watermark = ctx.current_watermark();
        let mut timers = ctx.timers()?;
        for i in 0..batch.num_rows() {
            if !times.is_valid(i) || times.value(i) <= watermark {
                // Without a time a row has no place in the order; at or behind the watermark it is late.
                continue;
            }
            let t = times.value(i);
            let backend = timers.keyed();
            set_current_key_of_row(backend, keys, groups, i);
            backend.set_current_namespace(&t.to_be_bytes());
            self.row.clear();
            self.row.extend_from_slice(&ties.as_ref().and_then(|v| v[i]).unwrap_or(i64::MIN).to_le_bytes());
            for v in &values {
                encode_value(v[i], &mut self.row);
            }
            encode_row(&own, i, &mut self.row);
            list.add(backend, &self.row)?;
            timers.register_event_time_timer(t)?;
        }
        Ok(())
    }

    fn fire(
        &mut self,
        timestamp: i64,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let (list, frame_state) = ready(&mut self.states, Self::KIND)?;
        let frame_state = *frame_state;
        let backend = ctx.keyed()?;
        let (waiting, spans) = (&mut self.waiting, &mut self.spans);
        waiting.clear();
        spans.clear();
        list.visit_encoded(backend, &mut |e| {
            let tie = e.get(..8).and_then(|b| b.try_into().ok()).map_or(i64::MIN, i64::from_le_bytes);
            spans.push((tie, waiting.len(), waiting.len() + e.len()));
            waiting.extend_from_slice(e);
            Ok(())
        })?;
        list.clear(backend)?;
        if spans.is_empty() {
            return Ok(());
        }
        if self.cfg.ties_by.is_some() {
            // Stable: equal ties keep their arrival order.
            spans.sort_by_key(|&(tie, _, _)| tie);
        }
        let n = self.fns.len();
        let frame = self.frame_buf.get_or_insert_with(|| Frame::empty(self.cfg.rows_preceding, n));
        match backend.get_value(frame_state)? {
            Some(bytes) => frame.decode_into(bytes, n)?,
            None => frame.reset(n),
        }
        self.fired()?;
        let Over { cfg, fns, fired: Some(f), frame_buf: Some(frame), waiting, spans, values, result, value, .. } = self
        else {
            unreachable!("made above")
        };
        let corrupt = || OperatorError::UnreadableState("over: a waiting row is corrupt".into());
        for &(_, start, end) in spans.iter() {
            let mut b = waiting.get(start + 8..end).ok_or_else(corrupt)?;
            values.clear();
            for _ in 0..n {
                values.push(decode_value(&mut b).ok_or_else(corrupt)?);
            }
            frame.push(fns, cfg.rows_preceding, values, result);
            f.rows.push(b)?;
            for (builder, v) in f.values.iter_mut().zip(result.iter()) {
                builder.append_option(*v);
            }
            f.times.append_value(timestamp);
            f.len += 1;
        }
        frame.encode(n, value);
        ctx.keyed()?.put_value(frame_state, value)?;
        if self.fired.as_ref().is_some_and(|f| f.len >= EMIT_AT) {
            self.flush(out)?;
        }
        Ok(())
    }

    fn flush(&mut self, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        if self.fired.as_ref().is_none_or(|f| f.len == 0) {
            return Ok(());
        }
        let aggregates = &self.cfg.aggregates;
        let fields = aggregates.iter().map(|(f, _, name)| Field::new(name, DataType::Int64, *f != AggregateFn::Count));
        let schema = self.inputs.built(|kept| Ok(output_schema(&kept[0], fields)))?.clone();
        let f = self.fired()?;
        let mut columns = f.rows.finish_without_event_time();
        columns.extend(f.values.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        columns.push(Arc::new(f.times.finish()));
        f.len = 0;
        let batch = RecordBatch::try_new(schema, columns)
            .map_err(|e| OperatorError::Records(format!("over: building the output: {e}")))?;
        out.emit_batch(batch)
    }
}

/// The `over` kind: aggregates over a frame of each row's preceding rows of its key (SQL's `OVER`).
pub struct OverKind;

impl Kind for OverKind {
    type Config = OverConfig;

    fn info(&self) -> KindInfo {
        builtin_info(
            "over",
            Role::Operator,
            true,
            "Aggregates over a frame of each row's preceding rows of its key (SQL's `OVER`)",
            OverConfig::FIELDS,
        )
        .with_states(&[
            ("over-rows", StateClass::List, "rows waiting for the watermark, per event time"),
            ("over-frame", StateClass::Value, "the key's preceding rows or running accumulators"),
            ("over-columns", StateClass::Union, "the input's columns"),
        ])
        .with_input(vec![key_column()])
        .with_output(OutputSchema::FromConfig)
    }

    fn signature(&self) -> Option<StateSignature> {
        // Per key and event time (namespace), the rows waiting for the watermark; per key, the preceding rows'
        // values or the running accumulators; the input's columns; the rows' timers.
        Some(
            StateSignature::keyed::<Vec<u8>>()
                .list::<Vec<u8>>("over-rows")
                .in_namespace::<i64>("over-rows")
                .value::<Vec<u8>>("over-frame")
                .union::<String>("over-columns")
                .timers::<Vec<u8>>(),
        )
    }

    fn config(&self, config: &OperatorConfig) -> Result<OverConfig, ConfigFieldError> {
        OverConfig::from_map(config)
    }

    fn output(&self, config: &OverConfig, inputs: &[Vec<Column>]) -> Option<Result<Vec<Column>, ConfigFieldError>> {
        Some(config.output(inputs.first().map(Vec::as_slice).unwrap_or_default()))
    }

    fn build(&self, config: OverConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Operator(Box::new(Over::new(config))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Frame {
        fn push_row(
            &mut self,
            fns: &[AggregateFn],
            preceding: Option<u64>,
            values: &[Option<i64>],
        ) -> Vec<Option<i64>> {
            let mut out = Vec::new();
            self.push(fns, preceding, values, &mut out);
            out
        }

        fn decode(bytes: &[u8], n: usize, preceding: Option<u64>) -> Result<Frame, OperatorError> {
            let mut f = Frame::empty(preceding, n);
            f.decode_into(bytes, n)?;
            Ok(f)
        }
    }

    #[test]
    fn a_bounded_frame_keeps_the_preceding_rows_and_an_unbounded_one_runs() {
        let fns = [AggregateFn::Avg, AggregateFn::Count, AggregateFn::Max, AggregateFn::Sum];
        let mut f = Frame::empty(Some(2), 4);
        let mut got = Vec::new();
        for x in [Some(10), None, Some(20), Some(7), Some(1)] {
            got.push(f.push_row(&fns, Some(2), &[x, x, x, x]));
        }
        // Frames: [10], [10, -], [10, -, 20], [-, 20, 7], [20, 7, 1].
        assert_eq!(got[0], vec![Some(10), Some(1), Some(10), Some(10)]);
        assert_eq!(got[1], vec![Some(10), Some(2), Some(10), Some(10)]);
        assert_eq!(got[2], vec![Some(15), Some(3), Some(20), Some(30)]);
        assert_eq!(got[3], vec![Some(13), Some(3), Some(20), Some(27)], "AVG rounds toward zero");
        assert_eq!(got[4], vec![Some(9), Some(3), Some(20), Some(28)]);
        let mut bytes = Vec::new();
        f.encode(4, &mut bytes);
        assert_eq!(Frame::decode(&bytes, 4, Some(2)).unwrap(), f);
        assert!(matches!(&f, Frame::Bounded(rows) if rows.len() == 2 * 4), "only the preceding rows are kept");
        assert!(Frame::decode(&bytes[..bytes.len() - 1], 4, Some(2)).is_err());

        let mut u = Frame::empty(None, 4);
        for x in [Some(4), None, Some(9)] {
            got.push(u.push_row(&fns, None, &[x, x, x, x]));
        }
        assert_eq!(got.last().unwrap(), &vec![Some(6), Some(3), Some(9), Some(13)]);
        u.encode(4, &mut bytes);
        assert_eq!(Frame::decode(&bytes, 4, None).unwrap(), u);
        let mut none = Frame::empty(Some(0), 1);
        assert_eq!(none.push_row(&[AggregateFn::Min], Some(0), &[None]), vec![None]);
        assert_eq!(none.push_row(&[AggregateFn::Min], Some(0), &[Some(3)]), vec![Some(3)]);
    }
}

/// The operator in the harness: when rows go out and with which aggregates, and how waiting rows and frames
/// restore at another parallelism.
#[cfg(test)]
mod harness_tests {
    use super::*;
    use crate::builtins::declare::config_map as m;
    use crate::builtins::text::lines_of;
    use crate::testing::{keyed_batch, partition, Harness, OperatorHarness};
    use arrow_array::Int64Array;
    use weir_common::job::spec::StateBackend;

    /// Rows of `keys` (also as column `id`) with `value`s and event times.
    fn rows(keys: &[u64], values: &[i64], times: &[i64]) -> RecordBatch {
        let ids: ArrayRef = Arc::new(Int64Array::from(keys.iter().map(|&k| k as i64).collect::<Vec<_>>()));
        let keys: Vec<[u8; 8]> = keys.iter().map(|k| k.to_be_bytes()).collect();
        keyed_batch(&keys, vec![("id", ids), ("value", Arc::new(Int64Array::from(values.to_vec())))], times).unwrap()
    }

    fn open(h: Harness) -> OperatorHarness<Over> {
        let cfg = m(&[("aggregates", "SUM(value) AS s, COUNT(*) AS n"), ("rows_preceding", "1")]);
        h.open(Over::new(OverConfig::from_map(&cfg).unwrap())).unwrap()
    }

    #[test]
    fn each_row_goes_out_once_the_watermark_passes_it_with_the_aggregates_of_its_frame() {
        for backend in [StateBackend::Heap, StateBackend::Rocksdb] {
            let mut h = open(Harness::keyed(backend));
            h.process(&rows(&[1, 1, 2, 1], &[1, 2, 3, 4], &[5, 3, 4, 5])).unwrap();
            assert!(h.take_output().is_empty(), "rows wait for the watermark");
            h.watermark(4).unwrap();
            assert_eq!(lines_of(&h.take_output()), ["1,2,2,1@3", "2,3,3,1@4"], "{backend:?}");
            // Key 1's rows at 5, in arrival order, each over itself and the row before it.
            h.watermark(10).unwrap();
            assert_eq!(lines_of(&h.take_output()), ["1,1,3,2@5", "1,4,5,2@5"], "{backend:?}");
            // At or behind the watermark: late, dropped.
            h.process(&rows(&[1, 2], &[9, 9], &[10, 7])).unwrap();
            h.process(&rows(&[2], &[6], &[11])).unwrap();
            h.end_input().unwrap();
            assert_eq!(lines_of(&h.take_output()), ["2,6,9,2@11"], "{backend:?}: over key 2's row at 4 and itself");
        }
    }

    /// Rows waiting for the watermark, and the frames of rows gone out, restored as two subtasks: each emits its
    /// own keys' rows with the aggregates one subtask would.
    #[test]
    fn waiting_rows_and_frames_restored_at_another_parallelism_stay_with_their_keys() {
        let keys: Vec<u64> = (0..24).flat_map(|k| [k, k]).collect();
        let values: Vec<i64> = (0..keys.len() as i64).collect();
        let times: Vec<i64> = (0..keys.len()).map(|i| 5 + (i % 2) as i64).collect();
        for backend in [StateBackend::Heap, StateBackend::Rocksdb] {
            let mut one = open(Harness::keyed(backend));
            one.process(&rows(&keys, &values, &times)).unwrap();
            one.watermark(5).unwrap();
            assert_eq!(one.take_output().iter().map(RecordBatch::num_rows).sum::<usize>(), 24);
            let snapshot = one.snapshot(1).unwrap();
            let later = rows(&keys[..24], &values[..24], &[8; 24]);
            one.process(&later).unwrap();
            one.end_input().unwrap();
            let expected = lines_of(&one.take_output());
            let mut union = Vec::new();
            for (i, part) in partition(&later, 2, 128).unwrap().iter().enumerate() {
                let mut h = open(Harness::keyed(backend).subtask(i as u32, 2).restore(&snapshot));
                h.process(part).unwrap();
                h.end_input().unwrap();
                union.extend(lines_of(&h.take_output()));
            }
            union.sort();
            assert_eq!(union, expected, "{backend:?}");
        }
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::builtins::declare::config_map as m;

    #[test]
    fn over_and_winning_bids_configs_name_the_field_at_fault() {
        use crate::builtins::winning_bids::WinningBidsConfig;
        use weir_common::job::schema::Column;
        let input = vec![
            Column::new("key", "binary", false),
            Column::new("auction", "int64", true),
            Column::new("price", "int64", true),
            Column::new("name", "utf8", true),
        ];
        let c = OverConfig::from_map(&m(&[
            ("aggregates", "AVG(price) AS avg_price, COUNT(*) AS n"),
            ("rows_preceding", "9"),
            ("ties_by", "auction"),
        ]))
        .unwrap();
        assert_eq!((c.rows_preceding, c.ties_by.as_deref()), (Some(9), Some("auction")));
        let names: Vec<String> = c.output(&input).unwrap().into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["auction", "price", "name", "avg_price", "n"]);
        let unbounded = m(&[("aggregates", "SUM(price) AS s"), ("rows_preceding", "UNBOUNDED")]);
        assert_eq!(OverConfig::from_map(&unbounded).unwrap().rows_preceding, None);
        for (pairs, field) in [
            (vec![("aggregates", "SUM(price) AS s")], "rows_preceding"),
            (vec![("aggregates", "SUM(price) AS s"), ("rows_preceding", "-1")], "rows_preceding"),
            (vec![("rows_preceding", "3")], "aggregates"),
            (vec![("aggregates", "MEDIAN(price) AS s"), ("rows_preceding", "3")], "aggregates"),
        ] {
            assert_eq!(OverConfig::from_map(&m(&pairs)).unwrap_err().field, field, "{pairs:?}");
        }
        let bad_ties = OverConfig::from_map(&m(&[
            ("aggregates", "SUM(price) AS s"),
            ("rows_preceding", "1"),
            ("ties_by", "name"),
        ]));
        assert_eq!(bad_ties.unwrap().output(&input).unwrap_err().field, "ties_by");
        let not_int = OverConfig::from_map(&m(&[("aggregates", "SUM(name) AS s"), ("rows_preceding", "1")]));
        assert_eq!(not_int.unwrap().output(&input).unwrap_err().field, "aggregates");

        let auctions = vec![Column::new("seller", "int64", true), Column::new("expires", "timestamp_ms", true)];
        let bids = vec![Column::new("price", "int64", true), Column::new("bidder", "int64", true)];
        let w = WinningBidsConfig::from_map(&m(&[("closes", "expires"), ("by", "price")])).unwrap();
        let names: Vec<String> = w.output(&auctions, &bids).unwrap().into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["key", "seller", "expires", "price", "bidder"]);
        assert_eq!(WinningBidsConfig::from_map(&m(&[("by", "price")])).unwrap_err().field, "closes");
        let e = WinningBidsConfig::from_map(&m(&[("closes", "seller"), ("by", "expires")])).unwrap();
        assert_eq!(e.output(&auctions, &bids).unwrap_err().field, "by");
        let e = WinningBidsConfig::from_map(&m(&[("closes", "price"), ("by", "price")])).unwrap();
        assert_eq!(e.output(&auctions, &bids).unwrap_err().field, "closes");
        assert_eq!(OverConfig::from_map(&m(&[("aggregates", "SUM(x) AS s")])).unwrap_err().field, "rows_preceding");
    }
}
