//! Clients of the task managers' `TaskManagerApi`, one lazily connected channel per address, with the
//! timeouts set on the endpoint (tower layers inside tonic), and the rule that tells a lost task manager
//! from an error it reported.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use weir_proto::task_manager_api_client::TaskManagerApiClient;

/// Timeout for establishing a connection to a task manager.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Timeout of one request to a task manager.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest message accepted from or sent to a task manager.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// A client of one task manager.
pub type TmClient = TaskManagerApiClient<Channel>;

/// A pool of task-manager clients keyed by RPC address.
#[derive(Clone, Default, Debug)]
pub struct TmClients {
    inner: Arc<Mutex<HashMap<String, TmClient>>>,
}

impl TmClients {
    /// The client for an address (created on first use; it connects lazily).
    pub fn get(&self, address: &str) -> Result<TmClient, tonic::Status> {
        let mut map = self.inner.lock();
        if let Some(c) = map.get(address) {
            return Ok(c.clone());
        }
        let endpoint = Endpoint::from_shared(address.to_string())
            .map_err(|e| tonic::Status::invalid_argument(format!("invalid task manager address {address:?}: {e}")))?
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .tcp_nodelay(true);
        let client = TaskManagerApiClient::new(endpoint.connect_lazy())
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
