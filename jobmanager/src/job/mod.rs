//! One job: its coordinator ([`actor`]: owns the job's record and handles its events one at a time, doing
//! the I/O), the messages it takes ([`mailbox`]), what the manager shares with every job (`context`), its
//! record ([`record`]) and where records are kept ([`store`]), and the pure decisions it acts on:
//! the lifecycle state machine and restart strategies ([`lifecycle`]), the task descriptors of a deployment
//! ([`descriptors`], restores assigned by `weir_common::deploy::assignment`) and what a deployment
//! does on the way ([`deploy`]: what a restore means for the record, retry or fail, redeploy or fail over).

pub(crate) mod actor;
pub(crate) mod context;
pub mod deploy;
pub mod descriptors;
pub mod lifecycle;
pub(crate) mod mailbox;
pub mod record;
pub mod store;

pub(crate) use actor::JobActor;
pub(crate) use mailbox::{JobEvent, ReportedTask, SavepointRequest, TaskError};
