//! Unbounded `GROUP BY` (Flink's group aggregate): an updating result, a changelog of `+I`, `-U`, `+U` and `-D`.

use super::*;
use datafusion_expr::ExprSchemable;

impl Job<'_> {
    /// `GROUP BY` without a window: a `project` keying the rows by the grouping expressions (it selects them as
    /// `g0`, `g1`, … and the aggregated expressions as `a0`, …), and an `aggregate`, which carries the grouping
    /// columns and emits each key's result as it changes. An updating input is aggregated with its retractions.
    pub(super) fn group_aggregate(
        &mut self,
        agg: &datafusion_expr::Aggregate,
        c: Collapsed,
    ) -> Result<Collapsed, SqlError> {
        let in_schema = agg.input.schema();
        let updating = c.input.updating();
        if agg.aggr_expr.is_empty() {
            return Err(SqlError::plain(
                "GROUP BY without an aggregate function over an unbounded stream (a DISTINCT) is not supported yet",
            ));
        }
        let mut names = Vec::new();
        let mut exprs = Vec::new();
        let mut keys = Vec::new();
        for (i, g) in agg.group_expr.iter().enumerate() {
            if matches!(g, Expr::GroupingSet(_)) {
                return Err(SqlError::plain("GROUPING SETS, CUBE and ROLLUP are not supported yet"));
            }
            let e = substitute(g.clone().unalias_nested().data, in_schema, &c.exprs)?;
            keys.push(e.clone());
            exprs.push(e);
            names.push(format!("g{i}"));
        }
        let mut aggregates = Vec::new();
        for (i, a) in agg.aggr_expr.iter().enumerate() {
            let call = aggregate_call(a, in_schema, "in a GROUP BY")?;
            if updating && matches!(call.name, "min" | "max") {
                return Err(SqlError::plain(format!(
                    "{}(…) over an updating table (the result of a GROUP BY without a window) is not supported yet: \
                     a retracted row would need every value kept",
                    call.name.to_uppercase()
                )));
            }
            let (function, value) = aggregate_input(call, i, in_schema, &c.exprs)?;
            if let Some(e) = value {
                exprs.push(e);
                names.push(format!("a{i}"));
            }
            aggregates.push(format!("{function} AS v{i}"));
        }
        let groups = agg.group_expr.len();
        let c = Collapsed { input: c.input, window: None, predicate: c.predicate, exprs };
        let input_uid = self.fresh_uid(format!("{}.group-input", self.sink));
        let input = self.project(&input_uid, c, &names, Some(keys))?;
        let mut config = BTreeMap::new();
        config.insert("aggregates".to_string(), ConfigValue::from(aggregates.join(", ")));
        if groups > 0 {
            config.insert("carry".to_string(), ConfigValue::from(names[..groups].join(", ")));
        }
        let uid = self.fresh_uid(format!("{}.group", self.sink));
        let uid = self.add(operator(&uid, "aggregate", Some(&input), config));
        // The aggregate's output: the carried grouping columns as the plan types them, then the results, BIGINTs
        // (an AVG of integers is one too, rounded toward zero, as Flink's); cast where the plan wants another type.
        let mut fields = Vec::new();
        let mut out = Vec::new();
        for (i, f) in agg.schema.fields().iter().enumerate() {
            let (name, dt) = if i < groups {
                (format!("g{i}"), f.data_type().clone())
            } else {
                (format!("v{}", i - groups), DataType::Int64)
            };
            fields.push(Field::new(&name, dt.clone(), true));
            let e = col(datafusion_common::Column::new_unqualified(name));
            out.push(if dt == *f.data_type() { e } else { datafusion_expr::cast(e, f.data_type().clone()) });
        }
        let schema = Arc::new(DFSchema::try_from(Schema::new(fields)).map_err(df)?);
        let input = Input::Operator { uid, schema, times: Vec::new(), updating: true };
        Ok(Collapsed { input, window: None, predicate: Vec::new(), exprs: out })
    }
}

/// What the `aggregate` and `over` kinds compute for aggregate call `i` (`call`, over rows of `schema` whose
/// columns are `exprs`): its text (`SUM(a1)`), and the expression the `project` before selects as `a{i}` for it
/// (none for a `COUNT(*)`).
pub(super) fn aggregate_input(
    call: AggregateCall,
    i: usize,
    schema: &DFSchema,
    exprs: &[Expr],
) -> Result<(String, Option<Expr>), SqlError> {
    Ok(match call.arg {
        None => ("COUNT(*)".to_string(), None),
        // COUNT(x) counts the rows where x is not null: a sum of 1s and 0s, which the other aggregates' rows do
        // not change (a filter would).
        Some(arg) if call.name == "count" => {
            let e = substitute(arg.clone(), schema, exprs)?;
            if arg.nullable(schema).map_err(df)? {
                (format!("SUM(a{i})"), Some(when(e.is_null(), lit(0i64)).otherwise(lit(1i64)).map_err(df)?))
            } else {
                ("COUNT(*)".to_string(), None)
            }
        }
        Some(arg) => {
            let e = substitute(arg, schema, exprs)?;
            (format!("{}(a{i})", call.name.to_uppercase()), Some(e))
        }
    })
}
