//! The job manager's configuration: defaults < TOML file (`--config`) < `WEIR_*` environment < flags.

use clap::Parser;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use weir_common::service::config::ConfigError;
use weir_common::service::security::SecurityFlags;
use weir_common::service::store::StoreOptions;

/// Every key of [`JobManagerConfig`] but the security flags' ([`SecurityFlags::KEYS`]), also read from
/// `WEIR_<KEY>` environment variables.
const OWN_KEYS: &[&str] = &[
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
    "advertise_address",
    "ha",
    "etcd_endpoints",
    "ha_cluster_id",
    "ha_lease_ttl_ms",
    "etcd_timeout_ms",
    "auth_token_file",
    "insecure_members",
    "metrics_bind",
    "health_bind",
];

/// Every key of [`JobManagerConfig`], also read from `WEIR_<KEY>` environment variables.
pub fn config_keys() -> Vec<&'static str> {
    OWN_KEYS.iter().chain(SecurityFlags::KEYS).copied().collect()
}

/// The job manager's configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
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
    /// The client address this job manager publishes as HA leader (default `http://<bind>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertise_address: Option<String>,
    /// High availability: `none` (the local job store) or `etcd`.
    pub ha: String,
    /// etcd endpoints, comma-separated `http://HOST:PORT` (with `ha = "etcd"`).
    pub etcd_endpoints: String,
    /// Names the HA cluster: its keys live under `/weir/<id>/` in etcd.
    pub ha_cluster_id: String,
    /// TTL of the leader's etcd lease: a dead leader is replaced this long after its last keep-alive.
    pub ha_lease_ttl_ms: u64,
    /// Bound of every etcd call, and of the wait for etcd at start-up.
    pub etcd_timeout_ms: u64,
    /// TLS (all three files: TLS on every connection) and the cluster secret members authenticate with when
    /// TLS is off.
    #[serde(flatten)]
    pub security: SecurityFlags,
    /// File holding the bearer token clients must present (absent: the client API is open).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_token_file: Option<PathBuf>,
    /// Run with a client token but without member authentication (neither TLS nor a cluster secret), on
    /// purpose: anyone who reaches the port can then join as a task manager. Without it, that combination is
    /// refused at start.
    pub insecure_members: bool,
    /// Address of the Prometheus metrics endpoint (`GET /metrics`); absent = no metrics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_bind: Option<String>,
    /// Address of the gRPC health service (`grpc.health.v1`, plain text, for probes); absent = none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_bind: Option<String>,
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
            operator_state_inline_limit: weir_common::deploy::descriptor::DEFAULT_OPERATOR_STATE_INLINE_LIMIT,
            operator_state_limit: 1 << 30,
            union_state_fanout_limit: 2 << 30,
            advertise_address: None,
            ha: "none".into(),
            etcd_endpoints: String::new(),
            ha_cluster_id: "default".into(),
            ha_lease_ttl_ms: 5000,
            etcd_timeout_ms: 5000,
            security: SecurityFlags::default(),
            auth_token_file: None,
            insecure_members: false,
            metrics_bind: None,
            health_bind: None,
        }
    }
}

impl JobManagerConfig {
    /// Checks values that deserialize fine but make no sense.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_member_auth()?;
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
        match self.ha.as_str() {
            "none" => {}
            "etcd" => {
                self.etcd_endpoint_list()?;
                if self.ha_cluster_id.is_empty()
                    || !self.ha_cluster_id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    return Err(ConfigError(format!(
                        "ha_cluster_id: expected letters, digits, '-' or '_', got {:?}",
                        self.ha_cluster_id
                    )));
                }
                if self.ha_lease_ttl_ms < 2000 {
                    return Err(ConfigError(format!(
                        "ha_lease_ttl_ms: etcd leases last whole seconds, at least 2; got {} ms",
                        self.ha_lease_ttl_ms
                    )));
                }
                if self.etcd_timeout_ms == 0 {
                    return Err(ConfigError("etcd_timeout_ms: must be positive".into()));
                }
                self.client_address()?;
            }
            other => return Err(ConfigError(format!("ha: expected none or etcd, got {other:?}"))),
        }
        Ok(())
    }

    /// The etcd endpoints, parsed.
    pub fn etcd_endpoint_list(&self) -> Result<Vec<String>, ConfigError> {
        let list: Vec<String> =
            self.etcd_endpoints.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
        if list.is_empty() {
            return Err(ConfigError("etcd_endpoints: ha = etcd needs at least one etcd endpoint".into()));
        }
        for e in &list {
            if !e.starts_with("http://") && !e.starts_with("https://") {
                return Err(ConfigError(format!(
                    "etcd_endpoints: expected http://HOST:PORT or https://HOST:PORT, got {e:?}"
                )));
            }
            if e.starts_with("https://") && !self.security.tls_on() {
                return Err(ConfigError(format!(
                    "etcd_endpoints: {e} is https: give tls_cert, tls_key and tls_ca (the CA file must hold the CA of \
                     etcd's certificate; etcd sees this member's certificate)"
                )));
            }
        }
        Ok(list)
    }

    /// The address clients and task managers reach this job manager at, as an HA leader publishes it.
    pub fn client_address(&self) -> Result<String, ConfigError> {
        if let Some(a) = &self.advertise_address {
            if !a.starts_with("http://") && !a.starts_with("https://") {
                return Err(ConfigError(format!("advertise_address: expected http://HOST:PORT, got {a:?}")));
            }
            return Ok(a.trim_end_matches('/').to_string());
        }
        let host = self.bind.rsplit_once(':').map(|(h, _)| h).unwrap_or_default();
        if host == "0.0.0.0" || host == "[::]" || self.bind.ends_with(":0") {
            return Err(ConfigError(format!(
                "advertise_address: binding {} does not say where clients reach this job manager; set advertise_address",
                self.bind
            )));
        }
        let scheme = if self.security.tls_on() { "https" } else { "http" };
        Ok(format!("{scheme}://{}", self.bind))
    }

    /// A client token guards the client API; without TLS or a cluster secret the internal services, where task
    /// managers register and receive work, would still be open to anyone: a configuration mistake, unless said
    /// on purpose with `insecure_members`.
    fn check_member_auth(&self) -> Result<(), ConfigError> {
        let members_authenticated = self.security.tls_on() || self.security.cluster_secret_file.is_some();
        if self.auth_token_file.is_some() && !members_authenticated && !self.insecure_members {
            return Err(ConfigError(
                "auth_token_file protects the client API, but without TLS or a cluster secret anyone who reaches this \
                 port can still join as a task manager: add --tls-cert/--tls-key/--tls-ca (mutual TLS) or \
                 --cluster-secret-file, or pass --insecure-members to run so on purpose"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Whether members are let in unauthenticated although clients need a token (`insecure_members`): worth a
    /// warning at every start.
    pub fn members_unauthenticated_on_purpose(&self) -> bool {
        self.insecure_members && !self.security.tls_on() && self.security.cluster_secret_file.is_none()
    }

    /// What this job manager presents to task managers and checks of them: TLS files, the cluster secret.
    pub fn security(
        &self,
    ) -> Result<weir_common::service::security::Security, weir_common::service::security::SecurityError> {
        self.security.member()
    }

    /// The token clients must present, if one is configured.
    pub fn client_token(
        &self,
    ) -> Result<Option<weir_common::service::security::Secret>, weir_common::service::security::SecurityError> {
        match &self.auth_token_file {
            Some(f) => Ok(Some(weir_common::service::security::Secret::from_file("auth token", f)?)),
            None => Ok(None),
        }
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
    /// The client address this job manager publishes when it leads (HA) [default: http://<bind>]
    #[arg(long, value_name = "URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertise_address: Option<String>,
    /// High availability: none (local job store) or etcd [default: none]
    #[arg(long, value_name = "MODE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ha: Option<String>,
    /// etcd endpoints for --ha etcd, comma-separated http://HOST:PORT
    #[arg(long, value_name = "URL[,URL...]")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etcd_endpoints: Option<String>,
    /// The HA cluster's id: job managers with one id elect one leader [default: default]
    #[arg(long, value_name = "ID")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ha_cluster_id: Option<String>,
    /// TTL of the leader's lease in etcd [default: 5000]
    #[arg(long, value_name = "MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ha_lease_ttl_ms: Option<u64>,
    /// Bound of every etcd call and of the wait for etcd at start-up [default: 5000]
    #[arg(long, value_name = "MS")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etcd_timeout_ms: Option<u64>,
    /// TLS and the cluster secret.
    #[command(flatten)]
    #[serde(flatten)]
    pub security: SecurityFlags,
    /// File with the bearer token clients must present [default: the client API is open]
    #[arg(long, value_name = "FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth_token_file: Option<PathBuf>,
    /// With --auth-token-file but neither TLS nor --cluster-secret-file: start anyway, leaving the internal
    /// services open to anyone who reaches the port (refused without this flag)
    #[arg(long)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub insecure_members: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics [default: off]
    #[arg(long, value_name = "HOST:PORT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics_bind: Option<String>,
    /// Serve the gRPC health service (plain text, for container and Kubernetes probes) at ADDR [default: off]
    #[arg(long, value_name = "HOST:PORT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_bind: Option<String>,
}

impl Cli {
    /// Loads and validates the configuration these flags describe.
    pub fn load(&self) -> Result<JobManagerConfig, ConfigError> {
        let config: JobManagerConfig =
            weir_common::service::config::load(self.config.as_deref(), &config_keys(), self)?;
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
        for key in config_keys() {
            assert!(text.contains(&format!("{key} =")), "deploy/jobmanager.toml lacks {key}");
        }
    }

    #[test]
    fn a_client_token_needs_member_authentication() {
        let dir = tempfile::tempdir().unwrap();
        let token = Some(dir.path().join("token"));
        let err = Cli { auth_token_file: token.clone(), ..Default::default() }.load().unwrap_err().to_string();
        assert!(err.contains("--cluster-secret-file") && err.contains("--insecure-members"), "{err}");
        let secret = Some(dir.path().join("secret"));
        let ok = Cli {
            auth_token_file: token.clone(),
            security: SecurityFlags { cluster_secret_file: secret, ..Default::default() },
            ..Default::default()
        }
        .load();
        assert!(!ok.unwrap().members_unauthenticated_on_purpose());
        let tls = Cli {
            auth_token_file: token.clone(),
            security: SecurityFlags {
                tls_cert: Some("c".into()),
                tls_key: Some("k".into()),
                tls_ca: Some("a".into()),
                cluster_secret_file: None,
            },
            ..Default::default()
        };
        assert!(tls.load().is_ok());
        let on_purpose = Cli { auth_token_file: token, insecure_members: true, ..Default::default() }.load().unwrap();
        assert!(on_purpose.members_unauthenticated_on_purpose());
        // No token at all: the embedded local default, open on loopback.
        assert!(Cli::default().load().is_ok());
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
