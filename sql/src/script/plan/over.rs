//! `OVER` aggregates (Flink's over aggregation): per partition, in event-time order, each row with aggregates
//! over it and the rows before it, `ROWS BETWEEN n PRECEDING AND CURRENT ROW` or `UNBOUNDED PRECEDING`.

use super::group::aggregate_input;
use super::*;
use datafusion_expr::{WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition};

impl Job<'_> {
    /// A `SELECT` with `OVER` aggregates: a `project` keying the rows by the `PARTITION BY` (it selects the input's
    /// columns as `c0`, `c1`, … and the aggregated expressions as `a0`, …), and an `over`, which emits each row,
    /// once the watermark has passed it, with the aggregates as `v0`, ….
    pub(super) fn over(&mut self, w: &datafusion_expr::logical_plan::Window) -> Result<Collapsed, SqlError> {
        let c = self.collapse(&w.input)?;
        if c.input.updating() {
            return Err(SqlError::plain(
                "OVER over an updating table (the result of a GROUP BY without a window) is not supported yet",
            ));
        }
        let in_schema = w.input.schema();
        let times = self.event_times(&c)?;
        let columns = c.exprs.len();
        let mut names: Vec<String> = (0..columns).map(|i| format!("c{i}")).collect();
        let mut exprs = c.exprs.clone();
        let mut partition: Option<Vec<Expr>> = None;
        let mut frame: Option<Option<u64>> = None;
        let mut aggregates = Vec::new();
        for (i, e) in w.window_expr.iter().enumerate() {
            let Expr::WindowFunction(f) = e.clone().unalias_nested().data else {
                return Err(SqlError::plain(format!("{e} is not an OVER aggregate Weir computes")));
            };
            let p = &f.params;
            let WindowFunctionDefinition::AggregateUDF(udaf) = &f.fun else {
                let name = f.fun.name().to_uppercase();
                let top_n = if matches!(name.as_str(), "ROW_NUMBER" | "RANK") {
                    ", but as a window Top-N: the rows where it is at most N, partitioned by a window"
                } else {
                    ""
                };
                return Err(SqlError::plain(format!(
                    "{name}() OVER (…) is not supported yet{top_n} (COUNT, SUM, MIN, MAX and AVG are)"
                )));
            };
            let by = p
                .partition_by
                .iter()
                .map(|x| substitute(x.clone(), in_schema, &c.exprs))
                .collect::<Result<Vec<_>, _>>()?;
            if partition.get_or_insert_with(|| by.clone()) != &by {
                return Err(SqlError::plain(
                    "OVER windows of different PARTITION BY in one SELECT are not supported yet",
                ));
            }
            let by_time = match p.order_by.as_slice() {
                [s] if s.asc => {
                    let o = substitute(s.expr.clone(), in_schema, &c.exprs)?;
                    times.iter().any(|(t, _)| c.exprs[*t] == o)
                }
                _ => false,
            };
            if !by_time {
                return Err(SqlError::plain(
                    "OVER: ORDER BY the rows' event time (a time attribute), ascending, as Flink requires",
                ));
            }
            let wf = &p.window_frame;
            let preceding = match (&wf.units, &wf.start_bound, &wf.end_bound) {
                (WindowFrameUnits::Rows, WindowFrameBound::Preceding(v), WindowFrameBound::CurrentRow)
                    if v.is_null() =>
                {
                    None
                }
                (WindowFrameUnits::Rows, WindowFrameBound::Preceding(v), WindowFrameBound::CurrentRow) => {
                    let n = v.cast_to(&DataType::UInt64).ok().and_then(|n| match n {
                        ScalarValue::UInt64(n) => n,
                        _ => None,
                    });
                    Some(n.ok_or_else(|| SqlError::plain(format!("OVER: {v} PRECEDING is not a count of rows")))?)
                }
                (WindowFrameUnits::Rows, WindowFrameBound::CurrentRow, WindowFrameBound::CurrentRow) => Some(0),
                _ => {
                    return Err(SqlError::plain(format!(
                        "OVER ({} BETWEEN {} AND {}) is not supported yet: ROWS BETWEEN n PRECEDING (or UNBOUNDED \
                         PRECEDING) AND CURRENT ROW is",
                        wf.units, wf.start_bound, wf.end_bound
                    )))
                }
            };
            if frame.get_or_insert(preceding) != &preceding {
                return Err(SqlError::plain("OVER windows of different frames in one SELECT are not supported yet"));
            }
            let call = Expr::AggregateFunction(datafusion_expr::expr::AggregateFunction::new_udf(
                udaf.clone(),
                p.args.clone(),
                p.distinct,
                p.filter.clone(),
                Vec::new(),
                None,
            ));
            let call = aggregate_call(&call, in_schema, "OVER (…)")?;
            aggregates.push(aggregate_input(call, i, in_schema, &c.exprs, &mut names, &mut exprs)?);
        }
        let mut fields: Vec<Field> =
            in_schema.fields().iter().zip(&names).map(|(f, n)| Field::new(n, f.data_type().clone(), true)).collect();
        let times = times.iter().map(|(i, k)| (names[*i].clone(), *k)).collect();
        let c = Collapsed { input: c.input, window: None, predicate: c.predicate, exprs };
        let rows = match frame.flatten() {
            Some(n) => ConfigValue::from(n),
            None => ConfigValue::from("unbounded"),
        };
        let config = BTreeMap::from([
            ("aggregates".to_string(), ConfigValue::from(aggregates.join(", "))),
            ("rows_preceding".to_string(), rows),
        ]);
        let uid = self.keyed_step("over", c, &names, partition.unwrap_or_default(), "over", config)?;
        // The output: the input's columns, then the aggregates (BIGINTs, cast where the plan wants another type).
        let mut out: Vec<Expr> = names[..columns].iter().map(plain_column).collect();
        for (i, f) in w.schema.fields().iter().enumerate().skip(columns) {
            let name = format!("v{}", i - columns);
            fields.push(Field::new(&name, DataType::Int64, true));
            out.push(as_planned(name, &DataType::Int64, f.data_type()));
        }
        let schema = Arc::new(DFSchema::try_from(Schema::new(fields)).map_err(df)?);
        let input = Input::Operator { uid, schema, times, updating: false };
        Ok(Collapsed { input, window: None, predicate: Vec::new(), exprs: out })
    }
}
