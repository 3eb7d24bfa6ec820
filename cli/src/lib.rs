//! The `weir` command line.
//!
//! Module map:
//! - [`args`]: the commands and options (clap derive); `--help` is generated from them.
//! - [`settings`]: the options every command shares, layered as defaults < `--config` file < `WEIR_*` < flags.
//! - [`client`]: the job manager's `ClientApi` behind a small typed client with a timeout on every call.
//! - [`error`]: [`CliError`], which decides the exit code (2 for an invalid job spec, 1 otherwise).
//! - [`render`]: one function per output shape and format (JSON and text for jobs, checkpoints, the cluster)
//!   plus the duration, size and time formatting they use.
//! - [`progress`]: a progress line on stderr (updated in place on a terminal, a line per change otherwise).
//! - [`commands`]: `job submit|list|status|cancel|stop|delete`, `savepoint trigger|inspect|dispose|check`,
//!   `checkpoints`, `cluster`, `health`, `sql explain`.
//! - [`local`]: `weir local`, which starts a job manager and task managers as child processes.

pub mod args;
pub mod client;
pub mod commands;
pub mod error;
pub mod local;
pub mod progress;
pub mod render;
pub mod settings;

pub use error::CliError;

use std::process::ExitCode;

/// Runs one parsed command line; the error carries the message and exit code for `main`.
pub async fn run(cli: args::Cli) -> Result<ExitCode, CliError> {
    let settings = || settings::Settings::resolve(&cli.global);
    match cli.command {
        args::Command::Job(cmd) => commands::job(&settings()?, cmd).await,
        args::Command::Checkpoints { id } => commands::checkpoints(&settings()?, &id).await,
        args::Command::Savepoint(cmd) => commands::savepoint(&settings()?, cmd).await,
        args::Command::Cluster => commands::cluster(&settings()?).await,
        args::Command::Kinds { kind } => commands::kinds(&settings()?, kind.as_deref()).await,
        args::Command::Sql(cmd) => commands::sql(&settings()?, cmd),
        args::Command::Local(local) => local::run(&settings()?, local).await,
        // A probe inside a container: no config, no job manager, one bounded question.
        args::Command::Health { address, service } => commands::health(&address, &service).await,
    }
}
