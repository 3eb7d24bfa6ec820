//! Window Top-N (Flink's): `ROW_NUMBER()` or `RANK() OVER (PARTITION BY window_start, window_end[, k] ORDER BY
//! v DESC)` kept where the number is at most N, over a `TUMBLE`'s rows or a window aggregate's — a `window-top`,
//! which keeps only the rows that still rank per key and window and emits them when the window ends.

use super::window::{ends_window, instant_windows};
use super::*;
use datafusion_expr::logical_plan::{Filter, Window};
use datafusion_expr::{ExprSchemable, WindowFunctionDefinition};

/// The column standing for the rank of a Top-N that keeps more than one row per partition: `window-top` emits
/// the rows without it, so a query that reads it is refused by name (see [`reads_rank`]).
const RANK_COLUMN: &str = "the rank of a Top-N";

/// Whether `e` reads the rank of a Top-N that keeps more than one row per partition.
pub(super) fn reads_rank(e: &Expr) -> bool {
    e.column_refs().iter().any(|c| c.relation.is_none() && c.name == RANK_COLUMN)
}

/// The window node column `i` of `plan`'s output is a function of, traced through aliases and projections that
/// only rename.
fn trace_window(plan: &LogicalPlan, i: usize) -> Option<&Window> {
    match plan {
        LogicalPlan::SubqueryAlias(a) => trace_window(&a.input, i),
        LogicalPlan::Projection(p) => match p.expr.get(i)?.clone().unalias_nested().data {
            Expr::Column(c) => trace_window(&p.input, p.input.schema().index_of_column(&c).ok()?),
            _ => None,
        },
        LogicalPlan::Window(w) => (i >= w.input.schema().fields().len()).then_some(w),
        _ => None,
    }
}

/// `n <= N`, `n < N` or `n = 1`, either way round, on a column of `schema`: that column's index and N.
fn rank_limit(e: &Expr, schema: &DFSchema) -> Option<(usize, i64)> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = e else { return None };
    // The planner compares the number (an unsigned BIGINT) and N as DECIMALs.
    fn uncast(e: &Expr) -> &Expr {
        match e {
            Expr::Cast(c) => &c.expr,
            Expr::TryCast(c) => &c.expr,
            other => other,
        }
    }
    let (column, op, v) = match (uncast(left), uncast(right)) {
        (Expr::Column(c), Expr::Literal(v, _)) => (c, *op, v),
        (Expr::Literal(v, _), Expr::Column(c)) => (c, op.swap()?, v),
        _ => return None,
    };
    let ScalarValue::Int64(Some(n)) = v.cast_to(&DataType::Int64).ok()? else { return None };
    let top = match op {
        Operator::LtEq => n,
        Operator::Lt => n.checked_sub(1)?,
        Operator::Eq if n == 1 => 1,
        _ => return None,
    };
    Some((schema.index_of_column(column).ok()?, top))
}

/// `plan`'s output as expressions, where `window`'s output is `at_window` and `plan` is `window` under aliases
/// and projections (as [`trace_window`] found it).
fn above(plan: &LogicalPlan, window: &Window, at_window: &[Expr]) -> Result<Vec<Expr>, SqlError> {
    match plan {
        LogicalPlan::SubqueryAlias(a) => above(&a.input, window, at_window),
        LogicalPlan::Projection(p) => {
            let inner = above(&p.input, window, at_window)?;
            p.expr.iter().map(|e| substitute(e.clone().unalias_nested().data, p.input.schema(), &inner)).collect()
        }
        LogicalPlan::Window(w) if std::ptr::eq(w, window) => Ok(at_window.to_vec()),
        _ => Err(SqlError::plain("a Top-N's rows: a step between the ranking and its filter Weir cannot follow")),
    }
}

impl Job<'_> {
    /// A filter keeping the rows whose `ROW_NUMBER()` or `RANK()` is at most N, as a `window-top` (the filter's
    /// other conditions apply to its rows); `None` where the filter is on no such number.
    pub(super) fn top_n(&mut self, f: &Filter) -> Result<Option<Collapsed>, SqlError> {
        let parts = split_conjunction(&f.predicate);
        let found = parts.iter().enumerate().find_map(|(k, p)| {
            let (i, top) = rank_limit(p, f.input.schema())?;
            Some((k, top, trace_window(&f.input, i)?))
        });
        let Some((limit, top, w)) = found else { return Ok(None) };
        let top = u64::try_from(top).ok().filter(|&t| t > 0).ok_or_else(|| {
            SqlError::plain(format!("{}: the filter keeps no row", parts[limit].clone().unalias_nested().data))
        })?;
        let [call] = w.window_expr.as_slice() else {
            return Err(SqlError::plain("a Top-N whose SELECT has other OVER functions is not supported yet"));
        };
        let Expr::WindowFunction(fun) = call.clone().unalias_nested().data else {
            return Err(SqlError::plain(format!("{call} is not a Top-N's ranking Weir computes")));
        };
        let row_number = match (&fun.fun, fun.fun.name()) {
            (WindowFunctionDefinition::WindowUDF(_), "row_number") => true,
            (WindowFunctionDefinition::WindowUDF(_), "rank") => false,
            (_, other) => {
                return Err(SqlError::plain(format!(
                    "{}() <= N is not supported yet (ROW_NUMBER and RANK are)",
                    other.to_uppercase()
                )))
            }
        };
        let p = &fun.params;
        let c = self.collapse(&w.input)?;
        if c.input.updating() {
            return Err(SqlError::plain(
                "a Top-N of an updating table (the result of a GROUP BY without a window) is not supported yet",
            ));
        }
        let in_schema = w.input.schema();
        let order = match p.order_by.as_slice() {
            [o] if !o.asc => &o.expr,
            _ => {
                return Err(SqlError::plain(
                    "a Top-N orders by one column, descending (the largest first), in Weir for now",
                ))
            }
        };
        let order_type = order.get_type(in_schema).map_err(df)?;
        if !order_type.is_integer() {
            return Err(SqlError::plain(format!(
                "a Top-N ordered by a {order_type} is not supported yet (by an integer is)"
            )));
        }
        let by = substitute(order.clone(), in_schema, &c.exprs)?;
        let partition: Vec<Expr> =
            p.partition_by.iter().map(|e| substitute(e.clone(), in_schema, &c.exprs)).collect::<Result<_, _>>()?;
        let ranked = if row_number { "ROW_NUMBER" } else { "RANK" };
        let unwindowed = || {
            SqlError::plain(format!(
                "{ranked}() OVER (PARTITION BY …): a Top-N without a window (its result updates) is not supported \
                 yet: partition by a TUMBLE's or a window aggregate's window_start and window_end"
            ))
        };
        // The windows: a TUMBLE's, or those of the window aggregate whose rows these are.
        let (keys, mut config, tumble) = match &c.window {
            Some(read) => {
                let (ws, we) = (window_column("window_start"), window_column("window_end"));
                if !partition.contains(&ws) || !partition.contains(&we) {
                    return Err(unwindowed());
                }
                let windows = &self.windows[&read.name];
                if !matches!(windows.shape, Shape::Tumbling { .. }) {
                    return Err(SqlError::plain(format!(
                        "a Top-N of {}'s rows is not supported yet (of a TUMBLE's, or of a window aggregate's, is)",
                        windows.call.function.name()
                    )));
                }
                if windows.offset_ms != 0 {
                    return Err(SqlError::plain("a Top-N of a TUMBLE with an offset is not supported yet"));
                }
                self.window_read(&c, &read.name, &read.time)?;
                let keys: Vec<Expr> = partition.iter().filter(|e| which_window_column(e).is_none()).cloned().collect();
                if keys.iter().chain([&by]).any(reads_window_column) {
                    return Err(SqlError::plain("a Top-N: an expression of the window is not supported yet"));
                }
                (keys, windows.config(), true)
            }
            None => {
                let Input::Operator { times, .. } = &c.input else { return Err(unwindowed()) };
                if !partition.iter().any(|e| ends_window(e, times)) {
                    return Err(unwindowed());
                }
                let keys = partition.iter().filter(|e| !ends_window(e, times)).cloned().collect();
                (keys, instant_windows(), false)
            }
        };
        // The rows' columns as `t0`, `t1`, … (a TUMBLE's window columns are the `window-top`'s own), and the
        // ranked value among them.
        let mut names = Vec::new();
        let mut exprs = Vec::new();
        let mut fields = Vec::new();
        let mut at_window = Vec::new();
        for (i, e) in c.exprs.iter().enumerate() {
            match which_window_column(e) {
                Some("window_time") if tumble => at_window.push(window_time()),
                Some(wc) if tumble => at_window.push(col(wc)),
                _ if tumble && reads_window_column(e) => {
                    return Err(SqlError::plain("a Top-N: an expression of the window is not supported yet"))
                }
                _ => {
                    let name = format!("t{}", names.len());
                    at_window.push(plain_column(&name));
                    fields.push(Field::new(&name, in_schema.field(i).data_type().clone(), true));
                    names.push(name);
                    exprs.push(e.clone());
                }
            }
        }
        let by_name = match exprs.iter().position(|e| *e == by) {
            Some(i) => names[i].clone(),
            None => {
                let name = format!("t{}", names.len());
                fields.push(Field::new(&name, order_type.clone(), true));
                names.push(name.clone());
                exprs.push(by);
                name
            }
        };
        // The rows' time: the window's end − 1 (a TUMBLE's), or the rows' own.
        let rows = Collapsed { input: c.input, window: None, predicate: c.predicate, exprs };
        let times: Vec<(String, i64)> = if tumble {
            vec![("window_end".to_string(), 1)]
        } else {
            self.event_times(&rows)?.into_iter().map(|(i, k)| (names[i].clone(), k)).collect()
        };
        config.insert("by".to_string(), ConfigValue::from(by_name));
        config.insert("top".to_string(), ConfigValue::from(top));
        if row_number {
            config.insert("numbering".to_string(), ConfigValue::from("row_number"));
        }
        let uid = self.keyed_step("top", rows, &names, keys, "window-top", config)?;
        fields.push(Field::new("window_start", DataType::Timestamp(TimeUnit::Millisecond, None), false));
        fields.push(Field::new("window_end", DataType::Timestamp(TimeUnit::Millisecond, None), false));
        // The rank: 1 where only the first rank is kept; else a column no operator has, which a query may not read.
        let rank_type = w.schema.field(w.schema.fields().len() - 1).data_type().clone();
        let rank = if top == 1 {
            Expr::Literal(ScalarValue::UInt64(Some(1)), None).cast_to(&rank_type, &w.schema).map_err(df)?
        } else {
            plain_column(RANK_COLUMN)
        };
        at_window.push(rank);
        let out = above(&f.input, w, &at_window)?;
        let predicate = (parts.iter().enumerate().filter(|(k, _)| *k != limit))
            .map(|(_, part)| substitute((*part).clone().unalias_nested().data, f.input.schema(), &out))
            .collect::<Result<_, _>>()?;
        let schema = Arc::new(DFSchema::try_from(Schema::new(fields)).map_err(df)?);
        let input = Input::Operator { uid, schema, times, updating: false };
        Ok(Some(Collapsed { input, window: None, predicate, exprs: out }))
    }
}
