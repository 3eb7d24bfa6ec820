//! What an operator author programs against, and what `examples/` imports: the operator traits and their
//! contexts ([`operator`]), the operator error ([`error`]), record batches and their known columns ([`batch`]), typed rows ([`rows`]), records
//! as key/value rows ([`record`]), operator kinds declared once ([`kind`]: name, state, typed config, columns,
//! side outputs, constructor) and the registry a task-manager binary is built from ([`registry`]), the exactly-once commit helpers for sinks ([`commit`]), and split positions as operator state
//! for sources ([`splits`]), timers for keyed operators ([`timers`]), rows of any schema as bytes for keyed
//! state ([`stored_rows`]), keys made of column values ([`keys`]). Kinds are tested with the operator test harness, a room of its own above this one
//! and the task (`crate::testing`).

pub mod batch;
pub mod by_key;
pub mod commit;
pub mod error;
pub mod keys;
pub mod kind;
pub mod operator;
pub mod record;
pub mod registry;
pub mod rows;
pub mod splits;
pub mod stored_rows;
pub mod timers;
