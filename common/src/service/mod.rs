//! What a Weir process runs on besides its job: layered config ([`config`]), tracing ([`telemetry`]), the
//! Prometheus endpoint ([`metrics`]), the gRPC health service ([`health`]), TLS, secrets and the member and
//! client checks ([`security`]), following the leading job manager ([`cluster`]), object stores from URLs
//! ([`store`]) and failpoints ([`fault`]).

pub mod cluster;
pub mod config;
pub mod fault;
pub mod health;
pub mod metrics;
pub mod security;
pub mod store;
pub mod telemetry;
