//! One job: its coordinator ([`actor`]: owns the job's record and handles its events one at a time, doing
//! the I/O), the messages it takes ([`mailbox`]), its record ([`record`]), and the pure decisions it acts on:
//! the lifecycle state machine and restart strategies ([`lifecycle`]), who restores what when parallelism
//! changes ([`assignment`]) and the task descriptors of a deployment ([`descriptors`]).

pub(crate) mod actor;
pub mod assignment;
pub mod descriptors;
pub mod lifecycle;
pub(crate) mod mailbox;
pub mod record;

pub(crate) use actor::JobActor;
pub(crate) use mailbox::{JobEvent, ReportedTask, SavepointRequest};
