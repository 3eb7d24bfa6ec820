//! Expressions (`crate::expr`) compiled against one Arrow schema and evaluated a whole column at a time
//! with Arrow's kernels: a batch costs one kernel call per operator in the expression, nothing per row.

use crate::api::error::OperatorError;
use crate::expr::ast::{BinaryOp, Expr, Function, Literal, UnaryOp};
use crate::expr::typing::Type;
use crate::expr::typing::{binary_type, literal_type, operand_type};
use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Int32Type, Int64Type};
use arrow_array::{
    new_null_array, Array, ArrayRef, BooleanArray, Datum, Decimal128Array, Float64Array, Int64Array, PrimitiveArray,
    RecordBatch, Scalar, StringArray, UInt32Array,
};
use arrow_schema::{DataType, Schema, TimeUnit};
use std::sync::Arc;
use weir_common::job::schema::Column;

/// An expression ready to run over batches of one schema.
#[derive(Debug)]
pub struct Compiled {
    node: Node,
    /// The type of its values.
    pub ty: Type,
}

#[derive(Debug)]
enum Node {
    Column(usize),
    Literal(ArrayRef),
    Cast(Box<Compiled>),
    Neg(Box<Compiled>),
    Not(Box<Compiled>),
    Arith(BinaryOp, Box<Compiled>, Box<Compiled>),
    Cmp(BinaryOp, Box<Compiled>, Box<Compiled>),
    Logic(BinaryOp, Box<Compiled>, Box<Compiled>),
    IsNull(Box<Compiled>, bool),
    KeyInt(Box<Compiled>),
    InList(Box<Compiled>, Vec<Compiled>, bool),
}

/// A value of an expression over a batch: a column of its rows, or one value for all of them.
#[derive(Debug, Clone)]
pub enum Value {
    /// One value per row.
    Array(ArrayRef),
    /// The same value for every row (an array of length 1).
    Scalar(ArrayRef),
}

impl Value {
    fn datum(&self) -> Box<dyn Datum + '_> {
        match self {
            Value::Array(a) => Box::new(a.clone()),
            Value::Scalar(s) => Box::new(Scalar::new(s.clone())),
        }
    }

    /// The value as a column of `rows` rows.
    pub fn into_array(self, rows: usize) -> Result<ArrayRef, OperatorError> {
        match self {
            Value::Array(a) => Ok(a),
            Value::Scalar(s) => {
                let indices = UInt32Array::from(vec![0u32; rows]);
                arrow_select::take::take(s.as_ref(), &indices, None).map_err(arrow_err)
            }
        }
    }

    fn map(self, f: impl FnOnce(ArrayRef) -> Result<ArrayRef, OperatorError>) -> Result<Value, OperatorError> {
        Ok(match self {
            Value::Array(a) => Value::Array(f(a)?),
            Value::Scalar(s) => Value::Scalar(f(s)?),
        })
    }
}

fn arrow_err(e: arrow_schema::ArrowError) -> OperatorError {
    OperatorError::Records(format!("evaluating an expression: {e}"))
}

/// The Arrow type that holds values of `t`.
pub fn arrow_type(t: Type) -> DataType {
    match t {
        Type::Null => DataType::Null,
        Type::Bool => DataType::Boolean,
        Type::Int32 => DataType::Int32,
        Type::Int64 => DataType::Int64,
        Type::Float64 => DataType::Float64,
        Type::Decimal(p, s) => DataType::Decimal128(p, s),
        Type::Utf8 => DataType::Utf8,
        Type::Binary => DataType::Binary,
        Type::Timestamp => DataType::Timestamp(TimeUnit::Millisecond, None),
    }
}

/// The schema's columns as the typing of `crate::expr` sees them (types it does not handle keep a name it
/// refuses, so that only an expression that uses such a column fails).
pub fn columns_of(schema: &Schema) -> Vec<Column> {
    schema
        .fields()
        .iter()
        .map(|f| {
            let t = match f.data_type() {
                DataType::Boolean => "bool".to_string(),
                DataType::Int32 => "int32".into(),
                DataType::Int64 => "int64".into(),
                DataType::Float64 => "float64".into(),
                DataType::Decimal128(p, s) => format!("decimal({p},{s})"),
                DataType::Utf8 => "utf8".into(),
                DataType::Binary => "binary".into(),
                DataType::Timestamp(TimeUnit::Millisecond, None) => "timestamp_ms".into(),
                other => format!("{other}"),
            };
            Column::new(f.name(), &t, f.is_nullable())
        })
        .collect()
}

/// Compiles `e` for batches of `schema` (whose columns `columns_of` gave `columns`).
pub fn compile(e: &Expr, schema: &Schema, columns: &[Column]) -> Result<Compiled, OperatorError> {
    let ty = crate::expr::type_of(e, columns).map_err(|e| OperatorError::Records(e.0))?.0;
    let node = match e {
        Expr::Column(name) => {
            Node::Column(schema.index_of(name).map_err(|_| OperatorError::Records(format!("no column {name:?}")))?)
        }
        Expr::Literal(l) => Node::Literal(literal_array(l)?),
        // `-NULL` negates a null int64 (`type_of`): Arrow has no arithmetic on its null type.
        Expr::Unary(UnaryOp::Neg, x) => Node::Neg(Box::new(cast(compile(x, schema, columns)?, ty))),
        Expr::Unary(UnaryOp::Not, x) => Node::Not(Box::new(cast(compile(x, schema, columns)?, Type::Bool))),
        Expr::Binary(op, a, b) => {
            let (a, b) = (compile(a, schema, columns)?, compile(b, schema, columns)?);
            let operands = match operand_type(*op, a.ty, b.ty).map_err(|e| OperatorError::Records(e.0))? {
                // NULL against NULL: compared or computed as null int64s (Arrow's null type has no kernels).
                Type::Null => Type::Int64,
                t => t,
            };
            match op {
                BinaryOp::And | BinaryOp::Or => {
                    Node::Logic(*op, Box::new(cast(a, Type::Bool)), Box::new(cast(b, Type::Bool)))
                }
                _ => {
                    let (a, b) = align(operands, op.is_comparison(), a, b);
                    if op.is_comparison() {
                        Node::Cmp(*op, Box::new(a), Box::new(b))
                    } else {
                        debug_assert_eq!(binary_type(*op, a.ty, b.ty).ok(), Some(ty));
                        Node::Arith(*op, Box::new(a), Box::new(b))
                    }
                }
            }
        }
        Expr::IsNull { expr, negated } => Node::IsNull(Box::new(compile(expr, schema, columns)?), *negated),
        Expr::Call(Function::KeyInt, args) => {
            let arg = args.first().ok_or_else(|| OperatorError::Misuse("KEY_INT needs an argument".into()))?;
            Node::KeyInt(Box::new(compile(arg, schema, columns)?))
        }
        Expr::InList { expr, list, negated } => {
            let x = compile(expr, schema, columns)?;
            let mut items = Vec::with_capacity(list.len());
            let mut target = x.ty;
            for l in list {
                target = common_comparison_type(target, literal_type(l));
            }
            if target == Type::Null {
                target = Type::Int64;
            }
            for l in list {
                let c = Compiled { node: Node::Literal(literal_array(l)?), ty: literal_type(l) };
                items.push(cast(c, target));
            }
            Node::InList(Box::new(cast(x, target)), items, *negated)
        }
    };
    Ok(Compiled { node, ty })
}

/// The type two compared values are brought to (decimals: 38 digits at the larger scale).
fn common_comparison_type(a: Type, b: Type) -> Type {
    match operand_type(BinaryOp::Eq, a, b) {
        Ok(Type::Decimal(..)) => {
            let scale = |t: Type| match t {
                Type::Decimal(_, s) => s,
                _ => 0,
            };
            Type::Decimal(38, scale(a).max(scale(b)))
        }
        Ok(Type::Null) => a,
        Ok(t) => t,
        Err(_) => a,
    }
}

/// Brings both operands to the type the operator works on.
fn align(operands: Type, comparison: bool, a: Compiled, b: Compiled) -> (Compiled, Compiled) {
    match operands {
        Type::Decimal(..) if comparison => {
            let t = common_comparison_type(a.ty, b.ty);
            (cast(a, t), cast(b, t))
        }
        // Arithmetic on decimals: each side a decimal of its own, the kernel aligns the scales.
        Type::Decimal(..) => {
            let own = |c: Compiled| {
                let t = match c.ty {
                    Type::Int32 => Type::Decimal(10, 0),
                    Type::Int64 | Type::Null => Type::Decimal(19, 0),
                    t => t,
                };
                cast(c, t)
            };
            (own(a), own(b))
        }
        t => (cast(a, t), cast(b, t)),
    }
}

fn cast(c: Compiled, to: Type) -> Compiled {
    if c.ty == to || to == Type::Null {
        return c;
    }
    Compiled { node: Node::Cast(Box::new(c)), ty: to }
}

fn literal_array(l: &Literal) -> Result<ArrayRef, OperatorError> {
    Ok(match l {
        Literal::Null => new_null_array(&DataType::Null, 1),
        Literal::Bool(b) => Arc::new(BooleanArray::from(vec![*b])),
        Literal::Int(v) => Arc::new(Int64Array::from(vec![*v])),
        Literal::Decimal { unscaled, precision, scale } => Arc::new(
            Decimal128Array::from(vec![*unscaled]).with_precision_and_scale(*precision, *scale).map_err(arrow_err)?,
        ),
        Literal::Float(v) => Arc::new(Float64Array::from(vec![*v])),
        Literal::Str(s) => Arc::new(StringArray::from(vec![s.as_str()])),
    })
}

/// `a` (of type `from`) as values of type `to`: only the widenings `compile` inserts.
fn cast_array(a: &ArrayRef, from: Type, to: Type) -> Result<ArrayRef, OperatorError> {
    let pow10 = |s: i8| 10i128.pow(u32::try_from(s).unwrap_or(0));
    Ok(match (from, to) {
        (Type::Null, t) => new_null_array(&arrow_type(t), a.len()),
        (Type::Int32, Type::Int64) => Arc::new(a.as_primitive::<Int32Type>().unary::<_, Int64Type>(i64::from)),
        (Type::Int32, Type::Float64) => {
            Arc::new(a.as_primitive::<Int32Type>().unary::<_, arrow_array::types::Float64Type>(f64::from))
        }
        (Type::Int64, Type::Float64) => {
            Arc::new(a.as_primitive::<Int64Type>().unary::<_, arrow_array::types::Float64Type>(|v| v as f64))
        }
        (Type::Decimal(_, s), Type::Float64) => {
            let d = pow10(s) as f64;
            Arc::new(a.as_primitive::<Decimal128Type>().unary::<_, arrow_array::types::Float64Type>(|v| v as f64 / d))
        }
        (Type::Int32, Type::Decimal(p, s)) => {
            let m = pow10(s);
            let out: PrimitiveArray<Decimal128Type> =
                a.as_primitive::<Int32Type>().unary(|v| i128::from(v).wrapping_mul(m));
            Arc::new(out.with_precision_and_scale(p, s).map_err(arrow_err)?)
        }
        (Type::Int64, Type::Decimal(p, s)) => {
            let m = pow10(s);
            let out: PrimitiveArray<Decimal128Type> =
                a.as_primitive::<Int64Type>().unary(|v| i128::from(v).wrapping_mul(m));
            Arc::new(out.with_precision_and_scale(p, s).map_err(arrow_err)?)
        }
        (Type::Decimal(_, s1), Type::Decimal(p, s)) => {
            let m = pow10(s - s1);
            let out: PrimitiveArray<Decimal128Type> = a.as_primitive::<Decimal128Type>().unary(|v| v.wrapping_mul(m));
            Arc::new(out.with_precision_and_scale(p, s).map_err(arrow_err)?)
        }
        (from, to) => {
            return Err(OperatorError::Records(format!(
                "cannot convert {} to {}",
                from.column_type(),
                to.column_type()
            )))
        }
    })
}

fn booleans(v: Value, rows: usize) -> Result<BooleanArray, OperatorError> {
    let a = v.into_array(rows)?;
    a.as_boolean_opt()
        .cloned()
        .ok_or_else(|| OperatorError::Records(format!("expected booleans, got {}", a.data_type())))
}

impl Compiled {
    /// Its value over `batch`.
    pub fn eval(&self, batch: &RecordBatch) -> Result<Value, OperatorError> {
        let rows = batch.num_rows();
        Ok(match &self.node {
            Node::Column(i) => Value::Array(batch.column(*i).clone()),
            Node::Literal(a) => Value::Scalar(a.clone()),
            Node::Cast(c) => c.eval(batch)?.map(|a| cast_array(&a, c.ty, self.ty))?,
            Node::Neg(c) => c.eval(batch)?.map(|a| arrow_arith::numeric::neg_wrapping(&a).map_err(arrow_err))?,
            Node::Not(c) => {
                Value::Array(Arc::new(arrow_arith::boolean::not(&booleans(c.eval(batch)?, rows)?).map_err(arrow_err)?))
            }
            Node::Arith(op, a, b) => {
                let (va, vb) = (a.eval(batch)?, b.eval(batch)?);
                let scalar = matches!((&va, &vb), (Value::Scalar(_), Value::Scalar(_)));
                let vb = match op {
                    // A division by zero is null (as Flink's SQL gives), not a failed job.
                    BinaryOp::Div | BinaryOp::Rem => vb.map(|d| {
                        let zero = arrow_array::new_empty_array(d.data_type());
                        let zero = match d.data_type() {
                            DataType::Int32 => Arc::new(arrow_array::Int32Array::from(vec![0])) as ArrayRef,
                            DataType::Int64 => Arc::new(Int64Array::from(vec![0])),
                            DataType::Float64 => Arc::new(Float64Array::from(vec![0.0])),
                            _ => zero,
                        };
                        let is_zero = arrow_ord::cmp::eq(&d, &Scalar::new(zero)).map_err(arrow_err)?;
                        arrow_select::nullif::nullif(&d, &is_zero).map_err(arrow_err)
                    })?,
                    _ => vb,
                };
                let (da, db) = (va.datum(), vb.datum());
                let r = match op {
                    BinaryOp::Add => arrow_arith::numeric::add_wrapping(da.as_ref(), db.as_ref()),
                    BinaryOp::Sub => arrow_arith::numeric::sub_wrapping(da.as_ref(), db.as_ref()),
                    BinaryOp::Mul => arrow_arith::numeric::mul_wrapping(da.as_ref(), db.as_ref()),
                    BinaryOp::Div => arrow_arith::numeric::div(da.as_ref(), db.as_ref()),
                    _ => arrow_arith::numeric::rem(da.as_ref(), db.as_ref()),
                }
                .map_err(arrow_err)?;
                if scalar {
                    Value::Scalar(r)
                } else {
                    Value::Array(r)
                }
            }
            Node::Cmp(op, a, b) => {
                let (va, vb) = (a.eval(batch)?, b.eval(batch)?);
                let scalar = matches!((&va, &vb), (Value::Scalar(_), Value::Scalar(_)));
                let (da, db) = (va.datum(), vb.datum());
                let (da, db) = (da.as_ref(), db.as_ref());
                let r = match op {
                    BinaryOp::Eq => arrow_ord::cmp::eq(da, db),
                    BinaryOp::NotEq => arrow_ord::cmp::neq(da, db),
                    BinaryOp::Lt => arrow_ord::cmp::lt(da, db),
                    BinaryOp::LtEq => arrow_ord::cmp::lt_eq(da, db),
                    BinaryOp::Gt => arrow_ord::cmp::gt(da, db),
                    _ => arrow_ord::cmp::gt_eq(da, db),
                }
                .map_err(arrow_err)?;
                if scalar {
                    Value::Scalar(Arc::new(r))
                } else {
                    Value::Array(Arc::new(r))
                }
            }
            Node::Logic(op, a, b) => {
                let (a, b) = (booleans(a.eval(batch)?, rows)?, booleans(b.eval(batch)?, rows)?);
                let r = match op {
                    BinaryOp::And => arrow_arith::boolean::and_kleene(&a, &b),
                    _ => arrow_arith::boolean::or_kleene(&a, &b),
                }
                .map_err(arrow_err)?;
                Value::Array(Arc::new(r))
            }
            Node::IsNull(c, negated) => {
                let a = c.eval(batch)?.into_array(rows)?;
                let r =
                    if *negated { arrow_arith::boolean::is_not_null(&a) } else { arrow_arith::boolean::is_null(&a) };
                Value::Array(Arc::new(r.map_err(arrow_err)?))
            }
            Node::KeyInt(c) => c.eval(batch)?.map(|a| {
                let bytes =
                    a.as_binary_opt::<i32>().ok_or_else(|| OperatorError::Misuse("KEY_INT of a non-key".into()))?;
                let ints: Int64Array =
                    bytes.iter().map(|b| b.and_then(|b| <[u8; 8]>::try_from(b).ok()).map(i64::from_be_bytes)).collect();
                Ok(Arc::new(ints) as ArrayRef)
            })?,
            Node::InList(c, items, negated) => {
                let x = c.eval(batch)?;
                // A constant tested against constants is one value for every row, as any scalar.
                let scalar = matches!(x, Value::Scalar(_));
                let rows = if scalar { 1 } else { rows };
                let mut any: Option<BooleanArray> = None;
                for item in items {
                    let v = item.eval(batch)?;
                    let eq = arrow_ord::cmp::eq(x.datum().as_ref(), v.datum().as_ref()).map_err(arrow_err)?;
                    let eq = booleans(Value::Array(Arc::new(eq)), rows)?;
                    any = Some(match any {
                        None => eq,
                        Some(prev) => arrow_arith::boolean::or_kleene(&prev, &eq).map_err(arrow_err)?,
                    });
                }
                let any = any.unwrap_or_else(|| BooleanArray::from(vec![false; rows]));
                let r = if *negated { arrow_arith::boolean::not(&any).map_err(arrow_err)? } else { any };
                if scalar {
                    Value::Scalar(Arc::new(r))
                } else {
                    Value::Array(Arc::new(r))
                }
            }
        })
    }

    /// Its value over `batch` as a mask of the rows for which it holds (null where unknown, which a filter drops):
    /// a condition's value. A bare `NULL` holds for no row.
    pub fn eval_condition(&self, batch: &RecordBatch) -> Result<BooleanArray, OperatorError> {
        if self.ty == Type::Null {
            return Ok(BooleanArray::new_null(batch.num_rows()));
        }
        booleans(self.eval(batch)?, batch.num_rows())
    }

    /// Its value over `batch` as a column of the batch's length.
    pub fn eval_array(&self, batch: &RecordBatch) -> Result<ArrayRef, OperatorError> {
        let a = self.eval(batch)?.into_array(batch.num_rows())?;
        if a.data_type() == &DataType::Null {
            // A column of bare NULLs is typed int64 (`Type::column_type`).
            return Ok(new_null_array(&DataType::Int64, a.len()));
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::parse_expr;
    use arrow_array::{Int32Array, TimestampMillisecondArray};
    use arrow_schema::Field;

    fn batch() -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("kind", DataType::Int32, false),
            Field::new("price", DataType::Int64, true),
            Field::new("state", DataType::Utf8, true),
            Field::new("at", DataType::Timestamp(TimeUnit::Millisecond, None), false),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(Int32Array::from(vec![2, 1, 2, 0])),
                Arc::new(Int64Array::from(vec![Some(200), None, Some(246), Some(0)])),
                Arc::new(StringArray::from(vec![Some("OR"), Some("CA"), None, Some("WA")])),
                Arc::new(TimestampMillisecondArray::from(vec![5, 10, 15, 20])),
            ],
        )
        .unwrap()
    }

    fn run(text: &str) -> ArrayRef {
        let b = batch();
        let cols = columns_of(&b.schema());
        compile(&parse_expr(text).unwrap(), &b.schema(), &cols).unwrap().eval_array(&b).unwrap()
    }

    fn bools(a: ArrayRef) -> Vec<Option<bool>> {
        a.as_boolean().iter().collect()
    }

    #[test]
    fn arithmetic_and_decimals_follow_sql() {
        let eur = run("0.908 * price");
        assert_eq!(eur.data_type(), &DataType::Decimal128(23, 3));
        let d = eur.as_primitive::<Decimal128Type>();
        assert_eq!(d.value_as_string(0), "181.600");
        assert!(d.is_null(1));
        let sum = run("kind + price");
        assert_eq!(
            sum.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(),
            vec![Some(202), None, Some(248), Some(0)]
        );
        assert_eq!(run("kind * 2").as_primitive::<Int64Type>().values().to_vec(), vec![4, 2, 4, 0]);
        let q = run("1000 / price");
        assert_eq!(q.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(), vec![Some(5), None, Some(4), None]);
        assert_eq!(run("-price + 1.5").as_primitive::<Decimal128Type>().value_as_string(0), "-198.5");
        assert_eq!(run("NULL").data_type(), &DataType::Int64);
        let b = RecordBatch::try_from_iter(vec![(
            "key",
            Arc::new(arrow_array::BinaryArray::from(vec![&7i64.to_be_bytes()[..], b"abc"])) as ArrayRef,
        )])
        .unwrap();
        let e = compile(&parse_expr("KEY_INT(key)").unwrap(), &b.schema(), &columns_of(&b.schema())).unwrap();
        assert_eq!(
            e.eval_array(&b).unwrap().as_primitive::<Int64Type>().iter().collect::<Vec<_>>(),
            vec![Some(7), None]
        );
    }

    #[test]
    fn conditions_are_three_valued() {
        assert_eq!(bools(run("kind = 2 AND price % 123 = 0")), vec![Some(false), Some(false), Some(true), Some(false)]);
        assert_eq!(bools(run("state IN ('OR', 'CA')")), vec![Some(true), Some(true), None, Some(false)]);
        assert_eq!(bools(run("state NOT IN ('OR')")), vec![Some(false), Some(true), None, Some(true)]);
        assert_eq!(
            bools(run("price IS NULL OR price > 200.5")),
            vec![Some(false), Some(true), Some(true), Some(false)]
        );
        assert_eq!(bools(run("at BETWEEN at AND at")), vec![Some(true); 4]);
        assert_eq!(bools(run("NOT (kind <> 2)")), vec![Some(true), Some(false), Some(true), Some(false)]);
        assert_eq!(bools(run("1 = 1")), vec![Some(true); 4]);
        assert_eq!(bools(run("price * 1e0 >= 200")), vec![Some(true), None, Some(true), Some(false)]);
    }

    /// Every expression of up to two operators over every kind of operand: whatever the job manager accepts
    /// (`type_of` is `Ok`) compiles and evaluates without a panic (NULL arithmetic once panicked Arrow's kernels).
    #[test]
    fn every_expression_that_type_checks_evaluates_without_panicking() {
        let atoms = ["NULL", "1", "2.5", "1e0", "'a'", "TRUE", "kind", "price", "state", "at"];
        let mut operands: Vec<String> = atoms.iter().map(|a| a.to_string()).collect();
        for a in atoms {
            for form in ["-{}", "NOT {}", "{} IS NULL", "{} IN (NULL, 1)", "{} IN (NULL)", "KEY_INT({})", "({} % {})"] {
                operands.push(form.replace("{}", a));
            }
        }
        let ops = ["+", "-", "*", "/", "%", "=", "<>", "<", "<=", ">", ">=", "AND", "OR"];
        let b = batch();
        let cols = columns_of(&b.schema());
        let (mut accepted, mut refused) = (0, 0);
        let mut check = |text: String| {
            let Ok(e) = parse_expr(&text) else { return };
            let Ok((ty, _)) = crate::expr::type_of(&e, &cols) else {
                refused += 1;
                return;
            };
            accepted += 1;
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let c = compile(&e, &b.schema(), &cols).map_err(|e| e.to_string())?;
                let a = c.eval_array(&b).map_err(|e| e.to_string())?;
                assert_eq!(a.len(), b.num_rows());
                if matches!(ty, Type::Bool | Type::Null) {
                    c.eval_condition(&b).map_err(|e| e.to_string())?;
                }
                Ok::<_, String>(())
            }));
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(e)) => panic!("{text:?} type-checks but fails: {e}"),
                Err(_) => panic!("{text:?} type-checks but panics"),
            }
        };
        for x in &operands {
            check(x.clone());
            for op in ops {
                for y in &operands {
                    check(format!("{x} {op} {y}"));
                }
            }
        }
        assert!(accepted > 5_000 && refused > 10_000, "accepted {accepted}, refused {refused}");
    }

    #[test]
    fn null_arithmetic_is_null_and_a_null_condition_holds_for_no_row() {
        for text in ["NULL / NULL", "NULL % NULL", "MOD(NULL, NULL)", "-NULL", "NULL + 1", "-(NULL * NULL)"] {
            let a = run(text);
            assert_eq!((a.data_type(), a.null_count()), (&DataType::Int64, 4), "{text}");
        }
        let b = batch();
        let cols = columns_of(&b.schema());
        for text in ["NULL", "NULL AND TRUE", "NULL = NULL", "NOT NULL", "NULL IN (NULL)"] {
            let c = compile(&parse_expr(text).unwrap(), &b.schema(), &cols).unwrap();
            let mask = c.eval_condition(&b).unwrap();
            assert_eq!((mask.len(), mask.true_count()), (4, 0), "{text}");
        }
    }

    /// An expression as deep as the parser allows compiles and evaluates on an eighth of a task thread's stack.
    #[test]
    fn expressions_at_the_depth_limit_fit_in_a_fraction_of_a_task_stack() {
        let stack = crate::task::TASK_STACK_BYTES / 8;
        std::thread::Builder::new()
            .stack_size(stack)
            .spawn(|| {
                let n = crate::expr::parse::MAX_EXPR_DEPTH - 1;
                let m = crate::expr::parse::MAX_EXPR_NESTING;
                let b = batch();
                let cols = columns_of(&b.schema());
                for text in [
                    format!("price{}", " + 1".repeat(n)),
                    format!("price{}", " * 1".repeat(n)),
                    format!("{}price", "- ".repeat(m)),
                    format!("{}kind = 2", "NOT ".repeat(m)),
                    format!("{}price{}", "MOD(".repeat(m), ", 7)".repeat(m)),
                    format!("{}price{}", "(".repeat(m), ")".repeat(m)),
                    format!("kind = 2{}", " OR kind = 2".repeat(n - 2)),
                    format!("({}price{}){}", "(price + ".repeat(m - 1), ")".repeat(m - 1), " - 1".repeat(n - m - 1)),
                ] {
                    let e = parse_expr(&text).unwrap_or_else(|e| panic!("{e}"));
                    let c = compile(&e, &b.schema(), &cols).unwrap();
                    assert_eq!(c.eval_array(&b).unwrap().len(), 4);
                }
                assert_eq!(
                    run(&format!("price{}", " + 1".repeat(n))).as_primitive::<Int64Type>().value(0),
                    200 + n as i64
                );
            })
            .unwrap()
            .join()
            .expect("evaluating at the depth limit overflows a small stack");
    }
}
