//! `weir-jobmanager`: parses the configuration, binds, serves until SIGTERM/SIGINT, and exits.

use anyhow::Context;
use clap::Parser;
use std::io::Write;
use std::process::ExitCode;
use weir_jobmanager::ha::Etcd;
use weir_jobmanager::leader::Gate;
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
    weir_common::service::telemetry::init(config.log_json);
    // The credential files are read before anything is served: a job manager whose token or certificate cannot
    // be read exits with the reason, instead of passing a health probe until it gets that far.
    if let Err(e) = config.security().and_then(|_| config.client_token()) {
        eprintln!("weir-jobmanager: {e}");
        return ExitCode::from(2);
    }
    if let Err(e) = weir_common::service::fault::arm_from_env() {
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
        if let Some(addr) = &config.metrics_bind {
            match weir_common::service::metrics::start(addr).await {
                Ok(address) => tracing::info!(%address, "serving metrics at /metrics"),
                Err(e) => {
                    eprintln!("weir-jobmanager: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        let health = match &config.health_bind {
            Some(addr) => match weir_common::service::health::start(addr).await {
                Ok((address, health)) => {
                    tracing::info!(%address, "serving the gRPC health service");
                    Some(health)
                }
                Err(e) => {
                    eprintln!("weir-jobmanager: {e}");
                    return ExitCode::from(2);
                }
            },
            None => None,
        };
        let result = if config.ha == "etcd" {
            serve_ha(config, listener, health).await
        } else {
            serve(config, listener, health).await
        };
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(Failure::Start(e)) => {
                eprintln!("weir-jobmanager: {e:#}");
                ExitCode::from(2)
            }
            Err(Failure::Serve(e)) => {
                eprintln!("weir-jobmanager: {e:#}");
                ExitCode::from(1)
            }
        }
    })
}

/// Why the job manager stopped: it could not start (bad config, etcd away) or serving failed.
enum Failure {
    Start(anyhow::Error),
    Serve(anyhow::Error),
}

fn listening(
    config: &weir_jobmanager::JobManagerConfig,
    listener: &tokio::net::TcpListener,
    role: &str,
) -> anyhow::Result<()> {
    let addr = listener.local_addr().context("reading the bound address")?;
    let scheme = if config.security.tls_on() { "https" } else { "http" };
    let mut stdout = std::io::stdout();
    writeln!(stdout, "weir-jobmanager listening on {scheme}://{addr}{role}").context("writing to stdout")?;
    stdout.flush().context("writing to stdout")
}

/// Keeps the health service's readiness up to date: `weir.ready` is SERVING while this job manager leads, which
/// tells operators and scripts which one does (a standby serves too: it answers with the leader's address).
fn report_readiness(health: Option<weir_common::service::health::Health>, gate: Gate) {
    let Some(health) = health else { return };
    tokio::spawn(async move {
        loop {
            health.set_ready(gate.get().is_ok()).await;
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    });
}

async fn serve(
    config: weir_jobmanager::JobManagerConfig,
    listener: tokio::net::TcpListener,
    health: Option<weir_common::service::health::Health>,
) -> Result<(), Failure> {
    let jm = JobManager::start(config.clone()).await.map_err(|e| Failure::Start(e.into()))?;
    // The handlers are installed before the address is printed: whoever reads that line may send SIGTERM at
    // once, and it must stop the job manager, not kill it.
    let shutdown = shutdown_signal().map_err(Failure::Start)?;
    listening(&config, &listener, "").map_err(Failure::Start)?;
    let gate = Gate::fixed(jm.clone());
    report_readiness(health, gate.clone());
    let result = weir_jobmanager::serve(gate, &config, listener, shutdown).await;
    jm.shutdown().await;
    result.context("serving").map_err(Failure::Serve)
}

/// HA: serves as a standby at once (pointing callers to the leader), campaigns, and leads when elected.
async fn serve_ha(
    config: weir_jobmanager::JobManagerConfig,
    listener: tokio::net::TcpListener,
    health: Option<weir_common::service::health::Health>,
) -> Result<(), Failure> {
    let start = Failure::Start;
    let endpoints = config.etcd_endpoint_list().map_err(|e| start(e.into()))?;
    let address = config.client_address().map_err(|e| start(e.into()))?;
    // Bad TLS or secret files are found now, not at the first connection.
    let security = config.security().map_err(|e| start(e.into()))?;
    config.client_token().map_err(|e| start(e.into()))?;
    let timeout = std::time::Duration::from_millis(config.etcd_timeout_ms);
    let etcd_tls = security.tls.as_ref().filter(|_| endpoints.iter().any(|e| e.starts_with("https://")));
    let etcd =
        Etcd::connect(&endpoints, &config.ha_cluster_id, timeout, etcd_tls).await.map_err(|e| start(e.into()))?;
    let url = config.checkpoint_store_url().map_err(|e| start(e.into()))?;
    let store = weir_common::service::store::Store::open(&url, &config.store_options()).map_err(|e| start(e.into()))?;
    etcd.bind_store(&config.ha_cluster_id, &store).await.map_err(|e| start(e.into()))?;
    let shutdown = shutdown_signal().map_err(Failure::Start)?;
    listening(&config, &listener, " (standby until elected)").map_err(Failure::Start)?;
    let (leader_tx, leader_rx) = tokio::sync::watch::channel(None);
    let gate = Gate::standby(leader_rx);
    report_readiness(health, gate.clone());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let ha =
        tokio::spawn(weir_jobmanager::leader::run(config.clone(), etcd, address, leader_tx, gate.clone(), stop_rx));
    let shutdown = async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    };
    let result = weir_jobmanager::serve(gate, &config, listener, shutdown).await;
    match tokio::time::timeout(std::time::Duration::from_secs(10), ha).await {
        Ok(Ok(Err(e))) => tracing::error!(error = %e, "HA loop failed"),
        Ok(_) => {}
        Err(_) => tracing::warn!("the HA loop did not stop within 10 s"),
    }
    result.context("serving").map_err(Failure::Serve)
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
