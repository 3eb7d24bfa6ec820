//! Weir's task manager.
//!
//! - [`operator`]: the operator API users implement (sources, operators, sinks, lifecycle hooks).
//! - [`registry`]: kind name → factory; users build their own task-manager binary with more kinds.
//! - [`builtins`]: `datagen`, `keyed-count`, `file-sink`, `blackhole`.
//! - [`record`]: records and their batch codec.
//! - [`commit`]: exactly-once file commits for sinks (hidden, pending, renamed on completion).
//! - [`net`]: the data plane (framed TCP, credit-based flow control).
//! - [`align`]: barrier alignment.
//! - [`task`]: one subtask's thread: the record loop, checkpoints, end of input.
//! - [`report`]: ordered reports to the job manager.
//! - [`service`]: the gRPC service, registration and heartbeats.
//! - [`server`]: config and the whole process, used by the `weir-taskmanager` binary.

pub mod align;
pub mod builtins;
pub mod commit;
pub mod net;
pub mod operator;
pub mod record;
pub mod registry;
pub mod report;
pub mod restore;
pub mod server;
pub mod service;
pub mod task;

pub(crate) use weir_common::now_ms;
