//! `aggregate`: SQL's `GROUP BY` over a stream, with updates (Flink's group aggregate). Per key, the row count,
//! an accumulator per aggregate and the carried columns of its first row are one value in keyed state; each input
//! batch is a mini-batch, as Flink's mini-batch aggregation: every key it touches is read once, updated by all its
//! rows and written once, and when the key's result changed over the batch, the change is emitted: `+I` for a key's first result, `-U`
//! of the previous and `+U` of the new one after, `-D` when all of a key's rows were retracted. An input with an
//! `_op` column is a changelog: its `-U`/`-D` rows are taken back out (`COUNT`, `SUM`, `AVG`).

use super::declare::*;
use crate::api::batch::{event_time_field, key_groups, keys, set_current_key_of_row, RowKind, EVENT_TIME, OP};
use crate::api::by_key::RowsByKey;
use crate::api::operator::{Collector, InitContext, Operator, OperatorError, ProcessContext, SnapshotContext};
use crate::api::stored_rows::{encode_row, restore_kept, snapshot_kept, KeptColumns, RowsBuilder};
use arrow_array::builder::{Int64Builder, Int8Builder, TimestampMillisecondBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, Int8Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

use weir_state::{StateId, StateKind};

/// An aggregate function of the `aggregate` kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggregateFn {
    /// `COUNT(*)`: rows.
    Count,
    /// `SUM(x)`.
    Sum,
    /// `MIN(x)` (its input must not retract rows).
    Min,
    /// `MAX(x)` (its input must not retract rows).
    Max,
    /// `AVG(x)`: the sum divided by the count, an integer rounded toward zero (SQL's `AVG` of a `BIGINT`).
    Avg,
}

/// Config of the `aggregate` kind (SQL's `GROUP BY` on a stream, with updates): per key, `aggregates`
/// (`COUNT(*) AS n, MAX(price) AS final, …` over integer columns) kept in keyed state and, after every row
/// that changes them, emitted as a change — `+I` for a key's first result, then `-U` (the previous result) and
/// `+U` (the new one) — so that the committed changes add up to the current result. `carry`: columns that
/// are the same for every row of a key (a `GROUP BY a.id, a.category` keyed by id carries category), output
/// first. An input that is itself a changelog (an `_op` column) is aggregated with its retractions (`COUNT`,
/// `SUM`, `AVG`; `MIN` and `MAX` refuse retractions); a key whose rows are all retracted is deleted (`-D`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AggregateConfig {
    /// The aggregates: function, input column (none for `COUNT(*)`), output name.
    pub aggregates: Vec<(AggregateFn, Option<String>, String)>,
    /// Carried columns.
    pub carry: Vec<String>,
}

impl AggregateConfig {
    /// The config fields it reads: what `weir kinds` lists and what any other field is refused against.
    pub const FIELDS: &'static [ConfigField] = &[
        state_field("aggregates", "COUNT(*) AS n, SUM(col) AS s, MIN, MAX, AVG over integer columns (required)"),
        field("carry", "columns the same for every row of a key, emitted first (comma-separated)"),
    ];

    /// Reads and checks an aggregate config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, Self::FIELDS)?;
        let aggregates = parse_aggregates(r.string("aggregates")?)?;
        let carry = r
            .string("carry")?
            .map(|t| t.split(',').map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect())
            .unwrap_or_default();
        Ok(AggregateConfig { aggregates, carry })
    }

    /// The columns it emits over rows of `input`: the carried ones, then the aggregates (integers).
    pub fn output(
        &self,
        input: &[weir_common::job::schema::Column],
    ) -> Result<Vec<weir_common::job::schema::Column>, ConfigFieldError> {
        let mut out = Vec::new();
        for c in &self.carry {
            let col = input
                .iter()
                .find(|i| &i.name == c)
                .ok_or_else(|| field_err("carry", format!("no column {c:?} in the input")))?;
            out.push(col.clone());
        }
        out.extend(aggregate_columns(&self.aggregates, input)?);
        weir_common::job::schema::validate_columns(&out).map_err(|e| field_err("aggregates", e.to_string()))?;
        Ok(out)
    }
}

/// Integer column types.
pub(crate) const INTEGERS: &[&str] = &["int64", "int32"];
/// Column types a time can be read from (milliseconds).
pub(crate) const TIMES: &[&str] = &["timestamp_ms", "int64"];

/// Checks that `input` (`side` names it) has a column `name` of one of `types`, naming `field` when not.
pub(crate) fn check_column(
    input: &[weir_common::job::schema::Column],
    name: &str,
    types: &[&str],
    field: &str,
    side: &str,
) -> Result<(), ConfigFieldError> {
    let what = if types == TIMES { "a timestamp" } else { "an integer" };
    match input.iter().find(|c| c.name == name) {
        Some(c) if types.contains(&c.data_type.as_str()) => Ok(()),
        Some(c) => Err(field_err(field, format!("column {name:?} is {}, not {what}", c.data_type))),
        None => Err(field_err(field, format!("no column {name:?} in {side}"))),
    }
}

/// An input's own columns: all but the key and the runtime's (`_…`).
pub(crate) fn own_columns(input: &[weir_common::job::schema::Column]) -> Vec<weir_common::job::schema::Column> {
    input.iter().filter(|c| c.name != "key" && !c.name.starts_with('_')).cloned().collect()
}

/// Reads `aggregates` text: `COUNT(*) AS n, MAX(price) AS top, …`.
pub(crate) fn parse_aggregates(
    text: Option<String>,
) -> Result<Vec<(AggregateFn, Option<String>, String)>, ConfigFieldError> {
    let text = text.ok_or_else(|| field_err("aggregates", "is required: `COUNT(*) AS n, MAX(price) AS top, …`"))?;
    let mut aggregates = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || {
            field_err(
                "aggregates",
                format!("{part:?}: expected FUNCTION(column) AS name (COUNT(*), SUM, MIN, MAX, AVG)"),
            )
        };
        let (call, name) = part.rsplit_once(" AS ").or_else(|| part.rsplit_once(" as ")).ok_or_else(bad)?;
        let (f, arg) = call.trim().split_once('(').ok_or_else(bad)?;
        let arg = arg.strip_suffix(')').ok_or_else(bad)?.trim();
        let f = match f.trim().to_ascii_uppercase().as_str() {
            "COUNT" => AggregateFn::Count,
            "SUM" => AggregateFn::Sum,
            "MIN" => AggregateFn::Min,
            "MAX" => AggregateFn::Max,
            "AVG" => AggregateFn::Avg,
            _ => return Err(bad()),
        };
        let column = match (f, arg) {
            (AggregateFn::Count, "*") => None,
            (_, "*") | (_, "") => return Err(bad()),
            (_, c) => Some(c.to_string()),
        };
        aggregates.push((f, column, name.trim().to_string()));
    }
    if aggregates.is_empty() {
        return Err(field_err("aggregates", "needs at least one aggregate"));
    }
    Ok(aggregates)
}

/// The aggregate columns over rows of `input`: each aggregated column must be an integer; the results are
/// integers, null where every value was null (never for a count).
pub(crate) fn aggregate_columns(
    aggregates: &[(AggregateFn, Option<String>, String)],
    input: &[weir_common::job::schema::Column],
) -> Result<Vec<weir_common::job::schema::Column>, ConfigFieldError> {
    let mut out = Vec::new();
    for (f, column, name) in aggregates {
        if let Some(c) = column {
            check_column(input, c, INTEGERS, "aggregates", "the input")?;
        }
        out.push(weir_common::job::schema::Column::new(name, "int64", *f != AggregateFn::Count));
    }
    Ok(out)
}

const STATE: &str = "aggregate";
const COLUMNS_STATE: &str = "aggregate-columns";
const CARRIED: &str = "carried";

/// A key's stored value: the row count, `(a, b)` per aggregate (count: `a` rows; sum, avg: `a` the sum and `b`
/// the values; min, max: `a` the extreme and `b` the values), then the carried columns as a stored row.
#[derive(Clone, Debug, Default, PartialEq)]
struct Acc {
    rows: i64,
    values: Vec<(i64, i64)>,
    carried: Vec<u8>,
}

impl Acc {
    /// Reads a stored value into `self`, reusing its buffers.
    fn decode_into(&mut self, bytes: &[u8], n: usize) -> Result<(), OperatorError> {
        let need = 8 + 16 * n;
        if bytes.len() < need {
            return Err(OperatorError::UnreadableState("aggregate: a stored accumulator is corrupt".into()));
        }
        let int = |at: usize| i64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
        self.rows = int(0);
        self.values.clear();
        self.values.extend((0..n).map(|i| (int(8 + 16 * i), int(16 + 16 * i))));
        self.carried.clear();
        self.carried.extend_from_slice(&bytes[need..]);
        Ok(())
    }

    /// Makes `self` the accumulator of a key without rows, reusing its buffers.
    fn reset(&mut self, n: usize) {
        self.rows = 0;
        self.values.clear();
        self.values.resize(n, (0, 0));
        self.carried.clear();
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.rows.to_le_bytes());
        for (a, b) in &self.values {
            out.extend_from_slice(&a.to_le_bytes());
            out.extend_from_slice(&b.to_le_bytes());
        }
        out.extend_from_slice(&self.carried);
    }

    /// The result into `out`, one value per aggregate (`None` where no value was seen); false when the key has
    /// no row (and so no result).
    fn result_into(&self, fns: &[AggregateFn], out: &mut Vec<Option<i64>>) -> bool {
        out.clear();
        out.extend(fns.iter().zip(&self.values).map(|(f, acc)| finish(*f, *acc)));
        self.rows > 0
    }
}

/// Adds (`sign` 1) or takes back (`sign` −1) a row's value `x` in aggregate `f`'s accumulator `(a, b)` — count:
/// `a` rows; sum, avg: `a` the sum and `b` the values; min, max: `a` the extreme and `b` the values (min and max
/// cannot take a value back).
pub(crate) fn accumulate(f: AggregateFn, acc: &mut (i64, i64), x: Option<i64>, sign: i64) -> Result<(), OperatorError> {
    let (a, b) = acc;
    match (f, x) {
        (AggregateFn::Count, _) => *a += sign,
        (_, None) => {}
        (AggregateFn::Sum | AggregateFn::Avg, Some(x)) => {
            *a = a.wrapping_add(sign * x);
            *b += sign;
        }
        (AggregateFn::Min | AggregateFn::Max, Some(_)) if sign < 0 => {
            return Err(OperatorError::Records(
                "aggregate: MIN and MAX cannot take back a retracted row (their input updates)".into(),
            ))
        }
        (AggregateFn::Min, Some(x)) => {
            *a = if *b == 0 { x } else { (*a).min(x) };
            *b += 1;
        }
        (AggregateFn::Max, Some(x)) => {
            *a = if *b == 0 { x } else { (*a).max(x) };
            *b += 1;
        }
    }
    Ok(())
}

/// Aggregate `f`'s result from its accumulator (see [`accumulate`]): `None` where no value was seen, an average
/// rounded toward zero.
pub(crate) fn finish(f: AggregateFn, (a, b): (i64, i64)) -> Option<i64> {
    match f {
        AggregateFn::Count => Some(a),
        AggregateFn::Avg => (b != 0).then(|| a / b),
        _ => (b != 0).then_some(a),
    }
}

/// The output rows of one batch, gathered column by column.
#[derive(Default)]
struct Changes {
    ops: Int8Builder,
    times: TimestampMillisecondBuilder,
    values: Vec<Int64Builder>,
    carried: Vec<Vec<u8>>,
}

/// The aggregate operator.
pub struct Aggregate {
    cfg: AggregateConfig,
    fns: Vec<AggregateFn>,
    state: Option<StateId>,
    columns: KeptColumns,
    /// The last input schema: its carried columns' projection and the indexes of the aggregated columns.
    plan: Option<(SchemaRef, Vec<usize>, Vec<Option<usize>>)>,
    value: Vec<u8>,
    changes: Changes,
    /// The batch's rows grouped by key, in first-touch order.
    by_key: RowsByKey,
    /// Each key of `by_key`, by its group (entries past the batch's keys are buffers to reuse).
    touched: Vec<Touched>,
    /// A key's result after the batch.
    after: Vec<Option<i64>>,
}

/// A key a batch touched: its accumulator, its result before the batch (`had`: whether it had one) and the
/// event time of its last row.
#[derive(Default)]
struct Touched {
    acc: Acc,
    before: Vec<Option<i64>>,
    had: bool,
    time: Option<i64>,
}

impl Aggregate {
    /// An aggregate with the given config.
    pub fn new(cfg: AggregateConfig) -> Self {
        let fns = cfg.aggregates.iter().map(|a| a.0).collect();
        Aggregate {
            cfg,
            fns,
            state: None,
            columns: KeptColumns::default(),
            plan: None,
            value: Vec::new(),
            changes: Changes::default(),
            by_key: RowsByKey::default(),
            touched: Vec::new(),
            after: Vec::new(),
        }
    }

    fn plan_for(&mut self, schema: &SchemaRef) -> Result<(Vec<usize>, Vec<Option<usize>>), OperatorError> {
        if let Some((s, carry, aggs)) = &self.plan {
            if s == schema {
                return Ok((carry.clone(), aggs.clone()));
            }
        }
        let index = |c: &str| {
            schema.index_of(c).map_err(|_| OperatorError::Records(format!("aggregate: no column {c:?} in the input")))
        };
        let carry: Vec<usize> = self.cfg.carry.iter().map(|c| index(c)).collect::<Result<_, _>>()?;
        let aggs: Vec<Option<usize>> = self
            .cfg
            .aggregates
            .iter()
            .map(|(_, c, _)| c.as_deref().map(index).transpose())
            .collect::<Result<_, _>>()?;
        let carried = Arc::new(schema.project(&carry).map_err(|e| OperatorError::Records(e.to_string()))?);
        self.columns.of_batch("aggregate's input", &carried)?;
        self.plan = Some((schema.clone(), carry.clone(), aggs.clone()));
        Ok((carry, aggs))
    }

    fn push(&mut self, kind: RowKind, result: &[Option<i64>], carried: &[u8], time: Option<i64>) {
        let c = &mut self.changes;
        c.ops.append_value(kind as i8);
        c.times.append_option(time);
        c.values.resize_with(result.len(), Int64Builder::new);
        for (b, v) in c.values.iter_mut().zip(result) {
            b.append_option(*v);
        }
        c.carried.push(carried.to_vec());
    }

    fn flush(&mut self, out: &mut Collector<'_>) -> Result<(), OperatorError> {
        if self.changes.carried.is_empty() {
            return Ok(());
        }
        let carried_schema = self.columns.stored.clone().unwrap_or_else(|| Arc::new(Schema::empty()));
        let mut rows = RowsBuilder::new(carried_schema.clone())?;
        for r in self.changes.carried.drain(..) {
            rows.push(&r)?;
        }
        let mut fields: Vec<Field> = carried_schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        let mut columns: Vec<ArrayRef> = rows.finish();
        for ((f, _, name), b) in self.cfg.aggregates.iter().zip(&mut self.changes.values) {
            fields.push(Field::new(name, DataType::Int64, *f != AggregateFn::Count));
            columns.push(Arc::new(b.finish()));
        }
        fields.push(event_time_field());
        columns.push(Arc::new(self.changes.times.finish()));
        fields.push(crate::api::batch::op_field());
        columns.push(Arc::new(self.changes.ops.finish()));
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
            .map_err(|e| OperatorError::Records(format!("aggregate: building the changes: {e}")))?;
        out.emit_batch(batch)
    }
}

impl Operator for Aggregate {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let keyed = ctx.keyed.as_mut().ok_or_else(|| OperatorError::Misuse("aggregate needs keyed state".into()))?;
        self.state = Some(keyed.register_state(STATE, StateKind::Value)?);
        restore_kept(ctx.operator_state, COLUMNS_STATE, &mut [(CARRIED, &mut self.columns)])?;
        let restored = ctx.operator_state.union_list_state(COLUMNS_STATE)?;
        check_stored_aggregates(restored, &self.fns)
    }

    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let (carry, aggs) = self.plan_for(&batch.schema())?;
        let carry_cols: Vec<ArrayRef> = carry.iter().map(|&i| batch.column(i).clone()).collect();
        let ints: Vec<Option<Vec<Option<i64>>>> = aggs
            .iter()
            .map(|c| {
                c.map(|i| {
                    let col = batch.column(i);
                    match col.data_type() {
                        DataType::Int32 => {
                            Ok(col.as_primitive::<Int32Type>().iter().map(|v| v.map(i64::from)).collect())
                        }
                        DataType::Int64 => Ok(col.as_primitive::<Int64Type>().iter().collect()),
                        t => Err(OperatorError::Records(format!("aggregate: column {i} is {t}, not an integer"))),
                    }
                })
                .transpose()
            })
            .collect::<Result<_, _>>()?;
        let ops = batch.column_by_name(OP).map(|c| c.as_primitive::<Int8Type>().clone());
        let times = batch.column_by_name(EVENT_TIME).map(|c| c.as_primitive::<TimestampMillisecondType>().clone());
        let (keys, groups) = (keys(batch)?, key_groups(batch));
        let state = self.state.ok_or_else(|| OperatorError::Misuse("aggregate used before initialize_state".into()))?;
        let n = self.fns.len();
        let backend = ctx.keyed()?;
        // The batch is the mini-batch: each key's accumulator is read once, updated in memory by all its rows,
        // and written once, and the key's change over the whole batch is emitted (Flink's mini-batch folding).
        self.by_key.group(keys, |_| Some(0));
        for g in 0..self.by_key.len() {
            let rows = self.by_key.rows(g);
            if self.touched.len() == g {
                self.touched.push(Touched::default());
            }
            let t = &mut self.touched[g];
            set_current_key_of_row(backend, keys, groups, rows[0] as usize);
            match backend.get_value(state)? {
                Some(bytes) => t.acc.decode_into(bytes, n)?,
                None => t.acc.reset(n),
            }
            t.had = t.acc.result_into(&self.fns, &mut t.before);
            for &i in rows {
                let i = i as usize;
                let kind = match &ops {
                    Some(o) => RowKind::from_i8(o.value(i))
                        .ok_or_else(|| OperatorError::Records(format!("aggregate: unknown change {}", o.value(i))))?,
                    None => RowKind::Insert,
                };
                if t.acc.rows == 0 && kind.retracts() {
                    continue;
                }
                let sign = if kind.retracts() { -1 } else { 1 };
                t.acc.rows += sign;
                for ((f, v), vals) in self.fns.iter().zip(t.acc.values.iter_mut()).zip(&ints) {
                    accumulate(*f, v, vals.as_ref().and_then(|v| v[i]), sign)?;
                }
                if t.acc.carried.is_empty() && !carry_cols.is_empty() {
                    encode_row(&carry_cols, i, &mut t.acc.carried);
                }
                t.time = times.as_ref().and_then(|t| t.is_valid(i).then(|| t.value(i)));
            }
        }
        let (touched, mut after) = (std::mem::take(&mut self.touched), std::mem::take(&mut self.after));
        for (g, t) in touched[..self.by_key.len()].iter().enumerate() {
            let has = t.acc.result_into(&self.fns, &mut after);
            let carried = &t.acc.carried;
            match (t.had, has) {
                (false, false) => continue, // a retraction of a key that has nothing: no state to write
                (false, true) => self.push(RowKind::Insert, &after, carried, t.time),
                (true, true) if t.before != after => {
                    self.push(RowKind::UpdateBefore, &t.before, carried, t.time);
                    self.push(RowKind::UpdateAfter, &after, carried, t.time);
                }
                (true, false) => self.push(RowKind::Delete, &t.before, carried, t.time),
                _ => {}
            }
            set_current_key_of_row(backend, keys, groups, self.by_key.rows(g)[0] as usize);
            if has {
                t.acc.encode(&mut self.value);
                backend.put_value(state, &self.value)?;
            } else {
                backend.delete_value(state)?;
            }
        }
        (self.touched, self.after) = (touched, after);
        self.flush(out)
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        snapshot_kept(ctx.operator_state, COLUMNS_STATE, &[(CARRIED, &self.columns)])?;
        ctx.operator_state.union_list_state(COLUMNS_STATE)?.push(aggregates_element(&self.fns));
        Ok(())
    }
}

/// The union-state element naming the aggregates a key's stored accumulators are of, beside the carried columns'.
const AGGREGATES: &str = "aggregates";

fn aggregates_element(fns: &[AggregateFn]) -> Vec<u8> {
    let names: Vec<String> = fns.iter().map(|f| format!("{f:?}")).collect();
    format!("{AGGREGATES}\t{}", names.join(",")).into_bytes()
}

/// Whether the restored union state `elements` holds accumulators of the aggregates `fns`: a key's stored value is
/// one accumulator per aggregate, in order, so another list would read them as the wrong aggregates (or its
/// carried columns as accumulators). State written before the list was kept says nothing and passes.
fn check_stored_aggregates(elements: &[Vec<u8>], fns: &[AggregateFn]) -> Result<(), OperatorError> {
    let want = aggregates_element(fns);
    for e in elements {
        let Some(stored) = e.strip_prefix(format!("{AGGREGATES}\t").as_bytes()) else { continue };
        if e != &want {
            return Err(OperatorError::UnreadableState(format!(
                "aggregate: its stored accumulators are of [{}], this job's aggregates are [{}]; the stored state \
                 cannot be read with other aggregates (start the job without this state, or keep its aggregates)",
                String::from_utf8_lossy(stored),
                String::from_utf8_lossy(&want[AGGREGATES.len() + 1..])
            )));
        }
    }
    Ok(())
}

/// The `aggregate` kind: a running `GROUP BY` per key, emitting updates.
pub struct AggregateKind;

impl Kind for AggregateKind {
    type Config = AggregateConfig;

    fn info(&self) -> KindInfo {
        builtin_info(
            "aggregate",
            Role::Operator,
            true,
            "A running `GROUP BY` per key, emitting updates",
            AggregateConfig::FIELDS,
        )
        .with_states(&[("aggregate", StateClass::Value, "rows, accumulators and carried columns")])
        .with_input(vec![key_column()])
        .with_output(OutputSchema::FromConfig)
    }

    fn signature(&self) -> Option<StateSignature> {
        // Per key, the row count, accumulators and carried columns; the carried columns' types.
        Some(StateSignature::keyed::<Vec<u8>>().value::<Vec<u8>>("aggregate").union::<String>("aggregate-columns"))
    }

    fn config(&self, config: &OperatorConfig) -> Result<AggregateConfig, ConfigFieldError> {
        AggregateConfig::from_map(config)
    }

    fn output(
        &self,
        config: &AggregateConfig,
        inputs: &[Vec<Column>],
    ) -> Option<Result<Vec<Column>, ConfigFieldError>> {
        Some(config.output(inputs.first().map(Vec::as_slice).unwrap_or_default()))
    }

    fn build(&self, config: AggregateConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Operator(Box::new(Aggregate::new(config))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Acc {
        fn result(&self, fns: &[AggregateFn]) -> Option<Vec<Option<i64>>> {
            let mut out = Vec::new();
            self.result_into(fns, &mut out).then_some(out)
        }

        fn decode(bytes: &[u8], n: usize) -> Result<Acc, OperatorError> {
            let mut acc = Acc::default();
            acc.decode_into(bytes, n)?;
            Ok(acc)
        }
    }

    #[test]
    fn stored_accumulators_of_other_aggregates_are_refused_by_name() {
        let fns = [AggregateFn::Count, AggregateFn::Max];
        let stored = vec![b"carried\tg0:int64:true".to_vec(), aggregates_element(&fns)];
        assert!(check_stored_aggregates(&stored, &fns).is_ok());
        assert!(check_stored_aggregates(&stored[..1], &fns[..1]).is_ok(), "state from before the list was kept");
        let e = check_stored_aggregates(&stored, &fns[1..]).unwrap_err().to_string();
        assert!(e.contains("are of [Count,Max], this job's aggregates are [Max]"), "{e}");
        assert!(check_stored_aggregates(&stored, &[AggregateFn::Max, AggregateFn::Count]).is_err(), "order matters");
    }

    #[test]
    fn results_follow_inserts_and_retractions() {
        let fns = [AggregateFn::Count, AggregateFn::Avg, AggregateFn::Max];
        let mut acc = Acc { rows: 0, values: vec![(0, 0); 3], carried: vec![1, 2] };
        assert_eq!(acc.result(&fns), None);
        acc.rows = 2;
        acc.values = vec![(2, 0), (7, 2), (5, 2)];
        assert_eq!(acc.result(&fns), Some(vec![Some(2), Some(3), Some(5)]), "AVG rounds toward zero");
        let mut bytes = Vec::new();
        acc.encode(&mut bytes);
        assert_eq!(Acc::decode(&bytes, 3).unwrap(), acc);
        assert!(Acc::decode(&bytes[..20], 3).is_err());
        acc.values[1] = (-7, 2);
        assert_eq!(acc.result(&fns).unwrap()[1], Some(-3));
    }
}
