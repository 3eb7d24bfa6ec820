//! The whole task-manager process: config (defaults < TOML file < `WEIR_*` env < flags), listeners, the
//! gRPC server, the data server, registration, and shutdown on SIGTERM/SIGINT. A custom task-manager binary
//! with extra operator kinds is `fn main() { weir_taskmanager::process::main_with_registry(my_registry()) }`.

use crate::api::registry::Registry;
use crate::control::service::{TaskManager, TaskManagerService, TaskManagerSettings};
use crate::net::DataSecurity;
use crate::net::DataServer;
use clap::Parser;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use weir_common::service::cluster::JmLink;
use weir_common::service::security::SecurityFlags;
use weir_common::service::store::StoreOptions;

/// Task-manager configuration.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct TmConfig {
    /// Job manager addresses, comma-separated (HA: any of them leads to the leader).
    pub jobmanager: String,
    /// gRPC listen address (port 0 = any free port).
    pub bind: String,
    /// Data-plane listen address (port 0 = any free port).
    pub data_bind: String,
    /// Host name other processes reach this one by, when binding to a wildcard address.
    pub advertise_host: String,
    /// Number of task slots.
    pub slots: u32,
    /// Local working directory (RocksDB instances, snapshots before upload).
    pub data_dir: PathBuf,
    /// Task-manager id; random when empty.
    pub tm_id: String,
    /// S3 endpoint for checkpoints on an S3-compatible server.
    pub s3_endpoint: Option<String>,
    /// Allow plain HTTP to the S3 endpoint.
    pub s3_allow_http: bool,
    /// Log as JSON lines.
    pub log_json: bool,
    /// MiB of write-back cache in front of each RocksDB keyed backend (per operator subtask).
    pub state_cache_mb: u64,
    /// MiB of RocksDB memtable per column family.
    pub rocksdb_write_buffer_mb: u64,
    /// MiB of RocksDB block cache shared by all tasks of this task manager.
    pub rocksdb_block_cache_mb: u64,
    /// Address of the Prometheus metrics endpoint (`GET /metrics`); empty = no metrics.
    pub metrics_bind: String,
    /// Address of the gRPC health service (`grpc.health.v1`, plain text, for probes); empty = none. Ready once
    /// registered with a job manager.
    pub health_bind: String,
    /// Read processing time from this file (milliseconds since the epoch, as text) instead of the system clock:
    /// for tests that move time by hand.
    pub clock_file: Option<PathBuf>,
    /// TLS (all three files: TLS on gRPC and the data plane) and the cluster secret members authenticate with
    /// when TLS is off.
    #[serde(flatten)]
    pub security: SecurityFlags,
}

impl Default for TmConfig {
    fn default() -> Self {
        TmConfig {
            jobmanager: "http://127.0.0.1:6123".into(),
            bind: "127.0.0.1:0".into(),
            data_bind: "127.0.0.1:0".into(),
            advertise_host: "127.0.0.1".into(),
            slots: 1,
            data_dir: PathBuf::from("weir-tm-data"),
            tm_id: String::new(),
            s3_endpoint: None,
            s3_allow_http: false,
            log_json: false,
            state_cache_mb: 64,
            rocksdb_write_buffer_mb: 64,
            rocksdb_block_cache_mb: 16,
            metrics_bind: String::new(),
            health_bind: String::new(),
            clock_file: None,
            security: SecurityFlags::default(),
        }
    }
}

/// Every key of [`TmConfig`] but the security flags' ([`SecurityFlags::KEYS`]).
const KEYS: &[&str] = &[
    "jobmanager",
    "bind",
    "data_bind",
    "advertise_host",
    "slots",
    "data_dir",
    "tm_id",
    "s3_endpoint",
    "s3_allow_http",
    "log_json",
    "state_cache_mb",
    "rocksdb_write_buffer_mb",
    "rocksdb_block_cache_mb",
    "metrics_bind",
    "health_bind",
    "clock_file",
];

/// Command-line flags of `weir-taskmanager`; each overrides the config file and environment.
#[derive(Debug, Parser, Serialize)]
#[command(name = "weir-taskmanager", version, about = "Weir task manager: runs tasks and keeps their state")]
pub struct Flags {
    /// TOML config file (keys as the long flags, with underscores).
    #[arg(long)]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Job manager address, or several comma-separated (HA: any of them leads to the leader)
    /// [env: WEIR_JOBMANAGER] [default: http://127.0.0.1:6123].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jobmanager: Option<String>,
    /// gRPC listen address; port 0 picks a free port [default: 127.0.0.1:0].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind: Option<String>,
    /// Data-plane listen address; port 0 picks a free port [default: 127.0.0.1:0].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_bind: Option<String>,
    /// Host advertised to other processes when binding a wildcard address [default: 127.0.0.1].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertise_host: Option<String>,
    /// Number of task slots [default: 1].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
    /// Local working directory [default: weir-tm-data].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// Task-manager id [default: random].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tm_id: Option<String>,
    /// S3 endpoint URL for s3:// checkpoint stores (else AWS_ENDPOINT_URL).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_endpoint: Option<String>,
    /// Allow plain HTTP to the S3 endpoint.
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub s3_allow_http: bool,
    /// Log as JSON lines.
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub log_json: bool,
    /// MiB of write-back cache in front of each RocksDB keyed backend [default: 64].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_cache_mb: Option<u64>,
    /// MiB of RocksDB memtable per column family [default: 64, as Flink].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rocksdb_write_buffer_mb: Option<u64>,
    /// MiB of RocksDB block cache shared by all tasks of this task manager [default: 16].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rocksdb_block_cache_mb: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics [default: off].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_bind: Option<String>,
    /// Serve the gRPC health service (plain text, for container and Kubernetes probes) at this address.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_bind: Option<String>,
    /// Read processing time from this file (ms since the epoch, as text) instead of the system clock (tests).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_file: Option<PathBuf>,
    /// TLS and the cluster secret.
    #[command(flatten)]
    #[serde(flatten)]
    pub security: SecurityFlags,
}

/// Why a task-manager process cannot start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The configuration (file, environment, flags) is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The TLS files or the cluster secret cannot be used.
    #[error(transparent)]
    Security(#[from] weir_common::service::security::SecurityError),
    /// A directory, a listener or the runtime could not be set up.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Another part of the process (metrics, the job-manager link) could not start.
    #[error("{0}")]
    Start(String),
}

impl From<weir_common::service::config::ConfigError> for ProcessError {
    fn from(e: weir_common::service::config::ConfigError) -> Self {
        ProcessError::Config(e.0)
    }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ProcessError {
    let what = what.into();
    move |source| ProcessError::Io { what, source }
}

fn address(field: &str, value: &str) -> Result<SocketAddr, ProcessError> {
    value.parse().map_err(|e| ProcessError::Config(format!("{field} {value:?}: {e}")))
}

/// Loads and checks the configuration.
pub fn load_config(flags: &Flags) -> Result<TmConfig, ProcessError> {
    let keys: Vec<&str> = KEYS.iter().chain(SecurityFlags::KEYS).copied().collect();
    let cfg: TmConfig = weir_common::service::config::load(flags.config.as_deref(), &keys, flags)?;
    if cfg.slots == 0 {
        return Err(ProcessError::Config("slots must be at least 1".into()));
    }
    weir_common::service::cluster::parse_addresses(&cfg.jobmanager)
        .map_err(|e| ProcessError::Config(format!("jobmanager: {e}")))?;
    security(&cfg)?;
    address("bind", &cfg.bind)?;
    address("data_bind", &cfg.data_bind)?;
    if !cfg.metrics_bind.is_empty() {
        address("metrics_bind", &cfg.metrics_bind)?;
    }
    if !cfg.health_bind.is_empty() {
        address("health_bind", &cfg.health_bind)?;
    }
    Ok(cfg)
}

/// The TLS files and cluster secret of this task manager, read and checked.
pub fn security(cfg: &TmConfig) -> Result<weir_common::service::security::Security, ProcessError> {
    Ok(cfg.security.member()?)
}

fn advertised(addr: SocketAddr, host: &str) -> String {
    if addr.ip().is_unspecified() {
        format!("{host}:{}", addr.port())
    } else {
        addr.to_string()
    }
}

/// Runs a task manager with the given registry until SIGTERM/SIGINT.
pub async fn run(cfg: TmConfig, registry: Registry) -> Result<(), ProcessError> {
    let tm_id = if cfg.tm_id.is_empty() {
        format!("tm-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
    } else {
        cfg.tm_id.clone()
    };
    std::fs::create_dir_all(&cfg.data_dir).map_err(io(format!("cannot create data dir {}", cfg.data_dir.display())))?;
    let data_dir = std::fs::canonicalize(&cfg.data_dir).map_err(io(format!("data dir {}", cfg.data_dir.display())))?;
    // Leftovers of an earlier run of this directory are useless: tasks restore from checkpoints.
    let _ = std::fs::remove_dir_all(data_dir.join("tasks"));
    let rpc_listener =
        tokio::net::TcpListener::bind(&cfg.bind).await.map_err(io(format!("cannot bind {}", cfg.bind)))?;
    let data_listener =
        tokio::net::TcpListener::bind(&cfg.data_bind).await.map_err(io(format!("cannot bind {}", cfg.data_bind)))?;
    let security = security(&cfg)?;
    let scheme = if security.tls.is_some() { "https" } else { "http" };
    let rpc_address = format!(
        "{scheme}://{}",
        advertised(rpc_listener.local_addr().map_err(io("gRPC listener"))?, &cfg.advertise_host)
    );
    let data_address = advertised(data_listener.local_addr().map_err(io("data listener"))?, &cfg.advertise_host);

    if !cfg.metrics_bind.is_empty() {
        let address = weir_common::service::metrics::start(&cfg.metrics_bind)
            .await
            .map_err(|e| ProcessError::Start(e.to_string()))?;
        tracing::info!(%address, "serving metrics at /metrics");
    }

    let data_server = Arc::new(DataServer::new(DataSecurity::from(&security)?));
    tokio::spawn(data_server.clone().run(data_listener));

    let addresses = weir_common::service::cluster::parse_addresses(&cfg.jobmanager)
        .map_err(|e| ProcessError::Config(e.to_string()))?;
    let jm = JmLink::new(addresses, security.clone(), Duration::from_secs(30))
        .map_err(|e| ProcessError::Start(e.to_string()))?;

    let tm = TaskManager::new(
        TaskManagerSettings {
            id: tm_id.clone(),
            slots: cfg.slots,
            rpc_address: rpc_address.clone(),
            data_address: data_address.clone(),
            data_dir,
            store_options: StoreOptions::s3(cfg.s3_endpoint.as_deref(), cfg.s3_allow_http),
            rocks: weir_state::rocks::RocksOptions {
                cache_bytes: (cfg.state_cache_mb as usize) << 20,
                write_buffer_bytes: (cfg.rocksdb_write_buffer_mb.max(1) as usize) << 20,
                block_cache: Some(weir_state::rocks::RocksOptions::shared_block_cache(
                    (cfg.rocksdb_block_cache_mb.max(1) as usize) << 20,
                )),
                clock: cfg.clock_file.clone().map(|path| {
                    tracing::info!(path = %path.display(), "processing time is read from a file");
                    Arc::new(crate::time::clock::FileClock::new(path)) as Arc<dyn weir_state::Clock>
                }),
            },
        },
        registry,
        data_server,
        jm.clone(),
    );

    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    // With TLS the handshakes are done by `tls_incoming`, which logs every peer it refuses.
    let tls = security.tls.as_ref().map(|t| t.rustls_grpc_server()).transpose()?;
    let api = tonic::service::interceptor::InterceptedService::new(
        weir_proto::task_manager_api_server::TaskManagerApiServer::new(TaskManagerService(tm.clone())),
        security.member_check(),
    );
    let router = tonic::transport::Server::builder()
        .timeout(Duration::from_secs(60))
        .concurrency_limit_per_connection(256)
        .add_service(api);
    let stopped = {
        let mut rx = shutdown_rx.clone();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    };
    let server = match tls {
        Some(config) => tokio::spawn(router.serve_with_incoming_shutdown(
            weir_common::service::security::tls_incoming(rpc_listener, config, "task manager"),
            stopped,
        )),
        None => tokio::spawn(
            router.serve_with_incoming_shutdown(tokio_stream::wrappers::TcpListenerStream::new(rpc_listener), stopped),
        ),
    };
    let registration = tokio::spawn(tm.clone().run_registration(jm, shutdown_rx));
    if !cfg.health_bind.is_empty() {
        let (address, health) = weir_common::service::health::start(&cfg.health_bind)
            .await
            .map_err(|e| ProcessError::Start(e.to_string()))?;
        tracing::info!(%address, "serving the gRPC health service");
        let tm = tm.clone();
        tokio::spawn(async move {
            loop {
                health.set_ready(tm.is_registered()).await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
    }

    // Installed before the address is printed: whoever reads that line may send SIGTERM at once.
    let signal = wait_for_signal();
    println!("weir-taskmanager {tm_id} listening on {rpc_address} data {data_address}");
    let _ = std::io::stdout().flush();
    tracing::info!(tm_id = %tm_id, rpc = %rpc_address, data = %data_address, slots = cfg.slots, "task manager started");

    signal.await;
    tracing::info!("shutting down: cancelling tasks");
    let _ = shutdown_tx.send(true);
    let canceled = tm.cancel_where(|_, _| true).await;
    // One budget for both, well inside the 10 s a container runtime or Kubernetes gives before SIGKILL: the
    // gRPC server's graceful stop waits for the job manager's open connection, so it takes all of it.
    let deadline = tokio::time::Instant::now() + SHUTDOWN_BUDGET;
    let _ = tokio::time::timeout_at(deadline, registration).await;
    let _ = tokio::time::timeout_at(deadline, server).await;
    tracing::info!(canceled_tasks = canceled, "task manager stopped");
    Ok(())
}

/// How long a stopping task manager waits for its registration loop and its gRPC server to end.
const SHUTDOWN_BUDGET: Duration = Duration::from_secs(5);

/// A future that resolves on SIGTERM or Ctrl-C; the SIGTERM handler is installed when this is called.
fn wait_for_signal() -> impl std::future::Future<Output = ()> {
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    async move {
        match term {
            Some(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

/// Entry point of a task-manager binary: parses flags and config, runs until a signal, exits non-zero with
/// a one-line reason on bad config.
pub fn main_with_registry(registry: Registry) {
    tune_malloc();
    let flags = Flags::parse();
    let cfg = match load_config(&flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weir-taskmanager: {e}");
            std::process::exit(2);
        }
    };
    weir_common::service::telemetry::init(cfg.log_json);
    if let Err(e) = weir_common::service::fault::arm_from_env() {
        eprintln!("weir-taskmanager: {e}");
        std::process::exit(2);
    }
    // Its threads resolve and check specs, compiling their SQL expressions (`spawn_blocking`): the stack a task
    // thread has, not tokio's 2 MiB, so the largest expressions a spec may hold fit with room to spare.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(2)
        .thread_stack_size(crate::task::TASK_STACK_BYTES)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weir-taskmanager: cannot start runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = rt.block_on(run(cfg, registry)) {
        eprintln!("weir-taskmanager: {e}");
        std::process::exit(1);
    }
}

/// Caps glibc's malloc arenas at 2 (the default allows 8 per core). Every thread that allocates may get an
/// arena of its own, and arenas keep freed memory: with a thread per checkpoint writing SST files, the task
/// manager's peak RSS was ~185 MiB instead of ~133 MiB in the throughput benchmark.
///
/// And lets an arena keep up to 16 MiB free at its top before giving it back to the kernel (glibc's default is
/// about 128 KiB). A task allocates and frees a batch's column buffers — hundreds of KiB — over and over; with
/// the default, each free gave the memory back and the next batch faulted it in again, with a TLB shootdown
/// across cores each time: a third of a Nexmark q0 run's CPU (2.2 M → 3.7 M events per CPU-second, peak RSS
/// unchanged). Must run before threads start.
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 16 << 20);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_matches_the_code() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/taskmanager.toml");
        let flags = Flags::parse_from(["weir-taskmanager", "--config", path.to_str().unwrap()]);
        let cfg = load_config(&flags).unwrap();
        assert_eq!(cfg.slots, 2);
        // Every key of the code's config appears in the example.
        let text = std::fs::read_to_string(&path).unwrap();
        for key in KEYS {
            assert!(text.contains(&format!("{key} =")), "deploy/taskmanager.toml lacks {key}");
        }
    }

    #[test]
    fn bad_config_is_refused() {
        let flags = Flags::parse_from(["weir-taskmanager", "--slots", "0"]);
        assert!(load_config(&flags).unwrap_err().to_string().contains("slots"));
        let flags = Flags::parse_from(["weir-taskmanager", "--bind", "nonsense"]);
        assert!(load_config(&flags).is_err());
    }
}
