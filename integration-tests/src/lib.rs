//! A harness that runs real Weir processes on this machine, for the integration tests, the demo and the
//! benchmark.
//!
//! - [`cluster`]: [`Cluster`] starts a job manager and task managers (port 0, a directory of their own, logs
//!   in files), kills and restarts them, talks to the job manager over gRPC and through the `weir` CLI, and
//!   waits — always with a timeout — for job states and checkpoints. A cluster dropped without
//!   [`Cluster::stop`] prints the tail of every log, so a failing test explains itself.
//! - [`job`]: [`CountJob`], the `datagen` → `keyed-count` → sink job of every scenario, as a spec file.
//! - [`output`]: reads what a `file-sink` committed and compares it with the datagen formula.
//! - [`s3`]: [`S3Server`], moto's S3 server on a loopback port, and [`S3Endpoint`], how processes reach it.
//! - [`kafka`]: [`kafka::KafkaBroker`], Tansu (a Kafka-compatible broker) on a loopback port, with a client to
//!   create topics, produce and read them back.
//! - [`proxy`]: [`TcpProxy`], a loopback proxy a test can take down and bring back up.
//! - [`lock`]: [`lock::ClusterLock`], which every cluster holds so that two never run at once, whichever test
//!   runner.
//! - [`process`]: one child process with its log; killed when dropped, and when the test thread dies.
//! - [`nexmark`]: the Nexmark query specs of `bench/nexmark/`, set up for a run, and Flink's results to compare
//!   with.
//! - [`probe`]: CPU seconds of a process and its Prometheus page, for the benchmarks.
//! - [`windows`]: windowed jobs and the rows they must commit, from the datagen formula.
//! - [`audit`]: shared files of a job's checkpoints that nothing references (or that are missing).
//!
//! Binaries are found in `$WEIR_BIN_DIR`, else next to the running executable or one directory up (test
//! executables live in `target/release/deps/`). Every wait is bounded; all traffic stays on 127.0.0.1.

pub mod audit;
pub mod cluster;
pub mod containers;
pub mod ha;
pub mod job;
pub mod kafka;
pub mod lock;
pub mod netns;
pub mod nexmark;
pub mod output;
pub mod pki;
pub mod probe;
pub mod process;
pub mod proxy;
pub mod s3;
pub mod windows;

pub use audit::{
    audit_shared_files, audit_shared_files_in, wait_for_no_orphaned_shared_files, wait_for_no_orphaned_shared_files_in,
    SharedFileAudit,
};
pub use cluster::{
    bin_dir, binary, describe_job, job_state, wait_until, CheckpointStore, Cluster, ClusterOptions, Fatal, JobState,
    RpcError,
};
pub use job::{CountJob, KeyedCountEmit, Sink};
pub use output::{
    counts_after, datagen_positions, read_sink_lines, read_sink_output, verify_counts, verify_job_output,
    verify_running_counts, SinkLines,
};
pub use process::{CommandOutput, Process};
pub use proxy::TcpProxy;
pub use s3::{S3Endpoint, S3Server};
pub use weir_proto::{CheckpointInfo, JobInfo};

/// A seed for a scenario's random choices: `$WEIR_TEST_SEED` if set, else a fresh one. Printed, so that a
/// failing run can be repeated with the same choices.
pub fn scenario_seed() -> u64 {
    let seed = std::env::var("WEIR_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("scenario seed: {seed} (set WEIR_TEST_SEED={seed} to repeat)");
    seed
}
