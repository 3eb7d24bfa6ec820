//! The options every command shares, resolved from embedded defaults < `--config` TOML file < `WEIR_*`
//! environment < flags (clap reads the environment variables together with the flags).

use crate::args::{GlobalArgs, OutputFormat, DEFAULT_JOBMANAGER, DEFAULT_RPC_TIMEOUT_SECS};
use crate::error::CliError;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use weir_common::service::security::{Secret, Security, TlsFiles};

/// The keys of the CLI's config file, with their defaults.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields, default)]
struct FileConfig {
    jobmanager: String,
    output: OutputFormat,
    rpc_timeout: u64,
}

impl Default for FileConfig {
    fn default() -> Self {
        FileConfig {
            jobmanager: DEFAULT_JOBMANAGER.to_string(),
            output: OutputFormat::Text,
            rpc_timeout: DEFAULT_RPC_TIMEOUT_SECS,
        }
    }
}

/// Flags (and environment variables) given on this invocation; `None` leaves the lower layers alone.
#[derive(Serialize)]
struct Flags<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    jobmanager: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<OutputFormat>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rpc_timeout: Option<u64>,
}

/// Resolved shared options.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Job manager address, always with a scheme (`http://` is added when missing).
    pub jobmanager: String,
    /// Output format of stdout.
    pub output: OutputFormat,
    /// Timeout of every call to the job manager.
    pub rpc_timeout: Duration,
    /// TLS and the bearer token presented to the job manager.
    pub security: Security,
}

impl Settings {
    /// Layers the config file (if any) under the flags.
    pub fn resolve(args: &GlobalArgs) -> Result<Settings, CliError> {
        let flags =
            Flags { jobmanager: args.jobmanager.as_deref(), output: args.output, rpc_timeout: args.rpc_timeout };
        // The environment is already folded into the flags by clap, so no keys are read from it here.
        let file: FileConfig = weir_common::service::config::load(args.config.as_deref(), &[], &flags)
            .map_err(|e| CliError::Usage(e.to_string()))?;
        if file.rpc_timeout == 0 {
            return Err(CliError::Usage("invalid configuration: rpc_timeout must be at least 1 second".into()));
        }
        let jobmanager = file.jobmanager.split(',').map(normalize_address).collect::<Vec<_>>().join(",");
        Ok(Settings {
            jobmanager,
            output: file.output,
            rpc_timeout: Duration::from_secs(file.rpc_timeout),
            security: security(args)?,
        })
    }
}

/// The token (from `--token-file`, else `WEIR_TOKEN`) and TLS files of this invocation. The token is read
/// here rather than by clap, which would show an environment variable's value in `--help`.
fn security(args: &GlobalArgs) -> Result<Security, CliError> {
    let usage = |e: weir_common::service::security::SecurityError| CliError::Usage(e.to_string());
    let token = match (&args.token_file, std::env::var("WEIR_TOKEN")) {
        (Some(f), _) => Some(Secret::from_file("token", f).map_err(usage)?),
        (None, Ok(t)) if !t.trim().is_empty() => Some(Secret::new("token", &t).map_err(usage)?),
        _ => None,
    };
    let tls = match (&args.security.tls_ca, &args.security.tls_cert, &args.security.tls_key) {
        (None, None, None) => None,
        (Some(ca), Some(cert), Some(key)) => Some(TlsFiles::load(cert, key, ca).map_err(usage)?),
        (Some(ca), None, None) => Some(TlsFiles::trusting(ca).map_err(usage)?),
        _ => return Err(CliError::Usage("--tls-cert and --tls-key go together, with --tls-ca".into())),
    };
    let secret = Security::cluster_secret(args.security.cluster_secret_file.as_deref()).map_err(usage)?;
    Ok(Security { tls, secret, token })
}

/// Adds `http://` to an address given as `HOST:PORT`.
pub fn normalize_address(addr: &str) -> String {
    let addr = addr.trim();
    if addr.is_empty() || addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_without_flags_or_file() {
        let s = Settings::resolve(&GlobalArgs::default()).unwrap();
        assert_eq!(s.jobmanager, DEFAULT_JOBMANAGER);
        assert_eq!(s.output, OutputFormat::Text);
        assert_eq!(s.rpc_timeout, Duration::from_secs(DEFAULT_RPC_TIMEOUT_SECS));
    }

    #[test]
    fn example_config_matches_the_code() {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/weir.toml");
        let args = GlobalArgs { config: Some(path.clone()), ..Default::default() };
        let s = Settings::resolve(&args).unwrap();
        assert_eq!(s.jobmanager, DEFAULT_JOBMANAGER);
        let text = std::fs::read_to_string(&path).unwrap();
        // serde_json, not toml, lists the keys: a toml dev-dependency enabled serde features the binaries do not
        // use, and the test build then compiled serde and everything above it a second time.
        let keys = serde_json::to_value(FileConfig::default()).unwrap();
        for key in keys.as_object().unwrap().keys() {
            assert!(text.contains(&format!("{key} =")), "deploy/weir.toml lacks {key}");
        }
    }

    #[test]
    fn file_then_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("weir.toml");
        std::fs::write(&path, "jobmanager = \"10.0.0.1:7000\"\noutput = \"json\"\n").unwrap();
        let mut args = GlobalArgs { config: Some(path.clone()), ..Default::default() };
        let s = Settings::resolve(&args).unwrap();
        assert_eq!(s.jobmanager, "http://10.0.0.1:7000");
        assert_eq!(s.output, OutputFormat::Json);

        args.jobmanager = Some("https://jm:6123".into());
        args.output = Some(OutputFormat::Text);
        let s = Settings::resolve(&args).unwrap();
        assert_eq!(s.jobmanager, "https://jm:6123");
        assert_eq!(s.output, OutputFormat::Text);

        std::fs::write(&path, "jobmanagr = \"x\"\n").unwrap();
        let e = Settings::resolve(&args).unwrap_err();
        assert!(e.to_string().contains("jobmanagr"), "{e}");
    }

    #[test]
    fn addresses_get_a_scheme() {
        assert_eq!(normalize_address("127.0.0.1:6123"), "http://127.0.0.1:6123");
        assert_eq!(normalize_address(" http://h:1 "), "http://h:1");
    }
}
