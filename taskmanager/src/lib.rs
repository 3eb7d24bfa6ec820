//! Weir's task manager. Its folders are its architecture:
//!
//! - [`api`]: what an operator author programs against (operator traits, records, the `Kind` trait a kind is
//!   declared with, the kind registry, commit helpers); `examples/` and users' own task-manager binaries import
//!   only this, [`builtins`] and [`testing`].
//! - [`testing`]: the operator test harness (Flink's `KeyedOneInputStreamOperatorTestHarness`): one operator or
//!   source run as a subtask with the task's own functions, snapshotted and restored at any parallelism; it
//!   stands above [`task`] and [`api`], which it runs.
//! - [`builtins`]: the 17 built-in kinds, a file or folder each, declared with [`api`]'s `Kind` as users' kinds
//!   are: sources `datagen`, `nexmark` (with the Nexmark generator) and `kafka`; `keyed-count`, `filter`,
//!   `project`, `aggregate`, `over`, `window-aggregate`, `window-top`, `join`, `interval-join`, `window-join`
//!   and `winning-bids`; sinks `file-sink`, `kafka-sink` (with `kafka`, in `kafka/`) and `blackhole`.
//!   [`builtins::registry`] is the list of them. The relational kinds (`join`, `interval-join`, `window-join`,
//!   `over`, `window-top`, `winning-bids`) share one skeleton, `builtins/relational/`: their operator, inputs'
//!   kept columns, joined rows and tumbling windows. Their expressions (`where`, `select`, `key`) are SQL,
//!   parsed, typed and evaluated by `weir_sql::expr` (DataFusion).
//! - [`task`]: one subtask's thread: what a task is (its events, environment and `Task`, in a file below the ones
//!   that implement it), the run loop, setup (planned by `plan_setup`) and restore, the snapshot
//!   and its upload (planned by `plan_upload`), output edges and chaining, barrier alignment, its errors; how
//!   one operator's state is opened, snapshotted and uploaded and its timers fired are functions the test
//!   harness runs too.
//! - [`net`]: the data plane: framing, a connection's stream and liveness, the data server, input and output
//!   channels with credit-based flow control.
//! - [`time`]: event time: watermark generation per source split, and the valve that combines the watermarks
//!   and idleness of several inputs (pure state machines the task loop drives).
//! - [`window`]: window assignment, slices and session merging as arithmetic, triggers and accumulators, the
//!   window config the window kinds read, the window functions and contents users write, and the one window
//!   operator on keyed timers and namespaced state (`window-aggregate` in [`builtins`] is it, configured).
//! - [`control`]: the gRPC service the job manager calls, registration and heartbeats.
//! - [`report`]: the ordered reports of task states and checkpoint acknowledgements to the job manager,
//!   below the tasks that send them.
//! - [`process`]: config and the whole process, used by the `weir-taskmanager` binary.

pub mod api;
pub mod builtins;
pub mod control;
pub mod net;
pub mod process;
pub mod report;
pub mod task;
pub mod testing;
pub mod time;
pub mod window;

pub(crate) use weir_common::now_ms;
