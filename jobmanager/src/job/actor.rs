//! The coordinator of one job: a task that owns the job's record and handles its events one at a time —
//! task state reports, checkpoint acknowledgements and declines, lost task managers, cancel requests —
//! plus a periodic tick for deployment, checkpoint triggers and expiry. Decisions come from
//! [`crate::job::lifecycle`], [`crate::checkpoint::coordinator`], [`crate::job::assignment`] and [`crate::job::descriptors`]; this module
//! does the I/O (the checkpoint files' through [`crate::checkpoint::store`]).

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
use crate::error::JobRequestError;
use crate::job::context::Shared;
use crate::job::deploy::{
    after_deploy_failure, after_restore_error, deploy_order, restore_notes, AfterDeployFailure, AfterRestoreError,
};
use crate::job::descriptors::{build_descriptors, DeployPlan, RestorePlan};
use crate::job::lifecycle::{transition, JobState, RestartDecision};
use crate::job::mailbox::{JobEvent, JobHandle, JobView, SavepointRequest, TaskError};
use crate::job::record::JobRecord;
use bytes::Bytes;
use futures::future::join_all;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tracing::{debug, error, info, warn};
use weir_common::checkpoint::{paths, CheckpointMetadata, SavepointTarget, TaskSnapshot};
use weir_common::descriptor::ExecutionGraph;
use weir_common::ids::{AttemptNumber, CheckpointId, JobId, SubtaskIndex, VertexId};
use weir_common::now_ms;
use weir_common::spec::ResolvedJob;
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
    async fn persist(&self) -> Result<(), String> {
        self.persist_record(&self.record).await
    }

    /// Writes `record` (this job's record or its next version) to the job store; failures are logged and
    /// returned.
    async fn persist_record(&self, record: &JobRecord) -> Result<(), String> {
        let result = self.shared.job_store.save(record).await.map_err(|e| e.to_string());
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

    fn metadata_url(&self, id: CheckpointId) -> String {
        format!("{}/{}", self.shared.store.url().trim_end_matches('/'), paths::metadata(&self.record.id, id))
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
                    self.failover(format!("task manager {tm_id} was lost: {reason}")).await;
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

    async fn on_savepoint_request(&mut self, request: SavepointRequest) {
        let refuse = |request: SavepointRequest, why: String| {
            let _ = request.reply.send(Err(JobRequestError::NotRunning(why)));
        };
        if self.record.state.is_terminal() {
            let why = format!("job {} is {}: it can take no savepoint", self.record.id, self.record.state);
            return refuse(request, why);
        }
        if self.draining.is_some() || self.stopping_until_ms.is_some() {
            return refuse(request, format!("job {} is already stopping", self.record.id));
        }
        info!(job_id = %self.record.id, savepoint = %request.target.url, format = %request.target.format,
            stop = request.target.stop, drain = request.drain, "savepoint requested");
        if request.drain {
            self.draining = Some(request);
            self.end_input();
        } else {
            self.savepoint_queue.push_back(request);
        }
        self.coordinate(now_ms()).await;
    }

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

    /// Answers the client waiting for savepoint `id`, if any.
    fn answer_savepoint(&mut self, id: CheckpointId, result: Result<pb::SavepointResponse, JobRequestError>) {
        let waiting = match self.savepoint_in_flight.take() {
            Some((sid, r)) if sid == id => Some(r),
            other => {
                self.savepoint_in_flight = other;
                None
            }
        };
        if let Some(r) = waiting {
            let _ = r.reply.send(result);
        }
    }

    /// Where the restore of the next deployment comes from: the newest readable retained checkpoint, else the
    /// savepoint the job was submitted with, else nothing.
    async fn restore_source(&mut self) -> Result<Option<(RestorePoint, String, bool)>, RestoreError> {
        let job_id = self.record.id.clone();
        if let Some(r) = load_restore_point(&self.shared.store, &job_id, &self.record.retained).await? {
            return Ok(Some((r, self.shared.store.url().to_string(), true)));
        }
        let Some(initial) = self.record.initial.clone().filter(|i| i.active) else { return Ok(None) };
        match crate::checkpoint::savepoint::load(&initial.url, &self.shared.config.store_options()).await {
            Ok(sp) => {
                let checkpoint = RetainedCheckpoint {
                    id: sp.metadata.checkpoint_id,
                    metadata_path: format!("{}/{}", initial.url, paths::METADATA_FILE),
                    timestamp_ms: sp.metadata.timestamp_ms,
                    full_size_bytes: sp.metadata.full_size(),
                    uploaded_bytes: 0,
                    is_final: sp.metadata.is_final,
                };
                // State the submission checked and dropped (uids the job lacks, or whose kind or signature
                // changed) is not restored.
                let mut metadata = sp.metadata;
                for uid in &self.record.dropped_state {
                    metadata.operators.remove(uid);
                }
                Ok(Some((RestorePoint { checkpoint, metadata, skipped: vec![] }, initial.root, false)))
            }
            Err(crate::checkpoint::savepoint::SavepointError::Unavailable { source, .. }) => {
                Err(RestoreError::Unavailable { checkpoint: initial.checkpoint_id, source })
            }
            Err(e) => Err(RestoreError::NoneReadable(vec![(initial.checkpoint_id, e.to_string())])),
        }
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

    async fn on_task_state(
        &mut self,
        tm_id: String,
        attempt: AttemptNumber,
        task: TaskKey,
        state: pb::TaskState,
        error: TaskError,
    ) {
        let job_id = self.record.id.clone();
        let name = describe_task(&self.record.job, &self.graph, task);
        let error_text = error.text;
        if state == pb::TaskState::Failed && !error.caused_by_peer {
            let cause = format!("task {name} failed on task manager {tm_id}: {error_text}");
            if self.replace_provisional_cause(attempt, &cause, now_ms()) {
                let _ = self.persist().await;
                return;
            }
        }
        let Some(dep) = self.deployment.as_mut() else {
            debug!(job_id = %job_id, attempt = attempt.0, task = %name, "dropping the state report of a task that is not deployed");
            return;
        };
        if attempt != dep.attempt {
            debug!(job_id = %job_id, attempt = attempt.0, current_attempt = dep.attempt.0, task = %name, "dropping a stale task state report");
            return;
        }
        let Some(status) = dep.tasks.get_mut(&task) else {
            warn!(job_id = %job_id, attempt = attempt.0, task = %name, "state report from an unknown task");
            return;
        };
        match state {
            pb::TaskState::Running => {
                if *status == TaskStatus::Deploying {
                    *status = TaskStatus::Running;
                    debug!(job_id = %job_id, attempt = attempt.0, task = %name, "task running");
                }
            }
            pb::TaskState::EndOfInput => {
                if *status != TaskStatus::Finished {
                    *status = TaskStatus::EndOfInput;
                    info!(job_id = %job_id, attempt = attempt.0, task = %name, "task reached the end of its input");
                }
                // The final checkpoint is triggered at once, not at the next tick.
                self.coordinate(now_ms()).await;
            }
            pb::TaskState::Finished => {
                *status = TaskStatus::Finished;
                info!(job_id = %job_id, attempt = attempt.0, task = %name, "task finished");
                if dep.tasks.values().all(|s| *s == TaskStatus::Finished) {
                    self.finish().await;
                }
            }
            pb::TaskState::Failed | pb::TaskState::Canceled if self.stopping_until_ms.is_some() => {
                // The stop-with-savepoint completed: its state is safe whatever the tasks do now.
                info!(job_id = %job_id, attempt = attempt.0, task = %name, error = %error_text,
                    "a task ended abnormally after the stop-with-savepoint; the job stops");
                self.undeploy(true);
                self.finish().await;
            }
            pb::TaskState::Failed => {
                let cause = format!("task {name} failed on task manager {tm_id}: {error_text}");
                let provisional = error.caused_by_peer.then_some(attempt);
                self.failover(cause.clone()).await;
                self.provisional_cause = provisional.map(|attempt| ProvisionalCause {
                    attempt,
                    cause,
                    until_ms: now_ms() + PROVISIONAL_CAUSE_MS,
                });
            }
            pb::TaskState::Canceled => {
                let cause = format!("task {name} was canceled on task manager {tm_id} without being asked to");
                self.failover(cause).await;
            }
            pb::TaskState::Unspecified => {}
        }
    }

    // ------------------------------------------------------------------------------------------ deployment

    fn log_waiting(&mut self, now: u64, needed: u32, free: u32) {
        if self.last_waiting_log_ms.is_none_or(|t| now >= t + WAITING_LOG_EVERY_MS) {
            self.last_waiting_log_ms = Some(now);
            info!(job_id = %self.record.id, needed_slots = needed, free_slots = free, "waiting for enough free slots");
        }
    }

    async fn try_deploy(&mut self) {
        let now = now_ms();
        let job_id = self.record.id.clone();
        let needed = self.graph.slots_needed();
        let allocated = {
            let mut registry = self.shared.registry.lock();
            registry.allocate(&job_id, needed).ok_or_else(|| registry.free_slots())
        };
        let slots = match allocated {
            Ok(slots) => slots,
            Err(free) => {
                self.log_waiting(now, needed, free);
                return;
            }
        };
        self.last_waiting_log_ms = None;

        let restore = match self.restore_source().await {
            Ok(r) => r,
            Err(e) => {
                self.shared.registry.lock().release(&job_id);
                match after_restore_error(&e) {
                    AfterRestoreError::RetrySoon => {
                        warn!(job_id = %job_id, error = %e, "cannot read the checkpoint to restore from; retrying");
                        self.restart_at_ms = now + STORE_RETRY_MS;
                    }
                    AfterRestoreError::Fail(reason) => self.fail_job(reason).await,
                }
                return;
            }
        };
        let (restore, restore_root, own_files) = match restore {
            Some((r, root, own)) => (Some(r), root, own),
            None => (None, String::new(), false),
        };
        let notes = restore_notes(
            restore.as_ref().map(|r| (r.checkpoint.id, r.skipped.as_slice())),
            own_files,
            self.record.initial.as_ref(),
        );
        if let Some(fallback) = notes.fallback {
            self.record.fallback = fallback;
        }
        self.record.restored_from = notes.restored_from;
        if !notes.unreadable.is_empty() {
            warn!(job_id = %job_id, restore_checkpoint = restore.as_ref().map(|r| r.checkpoint.id.0),
                dropped = ?notes.unreadable.iter().map(|c| c.0).collect::<Vec<_>>(), "restoring from an older checkpoint; dropping the unreadable newer ones");
            self.record.retained.retain(|c| !notes.unreadable.contains(&c.id));
            self.spawn_cleanup(notes.unreadable, Vec::new());
        }

        let attempt = AttemptNumber(self.record.attempt.0 + 1);
        let checkpoint_root = self.shared.store.url().to_string();
        let plan = DeployPlan {
            job_id: &job_id,
            job: &self.record.job,
            graph: &self.graph,
            attempt,
            slots: &slots,
            checkpoint_root: &checkpoint_root,
            restore: restore.as_ref().map(|r| RestorePlan { metadata: &r.metadata, root: &restore_root, own_files }),
            operator_state_inline_limit: self.shared.config.operator_state_inline_limit,
        };
        let descriptors = match build_descriptors(&plan) {
            Ok(d) => d,
            Err(e) => {
                self.shared.registry.lock().release(&job_id);
                self.fail_job(e.to_string()).await;
                return;
            }
        };
        let restore_id = restore.as_ref().map(|r| r.checkpoint.id);
        if let Some(r) = restore.filter(|_| own_files) {
            self.retained_meta.insert(r.checkpoint.id, Arc::new(r.metadata));
        }

        // The attempt number is persisted before any task of it exists, so it is never reused.
        self.record.attempt = attempt;
        let tasks = descriptors.iter().map(|d| ((d.vertex, d.subtask), TaskStatus::Deploying)).collect();
        let settings = self.record.job.checkpointing.clone();
        self.deployment = Some(Deployment {
            attempt,
            slots: slots.clone(),
            tasks,
            coordinator: CheckpointCoordinator::new(settings.clone(), attempt, now),
            last_final_notify_ms: 0,
            watermarks: BTreeMap::new(),
        });
        if self.persist().await.is_err() {
            self.undeploy(false);
            self.restart_at_ms = now + STORE_RETRY_MS;
            return;
        }
        let placement: Vec<&str> = slots.iter().map(|s| s.tm_id.as_str()).collect();
        info!(job_id = %job_id, attempt = attempt.0, restore_checkpoint = restore_id.map(|c| c.0),
            slots = ?placement, tasks = descriptors.len(), "deploying job");

        for vertex in deploy_order(&self.graph) {
            let calls = descriptors.iter().filter(|d| d.vertex == vertex).map(|d| {
                let slot = slots[d.subtask.0 as usize].clone();
                let key = (d.vertex, d.subtask);
                let request = pb::DeployTaskRequest {
                    task: Some(task_ref(&job_id, attempt, key)),
                    jm_session: self.shared.session.clone(),
                    jm_epoch: self.shared.epoch,
                    descriptor: Some(d.into()),
                    restore: d.restore.as_ref().map(Into::into),
                };
                let clients = self.shared.clients.clone();
                async move {
                    let result = match clients.get(&slot.rpc_address) {
                        Ok(mut client) => client.deploy_task(request).await.map(|_| ()),
                        Err(e) => Err(e),
                    };
                    (slot, key, result)
                }
            });
            let results = join_all(calls).await;
            if let Some(failure) = self.rpc_failures(results, "deployment") {
                if after_deploy_failure(failure.connection_lost) == AfterDeployFailure::RedeployNow {
                    warn!(job_id = %job_id, attempt = attempt.0, cause = %failure.cause,
                        "deployment hit a lost task manager; deploying again without it");
                    self.abort_pending(&format!("deployment failed: {}", failure.cause));
                    self.undeploy(true);
                    self.set_state(JobState::Restarting);
                    self.restart_at_ms = now_ms();
                    let _ = self.persist().await;
                } else {
                    self.failover(failure.cause).await;
                }
                return;
            }
        }
        if let Some(dep) = self.deployment.as_mut() {
            dep.coordinator = CheckpointCoordinator::new(settings, attempt, now_ms());
        }
        self.set_state(JobState::Running);
        if let Some(t) = self.takeover.take() {
            let seconds = t.elapsed().as_secs_f64();
            metrics::histogram!("weir_jobmanager_resume_seconds").record(seconds);
            info!(job_id = %self.record.id, resume_ms = (seconds * 1000.0) as u64, "job resumed after this job manager took over");
        }
        let _ = self.persist().await;
    }

    /// Looks at RPC results; a connection error marks that task manager lost.
    fn rpc_failures(
        &self,
        results: Vec<(SlotTarget, TaskKey, Result<(), tonic::Status>)>,
        what: &str,
    ) -> Option<RpcFailure> {
        let mut failure: Option<RpcFailure> = None;
        for (slot, key, result) in results {
            let Err(status) = result else { continue };
            let lost = is_connection_error(&status);
            let name = describe_task(&self.record.job, &self.graph, key);
            warn!(job_id = %self.record.id, tm_id = %slot.tm_id, task = %name, rpc = what, code = ?status.code(),
                error = %status.message(), "task manager RPC failed");
            if lost {
                self.shared.tm_lost(&slot.tm_id, slot.instance, &format!("{what} RPC failed: {}", status.message()));
            }
            let cause = format!("{what} of {name} on task manager {} failed: {}", slot.tm_id, status.message());
            match &mut failure {
                None => failure = Some(RpcFailure { connection_lost: lost, cause }),
                Some(f) => f.connection_lost |= lost,
            }
        }
        failure
    }

    /// Stops using the current deployment: tells its task managers to cancel its tasks (best effort, in
    /// the background) when `cancel_tasks`, and frees its slots.
    fn undeploy(&mut self, cancel_tasks: bool) {
        self.shared.registry.lock().release(&self.record.id);
        let Some(dep) = self.deployment.take() else { return };
        if !cancel_tasks {
            return;
        }
        let req = pb::CancelTasksRequest {
            job_id: self.record.id.to_string(),
            up_to_attempt: dep.attempt.0,
            jm_session: self.shared.session.clone(),
            jm_epoch: self.shared.epoch,
        };
        self.call_each(dep.rpc_addresses(), "cancel", false, move |mut c| {
            let req = req.clone();
            async move { c.cancel_job(req).await.map(|_| ()) }
        });
    }

    /// Calls every task manager at `addresses` in the background, best effort: the outcome is only logged
    /// (a failure at `warn` when `loud`, else at `debug`, as a task manager that died is noticed anyway).
    fn call_each<F, Fut>(&self, addresses: Vec<String>, rpc: &'static str, loud: bool, call: F)
    where
        F: Fn(TmClient) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), tonic::Status>> + Send,
    {
        let call = Arc::new(call);
        for address in addresses {
            let (clients, call, job_id) = (self.shared.clients.clone(), call.clone(), self.record.id.clone());
            tokio::spawn(async move {
                let result = match clients.get(&address) {
                    Ok(c) => call(c).await,
                    Err(e) => Err(e),
                };
                match result {
                    Ok(()) => debug!(job_id = %job_id, %address, rpc, "task manager told"),
                    Err(e) if loud => {
                        warn!(job_id = %job_id, %address, rpc, error = %e.message(), "task manager not told")
                    }
                    Err(e) => debug!(job_id = %job_id, %address, rpc, error = %e.message(), "task manager not told"),
                }
            });
        }
    }

    /// A failure: abort the checkpoint in flight, cancel the tasks and restart after the strategy's delay,
    /// or fail the job when no restart is left.
    async fn failover(&mut self, cause: String) {
        if self.record.state.is_terminal() {
            return;
        }
        warn!(job_id = %self.record.id, attempt = self.record.attempt.0, cause = %cause, "job fails over");
        self.abort_pending(&format!("job failover: {cause}"));
        // A drain in progress is lost with the deployment: the restored sources would not end their input.
        if let Some(r) = self.draining.take() {
            let _ = r.reply.send(Err(JobRequestError::SavepointFailed(format!("the job failed over: {cause}"))));
        }
        self.undeploy(true);
        let now = now_ms();
        let decision =
            self.record.restart_history.on_failure(&self.record.job.restart, self.record.restarts, now, rand::random());
        match decision {
            RestartDecision::GiveUp { reason } => {
                self.record.failure = format!("{cause}; not restarted: {reason}");
                self.set_state(JobState::Failed);
                error!(job_id = %self.record.id, restarts = self.record.restarts, cause = %cause, %reason, "job failed: no restart left");
            }
            RestartDecision::Restart { number, delay_ms } => {
                self.record.failure = cause;
                self.record.restarts = number;
                self.set_state(JobState::Restarting);
                self.restart_at_ms = now.saturating_add(delay_ms);
                info!(job_id = %self.record.id, restart = number, delay_ms, "job restarts after the delay");
            }
        }
        let _ = self.persist().await;
    }

    /// Puts `cause`, a task's own failure in `attempt`, in place of the provisional cause the job failed over on
    /// (a neighbour's broken connection), if that is pending for the same attempt. Whether it did.
    fn replace_provisional_cause(&mut self, attempt: AttemptNumber, cause: &str, now: u64) -> bool {
        let Some(p) = self.provisional_cause.take_if(|p| p.attempt == attempt && now < p.until_ms) else {
            return false;
        };
        self.record.failure = self.record.failure.replacen(&p.cause, cause, 1);
        info!(job_id = %self.record.id, attempt = attempt.0, cause = %cause, replaced = %p.cause,
            "the failure that broke the connection was heard: it is the job's failure reason");
        true
    }

    /// A failure that no restart can fix.
    async fn fail_job(&mut self, cause: String) {
        if self.record.state.is_terminal() {
            return;
        }
        error!(job_id = %self.record.id, cause = %cause, "job failed");
        self.abort_pending(&format!("job failed: {cause}"));
        self.undeploy(true);
        self.record.failure = cause;
        self.set_state(JobState::Failed);
        let _ = self.persist().await;
    }

    async fn cancel(&mut self) -> Result<pb::JobInfo, JobRequestError> {
        match self.record.state {
            JobState::Canceled => return Ok(self.record.info()),
            s if s.is_terminal() => {
                return Err(JobRequestError::AlreadyTerminal { id: self.record.id.to_string(), state: s.name() })
            }
            _ => {}
        }
        self.abort_pending("the job was canceled");
        self.undeploy(true);
        self.set_state(JobState::Canceled);
        let _ = self.persist().await;
        Ok(self.record.info())
    }

    async fn finish(&mut self) {
        self.abort_pending("the job finished");
        self.undeploy(false);
        if self.set_state(JobState::Finished) {
            info!(job_id = %self.record.id, attempt = self.record.attempt.0,
                final_checkpoint = self.record.latest_completed().map(|r| r.id.0), "job finished");
        }
        let _ = self.persist().await;
    }

    // ------------------------------------------------------------------------------------------ checkpoints

    async fn coordinate(&mut self, now: u64) {
        if self.record.state != JobState::Running {
            return;
        }
        let Some(dep) = self.deployment.as_ref() else { return };
        if dep.coordinator.expired(now).is_some() {
            let timeout = self.record.job.checkpointing.timeout_ms;
            self.fail_pending(format!("expired: not acknowledged by every task within {timeout} ms"), true).await;
            return;
        }
        let Some(dep) = self.deployment.as_mut() else { return };
        if let Some(final_id) = dep.coordinator.final_completed() {
            if now >= dep.last_final_notify_ms.saturating_add(FINAL_RENOTIFY_MS) {
                dep.last_final_notify_ms = now;
                self.notify(final_id, true, true, false);
            }
            return;
        }
        let readiness = dep.readiness(true);
        match dep.coordinator.decide_trigger(now, readiness) {
            // A stop with drain: the final checkpoint is the savepoint.
            TriggerDecision::Final => {
                let request = self.draining.take();
                self.trigger(true, request).await
            }
            _ if !self.savepoint_queue.is_empty() && dep.coordinator.may_trigger_savepoint(readiness) => {
                let request = self.savepoint_queue.pop_front();
                self.trigger(false, request).await
            }
            TriggerDecision::Wait => {}
            TriggerDecision::Periodic => self.trigger(false, None).await,
        }
    }

    /// Triggers the next checkpoint; with a savepoint request, as that savepoint (its client waits for it).
    async fn trigger(&mut self, is_final: bool, savepoint: Option<SavepointRequest>) {
        let now = now_ms();
        let job_id = self.record.id.clone();
        let id = self.record.next_checkpoint_id;
        self.record.next_checkpoint_id = CheckpointId(id.0 + 1);
        let savepoint = savepoint.map(|request| {
            let target = request.target.clone();
            self.savepoint_in_flight = Some((id, request));
            target
        });
        let path = match &savepoint {
            Some(t) => format!("{}/{}", t.url, paths::METADATA_FILE),
            None => self.metadata_url(id),
        };
        let mut entry = CheckpointHistoryEntry::in_progress(id, now, path, is_final);
        entry.is_savepoint = savepoint.is_some();
        self.record.push_history(entry);
        let target = savepoint.as_ref().map(pb::SavepointTarget::from);
        let Some(dep) = self.deployment.as_mut() else { return };
        let expected: BTreeSet<TaskKey> = dep.tasks.keys().copied().collect();
        dep.coordinator.begin(id, now, expected, is_final, savepoint);
        let attempt = dep.attempt;
        // The id is persisted before any task hears of it, so ids never go backwards.
        if let Err(e) = self.persist().await {
            self.fail_pending(format!("cannot persist the checkpoint id counter: {e}"), true).await;
            return;
        }
        info!(job_id = %job_id, checkpoint_id = id.0, attempt = attempt.0, is_final, "triggering checkpoint");
        let Some(dep) = self.deployment.as_ref() else { return };
        let mut calls = Vec::new();
        for v in self.graph.vertices.iter().filter(|v| v.input.is_none()) {
            for s in 0..v.parallelism {
                let key = (v.id, SubtaskIndex(s));
                let slot = dep.slots[s as usize].clone();
                let clients = self.shared.clients.clone();
                let req = pb::TriggerCheckpointRequest {
                    task: Some(task_ref(&job_id, attempt, key)),
                    checkpoint_id: id.0,
                    timestamp_ms: now,
                    jm_session: self.shared.session.clone(),
                    jm_epoch: self.shared.epoch,
                    savepoint: target.clone(),
                };
                calls.push(async move {
                    let result = match clients.get(&slot.rpc_address) {
                        Ok(mut c) => c.trigger_checkpoint(req).await.map(|_| ()),
                        Err(e) => Err(e),
                    };
                    (slot, key, result)
                });
            }
        }
        let results = join_all(calls).await;
        if let Some(failure) = self.rpc_failures(results, "checkpoint trigger") {
            if failure.connection_lost {
                self.failover(failure.cause).await;
            } else {
                self.fail_pending(failure.cause, true).await;
            }
        }
    }

    async fn on_acknowledge(
        &mut self,
        attempt: AttemptNumber,
        task: TaskKey,
        checkpoint_id: CheckpointId,
        snapshot: TaskSnapshot,
    ) {
        let job_id = self.record.id.clone();
        let files = snapshot_files(&snapshot);
        let outcome = match self.deployment.as_mut() {
            Some(dep) => dep.coordinator.acknowledge(attempt, checkpoint_id, task, snapshot),
            None => AckOutcome::Dropped("the job is not deployed"),
        };
        match outcome {
            AckOutcome::Dropped(reason) => {
                debug!(job_id = %job_id, checkpoint_id = checkpoint_id.0, attempt = attempt.0, reason, "acknowledgement dropped");
                // Files a task uploaded for a checkpoint that already failed are deleted again; a savepoint's
                // are in its own directory, which goes again as a whole.
                match self.record.failed_checkpoint(checkpoint_id) {
                    Some(e) if e.is_savepoint => {
                        let dir = crate::checkpoint::savepoint::dir_of(&e.path).to_string();
                        self.spawn_savepoint_cleanup(dir, "a late acknowledgement");
                    }
                    Some(_) => self.spawn_cleanup(vec![checkpoint_id], files),
                    None => {}
                }
            }
            AckOutcome::Pending { remaining } => {
                debug!(job_id = %job_id, checkpoint_id = checkpoint_id.0, remaining, "checkpoint acknowledged by a task");
            }
            AckOutcome::Complete => self.complete_checkpoint().await,
        }
    }

    async fn on_decline(&mut self, attempt: AttemptNumber, task: TaskKey, checkpoint_id: CheckpointId, reason: String) {
        let pending = self.deployment.as_ref().is_some_and(|d| d.coordinator.is_pending(attempt, checkpoint_id));
        if !pending {
            debug!(job_id = %self.record.id, checkpoint_id = checkpoint_id.0, attempt = attempt.0, "stale decline dropped");
            return;
        }
        let name = describe_task(&self.record.job, &self.graph, task);
        self.fail_pending(format!("declined by {name}: {reason}"), true).await;
    }

    async fn complete_checkpoint(&mut self) {
        let job_id = self.record.id.clone();
        let Some(pending) = self.deployment.as_mut().and_then(|d| d.coordinator.take_pending()) else { return };
        let id = pending.id;
        // The guard on operator state declines the checkpoint without counting it as a failure: the job keeps
        // running and says why.
        if let Some(reason) = operator_state_over_limit(&job_id, &pending, self.shared.config.operator_state_limit) {
            self.record_failed(pending, reason, false).await;
            return;
        }
        let meta = match build_metadata(&job_id, &self.record.job, &self.graph, &pending) {
            Ok(m) => m,
            Err(reason) => {
                self.record_failed(pending, format!("invalid acknowledgements: {reason}"), true).await;
                return;
            }
        };
        if let Some(target) = pending.savepoint.clone() {
            self.complete_savepoint(pending, meta, target).await;
            return;
        }
        let bytes = match meta.to_bytes() {
            Ok(b) => b,
            Err(reason) => {
                self.record_failed(pending, format!("cannot encode _metadata: {reason}"), true).await;
                return;
            }
        };
        let metadata_path = paths::metadata(&job_id, id);
        if let Err(e) = self.shared.store.put_new(&metadata_path, Bytes::from(bytes)).await {
            self.record_failed(pending, format!("cannot write _metadata: {e}"), true).await;
            return;
        }
        let now = now_ms();
        let full_size_bytes = meta.full_size();
        let uploaded_bytes = pending.uploaded_bytes();
        let duration_ms = now.saturating_sub(pending.trigger_time_ms);
        // The completion is applied to a copy that must reach the job store first: a checkpoint is complete only
        // once it is durably recorded. Notified before that, sinks would commit output that a restarted job
        // manager, resuming from the older recorded checkpoint, replays.
        let mut next = self.record.clone();
        next.retained.push(RetainedCheckpoint {
            id,
            metadata_path,
            timestamp_ms: pending.trigger_time_ms,
            full_size_bytes,
            uploaded_bytes,
            is_final: pending.is_final,
        });
        next.mark_completed(id, duration_ms, full_size_bytes, uploaded_bytes);
        let ids: Vec<CheckpointId> = next.retained.iter().map(|r| r.id).collect();
        let gone = subsumed(&ids, next.job.checkpointing.retained);
        next.retained.retain(|r| !gone.contains(&r.id));
        let dispose_claimed = next.release_initial();
        let recorded = match weir_common::fault::hit("checkpoint-after-metadata").await {
            Ok(()) => self.persist_record(&next).await,
            Err(f) => Err(f.to_string()),
        };
        if let Err(e) = recorded {
            // Not recorded, so not complete: its directory (with the `_metadata` just written) is deleted again.
            self.record_failed(pending, format!("cannot record the checkpoint in the job store: {e}"), true).await;
            return;
        }
        self.record = next;
        if let Some(dep) = self.deployment.as_mut() {
            dep.completed(id, now, pending.is_final);
        }
        self.retained_meta.insert(id, Arc::new(meta));
        self.retained_meta.retain(|k, _| !gone.contains(k));
        info!(job_id = %job_id, checkpoint_id = id.0, duration_ms, full_size_bytes, uploaded_bytes,
            is_final = pending.is_final, subsumed = ?gone.iter().map(|c| c.0).collect::<Vec<_>>(), "checkpoint completed");
        // The subsumed checkpoints' shared files are read from their own `_metadata` by the cleanup.
        self.spawn_cleanup(gone, Vec::new());
        if let Some(url) = dispose_claimed {
            let opts = self.shared.config.store_options();
            tokio::spawn(async move {
                match crate::checkpoint::savepoint::delete_claimed(&url, &opts).await {
                    Ok(files) => info!(savepoint = %url, files, "claimed savepoint subsumed and deleted"),
                    Err(error) => warn!(savepoint = %url, %error, "cannot delete the claimed savepoint"),
                }
            });
        }
        if now.saturating_sub(self.last_sweep_ms) >= SWEEP_INTERVAL_MS {
            self.last_sweep_ms = now;
            let min_age = self.record.job.checkpointing.timeout_ms.saturating_add(SWEEP_CLOCK_MARGIN_MS);
            self.spawn_sweep(Some(min_age), 0);
        }
        self.notify(id, true, pending.is_final, false);
        // A final checkpoint waiting behind this one starts at once.
        self.coordinate(now_ms()).await;
    }

    /// Completes a savepoint: its `_metadata` goes into its own directory; the job does not retain it (it is
    /// the user's), and the client waiting for it gets its URL. A stop-with-savepoint then finishes the tasks.
    async fn complete_savepoint(
        &mut self,
        pending: PendingCheckpoint,
        meta: CheckpointMetadata,
        target: SavepointTarget,
    ) {
        let job_id = self.record.id.clone();
        let id = pending.id;
        let written = async {
            let bytes = meta.to_bytes()?;
            let store = weir_common::store::Store::open(&target.url, &self.shared.config.store_options())
                .map_err(|e| e.to_string())?;
            store.put_new(paths::METADATA_FILE, Bytes::from(bytes)).await.map_err(|e| e.to_string())
        }
        .await;
        if let Err(e) = written {
            self.record_failed(pending, format!("cannot write the savepoint's _metadata: {e}"), true).await;
            return;
        }
        let now = now_ms();
        let full_size_bytes = meta.full_size();
        let uploaded_bytes = pending.uploaded_bytes();
        let duration_ms = now.saturating_sub(pending.trigger_time_ms);
        // As for a checkpoint: a savepoint counts only once the job store recorded it. Answered or notified
        // before that, the client would hold a savepoint the job's history does not know and sinks would commit
        // output that a restarted job manager replays.
        let mut next = self.record.clone();
        next.mark_completed(id, duration_ms, full_size_bytes, uploaded_bytes);
        if let Err(e) = self.persist_record(&next).await {
            // Its directory (with the `_metadata` just written) is deleted again by the failure's cleanup.
            self.record_failed(pending, format!("cannot record the savepoint in the job store: {e}"), true).await;
            return;
        }
        self.record = next;
        let stops = target.stop || pending.is_final;
        if stops {
            self.stopping_until_ms = Some(now + STOP_FINISH_TIMEOUT_MS);
        }
        if let Some(dep) = self.deployment.as_mut() {
            dep.completed(id, now, pending.is_final);
        }
        info!(job_id = %job_id, checkpoint_id = id.0, savepoint = %target.url, format = %target.format,
            duration_ms, full_size_bytes, stop = stops, "savepoint completed");
        self.notify(id, true, pending.is_final, target.stop);
        let response = pb::SavepointResponse {
            savepoint: target.url.clone(),
            checkpoint_id: id.0,
            full_size_bytes,
            format: target.format as i32,
            job: Some(self.record.info()),
        };
        self.answer_savepoint(id, Ok(response));
    }

    /// Fails the checkpoint in flight; `counts` toward the tolerable failures.
    async fn fail_pending(&mut self, reason: String, counts: bool) {
        if let Some(pending) = self.deployment.as_mut().and_then(|d| d.coordinator.take_pending()) {
            self.record_failed(pending, reason, counts).await;
        }
    }

    async fn record_failed(&mut self, pending: PendingCheckpoint, reason: String, counts: bool) {
        let over = self.note_failure(&pending, &reason, counts);
        if pending.is_final {
            // A bounded job cannot finish until its final checkpoint completes: say why it does not.
            self.record.waiting = format!(
                "the final checkpoint ({}) failed and is retried every {} ms: {reason}",
                pending.id,
                crate::checkpoint::coordinator::FINAL_RETRY_DELAY_MS
            );
        }
        let _ = self.persist().await;
        self.notify(pending.id, false, false, false);
        if over {
            let tolerable = self.record.job.checkpointing.tolerable_failures.unwrap_or(0);
            self.failover(format!(
                "more than {tolerable} consecutive checkpoints failed; the last one, {}, because {reason}",
                pending.id
            ))
            .await;
        }
    }

    /// Bookkeeping of a failed checkpoint (history, counters, cleanup of what it wrote, the waiting client of a
    /// savepoint); returns whether the job must fail over.
    fn note_failure(&mut self, pending: &PendingCheckpoint, reason: &str, counts: bool) -> bool {
        let now = now_ms();
        if let Some(e) = self.record.history_mut(pending.id) {
            e.status = CheckpointStatus::Failed;
            e.failure_reason = reason.to_string();
            e.duration_ms = now.saturating_sub(pending.trigger_time_ms);
            e.uploaded_bytes = pending.uploaded_bytes();
        }
        self.record.checkpoints_failed += 1;
        warn!(job_id = %self.record.id, checkpoint_id = pending.id.0, attempt = pending.attempt.0, reason, "checkpoint failed");
        match &pending.savepoint {
            // A savepoint wrote only into its own directory; its client learns why it failed. (A draining stop's
            // final checkpoint is then retried as a plain one.)
            Some(target) => {
                self.answer_savepoint(pending.id, Err(JobRequestError::SavepointFailed(reason.to_string())));
                self.spawn_savepoint_cleanup(target.url.clone(), "the savepoint failed");
            }
            None => self.spawn_cleanup(vec![pending.id], pending.acks.values().flat_map(snapshot_files).collect()),
        }
        match self.deployment.as_mut() {
            Some(dep) if dep.attempt == pending.attempt => dep.coordinator.record_failure(now, counts),
            _ => false,
        }
    }

    /// Aborts the checkpoint in flight without counting it as a failure (failover, cancel, finish).
    fn abort_pending(&mut self, reason: &str) {
        if let Some(pending) = self.deployment.as_mut().and_then(|d| d.coordinator.take_pending()) {
            self.note_failure(&pending, reason, false);
        }
    }

    /// Sends `NotifyCheckpoint` to the task managers of the deployment (best effort, in the background);
    /// `is_final` marks a completed final checkpoint, after which tasks finish.
    fn notify(&self, id: CheckpointId, completed: bool, is_final: bool, stop: bool) {
        let Some(dep) = self.deployment.as_ref() else { return };
        let req = pb::NotifyCheckpointRequest {
            job_id: self.record.id.to_string(),
            attempt: dep.attempt.0,
            checkpoint_id: id.0,
            completed,
            is_final: completed && is_final,
            jm_session: self.shared.session.clone(),
            jm_epoch: self.shared.epoch,
            stop: completed && stop,
        };
        self.call_each(dep.rpc_addresses(), "notify checkpoint", false, move |mut c| {
            let req = req.clone();
            async move {
                // Tests hold a notification back here to deliver it after this job manager lost leadership.
                weir_common::fault::hit("jm-send-notify")
                    .await
                    .map_err(|f| tonic::Status::unavailable(f.to_string()))?;
                c.notify_checkpoint(req).await.map(|_| ())
            }
        });
    }

    /// Deletes what the job's checkpoints left that no retained checkpoint references — shared files and
    /// directories of checkpoints not retained (see [`sweep_job_files`]) — after `delay_ms`.
    fn spawn_sweep(&self, min_age_ms: Option<u64>, delay_ms: u64) {
        let store = self.shared.store.clone();
        let job_id = self.record.id.clone();
        let retained = self.record.retained.clone();
        let known = self.retained_meta.clone();
        let shared = self.shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
            // A deposed leader's view of the retained checkpoints is stale: the new leader's own checkpoints
            // reference files it does not know of.
            if shared.is_deposed() {
                return;
            }
            sweep_job_files(&store, &job_id, &retained, &known, min_age_ms).await;
        });
    }

    /// Deletes what a failed savepoint wrote, in the background; `after` says what happened (its failure, or a
    /// late acknowledgement naming files a task uploaded after it).
    fn spawn_savepoint_cleanup(&self, url: String, after: &'static str) {
        let opts = self.shared.config.store_options();
        let job_id = self.record.id.clone();
        tokio::spawn(async move {
            match crate::checkpoint::savepoint::delete_files(&url, &opts).await {
                Ok(0) => {}
                Ok(files) => {
                    info!(job_id = %job_id, savepoint = %url, files, after, "deleted the files of a failed savepoint")
                }
                Err(error) => {
                    warn!(job_id = %job_id, savepoint = %url, %error, "cannot delete the files of a failed savepoint")
                }
            }
        });
    }

    /// Deletes the directories of checkpoints no longer needed, in the background.
    /// `files` are the files those checkpoints referenced, where known: shared (incremental) files among them
    /// that no retained checkpoint references are deleted too.
    fn spawn_cleanup(&self, ids: Vec<CheckpointId>, files: Vec<String>) {
        let ids: Vec<CheckpointId> =
            ids.into_iter().filter(|id| !self.record.retained.iter().any(|r| r.id == *id)).collect();
        if ids.is_empty() && files.is_empty() {
            return;
        }
        let store = self.shared.store.clone();
        let job_id = self.record.id.clone();
        let retained = self.record.retained.clone();
        let known = self.retained_meta.clone();
        let shared = self.shared.clone();
        tokio::spawn(async move {
            // Leaking files is better than deleting what a new leader's checkpoints might reference.
            if shared.is_deposed() {
                return;
            }
            delete_checkpoint_dirs(&store, &job_id, &retained, &known, &ids, files).await;
        });
    }
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
