//! Flink's window table-valued functions (`TUMBLE`, `HOP`, `SESSION`): the windowed table a query reads — the
//! table's columns, then `window_start`, `window_end` and `window_time` — and what a `GROUP BY window_start,
//! window_end` over it becomes: a `window-aggregate`, whose windows, aggregate and output columns are decided
//! here.

use super::connectors::ConfigValue;
use super::error::SqlError;
use super::statements::{WindowCall, WindowFunction};
use crate::expr::context::{Catalog, Functions};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion_common::{Column, DFSchema, ScalarValue, TableReference};
use datafusion_expr::planner::ContextProvider;
use datafusion_expr::{cast, col, lit, Expr};
use datafusion_sql::planner::{PlannerContext, SqlToRel};
use sqlparser::ast::{
    visit_expressions_mut, Expr as AstExpr, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, Ident,
    ObjectName, ObjectNamePart, Select, Statement, TableFactor, TableWithJoins, VisitMut, VisitorMut,
};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;

/// The qualifier marking a window column in the expressions of a windowed read (no table can be called this).
const WINDOW_RELATION: &str = "$window";

/// The columns a window function adds to its table's.
pub(crate) const WINDOW_COLUMNS: [&str; 3] = ["window_start", "window_end", "window_time"];

/// The windows of a window function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// `TUMBLE`: windows of this many ms, one after another.
    Tumbling { size_ms: i64 },
    /// `HOP`: windows of `size_ms`, one starting every `slide_ms`.
    Sliding { size_ms: i64, slide_ms: i64 },
    /// `SESSION`: a window per key, closed by a gap of `gap_ms` without rows.
    Session { gap_ms: i64 },
}

/// A window function a query reads from, resolved against the script's tables and views.
#[derive(Clone, Debug)]
pub(crate) struct WindowTable {
    /// The call, as the script wrote it.
    pub call: WindowCall,
    /// Its windows.
    pub shape: Shape,
    /// Shift of tumbling and sliding windows from the epoch, ms.
    pub offset_ms: i64,
    /// The windowed table's own columns, in order.
    pub columns: Vec<String>,
    /// The columns the query reads: the table's, then [`WINDOW_COLUMNS`].
    pub schema: SchemaRef,
}

fn millis() -> DataType {
    DataType::Timestamp(TimeUnit::Millisecond, None)
}

/// An interval literal (`INTERVAL '10' SECOND`) in ms; `None` for anything else, or months (not a fixed length).
pub(crate) fn interval_ms(e: &Expr) -> Option<i64> {
    match e {
        Expr::Literal(ScalarValue::IntervalMonthDayNano(Some(v)), _) if v.months == 0 => {
            Some(i64::from(v.days) * 86_400_000 + v.nanoseconds / 1_000_000)
        }
        Expr::Literal(ScalarValue::IntervalDayTime(Some(v)), _) => {
            Some(i64::from(v.days) * 86_400_000 + i64::from(v.milliseconds))
        }
        _ => None,
    }
}

/// Resolves a window function's call: its table, time column, partition columns and sizes.
pub(crate) fn window_table(catalog: &Catalog<'_>, call: WindowCall) -> Result<WindowTable, SqlError> {
    let f = call.function.name();
    let table = &call.table;
    let source = catalog
        .get_table_source(TableReference::bare(table.as_str()))
        .map_err(|_| SqlError::plain(format!("{f}(TABLE {table} …): no table or view {table}")))?;
    let schema = source.schema();
    let time = schema.field_with_name(&call.time_column).map_err(|_| {
        SqlError::plain(format!("{f}: DESCRIPTOR({}): {table} has no column {}", call.time_column, call.time_column))
    })?;
    if *time.data_type() != millis() {
        return Err(SqlError::plain(format!(
            "{f}: DESCRIPTOR({}) is a {}, not a time attribute (a TIMESTAMP(3) with a WATERMARK)",
            call.time_column,
            time.data_type()
        )));
    }
    for p in &call.partition_by {
        if schema.field_with_name(p).is_err() {
            return Err(SqlError::plain(format!("{f}: PARTITION BY {p}: {table} has no column {p}")));
        }
    }
    let (least, most) = call.function.arity();
    if call.args.len() < least || call.args.len() > most {
        return Err(SqlError::plain(format!("{f} takes from {least} to {most} intervals, not {}", call.args.len())));
    }
    let functions = Functions::shared();
    let planner = SqlToRel::new_with_options(catalog, functions.parser_options());
    let empty = DFSchema::empty();
    let mut sizes = Vec::new();
    for (n, ast) in call.args.iter().enumerate() {
        let e = planner.sql_to_expr(ast.clone(), &empty, &mut PlannerContext::new())?;
        let ms = interval_ms(&e).ok_or_else(|| {
            SqlError::plain(format!(
                "{f}: argument {} is not an interval of fixed length, such as INTERVAL '10' SECOND",
                n + 3
            ))
        })?;
        sizes.push(ms);
    }
    let positive = |ms: i64, what: &str| {
        if ms > 0 {
            Ok(ms)
        } else {
            Err(SqlError::plain(format!("{f}: the {what} must be longer than 0 ms")))
        }
    };
    let (shape, offset_ms) = match call.function {
        WindowFunction::Tumble => (Shape::Tumbling { size_ms: positive(sizes[0], "size")? }, sizes.get(1)),
        WindowFunction::Hop => {
            let slide_ms = positive(sizes[0], "slide")?;
            (Shape::Sliding { size_ms: positive(sizes[1], "size")?, slide_ms }, sizes.get(2))
        }
        WindowFunction::Session => (Shape::Session { gap_ms: positive(sizes[0], "gap")? }, None),
        WindowFunction::Cumulate => return Err(SqlError::plain("CUMULATE windows are not supported yet")),
    };
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    for name in WINDOW_COLUMNS {
        if fields.iter().any(|x| x.name() == name) {
            return Err(SqlError::plain(format!(
                "{f}(TABLE {table} …): {table} has a column {name} already, which the window function adds"
            )));
        }
    }
    let columns = fields.iter().map(|x| x.name().clone()).collect();
    fields.extend(WINDOW_COLUMNS.map(|name| Field::new(name, millis(), false)));
    Ok(WindowTable {
        call,
        shape,
        offset_ms: offset_ms.copied().unwrap_or(0),
        columns,
        schema: Arc::new(Schema::new(fields)),
    })
}

impl WindowTable {
    /// The `window-aggregate` config of these windows (without the aggregate).
    pub fn config(&self) -> BTreeMap<String, ConfigValue> {
        self.shape.config(self.offset_ms)
    }
}

impl Shape {
    /// The config of windows of this shape shifted by `offset_ms`, as the window kinds read it: `window: {
    /// tumbling_ms }` (or the sliding or session fields), and `offset_ms` where it is not 0.
    pub fn config(self, offset_ms: i64) -> BTreeMap<String, ConfigValue> {
        let mut window = serde_yaml::Mapping::new();
        let mut set = |k: &str, v: i64| window.insert(ConfigValue::from(k), ConfigValue::from(v));
        match self {
            Shape::Tumbling { size_ms } => set("tumbling_ms", size_ms),
            Shape::Sliding { size_ms, slide_ms } => {
                set("sliding_ms", size_ms);
                set("slide_ms", slide_ms)
            }
            Shape::Session { gap_ms } => set("session_gap_ms", gap_ms),
        };
        let mut config = BTreeMap::from([("window".to_string(), ConfigValue::Mapping(window))]);
        if offset_ms != 0 {
            config.insert("offset_ms".into(), ConfigValue::from(offset_ms));
        }
        config
    }
}

/// A window column (`window_start`, …) in the expressions of a windowed read, before it is grouped by.
pub(crate) fn window_column(name: &str) -> Expr {
    Expr::Column(Column::new(Some(WINDOW_RELATION), name))
}

/// Which window column `e` is, if it is one.
pub(crate) fn which_window_column(e: &Expr) -> Option<&str> {
    match e {
        Expr::Column(c) if c.relation.as_ref().is_some_and(|r| r.table() == WINDOW_RELATION) => Some(&c.name),
        _ => None,
    }
}

/// Whether `e` reads a window column anywhere.
pub(crate) fn reads_window_column(e: &Expr) -> bool {
    e.column_refs().iter().any(|c| c.relation.as_ref().is_some_and(|r| r.table() == WINDOW_RELATION))
}

/// A SQL aggregate call, as the `window-aggregate` and `aggregate` kinds name it, and the column it reads.
#[derive(Debug)]
pub(crate) struct AggregateCall {
    /// count, sum, min, max or avg.
    pub name: &'static str,
    /// The column read (over the windowed table's columns); none for `COUNT(*)`.
    pub arg: Option<Expr>,
    /// Rows it skips: `COUNT(column)` counts the rows where the column is not null.
    pub skip_nulls: bool,
}

/// What computes a SQL aggregate call of the plan (`place` says where it is: "in a window", "in a GROUP BY"), or
/// why nothing can.
pub(crate) fn aggregate_call(e: &Expr, schema: &DFSchema, place: &str) -> Result<AggregateCall, SqlError> {
    let e = e.clone().unalias_nested().data;
    let Expr::AggregateFunction(f) = &e else {
        return Err(SqlError::plain(format!("{e} is not an aggregate call Weir's windows compute")));
    };
    let fname = f.func.name().to_lowercase();
    let p = &f.params;
    if p.distinct {
        return Err(SqlError::plain(format!("{}(DISTINCT …) {place} is not supported yet", fname.to_uppercase())));
    }
    if p.filter.is_some() || !p.order_by.is_empty() {
        return Err(SqlError::plain(format!(
            "{}(…) with FILTER or ORDER BY {place} is not supported yet",
            fname.to_uppercase()
        )));
    }
    let name = match fname.as_str() {
        "count" => "count",
        "sum" => "sum",
        "min" => "min",
        "max" => "max",
        "avg" => "avg",
        other => {
            return Err(SqlError::plain(format!(
                "{} {place} is not supported yet (COUNT, SUM, MIN, MAX and AVG are)",
                other.to_uppercase()
            )))
        }
    };
    let arg = match p.args.as_slice() {
        [] => None,
        [Expr::Literal(v, _)] if name == "count" && !v.is_null() => None,
        // DataFusion averages DOUBLEs; Flink's AVG of an integer is an integer, which the kinds compute.
        [Expr::Cast(c)]
            if name == "avg" && datafusion_expr::ExprSchemable::get_type(&*c.expr, schema)?.is_integer() =>
        {
            Some(c.expr.as_ref().clone())
        }
        [a] => Some(a.clone()),
        _ => return Err(SqlError::plain(format!("{} takes one argument", name.to_uppercase()))),
    };
    let skip_nulls = name == "count" && arg.is_some();
    if let (Some(a), false) = (&arg, name == "count") {
        let t = datafusion_expr::ExprSchemable::get_type(a, schema)?;
        if !t.is_integer() {
            return Err(SqlError::plain(format!(
                "{}({a}) of a {t} {place} is not supported yet: Weir aggregates integers",
                name.to_uppercase()
            )));
        }
    }
    Ok(AggregateCall { name, arg, skip_nulls })
}

/// A `window-aggregate`'s output columns: its key (the grouping column's value, as bytes), the window, the value.
pub(crate) fn window_aggregate_schema(name: &str) -> Result<Arc<DFSchema>, SqlError> {
    let value = if name == "avg" { DataType::Float64 } else { DataType::Int64 };
    let schema = Schema::new(vec![
        Field::new("key", DataType::Binary, false),
        Field::new("window_start", millis(), false),
        Field::new("window_end", millis(), false),
        Field::new("value", value, false),
    ]);
    Ok(Arc::new(DFSchema::try_from(schema)?))
}

/// How long a grouping column of type `t` is in a key of several (`KEY_INT`'s layout), if it can be in one.
fn key_part(t: &DataType) -> Option<&'static str> {
    match t {
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => Some("i"),
        DataType::Timestamp(TimeUnit::Millisecond, None) => Some("i"),
        DataType::Decimal128(..) => Some("d"),
        DataType::Boolean => Some("b"),
        DataType::Utf8 | DataType::Binary => Some("s"),
        _ => None,
    }
}

/// The grouping columns of types `types` read back from a `window-aggregate`'s key, in order.
pub(crate) fn key_columns(types: &[DataType]) -> Result<Vec<Expr>, SqlError> {
    let functions = Functions::shared();
    let refuse = |t: &DataType| SqlError::plain(format!("GROUP BY a {t} column in a window is not supported yet"));
    let parts: Vec<&str> = types.iter().map(|t| key_part(t).ok_or_else(|| refuse(t))).collect::<Result<_, _>>()?;
    let layout = parts.join(",");
    let mut out = Vec::new();
    for (n, t) in types.iter().enumerate() {
        let name = match t {
            DataType::Utf8 => "key_string",
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => "key_int",
            DataType::Timestamp(TimeUnit::Millisecond, None) => "key_int",
            other => return Err(refuse(other)),
        };
        let f = functions.scalar(name).ok_or_else(|| SqlError::plain(format!("no function {name}")))?;
        let args =
            if types.len() == 1 { vec![col("key")] } else { vec![col("key"), lit(layout.clone()), lit(n as i64 + 1)] };
        let e = f.call(args);
        out.push(if matches!(t, DataType::Int64 | DataType::Utf8) { e } else { cast(e, t.clone()) });
    }
    Ok(out)
}

/// `window_time`: the last instant of the window (Flink's rowtime of a window's result).
pub(crate) fn window_time() -> Expr {
    col("window_end") - lit(ScalarValue::new_interval_mdn(0, 0, 1_000_000))
}

/// Flink's legacy group windows — `GROUP BY TUMBLE(time, size)`, `HOP(time, slide, size)` or `SESSION(time,
/// gap)`, with `TUMBLE_START(…)`, `_END` and `_ROWTIME` in the select list — rewritten as the window functions
/// they are: the query reads `TABLE(TUMBLE(TABLE t, DESCRIPTOR(time), size))` and groups by `window_start,
/// window_end` (a legacy `SESSION` is per the query's other grouping columns, its `PARTITION BY`).
pub(crate) fn group_windows(statement: &mut Statement) -> Result<Vec<WindowCall>, SqlError> {
    let mut v = GroupWindows { calls: Vec::new(), error: None };
    let _ = VisitMut::visit(statement, &mut v);
    match v.error {
        Some(e) => Err(e),
        None => Ok(v.calls),
    }
}

struct GroupWindows {
    calls: Vec<WindowCall>,
    error: Option<SqlError>,
}

impl VisitorMut for GroupWindows {
    type Break = ();

    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<()> {
        match group_window(select) {
            Ok(call) => {
                self.calls.extend(call);
                ControlFlow::Continue(())
            }
            Err(e) => {
                self.error = Some(e);
                ControlFlow::Break(())
            }
        }
    }
}

/// A function call's name (one part) and its plain arguments.
fn call_of(e: &AstExpr) -> Option<(&Ident, Vec<&AstExpr>)> {
    let AstExpr::Function(f) = e else { return None };
    let [ObjectNamePart::Identifier(name)] = f.name.0.as_slice() else { return None };
    let FunctionArguments::List(list) = &f.args else { return None };
    let args = list
        .args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some((name, args))
}

fn legacy_function(name: &Ident) -> Option<WindowFunction> {
    if name.quote_style.is_some() {
        return None;
    }
    match name.value.to_ascii_uppercase().as_str() {
        "TUMBLE" => Some(WindowFunction::Tumble),
        "HOP" => Some(WindowFunction::Hop),
        "SESSION" => Some(WindowFunction::Session),
        _ => None,
    }
}

fn column_name(e: &AstExpr) -> Option<String> {
    match e {
        AstExpr::Identifier(i) => Some(i.value.clone()),
        AstExpr::CompoundIdentifier(parts) => parts.last().map(|i| i.value.clone()),
        _ => None,
    }
}

/// One `SELECT`'s group window rewritten, and the window function it reads now.
fn group_window(select: &mut Select) -> Result<Option<WindowCall>, SqlError> {
    let GroupByExpr::Expressions(items, _) = &mut select.group_by else { return Ok(None) };
    let windows: Vec<usize> = (0..items.len())
        .filter(|&i| call_of(&items[i]).is_some_and(|(name, _)| legacy_function(name).is_some()))
        .collect();
    let [i] = windows.as_slice() else {
        return match windows.len() {
            0 => Ok(None),
            _ => Err(SqlError::plain("GROUP BY has more than one group window")),
        };
    };
    let item = items.remove(*i);
    let Some((name, args)) = call_of(&item) else { return Ok(None) };
    let function = legacy_function(name).ok_or_else(|| SqlError::plain("not a group window"))?;
    let f = function.name();
    let at = name.span.start;
    let usage = match function {
        WindowFunction::Session => "GROUP BY SESSION(time column, gap)",
        WindowFunction::Hop => "GROUP BY HOP(time column, slide, size [, offset])",
        _ => "GROUP BY TUMBLE(time column, size [, offset])",
    };
    let time_column = args.first().and_then(|a| column_name(a));
    let (Some(time_column), Some(sizes)) = (time_column, args.get(1..)) else {
        return Err(SqlError::at(at, format!("Weir reads {usage}")));
    };
    let partition_by = match function {
        WindowFunction::Session => items
            .iter()
            .map(|e| {
                column_name(e).ok_or_else(|| {
                    SqlError::at(
                        at,
                        format!("GROUP BY SESSION(…) with {e}: a legacy session window groups by columns only"),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
        _ => Vec::new(),
    };
    let table = match select.from.as_mut_slice() {
        [TableWithJoins { relation: TableFactor::Table { name, args: None, .. }, joins }] if joins.is_empty() => {
            let table = match name.0.as_slice() {
                [ObjectNamePart::Identifier(t)] => t.value.clone(),
                _ => return Err(SqlError::at(at, format!("{usage} reads a table or view by its name"))),
            };
            let call = format!("{f}({table})@{}:{}", at.line, at.column);
            *name = ObjectName::from(vec![Ident::with_quote('`', call)]);
            table
        }
        _ => {
            return Err(SqlError::at(
                at,
                format!("{usage} reads one table or view: join or nest with the TABLE({f}(…)) window function instead"),
            ))
        }
    };
    items.push(AstExpr::Identifier(Ident::new("window_start")));
    items.push(AstExpr::Identifier(Ident::new("window_end")));
    // What `_ROWTIME` reads: one value per window, as window_end is.
    items.push(AstExpr::Identifier(Ident::new("window_time")));
    let mut refused: Option<SqlError> = None;
    let mut properties = |e: &mut AstExpr| {
        if let Some((name, _)) = call_of(e) {
            let upper = name.value.to_ascii_uppercase();
            if let Some(property) = upper.strip_prefix(f).and_then(|p| p.strip_prefix('_')) {
                let column = match property {
                    "START" => "window_start",
                    "END" => "window_end",
                    "ROWTIME" => "window_time",
                    _ => {
                        refused = Some(SqlError::at(name.span.start, format!("{upper} is not supported yet")));
                        return ControlFlow::Break(());
                    }
                };
                *e = AstExpr::Identifier(Ident::new(column));
            }
        }
        ControlFlow::Continue(())
    };
    let _ = visit_expressions_mut(&mut select.projection, &mut properties);
    let _ = visit_expressions_mut(&mut select.having, &mut properties);
    if let Some(e) = refused {
        return Err(e);
    }
    let call_name = format!("{f}({table})@{}:{}", at.line, at.column);
    let args = sizes.iter().map(|e| (*e).clone()).collect();
    Ok(Some(WindowCall { name: call_name, function, table, partition_by, time_column, args, at }))
}
