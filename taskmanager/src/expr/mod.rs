//! The expression language of the `filter` and `project` kinds: a small subset of SQL's scalar expressions over
//! a row's columns (`bid_price * 0.908`, `event_type = 2 AND bid_auction % 123 = 0`, `person_state IN ('OR',
//! 'CA')`), parsed and typed so that a spec is checked before anything runs, and evaluated over whole Arrow columns.
//!
//! - [`ast`]: the expression tree ([`Expr`]).
//! - [`eval`]: an expression compiled against a batch's schema and evaluated a whole column at a time.
//! - [`key`]: keys made of column values.
//! - [`parse`]: text to [`Expr`] (and select lists: `expr [AS name], …`).
//! - [`typing`]: the type of an expression over a record schema, with SQL's rules (Flink's, where they differ:
//!   an integer times a decimal is a decimal of precision `p1 + p2 + 1`).

pub mod ast;
pub mod eval;
pub mod key;
pub mod parse;
pub mod typing;

pub use ast::{BinaryOp, Expr, Function, Literal, UnaryOp};
pub use parse::{parse_expr, parse_list, parse_select, SelectItem};
pub use typing::{check_condition, type_of, Type, TypeError};
