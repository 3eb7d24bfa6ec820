//! A parsed expression planned for one input schema: DataFusion's SQL planner turns it into a logical
//! expression, its type coercion brings operands to common types (an `int64` times a `decimal(3,3)` is a decimal),
//! its simplifier folds constants, and its physical planner makes what evaluates a whole batch.

use super::context::{Catalog, Functions};
use super::error::ExprError;
use super::parse::SqlExpr;
use super::types::{arrow_schema, column_type};
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow_schema::{DataType, Schema};
use datafusion_common::{DFSchema, DataFusionError};
use datafusion_expr::execution_props::ExecutionProps;
use datafusion_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion_expr::simplify::SimplifyContext;
use datafusion_expr::{Expr, ExprSchemable};
use datafusion_optimizer::simplify_expressions::ExprSimplifier;
use datafusion_physical_expr::{create_physical_expr, PhysicalExpr};
use datafusion_sql::planner::{PlannerContext, SqlToRel};
use sqlparser::ast::{
    BinaryOperator, Expr as AstExpr, FunctionArg, FunctionArgExpr, FunctionArguments, ObjectNamePart,
};
use std::ops::ControlFlow;
use std::sync::Arc;
use weir_common::job::schema::Column;

/// DataFusion's error as a message for a user: its own words, without the layer that raised it.
pub(crate) fn explain(e: DataFusionError) -> ExprError {
    let e = e.find_root();
    let text = match e {
        DataFusionError::Plan(m) | DataFusionError::Execution(m) | DataFusionError::NotImplemented(m) => m.clone(),
        DataFusionError::SchemaError(s, _) => s.to_string(),
        // Not a fault of DataFusion's here (a call of no signature it has, say): without its request to report one.
        DataFusionError::Internal(m) => m.clone(),
        other => other.to_string(),
    };
    ExprError::new(text.trim().to_string())
}

/// Flink's spellings DataFusion reads otherwise, in an expression or a whole statement: `MOD(a, b)` is `a % b`;
/// a number in scientific notation (`1.5e0`) is a `DOUBLE`, where a plain `0.908` is a `DECIMAL`.
pub(crate) fn flink_to_datafusion<V: sqlparser::ast::VisitMut>(ast: &mut V) {
    let _ = sqlparser::ast::visit_expressions_mut(ast, |e| {
        if let AstExpr::Value(v) = e {
            if let sqlparser::ast::Value::Number(n, _) = &v.value {
                if n.contains(['e', 'E']) {
                    let text = sqlparser::ast::Value::SingleQuotedString(n.clone()).with_span(v.span);
                    *e = AstExpr::Cast {
                        kind: sqlparser::ast::CastKind::Cast,
                        expr: Box::new(AstExpr::Value(text)),
                        data_type: sqlparser::ast::DataType::Double(sqlparser::ast::ExactNumberInfo::None),
                        array: false,
                        format: None,
                    };
                }
            }
        }
        if let AstExpr::Function(f) = e {
            let is_mod =
                matches!(f.name.0.as_slice(), [ObjectNamePart::Identifier(id)] if id.value.eq_ignore_ascii_case("mod"));
            if let (true, FunctionArguments::List(list)) = (is_mod, &f.args) {
                if let [FunctionArg::Unnamed(FunctionArgExpr::Expr(a)), FunctionArg::Unnamed(FunctionArgExpr::Expr(b))] =
                    list.args.as_slice()
                {
                    *e = AstExpr::BinaryOp {
                        left: Box::new(AstExpr::Nested(Box::new(a.clone()))),
                        op: BinaryOperator::Modulo,
                        right: Box::new(AstExpr::Nested(Box::new(b.clone()))),
                    };
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
}

/// Flink's names for unnamed select items: a field `bid.auction` makes a column `auction` (DataFusion would name it
/// after the whole access).
struct FlinkNames;

impl sqlparser::ast::VisitorMut for FlinkNames {
    type Break = ();

    fn pre_visit_select(&mut self, select: &mut sqlparser::ast::Select) -> ControlFlow<()> {
        for item in &mut select.projection {
            if let sqlparser::ast::SelectItem::UnnamedExpr(AstExpr::CompoundIdentifier(parts)) = item {
                if let Some(last) = parts.last().cloned() {
                    let expr = AstExpr::CompoundIdentifier(std::mem::take(parts));
                    *item = sqlparser::ast::SelectItem::ExprWithAlias { expr, alias: last };
                }
            }
        }
        ControlFlow::Continue(())
    }
}

/// A statement's Flink spellings and names, as DataFusion reads them ([`flink_to_datafusion`], Flink's column
/// names for fields).
pub(crate) fn flink_statement(statement: &mut sqlparser::ast::Statement) {
    flink_to_datafusion(statement);
    let _ = sqlparser::ast::VisitMut::visit(statement, &mut FlinkNames);
}

/// `e` as a logical expression over rows of `schema`, its operands coerced and its constants folded.
pub fn logical(e: &SqlExpr, schema: &DFSchema) -> Result<Expr, ExprError> {
    let functions = Functions::shared();
    let catalog = Catalog::functions_only(functions);
    let planner = SqlToRel::new_with_options(&catalog, functions.parser_options());
    let mut ast = e.ast.as_ref().clone();
    flink_to_datafusion(&mut ast);
    let expr = planner.sql_to_expr(ast, schema, &mut PlannerContext::new()).map_err(explain)?;
    let context = SimplifyContext::builder()
        .with_schema(Arc::new(schema.clone()))
        .with_config_options(Arc::new(functions.options().clone()))
        .build();
    let simplifier = ExprSimplifier::new(context);
    let expr = simplifier.coerce(expr, schema).map_err(explain)?;
    simplifier.simplify(expr).map_err(explain)
}

/// An expression compiled for batches of one schema.
#[derive(Debug, Clone)]
pub struct Scalar {
    physical: Arc<dyn PhysicalExpr>,
    data_type: DataType,
    nullable: bool,
    columns: Vec<String>,
}

impl Scalar {
    /// The type of what it evaluates to.
    pub fn data_type(&self) -> &DataType {
        &self.data_type
    }

    /// Whether it can be null.
    pub fn nullable(&self) -> bool {
        self.nullable
    }

    /// The input columns it reads, by name, in the schema's order.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// Its value for every row of `batch` (of the schema it was compiled for).
    pub fn evaluate(&self, batch: &RecordBatch) -> Result<ArrayRef, ExprError> {
        self.physical.evaluate(batch).and_then(|v| v.into_array(batch.num_rows())).map_err(explain)
    }

    /// Where it holds for each row of `batch`: a condition's mask (null where it is null).
    pub fn evaluate_condition(&self, batch: &RecordBatch) -> Result<BooleanArray, ExprError> {
        let a = self.evaluate(batch)?;
        match a.data_type() {
            DataType::Boolean => Ok(a
                .as_any()
                .downcast_ref::<BooleanArray>()
                .cloned()
                .unwrap_or_else(|| unreachable!("a Boolean array is a BooleanArray"))),
            DataType::Null => Ok(BooleanArray::new_null(batch.num_rows())),
            other => Err(ExprError::new(format!("a condition evaluated to {other}, not a boolean"))),
        }
    }
}

/// Compiles `e` for batches of `schema`.
pub fn compile(e: &SqlExpr, schema: &Schema) -> Result<Scalar, ExprError> {
    compile_as(e, schema, false)
}

/// Compiles `e` as an output column for batches of `schema`: a bare `NULL` (of no type) is an `int64` that is
/// always null, the type a column of nothing but nulls gets.
pub fn compile_column(e: &SqlExpr, schema: &Schema) -> Result<Scalar, ExprError> {
    compile_as(e, schema, true)
}

fn compile_as(e: &SqlExpr, schema: &Schema, null_as_int64: bool) -> Result<Scalar, ExprError> {
    let df = DFSchema::try_from(schema.clone()).map_err(explain)?;
    let mut expr = logical(e, &df)?;
    if null_as_int64 && expr.get_type(&df).map_err(explain)? == DataType::Null {
        expr = datafusion_expr::cast(expr, DataType::Int64);
    }
    let (_, field) = expr.to_field(&df).map_err(explain)?;
    let (data_type, nullable) = (field.data_type().clone(), field.is_nullable());
    let mut columns: Vec<String> = expr.column_refs().into_iter().map(|c| c.name.clone()).collect();
    columns.sort_by_key(|c| schema.index_of(c).unwrap_or(usize::MAX));
    columns.dedup();
    let physical = create_physical_expr(&expr, &df, &ExecutionProps::new(), &PhysicalPlanningContext::default())
        .map_err(explain)?;
    Ok(Scalar { physical, data_type, nullable, columns })
}

/// Compiles `e` for rows of declared `columns`.
pub fn compile_for_columns(e: &SqlExpr, columns: &[Column]) -> Result<Scalar, ExprError> {
    compile(e, &arrow_schema(columns)?)
}

/// The column type of `e` over rows of `columns`, and whether it can be null (as an output column: see
/// [`compile_column`]).
pub fn type_of(e: &SqlExpr, columns: &[Column]) -> Result<(String, bool), ExprError> {
    let s = compile_column(e, &arrow_schema(columns)?)?;
    let t = column_type(s.data_type()).ok_or_else(|| {
        ExprError::new(format!("`{}` is of type {}, which a column cannot hold", e.sql(), s.data_type()))
    })?;
    Ok((t, s.nullable()))
}

/// Compiles `e` as a condition (a boolean) for batches of `schema`, refusing any other type.
pub fn compile_condition(e: &SqlExpr, schema: &Schema) -> Result<Scalar, ExprError> {
    let s = compile(e, schema)?;
    match s.data_type() {
        DataType::Boolean | DataType::Null => Ok(s),
        other => Err(ExprError::new(format!("`{}` must be a condition (a boolean), not {other}", e.sql()))),
    }
}

/// Checks that `e` is a condition (a boolean) over rows of `columns`.
pub fn check_condition(e: &SqlExpr, columns: &[Column]) -> Result<(), ExprError> {
    compile_condition(e, &arrow_schema(columns)?).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::parse::parse_expr;
    use arrow_array::cast::AsArray;
    use arrow_array::{Int32Array, Int64Array, StringArray};
    use arrow_schema::Field;

    fn columns() -> Vec<Column> {
        vec![
            Column::new("event_type", "int32", false),
            Column::new("bid_price", "int64", true),
            Column::new("person_state", "utf8", true),
            Column::new("dateTime", "timestamp_ms", false),
        ]
    }

    #[test]
    fn types_follow_flinks_decimal_rules_and_names_are_kept_as_written() {
        let t = |s: &str| type_of(&parse_expr(s).unwrap(), &columns());
        assert_eq!(t("0.908 * bid_price").unwrap().0, "decimal(24,3)");
        assert_eq!(t("event_type + 1").unwrap().0, "int64");
        assert_eq!(t("bid_price * 1.5e0").unwrap().0, "float64");
        assert_eq!(t("1e300").unwrap().0, "float64");
        assert_eq!(t("-NULL").unwrap(), ("int64".into(), true));
        assert_eq!(t("`dateTime`").unwrap(), ("timestamp_ms".into(), false));
        assert_eq!(t("MOD(bid_price, 123)").unwrap(), ("int64".into(), true));
        assert_eq!(t("CASE WHEN event_type = 2 THEN 'bid' ELSE person_state END").unwrap().0, "utf8");
        let e = t("datetime").unwrap_err().to_string();
        assert!(e.contains("datetime"), "{e}");
        let e = t("no_such(bid_price)").unwrap_err().to_string();
        assert!(e.contains("no_such"), "{e}");
        let e = check_condition(&parse_expr("bid_price + 1").unwrap(), &columns()).unwrap_err().to_string();
        assert!(e.contains("must be a condition"), "{e}");
        let e = t("person_state + 1").unwrap_err().to_string();
        assert!(!e.is_empty());
    }

    /// The largest expressions the parser accepts plan and evaluate on a quarter of the 8 MiB that every thread
    /// compiling them has (a task's, and the task manager's runtime threads, which resolve specs). DataFusion's
    /// planning crates are built at opt-level 1 (Cargo.toml), whose frames are larger: 1 MiB is not enough.
    #[test]
    fn the_largest_accepted_expressions_fit_in_a_small_stack() {
        let run = || {
            let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
            let batch =
                RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from(vec![Some(1), None]))]).unwrap();
            let ops = crate::expr::MAX_EXPR_OPERATORS;
            let chain = vec!["a"; ops + 1].join(" + ");
            // The deepest nesting the parser accepts (each level takes one or more of its recursion limit).
            let deepest = |open: &str| {
                (1..=crate::expr::parse::MAX_EXPR_NESTING)
                    .rev()
                    .map(|n| format!("{}a{}", open.repeat(n), ")".repeat(n)))
                    .find(|t| parse_expr(t).is_ok())
                    .unwrap()
            };
            let ands = vec!["a > 0"; ops / 2].join(" AND ");
            for text in [chain, deepest("(a + "), deepest("abs("), deepest("(-"), ands] {
                let s = compile(&parse_expr(&text).unwrap(), &schema).unwrap();
                s.evaluate(&batch).unwrap();
            }
        };
        std::thread::Builder::new().stack_size(2 << 20).spawn(run).unwrap().join().unwrap();
    }

    #[test]
    fn expressions_evaluate_a_whole_batch() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("event_type", DataType::Int32, false),
            Field::new("bid_price", DataType::Int64, true),
            Field::new("person_state", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int32Array::from(vec![2, 0, 2])),
                Arc::new(Int64Array::from(vec![Some(246), None, Some(7)])),
                Arc::new(StringArray::from(vec![None, Some("OR"), None])),
            ],
        )
        .unwrap();
        let cond = compile(&parse_expr("MOD(bid_price, 123) = 0 OR person_state IN ('OR')").unwrap(), &schema).unwrap();
        let mask = cond.evaluate_condition(&batch).unwrap();
        // false OR NULL is NULL, as SQL has it: the row does not pass.
        assert_eq!(mask.iter().collect::<Vec<_>>(), vec![Some(true), Some(true), None]);
        let price = compile(&parse_expr("0.908 * bid_price").unwrap(), &schema).unwrap();
        let v = price.evaluate(&batch).unwrap();
        let d = v.as_primitive::<arrow_array::types::Decimal128Type>();
        assert_eq!(d.value_as_string(0), "223.368");
        assert!(d.is_null(1));
        assert_eq!(price.columns(), &["bid_price".to_string()]);
        let upper = compile(&parse_expr("UPPER(person_state)").unwrap(), &schema).unwrap();
        assert_eq!(upper.evaluate(&batch).unwrap().as_string::<i32>().value(1), "OR");
    }
}
