//! `join`: the inner join of two inputs keyed alike, with every row of each side in keyed state (Flink's regular
//! join of two append-only inputs). A row is stored in its side's list for its key, then joined with the other
//! side's rows of that key; so each pair is emitted once, by whichever of its rows arrived second. A joined row
//! is the key, the first input's columns, the second's, and the later of the two event times; `where` and
//! `select` (`crate::builtins::join::JoinConfig`) then apply to it.
//!
//! Rows are stored with `api::stored_rows` (no schema inside); each side's columns are kept beside them in
//! union operator state, so a restored subtask reads the other side's rows before that side sends a batch, and
//! a job whose inputs now have other columns is refused with both column lists instead of misreading rows.

use super::declare::*;
use super::relational::joined::{Pairs, Plan, Shape};
use super::relational::{input_lists, ready, Inputs, Relational};
use crate::api::batch::{key_groups, keys, set_current_key_of_row};
use crate::api::by_key::RowsByKey;
use crate::api::operator::{Collector, OperatorError, ProcessContext};
use crate::api::stored_rows::EncodedRows;
use arrow_array::RecordBatch;
use weir_sql::expr::{parse_expr, parse_select, SelectItem, SqlExpr};
use weir_state::{KeyedStateBackend, ListState};

/// Config of the `join` kind: an inner join of two inputs keyed alike (each row's `key`), every row of each side
/// kept in keyed state for ever (Flink's regular join), each new row joined with the other side's rows of its
/// key. `where`: a condition over the joined row, whose columns are the key (`key`) and both sides' columns
/// (their names must differ); `select`: the output columns (default: `key`, then the first side's columns,
/// then the second's). A joined row's event time is the later of the two.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinConfig {
    /// The output columns (`None`: all).
    pub select: Option<Vec<SelectItem>>,
    /// Joined rows where this is not true are dropped.
    pub condition: Option<SqlExpr>,
}

impl JoinConfig {
    /// What the join makes of its pairs.
    pub(crate) fn shape(&self) -> Shape<'_> {
        Shape { select: self.select.as_deref(), condition: self.condition.as_ref() }
    }

    /// The config fields it reads: what `weir kinds` lists and what any other field is refused against.
    pub const FIELDS: &'static [ConfigField] = &[
        field(
            "select",
            "the output columns: expr [AS name], … (default: key, the first input's columns, the second's)",
        ),
        field("where", "a condition over the joined row: joined rows where it is not true are dropped"),
    ];

    /// Reads and parses a join config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, Self::FIELDS)?;
        let select = match r.string("select")? {
            None => None,
            Some(t) => Some(parse_select(&t).map_err(|e| field_err("select", e.to_string()))?),
        };
        let condition = match r.string("where")? {
            None => None,
            Some(t) => Some(parse_expr(&t).map_err(|e| field_err("where", e.to_string()))?),
        };
        Ok(JoinConfig { select, condition })
    }

    /// The `select` and `where` of a kind's config that has other fields too (checked by that kind).
    pub fn of_fields(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let rest: OperatorConfig = map
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "select" | "where"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Self::from_map(&rest)
    }

    /// The columns of a joined row: the key, then each side's own columns (the runtime's `_` columns and the
    /// sides' `key` aside), or the field at fault when a name is on both sides.
    pub fn joined_columns(
        first: &[weir_common::job::schema::Column],
        second: &[weir_common::job::schema::Column],
    ) -> Result<Vec<weir_common::job::schema::Column>, ConfigFieldError> {
        let own = |c: &&weir_common::job::schema::Column| c.name != "key" && !c.name.starts_with('_');
        let mut out = vec![weir_common::job::schema::key_column()];
        for c in first.iter().filter(own) {
            if second.iter().any(|d| d.name == c.name) {
                return Err(field_err(
                    "inputs",
                    format!(
                        "both inputs have a column {:?}: rename it on one side (a project before the join)",
                        c.name
                    ),
                ));
            }
            out.push(c.clone());
        }
        out.extend(second.iter().filter(own).cloned());
        Ok(out)
    }

    /// The columns it emits over inputs of `first` and `second`, or the field at fault.
    pub fn output(
        &self,
        first: &[weir_common::job::schema::Column],
        second: &[weir_common::job::schema::Column],
    ) -> Result<Vec<weir_common::job::schema::Column>, ConfigFieldError> {
        self.output_with(first, second, &[])
    }

    /// [`JoinConfig::output`] with `extra` columns after both sides' (a window's start and end).
    pub fn output_with(
        &self,
        first: &[weir_common::job::schema::Column],
        second: &[weir_common::job::schema::Column],
        extra: &[weir_common::job::schema::Column],
    ) -> Result<Vec<weir_common::job::schema::Column>, ConfigFieldError> {
        let mut second = second.to_vec();
        second.extend(extra.iter().cloned());
        let joined = Self::joined_columns(first, &second)?;
        if let Some(c) = &self.condition {
            weir_sql::expr::check_condition(c, &joined).map_err(|e| field_err("where", e.to_string()))?;
        }
        let out = match &self.select {
            None => joined,
            Some(items) => select_output(items, &joined, false)?,
        };
        weir_common::job::schema::validate_columns(&out).map_err(|e| field_err("select", e.to_string()))?;
        Ok(out)
    }
}

/// The columns a select list makes over rows of `input` (`*`: every column but the runtime's, and but `key`
/// when `drop_key`).
pub(crate) fn select_output(
    items: &[SelectItem],
    input: &[weir_common::job::schema::Column],
    drop_key: bool,
) -> Result<Vec<weir_common::job::schema::Column>, ConfigFieldError> {
    use weir_sql::expr::type_of;
    let mut out = Vec::new();
    for item in items {
        match item {
            SelectItem::Star => out
                .extend(input.iter().filter(|c| !(c.name.starts_with('_') || (drop_key && c.name == "key"))).cloned()),
            SelectItem::Expr { expr, name } => {
                let (t, nullable) = type_of(expr, input).map_err(|e| field_err("select", format!("{name}: {e}")))?;
                out.push(weir_common::job::schema::Column::new(name, &t, nullable));
            }
        }
    }
    Ok(out)
}

/// Each side's columns, in union operator state: `<side>\t<columns_text>`.
const COLUMNS_STATE: &str = "join-columns";
const STATES: [&str; 2] = ["join-first", "join-second"];

/// The join operator.
pub struct Join {
    cfg: JoinConfig,
    inputs: Inputs<Plan>,
    /// Each input's rows, once registered.
    rows: Option<[ListState<Vec<u8>>; 2]>,
    /// The batch's rows of one key, encoded.
    mine: EncodedRows,
    /// The batch's rows grouped by key.
    by_key: RowsByKey,
    /// Each key's range of the other input's rows kept in `pairs`.
    spans: Vec<(u32, u32)>,
    /// Pairs found in the batch being processed.
    pairs: Pairs,
}

impl Join {
    /// A join with the given config.
    pub fn new(cfg: JoinConfig) -> Self {
        Join {
            cfg,
            inputs: Inputs::two(Self::KIND, COLUMNS_STATE),
            rows: None,
            mine: EncodedRows::default(),
            by_key: RowsByKey::default(),
            spans: Vec::new(),
            pairs: Pairs::default(),
        }
    }
}

impl Relational for Join {
    const KIND: &'static str = "join";
    type Built = Plan;

    fn inputs(&mut self) -> &mut Inputs<Plan> {
        &mut self.inputs
    }

    fn register(&mut self, keyed: &mut dyn KeyedStateBackend) -> Result<(), OperatorError> {
        self.rows = Some(input_lists(keyed, STATES, false)?);
        Ok(())
    }

    fn process(
        &mut self,
        s: usize,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let own = self.inputs.read(s, batch)?;
        let (keys, groups) = (keys(batch)?, key_groups(batch));
        let backend = ctx.keyed()?;
        let [first, second] = ready(&mut self.rows, "join")?;
        let (my_rows, their_rows) = if s == 0 { (first, &*second) } else { (second, &*first) };
        // Per key, once: the batch's rows go into my list in one write, and the other input's rows are read once
        // (kept in `pairs`, `spans` marking each key's rows there).
        self.by_key.group(keys, |_| Some(0));
        self.pairs.clear();
        self.spans.clear();
        for g in 0..self.by_key.len() {
            let rows = self.by_key.rows(g);
            set_current_key_of_row(backend, keys, groups, rows[0] as usize);
            self.mine.clear();
            for &i in rows {
                self.mine.push_row(&own, i as usize);
            }
            my_rows.add_all_encoded(backend, self.mine.iter())?;
            let first = self.pairs.stored() as u32;
            let pairs = &mut self.pairs;
            their_rows.visit_encoded(backend, &mut |e| {
                pairs.store(e);
                Ok(())
            })?;
            self.spans.push((first, self.pairs.stored() as u32));
        }
        // Pairs in batch order, as row-by-row processing finds them.
        for i in 0..batch.num_rows() {
            let Some(g) = self.by_key.group_of(i) else { continue };
            let (from, to) = self.spans[g];
            for e in from..to {
                self.pairs.push(i as u32, e);
            }
        }
        self.pairs.emit(&mut self.inputs, self.cfg.shape(), s, keys, &own, out)
    }
}

/// The `join` kind: a regular join of two keyed inputs, every row of each side kept.
pub struct JoinKind;

impl Kind for JoinKind {
    type Config = JoinConfig;

    fn info(&self) -> KindInfo {
        builtin_info(
            "join",
            Role::TwoInput,
            true,
            "A regular join of two keyed inputs, every row of each side kept",
            JoinConfig::FIELDS,
        )
        .with_states(&[
            ("join-first", StateClass::List, "rows of the first input"),
            ("join-second", StateClass::List, "rows of the second input"),
        ])
        .with_input(vec![key_column()])
        .with_output(OutputSchema::FromConfig)
    }

    fn signature(&self) -> Option<StateSignature> {
        // Each input's rows (`api::stored_rows`) per key, and each input's columns.
        Some(
            StateSignature::keyed::<Vec<u8>>()
                .list::<Vec<u8>>("join-first")
                .list::<Vec<u8>>("join-second")
                .union::<String>("join-columns"),
        )
    }

    fn config(&self, config: &OperatorConfig) -> Result<JoinConfig, ConfigFieldError> {
        JoinConfig::from_map(config)
    }

    fn output(&self, config: &JoinConfig, inputs: &[Vec<Column>]) -> Option<Result<Vec<Column>, ConfigFieldError>> {
        let (first, second) = two(inputs);
        Some(config.output(first, second))
    }

    fn build(&self, config: JoinConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Operator(Box::new(Join::new(config))))
    }
}

/// A two-input kind's inputs' columns (empty where not known).
pub(crate) fn two(inputs: &[Vec<Column>]) -> (&[Column], &[Column]) {
    (inputs.first().map(Vec::as_slice).unwrap_or_default(), inputs.get(1).map(Vec::as_slice).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{keyed_batch, partition, Harness, OperatorHarness, Snapshot};
    use arrow_array::{ArrayRef, Int64Array, StringArray};
    use std::sync::Arc;
    use weir_common::job::spec::StateBackend;

    fn side(keys: &[u64], column: &str, values: ArrayRef, times: &[i64]) -> RecordBatch {
        let keys: Vec<[u8; 8]> = keys.iter().map(|k| k.to_be_bytes()).collect();
        keyed_batch(&keys, vec![(column, values)], times).unwrap()
    }

    /// A join of `config` on RocksDB, as subtask `i` of `p`, restored from `from` if given.
    fn open_at(
        config: &[(&str, &str)],
        (i, p): (u32, u32),
        from: Option<&Snapshot>,
    ) -> Result<OperatorHarness<Join>, OperatorError> {
        let map = crate::builtins::declare::config_map(config);
        let h = Harness::keyed(StateBackend::Rocksdb).subtask(i, p);
        let h = match from {
            Some(snapshot) => h.restore(snapshot),
            None => h,
        };
        h.open(Join::new(JoinConfig::from_map(&map).unwrap()))
    }

    fn open(config: &[(&str, &str)], from: Option<&Snapshot>) -> Result<OperatorHarness<Join>, OperatorError> {
        open_at(config, (0, 1), from)
    }

    /// What the join emits for `batch` on input `s`, as text lines.
    fn push(h: &mut OperatorHarness<Join>, s: usize, batch: RecordBatch) -> Result<Vec<String>, OperatorError> {
        match s {
            0 => h.process(&batch)?,
            _ => h.process_second(&batch)?,
        }
        lines(h.take_output())
    }

    /// Joined rows as sorted text lines, each with its event time.
    fn lines(batches: Vec<RecordBatch>) -> Result<Vec<String>, OperatorError> {
        Ok(crate::builtins::text::lines_of(&batches))
    }

    #[test]
    fn each_pair_is_joined_once_whichever_side_comes_first() -> Result<(), OperatorError> {
        let mut h = open(&[("where", "a_id <> 9")], None)?;
        let auctions = side(&[1, 2, 1], "a_id", Arc::new(Int64Array::from(vec![10, 20, 11])), &[5, 6, 7]);
        assert!(push(&mut h, 0, auctions)?.is_empty(), "nothing on the other side yet");
        let persons = side(&[1, 3], "name", Arc::new(StringArray::from(vec!["ann", "bob"])), &[6, 1]);
        assert_eq!(push(&mut h, 1, persons)?, vec!["1,10,ann@6", "1,11,ann@7"]);
        // A later auction of key 1 meets ann, the one of key 3 meets bob; a_id 9 fails the condition.
        let more = side(&[3, 1, 1], "a_id", Arc::new(Int64Array::from(vec![30, 12, 9])), &[8, 2, 9]);
        assert_eq!(push(&mut h, 0, more)?, vec!["1,12,ann@6", "3,30,bob@8"]);
        Ok(())
    }

    #[test]
    fn rows_of_one_key_in_a_batch_are_each_stored_and_each_joined() -> Result<(), OperatorError> {
        let mut h = open(&[], None)?;
        let persons = side(&[5, 6, 5], "name", Arc::new(StringArray::from(vec!["ann", "bob", "cy"])), &[1, 2, 3]);
        assert!(push(&mut h, 1, persons)?.is_empty());
        let auctions = side(&[5, 5, 6, 5], "a_id", Arc::new(Int64Array::from(vec![1, 2, 3, 4])), &[4, 5, 6, 7]);
        let got = push(&mut h, 0, auctions)?;
        let want = ["5,1,ann@4", "5,1,cy@4", "5,2,ann@5", "5,2,cy@5", "5,4,ann@7", "5,4,cy@7", "6,3,bob@6"];
        assert_eq!(got, want);
        // All three auctions of key 5 were stored: a later person meets each.
        let later = side(&[5], "name", Arc::new(StringArray::from(vec!["di"])), &[0]);
        assert_eq!(push(&mut h, 1, later)?, vec!["5,1,di@4", "5,2,di@5", "5,4,di@7"]);
        Ok(())
    }

    #[test]
    fn restored_rows_join_before_their_side_sends_and_other_columns_are_refused() -> Result<(), OperatorError> {
        let mut h = open(&[("select", "name, a_id AS id")], None)?;
        push(&mut h, 1, side(&[4], "name", Arc::new(StringArray::from(vec!["cy"])), &[3]))?;
        let snapshot = h.snapshot(1)?;
        let mut again = open(&[("select", "name, a_id AS id")], Some(&snapshot))?;
        let got = push(&mut again, 0, side(&[4], "a_id", Arc::new(Int64Array::from(vec![40])), &[1]))?;
        assert_eq!(got, vec!["cy,40@3"]);
        let mut other = open(&[], Some(&snapshot))?;
        let e = push(&mut other, 1, side(&[4], "nick", Arc::new(StringArray::from(vec!["c"])), &[1])).unwrap_err();
        assert!(e.to_string().contains("second input's columns changed"), "{e}");
        Ok(())
    }

    /// Both sides' rows stored by one subtask, restored as three: each joins the rows that come later with the
    /// stored rows of its own key groups, and the three together emit what one would.
    #[test]
    fn rows_restored_at_another_parallelism_join_in_the_subtask_of_their_key() -> Result<(), OperatorError> {
        let keys: Vec<u64> = (0..30).collect();
        let names: Vec<String> = keys.iter().map(|k| format!("p{k}")).collect();
        let persons = side(&keys, "name", Arc::new(StringArray::from(names)), &vec![1; keys.len()]);
        let auctions = |base: i64| {
            let ids: Vec<i64> = keys.iter().map(|&k| base + k as i64).collect();
            side(&keys, "a_id", Arc::new(Int64Array::from(ids)), &vec![2; keys.len()])
        };
        let mut one = open(&[], None)?;
        push(&mut one, 1, persons)?;
        push(&mut one, 0, auctions(100))?;
        let snapshot = one.snapshot(1)?;
        let later = auctions(200);
        let expected = push(&mut one, 0, later.clone())?;
        assert_eq!(expected.len(), keys.len());

        let mut union = Vec::new();
        for (i, rows) in partition(&later, 3, 128)?.into_iter().enumerate() {
            let mut h = open_at(&[], (i as u32, 3), Some(&snapshot))?;
            // It restored the persons of its own key groups, and only those.
            let range = h.info().key_group_range;
            let backend = h.keyed()?;
            let persons = ListState::<Vec<u8>>::register(backend, "join-second")?;
            for k in &keys {
                backend.set_current_key(&k.to_be_bytes());
                let mine = range.contains(weir_common::state::keygroup::key_group_for_key(&k.to_be_bytes(), 128));
                assert_eq!(persons.get(backend)?.len(), usize::from(mine), "subtask {i}, key {k}");
            }
            let got = push(&mut h, 0, rows.clone())?;
            assert_eq!(got.len(), rows.num_rows(), "subtask {i}: each of its auctions meets its person");
            union.extend(got);
        }
        union.sort();
        assert_eq!(union, expected, "three subtasks join what one does");
        Ok(())
    }
}
