//! Reports from tasks to the job manager (state changes, checkpoint acks and declines), sent in order by one
//! background task so that, e.g., `RUNNING` never overtakes `FAILED`.
//!
//! A report is retried until the job manager takes it, for as long as this task manager lives: a lost
//! `FINISHED` or `FAILED` would leave a job running forever. Only a report the job manager refuses as invalid
//! is dropped (sending it again would not change the answer). The latest state of every task is also kept
//! here and carried by each heartbeat ([`Reporter::task_statuses`]), so the job manager reconciles even with
//! a report that is still waiting its turn.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use weir_common::ids::CheckpointId;
use weir_common::service::cluster::JmLink;
use weir_proto as pb;
use weir_proto::job_manager_internal_client::JobManagerInternalClient;

/// First wait before a failed report is sent again; it doubles up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(100);
/// Longest wait between two tries of one report: a job manager that comes back is heard from within this.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(2);
/// One try of a report waits at most this long for the job manager's answer (a hung connection must not
/// hold every later report back forever).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the state of a task that ended is still carried by heartbeats.
const ENDED_TASK_RETENTION: Duration = Duration::from_secs(600);

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

/// The task a state report is about: job, attempt, vertex, subtask.
type TaskId = (String, u32, u32, u32);

/// The latest state each task reported, with when it did.
type LatestStates = HashMap<TaskId, (pb::TaskStatus, Instant)>;

/// What a task's failure says of itself, for the job manager's decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cause {
    /// Its data connection broke: another task's failure, not its own, is the cause.
    pub by_peer: bool,
    /// No restart can mend it: the job fails at once.
    pub fatal: bool,
}

/// Queues reports for the job manager.
#[derive(Clone)]
pub struct Reporter {
    tx: mpsc::UnboundedSender<Report>,
    latest: Arc<Mutex<LatestStates>>,
    /// This task manager's id.
    pub tm_id: String,
}

/// What became of one try of a report.
enum Outcome {
    Delivered,
    /// The job manager refused it as invalid: trying again would not help.
    Refused(tonic::Status),
    Retry(String),
}

async fn send_once(link: &JmLink, report: &Report) -> Outcome {
    let mut c = match link.channel() {
        Ok(c) => JobManagerInternalClient::new(c),
        Err(e) => return Outcome::Retry(e.to_string()),
    };
    let call = async {
        match report {
            Report::State(r) => c.update_task_state(r.clone()).await.map(|_| ()),
            Report::Ack(r) => c.acknowledge_checkpoint(r.clone()).await.map(|_| ()),
            Report::Decline(r) => c.decline_checkpoint(r.clone()).await.map(|_| ()),
        }
    };
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(())) => Outcome::Delivered,
        Ok(Err(status)) if status.code() == tonic::Code::InvalidArgument => Outcome::Refused(status),
        Ok(Err(status)) => {
            // A standby names the leader: the next try goes there.
            link.observe(&status);
            Outcome::Retry(format!("{:?}: {}", status.code(), status.message()))
        }
        Err(_) => Outcome::Retry(format!("no answer within {} s", CALL_TIMEOUT.as_secs())),
    }
}

fn describe(report: &Report) -> (&'static str, u64) {
    match report {
        Report::State(r) => ("task state", r.state as u64),
        Report::Ack(r) => ("acknowledgement", r.checkpoint_id),
        Report::Decline(r) => ("decline", r.checkpoint_id),
    }
}

impl Reporter {
    /// Starts the sender task on the current runtime.
    pub fn start(client: JmLink, tm_id: String) -> Reporter {
        let (tx, mut rx) = mpsc::unbounded_channel::<Report>();
        tokio::spawn(async move {
            while let Some(report) = rx.recv().await {
                let mut delay = FIRST_RETRY_DELAY;
                let mut tries = 0u32;
                loop {
                    tries += 1;
                    match send_once(&client, &report).await {
                        Outcome::Delivered => break,
                        Outcome::Refused(status) => {
                            let (what, id) = describe(&report);
                            tracing::warn!(report = what, id, code = ?status.code(), message = status.message(),
                                "job manager refused a report; dropping it");
                            break;
                        }
                        Outcome::Retry(error) => {
                            let (what, id) = describe(&report);
                            // The first failures are routine (a job manager restarting); a long outage is worth a
                            // warning now and then, not a line per try.
                            if tries == 5 || tries.is_multiple_of(50) {
                                tracing::warn!(report = what, id, tries, %error, "job manager does not take a report; retrying");
                            } else {
                                tracing::debug!(report = what, id, tries, %error, "report failed; retrying");
                            }
                            tokio::time::sleep(delay).await;
                            delay = (delay * 2).min(MAX_RETRY_DELAY);
                        }
                    }
                }
            }
        });
        Reporter { tx, latest: Arc::default(), tm_id }
    }

    /// Queues a report.
    pub fn send(&self, r: Report) {
        if let Report::State(s) = &r {
            if let Some(t) = &s.task {
                let id = (t.job_id.clone(), t.attempt, t.vertex, t.subtask);
                let mut latest = self.latest.lock();
                let watermark = latest.get(&id).and_then(|(s, _)| s.watermark);
                let status = pb::TaskStatus {
                    task: Some(t.clone()),
                    state: s.state,
                    error: s.error.clone(),
                    watermark,
                    caused_by_peer: s.caused_by_peer,
                    fatal: s.fatal,
                };
                latest.insert(id, (status, Instant::now()));
            }
        }
        let _ = self.tx.send(r);
    }

    /// Queues a task's state change.
    pub fn state(&self, task: &pb::TaskRef, state: pb::TaskState, error: String) {
        self.state_caused(task, state, error, Cause::default());
    }

    /// Queues a task's state change, saying what caused it.
    pub fn state_caused(&self, task: &pb::TaskRef, state: pb::TaskState, error: String, cause: Cause) {
        self.send(Report::State(pb::UpdateTaskStateRequest {
            tm_id: self.tm_id.clone(),
            task: Some(task.clone()),
            state: state as i32,
            error,
            caused_by_peer: cause.by_peer,
            fatal: cause.fatal,
        }));
    }

    /// Records a task's new watermark; the next heartbeat carries it.
    pub fn watermark(&self, task: &pb::TaskRef, watermark: i64) {
        let id = (task.job_id.clone(), task.attempt, task.vertex, task.subtask);
        if let Some((status, _)) = self.latest.lock().get_mut(&id) {
            status.watermark = Some(watermark);
        }
    }

    /// Queues a task's decline of checkpoint `checkpoint_id`.
    pub fn decline(&self, task: &pb::TaskRef, checkpoint_id: CheckpointId, reason: String) {
        self.send(Report::Decline(pb::DeclineCheckpointRequest {
            tm_id: self.tm_id.clone(),
            task: Some(task.clone()),
            checkpoint_id: checkpoint_id.0,
            reason,
        }));
    }

    /// The latest state of every task that runs or ended recently, for a heartbeat.
    pub fn task_statuses(&self) -> Vec<pb::TaskStatus> {
        let mut latest = self.latest.lock();
        latest.retain(|_, (s, at)| !is_terminal(s.state) || at.elapsed() < ENDED_TASK_RETENTION);
        latest.values().map(|(s, _)| s.clone()).collect()
    }
}

fn is_terminal(state: i32) -> bool {
    [pb::TaskState::Finished, pb::TaskState::Failed, pb::TaskState::Canceled].into_iter().any(|t| t as i32 == state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use tonic::{Request, Response, Status};
    use weir_proto::job_manager_internal_server::{JobManagerInternal, JobManagerInternalServer};

    /// A job manager that is unavailable for its first `refuse` calls.
    #[derive(Clone, Default)]
    struct FlakyJm {
        calls: Arc<AtomicU32>,
        refuse: u32,
        got: Arc<Mutex<Vec<i32>>>,
    }

    #[tonic::async_trait]
    impl JobManagerInternal for FlakyJm {
        async fn register_task_manager(
            &self,
            _: Request<pb::RegisterTaskManagerRequest>,
        ) -> Result<Response<pb::RegisterTaskManagerResponse>, Status> {
            Err(Status::unimplemented("test"))
        }
        async fn heartbeat(&self, _: Request<pb::HeartbeatRequest>) -> Result<Response<pb::HeartbeatResponse>, Status> {
            Err(Status::unimplemented("test"))
        }
        async fn update_task_state(
            &self,
            r: Request<pb::UpdateTaskStateRequest>,
        ) -> Result<Response<pb::UpdateTaskStateResponse>, Status> {
            if self.calls.fetch_add(1, Ordering::SeqCst) < self.refuse {
                return Err(Status::unavailable("job manager restarting"));
            }
            self.got.lock().push(r.into_inner().state);
            Ok(Response::new(pb::UpdateTaskStateResponse {}))
        }
        async fn acknowledge_checkpoint(
            &self,
            _: Request<pb::AcknowledgeCheckpointRequest>,
        ) -> Result<Response<pb::AcknowledgeCheckpointResponse>, Status> {
            Err(Status::invalid_argument("unreadable task snapshot"))
        }
        async fn decline_checkpoint(
            &self,
            _: Request<pb::DeclineCheckpointRequest>,
        ) -> Result<Response<pb::DeclineCheckpointResponse>, Status> {
            Ok(Response::new(pb::DeclineCheckpointResponse {}))
        }
    }

    fn state(task: u32, state: pb::TaskState) -> Report {
        Report::State(pb::UpdateTaskStateRequest {
            tm_id: "tm".into(),
            task: Some(pb::TaskRef { job_id: "j".into(), attempt: 1, vertex: 0, subtask: task }),
            state: state as i32,
            error: String::new(),
            caused_by_peer: false,
            fatal: false,
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reports_survive_a_long_outage_in_order_and_heartbeats_carry_the_latest_state() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // About 3 s of refusals with the backoff: longer than the old reporter's 1.5 s of patience.
        let jm = FlakyJm { refuse: 6, ..Default::default() };
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(JobManagerInternalServer::new(jm.clone()))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        let link = JmLink::new(vec![format!("http://{addr}")], Default::default(), Duration::from_secs(30)).unwrap();
        let reporter = Reporter::start(link, "tm".into());
        // An acknowledgement the job manager refuses as invalid does not hold the others back.
        reporter.send(Report::Ack(pb::AcknowledgeCheckpointRequest::default()));
        reporter.send(state(0, pb::TaskState::Running));
        reporter.send(state(0, pb::TaskState::Finished));
        reporter.send(state(1, pb::TaskState::Failed));
        let mut statuses = reporter.task_statuses();
        statuses.sort_by_key(|s| s.task.as_ref().map(|t| t.subtask));
        let states: Vec<i32> = statuses.iter().map(|s| s.state).collect();
        assert_eq!(states, vec![pb::TaskState::Finished as i32, pb::TaskState::Failed as i32]);

        let deadline = Instant::now() + Duration::from_secs(20);
        while jm.got.lock().len() < 3 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let expected: Vec<i32> =
            [pb::TaskState::Running, pb::TaskState::Finished, pb::TaskState::Failed].map(|s| s as i32).to_vec();
        assert_eq!(*jm.got.lock(), expected, "every report arrives, in order, after the outage");
        server.abort();
    }
}
