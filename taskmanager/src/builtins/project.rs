//! `filter` and `project`: a row-at-a-time SQL `WHERE` and `SELECT … [WHERE …]` over the input's columns (SQL
//! expressions of `weir_sql::expr`, evaluated by DataFusion), a whole batch per call. `project` can also set the
//! rows' key from column values (`key: bid_auction`), so that a key-by edge after it routes by them. The event
//! time goes through unchanged. Neither keeps state.

use super::declare::*;
use super::join::select_output;
use crate::api::batch::{EVENT_TIME, KEY, KEY_GROUP, OP};
use crate::api::keys::encode_keys;
use crate::api::operator::{Collector, Operator, OperatorError, ProcessContext};
use arrow_array::builder::BinaryBuilder;
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow_schema::{Field, Schema, SchemaRef};
use std::sync::Arc;
use weir_sql::expr::{parse_expr, parse_list, parse_select, Scalar, SelectItem, SqlExpr};

/// Config of the `filter` kind: `where`, a boolean SQL expression over the input's columns; a row passes where it
/// is true (not where it is false or null, as in SQL).
#[derive(Clone, Debug, PartialEq)]
pub struct FilterConfig {
    /// The condition.
    pub condition: SqlExpr,
}

impl FilterConfig {
    /// The config fields it reads: what `weir kinds` lists and what any other field is refused against.
    pub const FIELDS: &'static [ConfigField] =
        &[field("where", "a condition over the input's columns; a row passes where it is true (required)")];

    /// Reads and parses a filter config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, Self::FIELDS)?;
        let text = r.string("where")?.ok_or_else(|| field_err("where", "is required: a condition over the columns"))?;
        let condition = parse_expr(&text).map_err(|e| field_err("where", e.to_string()))?;
        Ok(FilterConfig { condition })
    }
}

/// Config of the `project` kind (a SQL `SELECT … WHERE …` over one row at a time): `select`, the output columns
/// (`expr [AS name], …`, `*` for every input column); `where`, an optional condition applied first; `key`, an
/// optional list of expressions whose values become the rows' key (the `key` column a key-by edge routes on
/// and a keyed operator keys its state by).
#[derive(Clone, Debug, PartialEq)]
pub struct ProjectConfig {
    /// The output columns.
    pub select: Vec<SelectItem>,
    /// Rows where this is not true are dropped.
    pub condition: Option<SqlExpr>,
    /// The key's parts.
    pub key: Option<Vec<SqlExpr>>,
}

/// The column types a key part may have (what `encode_keys` encodes).
const KEY_TYPES: &[&str] = &["bool", "int32", "int64", "utf8", "binary", "timestamp_ms"];

impl ProjectConfig {
    /// The config fields it reads: what `weir kinds` lists and what any other field is refused against.
    pub const FIELDS: &'static [ConfigField] = &[
        field("select", "the output columns: expr [AS name], … (* for every input column)"),
        field("where", "a condition over the input's columns: rows where it is not true are dropped"),
        field("key", "expressions the output is keyed by, comma-separated (default: the input's key)"),
    ];

    /// Reads and parses a project config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, Self::FIELDS)?;
        let text = r.string("select")?.ok_or_else(|| field_err("select", "is required: `expr [AS name], …` or `*`"))?;
        let select = parse_select(&text).map_err(|e| field_err("select", e.to_string()))?;
        let condition = match r.string("where")? {
            None => None,
            Some(t) => Some(parse_expr(&t).map_err(|e| field_err("where", e.to_string()))?),
        };
        let key = match r.string("key")? {
            None => None,
            Some(t) => Some(parse_list(&t).map_err(|e| field_err("key", e.to_string()))?),
        };
        Ok(ProjectConfig { select, condition, key })
    }

    /// The columns it emits over input rows of `input` (the key first when it sets one), or the field at fault.
    pub fn output(
        &self,
        input: &[weir_common::job::schema::Column],
    ) -> Result<Vec<weir_common::job::schema::Column>, ConfigFieldError> {
        if let Some(c) = &self.condition {
            weir_sql::expr::check_condition(c, input).map_err(|e| field_err("where", e.to_string()))?;
        }
        let mut out = Vec::new();
        if let Some(parts) = &self.key {
            for p in parts {
                let compiled =
                    weir_sql::expr::compile_for_columns(p, input).map_err(|e| field_err("key", e.to_string()))?;
                if compiled.data_type() == &arrow_schema::DataType::Null {
                    return Err(field_err("key", format!("`{}` is NULL: a key cannot be null", p.sql())));
                }
                let (t, _) = weir_sql::expr::type_of(p, input).map_err(|e| field_err("key", e.to_string()))?;
                if !(KEY_TYPES.contains(&t.as_str()) || t.starts_with("decimal(")) {
                    return Err(field_err("key", format!("a key cannot be {t}: `{}`", p.sql())));
                }
            }
            out.push(weir_common::job::schema::key_column());
        }
        out.extend(select_output(&self.select, input, self.key.is_some())?);
        weir_common::job::schema::validate_columns(&out).map_err(|e| field_err("select", e.to_string()))?;
        Ok(out)
    }
}

fn config_err(field: &str, e: weir_common::job::kind::ConfigFieldError) -> OperatorError {
    OperatorError::Records(format!("config.{field}: {}", e.message))
}

/// An output column's expression (`select`, `key`) compiled for `schema`.
fn compiled(field: &str, e: &SqlExpr, schema: &Schema) -> Result<Scalar, OperatorError> {
    weir_sql::expr::compile_column(e, schema).map_err(|e| OperatorError::Records(format!("config.{field}: {e}")))
}

/// The `where` condition compiled for `schema`.
fn condition(e: &SqlExpr, schema: &Schema) -> Result<Scalar, OperatorError> {
    weir_sql::expr::compile_condition(e, schema).map_err(|e| OperatorError::Records(format!("config.where: {e}")))
}

fn evaluated(s: &Scalar, batch: &RecordBatch) -> Result<ArrayRef, OperatorError> {
    s.evaluate(batch).map_err(|e| OperatorError::Records(e.to_string()))
}

fn mask(s: &Scalar, batch: &RecordBatch) -> Result<BooleanArray, OperatorError> {
    s.evaluate_condition(batch).map_err(|e| OperatorError::Records(e.to_string()))
}

/// Keeps the rows for which a condition holds.
pub struct Filter {
    cfg: FilterConfig,
    compiled: Option<(SchemaRef, Scalar)>,
}

impl Filter {
    /// A filter with the given config.
    pub fn new(cfg: FilterConfig) -> Self {
        Filter { cfg, compiled: None }
    }
}

/// The condition compiled for `schema`, compiled again only when the schema changes.
fn condition_for<'c>(
    slot: &'c mut Option<(SchemaRef, Scalar)>,
    cond: &SqlExpr,
    schema: &SchemaRef,
) -> Result<&'c Scalar, OperatorError> {
    if slot.as_ref().is_none_or(|(s, _)| s != schema) {
        *slot = Some((schema.clone(), condition(cond, schema)?));
    }
    Ok(&slot.as_ref().unwrap_or_else(|| unreachable!("set above")).1)
}

fn keep(batch: &RecordBatch, cond: &Scalar) -> Result<Option<RecordBatch>, OperatorError> {
    let mask = mask(cond, batch)?;
    let mask = &mask;
    if mask.null_count() == 0 && mask.true_count() == batch.num_rows() {
        return Ok(Some(batch.clone()));
    }
    if mask.true_count() == 0 {
        return Ok(None);
    }
    arrow_select::filter::filter_record_batch(batch, mask)
        .map(Some)
        .map_err(|e| OperatorError::Records(format!("filtering a batch: {e}")))
}

impl Operator for Filter {
    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let cond = condition_for(&mut self.compiled, &self.cfg.condition, &batch.schema())?;
        match keep(batch, cond)? {
            Some(kept) => out.emit_batch(kept),
            None => Ok(()),
        }
    }
}

/// What `project` runs for one input schema.
struct Plan {
    input: SchemaRef,
    /// The input columns the select list and key read, and the event time: what survives the condition.
    used: Vec<usize>,
    /// Over the whole input.
    condition: Option<Scalar>,
    /// Over the `used` columns.
    key: Vec<Scalar>,
    select: Vec<Scalar>,
    output: SchemaRef,
    /// Index of the event time within `used`.
    event_time: Option<usize>,
    /// Index of an updating input's change column within `used`.
    op: Option<usize>,
}

/// Computes new columns (and optionally the key) from each row.
pub struct Project {
    cfg: ProjectConfig,
    plan: Option<Plan>,
    keys: BinaryBuilder,
}

impl Project {
    /// A projection with the given config.
    pub fn new(cfg: ProjectConfig) -> Self {
        Project { cfg, plan: None, keys: BinaryBuilder::new() }
    }

    /// The expressions of the select list (`*` spelled out as the input's columns, `key` aside when the
    /// projection sets its own).
    fn select_exprs(&self, schema: &Schema) -> Vec<SqlExpr> {
        let mut out = Vec::new();
        for item in &self.cfg.select {
            match item {
                SelectItem::Star => {
                    for f in schema.fields() {
                        let n = f.name();
                        if n.starts_with('_') || (n == KEY && self.cfg.key.is_some()) {
                            continue;
                        }
                        out.push(SqlExpr::column(n));
                    }
                }
                SelectItem::Expr { expr, .. } => out.push(expr.clone()),
            }
        }
        out
    }

    fn plan(&self, schema: &SchemaRef) -> Result<Plan, OperatorError> {
        let all = weir_sql::expr::types::columns_of(schema);
        let columns = self.cfg.output(&all).map_err(|e| config_err(&e.field.clone(), e))?;
        let condition = match &self.cfg.condition {
            Some(c) => Some(condition(c, schema)?),
            None => None,
        };
        let keys: Vec<SqlExpr> = self.cfg.key.iter().flatten().cloned().collect();
        let select = self.select_exprs(schema);
        // The columns read after the condition, in input order.
        let mut read: Vec<String> = Vec::new();
        for e in &keys {
            read.extend(compiled("key", e, schema)?.columns().iter().cloned());
        }
        for e in &select {
            read.extend(compiled("select", e, schema)?.columns().iter().cloned());
        }
        if self.cfg.key.is_none() && self.cfg.select.contains(&SelectItem::Star) && schema.index_of(KEY).is_ok() {
            read.push(KEY.into());
        }
        read.push(EVENT_TIME.into());
        read.push(OP.into());
        let mut used: Vec<usize> = read.iter().filter_map(|n| schema.index_of(n).ok()).collect();
        used.sort_unstable();
        used.dedup();
        let narrow = Arc::new(schema.project(&used).map_err(|e| OperatorError::Records(e.to_string()))?);
        let key = keys.iter().map(|p| compiled("key", p, &narrow)).collect::<Result<Vec<_>, _>>()?;
        let select = select.iter().map(|e| compiled("select", e, &narrow)).collect::<Result<Vec<_>, _>>()?;
        let mut fields: Vec<Field> = Vec::with_capacity(columns.len() + 2);
        let mut exprs = select.iter();
        for c in &columns {
            if self.cfg.key.is_some() && fields.is_empty() && c.name == KEY {
                fields.push(Field::new(KEY, arrow_schema::DataType::Binary, false));
                continue;
            }
            let Some(s) = exprs.next() else {
                return Err(OperatorError::Records("project: more output columns than expressions".into()));
            };
            fields.push(Field::new(&c.name, s.data_type().clone(), c.nullable));
        }
        let event_time = narrow.index_of(EVENT_TIME).ok();
        if let Some(i) = event_time {
            fields.push(narrow.field(i).clone());
        }
        // An updating input's changes go through as they are.
        let op = narrow.index_of(OP).ok();
        if let Some(i) = op {
            fields.push(narrow.field(i).clone());
        }
        debug_assert!(!fields.iter().any(|f| f.name() == KEY_GROUP));
        Ok(Plan {
            input: schema.clone(),
            used,
            condition,
            key,
            select,
            output: Arc::new(Schema::new(fields)),
            event_time,
            op,
        })
    }
}

impl Operator for Project {
    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        if self.plan.as_ref().is_none_or(|p| p.input != batch.schema()) {
            self.plan = Some(self.plan(&batch.schema())?);
        }
        let Some(plan) = &self.plan else { unreachable!("planned above") };
        let narrow = batch.project(&plan.used).map_err(|e| OperatorError::Records(e.to_string()))?;
        let narrow = match &plan.condition {
            None => narrow,
            Some(c) => {
                let mask = mask(c, batch)?;
                let mask = &mask;
                if mask.true_count() == 0 {
                    return Ok(());
                }
                if mask.null_count() == 0 && mask.true_count() == batch.num_rows() {
                    narrow
                } else {
                    arrow_select::filter::filter_record_batch(&narrow, mask)
                        .map_err(|e| OperatorError::Records(format!("filtering a batch: {e}")))?
                }
            }
        };
        let rows = narrow.num_rows();
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(plan.output.fields().len());
        if !plan.key.is_empty() {
            let parts = plan.key.iter().map(|k| evaluated(k, &narrow)).collect::<Result<Vec<_>, _>>()?;
            columns.push(Arc::new(encode_keys(&parts, rows, &mut self.keys)?));
        }
        for s in &plan.select {
            columns.push(evaluated(s, &narrow)?);
        }
        for i in plan.event_time.into_iter().chain(plan.op) {
            columns.push(narrow.column(i).clone());
        }
        let batch = RecordBatch::try_new(plan.output.clone(), columns)
            .map_err(|e| OperatorError::Records(format!("building the projected batch: {e}")))?;
        out.emit_batch(batch)
    }
}

/// The `filter` kind: the rows for which a condition holds (SQL's `WHERE`).
pub struct FilterKind;

impl Kind for FilterKind {
    type Config = FilterConfig;

    fn info(&self) -> KindInfo {
        builtin_info(
            "filter",
            Role::Operator,
            false,
            "The rows for which a condition holds (SQL's `WHERE`)",
            FilterConfig::FIELDS,
        )
        .with_output(OutputSchema::FromConfig)
    }

    fn config(&self, config: &OperatorConfig) -> Result<FilterConfig, ConfigFieldError> {
        FilterConfig::from_map(config)
    }

    fn output(&self, config: &FilterConfig, inputs: &[Vec<Column>]) -> Option<Result<Vec<Column>, ConfigFieldError>> {
        let first = inputs.first().map(Vec::as_slice).unwrap_or_default();
        Some(
            weir_sql::expr::check_condition(&config.condition, first)
                .map(|_| first.to_vec())
                .map_err(|e| field_err("where", e.to_string())),
        )
    }

    fn build(&self, config: FilterConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Operator(Box::new(Filter::new(config))))
    }
}

/// The `project` kind: `SELECT … WHERE …` over each batch, optionally keying the rows.
pub struct ProjectKind;

impl Kind for ProjectKind {
    type Config = ProjectConfig;

    fn info(&self) -> KindInfo {
        builtin_info(
            "project",
            Role::Operator,
            false,
            "`SELECT … WHERE …` over each batch, optionally keying the rows",
            ProjectConfig::FIELDS,
        )
        .with_output(OutputSchema::FromConfig)
    }

    fn config(&self, config: &OperatorConfig) -> Result<ProjectConfig, ConfigFieldError> {
        ProjectConfig::from_map(config)
    }

    fn output(&self, config: &ProjectConfig, inputs: &[Vec<Column>]) -> Option<Result<Vec<Column>, ConfigFieldError>> {
        Some(config.output(inputs.first().map(Vec::as_slice).unwrap_or_default()))
    }

    fn build(&self, config: ProjectConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Operator(Box::new(Project::new(config))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::batch::{keys, with_key_group};
    use crate::api::operator::RuntimeInfo;
    use crate::builtins::text::FileFormat;
    use crate::builtins::text::LineWriter;
    use arrow_array::cast::AsArray;
    use arrow_array::{Int32Array, Int64Array, StringArray, TimestampMillisecondArray, UInt16Array};

    /// Three events of a nexmark-like stream, as a key-by edge delivers them (with a key-group column).
    fn events() -> RecordBatch {
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("event_type", Arc::new(Int32Array::from(vec![2, 0, 2]))),
            ("bid_auction", Arc::new(Int64Array::from(vec![Some(246), None, Some(1000)]))),
            ("bid_price", Arc::new(Int64Array::from(vec![Some(200), None, Some(7)]))),
            ("person_state", Arc::new(StringArray::from(vec![None, Some("OR"), None]))),
            ("_event_time", Arc::new(TimestampMillisecondArray::from(vec![10, 20, 30]))),
        ];
        let b = RecordBatch::try_from_iter(columns).unwrap();
        let schema = with_key_group(&b.schema());
        let mut c = b.columns().to_vec();
        c.push(Arc::new(UInt16Array::from(vec![1, 2, 3])));
        RecordBatch::try_new(schema, c).unwrap()
    }

    fn run(op: &mut dyn Operator, batch: &RecordBatch) -> Result<Vec<RecordBatch>, OperatorError> {
        let info = RuntimeInfo::for_test(0, 1);
        let mut got = Vec::new();
        let mut sink = |b: RecordBatch| {
            got.push(b);
            Ok(())
        };
        let mut out = Collector::new(&mut sink);
        op.process_batch(batch, &mut ProcessContext::new(&info, None), &mut out)?;
        out.flush()?;
        drop(out);
        Ok(got)
    }

    fn text(batches: &[RecordBatch]) -> String {
        let mut s = String::new();
        for b in batches {
            let mut w = LineWriter::new(b, FileFormat::Text).unwrap();
            for row in 0..b.num_rows() {
                w.write_row(b, row, &mut s);
            }
        }
        s
    }

    fn config(pairs: &[(&str, &str)]) -> OperatorConfig {
        pairs.iter().map(|(k, v)| (k.to_string(), weir_common::job::kind::ConfigValue::from(*v))).collect()
    }

    #[test]
    fn project_selects_computes_keys_and_keeps_the_event_time() {
        let cfg = ProjectConfig::from_map(&config(&[
            ("where", "event_type = 2"),
            ("select", "bid_auction AS auction, 0.908 * bid_price AS price"),
            ("key", "bid_auction"),
        ]))
        .unwrap();
        let got = run(&mut Project::new(cfg), &events()).unwrap();
        assert_eq!(text(&got), "246,246,181.600\n1000,1000,6.356\n");
        let b = &got[0];
        let names: Vec<String> = b.schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, vec!["key", "auction", "price", "_event_time"]);
        assert_eq!(keys(b).unwrap().value(1), 1000i64.to_be_bytes());
        let times =
            b.column_by_name("_event_time").unwrap().as_primitive::<arrow_array::types::TimestampMillisecondType>();
        assert_eq!(times.values().to_vec(), vec![10, 30]);
        // Nothing passes: nothing is emitted.
        let none = ProjectConfig::from_map(&config(&[("where", "event_type = 9"), ("select", "*")])).unwrap();
        assert!(run(&mut Project::new(none), &events()).unwrap().is_empty());
    }

    #[test]
    fn filter_keeps_whole_rows_where_the_condition_is_true() {
        let cfg = FilterConfig::from_map(&config(&[("where", "MOD(bid_auction, 123) = 0 OR person_state IN ('OR')")]))
            .unwrap();
        let got = run(&mut Filter::new(cfg), &events()).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].num_rows(), 2);
        assert_eq!(got[0].schema(), events().schema());
        let bad = FilterConfig::from_map(&config(&[("where", "bid_price + 1")])).unwrap();
        let e = run(&mut Filter::new(bad), &events()).unwrap_err().to_string();
        assert!(e.contains("config.where") && e.contains("must be a condition"), "{e}");
    }

    #[test]
    fn a_null_key_fails_with_a_reason() {
        let cfg = ProjectConfig::from_map(&config(&[("select", "*"), ("key", "bid_auction")])).unwrap();
        let e = run(&mut Project::new(cfg), &events()).unwrap_err().to_string();
        assert!(e.contains("null"), "{e}");
    }
}
