//! `window-join`: the inner join of two inputs keyed alike within tumbling windows (Flink's window join). Each
//! row goes into its side's list for its key and window (namespace: the window's end; one write and one timer
//! per key and window of a batch) and sets an event-time timer at `end − 1`; when it fires, every row of the
//! first side is paired with every row of the second and both lists are cleared. The pairs of all windows a
//! watermark fires are emitted as one batch in `on_watermark`: the joined rows get `window_start`,
//! `window_end` and event time `end − 1`, `where` and `select` apply (`relational::joined`), and `distinct` keeps each
//! output row once per window. The inputs' columns are kept beside the rows in union operator state, as the
//! join does.

use super::declare::*;
use super::join::JoinConfig;
use super::relational::joined::Plan;
use super::relational::{input_lists, ready, times, window, Inputs, Relational};
use crate::api::batch::{key_groups, keys, set_current_key_of_row, EVENT_TIME};
use crate::api::by_key::RowsByKey;
use crate::api::operator::{Collector, OperatorError, ProcessContext};
use crate::api::stored_rows::{encode_row, EncodedRows};
use crate::window::config::{WindowShape, WindowSpec};
use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch, UInt32Array};
use std::collections::HashSet;
use std::sync::Arc;
use weir_state::{KeyedStateBackend, ListState};

/// Config of the `window-join` kind (Flink's window join): the inner join of two inputs keyed alike within each
/// tumbling window (`window: { tumbling_ms }` over the rows' event time): when the watermark passes a window's
/// end, every row of the first input in that window and key is joined with every row of the second; the joined
/// row also has the window's `window_start` and `window_end`, and event time `window_end - 1`; `where` and
/// `select` as for `join`; `distinct: true` emits each distinct output row once per window (a `GROUP BY` of
/// the selected columns). Rows late for their window are dropped.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowJoinConfig {
    /// Window length, ms.
    pub size_ms: u64,
    /// `where` and `select`.
    pub join: JoinConfig,
    /// Each distinct output row once per window.
    pub distinct: bool,
}

impl WindowJoinConfig {
    /// The config fields it reads: what `weir kinds` lists and what any other field is refused against.
    pub const FIELDS: &'static [ConfigField] = &[
        state_field("window", "the tumbling windows: { tumbling_ms } (required)"),
        field("select", "the output columns, as join's (window_start and window_end besides)"),
        field("where", "a condition over the joined row, as join's"),
        field("distinct", "true: each distinct output row once per window (default false)"),
    ];

    /// Reads and checks a window-join config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, Self::FIELDS)?;
        let window: WindowSpec =
            r.nested("window", "a window, { tumbling_ms: N }")?.ok_or_else(|| field_err("window", "is required"))?;
        let size_ms = match window.shape().map_err(|e| field_err("window", e.to_string()))? {
            WindowShape::Tumbling { size_ms } if window.offset_ms == 0 => size_ms,
            _ => {
                return Err(field_err(
                    "window",
                    "window-join takes a tumbling window without offset: { tumbling_ms: N }",
                ))
            }
        };
        let distinct = match r.string("distinct")?.as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(field_err(
                    "distinct",
                    format!("expected true or false, got {}", weir_common::text::echo(other)),
                ))
            }
        };
        Ok(WindowJoinConfig { size_ms, join: JoinConfig::of_fields(map)?, distinct })
    }
}

const COLUMNS_STATE: &str = "window-join-columns";
const STATES: [&str; 2] = ["window-join-first", "window-join-second"];

/// The window-join operator.
pub struct WindowJoin {
    cfg: WindowJoinConfig,
    inputs: Inputs<Plan>,
    /// Each input's rows per window, once registered.
    rows: Option<[ListState<Vec<u8>>; 2]>,
    /// The batch's rows grouped by key and window end, and one group's rows encoded.
    by_key: RowsByKey,
    mine: EncodedRows,
    /// What the timers of one watermark fired, emitted as one batch when they are done.
    fired: Fired,
}

/// The windows fired by the timers of one watermark: both sides' rows of each, and their pairs.
#[derive(Default)]
struct Fired {
    /// Each side's rows of every fired window.
    sides: [EncodedRows; 2],
    /// Each fired window's key and end.
    keys: EncodedRows,
    ends: Vec<i64>,
    /// Each pair: its first side's row, its second side's, its window.
    pairs: [Vec<u32>; 3],
    /// The joined row each output row comes from (reused).
    origin: Vec<u32>,
}

impl WindowJoin {
    /// A window join with the given config.
    pub fn new(cfg: WindowJoinConfig) -> Self {
        WindowJoin {
            cfg,
            inputs: Inputs::two(Self::KIND, COLUMNS_STATE),
            rows: None,
            by_key: RowsByKey::default(),
            mine: EncodedRows::default(),
            fired: Fired::default(),
        }
    }
}

impl Fired {
    fn clear(&mut self) {
        self.sides.iter_mut().for_each(EncodedRows::clear);
        self.keys.clear();
        self.ends.clear();
        self.pairs.iter_mut().for_each(Vec::clear);
    }
}

impl Relational for WindowJoin {
    const KIND: &'static str = "window-join";
    type Built = Plan;

    fn inputs(&mut self) -> &mut Inputs<Plan> {
        &mut self.inputs
    }

    fn register(&mut self, keyed: &mut dyn KeyedStateBackend) -> Result<(), OperatorError> {
        self.rows = Some(input_lists(keyed, STATES, true)?);
        Ok(())
    }

    fn process(
        &mut self,
        s: usize,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let own = self.inputs.read(s, batch)?;
        let times = times(batch, Self::KIND)?;
        let (keys, groups) = (keys(batch)?, key_groups(batch));
        let watermark = ctx.current_watermark();
        let size = self.cfg.size_ms as i64;
        let list = &mut ready(&mut self.rows, Self::KIND)?[s];
        let mut timers = ctx.timers()?;
        // Rows of no window (no time) and of windows already fired (behind the watermark) are dropped; the others
        // go into their key's and window's list, one write and one timer per key and window in the batch.
        self.by_key.group(keys, |i| window::open_end(times.is_valid(i).then(|| times.value(i))?, size, watermark));
        for g in 0..self.by_key.len() {
            let rows = self.by_key.rows(g);
            let end = self.by_key.part(g);
            let backend = timers.keyed();
            set_current_key_of_row(backend, keys, groups, rows[0] as usize);
            backend.set_current_namespace(&end.to_be_bytes());
            self.mine.clear();
            for &i in rows {
                self.mine.push_row(&own, i as usize);
            }
            list.add_all_encoded(backend, self.mine.iter())?;
            timers.register_event_time_timer(end - 1)?;
        }
        Ok(())
    }

    fn fire(
        &mut self,
        timestamp: i64,
        ctx: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let backend = ctx.keyed()?;
        let f = &mut self.fired;
        let from = [f.sides[0].len(), f.sides[1].len()];
        for (rows, list) in f.sides.iter_mut().zip(ready(&mut self.rows, Self::KIND)?.iter()) {
            list.visit_encoded(backend, &mut |e| {
                rows.push(e);
                Ok(())
            })?;
            list.clear(backend)?;
        }
        let to = [f.sides[0].len(), f.sides[1].len()];
        if from[0] == to[0] || from[1] == to[1] {
            // No pair: forget the one side's rows.
            f.sides[0].truncate(from[0]);
            f.sides[1].truncate(from[1]);
            return Ok(());
        }
        let w = f.ends.len() as u32;
        f.keys.push(backend.current_key_and_namespace().0);
        f.ends.push(timestamp + 1);
        // Every pair: the first side's rows, each with every row of the second.
        for i in from[0]..to[0] {
            for j in from[1]..to[1] {
                f.pairs[0].push(i as u32);
                f.pairs[1].push(j as u32);
                f.pairs[2].push(w);
            }
        }
        Ok(())
    }

    /// The joined rows of the windows fired since the last call, as one batch.
    fn flush(&mut self, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        let f = &mut self.fired;
        if f.pairs[0].is_empty() {
            f.clear();
            return Ok(());
        }
        let (a, b) = (self.inputs.stored(0)?, self.inputs.stored(1)?);
        let plan = self.inputs.built(|kept| Plan::new(self.cfg.join.shape(), &kept[0], &kept[1], &window::fields()))?;
        let take = |cols: &[ArrayRef], picks: &[u32]| -> Result<Vec<ArrayRef>, OperatorError> {
            let picks = UInt32Array::from(picks.to_vec());
            cols.iter()
                .map(|c| arrow_select::take::take(c.as_ref(), &picks, None))
                .collect::<Result<_, _>>()
                .map_err(|e| OperatorError::Records(e.to_string()))
        };
        let first = take(&f.sides[0].decode(&a)?, &f.pairs[0])?;
        let second = take(&f.sides[1].decode(&b)?, &f.pairs[1])?;
        let window = &f.pairs[2];
        let key: ArrayRef = Arc::new(BinaryArray::from_iter_values(window.iter().map(|&w| f.keys.get(w as usize))));
        let mut columns = vec![key];
        for (cols, schema) in [(&first, &a), (&second, &b)] {
            columns.extend(
                cols.iter().zip(schema.fields()).filter(|(_, f)| f.name() != EVENT_TIME).map(|(c, _)| c.clone()),
            );
        }
        let ends: Vec<i64> = window.iter().map(|&w| f.ends[w as usize]).collect();
        columns.extend(window::columns(&ends, self.cfg.size_ms as i64));
        let joined = RecordBatch::try_new(plan.joined.clone(), columns)
            .map_err(|e| OperatorError::Records(format!("window-join: building joined rows: {e}")))?;
        let result = plan.apply_tracking(joined, Some(&mut f.origin))?;
        let result = match result {
            Some(r) if self.cfg.distinct => Some(distinct(&r, |row| window[f.origin[row] as usize])?),
            other => other,
        };
        f.clear();
        match result {
            Some(r) => out.emit_batch(r),
            None => Ok(()),
        }
    }
}

/// The batch's distinct rows within each window (by every column; `window_of(row)` tells a row's window),
/// first occurrences in order.
fn distinct(batch: &RecordBatch, window_of: impl Fn(usize) -> u32) -> Result<RecordBatch, OperatorError> {
    // Every row encoded into one buffer first, so the set borrows them instead of owning a copy of each.
    let mut rows = EncodedRows::default();
    let mut row = Vec::new();
    for i in 0..batch.num_rows() {
        row.clear();
        row.extend_from_slice(&window_of(i).to_le_bytes());
        encode_row(batch.columns(), i, &mut row);
        rows.push(&row);
    }
    let mut seen = HashSet::with_capacity(rows.len());
    let keep: Vec<u32> = (0..rows.len()).filter(|&i| seen.insert(rows.get(i))).map(|i| i as u32).collect();
    if keep.len() == batch.num_rows() {
        return Ok(batch.clone());
    }
    arrow_select::take::take_record_batch(batch, &UInt32Array::from(keep))
        .map_err(|e| OperatorError::Records(e.to_string()))
}

/// The `window-join` kind: rows of two keyed inputs joined per window.
pub struct WindowJoinKind;

impl Kind for WindowJoinKind {
    type Config = WindowJoinConfig;

    fn info(&self) -> KindInfo {
        builtin_info(
            "window-join",
            Role::TwoInput,
            true,
            "Rows of two keyed inputs joined per window",
            WindowJoinConfig::FIELDS,
        )
        .with_states(&[
            ("window-join-first", StateClass::List, "rows of the first input per window"),
            ("window-join-second", StateClass::List, "rows of the second input per window"),
            ("window-join-columns", StateClass::Union, "each input's columns"),
        ])
        .with_input(vec![key_column()])
        .with_output(OutputSchema::FromConfig)
    }

    fn signature(&self) -> Option<StateSignature> {
        // Per window (namespace: its end), each input's rows; the inputs' columns; the windows' timers.
        Some(
            StateSignature::keyed::<Vec<u8>>()
                .list::<Vec<u8>>("window-join-first")
                .in_namespace::<i64>("window-join-first")
                .list::<Vec<u8>>("window-join-second")
                .in_namespace::<i64>("window-join-second")
                .union::<String>("window-join-columns")
                .timers::<Vec<u8>>(),
        )
    }

    fn config(&self, config: &OperatorConfig) -> Result<WindowJoinConfig, ConfigFieldError> {
        WindowJoinConfig::from_map(config)
    }

    fn output(
        &self,
        config: &WindowJoinConfig,
        inputs: &[Vec<Column>],
    ) -> Option<Result<Vec<Column>, ConfigFieldError>> {
        let (first, second) = super::join::two(inputs);
        Some(config.join.output_with(first, second, &window::declared_columns()))
    }

    fn build(&self, config: WindowJoinConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Operator(Box::new(WindowJoin::new(config))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{keyed_batch, partition, Harness};
    use arrow_array::cast::AsArray;
    use arrow_array::StringArray;
    use weir_common::job::spec::StateBackend;

    fn side(keys: &[u8], column: &str, names: &[&str], times: &[i64]) -> RecordBatch {
        let keys: Vec<[u8; 1]> = keys.iter().map(|k| [*k]).collect();
        keyed_batch(&keys, vec![(column, Arc::new(StringArray::from(names.to_vec())))], times).unwrap()
    }

    fn join(config: &[(&str, &str)]) -> WindowJoin {
        let map = crate::builtins::declare::config_map(config);
        WindowJoin::new(WindowJoinConfig::from_map(&map).unwrap())
    }

    #[test]
    fn windows_fired_by_one_watermark_are_distinct_each_and_late_rows_are_dropped() {
        let config = [("window", r#"{"tumbling_ms": 10}"#), ("select", "name"), ("distinct", "true")];
        let mut h = Harness::keyed(StateBackend::Rocksdb).open(join(&config)).unwrap();
        let mut got = Vec::new();
        // Keys 1 and 2 meet in window [0, 10), key 1 twice (one output row for the window); key 3's second-side row
        // is in the next window; key 1's rows at 2 and 3 arrive after the watermark passed their window: dropped.
        let steps: Vec<(usize, Option<RecordBatch>, i64)> = vec![
            (0, Some(side(&[1, 2, 3], "name", &["x", "x", "y"], &[1, 2, 3])), i64::MIN),
            (1, Some(side(&[1, 1, 2, 3], "nick", &["a", "b", "c", "d"], &[4, 5, 6, 12])), i64::MIN),
            (0, None, 9),
            (0, Some(side(&[1], "name", &["z"], &[2])), 9),
            (1, Some(side(&[1], "nick", &["w"], &[3])), 9),
            (0, None, i64::MAX),
        ];
        for (s, batch, w) in steps {
            if let Some(batch) = batch {
                match s {
                    0 => h.process(&batch).unwrap(),
                    _ => h.process_second(&batch).unwrap(),
                }
            }
            h.watermark(w).unwrap();
            for batch in h.take_output() {
                let names = batch.column_by_name("name").unwrap().as_string::<i32>();
                got.push((0..batch.num_rows()).map(|i| names.value(i).to_string()).collect::<Vec<_>>());
            }
        }
        assert_eq!(got, vec![vec!["x".to_string(), "x".to_string()]], "one batch: key 1's row once, key 2's once");
    }

    /// `(key, name, nick)` of joined rows, sorted.
    fn joined(batches: Vec<RecordBatch>) -> Vec<(u8, String, String)> {
        let mut out = Vec::new();
        for b in batches {
            let keys = crate::api::batch::keys(&b).unwrap();
            let name = b.column_by_name("name").unwrap().as_string::<i32>();
            let nick = b.column_by_name("nick").unwrap().as_string::<i32>();
            out.extend((0..b.num_rows()).map(|i| (keys.value(i)[0], name.value(i).into(), nick.value(i).into())));
        }
        out.sort();
        out
    }

    /// Rows of both inputs waiting for their window at a snapshot of one subtask, restored as two: each subtask
    /// joins its own keys' windows, rows that come after the restore included, and both emit what one would.
    #[test]
    fn windows_restored_at_another_parallelism_join_in_the_subtask_of_their_key() {
        let config = [("window", r#"{"tumbling_ms": 10}"#)];
        let keys: Vec<u8> = (0..24).collect();
        let names: Vec<String> = keys.iter().map(|k| format!("n{k}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let first = side(&keys, "name", &names, &vec![2; keys.len()]);
        let second = |nick: &str, t: i64| side(&keys, "nick", &vec![nick; keys.len()], &vec![t; keys.len()]);
        for backend in [StateBackend::Heap, StateBackend::Rocksdb] {
            let mut one = Harness::keyed(backend).open(join(&config)).unwrap();
            one.process(&first).unwrap();
            one.process_second(&second("a", 5)).unwrap();
            let snapshot = one.snapshot(1).unwrap();
            let later = second("b", 8);
            one.process_second(&later).unwrap();
            one.watermark(i64::MAX).unwrap();
            let expected = joined(one.take_output());
            assert_eq!(expected.len(), 2 * keys.len());

            let mut union = Vec::new();
            for (i, rows) in partition(&later, 2, 128).unwrap().iter().enumerate() {
                let mut h =
                    Harness::keyed(backend).subtask(i as u32, 2).restore(&snapshot).open(join(&config)).unwrap();
                h.process_second(rows).unwrap();
                h.watermark(i64::MAX).unwrap();
                let got = joined(h.take_output());
                assert_eq!(got.len(), 2 * rows.num_rows(), "subtask {i}: its keys' windows, each key twice");
                union.extend(got);
            }
            union.sort();
            assert_eq!(union, expected, "{backend:?}: two subtasks join what one does");
        }
    }
}
