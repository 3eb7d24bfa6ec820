//! `window-top`: per key and tumbling window, the rows whose `by` column ranks within the `top` largest (ties
//! share a rank, as SQL's `RANK()`), emitted when the watermark passes the window's end (Flink's window Top-N).
//!
//! State: one value per key and window (namespace: the window's end), the ranked rows largest first, each its
//! `by` value and the row as `api::stored_rows` writes it; a row that cannot rank is not written at all, so the
//! common case — a row below the window's best — costs one read. An event-time timer at `end − 1` per key and
//! window fires it. The input's columns are kept beside the rows in union operator state.

use super::aggregate::{check_column, own_columns, INTEGERS};
use super::declare::*;
use super::relational::{output_schema, ready, times, window, Inputs, Relational};
use crate::api::batch::{key_groups, keys, set_current_key_of_row};
use crate::api::operator::{Collector, OperatorError, ProcessContext};
use crate::api::stored_rows::{encode_row, RowsBuilder};
use crate::window::config::{WindowShape, WindowSpec};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use weir_state::{KeyedStateBackend, StateId, StateKind, StateOptions};

/// Config of the `window-top` kind (Flink's window Top-N with `RANK() <= top` or `ROW_NUMBER() <= top`): per key
/// and tumbling window (`window: { tumbling_ms }` over the rows' event time), the rows whose `by` column (an
/// integer) ranks within the `top` largest — ties sharing a rank, or with `numbering: row_number` exactly `top`
/// rows, of equal values the first to come —; emitted when the watermark passes the window's end, each with the
/// window's `window_start` and `window_end`, at event time `window_end - 1`. Rows late for their window are
/// dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowTopConfig {
    /// Window length, ms.
    pub size_ms: u64,
    /// The column ranked by.
    pub by: String,
    /// Ranks kept.
    pub top: u64,
    /// Rows numbered one by one (`ROW_NUMBER`) rather than ties sharing a rank (`RANK`).
    pub row_number: bool,
}

impl WindowTopConfig {
    /// The config fields it reads: what `weir kinds` lists and what any other field is refused against.
    pub const FIELDS: &'static [ConfigField] = &[
        state_field("window", "the tumbling windows: { tumbling_ms } (required)"),
        state_field("by", "the integer column rows are ranked by, largest first (required)"),
        state_field("top", "ranks kept per key and window (required)"),
        state_field(
            "numbering",
            "rank (ties share a rank, the default) or row_number (top rows, the first to come of equal ones)",
        ),
    ];

    /// Reads and checks a window-top config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, Self::FIELDS)?;
        let window: WindowSpec =
            r.nested("window", "a window, { tumbling_ms: N }")?.ok_or_else(|| field_err("window", "is required"))?;
        let size_ms = match window.shape().map_err(|e| field_err("window", e.to_string()))? {
            WindowShape::Tumbling { size_ms } if window.offset_ms == 0 => size_ms,
            _ => {
                return Err(field_err(
                    "window",
                    "window-top takes a tumbling window without offset: { tumbling_ms: N }",
                ))
            }
        };
        let by = r.string("by")?.ok_or_else(|| field_err("by", "is required: the integer column to rank rows by"))?;
        let top = r.u64("top")?.unwrap_or(1);
        if top == 0 {
            return Err(field_err("top", "must be at least 1"));
        }
        let row_number = match r.string("numbering")?.as_deref() {
            None | Some("rank") => false,
            Some("row_number") => true,
            Some(other) => return Err(field_err("numbering", format!("is rank or row_number, not {other:?}"))),
        };
        Ok(WindowTopConfig { size_ms, by, top, row_number })
    }

    /// The columns it emits over rows of `input`: the input's (but the key and the runtime's), then
    /// `window_start` and `window_end`.
    pub fn output(
        &self,
        input: &[weir_common::job::schema::Column],
    ) -> Result<Vec<weir_common::job::schema::Column>, ConfigFieldError> {
        check_column(input, &self.by, INTEGERS, "by", "the input")?;
        let mut out = own_columns(input);
        out.extend(window::declared_columns());
        weir_common::job::schema::validate_columns(&out)
            .map_err(|e| field_err("window", format!("{e}: rename the input's column (a project before)")))?;
        Ok(out)
    }
}

const STATE: &str = "window-top";
const COLUMNS_STATE: &str = "window-top-columns";

/// The ranked rows of one key and window, as stored: `count: u32`, then per row `value: i64`, `len: u32`, row.
#[derive(Debug, Default)]
struct Ranked {
    rows: Vec<(i64, Vec<u8>)>,
}

impl Ranked {
    fn decode(bytes: &[u8]) -> Result<Ranked, OperatorError> {
        let bad = || OperatorError::UnreadableState("window-top: a stored window is corrupt".into());
        let mut b = bytes;
        let mut take = |n: usize| -> Result<&[u8], OperatorError> {
            if b.len() < n {
                return Err(bad());
            }
            let (h, t) = b.split_at(n);
            b = t;
            Ok(h)
        };
        let count = u32::from_le_bytes(take(4)?.try_into().map_err(|_| bad())?);
        let mut rows = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let v = i64::from_le_bytes(take(8)?.try_into().map_err(|_| bad())?);
            let n = u32::from_le_bytes(take(4)?.try_into().map_err(|_| bad())?) as usize;
            rows.push((v, take(n)?.to_vec()));
        }
        Ok(Ranked { rows })
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&(self.rows.len() as u32).to_le_bytes());
        for (v, row) in &self.rows {
            out.extend_from_slice(&v.to_le_bytes());
            out.extend_from_slice(&(row.len() as u32).to_le_bytes());
            out.extend_from_slice(row);
        }
    }

    /// The rank a row of `v` coming now would have: one more than the rows ranked strictly above it, or, numbered
    /// one by one, above or equal (those came first).
    fn rank_of(rows: impl Iterator<Item = i64>, v: i64, row_number: bool) -> u64 {
        1 + rows.filter(|&w| w > v || (row_number && w == v)).count() as u64
    }

    /// Adds a row (after those of its value) and drops those that no longer rank within `top`: numbered one by
    /// one, all after the `top`-th; else those of a value less than the `top`-th's (the rows are largest first, so
    /// a row ranks within `top` exactly when its value is at least that one).
    fn insert(&mut self, v: i64, row: Vec<u8>, top: u64, row_number: bool) {
        let at = self.rows.iter().position(|(w, _)| *w < v).unwrap_or(self.rows.len());
        self.rows.insert(at, (v, row));
        // A config's `top` is at least 1.
        let top = usize::try_from(top).unwrap_or(usize::MAX).max(1);
        if self.rows.len() <= top {
            return;
        }
        let last = self.rows[top - 1].0;
        let kept =
            if row_number { top } else { self.rows.iter().position(|(w, _)| *w < last).unwrap_or(self.rows.len()) };
        self.rows.truncate(kept);
    }
}

/// The window-top operator.
pub struct WindowTop {
    cfg: WindowTopConfig,
    /// Its input's columns, and the output schema built of them.
    inputs: Inputs<SchemaRef>,
    state: Option<StateId>,
    row: Vec<u8>,
    value: Vec<u8>,
}

impl WindowTop {
    /// A window-top with the given config.
    pub fn new(cfg: WindowTopConfig) -> Self {
        WindowTop {
            cfg,
            inputs: Inputs::one(Self::KIND, COLUMNS_STATE),
            state: None,
            row: Vec::new(),
            value: Vec::new(),
        }
    }
}

impl Relational for WindowTop {
    const KIND: &'static str = "window-top";
    type Built = SchemaRef;

    fn inputs(&mut self) -> &mut Inputs<SchemaRef> {
        &mut self.inputs
    }

    fn register(&mut self, keyed: &mut dyn KeyedStateBackend) -> Result<(), OperatorError> {
        let ns = StateOptions::default().namespaced();
        self.state = Some(keyed.register_state_with_options(STATE, StateKind::Value, &ns)?);
        Ok(())
    }

    fn process(
        &mut self,
        _: usize,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let own = self.inputs.read(0, batch)?;
        let values = crate::api::batch::int_column(batch, &self.cfg.by, "window-top")?;
        let times = times(batch, Self::KIND)?;
        let (keys, groups) = (keys(batch)?, key_groups(batch));
        let state = *ready(&mut self.state, Self::KIND)?;
        let watermark = ctx.current_watermark();
        let size = self.cfg.size_ms as i64;
        let mut timers = ctx.timers()?;
        for (i, v) in values.into_iter().enumerate() {
            let (Some(v), true) = (v, times.is_valid(i)) else { continue };
            // Late for its window, which has fired.
            let Some(end) = window::open_end(times.value(i), size, watermark) else { continue };
            let backend = timers.keyed();
            set_current_key_of_row(backend, keys, groups, i);
            backend.set_current_namespace(&end.to_be_bytes());
            let mut ranked = match backend.get_value(state)? {
                Some(bytes) => {
                    let r = Ranked::decode(bytes)?;
                    if Ranked::rank_of(r.rows.iter().map(|(w, _)| *w), v, self.cfg.row_number) > self.cfg.top {
                        continue;
                    }
                    r
                }
                None => {
                    timers.register_event_time_timer(end - 1)?;
                    Ranked::default()
                }
            };
            self.row.clear();
            encode_row(&own, i, &mut self.row);
            ranked.insert(v, self.row.clone(), self.cfg.top, self.cfg.row_number);
            ranked.encode(&mut self.value);
            timers.keyed().put_value(state, &self.value)?;
        }
        Ok(())
    }

    fn fire(
        &mut self,
        timestamp: i64,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let state = *ready(&mut self.state, Self::KIND)?;
        let backend = ctx.keyed()?;
        let ranked = match backend.get_value(state)? {
            Some(bytes) => Ranked::decode(bytes)?,
            None => return Ok(()),
        };
        backend.delete_value(state)?;
        if ranked.rows.is_empty() {
            return Ok(());
        }
        let kept = self.inputs.stored(0)?;
        let schema = self.inputs.built(|kept| Ok(output_schema(&kept[0], window::fields())))?.clone();
        let mut builder = RowsBuilder::new(kept)?;
        for (_, row) in &ranked.rows {
            builder.push(row)?;
        }
        let ends = vec![timestamp + 1; ranked.rows.len()];
        let mut columns: Vec<ArrayRef> = builder.finish_without_event_time();
        columns.extend(window::columns(&ends, self.cfg.size_ms as i64));
        let batch = RecordBatch::try_new(schema, columns)
            .map_err(|e| OperatorError::Records(format!("window-top: building the output: {e}")))?;
        out.emit_batch(batch)
    }
}

/// The `window-top` kind: the top rows per key and window.
pub struct WindowTopKind;

impl Kind for WindowTopKind {
    type Config = WindowTopConfig;

    fn info(&self) -> KindInfo {
        builtin_info("window-top", Role::Operator, true, "The top rows per key and window", WindowTopConfig::FIELDS)
            .with_states(&[
                ("window-top", StateClass::Value, "the ranked rows per window"),
                ("window-top-columns", StateClass::Union, "the input's columns"),
            ])
            .with_input(vec![key_column()])
            .with_output(OutputSchema::FromConfig)
    }

    fn signature(&self) -> Option<StateSignature> {
        // Per window (namespace: its end), the ranked rows; the input's columns; the windows' timers.
        Some(
            StateSignature::keyed::<Vec<u8>>()
                .value::<Vec<u8>>("window-top")
                .in_namespace::<i64>("window-top")
                .union::<String>("window-top-columns")
                .timers::<Vec<u8>>(),
        )
    }

    fn config(&self, config: &OperatorConfig) -> Result<WindowTopConfig, ConfigFieldError> {
        WindowTopConfig::from_map(config)
    }

    fn output(
        &self,
        config: &WindowTopConfig,
        inputs: &[Vec<Column>],
    ) -> Option<Result<Vec<Column>, ConfigFieldError>> {
        Some(config.output(inputs.first().map(Vec::as_slice).unwrap_or_default()))
    }

    fn build(&self, config: WindowTopConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Operator(Box::new(WindowTop::new(config))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_share_a_rank_and_rows_past_top_are_dropped() {
        let mut r = Ranked::default();
        for (v, tag) in [(5, b'a'), (7, b'b'), (5, b'c'), (7, b'd'), (1, b'e')] {
            r.insert(v, vec![tag], 2, false);
        }
        // Ranks: 7, 7 (rank 1), then 5, 5 (rank 3): only the two 7s rank within 2.
        let kept: Vec<(i64, u8)> = r.rows.iter().map(|(v, row)| (*v, row[0])).collect();
        assert_eq!(kept.iter().map(|k| k.0).collect::<Vec<_>>(), vec![7, 7]);
        let mut bytes = Vec::new();
        r.encode(&mut bytes);
        assert_eq!(Ranked::decode(&bytes).unwrap().rows, r.rows);
        assert!(Ranked::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut one = Ranked::default();
        for v in [3, 9, 9, 4] {
            one.insert(v, vec![], 1, false);
        }
        assert_eq!(one.rows.len(), 2, "the two 9s tie for first");
        assert_eq!(Ranked::rank_of([9, 9].into_iter(), 9, false), 1);
        assert_eq!(Ranked::rank_of([9, 9].into_iter(), 8, false), 3);
    }

    #[test]
    fn numbered_one_by_one_exactly_top_rows_are_kept_the_first_of_equal_ones() {
        let mut r = Ranked::default();
        for (v, tag) in [(5, b'a'), (7, b'b'), (5, b'c'), (7, b'd'), (1, b'e'), (9, b'f')] {
            if Ranked::rank_of(r.rows.iter().map(|(w, _)| *w), v, true) <= 3 {
                r.insert(v, vec![tag], 3, true);
            }
        }
        let kept: Vec<(i64, u8)> = r.rows.iter().map(|(v, row)| (*v, row[0])).collect();
        assert_eq!(kept, vec![(9, b'f'), (7, b'b'), (7, b'd')]);
        // A third 7 would be fourth: it came after the two kept.
        assert_eq!(Ranked::rank_of(r.rows.iter().map(|(w, _)| *w), 7, true), 4);
        assert_eq!(Ranked::rank_of(r.rows.iter().map(|(w, _)| *w), 8, true), 2);
    }
}

/// The operator in the harness: which rows each window keeps and emits, and how open windows restore at another
/// parallelism.
#[cfg(test)]
mod harness_tests {
    use super::*;
    use crate::builtins::declare::config_map as m;
    use crate::builtins::text::lines_of;
    use crate::testing::{keyed_batch, partition, Harness, OperatorHarness};
    use arrow_array::Int64Array;
    use std::sync::Arc;
    use weir_common::job::spec::StateBackend;

    /// Rows of `keys` (also as column `id`) with `price`s and event times.
    fn rows(keys: &[u64], prices: &[i64], times: &[i64]) -> RecordBatch {
        let ids: ArrayRef = Arc::new(Int64Array::from(keys.iter().map(|&k| k as i64).collect::<Vec<_>>()));
        let keys: Vec<[u8; 8]> = keys.iter().map(|k| k.to_be_bytes()).collect();
        keyed_batch(&keys, vec![("id", ids), ("price", Arc::new(Int64Array::from(prices.to_vec())))], times).unwrap()
    }

    fn open(h: Harness) -> OperatorHarness<WindowTop> {
        let cfg = m(&[("window", r#"{"tumbling_ms": 10}"#), ("by", "price"), ("top", "2")]);
        h.open(WindowTop::new(WindowTopConfig::from_map(&cfg).unwrap())).unwrap()
    }

    #[test]
    fn each_window_emits_its_top_rows_when_the_watermark_passes_its_end() {
        for backend in [StateBackend::Heap, StateBackend::Rocksdb] {
            let mut h = open(Harness::keyed(backend));
            h.process(&rows(&[1, 1, 1, 1, 2, 1], &[5, 9, 7, 9, 3, 1], &[1, 2, 3, 4, 5, 12])).unwrap();
            h.watermark(8).unwrap();
            assert!(h.take_output().is_empty(), "[0, 10) is open until 9");
            h.watermark(9).unwrap();
            let first = lines_of(&h.take_output());
            // id, price, window_start, window_end @ window_end − 1: key 1's two 9s (7 ranks third), key 2's 3.
            assert_eq!(first, ["1,9,0,10@9", "1,9,0,10@9", "2,3,0,10@9"], "{backend:?}");
            // Late for [0, 10): dropped.
            h.process(&rows(&[1], &[100], &[5])).unwrap();
            h.end_input().unwrap();
            assert_eq!(lines_of(&h.take_output()), ["1,1,10,20@19"], "{backend:?}");
        }
    }

    /// Windows open at a snapshot of one subtask, restored as two: each fires its own keys' windows, both fire
    /// what one would.
    #[test]
    fn open_windows_restored_at_another_parallelism_fire_in_the_subtask_of_their_key() {
        let keys: Vec<u64> = (0..24).flat_map(|k| [k, k, k]).collect();
        let prices: Vec<i64> = (0..keys.len() as i64).map(|p| p % 5).collect();
        for backend in [StateBackend::Heap, StateBackend::Rocksdb] {
            let mut one = open(Harness::keyed(backend));
            one.process(&rows(&keys, &prices, &vec![3; keys.len()])).unwrap();
            let snapshot = one.snapshot(1).unwrap();
            let later = rows(&keys[..24], &[4; 24], &[4; 24]);
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
