//! The gRPC health service (`grpc.health.v1`) on a plaintext port of its own (`health_bind`), for container
//! health checks and Kubernetes' `grpc` probes, which speak neither TLS nor bearer tokens. It tells only whether
//! the process serves: the empty service name is SERVING once the process has started, and the service
//! [`READY`] once it can do its work (a job manager: it leads; a task manager: it has registered with a job
//! manager).

use std::net::SocketAddr;
use tokio::net::TcpListener;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

/// The service name whose status is readiness.
pub const READY: &str = "weir.ready";

/// Sets readiness from the process (cheap to clone).
#[derive(Clone)]
pub struct Health {
    reporter: HealthReporter,
}

impl Health {
    /// Marks the process ready or not.
    pub async fn set_ready(&self, ready: bool) {
        let status = if ready { ServingStatus::Serving } else { ServingStatus::NotServing };
        self.reporter.set_service_status(READY, status).await;
    }
}

/// The health service could not start, or be asked.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// Its address could not be bound.
    #[error("cannot bind health address {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The service at the address could not be reached or did not answer.
    #[error("{0}")]
    Unreachable(String),
}

/// Binds `addr` and serves the health service in the background: the process SERVING, not yet ready.
pub async fn start(addr: &str) -> Result<(SocketAddr, Health), HealthError> {
    let bind = |source| HealthError::Bind { addr: addr.to_string(), source };
    let listener = TcpListener::bind(addr).await.map_err(bind)?;
    let bound = listener.local_addr().map_err(bind)?;
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter.set_service_status("", ServingStatus::Serving).await;
    reporter.set_service_status(READY, ServingStatus::NotServing).await;
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(async move {
        if let Err(e) = tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming).await {
            tracing::error!(error = %e, "the health service stopped");
        }
    });
    Ok((bound, Health { reporter }))
}

/// Asks the health service at `addr` (`host:port`) for `service`'s status, within `timeout`: `Ok(true)` if
/// SERVING, `Ok(false)` if not, `Err` if it could not be asked.
pub async fn check(addr: &str, service: &str, timeout: std::time::Duration) -> Result<bool, HealthError> {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| HealthError::Unreachable(format!("health address {addr}: {e}")))?
        .connect_timeout(timeout)
        .timeout(timeout);
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| HealthError::Unreachable(format!("cannot reach the health service at {addr}: {e}")))?;
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest { service: service.to_string() })
        .await
        .map_err(|e| HealthError::Unreachable(format!("health check at {addr}: {}", e.message())))?;
    Ok(answer.into_inner().status == tonic_health::pb::health_check_response::ServingStatus::Serving as i32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_process_serves_at_once_and_is_ready_when_it_says_so() {
        let (addr, health) = start("127.0.0.1:0").await.unwrap();
        let addr = addr.to_string();
        let t = Duration::from_secs(5);
        assert_eq!(check(&addr, "", t).await.ok(), Some(true));
        assert_eq!(check(&addr, READY, t).await.ok(), Some(false));
        health.set_ready(true).await;
        assert_eq!(check(&addr, READY, t).await.ok(), Some(true));
        let unknown = check(&addr, "other", t).await.unwrap_err().to_string();
        assert!(unknown.contains("health check"), "{unknown}");
        let nobody = check("127.0.0.1:1", "", Duration::from_millis(500)).await.unwrap_err().to_string();
        assert!(nobody.contains("cannot reach"), "{nobody}");
    }
}
