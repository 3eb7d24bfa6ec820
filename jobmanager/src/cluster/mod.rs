//! The task managers: who is registered with how many slots, and slot assignment ([`registry`]); the gRPC
//! clients the job manager calls them with ([`client`]).

pub mod client;
pub mod registry;
