//! The job manager's configuration: defaults < TOML file (`--config`) < `WEIR_*` environment < flags.

use clap::Parser;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use weir_common::config::ConfigError;
use weir_common::store::StoreOptions;

/// Every key of [`JobManagerConfig`], also read from `WEIR_<KEY>` environment variables.
pub const CONFIG_KEYS: &[&str] = &[
    "bind",
    "data_dir",
    "checkpoint_store",
    "heartbeat_interval_ms",
    "heartbeat_timeout_ms",
    "s3_endpoint",
    "s3_allow_http",
    "log_json",
    "savepoint_dir",
    "operator_state_inline_limit",
    "operator_state_limit",
    "union_state_fanout_limit",
];

/// The job manager's configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobManagerConfig {
    /// Address the gRPC services listen on (`HOST:PORT`, port 0 = any free port).
    pub bind: String,
    /// Directory of the local job store.
    pub data_dir: PathBuf,
    /// Object-store URL of the checkpoint root; default `file://<absolute data_dir>/checkpoints`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_store: Option<String>,
    /// Interval at which task managers send heartbeats.
    pub heartbeat_interval_ms: u64,
    /// A task manager that sent no heartbeat for this long is lost.
    pub heartbeat_timeout_ms: u64,
    /// Endpoint of an S3-compatible server (for `s3://` checkpoint stores).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_endpoint: Option<String>,
    /// Allow plain-HTTP S3 endpoints.
    pub s3_allow_http: bool,
    /// Log JSON lines instead of human-readable text.
    pub log_json: bool,
    /// Directory URL new savepoints go to when a request names none (default `<checkpoint store>/savepoints`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub savepoint_dir: Option<String>,
    /// Per operator state and subtask, element offsets up to this many bytes travel inline in the
    /// acknowledgement; beyond it the task manager writes them next to the state blob.
    pub operator_state_inline_limit: u64,
    /// One operator state summed over its subtasks above this many bytes declines the checkpoint.
    pub operator_state_limit: u64,
    /// A restore whose union state times the new parallelism exceeds this many bytes is refused.
    pub union_state_fanout_limit: u64,
}

impl Default for JobManagerConfig {
    fn default() -> Self {
        JobManagerConfig {
            bind: "127.0.0.1:6123".into(),
            data_dir: PathBuf::from("weir-jm-data"),
            checkpoint_store: None,
            heartbeat_interval_ms: 1000,
            heartbeat_timeout_ms: 5000,
            s3_endpoint: None,
            s3_allow_http: false,
            log_json: false,
            savepoint_dir: None,
            operator_state_inline_limit: weir_common::descriptor::DEFAULT_OPERATOR_STATE_INLINE_LIMIT,
            operator_state_limit: 1 << 30,
            union_state_fanout_limit: 2 << 30,
        }
    }
}

impl JobManagerConfig {
    /// Checks values that deserialize fine but make no sense.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.bind.trim().is_empty() || !self.bind.contains(':') {
            return Err(ConfigError(format!("bind: expected HOST:PORT, got {:?}", self.bind)));
        }
        let port = self.bind.rsplit(':').next().unwrap_or_default();
        if port.parse::<u16>().is_err() {
            return Err(ConfigError(format!("bind: invalid port in {:?}", self.bind)));
        }
        if self.data_dir.as_os_str().is_empty() {
            return Err(ConfigError("data_dir: must not be empty".into()));
        }
        if self.heartbeat_interval_ms == 0 {
            return Err(ConfigError("heartbeat_interval_ms: must be positive".into()));
        }
        if self.heartbeat_timeout_ms <= self.heartbeat_interval_ms {
            return Err(ConfigError(format!(
                "heartbeat_timeout_ms ({}) must be larger than heartbeat_interval_ms ({})",
                self.heartbeat_timeout_ms, self.heartbeat_interval_ms
            )));
        }
        if let Some(url) = &self.savepoint_dir {
            if !url.contains("://") {
                return Err(ConfigError(format!(
                    "savepoint_dir: expected a URL such as file:///dir or s3://bucket/prefix, got {url:?}"
                )));
            }
        }
        if self.operator_state_limit == 0 || self.union_state_fanout_limit == 0 {
            return Err(ConfigError("operator_state_limit and union_state_fanout_limit must be positive".into()));
        }
        if let Some(url) = &self.checkpoint_store {
            if !url.contains("://") {
                return Err(ConfigError(format!(
                    "checkpoint_store: expected a URL such as file:///dir or s3://bucket/prefix, got {url:?}"
                )));
            }
        }
        Ok(())
    }

    /// The checkpoint store URL, defaulting to `file://<absolute data_dir>/checkpoints`.
    pub fn checkpoint_store_url(&self) -> Result<String, ConfigError> {
        match &self.checkpoint_store {
            Some(url) if !url.trim().is_empty() => Ok(url.trim().to_string()),
            _ => {
                let dir = absolute(&self.data_dir)?;
                Ok(format!("file://{}", dir.join("checkpoints").display()))
            }
        }
    }

    /// The directory URL new savepoints go to by default.
    pub fn savepoint_dir_url(&self) -> Result<String, ConfigError> {
        match &self.savepoint_dir {
            Some(url) if !url.trim().is_empty() => Ok(url.trim().trim_end_matches('/').to_string()),
            _ => Ok(format!("{}/savepoints", self.checkpoint_store_url()?.trim_end_matches('/'))),
        }
    }

    /// Options for opening the checkpoint store.
    pub fn store_options(&self) -> StoreOptions {
        StoreOptions::s3(self.s3_endpoint.as_deref(), self.s3_allow_http)
    }
}

fn absolute(p: &Path) -> Result<PathBuf, ConfigError> {
    std::path::absolute(p).map_err(|e| ConfigError(format!("data_dir {}: {e}", p.display())))
}

/// Command-line flags of `weir-jobmanager`; every flag overrides the file and the environment.
#[derive(Debug, Default, Parser, Serialize)]
#[command(
    name = "weir-jobmanager",
    version,
    about = "Weir's job manager: schedules jobs onto task managers and coordinates checkpoints"
)]
pub struct Cli {
    /// TOML config file (keys as the flags, with underscores: bind, data_dir, …).
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Address to listen on, HOST:PORT (port 0 picks a free port) [default: 127.0.0.1:6123] [env: WEIR_BIND].
    #[arg(long, value_name = "HOST:PORT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bind: Option<String>,
    /// Directory of the local job store [default: weir-jm-data] [env: WEIR_DATA_DIR].
    #[arg(long, value_name = "DIR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// Checkpoint root: file:///dir, s3://bucket/prefix or memory:/// [default: file://<data-dir>/checkpoints]
    /// [env: WEIR_CHECKPOINT_STORE].
    #[arg(long, value_name = "URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_store: Option<String>,
    /// Heartbeat interval the task managers are told to use [default: 1000] [env: WEIR_HEARTBEAT_INTERVAL_MS].
    #[arg(long, value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat_interval_ms: Option<u64>,
    /// A task manager silent for this long is lost [default: 5000] [env: WEIR_HEARTBEAT_TIMEOUT_MS].
    #[arg(long, value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat_timeout_ms: Option<u64>,
    /// Endpoint of an S3-compatible server, e.g. http://127.0.0.1:9000 [env: WEIR_S3_ENDPOINT].
    #[arg(long, value_name = "URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_endpoint: Option<String>,
    /// Allow plain-HTTP S3 endpoints [env: WEIR_S3_ALLOW_HTTP].
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub s3_allow_http: bool,
    /// Log JSON lines to stderr instead of text [env: WEIR_LOG_JSON].
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub log_json: bool,
    /// Directory URL for savepoints when a request names none [default: <checkpoint store>/savepoints]
    #[arg(long, value_name = "URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub savepoint_dir: Option<String>,
    /// Element offsets of one operator state of one subtask up to this many bytes travel inline in the
    /// checkpoint acknowledgement; beyond it by reference to a file next to the state [default: 65536]
    #[arg(long, value_name = "BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator_state_inline_limit: Option<u64>,
    /// One operator state summed over its subtasks above this many bytes declines the checkpoint, naming
    /// the job, operator, state, elements and bytes; the job keeps running [default: 1073741824]
    #[arg(long, value_name = "BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator_state_limit: Option<u64>,
    /// A restore whose union state bytes times the new parallelism exceed this is refused before
    /// deploying [default: 2147483648]
    #[arg(long, value_name = "BYTES")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub union_state_fanout_limit: Option<u64>,
}

impl Cli {
    /// Loads and validates the configuration these flags describe.
    pub fn load(&self) -> Result<JobManagerConfig, ConfigError> {
        let config: JobManagerConfig = weir_common::config::load(self.config.as_deref(), CONFIG_KEYS, self)?;
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_file_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        let cli = Cli { data_dir: Some(dir.path().join("d")), ..Default::default() };
        let c = cli.load().unwrap();
        assert_eq!(c.bind, "127.0.0.1:6123");
        assert_eq!(c.heartbeat_interval_ms, 1000);
        assert_eq!(c.heartbeat_timeout_ms, 5000);
        let url = c.checkpoint_store_url().unwrap();
        assert!(url.starts_with("file:///") && url.ends_with("/d/checkpoints"), "{url}");

        let f = dir.path().join("jm.toml");
        std::fs::write(&f, "bind = \"0.0.0.0:7000\"\nheartbeat_timeout_ms = 9000\ns3_allow_http = true\n").unwrap();
        let cli = Cli { config: Some(f.clone()), bind: Some("127.0.0.1:0".into()), ..Default::default() };
        let c = cli.load().unwrap();
        assert_eq!(c.bind, "127.0.0.1:0");
        assert_eq!(c.heartbeat_timeout_ms, 9000);
        assert!(c.s3_allow_http);
        assert_eq!(c.store_options().options.get("aws_allow_http").map(String::as_str), Some("true"));

        std::fs::write(&f, "heartbeat_timeout = 9000\n").unwrap();
        let err = Cli { config: Some(f.clone()), ..Default::default() }.load().unwrap_err();
        assert!(err.to_string().contains("heartbeat_timeout"), "{err}");

        let err = Cli { heartbeat_timeout_ms: Some(10), ..Default::default() }.load().unwrap_err();
        assert!(err.to_string().contains("heartbeat_timeout_ms"), "{err}");
        let err = Cli { bind: Some("nonsense".into()), ..Default::default() }.load().unwrap_err();
        assert!(err.to_string().contains("bind"), "{err}");
    }

    /// `deploy/jobmanager.toml` (kept by the lead, outside this crate) must load and name every key.
    #[test]
    fn example_config_matches_the_code() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/jobmanager.toml");
        if !path.exists() {
            return;
        }
        let config = Cli { config: Some(path.clone()), ..Default::default() }.load().unwrap();
        assert_eq!(config.heartbeat_timeout_ms, JobManagerConfig::default().heartbeat_timeout_ms);
        let text = std::fs::read_to_string(&path).unwrap();
        for key in CONFIG_KEYS {
            assert!(text.contains(&format!("{key} =")), "deploy/jobmanager.toml lacks {key}");
        }
    }

    #[test]
    fn cli_parses_every_flag() {
        let cli = Cli::try_parse_from([
            "weir-jobmanager",
            "--bind",
            "127.0.0.1:0",
            "--data-dir",
            "/tmp/x",
            "--checkpoint-store",
            "s3://b/p",
            "--heartbeat-interval-ms",
            "100",
            "--heartbeat-timeout-ms",
            "900",
            "--s3-endpoint",
            "http://127.0.0.1:9000",
            "--s3-allow-http",
            "--log-json",
        ])
        .unwrap();
        let c = cli.load().unwrap();
        assert_eq!(c.checkpoint_store.as_deref(), Some("s3://b/p"));
        assert_eq!(c.store_options().options.get("aws_endpoint").map(String::as_str), Some("http://127.0.0.1:9000"));
        assert!(c.log_json);
    }
}
