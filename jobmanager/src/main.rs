//! `weir-jobmanager`: parses the configuration, binds, serves until SIGTERM/SIGINT, and exits.

use anyhow::Context;
use clap::Parser;
use std::io::Write;
use std::process::ExitCode;
use weir_jobmanager::{Cli, JobManager};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match cli.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("weir-jobmanager: {e}");
            return ExitCode::from(2);
        }
    };
    weir_common::telemetry::init(config.log_json);
    if let Err(e) = weir_common::fault::arm_from_env() {
        eprintln!("weir-jobmanager: {e}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weir-jobmanager: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        let listener = match weir_jobmanager::bind(&config).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("weir-jobmanager: {e}");
                return ExitCode::from(2);
            }
        };
        let jm = match JobManager::start(config).await {
            Ok(jm) => jm,
            Err(e) => {
                eprintln!("weir-jobmanager: {e}");
                return ExitCode::from(2);
            }
        };
        match serve(jm, listener).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("weir-jobmanager: {e:#}");
                ExitCode::from(1)
            }
        }
    })
}

async fn serve(jm: JobManager, listener: tokio::net::TcpListener) -> anyhow::Result<()> {
    let addr = listener.local_addr().context("reading the bound address")?;
    // The handlers are installed before the address is printed: whoever reads that line may send SIGTERM at
    // once, and it must stop the job manager, not kill it.
    let shutdown = shutdown_signal()?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "weir-jobmanager listening on http://{addr}").context("writing to stdout")?;
    stdout.flush().context("writing to stdout")?;
    let result = weir_jobmanager::serve(jm.clone(), listener, shutdown).await;
    jm.shutdown().await;
    result.context("serving")
}

/// A future that resolves on SIGTERM or Ctrl-C, with its handlers installed now.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    let mut term = {
        use tokio::signal::unix::{signal, SignalKind};
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?
    };
    let ctrl_c = tokio::signal::ctrl_c();
    Ok(async move {
        #[cfg(unix)]
        tokio::select! {
            _ = term.recv() => {},
            _ = ctrl_c => {},
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        tracing::info!("shutdown signal received");
    })
}
