//! The coordinator of one job: a task that owns the job's record and handles its events one at a time —
//! task state reports, checkpoint acknowledgements and declines, lost task managers, cancel requests —
//! plus a periodic tick for deployment, checkpoint triggers and expiry. Decisions come from
//! [`crate::job::lifecycle`], [`crate::checkpoint::coordinator`], [`weir_common::deploy::assignment`] and [`crate::job::descriptors`]; this module
//! does the I/O (the checkpoint files' through [`crate::checkpoint::store`]). This file holds the actor, its run
//! loop and its event dispatch; its work is split by concern: deploying and failing over (`deploy.rs`),
//! checkpoints and their completion (`checkpoints.rs`), savepoint requests (`savepoints.rs`).

mod checkpoints;
mod deploy;
mod savepoints;

use crate::checkpoint::complete::{write_metadata, Completion, MetadataTarget};
use crate::checkpoint::coordinator::{
    build_metadata, operator_state_over_limit, snapshot_files, subsumed, AckOutcome, CheckpointCoordinator,
    CheckpointHistoryEntry, CheckpointStatus, PendingCheckpoint, RetainedCheckpoint, TaskKey, TaskReadiness,
    TriggerDecision,
};
use crate::checkpoint::store::{
    delete_checkpoint_dirs, load_restore_point, sweep_job_files, RestoreError, RestorePoint,
};
use crate::cluster::client::{is_connection_error, TmClient};
use crate::cluster::registry::SlotTarget;
use crate::error::{JobRequestError, JobStoreError};
use crate::job::context::Shared;
use crate::job::deploy::{
    after_deploy_failure, after_restore_error, deploy_order, restore_notes, AfterDeployFailure, AfterRestoreError,
};
use crate::job::descriptors::{build_descriptors, DeployPlan, RestorePlan};
use crate::job::lifecycle::{transition, FailureClass, JobState, RestartDecision};
use crate::job::mailbox::{JobEvent, JobHandle, JobView, SavepointRequest, TaskError};
use crate::job::record::JobRecord;
use futures::future::join_all;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tracing::{debug, error, info, warn};
use weir_common::checkpoint::{paths, CheckpointMetadata, SavepointTarget, TaskSnapshot};
use weir_common::deploy::descriptor::ExecutionGraph;
use weir_common::ids::{AttemptNumber, CheckpointId, JobId, SubtaskIndex, VertexId};
use weir_common::job::spec::ResolvedJob;
use weir_common::now_ms;
use weir_proto as pb;

/// How often a job's coordinator looks at its timers.
const TICK: Duration = Duration::from_millis(50);
/// While waiting for the tasks to finish after the final checkpoint, its completion is re-sent this often
/// (tasks tolerate late and repeated notifications; a lost one would otherwise stall the job).
const FINAL_RENOTIFY_MS: u64 = 2000;
/// Delay before retrying a deployment whose checkpoint could not be read from the store.
const STORE_RETRY_MS: u64 = 1000;
/// How often "waiting for slots" is logged while a job waits.
const WAITING_LOG_EVERY_MS: u64 = 30_000;
/// How often a running job's shared directory is swept for files of failed checkpoints that no acknowledgement
/// named (their task died while uploading).
const SWEEP_INTERVAL_MS: u64 = 10 * 60_000;
/// Slack for the store's clock against ours when judging a shared file's age.
const SWEEP_CLOCK_MARGIN_MS: u64 = 60_000;
/// Wait before sweeping a job that just ended, so that uploads of its canceled tasks have landed.
const SWEEP_GRACE_MS: u64 = 2_000;

/// How long tasks have to finish after a stop-with-savepoint completed before they are canceled.
const STOP_FINISH_TIMEOUT_MS: u64 = 30_000;

/// Whether a task's reported state says something the job's view of it does not know yet.
fn is_news(view: TaskStatus, reported: pb::TaskState) -> bool {
    match reported {
        pb::TaskState::Running => view == TaskStatus::Deploying,
        pb::TaskState::EndOfInput => matches!(view, TaskStatus::Deploying | TaskStatus::Running),
        pb::TaskState::Finished => view != TaskStatus::Finished,
        pb::TaskState::Failed | pb::TaskState::Canceled => true,
        pb::TaskState::Unspecified => false,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TaskStatus {
    Deploying,
    Running,
    EndOfInput,
    Finished,
}

/// One deployed attempt of the job.
struct Deployment {
    attempt: AttemptNumber,
    slots: Vec<SlotTarget>,
    tasks: BTreeMap<TaskKey, TaskStatus>,
    coordinator: CheckpointCoordinator,
    last_final_notify_ms: u64,
    /// Each task's latest event-time watermark, as heartbeats carry them.
    watermarks: BTreeMap<TaskKey, i64>,
}

impl Deployment {
    fn readiness(&self, job_running: bool) -> TaskReadiness {
        let all_running =
            job_running && self.tasks.values().all(|s| matches!(s, TaskStatus::Running | TaskStatus::EndOfInput));
        let all_end_of_input = all_running && self.tasks.values().all(|s| *s == TaskStatus::EndOfInput);
        TaskReadiness { all_running, all_end_of_input }
    }

    fn rpc_addresses(&self) -> Vec<String> {
        let set: BTreeSet<&str> = self.slots.iter().map(|s| s.rpc_address.as_str()).collect();
        set.into_iter().map(str::to_string).collect()
    }

    fn uses(&self, tm_id: &str, instance: u64) -> bool {
        self.slots.iter().any(|s| s.tm_id == tm_id && s.instance == instance)
    }

    /// Checkpoint (or savepoint) `id` completed at `now`; after a final one, its completion is re-sent from now.
    fn completed(&mut self, id: CheckpointId, now: u64, is_final: bool) {
        self.coordinator.record_completion(id, now, is_final);
        if is_final {
            self.last_final_notify_ms = now;
        }
    }
}

/// The outcome of a batch of RPCs to task managers.
struct RpcFailure {
    connection_lost: bool,
    cause: String,
}

fn task_ref(job: &JobId, attempt: AttemptNumber, (vertex, subtask): TaskKey) -> pb::TaskRef {
    pb::TaskRef { job_id: job.to_string(), attempt: attempt.0, vertex: vertex.0, subtask: subtask.0 }
}

/// "counts subtask 1" — a task named by the operators of its chain.
fn describe_task(job: &ResolvedJob, graph: &ExecutionGraph, (vertex, subtask): TaskKey) -> String {
    let uids = chain_uids(job, graph, vertex);
    if uids.is_empty() {
        format!("vertex {vertex} subtask {subtask}")
    } else {
        format!("{} subtask {subtask}", uids.join("->"))
    }
}

/// The uids of the operators chained in `vertex`, in order.
fn chain_uids<'a>(job: &'a ResolvedJob, graph: &ExecutionGraph, vertex: VertexId) -> Vec<&'a str> {
    graph
        .vertices
        .get(vertex.0 as usize)
        .map(|v| v.operators.iter().filter_map(|&i| job.operators.get(i)).map(|o| o.uid.as_str()).collect())
        .unwrap_or_default()
}

/// The watermark of each task of a deployment, and the lowest over those that have one (the job's event-time
/// progress: nothing at or before it is still to come, anywhere in the job).
fn watermark_info<'a>(
    job: &ResolvedJob,
    graph: &ExecutionGraph,
    tasks: impl Iterator<Item = &'a TaskKey>,
    watermarks: &BTreeMap<TaskKey, i64>,
) -> (Vec<pb::TaskWatermark>, Option<i64>) {
    if watermarks.is_empty() {
        return (Vec::new(), None);
    }
    let list: Vec<pb::TaskWatermark> = tasks
        .map(|&(vertex, subtask)| pb::TaskWatermark {
            vertex: vertex.0,
            subtask: subtask.0,
            operators: chain_uids(job, graph, vertex).join("->"),
            watermark: watermarks.get(&(vertex, subtask)).copied(),
        })
        .collect();
    let lowest = list.iter().filter_map(|t| t.watermark).min();
    (list, lowest)
}

/// The coordinator task of one job.
pub(crate) struct JobActor {
    shared: Arc<Shared>,
    record: JobRecord,
    graph: ExecutionGraph,
    view: Arc<Mutex<JobView>>,
    deployment: Option<Deployment>,
    restart_at_ms: u64,
    retained_meta: BTreeMap<CheckpointId, Arc<CheckpointMetadata>>,
    last_waiting_log_ms: Option<u64>,
    /// When the shared files were last swept while the job ran (0: not yet).
    last_sweep_ms: u64,
    /// Savepoint requests waiting for their turn.
    savepoint_queue: std::collections::VecDeque<SavepointRequest>,
    /// The savepoint in flight and who waits for it.
    savepoint_in_flight: Option<(CheckpointId, SavepointRequest)>,
    /// A stop with drain: the input is being ended; the final checkpoint is this savepoint.
    draining: Option<SavepointRequest>,
    /// A stop-with-savepoint completed: the tasks are finishing, by this time at the latest.
    stopping_until_ms: Option<u64>,
    /// When this job manager took the (recovered) job over: until its first redeployment runs, for the resume
    /// metric.
    takeover: Option<std::time::Instant>,
    /// The job failed over (or failed) on a task whose data connection broke: a failure of that attempt that
    /// is its own, reported until the deadline, replaces this cause in the job's failure reason.
    provisional_cause: Option<ProvisionalCause>,
}

/// A failure reason that a task's own failure, arriving later, replaces (see `JobActor::provisional_cause`).
struct ProvisionalCause {
    attempt: AttemptNumber,
    cause: String,
    until_ms: u64,
}

/// How long after a failover on a broken connection the job waits to hear the failure that broke it.
const PROVISIONAL_CAUSE_MS: u64 = 5_000;

impl JobActor {
    /// Starts the coordinator of a job; `recovered` jobs were read from the job store at start-up.
    pub(crate) fn spawn(shared: Arc<Shared>, record: JobRecord, recovered: bool) -> JobHandle {
        let (tx, rx) = mpsc::unbounded_channel();
        let view = Arc::new(Mutex::new(JobView::of(&record)));
        let graph = ExecutionGraph::build(&record.job);
        let shutdown = shared.shutdown_receiver();
        let actor = JobActor {
            shared,
            record,
            graph,
            view: view.clone(),
            deployment: None,
            restart_at_ms: 0,
            retained_meta: BTreeMap::new(),
            last_waiting_log_ms: None,
            last_sweep_ms: 0,
            savepoint_queue: Default::default(),
            savepoint_in_flight: None,
            draining: None,
            stopping_until_ms: None,
            takeover: recovered.then(std::time::Instant::now),
            provisional_cause: None,
        };
        let task = tokio::spawn(actor.run(rx, shutdown, recovered));
        JobHandle { tx, view, task: Some(task) }
    }

    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<JobEvent>,
        mut shutdown: watch::Receiver<bool>,
        recovered: bool,
    ) {
        if recovered && self.record.state.is_terminal() {
            return;
        }
        if recovered {
            self.recover().await;
            self.publish();
        }
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // A failed job still listens a moment for the failure that caused the one it failed on.
            let listening = self.provisional_cause.as_ref().is_some_and(|p| now_ms() < p.until_ms);
            if *shutdown.borrow() || (self.record.state.is_terminal() && !listening) {
                break;
            }
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                event = rx.recv() => match event {
                    Some(event) => self.handle(event).await,
                    None => break,
                },
                _ = tick.tick() => self.on_tick().await,
            }
            self.publish();
        }
        if !self.record.state.is_terminal() {
            info!(job_id = %self.record.id, state = %self.record.state, "job coordination stopped; the job resumes when a job manager (restarted, or the next HA leader) takes it up");
        }
        let _ = self.persist().await;
        self.publish();
    }

    fn publish(&self) {
        let mut view = JobView::of(&self.record);
        if let Some(d) = &self.deployment {
            let (watermarks, lowest) = watermark_info(&self.record.job, &self.graph, d.tasks.keys(), &d.watermarks);
            view.info.watermarks = watermarks;
            view.info.lowest_watermark = lowest;
        }
        *self.view.lock() = view;
    }

    /// Writes the record to the job store; failures are logged and returned.
    async fn persist(&self) -> Result<(), JobStoreError> {
        self.persist_record(&self.record).await
    }

    /// Writes `record` (this job's record or its next version) to the job store; failures are logged and
    /// returned.
    async fn persist_record(&self, record: &JobRecord) -> Result<(), JobStoreError> {
        let result = self.shared.job_store.save(record).await;
        if let Err(error) = &result {
            error!(job_id = %self.record.id, %error, "cannot persist the job");
        }
        result
    }

    fn set_state(&mut self, to: JobState) -> bool {
        let from = self.record.state;
        match transition(from, to) {
            Ok(to) => {
                self.record.state = to;
                if to.is_terminal() {
                    self.record.end_time_ms = now_ms();
                    let why = format!("job {} is {to}", self.record.id);
                    for r in self.savepoint_queue.drain(..).chain(self.draining.take()) {
                        let _ = r.reply.send(Err(JobRequestError::NotRunning(why.clone())));
                    }
                    // No checkpoint of this job will be in flight again: every unreferenced shared file goes,
                    // after a grace period for uploads of just-canceled tasks.
                    self.spawn_sweep(None, SWEEP_GRACE_MS);
                }
                info!(job_id = %self.record.id, from = %from, to = %to, attempt = self.record.attempt.0, "job state changed");
                true
            }
            Err(e) => {
                error!(job_id = %self.record.id, from = %from, to = %to, error = %e, "refused job state change");
                false
            }
        }
    }

    /// After a job-manager restart: checkpoints that were in flight failed, and a job that was running is
    /// redeployed (with the next attempt number) once enough slots are registered.
    async fn recover(&mut self) {
        let now = now_ms();
        let mut interrupted = Vec::new();
        for e in self.record.history.iter_mut().filter(|e| e.status == CheckpointStatus::InProgress) {
            e.status = CheckpointStatus::Failed;
            e.failure_reason = "the job manager stopped while the checkpoint was in progress".into();
            e.duration_ms = now.saturating_sub(e.trigger_time_ms);
            interrupted.push(e.id);
        }
        self.record.checkpoints_failed += interrupted.len() as u64;
        if matches!(self.record.state, JobState::Running | JobState::Restarting) {
            self.set_state(JobState::Restarting);
        }
        self.restart_at_ms = now;
        info!(job_id = %self.record.id, state = %self.record.state, attempt = self.record.attempt.0,
            latest_checkpoint = self.record.latest_completed().map(|r| r.id.0), "job recovered from the job store");
        let _ = self.persist().await;
        self.spawn_cleanup(interrupted, Vec::new());
    }

    async fn handle(&mut self, event: JobEvent) {
        match event {
            JobEvent::TaskState { tm_id, attempt, task, state, error } => {
                self.on_task_state(tm_id, attempt, task, state, error).await
            }
            JobEvent::Reconcile { tm_id, tasks } => {
                if let Some(d) = &mut self.deployment {
                    for t in tasks.iter().filter(|t| t.attempt == d.attempt && d.tasks.contains_key(&t.task)) {
                        if let Some(w) = t.watermark {
                            d.watermarks.insert(t.task, w);
                        }
                    }
                }
                for t in tasks {
                    let news = self.deployment.as_ref().is_some_and(|d| {
                        d.attempt == t.attempt && d.tasks.get(&t.task).is_some_and(|&v| is_news(v, t.state))
                    });
                    if news {
                        let name = describe_task(&self.record.job, &self.graph, t.task);
                        warn!(job_id = %self.record.id, attempt = t.attempt.0, task = %name, state = ?t.state,
                            "a heartbeat carried a task state the job had not heard of; acting on it");
                        self.on_task_state(tm_id.clone(), t.attempt, t.task, t.state, t.error).await;
                    }
                }
            }
            JobEvent::Acknowledge { attempt, task, checkpoint_id, snapshot } => {
                self.on_acknowledge(attempt, task, checkpoint_id, *snapshot).await
            }
            JobEvent::Decline { attempt, task, checkpoint_id, reason } => {
                self.on_decline(attempt, task, checkpoint_id, reason).await
            }
            JobEvent::TaskManagerLost { tm_id, instance, reason } => {
                if self.deployment.as_ref().is_some_and(|d| d.uses(&tm_id, instance)) {
                    self.failover(format!("task manager {tm_id} was lost: {reason}"), FailureClass::Retryable).await;
                }
            }
            JobEvent::Cancel { reply } => {
                let result = self.cancel().await;
                let _ = reply.send(result);
            }
            JobEvent::Savepoint(request) => self.on_savepoint_request(request).await,
        }
    }

    // ------------------------------------------------------------------------------------------ savepoints

    /// Stop with drain: tells every task manager of the deployment to end the input of its sources.
    fn end_input(&self) {
        let Some(dep) = self.deployment.as_ref() else { return };
        let req = pb::EndInputRequest {
            job_id: self.record.id.to_string(),
            attempt: dep.attempt.0,
            jm_session: self.shared.session.clone(),
            jm_epoch: self.shared.epoch,
        };
        self.call_each(dep.rpc_addresses(), "end input", true, move |mut c| {
            let req = req.clone();
            async move { c.end_input(req).await.map(|_| ()) }
        });
    }

    async fn on_tick(&mut self) {
        let now = now_ms();
        if self.stopping_until_ms.is_some_and(|t| now >= t) {
            warn!(job_id = %self.record.id, "tasks did not finish in time after the stop-with-savepoint; canceling them");
            self.undeploy(true);
            self.finish().await;
            return;
        }
        if self.deployment.is_none() {
            if matches!(self.record.state, JobState::Created | JobState::Restarting) && now >= self.restart_at_ms {
                self.try_deploy().await;
            }
            return;
        }
        self.coordinate(now).await;
    }

    // ------------------------------------------------------------------------------------------ tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_watermark_is_over_the_tasks_that_have_one() {
        let job = crate::job::descriptors::tests::demo_job();
        let graph = ExecutionGraph::build(&job);
        let tasks: Vec<TaskKey> =
            graph.vertices.iter().flat_map(|v| (0..v.parallelism).map(move |s| (v.id, SubtaskIndex(s)))).collect();
        assert_eq!(watermark_info(&job, &graph, tasks.iter(), &BTreeMap::new()), (Vec::new(), None));
        let marks = BTreeMap::from([(tasks[0], 5_000), (tasks[1], 4_000), (tasks[tasks.len() - 1], 3_500)]);
        let (list, lowest) = watermark_info(&job, &graph, tasks.iter(), &marks);
        assert_eq!(lowest, Some(3_500));
        assert_eq!(list.len(), tasks.len());
        assert_eq!(list[0].operators, "events");
        assert_eq!(list[0].watermark, Some(5_000));
        assert!(list.iter().filter(|t| t.watermark.is_none()).count() == tasks.len() - 3);
        assert_eq!(list.last().map(|t| t.operators.as_str()), Some("out"));
    }
}
