//! Weir's SQL, on Apache DataFusion.
//!
//! - [`expr`]: SQL scalar expressions (`price * 0.908`, `MOD(auction, 123) = 0`) parsed with Flink's
//!   conventions, typed over an Arrow schema and evaluated a whole batch at a time: the expression engine of the
//!   `project`, `filter` and join kinds.
//! - [`script`]: Flink SQL scripts (`SET`, `CREATE TABLE`, `CREATE VIEW`, `INSERT INTO … SELECT`) planned into a
//!   Weir job spec over the built-in kinds.

pub mod expr;
pub mod script;
