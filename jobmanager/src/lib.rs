//! Weir's job manager: accepts jobs over gRPC, schedules them onto task managers, coordinates their
//! checkpoints and restarts them from the latest checkpoint when something fails. Its folders are its
//! architecture, from the wire inwards:
//!
//! - [`api`]: the gRPC listener with its tower layers, and the services (client API, and the internal service
//!   task managers call), which translate protobuf requests into [`JobManager`] calls.
//! - [`manager`]: the [`JobManager`]: resumes stored jobs at start-up, accepts submissions, watches heartbeats
//!   and routes task messages to their job.
//! - [`job`]: one job's coordinator (an actor doing the I/O), its mailbox, what the manager shares with every
//!   job, its record and where the record is kept (a file per job, or etcd fenced by the leader's epoch), and
//!   the pure decisions it acts on: the lifecycle state machine and restart strategies, who restores what on a
//!   rescale, the task descriptors of a deployment.
//! - [`checkpoint`]: the checkpoint coordinator's pure decisions, the object-store work they lead to, and
//!   savepoints (reading, checking, summarising, disposing, ownership).
//! - [`cluster`]: the task-manager registry and slots, and the clients the job manager calls them with.
//! - [`ha`]: the etcd primitives (connection, election, terms and their fence), below the job store.
//! - [`leader`]: the leader loop that runs a job manager as leader or standby, above the job manager, and the
//!   gate the gRPC services serve through.
//! - [`config`] is the layered configuration and the command-line flags; [`error`] the error types.
//!
//! Choices where `docs/protocol.md` is silent:
//!
//! - A job that was `CREATED` (never deployed) stays `CREATED` across a job-manager restart; `RUNNING` and
//!   `RESTARTING` jobs become `RESTARTING` and are redeployed with the next attempt, which does not count as
//!   a restart of the restart strategy. Checkpoints in flight at the restart are recorded as failed.
//! - The final checkpoint is triggered even when periodic checkpoints are off; after a failed checkpoint
//!   it is retried after [`checkpoint::coordinator::FINAL_RETRY_DELAY_MS`]. While tasks have not all reported
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
//! [`Store`]: weir_common::service::store::Store

pub mod api;
pub mod checkpoint;
pub mod cluster;
pub mod config;
pub mod error;
pub mod ha;
pub mod job;
pub mod leader;
pub mod manager;

pub use api::server::{bind, run, serve};
pub use api::service::JobManagerService;
pub use config::{Cli, JobManagerConfig};
pub use error::{JobManagerError, JobRequestError};
pub use manager::JobManager;
