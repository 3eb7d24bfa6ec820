//! Expressions over records: the language of `weir_common::expr` compiled against a batch's schema and
//! evaluated a column at a time ([`eval`]), and keys made of column values ([`key`]). The `filter` and
//! `project` kinds are built on it.

pub mod eval;
pub mod key;
