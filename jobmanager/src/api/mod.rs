//! The gRPC side of the job manager: the listener and the tower layers around both services ([`server`]),
//! and the services themselves, which translate protobuf requests into [`crate::JobManager`] calls
//! ([`service`]: the client API, and the internal service task managers call).

pub mod server;
pub mod service;
