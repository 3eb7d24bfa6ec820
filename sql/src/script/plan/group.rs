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
        let keys = grouping(agg, &c)?;
        let groups = keys.len();
        let mut names: Vec<String> = (0..groups).map(|i| format!("g{i}")).collect();
        let mut exprs = keys.clone();
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
            aggregates.push(aggregate_input(call, i, in_schema, &c.exprs, &mut names, &mut exprs)?);
        }
        let c = Collapsed { input: c.input, window: None, predicate: c.predicate, exprs };
        let mut config = BTreeMap::new();
        config.insert("aggregates".to_string(), ConfigValue::from(aggregates.join(", ")));
        if groups > 0 {
            config.insert("carry".to_string(), ConfigValue::from(names[..groups].join(", ")));
        }
        let uid = self.keyed_step("group", c, &names, keys, "aggregate", config)?;
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
            out.push(as_planned(name, &dt, f.data_type()));
        }
        let schema = Arc::new(DFSchema::try_from(Schema::new(fields)).map_err(df)?);
        let input = Input::Operator { uid, schema, times: Vec::new(), updating: true };
        Ok(Collapsed { input, window: None, predicate: Vec::new(), exprs: out })
    }
}

/// What the `aggregate` and `over` kinds compute for aggregate call `i` (`call`, over rows of `schema` whose
/// columns are `exprs`): its text (`SUM(a1) AS v1`); the expression it reads is added to the `project` before's
/// `names` and `selected` as `a{i}` (none for a `COUNT(*)`).
pub(super) fn aggregate_input(
    call: AggregateCall,
    i: usize,
    schema: &DFSchema,
    exprs: &[Expr],
    names: &mut Vec<String>,
    selected: &mut Vec<Expr>,
) -> Result<String, SqlError> {
    let (function, value) = match call.arg {
        None => ("COUNT", None),
        // COUNT(x) counts the rows where x is not null: a sum of 1s and 0s, which the other aggregates' rows do
        // not change (a filter would).
        Some(arg) if call.name == "count" => match arg.nullable(schema).map_err(df)? {
            true => {
                let e = substitute(arg, schema, exprs)?;
                ("SUM", Some(when(e.is_null(), lit(0i64)).otherwise(lit(1i64)).map_err(df)?))
            }
            false => ("COUNT", None),
        },
        Some(arg) => (call.name, Some(substitute(arg, schema, exprs)?)),
    };
    let Some(value) = value else { return Ok(format!("COUNT(*) AS v{i}")) };
    names.push(format!("a{i}"));
    selected.push(value);
    Ok(format!("{}(a{i}) AS v{i}", function.to_uppercase()))
}
