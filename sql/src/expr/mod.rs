//! SQL scalar expressions over a row's columns (`bid_price * 0.908`, `event_type = 2 AND MOD(bid_auction, 123) =
//! 0`, `person_state IN ('OR', 'CA')`, `CASE … END`, casts, string and time functions): parsed with Flink's
//! conventions (backticked names, names kept as written, `0.908` a decimal), typed over an Arrow schema so that a
//! spec is checked before anything runs, and evaluated by DataFusion a whole batch at a time.
//!
//! - [`parse`]: text to a parsed expression ([`SqlExpr`]) or select list ([`SelectItem`]), with bounded size.
//! - [`context`]: the functions an expression may call (DataFusion's, and Weir's `KEY_INT` and `KEY_STRING`) and the planner's
//!   options.
//! - [`compile`]: a parsed expression planned for one input schema ([`Scalar`]): its type, and its evaluation.
//! - [`types`]: Weir's column type names (`int64`, `decimal(23,3)`, …) and the Arrow types they stand for.
//! - [`udf`]: Weir's own scalar functions.
//! - [`error`]: [`ExprError`], below the rest.

pub mod compile;
pub mod context;
pub mod error;
pub mod parse;
pub mod types;
pub mod udf;

pub use compile::{check_condition, compile, compile_column, compile_condition, compile_for_columns, type_of, Scalar};
pub use error::ExprError;
pub use parse::{parse_expr, parse_list, parse_select, SelectItem, SqlExpr, MAX_EXPR_OPERATORS};
