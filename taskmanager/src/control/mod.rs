//! The task manager's side of the control plane: the gRPC service the job manager calls, registration and
//! heartbeats ([`service`]), and the ordered reports of task states and checkpoint acknowledgements
//! ([`report`]).

pub mod report;
pub mod service;
