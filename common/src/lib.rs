//! Shared foundations of Weir, used by every other crate. Its folders depend one way (A ← B: B uses A): the root
//! files [`ids`] and [`text`] ← [`state`] ← [`job`] ← [`checkpoint`] ← [`deploy`]; [`service`] stands on the root
//! alone.
//!
//! - [`ids`]: newtypes for every id and counter that crosses a module boundary; [`text`]: a user's values quoted,
//!   and cut short, in error messages.
//! - [`state`]: key-group arithmetic ([`state::keygroup`], Flink's `KeyGroupRangeAssignment` with murmur3 over
//!   key bytes) and serializer snapshots ([`state::serializer`]: recorded per state in checkpoint metadata, how a
//!   new serializer relates to one and what judges it; the formats' rules are weir-state's, so this crate links
//!   no Avro or Protobuf reflection).
//! - [`job`]: the job spec as users write it, its protobuf form and its validation ([`job::spec`]); what an
//!   operator kind declares of itself and the config-field errors every kind names its fields in
//!   ([`job::kind`]), its config values typed in memory and on the wire ([`job::config_value`]); declared record
//!   schemas, checked on every edge at submission ([`job::schema`]); a source's watermark strategy
//!   ([`job::watermarks`]); the datagen record formula and its event times, DESIGN §10, shared by the source and
//!   by output verification ([`job::datagen`]).
//! - [`checkpoint`]: checkpoint metadata and the one place that builds object-store paths.
//! - [`deploy`]: what the job manager sends a task manager to deploy one subtask ([`deploy::descriptor`]), who
//!   restores what when an operator's parallelism changes ([`deploy::assignment`], pure: the job manager's
//!   restores and the task manager's operator test harness both use it), and the protobuf forms of checkpoint
//!   handles and restore descriptors ([`deploy::wire`]).
//! - [`service`]: what a process runs on — layered config (defaults < TOML file < `WEIR_*` env < flags), tracing,
//!   the Prometheus endpoint, the gRPC health service, TLS files, the cluster secret and client tokens, finding
//!   the leading job manager, object stores from URLs (`file://`, `s3://`, `memory://`), failpoints armed by
//!   `WEIR_FAILPOINTS` in tests.

pub mod checkpoint;
pub mod deploy;
pub mod ids;
pub mod job;
pub mod service;
pub mod state;
pub mod text;

/// Milliseconds since the Unix epoch, the time unit of every timestamp Weir stores.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
