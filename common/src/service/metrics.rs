//! Prometheus metrics of a process, served as text at `GET /metrics` on `--metrics-bind`.
//!
//! A task manager records per task (labels `job_id`, `vertex`, `subtask`): `weir_records_in_total`,
//! `weir_records_out_total`, `weir_checkpoint_sync_seconds`, `weir_checkpoint_async_seconds`,
//! `weir_checkpoint_uploaded_bytes_total`, `weir_watermark_ms`, `weir_watermark_lag_ms`; per operator subtask
//! `weir_late_records_total`;
//! per `blackhole` subtask `weir_blackhole_records_total` and `weir_blackhole_lag_ms` (label `quantile`).
//! Counters are bumped once per batch, never per record. A job manager records its HA role: `weir_jobmanager_is_leader`
//! (0 or 1), `weir_jobmanager_epoch`, `weir_jobmanager_leader_elections_total`,
//! `weir_jobmanager_leadership_lost_total` (label `reason`: `lease` or `unhealthy`) and
//! `weir_jobmanager_resume_seconds` (from taking over as leader to each resumed job running again). Without
//! `--metrics-bind` no recorder is installed and every metric call is a no-op.

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// Its address could not be bound.
    #[error("cannot bind metrics address {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The process-wide recorder could not be installed (one is already).
    #[error("cannot install the metrics recorder: {0}")]
    Recorder(String),
}

/// Binds `addr`, installs the recorder and serves it in the background; returns the address bound.
pub async fn start(addr: &str) -> Result<std::net::SocketAddr, MetricsError> {
    let bind = |source| MetricsError::Bind { addr: addr.to_string(), source };
    let listener = TcpListener::bind(addr).await.map_err(bind)?;
    let bound = listener.local_addr().map_err(bind)?;
    let handle = install()?;
    tokio::spawn(serve(listener, handle));
    Ok(bound)
}

/// Installs the process-wide Prometheus recorder.
fn install() -> Result<PrometheusHandle, MetricsError> {
    PrometheusBuilder::new().install_recorder().map_err(|e| MetricsError::Recorder(e.to_string()))
}

/// Serves `GET /metrics` until the listener fails; any other path is 404.
async fn serve(listener: TcpListener, handle: PrometheusHandle) {
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut len = 0;
            // Read the request head (bounded in size and time); the body of a GET is empty.
            let read = tokio::time::timeout(Duration::from_secs(5), async {
                while len < buf.len() {
                    match stream.read(&mut buf[len..]).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => len += n,
                    }
                    if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
            })
            .await;
            if read.is_err() {
                return;
            }
            let head = String::from_utf8_lossy(&buf[..len]);
            let path = head.split_whitespace().nth(1).unwrap_or("");
            let (status, body) = if head.starts_with("GET ") && (path == "/metrics" || path.starts_with("/metrics?")) {
                ("200 OK", handle.render())
            } else {
                ("404 Not Found", "not found: metrics are at /metrics\n".to_string())
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}
