//! Serving the job manager over gRPC: both services on one listener, with request timeouts, a per-connection
//! concurrency limit and a tracing span per request set as tower layers on the server builder; TLS when
//! configured; the internal service wrapped in the member check (certificate or cluster secret) and the client
//! API in the token check.

use crate::api::service::JobManagerService;
use crate::cluster::client::MAX_MESSAGE_BYTES;
use crate::config::JobManagerConfig;
use crate::error::JobManagerError;
use crate::leader::Gate;
use crate::manager::JobManager;
use std::future::Future;
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use weir_proto::client_api_server::ClientApiServer;
use weir_proto::job_manager_internal_server::JobManagerInternalServer;

/// Longest time one request may take before the server answers `CANCELLED`. Long enough for a savepoint
/// request, which is answered when the savepoint completes (bounded by the job's checkpoint timeout, 10
/// minutes by default); clients bound their own calls tighter (`grpc-timeout` wins when shorter).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// Requests served at once on one connection.
pub const CONCURRENCY_PER_CONNECTION: usize = 256;
/// After the shutdown signal, requests in flight get this long to finish.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Binds the configured address (port 0 picks a free port).
pub async fn bind(config: &JobManagerConfig) -> Result<TcpListener, JobManagerError> {
    TcpListener::bind(&config.bind).await.map_err(|source| JobManagerError::Bind { addr: config.bind.clone(), source })
}

/// Serves `ClientApi` and `JobManagerInternal` on `listener` until `shutdown` completes, then lets requests
/// in flight finish. Without HA, pass [`Gate::fixed`].
pub async fn serve<F>(
    gate: Gate,
    config: &JobManagerConfig,
    listener: TcpListener,
    shutdown: F,
) -> Result<(), JobManagerError>
where
    F: Future<Output = ()> + Send,
{
    let security = config.security()?;
    let token = config.client_token()?;
    if config.members_unauthenticated_on_purpose() {
        tracing::warn!(
            "--insecure-members: clients need a token, but anyone who reaches this port can join as a task manager \
             (no TLS, no cluster secret)"
        );
    }
    let service = JobManagerService::new(gate);
    let (signaled, on_signal) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        shutdown.await;
        let _ = signaled.send(());
    };
    // With TLS the handshakes are done by `tls_incoming`, which logs every peer it refuses.
    let tls = security.tls.as_ref().map(|t| t.rustls_grpc_server()).transpose()?;
    let builder = Server::builder();
    let client_api = InterceptedService::new(ClientApiServer::new(service.clone()), security.client_check(token));
    let internal = InterceptedService::new(
        JobManagerInternalServer::new(service)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
        security.member_check(),
    );
    let router = builder
        .timeout(REQUEST_TIMEOUT)
        .concurrency_limit_per_connection(CONCURRENCY_PER_CONNECTION)
        .trace_fn(|req| tracing::debug_span!("grpc", path = %req.uri().path()))
        .add_service(client_api)
        .add_service(internal);
    let server: std::pin::Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>> = match tls {
        Some(config) => Box::pin(router.serve_with_incoming_shutdown(
            weir_common::service::security::tls_incoming(listener, config, "job manager"),
            shutdown,
        )),
        None => Box::pin(
            router.serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), shutdown),
        ),
    };
    tokio::pin!(server);
    let grace_over = async move {
        if on_signal.await.is_ok() {
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        result = &mut server => result?,
        _ = grace_over => tracing::warn!(grace_ms = SHUTDOWN_GRACE.as_millis() as u64, "requests still in flight after the shutdown grace period; stopping anyway"),
    }
    Ok(())
}

/// Starts a job manager, serves it until `shutdown`, then stops coordinating and persists every job.
pub async fn run<F>(config: JobManagerConfig, listener: TcpListener, shutdown: F) -> Result<(), JobManagerError>
where
    F: Future<Output = ()> + Send,
{
    let jm = JobManager::start(config.clone()).await?;
    let result = serve(Gate::fixed(jm.clone()), &config, listener, shutdown).await;
    jm.shutdown().await;
    result
}
