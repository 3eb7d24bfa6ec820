//! Weir's job manager: accepts jobs over gRPC, schedules them onto task managers, coordinates their
//! checkpoints and restarts them from the latest checkpoint when something fails.
//!
//! How the pieces fit, from the wire inwards:
//!
//! - [`server`] binds the listener and serves both gRPC services with tower layers (timeouts,
//!   concurrency limits, tracing spans); [`service`] translates protobuf requests into [`JobManager`] calls.
//! - [`manager`] holds the [`JobManager`]: the task-manager [`registry`], the checkpoint [`Store`], the
//!   local [`job_store`], the task-manager clients ([`tm_client`]) and one coordinator per job. It resumes
//!   stored jobs at start-up, watches heartbeats and routes task messages to their job.
//! - `job` (private) is the coordinator of one job: a task that handles the job's events one at a time
//!   (task states, acknowledgements, declines, lost task managers, cancel) and a timer for deployment,
//!   checkpoint triggers and expiry. It performs the I/O; the decisions live in the modules below.
//! - [`lifecycle`] is the job state machine (states, the table of allowed transitions, restart decisions);
//!   [`coordinator`] holds the checkpoint decisions (when to trigger, when complete, what is stale, what is
//!   subsumed and may be deleted, when failures are too many, whether operator state is over its limit) and
//!   [`checkpoint_store`] the object-store work they lead to (reading the checkpoint to restore from, deleting
//!   and sweeping files); [`assignment`] decides who restores what when parallelism changes and
//!   [`descriptors`] builds the task descriptors of a deployment; [`savepoint`] reads, checks, summarises and
//!   disposes of savepoints; [`registry`] tracks task managers and assigns slots.
//! - [`job_store`] persists each job: as `<data_dir>/jobs/<job-id>.json`, written atomically, or with HA in
//!   etcd, fenced by the leader's epoch; [`ha`] elects the leader through an etcd lease, runs a job manager as
//!   leader or standby, and resigns when the leader cannot work.
//! - [`config`] is the layered configuration and the command-line flags; [`error`] the error types.
//!
//! Choices where `docs/protocol.md` is silent:
//!
//! - A job that was `CREATED` (never deployed) stays `CREATED` across a job-manager restart; `RUNNING` and
//!   `RESTARTING` jobs become `RESTARTING` and are redeployed with the next attempt, which does not count as
//!   a restart of the restart strategy. Checkpoints in flight at the restart are recorded as failed.
//! - The final checkpoint is triggered even when periodic checkpoints are off; after a failed checkpoint
//!   it is retried after [`coordinator::FINAL_RETRY_DELAY_MS`]. While tasks have not all reported
//!   `FINISHED`, the final checkpoint's completion is re-sent every 2 s (tasks tolerate repeated
//!   notifications).
//! - Checkpoints aborted by failover, cancel or finish are recorded as failed but do not count toward
//!   `tolerable_failures`.
//! - Retained checkpoints whose `_metadata` is missing or corrupt are dropped from the retained list when a
//!   restore skips them; if none is readable the job fails, and if the store cannot be reached the
//!   deployment is retried a second later.
//! - Deleting a checkpoint directory never deletes a file a retained checkpoint references.
//! - Canceling a canceled job returns it unchanged; canceling a finished or failed job is
//!   `FAILED_PRECONDITION`. Task messages for unknown jobs are dropped.
//!
//! [`Store`]: weir_common::store::Store

#![warn(missing_docs)]

pub mod assignment;
pub mod checkpoint_store;
pub mod config;
pub mod coordinator;
pub mod descriptors;
pub mod error;
pub mod ha;
mod job;
pub mod job_store;
pub mod lifecycle;
pub mod manager;
pub mod registry;
pub mod savepoint;
pub mod server;
pub mod service;
pub mod tm_client;

pub use config::{Cli, JobManagerConfig};
pub use error::{JobManagerError, JobRequestError};
pub use manager::JobManager;
pub use server::{bind, run, serve};
pub use service::JobManagerService;
