//! The task manager's side of the control plane: the gRPC service the job manager calls (deploy, trigger,
//! notify, cancel), registration and heartbeats ([`service`]). The ordered reports that tasks send back are
//! `crate::report`, below the tasks that send them.

pub mod service;
