//! Clients of the task managers' `TaskManagerApi`, one lazily connected channel per address, with the
//! timeouts set on the endpoint (tower layers inside tonic), and the rule that tells a lost task manager
//! from an error it reported.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tonic::service::interceptor::InterceptedService;
use weir_common::service::security::{SecureChannel, Security};
use weir_proto::task_manager_api_client::TaskManagerApiClient;

/// Timeout for establishing a connection to a task manager.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Timeout of one request to a task manager.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest message accepted from or sent to a task manager.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// A client of one task manager.
pub type TmClient = TaskManagerApiClient<SecureChannel>;

/// A pool of task-manager clients keyed by RPC address.
#[derive(Clone, Debug, Default)]
pub struct TmClients {
    inner: Arc<Mutex<HashMap<String, TmClient>>>,
    security: Security,
}

impl TmClients {
    /// A pool whose channels present `security` (TLS with the member certificate, or the cluster secret).
    pub fn new(security: Security) -> TmClients {
        TmClients { inner: Arc::default(), security }
    }

    /// The client for an address (created on first use; it connects lazily).
    pub fn get(&self, address: &str) -> Result<TmClient, tonic::Status> {
        let mut map = self.inner.lock();
        if let Some(c) = map.get(address) {
            return Ok(c.clone());
        }
        let endpoint = self
            .security
            .endpoint(address, REQUEST_TIMEOUT)
            .map_err(|e| tonic::Status::invalid_argument(format!("task manager address: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT);
        let channel = InterceptedService::new(endpoint.connect_lazy(), self.security.credentials());
        let client = TaskManagerApiClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        map.insert(address.to_string(), client.clone());
        Ok(client)
    }

    /// Drops the client of an address (its task manager is gone).
    pub fn forget(&self, address: &str) {
        self.inner.lock().remove(address);
    }
}

/// Whether an RPC failed because the task manager cannot be reached (it then counts as lost), rather than
/// because it answered with an error.
pub fn is_connection_error(status: &tonic::Status) -> bool {
    matches!(status.code(), tonic::Code::Unavailable | tonic::Code::Cancelled | tonic::Code::DeadlineExceeded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_errors() {
        assert!(is_connection_error(&tonic::Status::unavailable("connection refused")));
        assert!(is_connection_error(&tonic::Status::cancelled("Timeout expired")));
        assert!(!is_connection_error(&tonic::Status::invalid_argument("unknown kind")));
        assert!(!is_connection_error(&tonic::Status::failed_precondition("stale session")));
    }

    #[tokio::test]
    async fn unreachable_task_manager_is_a_connection_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let clients = TmClients::default();
        let mut c = clients.get(&format!("http://{addr}")).unwrap();
        let err = c
            .cancel_job(weir_proto::CancelTasksRequest { job_id: "j".into(), up_to_attempt: 1, ..Default::default() })
            .await
            .unwrap_err();
        assert!(is_connection_error(&err), "{err:?}");
        assert!(clients.get("not a uri").is_err());
    }
}
