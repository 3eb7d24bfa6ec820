//! Tests that span the crate: run against both backends, opened and restored as a subtask opens them.

mod suite;
