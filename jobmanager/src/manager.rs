//! The job manager itself: the state shared by the gRPC services and the job coordinators (registry,
//! stores, clients, the coordinator of every job), start-up with recovery of stored jobs, the heartbeat
//! monitor, and shutdown.

use crate::checkpoint::coordinator::TaskKey;
use crate::checkpoint::savepoint::{self, SavepointError};
use crate::checkpoint::serializers::{Asked, Judgements};
use crate::cluster::client::{TmClient, TmClients};
use crate::cluster::registry::{Registration, RegistrationError, Registry};
use crate::config::JobManagerConfig;
use crate::error::{JobManagerError, JobRequestError};
use crate::ha::etcd::Term;
use crate::job::context::Shared;
use crate::job::mailbox::JobView;
use crate::job::record::{InitialRestore, JobRecord};
use crate::job::store::{EtcdJobStore, JobStore, LocalJobStore};
use crate::job::SavepointRequest;
use crate::job::{JobActor, JobEvent, ReportedTask, TaskError};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{debug, error, info, warn};
use weir_common::checkpoint::{restore_mode_of, savepoint_format_of, SavepointTarget, TaskSnapshot};
use weir_common::ids::{AttemptNumber, CheckpointId, InvalidJobId, JobId, SubtaskIndex, VertexId};
use weir_common::job::spec::{resolve, ResolvedJob};
use weir_common::now_ms;
use weir_common::service::store::Store;
use weir_common::state::serializer::SerializerSnapshot;
use weir_proto as pb;

/// A savepoint problem as the client sees it.
fn savepoint_error(e: SavepointError) -> JobRequestError {
    match e {
        SavepointError::Unavailable { .. } => JobRequestError::SavepointUnavailable(e.to_string()),
        e => JobRequestError::BadSavepoint(e.to_string()),
    }
}

/// A `TaskRef` that names no task.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskRefError {
    /// The request carries no `TaskRef`.
    #[error("task is required")]
    Missing,
    /// Its job id is malformed.
    #[error(transparent)]
    JobId(#[from] InvalidJobId),
}

/// A task's identity as carried by a `TaskRef`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskAddress {
    /// The job.
    pub job_id: JobId,
    /// The attempt the task belongs to.
    pub attempt: AttemptNumber,
    /// Its vertex and subtask.
    pub task: TaskKey,
}

impl TaskAddress {
    /// Reads a `TaskRef` from a task manager.
    pub fn from_proto(task: Option<&pb::TaskRef>) -> Result<TaskAddress, TaskRefError> {
        let t = task.ok_or(TaskRefError::Missing)?;
        let job_id = JobId::parse(&t.job_id)?;
        Ok(TaskAddress {
            job_id,
            attempt: AttemptNumber(t.attempt),
            task: (VertexId(t.vertex), SubtaskIndex(t.subtask)),
        })
    }
}

/// How long the checkpoint store may take to take, return and delete a marker when the job manager starts.
const START_PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// The same when a job is submitted (shorter: a client waits).
const SUBMIT_PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a submission waits for a task manager that can check its spec to register.
const CHECKER_WAIT: Duration = Duration::from_secs(10);

/// The job manager: cheap to clone, every clone is the same instance.
#[derive(Clone)]
pub struct JobManager {
    shared: Arc<Shared>,
}

impl JobManager {
    /// Opens the stores, resumes every stored job and starts the heartbeat monitor (no HA: the job store is
    /// the local directory).
    pub async fn start(config: JobManagerConfig) -> Result<JobManager, JobManagerError> {
        config.validate()?;
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|source| JobManagerError::Directory { path: config.data_dir.clone(), source })?;
        let job_store = JobStore::Local(LocalJobStore::open(&config.data_dir)?);
        JobManager::start_with(config, job_store, None).await
    }

    /// Takes over as the HA leader of `term`: resumes every job recorded in etcd.
    pub async fn start_leader(config: JobManagerConfig, term: Term) -> Result<JobManager, JobManagerError> {
        config.validate()?;
        let job_store = JobStore::Etcd(Box::new(EtcdJobStore::new(term.clone())));
        JobManager::start_with(config, job_store, Some(term)).await
    }

    async fn start_with(
        config: JobManagerConfig,
        job_store: JobStore,
        term: Option<Term>,
    ) -> Result<JobManager, JobManagerError> {
        let url = config.checkpoint_store_url()?;
        let store = Store::open(&url, &config.store_options())?;
        // A store that refuses is a configuration error, found now rather than by every checkpoint; one that is
        // down or slow may come back, and must not keep a healthy cluster from starting.
        match store.probe(START_PROBE_TIMEOUT).await {
            Ok(()) => {}
            Err(e) if e.is_refusal() => return Err(JobManagerError::StoreRefused(e)),
            Err(e) => warn!(error = %e, "checkpoint store not reachable at start; checkpoints fail until it is"),
        }
        let (records, errors) = job_store.load_all().await?;
        for e in errors {
            error!(error = %e, "skipping an unreadable job file");
        }
        let (shutdown, _) = watch::channel(false);
        let session = uuid::Uuid::new_v4().simple().to_string();
        let clients = TmClients::new(config.security()?);
        let shared = Arc::new(Shared {
            config,
            session,
            store,
            job_store,
            registry: Mutex::new(Registry::new()),
            jobs: Mutex::new(BTreeMap::new()),
            clients,
            epoch: term.as_ref().map_or(0, |t| t.epoch),
            term,
            deposed: AtomicBool::new(false),
            shutdown,
            monitor: Mutex::new(None),
        });
        info!(session = %shared.session, epoch = shared.epoch, checkpoint_store = %url, jobs = records.len(), "job manager starting");
        for record in records {
            let id = record.id.clone();
            let handle = JobActor::spawn(shared.clone(), record, true);
            shared.jobs.lock().insert(id, handle);
        }
        let monitor = tokio::spawn(monitor_heartbeats(shared.clone()));
        *shared.monitor.lock() = Some(monitor);
        Ok(JobManager { shared })
    }

    /// This process's session id (a fresh random id per start).
    pub fn session(&self) -> &str {
        &self.shared.session
    }

    /// The configuration the job manager runs with.
    pub fn config(&self) -> &JobManagerConfig {
        &self.shared.config
    }

    /// The checkpoint store.
    pub fn checkpoint_store(&self) -> &Store {
        &self.shared.store
    }

    /// Validates and accepts a job; it is deployed once enough slots are free.
    pub async fn submit(&self, spec: &pb::JobSpec) -> Result<JobId, JobRequestError> {
        let submitted =
            self.submit_from(&pb::SubmitJobRequest { spec: Some(spec.clone()), ..Default::default() }).await?;
        Ok(JobId(submitted.job_id))
    }

    /// Validates and accepts a job, optionally started from a savepoint or retained checkpoint, which is read
    /// and checked against the job (max parallelism, operator uids, union-state fan-out, its files) before
    /// the job is accepted.
    /// The answer names the job and every state of the savepoint that the restore drops.
    pub async fn submit_from(&self, req: &pb::SubmitJobRequest) -> Result<pb::SubmitJobResponse, JobRequestError> {
        if *self.shared.shutdown.borrow() {
            return Err(JobRequestError::ShuttingDown);
        }
        let spec = req.spec.clone().ok_or_else(|| JobRequestError::InvalidSpec("missing job spec".into()))?;
        let mode = restore_mode_of(req.restore_mode).map_err(|e| JobRequestError::InvalidSpec(e.to_string()))?;
        let opts = self.shared.config.store_options();
        let savepoint = if req.from_savepoint.trim().is_empty() {
            None
        } else {
            let sp = savepoint::load(&req.from_savepoint, &opts).await.map_err(savepoint_error)?;
            Some(sp)
        };
        if let Some(sp) = &savepoint {
            let store = self.shared.store.url().trim_end_matches('/').to_string();
            if let Some(why) = savepoint::ownership_conflict(&sp.url, mode, &store, &self.other_jobs()) {
                return Err(JobRequestError::BadSavepoint(format!("cannot start the job from {}: {why}", sp.url)));
            }
        }
        let (job, verdicts) = self.resolve_restored(&spec, savepoint.as_ref()).await?;
        let mut dropped = Vec::new();
        let mut dropped_states = Vec::new();
        if let (Some(sp), Some(verdicts)) = (&savepoint, verdicts) {
            dropped = verdicts.outcome(&sp.url, req.allow_non_restored_state).map_err(savepoint_error)?;
            dropped_states = verdicts.dropped_states();
            savepoint::check_files(sp, &opts).await.map_err(savepoint_error)?;
        }
        match self.shared.store.probe(SUBMIT_PROBE_TIMEOUT).await {
            Ok(()) => {}
            Err(e) if e.is_refusal() => return Err(JobRequestError::StoreRefused(e.to_string())),
            Err(e) => {
                warn!(job_name = %job.name, error = %e, "accepting a job while the checkpoint store is unreachable")
            }
        }
        let id = JobId::random();
        let mut record = JobRecord::new(id.clone(), job, now_ms());
        if let Some(sp) = savepoint {
            info!(job_id = %id, savepoint = %sp.url, checkpoint_id = sp.metadata.checkpoint_id.0, mode = %mode,
                dropped = ?dropped, "job starts from a savepoint");
            for d in &dropped_states {
                warn!(job_id = %id, savepoint = %sp.url, uid = %d.uid, state = %d.state, reason = %d.reason,
                    "the restore drops this state");
            }
            // Checkpoint ids continue after the savepoint's, as in Flink, so ids never go backwards for the state.
            record.next_checkpoint_id = CheckpointId(sp.metadata.checkpoint_id.0 + 1);
            record.initial = Some(InitialRestore {
                url: sp.url,
                root: sp.root,
                checkpoint_id: sp.metadata.checkpoint_id,
                mode,
                active: true,
            });
            record.dropped_state = dropped;
            record.dropped_states = dropped_states;
        }
        self.shared.job_store.save(&record).await.map_err(|e| JobRequestError::Storage(e.to_string()))?;
        info!(job_id = %id, name = %record.job.name, operators = record.job.operators.len(), "job submitted");
        let dropped = record.dropped_states.iter().map(pb::DroppedState::from).collect();
        let handle = JobActor::spawn(self.shared.clone(), record, false);
        self.shared.jobs.lock().insert(id.clone(), handle);
        Ok(pb::SubmitJobResponse { job_id: id.to_string(), dropped })
    }

    /// Takes a savepoint of a running job (`stop`: and stops it, `drain`: after ending its input); answers
    /// once the savepoint completed.
    pub async fn savepoint(
        &self,
        id: &str,
        target_dir: &str,
        format: i32,
        stop: Option<bool>,
    ) -> Result<pb::SavepointResponse, JobRequestError> {
        let id = parse_id(id)?;
        let format = savepoint_format_of(format).map_err(|e| JobRequestError::InvalidSpec(e.to_string()))?;
        let dir = if target_dir.trim().is_empty() {
            self.shared.config.savepoint_dir_url().map_err(|e| JobRequestError::InvalidSpec(e.to_string()))?
        } else if target_dir.contains("://") {
            target_dir.trim().trim_end_matches('/').to_string()
        } else {
            return Err(JobRequestError::InvalidSpec(format!(
                "savepoint directory {target_dir:?}: expected a URL such as file:///dir or s3://bucket/prefix"
            )));
        };
        let url = format!("{dir}/{}", weir_common::checkpoint::paths::new_savepoint_name(&id));
        let target = SavepointTarget { url, format, stop: stop == Some(false) };
        let (tx, view) = self.find(&id)?;
        let drain = stop == Some(true);
        if let Some(result) = ask(&tx, |reply| JobEvent::Savepoint(SavepointRequest { target, drain, reply })).await {
            return result;
        }
        let state = view.lock().state;
        if state.is_terminal() {
            return Err(JobRequestError::NotRunning(format!("job {id} is {state}: it can take no savepoint")));
        }
        Err(JobRequestError::ShuttingDown)
    }

    /// Resolves `spec` against the registered kinds, restored from `sp` if given: the savepoint's max
    /// parallelism is adopted when the spec leaves it unset, and the verdicts say what the restore does with
    /// each operator's state. Submissions and `weir savepoint check` decide alike through this.
    ///
    /// Validation runs on a blocking thread: however large a spec is, the runtime's workers keep serving
    /// heartbeats, acknowledgements and other clients meanwhile.
    async fn resolve_restored(
        &self,
        spec: &pb::JobSpec,
        sp: Option<&savepoint::LoadedSavepoint>,
    ) -> Result<(ResolvedJob, Option<savepoint::Verdicts>), JobRequestError> {
        // The limits first, on the caller's thread: they are cheap, and a spec over them is not cloned.
        weir_common::job::spec::check_limits(spec).map_err(|e| JobRequestError::InvalidSpec(e.to_string()))?;
        let mut spec = spec.clone();
        let explicit_max_parallelism = spec.max_parallelism;
        if let Some(sp) = sp {
            spec.max_parallelism = Some(savepoint::adopt_max_parallelism(explicit_max_parallelism, &sp.metadata));
        }
        // Kinds are known from the task managers that registered: a job manager that just started, or just took
        // over, waits for the first of them (they register within a heartbeat).
        let deadline = tokio::time::Instant::now() + CHECKER_WAIT;
        while !self.shared.registry.lock().knows_kinds() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let kinds = self.shared.registry.lock().kinds();
        let structure = spec.clone();
        let job = tokio::task::spawn_blocking(move || resolve(&structure, &kinds))
            .await
            .map_err(|e| JobRequestError::InvalidSpec(format!("spec validation failed: {e}")))?
            .map_err(|e| JobRequestError::InvalidSpec(e.to_string()))?;
        self.check_on_a_taskmanager(&spec).await?;
        let limit = self.shared.config.union_state_fanout_limit;
        let Some(sp) = sp else { return Ok((job, None)) };
        // The serializers are judged by a task manager (the formats' rules live there): the verdicts run once to
        // learn which pairs they ask, then with the answers.
        let asked = Asked::default();
        savepoint::verdicts(sp, &job, explicit_max_parallelism, limit, &asked);
        let judged = self.judge_serializers(asked.into_pairs()).await?;
        let verdicts = savepoint::verdicts(sp, &job, explicit_max_parallelism, limit, &judged);
        Ok((job, Some(verdicts)))
    }

    /// Has a task manager judge each pair (written, reading) of serializers by the formats' own rules.
    async fn judge_serializers(
        &self,
        pairs: Vec<(SerializerSnapshot, SerializerSnapshot)>,
    ) -> Result<Judgements, JobRequestError> {
        let mut judged = Judgements::default();
        if pairs.is_empty() {
            return Ok(judged);
        }
        let request = pb::ResolveSerializersRequest {
            pairs: pairs
                .iter()
                .map(|(w, r)| pb::SerializerPair { written: Some(w.into()), reading: Some(r.into()) })
                .collect(),
        };
        let answer = self
            .on_a_taskmanager(&BTreeSet::new(), "judge the savepoint's serializers", |mut client| {
                let request = request.clone();
                async move { client.resolve_serializers(request).await.map(|r| r.into_inner()) }
            })
            .await?;
        if !answer.error.is_empty() || answer.results.len() != pairs.len() {
            return Err(JobRequestError::InvalidSpec(format!(
                "the task manager that judged the savepoint's serializers answered {} of {} ({})",
                answer.results.len(),
                pairs.len(),
                answer.error
            )));
        }
        for ((written, reading), r) in pairs.into_iter().zip(answer.results) {
            let resolution = weir_common::deploy::wire::resolution_from_wire(r.resolution(), r.reason);
            judged.insert(written, reading, resolution, (r.written_text, r.reading_text));
        }
        Ok(judged)
    }

    /// Has a task manager that holds every kind of `spec` check it with the kinds' own declarations (configs,
    /// columns, side outputs, event time): the job manager runs no kind's code.
    async fn check_on_a_taskmanager(&self, spec: &pb::JobSpec) -> Result<(), JobRequestError> {
        let kinds: BTreeSet<&str> = spec.operators.iter().map(|o| o.kind.as_str()).collect();
        let request = pb::CheckSpecRequest { spec: Some(spec.clone()) };
        let error = self
            .on_a_taskmanager(&kinds, "check a spec", |mut client| {
                let request = request.clone();
                async move { client.check_spec(request).await.map(|r| r.into_inner().error) }
            })
            .await?;
        if error.is_empty() {
            Ok(())
        } else {
            Err(JobRequestError::InvalidSpec(error))
        }
    }

    /// Makes `call` on a task manager that holds every kind of `kinds` (any one for none), trying the next when
    /// one fails. One is waited for a while (a job manager that just started, or just took over, hears from its
    /// task managers within a heartbeat).
    async fn on_a_taskmanager<T, F, Fut>(
        &self,
        kinds: &BTreeSet<&str>,
        what: &str,
        mut call: F,
    ) -> Result<T, JobRequestError>
    where
        F: FnMut(TmClient) -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        let deadline = tokio::time::Instant::now() + CHECKER_WAIT;
        let mut last_error = None;
        loop {
            let able = self.shared.registry.lock().checkers(kinds);
            for address in able {
                let answer = match self.shared.clients.get(&address) {
                    Ok(client) => call(client).await,
                    Err(e) => Err(e),
                };
                match answer {
                    Ok(answer) => return Ok(answer),
                    Err(e) => {
                        warn!(taskmanager = %address, error = %e, "a task manager could not {what}; trying another");
                        last_error = Some(format!("{address}: {}", e.message()));
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                let kinds: Vec<&str> = kinds.iter().copied().collect();
                return Err(JobRequestError::NoChecker(match last_error {
                    Some(e) => format!("no task manager could {what} (the last said {e}); try again"),
                    None if kinds.is_empty() => {
                        format!("no task manager is registered to {what}: start one, or wait for it to register")
                    }
                    None => format!(
                        "no registered task manager holds every kind of the spec ({}): a spec is checked by a task \
                         manager that offers its kinds; start one, or wait for it to register",
                        kinds.join(", ")
                    ),
                }));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `weir savepoint check`: what restoring a savepoint into a job spec would do, per operator and state,
    /// with the same checks as a submission (nothing is deployed).
    pub async fn check_savepoint(
        &self,
        req: &pb::CheckSavepointRequest,
    ) -> Result<pb::CheckSavepointResponse, JobRequestError> {
        let spec = req.spec.clone().ok_or_else(|| JobRequestError::InvalidSpec("missing job spec".into()))?;
        let opts = self.shared.config.store_options();
        let sp = savepoint::load(&req.url, &opts).await.map_err(savepoint_error)?;
        // A savepoint missing a file is no savepoint to restore from, whatever the spec.
        savepoint::check_files(&sp, &opts).await.map_err(savepoint_error)?;
        let (_, verdicts) = self.resolve_restored(&spec, Some(&sp)).await?;
        let verdicts = verdicts.ok_or_else(|| JobRequestError::InvalidSpec("no savepoint to check".into()))?;
        let ok = verdicts.outcome(&sp.url, req.allow_non_restored_state).is_ok();
        let operators = verdicts
            .operators
            .into_iter()
            .map(|v| {
                let states = v
                    .states
                    .into_iter()
                    .map(|s| pb::StateVerdict {
                        name: s.name,
                        verdict: s.verdict as i32,
                        reason: s.reason,
                        from: s.from,
                        to: s.to,
                    })
                    .collect();
                pb::OperatorVerdict { uid: v.uid, verdict: v.verdict as i32, reason: v.reason, states }
            })
            .collect();
        Ok(pb::CheckSavepointResponse { ok, operators })
    }

    /// Reads and summarises a savepoint or retained checkpoint.
    pub async fn inspect_savepoint(&self, url: &str) -> Result<pb::InspectSavepointResponse, JobRequestError> {
        let sp = savepoint::load(url, &self.shared.config.store_options()).await.map_err(savepoint_error)?;
        Ok(savepoint::summarize(&sp))
    }

    /// Deletes a savepoint.
    pub async fn dispose_savepoint(&self, url: &str) -> Result<u64, JobRequestError> {
        let n = savepoint::dispose(url, &self.shared.config.store_options()).await.map_err(savepoint_error)?;
        info!(savepoint = %url, files = n, "savepoint disposed");
        Ok(n)
    }

    /// Every job, oldest submission first.
    pub fn list_jobs(&self) -> Vec<pb::JobInfo> {
        let mut jobs: Vec<pb::JobInfo> = self.shared.jobs.lock().values().map(|h| h.view.lock().info.clone()).collect();
        jobs.sort_by(|a, b| a.submit_time_ms.cmp(&b.submit_time_ms).then_with(|| a.id.cmp(&b.id)));
        jobs
    }

    /// Every job as the ownership checks of restores and deletions see it.
    fn other_jobs(&self) -> Vec<savepoint::OtherJob> {
        let jobs = self.shared.jobs.lock();
        jobs.iter()
            .map(|(id, h)| {
                let view = h.view.lock();
                savepoint::OtherJob {
                    id: id.to_string(),
                    running: !view.state.is_terminal(),
                    restoring_from: view.restoring_from.clone(),
                }
            })
            .collect()
    }

    /// One page of [`JobManager::list_jobs`]: see [`page_of_jobs`].
    pub fn list_jobs_page(&self, req: &pb::ListJobsRequest) -> Result<pb::ListJobsResponse, JobRequestError> {
        page_of_jobs(self.list_jobs(), req.page_size, &req.page_token)
    }

    /// Deletes the record of a job that has ended (its checkpoints too if asked; savepoints never): returns how
    /// many checkpoint files were deleted.
    pub async fn delete_job(&self, id: &str, delete_checkpoints: bool) -> Result<u64, JobRequestError> {
        let id = parse_id(id)?;
        let state = self.find(&id)?.1.lock().state;
        if !state.is_terminal() {
            return Err(JobRequestError::NotEnded { id: id.to_string(), state: state.name() });
        }
        let dir = format!("{}/{id}/", self.shared.store.url().trim_end_matches('/'));
        if delete_checkpoints {
            // Another job restoring from (or having claimed) one of these checkpoints still needs its files.
            let users: Vec<String> = self
                .other_jobs()
                .into_iter()
                .filter(|o| o.id != id.as_str() && o.running)
                .filter(|o| o.restoring_from.as_ref().is_some_and(|(u, _)| u.starts_with(&dir)))
                .map(|o| o.id)
                .collect();
            if !users.is_empty() {
                return Err(JobRequestError::InUse(format!(
                    "the checkpoints of job {id} are still the restore point of job(s) {}: delete the record without \
                     --delete-checkpoints, or wait until those jobs have completed a checkpoint of their own",
                    users.join(", ")
                )));
            }
        }
        self.shared.job_store.delete(&id).await.map_err(|e| JobRequestError::Storage(e.to_string()))?;
        self.shared.jobs.lock().remove(&id);
        let mut files = 0u64;
        if delete_checkpoints {
            let failed = |e: weir_common::service::store::StoreError| {
                JobRequestError::Storage(format!("the job's record is deleted, but not all of its checkpoints: {e}"))
            };
            for f in self.shared.store.list(id.as_str()).await.map_err(failed)? {
                self.shared.store.delete(&f).await.map_err(failed)?;
                files += 1;
            }
            if let Some(local) = dir.strip_prefix("file://") {
                let _ = std::fs::remove_dir_all(local);
            }
        }
        info!(job_id = %id, delete_checkpoints, files, "job record deleted");
        Ok(files)
    }

    /// The mailbox and the view of job `id`.
    fn find(&self, id: &JobId) -> Result<(mpsc::UnboundedSender<JobEvent>, Arc<Mutex<JobView>>), JobRequestError> {
        let jobs = self.shared.jobs.lock();
        let handle = jobs.get(id).ok_or_else(|| JobRequestError::NotFound(id.to_string()))?;
        Ok((handle.tx.clone(), handle.view.clone()))
    }

    /// One job.
    pub fn job(&self, id: &str) -> Result<pb::JobInfo, JobRequestError> {
        let (_, view) = self.find(&parse_id(id)?)?;
        let info = view.lock().info.clone();
        Ok(info)
    }

    /// A job's checkpoint history, newest last.
    pub fn checkpoints(&self, id: &str) -> Result<Vec<pb::CheckpointInfo>, JobRequestError> {
        let (_, view) = self.find(&parse_id(id)?)?;
        let now = now_ms();
        let view = view.lock();
        Ok(view.history.iter().map(|e| e.to_proto(now)).collect())
    }

    /// Cancels a job (a canceled job stays canceled; a finished or failed one cannot be canceled).
    pub async fn cancel(&self, id: &str) -> Result<pb::JobInfo, JobRequestError> {
        let id = parse_id(id)?;
        let (tx, view) = self.find(&id)?;
        if let Some(result) = ask(&tx, |reply| JobEvent::Cancel { reply }).await {
            return result;
        }
        let view = view.lock().clone();
        match view.state {
            crate::job::lifecycle::JobState::Canceled => Ok(view.info),
            s if s.is_terminal() => Err(JobRequestError::AlreadyTerminal { id: id.to_string(), state: s.name() }),
            _ => Err(JobRequestError::ShuttingDown),
        }
    }

    /// The registered task managers and their slots.
    pub fn cluster_overview(&self) -> pb::ClusterOverviewResponse {
        self.shared.registry.lock().overview()
    }

    /// The operator kinds the registered task managers report, by name.
    pub fn list_kinds(&self) -> pb::ListKindsResponse {
        let kinds = self.shared.registry.lock().kinds();
        pb::ListKindsResponse { kinds: kinds.iter().map(pb::OperatorKindInfo::from).collect() }
    }

    /// Registers a task manager; a known id replaces the old registration, which counts as lost.
    pub fn register_task_manager(
        &self,
        req: &pb::RegisterTaskManagerRequest,
    ) -> Result<pb::RegisterTaskManagerResponse, RegistrationError> {
        let reg = Registration::from_proto(req)?;
        let (tm_id, rpc_address, data_address, slots) =
            (reg.tm_id.clone(), reg.rpc_address.clone(), reg.data_address.clone(), reg.slots);
        let (instance, old) = self.shared.registry.lock().register(reg, now_ms());
        if let Some(old) = old {
            warn!(tm_id = %old.id, instance = old.instance, "task manager registered again; its previous registration is lost");
            if old.rpc_address != rpc_address {
                self.shared.clients.forget(&old.rpc_address);
            }
            self.shared.broadcast_lost(&old.id, old.instance, "it registered again");
        }
        info!(tm_id = %tm_id, instance, rpc_address = %rpc_address, data_address = %data_address, slots, "task manager registered");
        Ok(pb::RegisterTaskManagerResponse {
            jm_session: self.shared.session.clone(),
            heartbeat_interval_ms: self.shared.config.heartbeat_interval_ms,
            jm_epoch: self.shared.epoch,
        })
    }

    /// Records a heartbeat; answers whether the task manager must register (again).
    pub fn heartbeat(&self, req: &pb::HeartbeatRequest) -> pb::HeartbeatResponse {
        let known =
            req.jm_session == self.shared.session && self.shared.registry.lock().heartbeat(&req.tm_id, now_ms());
        if !known {
            debug!(tm_id = %req.tm_id, "heartbeat from an unregistered task manager; asking it to register");
            return pb::HeartbeatResponse { reregister: true };
        }
        // The states the task manager knows, for each job to compare with its own view (a report may be lost
        // or still on its way).
        let mut by_job: BTreeMap<JobId, Vec<ReportedTask>> = BTreeMap::new();
        for status in &req.tasks {
            let (Ok(task), Ok(state)) =
                (TaskAddress::from_proto(status.task.as_ref()), pb::TaskState::try_from(status.state))
            else {
                continue;
            };
            by_job.entry(task.job_id.clone()).or_default().push(ReportedTask {
                attempt: task.attempt,
                task: task.task,
                state,
                error: TaskError {
                    text: status.error.clone(),
                    caused_by_peer: status.caused_by_peer,
                    fatal: status.fatal,
                },
                watermark: status.watermark,
            });
        }
        for (job_id, tasks) in by_job {
            self.route(&job_id, JobEvent::Reconcile { tm_id: req.tm_id.clone(), tasks });
        }
        pb::HeartbeatResponse { reregister: false }
    }

    /// Routes a task's state report to its job (reports for unknown jobs are dropped).
    pub(crate) fn task_state(&self, tm_id: &str, task: TaskAddress, state: pb::TaskState, error: TaskError) {
        self.route(
            &task.job_id,
            JobEvent::TaskState { tm_id: tm_id.to_string(), attempt: task.attempt, task: task.task, state, error },
        );
    }

    /// Routes a checkpoint acknowledgement to its job.
    pub fn acknowledge(&self, task: TaskAddress, checkpoint_id: CheckpointId, snapshot: TaskSnapshot) {
        self.route(
            &task.job_id,
            JobEvent::Acknowledge {
                attempt: task.attempt,
                task: task.task,
                checkpoint_id,
                snapshot: Box::new(snapshot),
            },
        );
    }

    /// Routes a checkpoint decline to its job.
    pub fn decline(&self, task: TaskAddress, checkpoint_id: CheckpointId, reason: String) {
        self.route(&task.job_id, JobEvent::Decline { attempt: task.attempt, task: task.task, checkpoint_id, reason });
    }

    fn route(&self, job_id: &JobId, event: JobEvent) {
        let jobs = self.shared.jobs.lock();
        match jobs.get(job_id) {
            Some(handle) => {
                if handle.tx.send(event).is_err() {
                    debug!(job_id = %job_id, "dropping a task message: the job is no longer coordinated");
                }
            }
            None => debug!(job_id = %job_id, "dropping a task message for an unknown job"),
        }
    }

    /// The HA leader's epoch (0 without HA).
    pub fn epoch(&self) -> u64 {
        self.shared.epoch
    }

    /// Stops coordinating after losing leadership: from now on nothing deletes files, every write to etcd is
    /// refused, and the jobs stop here (the new leader resumes them).
    pub async fn depose(&self) {
        self.stop_coordinating();
        self.shutdown().await;
    }

    /// Marks this job manager deposed and tells every job to stop, without waiting for them: a job may be
    /// stuck in a call to a store that hangs, and whoever resigns must not wait for that to give leadership up.
    pub fn stop_coordinating(&self) {
        self.shared.deposed.store(true, Ordering::SeqCst);
        self.shared.shutdown.send_replace(true);
    }

    /// Stops coordinating: every job persists its record and stops (jobs are not canceled; a restarted job
    /// manager resumes them).
    pub async fn shutdown(&self) {
        self.shared.shutdown.send_replace(true);
        let tasks: Vec<_> = self.shared.jobs.lock().values_mut().filter_map(|h| h.task.take()).collect();
        for t in tasks {
            let _ = t.await;
        }
        let monitor = self.shared.monitor.lock().take();
        if let Some(m) = monitor {
            let _ = m.await;
        }
        info!("job manager stopped");
    }
}

/// Removes task managers whose heartbeats stopped.
async fn monitor_heartbeats(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown_receiver();
    let period = Duration::from_millis((shared.config.heartbeat_interval_ms / 2).clamp(20, 1000));
    let timeout = shared.config.heartbeat_timeout_ms;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if *shutdown.borrow() {
            break;
        }
        tokio::select! {
            _ = shutdown.changed() => break,
            _ = tick.tick() => {
                let expired = shared.registry.lock().expired(now_ms(), timeout);
                for (tm_id, instance) in expired {
                    shared.tm_lost(&tm_id, instance, &format!("no heartbeat for {timeout} ms"));
                }
            }
        }
    }
}

/// Jobs listed per page by default, and at most.
pub const DEFAULT_PAGE_SIZE: u32 = 100;
/// The largest page a client may ask for.
pub const MAX_PAGE_SIZE: u32 = 1000;

/// Encoded bytes a page of jobs stops growing at (it holds at least one job): far below gRPC's 4 MiB, whatever
/// the jobs' records hold (records from before the spec limits may carry names of megabytes).
pub const MAX_PAGE_BYTES: usize = 1 << 20;

/// A job id from a request, or why it is not one.
fn parse_id(id: &str) -> Result<JobId, JobRequestError> {
    Ok(JobId::parse(id)?)
}

/// Sends a job's coordinator an event that carries a reply channel, and waits for the reply. `None`: the
/// coordinator has stopped (the job is over, or the job manager is shutting down) and the caller answers from
/// the job's view.
async fn ask<T>(tx: &mpsc::UnboundedSender<JobEvent>, event: impl FnOnce(oneshot::Sender<T>) -> JobEvent) -> Option<T> {
    let (reply, answer) = oneshot::channel();
    tx.send(event(reply)).ok()?;
    answer.await.ok()
}

/// One page of `jobs` (oldest submission first): up to `page_size` jobs (0: [`DEFAULT_PAGE_SIZE`]) after the
/// job named by `token` (empty: from the first), and no more than [`MAX_PAGE_BYTES`] of them. The next token is
/// the last listed job's submission time and id, so a page never repeats or skips a job when others are
/// submitted or deleted between calls.
pub fn page_of_jobs(
    jobs: Vec<pb::JobInfo>,
    page_size: u32,
    token: &str,
) -> Result<pb::ListJobsResponse, JobRequestError> {
    let size = match page_size {
        0 => DEFAULT_PAGE_SIZE,
        n if n > MAX_PAGE_SIZE => {
            return Err(JobRequestError::InvalidSpec(format!("page_size {n} is over the limit of {MAX_PAGE_SIZE}")))
        }
        n => n,
    } as usize;
    let after = if token.is_empty() {
        None
    } else {
        let parsed = token.split_once(':').and_then(|(t, id)| Some((t.parse::<u64>().ok()?, id.to_string())));
        Some(parsed.ok_or_else(|| {
            JobRequestError::InvalidSpec(format!(
                "page_token {} is not one this job manager gave",
                weir_common::job::spec::echo(token)
            ))
        })?)
    };
    let rest = jobs.into_iter().filter(|j| after.as_ref().is_none_or(|(t, id)| (j.submit_time_ms, &j.id) > (*t, id)));
    let mut page = Vec::new();
    let mut bytes = 0;
    let mut more = false;
    for job in rest {
        let len = prost::Message::encoded_len(&job);
        if page.len() == size || (!page.is_empty() && bytes + len > MAX_PAGE_BYTES) {
            more = true;
            break;
        }
        bytes += len;
        page.push(job);
    }
    let next_page_token = match page.last() {
        Some(last) if more => format!("{}:{}", last.submit_time_ms, last.id),
        _ => String::new(),
    };
    Ok(pb::ListJobsResponse { jobs: page, next_page_token })
}

#[cfg(test)]
mod page_tests {
    use super::*;

    fn job(t: u64, id: &str) -> pb::JobInfo {
        pb::JobInfo { id: id.into(), submit_time_ms: t, ..Default::default() }
    }

    #[test]
    fn pages_cover_every_job_once() {
        let jobs: Vec<pb::JobInfo> = (0..7).map(|i| job(i / 2, &format!("j{i}"))).collect();
        let mut seen = Vec::new();
        let mut token = String::new();
        loop {
            let page = page_of_jobs(jobs.clone(), 3, &token).unwrap();
            assert!(page.jobs.len() <= 3);
            seen.extend(page.jobs.iter().map(|j| j.id.clone()));
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
        assert_eq!(seen, (0..7).map(|i| format!("j{i}")).collect::<Vec<_>>());
        // A job deleted between two pages does not shift the next one.
        let first = page_of_jobs(jobs.clone(), 3, "").unwrap();
        let rest: Vec<pb::JobInfo> = jobs.iter().filter(|j| j.id != "j1").cloned().collect();
        let second = page_of_jobs(rest, 3, &first.next_page_token).unwrap();
        assert_eq!(second.jobs[0].id, "j3");
        assert_eq!(page_of_jobs(jobs.clone(), 0, "").unwrap().jobs.len(), 7);
        assert!(page_of_jobs(jobs.clone(), 5000, "").is_err());
        assert!(page_of_jobs(jobs, 3, "garbage").unwrap_err().to_string().contains("page_token"));
        // Records with huge names (stored before the limits) do not make a page too large to send.
        let huge: Vec<pb::JobInfo> =
            (0..3).map(|i| pb::JobInfo { name: "n".repeat(700_000), ..job(i, &format!("h{i}")) }).collect();
        let first = page_of_jobs(huge.clone(), 0, "").unwrap();
        assert_eq!(first.jobs.len(), 1, "a second 700 KB job would pass the page's byte bound");
        let second = page_of_jobs(huge, 0, &first.next_page_token).unwrap();
        assert_eq!(second.jobs[0].id, "h1");
    }
}
