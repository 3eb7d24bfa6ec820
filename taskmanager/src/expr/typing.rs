//! The types of expressions over a record schema. Numbers are coerced as in SQL: two `int32`s stay `int32`,
//! other integers widen to `int64`, a decimal with an integer makes a decimal (an `int32` counts as
//! `decimal(10,0)`, an `int64` as `decimal(19,0)`), anything with a double makes a double. Decimal results take
//! the Hive/Arrow precision rules (`+ -`: scale `max(s1,s2)`, precision `max(p1-s1, p2-s2) + scale + 1`; `*`:
//! precision `p1 + p2 + 1`, scale `s1 + s2`; at most 38 digits).

use super::ast::{BinaryOp, Expr, Function, Literal, UnaryOp};
use weir_common::job::schema::{parse_decimal_type, Column, MAX_DECIMAL_PRECISION};

/// The type of a value in an expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Type {
    /// The type of a bare `NULL`: it takes the type of whatever it meets.
    Null,
    /// `bool`.
    Bool,
    /// `int32`.
    Int32,
    /// `int64`.
    Int64,
    /// `float64`.
    Float64,
    /// `decimal(precision, scale)`.
    Decimal(u8, i8),
    /// `utf8`.
    Utf8,
    /// `binary`.
    Binary,
    /// `timestamp_ms`.
    Timestamp,
}

impl Type {
    /// The type a schema column type names (`crate::schema::COLUMN_TYPES`, or `decimal(p,s)`).
    pub fn from_column_type(t: &str) -> Option<Type> {
        Some(match t {
            "bool" => Type::Bool,
            "int32" => Type::Int32,
            "int64" => Type::Int64,
            "float64" => Type::Float64,
            "utf8" => Type::Utf8,
            "binary" => Type::Binary,
            "timestamp_ms" => Type::Timestamp,
            _ => {
                let (p, s) = parse_decimal_type(t)?;
                Type::Decimal(p, s)
            }
        })
    }

    /// Its name as a schema column type. A bare `NULL` is written as `int64`, the type a column of nothing but
    /// nulls gets.
    pub fn column_type(self) -> String {
        match self {
            Type::Null | Type::Int64 => "int64".into(),
            Type::Bool => "bool".into(),
            Type::Int32 => "int32".into(),
            Type::Float64 => "float64".into(),
            Type::Decimal(p, s) => format!("decimal({p},{s})"),
            Type::Utf8 => "utf8".into(),
            Type::Binary => "binary".into(),
            Type::Timestamp => "timestamp_ms".into(),
        }
    }

    /// Its name in an error message: a column type, or `NULL` for a bare `NULL`.
    pub fn name(self) -> String {
        match self {
            Type::Null => "NULL".into(),
            t => t.column_type(),
        }
    }

    fn is_numeric(self) -> bool {
        matches!(self, Type::Null | Type::Int32 | Type::Int64 | Type::Float64 | Type::Decimal(..))
    }

    /// The decimal an integer converts to exactly.
    fn as_decimal(self) -> Option<(u8, i8)> {
        match self {
            Type::Int32 => Some((10, 0)),
            Type::Int64 | Type::Null => Some((19, 0)),
            Type::Decimal(p, s) => Some((p, s)),
            _ => None,
        }
    }
}

/// Why an expression does not type-check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TypeError(pub String);

fn err<T>(message: impl Into<String>) -> Result<T, TypeError> {
    Err(TypeError(message.into()))
}

/// The type of a literal.
pub fn literal_type(l: &Literal) -> Type {
    match l {
        Literal::Null => Type::Null,
        Literal::Bool(_) => Type::Bool,
        Literal::Int(_) => Type::Int64,
        Literal::Decimal { precision, scale, .. } => Type::Decimal(*precision, *scale),
        Literal::Float(_) => Type::Float64,
        Literal::Str(_) => Type::Utf8,
    }
}

/// The type both operands of an arithmetic operator or a comparison are brought to before it applies (decimals
/// keep their own precision and scale: the operator aligns them).
pub fn operand_type(op: BinaryOp, a: Type, b: Type) -> Result<Type, TypeError> {
    use Type::*;
    let name = op_name(op);
    if op.is_arithmetic() || (op.is_comparison() && a.is_numeric() && b.is_numeric()) {
        if !a.is_numeric() || !b.is_numeric() {
            return err(format!("{name} needs numbers, not {} and {}", a.name(), b.name()));
        }
        return Ok(match (a, b) {
            (Float64, _) | (_, Float64) => Float64,
            (Decimal(..), _) | (_, Decimal(..)) => {
                if matches!(op, BinaryOp::Div | BinaryOp::Rem) {
                    return err(format!("{name} of decimals is not supported (multiply by a decimal instead)"));
                }
                // Marker: each side becomes a decimal of its own; `binary_type` works out the result.
                Decimal(0, 0)
            }
            (Int32, Int32) => Int32,
            (Null, Null) => Null,
            _ => Int64,
        });
    }
    if op.is_comparison() {
        return match (a, b) {
            (Null, t) | (t, Null) => Ok(t),
            (x, y) if x == y => Ok(x),
            _ => err(format!("cannot compare {} with {}", a.name(), b.name())),
        };
    }
    // AND, OR
    match (a, b) {
        (Bool | Null, Bool | Null) => Ok(Bool),
        _ => err(format!("{name} needs booleans, not {} and {}", a.name(), b.name())),
    }
}

/// The type of `a op b`. Arithmetic on nothing but `NULL`s is an `int64` that is always null (SQL's meaning:
/// the result of any arithmetic with a null is null).
pub fn binary_type(op: BinaryOp, a: Type, b: Type) -> Result<Type, TypeError> {
    let operands = operand_type(op, a, b)?;
    if !op.is_arithmetic() {
        return Ok(Type::Bool);
    }
    if operands == Type::Null {
        return Ok(Type::Int64);
    }
    if let Type::Decimal(..) = operands {
        let (Some((p1, s1)), Some((p2, s2))) = (a.as_decimal(), b.as_decimal()) else {
            unreachable!("operand_type admits decimals with integers and decimals only")
        };
        let (p1, s1, p2, s2) = (i16::from(p1), i16::from(s1), i16::from(p2), i16::from(s2));
        let max = i16::from(MAX_DECIMAL_PRECISION);
        let (p, s) = match op {
            BinaryOp::Mul => ((p1 + p2 + 1).min(max), s1 + s2),
            _ => {
                let s = s1.max(s2);
                ((s + (p1 - s1).max(p2 - s2) + 1).min(max), s)
            }
        };
        if s > max {
            return err(format!("the product's scale {s} exceeds 38"));
        }
        return Ok(Type::Decimal(p as u8, s as i8));
    }
    Ok(operands)
}

fn op_name(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Mul => "*",
        BinaryOp::Div => "/",
        BinaryOp::Rem => "%",
        BinaryOp::Eq => "=",
        BinaryOp::NotEq => "<>",
        BinaryOp::Lt => "<",
        BinaryOp::LtEq => "<=",
        BinaryOp::Gt => ">",
        BinaryOp::GtEq => ">=",
        BinaryOp::And => "AND",
        BinaryOp::Or => "OR",
    }
}

/// The type of `e` over rows of `columns`, and whether it can be null.
pub fn type_of(e: &Expr, columns: &[Column]) -> Result<(Type, bool), TypeError> {
    match e {
        Expr::Column(name) => {
            let Some(c) = columns.iter().find(|c| &c.name == name) else {
                let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
                return err(format!("no column {name:?} in the input (it has {})", names.join(", ")));
            };
            match Type::from_column_type(&c.data_type) {
                Some(t) => Ok((t, c.nullable)),
                None => err(format!("column {name:?} is {}, which expressions do not handle", c.data_type)),
            }
        }
        Expr::Literal(l) => Ok((literal_type(l), *l == Literal::Null)),
        Expr::Unary(UnaryOp::Neg, x) => match type_of(x, columns)? {
            // `-NULL` is a null number, as arithmetic on nothing but NULLs.
            (Type::Null, _) => Ok((Type::Int64, true)),
            (t, n) if t.is_numeric() => Ok((t, n)),
            (t, _) => err(format!("- needs a number, not {}", t.name())),
        },
        Expr::Unary(UnaryOp::Not, x) => match type_of(x, columns)? {
            (Type::Bool | Type::Null, n) => Ok((Type::Bool, n)),
            (t, _) => err(format!("NOT needs a boolean, not {}", t.name())),
        },
        Expr::Binary(op, a, b) => {
            let (ta, na) = type_of(a, columns)?;
            let (tb, nb) = type_of(b, columns)?;
            // Division and remainder by zero give null, as a row must not fail the job.
            let divides = matches!(op, BinaryOp::Div | BinaryOp::Rem);
            Ok((binary_type(*op, ta, tb)?, na || nb || divides))
        }
        Expr::Call(Function::KeyInt, args) => match args.first().map(|a| type_of(a, columns)).transpose()? {
            Some((Type::Binary, _)) => Ok((Type::Int64, true)),
            Some((t, _)) => err(format!("KEY_INT needs a key (binary), not {}", t.name())),
            None => err("KEY_INT needs an argument"),
        },
        Expr::IsNull { expr, .. } => {
            type_of(expr, columns)?;
            Ok((Type::Bool, false))
        }
        Expr::InList { expr, list, .. } => {
            let (t, n) = type_of(expr, columns)?;
            for l in list {
                operand_type(BinaryOp::Eq, t, literal_type(l))?;
            }
            Ok((Type::Bool, n || list.contains(&Literal::Null)))
        }
    }
}

/// Checks that `c` is a condition (boolean) over `input`.
pub fn check_condition(
    c: &Expr,
    input: &[weir_common::job::schema::Column],
    field: &str,
) -> Result<(), weir_common::job::kind::ConfigFieldError> {
    match type_of(c, input).map_err(|e| weir_common::job::kind::field_err(field, e.0))? {
        (Type::Bool | Type::Null, _) => Ok(()),
        (t, _) => Err(weir_common::job::kind::field_err(
            field,
            format!("must be a condition (true or false), not {}", t.name()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::{parse_expr, Literal};

    fn cols() -> Vec<Column> {
        vec![
            Column::new("price", "int64", true),
            Column::new("kind", "int32", false),
            Column::new("state", "utf8", true),
            Column::new("at", "timestamp_ms", false),
            Column::new("big", "uint64", false),
        ]
    }

    fn t(text: &str) -> Result<(Type, bool), TypeError> {
        type_of(&parse_expr(text).unwrap(), &cols())
    }

    #[test]
    fn numbers_widen_as_in_sql() {
        assert_eq!(t("0.908 * price").unwrap(), (Type::Decimal(23, 3), true));
        assert_eq!(t("kind + 1.5").unwrap(), (Type::Decimal(12, 1), false));
        assert_eq!(t("kind + kind").unwrap(), (Type::Int32, false));
        assert_eq!(t("kind + price").unwrap(), (Type::Int64, true));
        assert_eq!(t("price % 123").unwrap(), (Type::Int64, true));
        assert_eq!(t("kind / 2").unwrap(), (Type::Int64, true), "a division by zero is null");
        assert_eq!(t("price * 1e0").unwrap().0, Type::Float64);
        assert_eq!(t("kind = 2 AND state IN ('OR', 'CA')").unwrap(), (Type::Bool, true));
        assert_eq!(t("state IS NULL").unwrap(), (Type::Bool, false));
        assert_eq!(t("at >= at").unwrap().0, Type::Bool);
        assert_eq!(Type::from_column_type("decimal(23,3)"), Some(Type::Decimal(23, 3)));
        assert_eq!(Type::Decimal(23, 3).column_type(), "decimal(23,3)");
        assert_eq!(parse_decimal_type("decimal(39,1)"), None);
        assert_eq!(parse_decimal_type("decimal(5,6)"), None);
        assert_eq!(literal_type(&Literal::Int(1)), Type::Int64);
    }

    #[test]
    fn mistakes_are_named() {
        assert!(t("nope + 1").unwrap_err().0.contains("no column \"nope\""));
        assert!(t("state + 1").unwrap_err().0.contains("needs numbers"));
        assert!(t("state = 1").unwrap_err().0.contains("cannot compare utf8 with int64"));
        assert!(t("kind AND true").unwrap_err().0.contains("needs booleans"));
        assert!(t("big > 1").unwrap_err().0.contains("uint64"));
        assert!(t("price / 0.5").unwrap_err().0.contains("not supported"));
        assert!(t("NOT price").unwrap_err().0.contains("NOT needs a boolean"));
        assert!(t("kind IN ('a')").unwrap_err().0.contains("cannot compare"));
    }

    /// The job manager types what the parser accepts on its own threads (2 MiB): at the depth limit, typing
    /// fits in a quarter of that.
    #[test]
    fn typing_at_the_depth_limit_fits_a_small_stack() {
        std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(|| {
                let (n, m) = (crate::expr::parse::MAX_EXPR_DEPTH - 1, crate::expr::parse::MAX_EXPR_NESTING);
                assert_eq!(t(&format!("price{}", " + 1".repeat(n))).unwrap(), (Type::Int64, true));
                assert_eq!(t(&format!("{}price > 1", "NOT ".repeat(m))).unwrap(), (Type::Bool, true));
                assert_eq!(t(&format!("{}price{}", "(".repeat(m), ")".repeat(m))).unwrap(), (Type::Int64, true));
                let mixed = format!("({}price{})", "(price + ".repeat(m - 1), ")".repeat(m - 1));
                assert_eq!(t(&mixed).unwrap(), (Type::Int64, true));
            })
            .unwrap()
            .join()
            .expect("typing at the depth limit overflows a small stack");
    }

    #[test]
    fn null_has_sql_meaning_and_its_own_name() {
        assert_eq!(t("NULL / NULL").unwrap(), (Type::Int64, true));
        assert_eq!(t("MOD(NULL, NULL)").unwrap(), (Type::Int64, true));
        assert_eq!(t("-NULL").unwrap(), (Type::Int64, true));
        assert_eq!(t("NULL + 1.5").unwrap().0, Type::Decimal(21, 1));
        assert_eq!(t("NOT NULL").unwrap(), (Type::Bool, true));
        assert!(t("KEY_INT(NULL)").unwrap_err().0.contains("not NULL"));
        assert!(t("NULL AND 1").unwrap_err().0.contains("not NULL and int64"));
    }
}
