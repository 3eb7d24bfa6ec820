//! Reports from tasks to the job manager (state changes, checkpoint acks and declines), sent in order by one
//! background task so that, e.g., `RUNNING` never overtakes `FAILED`.

use std::time::Duration;
use tokio::sync::mpsc;
use tonic::transport::Channel;
use weir_proto as pb;
use weir_proto::job_manager_internal_client::JobManagerInternalClient;

/// One message for the job manager.
#[derive(Debug)]
pub enum Report {
    /// A task changed state.
    State(pb::UpdateTaskStateRequest),
    /// A task acknowledged a checkpoint.
    Ack(pb::AcknowledgeCheckpointRequest),
    /// A task declined a checkpoint.
    Decline(pb::DeclineCheckpointRequest),
}

/// Queues reports for the job manager.
#[derive(Clone)]
pub struct Reporter {
    tx: mpsc::UnboundedSender<Report>,
    /// This task manager's id.
    pub tm_id: String,
}

impl Reporter {
    /// Starts the sender task on the current runtime.
    pub fn start(client: JobManagerInternalClient<Channel>, tm_id: String) -> Reporter {
        let (tx, mut rx) = mpsc::unbounded_channel::<Report>();
        tokio::spawn(async move {
            while let Some(report) = rx.recv().await {
                let mut delay = Duration::from_millis(100);
                for attempt in 0..5 {
                    let mut c = client.clone();
                    let res = match &report {
                        Report::State(r) => c.update_task_state(r.clone()).await.map(|_| ()),
                        Report::Ack(r) => c.acknowledge_checkpoint(r.clone()).await.map(|_| ()),
                        Report::Decline(r) => c.decline_checkpoint(r.clone()).await.map(|_| ()),
                    };
                    match res {
                        Ok(()) => break,
                        Err(status) if status.code() == tonic::Code::Unavailable && attempt < 4 => {
                            tokio::time::sleep(delay).await;
                            delay *= 2;
                        }
                        Err(status) => {
                            tracing::warn!(code = ?status.code(), message = status.message(), "report to job manager failed");
                            break;
                        }
                    }
                }
            }
        });
        Reporter { tx, tm_id }
    }

    /// Queues a report.
    pub fn send(&self, r: Report) {
        let _ = self.tx.send(r);
    }
}
