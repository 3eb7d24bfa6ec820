//! Rows joined back to their window's maximum (Nexmark q5: `C JOIN (SELECT MAX(num) AS maxn, window_start,
//! window_end FROM C GROUP BY window_start, window_end) AS M ON the windows AND C.num >= M.maxn`): the rows of
//! rank 1 by that column in their window, which a `window-top` finds without keeping every row until the
//! maximum is known.

use super::window::{ends_window, instant_windows};
use super::*;
use datafusion_expr::logical_plan::Join;

/// Where a column of a plan's output comes from, through aliases and projections of columns.
enum Traced<'p> {
    /// Grouping expression `n` of an aggregate.
    Group(usize),
    /// The aggregate's (only) aggregate call.
    Aggregate(&'p datafusion_expr::Aggregate),
}

/// Column `i` of `plan`'s output traced to the aggregate it comes from, if it does through aliases and
/// projections that only rename.
fn trace(plan: &LogicalPlan, i: usize) -> Option<Traced<'_>> {
    match plan {
        LogicalPlan::SubqueryAlias(a) => trace(&a.input, i),
        LogicalPlan::Projection(p) => match p.expr.get(i)?.clone().unalias_nested().data {
            Expr::Column(c) => trace(&p.input, p.input.schema().index_of_column(&c).ok()?),
            _ => None,
        },
        LogicalPlan::Aggregate(a) if a.aggr_expr.len() == 1 => {
            if i < a.group_expr.len() {
                Some(Traced::Group(i))
            } else {
                (i == a.group_expr.len()).then_some(Traced::Aggregate(a))
            }
        }
        _ => None,
    }
}

impl Job<'_> {
    /// The join as a `window-top`, where it is one side's rows joined with the maximum of a column over the
    /// same rows per window (grouped by the window's end and, optionally, other columns, all of them equal
    /// across the join), on that column `>=` (or `=`) the maximum; `None` where it is not.
    pub(super) fn window_top(&mut self, j: &Join) -> Result<Option<Collapsed>, SqlError> {
        if j.join_type != datafusion_common::JoinType::Inner {
            return Ok(None);
        }
        let sides = [&j.left, &j.right];
        let index_in = |e: &Expr, plan: &LogicalPlan| match e {
            Expr::Column(c) => plan.schema().index_of_column(c).ok(),
            _ => None,
        };
        // The comparison of the rows' column with the maximum: (rows side, v's index, the maximum's aggregate, the
        // join key it is, if the join's equalities took it).
        let found = match &j.filter {
            Some(filter) => {
                let [compare] = split_conjunction(filter)[..] else { return Ok(None) };
                let Expr::BinaryExpr(BinaryExpr { left: a, op, right: b }) = compare else { return Ok(None) };
                let left_width = j.left.schema().fields().len();
                // A joined column: its side and its index there.
                let side_of = |e: &Expr| -> Option<(usize, usize)> {
                    let Expr::Column(c) = e else { return None };
                    let i = j.schema.index_of_column(c).ok()?;
                    Some(if i < left_width { (0, i) } else { (1, i - left_width) })
                };
                let (Some(a), Some(b)) = (side_of(a), side_of(b)) else { return Ok(None) };
                // `rows.v >= max.m`, `max.m <= rows.v` or `=` either way round.
                let orders = match op {
                    Operator::GtEq => vec![(a, b)],
                    Operator::LtEq => vec![(b, a)],
                    Operator::Eq => vec![(a, b), (b, a)],
                    _ => Vec::new(),
                };
                orders.into_iter().find_map(|(r, x)| match trace(sides[x.0], x.1) {
                    Some(Traced::Aggregate(agg)) if r.0 != x.0 => Some((r.0, r.1, agg, None)),
                    _ => None,
                })
            }
            // `rows.v = max.m` among the join's equalities.
            None => j.on.iter().enumerate().find_map(|(k, (l, r))| {
                let (li, ri) = (index_in(l, &j.left)?, index_in(r, &j.right)?);
                match (trace(&j.left, li), trace(&j.right, ri)) {
                    (_, Some(Traced::Aggregate(agg))) => Some((0, li, agg, Some(k))),
                    (Some(Traced::Aggregate(agg)), _) => Some((1, ri, agg, Some(k))),
                    _ => None,
                }
            }),
        };
        let Some((rows, v, agg, compared_key)) = found else { return Ok(None) };
        let max_side = 1 - rows;
        let Ok(call) = aggregate_call(&agg.aggr_expr[0], agg.input.schema(), "") else { return Ok(None) };
        let (Some(arg), "max") = (call.arg, call.name) else { return Ok(None) };
        // Both sides read the same rows: the same operator's output under the same conditions (the planner adds
        // an operator that would be the same as one it has only once).
        let t = self.collapse(sides[rows])?;
        let inner = self.collapse(&agg.input)?;
        let times = match (&t.input, &inner.input) {
            (Input::Operator { uid: x, times, updating: false, .. }, Input::Operator { uid: y, .. })
                if x == y && t.predicate == inner.predicate && t.window.is_none() && inner.window.is_none() =>
            {
                times.clone()
            }
            _ => return Ok(None),
        };
        if substitute(arg, agg.input.schema(), &inner.exprs)? != t.exprs[v] {
            return Ok(None);
        }
        // The maximum's grouping, over the rows' operator: each expression equal across the join to a column of the
        // rows (`row_of[g]`), one of them the window's end.
        let groups = grouping(agg, &inner)?;
        let mut row_of: Vec<Option<usize>> = vec![None; groups.len()];
        for (k, (l, r)) in j.on.iter().enumerate() {
            if compared_key == Some(k) {
                continue;
            }
            let (rows_e, max_e) = if rows == 0 { (l, r) } else { (r, l) };
            let (Some(ri), Some(mi)) = (index_in(rows_e, sides[rows]), index_in(max_e, sides[max_side])) else {
                return Ok(None);
            };
            let Some(Traced::Group(g)) = trace(sides[max_side], mi) else { return Ok(None) };
            if groups[g] != t.exprs[ri] {
                return Ok(None);
            }
            row_of[g] = Some(ri);
        }
        let is_end = |e: &Expr| ends_window(e, &times);
        if row_of.contains(&None) || !groups.iter().any(is_end) {
            return Ok(None);
        }
        // The rows keyed by the other grouping expressions, ranked in windows of 1 ms at `window_end` − 1.
        let keys: Vec<Expr> = groups.iter().filter(|g| !is_end(g)).cloned().collect();
        let names: Vec<String> = (0..t.exprs.len()).map(|i| format!("t{i}")).collect();
        let time_names: Vec<(String, i64)> =
            self.event_times(&t)?.into_iter().map(|(i, k)| (names[i].clone(), k)).collect();
        let row_schema = sides[rows].schema().clone();
        let mut config = instant_windows();
        config.insert("by".to_string(), ConfigValue::from(names[v].clone()));
        config.insert("top".to_string(), ConfigValue::from(1));
        let uid = self.keyed_step("top", t, &names, keys, "window-top", config)?;
        // The joined row: the ranked row's columns; the maximum's are its value and the grouping it equals.
        let mut fields: Vec<Field> =
            row_schema.fields().iter().zip(&names).map(|(f, n)| Field::new(n, f.data_type().clone(), true)).collect();
        fields.push(Field::new("window_start", DataType::Timestamp(TimeUnit::Millisecond, None), false));
        fields.push(Field::new("window_end", DataType::Timestamp(TimeUnit::Millisecond, None), false));
        let max_width = sides[max_side].schema().fields().len();
        let mut from_max = Vec::with_capacity(max_width);
        for i in 0..max_width {
            let e = match trace(sides[max_side], i) {
                Some(Traced::Aggregate(_)) => names[v].clone(),
                Some(Traced::Group(g)) => match row_of[g] {
                    Some(ri) => names[ri].clone(),
                    None => return Err(SqlError::plain("the window's maximum: a grouping column not joined on")),
                },
                None => return Err(SqlError::plain("the window's maximum: a column Weir cannot trace")),
            };
            from_max.push(plain_column(e));
        }
        let from_rows: Vec<Expr> = names.iter().map(plain_column).collect();
        let exprs = if rows == 0 { [from_rows, from_max].concat() } else { [from_max, from_rows].concat() };
        let schema = Arc::new(DFSchema::try_from(Schema::new(fields)).map_err(df)?);
        let input = Input::Operator { uid, schema, times: time_names, updating: false };
        Ok(Some(Collapsed { input, window: None, predicate: Vec::new(), exprs }))
    }
}
