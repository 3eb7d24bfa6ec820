//! Tracing setup shared by the binaries: logs to stderr, human-readable or JSON, filtered by `RUST_LOG`.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Installs the global tracing subscriber (a second call does nothing).
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = if json { builder.json().try_init() } else { builder.compact().try_init() };
}
