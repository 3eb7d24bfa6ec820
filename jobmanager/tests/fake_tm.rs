//! The job manager against an in-process fake task manager (a real tonic `TaskManagerApi` server on
//! 127.0.0.1:0): registration, deployment, checkpoints written to a `file://` store, subsumption, the
//! final checkpoint and FINISHED, failover with restore, and a job-manager restart that resumes the job.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};
use weir_common::checkpoint::{
    paths, DistributionMode, FileHandle, OperatorStateHandle, OperatorSubtaskState, StateMetaInfo, TaskSnapshot,
};
use weir_common::deploy::descriptor::TaskDescriptor;
use weir_common::deploy::wire::WireError;
use weir_common::ids::{CheckpointId, JobId};
use weir_common::service::store::{Store, StoreOptions};
use weir_jobmanager::{JobManager, JobManagerConfig};
use weir_proto as pb;
use weir_proto::client_api_client::ClientApiClient;
use weir_proto::job_manager_internal_client::JobManagerInternalClient;
use weir_proto::task_manager_api_server::{TaskManagerApi, TaskManagerApiServer};

const WAIT: Duration = Duration::from_secs(20);

const SPEC: &str = r#"
name: fake-tm-demo
parallelism: 2
checkpointing: { interval_ms: 100, retained: 2 }
restart: { strategy: fixed-delay, attempts: 5, delay_ms: 50 }
operators:
  - { uid: events, kind: datagen, config: { count: 1000, keys: 10, seed: 1 } }
  - { uid: counts, kind: keyed-count, input: events }
  - { uid: out, kind: file-sink, input: counts, parallelism: 1, config: { path: /tmp/weir-fake-out } }
"#;

// ------------------------------------------------------------------------------------------ the fake TM

#[derive(Default)]
struct FakeState {
    /// Deployed tasks by (attempt, vertex, subtask).
    tasks: BTreeMap<(u32, u32, u32), TaskDescriptor>,
    /// Every deployment, in arrival order.
    deploy_log: Vec<(u32, u32, u32)>,
    /// Checkpoint ids already acknowledged.
    acked: Vec<u64>,
    notifications: Vec<pb::NotifyCheckpointRequest>,
    cancels: Vec<pb::CancelTasksRequest>,
    sessions: Vec<String>,
    end_of_input: bool,
    /// Reports of these states are "lost": never sent, only carried by heartbeats (`statuses`).
    lose_reports: Vec<pb::TaskState>,
    /// The latest state of each task, as heartbeats carry it.
    statuses: BTreeMap<(u32, u32, u32), pb::TaskStatus>,
}

#[derive(Clone)]
struct FakeTm {
    id: String,
    state: Arc<Mutex<FakeState>>,
    jm_client: Arc<Mutex<JobManagerInternalClient<Channel>>>,
    store: Store,
}

fn task_ref(d: &TaskDescriptor) -> pb::TaskRef {
    pb::TaskRef { job_id: d.job_id.to_string(), attempt: d.attempt.0, vertex: d.vertex.0, subtask: d.subtask.0 }
}

impl FakeTm {
    fn jm(&self) -> JobManagerInternalClient<Channel> {
        self.jm_client.lock().clone()
    }

    async fn switch_jm(&self, url: &str) {
        let client = JobManagerInternalClient::connect(url.to_string()).await.expect("connect to jm");
        *self.jm_client.lock() = client;
    }

    async fn report(&self, d: &TaskDescriptor, state: pb::TaskState) {
        {
            let mut s = self.state.lock();
            let status =
                pb::TaskStatus { task: Some(task_ref(d)), state: state as i32, watermark: None, ..Default::default() };
            s.statuses.insert((d.attempt.0, d.vertex.0, d.subtask.0), status);
            if s.lose_reports.contains(&state) {
                return;
            }
        }
        let req = pb::UpdateTaskStateRequest {
            tm_id: self.id.clone(),
            task: Some(task_ref(d)),
            state: state as i32,
            ..Default::default()
        };
        self.jm().update_task_state(req).await.expect("update task state");
    }

    fn current_tasks(&self) -> Vec<TaskDescriptor> {
        let s = self.state.lock();
        let Some(attempt) = s.tasks.keys().map(|k| k.0).max() else { return vec![] };
        s.tasks.iter().filter(|(k, _)| k.0 == attempt).map(|(_, d)| d.clone()).collect()
    }

    async fn ack_all(&self, attempt: u32, checkpoint_id: u64) {
        let eoi = self.state.lock().end_of_input;
        let tasks: Vec<TaskDescriptor> =
            self.state.lock().tasks.iter().filter(|(k, _)| k.0 == attempt).map(|(_, d)| d.clone()).collect();
        for d in tasks {
            let mut operators = BTreeMap::new();
            for op in &d.operators {
                let path =
                    format!("{}/state", paths::subtask_dir(&d.job_id, CheckpointId(checkpoint_id), &op.uid, d.subtask));
                self.store.put(&path, bytes::Bytes::from_static(b"0123456789")).await.expect("write state");
                operators.insert(
                    op.uid.clone(),
                    OperatorSubtaskState {
                        subtask: d.subtask,
                        keyed: None,
                        operator_state: Some(OperatorStateHandle {
                            file: FileHandle { path, size: 10 },
                            // One element: the 4-byte length and 6 bytes of "0123456789".
                            states: vec![StateMetaInfo::inline("s", DistributionMode::SplitDistribute, vec![0], 10)],
                        }),
                        end_of_input: eoi,
                        watermark: None,
                    },
                );
            }
            let snapshot = TaskSnapshot { vertex: d.vertex, subtask: d.subtask, operators, uploaded_bytes: 10 };
            let req = pb::AcknowledgeCheckpointRequest {
                tm_id: self.id.clone(),
                task: Some(task_ref(&d)),
                checkpoint_id,
                snapshot: Some((&snapshot).into()),
                sync_duration_ms: 1,
                async_duration_ms: 1,
            };
            self.jm().acknowledge_checkpoint(req).await.expect("ack");
        }
    }

    async fn register(&self, rpc_address: &str) -> pb::RegisterTaskManagerResponse {
        let req = pb::RegisterTaskManagerRequest {
            tm_id: self.id.clone(),
            rpc_address: rpc_address.to_string(),
            data_address: "127.0.0.1:1".into(),
            slots: 2,
            // The kinds of the tests' job, as a task manager reports them (it is asked to check specs of them).
            operator_kinds: [
                ("datagen", pb::KindRole::Source, false),
                ("keyed-count", pb::KindRole::Operator, true),
                ("file-sink", pb::KindRole::Sink, false),
            ]
            .into_iter()
            .map(|(kind, role, keyed)| pb::OperatorKindInfo {
                kind: kind.into(),
                version: "1".into(),
                role: role as i32,
                keyed,
                ..Default::default()
            })
            .collect(),
        };
        let resp = self.jm().register_task_manager(req).await.expect("register").into_inner();
        let mut s = self.state.lock();
        // A task manager cancels all of its tasks when it (re-)registers.
        s.tasks.clear();
        s.sessions.push(resp.jm_session.clone());
        resp
    }
}

#[tonic::async_trait]
impl TaskManagerApi for FakeTm {
    async fn deploy_task(
        &self,
        request: Request<pb::DeployTaskRequest>,
    ) -> Result<Response<pb::DeployTaskResponse>, Status> {
        let req = request.into_inner();
        let mut d = TaskDescriptor::try_from(req.descriptor.ok_or_else(|| Status::invalid_argument("no descriptor"))?)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        d.restore = req
            .restore
            .map(|r| r.try_into())
            .transpose()
            .map_err(|e: WireError| Status::invalid_argument(e.to_string()))?;
        let key = (d.attempt.0, d.vertex.0, d.subtask.0);
        {
            let mut s = self.state.lock();
            if s.sessions.last() != Some(&req.jm_session) {
                return Err(Status::failed_precondition("unknown job manager session"));
            }
            s.tasks.insert(key, d.clone());
            s.deploy_log.push(key);
        }
        let me = self.clone();
        tokio::spawn(async move { me.report(&d, pb::TaskState::Running).await });
        Ok(Response::new(pb::DeployTaskResponse {}))
    }

    async fn end_input(&self, _: Request<pb::EndInputRequest>) -> Result<Response<pb::EndInputResponse>, Status> {
        Err(Status::unimplemented("the fake task manager runs no sources"))
    }

    /// The fake runs no kind's declaration: every spec the job manager accepted is fine by it.
    async fn check_spec(&self, _: Request<pb::CheckSpecRequest>) -> Result<Response<pb::CheckSpecResponse>, Status> {
        Ok(Response::new(pb::CheckSpecResponse::default()))
    }

    async fn resolve_serializers(
        &self,
        request: Request<pb::ResolveSerializersRequest>,
    ) -> Result<Response<pb::ResolveSerializersResponse>, Status> {
        // Equal serializers read as is; the fake knows no format's rules beyond that.
        let results = request
            .into_inner()
            .pairs
            .into_iter()
            .map(|p| {
                let same = p.written == p.reading;
                pb::ResolvedSerializers {
                    resolution: if same {
                        pb::SerializerResolution::AsIs as i32
                    } else {
                        pb::SerializerResolution::Incompatible as i32
                    },
                    reason: if same { String::new() } else { "the fake task manager judges only equality".into() },
                    ..Default::default()
                }
            })
            .collect();
        Ok(Response::new(pb::ResolveSerializersResponse { results, error: String::new() }))
    }

    async fn trigger_checkpoint(
        &self,
        request: Request<pb::TriggerCheckpointRequest>,
    ) -> Result<Response<pb::TriggerCheckpointResponse>, Status> {
        let req = request.into_inner();
        let task = req.task.unwrap_or_default();
        let first = {
            let mut s = self.state.lock();
            let first = !s.acked.contains(&req.checkpoint_id);
            if first {
                s.acked.push(req.checkpoint_id);
            }
            first
        };
        if first {
            // The whole pipeline takes its snapshot: acknowledge for every task of the attempt.
            let me = self.clone();
            tokio::spawn(async move { me.ack_all(task.attempt, req.checkpoint_id).await });
        }
        Ok(Response::new(pb::TriggerCheckpointResponse {}))
    }

    async fn notify_checkpoint(
        &self,
        request: Request<pb::NotifyCheckpointRequest>,
    ) -> Result<Response<pb::NotifyCheckpointResponse>, Status> {
        let req = request.into_inner();
        self.state.lock().notifications.push(req.clone());
        // A completed final checkpoint or stop-with-savepoint ends the tasks, as a real task manager's do.
        if req.outcome == pb::CheckpointOutcome::Final as i32 || req.outcome == pb::CheckpointOutcome::Stop as i32 {
            let me = self.clone();
            tokio::spawn(async move {
                for d in me.current_tasks().into_iter().filter(|d| d.attempt.0 == req.attempt) {
                    me.report(&d, pb::TaskState::Finished).await;
                }
            });
        }
        Ok(Response::new(pb::NotifyCheckpointResponse {}))
    }

    async fn cancel_job(
        &self,
        request: Request<pb::CancelTasksRequest>,
    ) -> Result<Response<pb::CancelTasksResponse>, Status> {
        let req = request.into_inner();
        let mut s = self.state.lock();
        let before = s.tasks.len();
        s.tasks.retain(|k, d| !(d.job_id.as_str() == req.job_id && k.0 <= req.up_to_attempt));
        let canceled = (before - s.tasks.len()) as u32;
        s.cancels.push(req);
        Ok(Response::new(pb::CancelTasksResponse { canceled }))
    }
}

// ------------------------------------------------------------------------------------------ harness

struct RunningJm {
    jm: JobManager,
    url: String,
    stop: Option<oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<()>,
}

impl RunningJm {
    async fn start(data_dir: &Path, store_url: &str) -> RunningJm {
        let config = JobManagerConfig {
            bind: "127.0.0.1:0".into(),
            data_dir: data_dir.to_path_buf(),
            checkpoint_store: Some(store_url.to_string()),
            heartbeat_interval_ms: 100,
            heartbeat_timeout_ms: 2000,
            ..Default::default()
        };
        let listener = weir_jobmanager::bind(&config).await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let jm = JobManager::start(config.clone()).await.expect("start");
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn({
            let jm = jm.clone();
            async move {
                weir_jobmanager::serve(weir_jobmanager::leader::Gate::fixed(jm), &config, listener, async {
                    let _ = stopped.await;
                })
                .await
                .expect("serve");
            }
        });
        RunningJm { jm, url, stop: Some(stop), server }
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let _ = (&mut self.server).await;
        self.jm.shutdown().await;
    }

    async fn client(&self) -> ClientApiClient<Channel> {
        ClientApiClient::connect(self.url.clone()).await.expect("client")
    }
}

async fn start_fake_tm(id: &str, jm_url: &str, store: Store) -> (FakeTm, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind fake tm");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let jm = JobManagerInternalClient::connect(jm_url.to_string()).await.expect("connect to jm");
    let fake = FakeTm { id: id.into(), state: Arc::default(), jm_client: Arc::new(Mutex::new(jm)), store };
    let server = TaskManagerApiServer::new(fake.clone());
    tokio::spawn(async move {
        let _ = Server::builder().add_service(server).serve_with_incoming(TcpIncoming::from(listener)).await;
    });
    (fake, url)
}

/// Heartbeats like a task manager; registers again when told to.
fn spawn_heartbeats(fake: FakeTm, rpc_url: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let (session, tasks) = {
                let s = fake.state.lock();
                (s.sessions.last().cloned().unwrap_or_default(), s.statuses.values().cloned().collect())
            };
            let req = pb::HeartbeatRequest { tm_id: fake.id.clone(), jm_session: session, tasks };
            match fake.jm().heartbeat(req).await {
                Ok(r) if r.get_ref().reregister => {
                    fake.register(&rpc_url).await;
                }
                _ => {}
            }
        }
    })
}

/// Waits until `f` holds (synchronous checks: files, the fake's state).
/// Submits [`SPEC`]; returns the job id.
async fn submit(client: &ClientApiClient<Channel>) -> String {
    let spec = weir_common::job::spec::parse_spec_text(SPEC).unwrap();
    client
        .clone()
        .submit_job(pb::SubmitJobRequest { spec: Some(spec), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .job_id
}

async fn wait_until(what: &str, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the job's info satisfies `pred`.
async fn wait_job(
    client: &ClientApiClient<Channel>,
    id: &str,
    what: &str,
    pred: impl Fn(&pb::JobInfo) -> bool,
) -> pb::JobInfo {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let j = job_info(client, id).await;
        if pred(&j) {
            return j;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting {what}: {j:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until a listed checkpoint satisfies `pred`.
async fn wait_checkpoint(
    client: &ClientApiClient<Channel>,
    id: &str,
    what: &str,
    pred: impl Fn(&pb::CheckpointInfo) -> bool,
) -> pb::CheckpointInfo {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(c) = checkpoints(client, id).await.into_iter().find(|c| pred(c)) {
            return c;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn job_info(client: &ClientApiClient<Channel>, id: &str) -> pb::JobInfo {
    let resp = client.clone().get_job(pb::GetJobRequest { job_id: id.into() }).await.expect("get job");
    resp.into_inner().job.expect("job")
}

async fn checkpoints(client: &ClientApiClient<Channel>, id: &str) -> Vec<pb::CheckpointInfo> {
    let req = pb::ListCheckpointsRequest { job_id: id.into() };
    client.clone().list_checkpoints(req).await.expect("list checkpoints").into_inner().checkpoints
}

fn chk_dir(root: &Path, job: &str, n: u64) -> PathBuf {
    root.join(job).join(format!("chk-{n}"))
}

struct Env {
    _dir: tempfile::TempDir,
    data: PathBuf,
    cp_root: PathBuf,
    store_url: String,
    store: Store,
}

fn env() -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("jm");
    let cp_root = dir.path().join("cp");
    let store_url = format!("file://{}", cp_root.display());
    let store = Store::open(&store_url, &StoreOptions::default()).expect("store");
    Env { _dir: dir, data, cp_root, store_url, store }
}

// ------------------------------------------------------------------------------------------ tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_checkpoint_subsume_and_finish() {
    // Failpoints are process-wide: tests that share this process take turns.
    let _failpoints = fail::FailScenario::setup();
    let env = env();
    let jm = RunningJm::start(&env.data, &env.store_url).await;
    let mut client = jm.client().await;
    let (fake, rpc) = start_fake_tm("tm-a", &jm.url, env.store.clone()).await;
    let reg = fake.register(&rpc).await;
    assert_eq!(reg.heartbeat_interval_ms, 100);
    let hb = spawn_heartbeats(fake.clone(), rpc.clone());

    // Validation errors name the operator and field; unknown ids are NOT_FOUND.
    let bad = weir_common::job::spec::parse_spec_text(&SPEC.replace("keyed-count", "keyed-cuont")).unwrap();
    let err = client.submit_job(pb::SubmitJobRequest { spec: Some(bad), ..Default::default() }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("operator \"counts\": field \"kind\""), "{}", err.message());
    let err = client.get_job(pb::GetJobRequest { job_id: "0123abcd".into() }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);

    let id = submit(&client).await;
    let info = wait_job(&client, &id, "for RUNNING", |j| j.state() == pb::JobState::Running).await;
    assert_eq!(info.attempt, 1);
    assert_eq!(info.max_parallelism, 128);
    assert_eq!(info.name, "fake-tm-demo");
    {
        let s = fake.state.lock();
        let order: Vec<u32> = s.deploy_log.iter().map(|k| k.1).collect();
        assert_eq!(order, vec![2, 1, 1, 0, 0], "consumers are deployed before producers");
        let sink = &s.tasks[&(1, 2, 0)];
        assert_eq!(sink.input.as_ref().unwrap().channels.len(), 2);
        assert!(sink.restore.is_none());
    }
    let overview = client.cluster_overview(pb::ClusterOverviewRequest {}).await.unwrap().into_inner();
    assert_eq!((overview.total_slots, overview.free_slots), (2, 0));
    let listed = client.list_jobs(pb::ListJobsRequest::default()).await.unwrap().into_inner().jobs;
    assert_eq!(listed.len(), 1);

    // Periodic checkpoints complete: _metadata appears, tasks are notified, old ones are subsumed.
    let root = env.cp_root.clone();
    wait_until("for chk-4/_metadata", || chk_dir(&root, &id, 4).join("_metadata").is_file()).await;
    wait_until("for chk-1 and chk-2 to be subsumed and deleted", || {
        !chk_dir(&root, &id, 1).exists() && !chk_dir(&root, &id, 2).exists()
    })
    .await;
    let listed = checkpoints(&client, &id).await;
    let first = &listed[0];
    assert_eq!((first.id, first.status()), (1, pb::CheckpointStatus::Completed));
    assert_eq!(first.full_size_bytes, 50, "5 operator subtasks of 10 bytes");
    assert_eq!(first.uploaded_bytes, 50);
    assert!(first.path.ends_with(&format!("{id}/chk-1/_metadata")), "{}", first.path);
    assert!(listed.windows(2).all(|w| w[0].id < w[1].id), "newest last");
    assert!(fake
        .state
        .lock()
        .notifications
        .iter()
        .any(|n| n.checkpoint_id == 1 && n.outcome == pb::CheckpointOutcome::Completed as i32));
    let info = job_info(&client, &id).await;
    assert!(info.last_completed_checkpoint >= Some(4));
    assert!(info.checkpoints_completed >= 4);

    // End of input: the final checkpoint is triggered, completes with is_final, and the job finishes.
    fake.state.lock().end_of_input = true;
    for d in fake.current_tasks() {
        fake.report(&d, pb::TaskState::EndOfInput).await;
    }
    let done = wait_job(&client, &id, "for FINISHED", |j| j.state() == pb::JobState::Finished).await;
    assert!(done.end_time_ms > 0);
    let listed = checkpoints(&client, &id).await;
    let last = listed.last().unwrap();
    assert!(last.is_final && last.status() == pb::CheckpointStatus::Completed, "{last:?}");
    assert_eq!(done.last_completed_checkpoint, Some(last.id));
    assert!(fake
        .state
        .lock()
        .notifications
        .iter()
        .any(|n| n.checkpoint_id == last.id && n.outcome == pb::CheckpointOutcome::Final as i32));
    let overview = client.cluster_overview(pb::ClusterOverviewRequest {}).await.unwrap().into_inner();
    assert_eq!(overview.free_slots, 2, "a finished job frees its slots");
    let err = client.cancel_job(pb::CancelJobRequest { job_id: id.clone() }).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);

    hb.abort();
    jm.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fatal_task_failure_fails_the_job_without_a_restart() {
    let env = env();
    let jm = RunningJm::start(&env.data, &env.store_url).await;
    let client = jm.client().await;
    let (fake, rpc) = start_fake_tm("tm-f", &jm.url, env.store.clone()).await;
    fake.register(&rpc).await;
    let hb = spawn_heartbeats(fake.clone(), rpc.clone());
    let id = submit(&client).await;
    wait_job(&client, &id, "for RUNNING", |j| j.state() == pb::JobState::Running).await;

    let failing = fake.current_tasks().into_iter().find(|d| d.vertex.0 == 1).unwrap();
    let fatal = pb::UpdateTaskStateRequest {
        tm_id: "tm-f".into(),
        task: Some(task_ref(&failing)),
        state: pb::TaskState::Failed as i32,
        error: "operator \"counts\": a stored row is corrupt".into(),
        caused_by_peer: false,
        fatal: true,
    };
    fake.jm().update_task_state(fatal).await.unwrap();
    let info = wait_job(&client, &id, "for FAILED", |j| j.state() == pb::JobState::Failed).await;
    assert_eq!((info.restarts, info.attempt), (0, 1), "no restart: {info:?}");
    assert!(info.failure.contains("a stored row is corrupt") && info.failure.contains("fatal"), "{}", info.failure);

    hb.abort();
    jm.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_restores_and_jm_restart_resumes() {
    // Failpoints are process-wide: tests that share this process take turns.
    let _failpoints = fail::FailScenario::setup();
    let env = env();
    let jm = RunningJm::start(&env.data, &env.store_url).await;
    let client = jm.client().await;
    let (fake, rpc) = start_fake_tm("tm-b", &jm.url, env.store.clone()).await;
    fake.register(&rpc).await;
    let hb = spawn_heartbeats(fake.clone(), rpc.clone());

    let id = submit(&client).await;
    let job_id = JobId(id.clone());
    wait_job(&client, &id, "for 2 checkpoints", |j| j.last_completed_checkpoint >= Some(2)).await;

    // A task fails: the job restarts with the next attempt, restored from the latest checkpoint. Its neighbour,
    // whose connection to it broke, is heard first; the failing task's own error, heard next, is the cause.
    let failing = fake.current_tasks().into_iter().find(|d| d.vertex.0 == 1).unwrap();
    let neighbour = fake.current_tasks().into_iter().find(|d| d.vertex.0 == 0).unwrap();
    let broken = pb::UpdateTaskStateRequest {
        tm_id: "tm-b".into(),
        task: Some(task_ref(&neighbour)),
        state: pb::TaskState::Failed as i32,
        error: "data connection to counts: Connection reset by peer".into(),
        caused_by_peer: true,
        fatal: false,
    };
    let failed = pb::UpdateTaskStateRequest {
        tm_id: "tm-b".into(),
        task: Some(task_ref(&failing)),
        state: pb::TaskState::Failed as i32,
        error: "boom".into(),
        caused_by_peer: false,
        fatal: false,
    };
    fake.jm().update_task_state(broken).await.unwrap();
    fake.jm().update_task_state(failed.clone()).await.unwrap();
    let info =
        wait_job(&client, &id, "for attempt 2 RUNNING", |j| j.attempt == 2 && j.state() == pb::JobState::Running).await;
    assert_eq!(info.restarts, 1);
    assert!(info.failure.contains("boom") && info.failure.contains("counts subtask"), "{}", info.failure);
    assert!(!info.failure.contains("reset by peer"), "{}", info.failure);
    assert!(fake.state.lock().cancels.iter().any(|c| c.job_id == id && c.up_to_attempt == 1));
    let restored = fake.current_tasks();
    assert_eq!(restored.len(), 5);
    let restore = restored[0].restore.clone().expect("restored from a checkpoint");
    assert!(restore.checkpoint_id.0 >= 2);
    assert!(restored
        .iter()
        .all(|d| d.attempt.0 == 2 && d.restore.as_ref().map(|r| r.checkpoint_id) == Some(restore.checkpoint_id)));
    let counts1 = restored.iter().find(|d| d.vertex.0 == 1 && d.subtask.0 == 1).unwrap();
    let r = counts1.restore.as_ref().unwrap();
    assert_eq!(
        r.operators["counts"].operator_state[0].file.path,
        format!("{}/state", paths::subtask_dir(&job_id, restore.checkpoint_id, "counts", counts1.subtask))
    );

    // Stale messages of attempt 1 are dropped: a FAILED report of the old attempt changes nothing.
    fake.jm().update_task_state(failed).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let info = job_info(&client, &id).await;
    assert_eq!((info.attempt, info.state(), info.restarts), (2, pb::JobState::Running, 1));

    // The job manager stops (the job is not canceled) and a new one resumes it from the job store.
    let after = restore.checkpoint_id.0;
    let before = wait_job(&client, &id, "for a checkpoint of attempt 2", |j| {
        j.last_completed_checkpoint.is_some_and(|c| c > after)
    })
    .await;
    jm.stop().await;
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(env.data.join("jobs").join(format!("{id}.json"))).unwrap()).unwrap();
    assert_eq!(stored["state"], "RUNNING");
    let next_id = stored["next_checkpoint_id"].as_u64().unwrap();

    let jm2 = RunningJm::start(&env.data, &env.store_url).await;
    let client2 = jm2.client().await;
    let info = job_info(&client2, &id).await;
    assert!(matches!(info.state(), pb::JobState::Restarting | pb::JobState::Running), "{info:?}");
    // The fake task manager notices the new session through its heartbeat and registers again.
    fake.switch_jm(&jm2.url).await;
    let resumed = wait_job(&client2, &id, "for the job to be redeployed", |j| {
        j.state() == pb::JobState::Running && j.attempt > before.attempt
    })
    .await;
    assert_eq!(resumed.attempt, 3);
    assert_eq!(resumed.restarts, 1, "a job-manager restart is not a failure");
    let tasks = fake.current_tasks();
    assert!(tasks.iter().all(|d| d.restore.as_ref().map(|r| r.checkpoint_id.0) >= before.last_completed_checkpoint));
    wait_checkpoint(&client2, &id, "for a checkpoint with a new id", |c| {
        c.id >= next_id && c.status() == pb::CheckpointStatus::Completed
    })
    .await;

    // Cancel: CANCELED, tasks canceled; canceling again is fine.
    let canceled = client2.clone().cancel_job(pb::CancelJobRequest { job_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(canceled.job.unwrap().state(), pb::JobState::Canceled);
    let again = client2.clone().cancel_job(pb::CancelJobRequest { job_id: id.clone() }).await.unwrap().into_inner();
    assert_eq!(again.job.unwrap().state(), pb::JobState::Canceled);
    let state = fake.state.clone();
    wait_until("for the cancel RPC", || state.lock().cancels.iter().any(|c| c.up_to_attempt == 3)).await;
    hb.abort();
    jm2.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_task_manager_fails_the_job_over_and_it_waits_for_slots() {
    // Failpoints are process-wide: tests that share this process take turns.
    let _failpoints = fail::FailScenario::setup();
    let env = env();
    let jm = RunningJm::start(&env.data, &env.store_url).await;
    let client = jm.client().await;
    let (fake, rpc) = start_fake_tm("tm-c", &jm.url, env.store.clone()).await;
    fake.register(&rpc).await;
    // No heartbeats: the task manager is lost after heartbeat_timeout_ms (2 s).
    let id = submit(&client).await;
    wait_job(&client, &id, "for RUNNING", |j| j.state() == pb::JobState::Running).await;
    let info = wait_job(&client, &id, "for RESTARTING", |j| j.state() == pb::JobState::Restarting).await;
    assert!(info.failure.contains("tm-c"), "{}", info.failure);
    let overview = client.clone().cluster_overview(pb::ClusterOverviewRequest {}).await.unwrap().into_inner();
    assert!(overview.task_managers.is_empty());
    // It stays RESTARTING while no slots exist, and runs again once a task manager registers.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(job_info(&client, &id).await.state(), pb::JobState::Restarting);
    fake.register(&rpc).await;
    let hb = spawn_heartbeats(fake.clone(), rpc.clone());
    let info = wait_job(&client, &id, "for RUNNING again", |j| j.state() == pb::JobState::Running).await;
    assert_eq!(info.attempt, 2);
    hb.abort();
    jm.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_the_job_store_did_not_record_is_never_notified_as_complete() {
    let _failpoints = fail::FailScenario::setup();
    let env = env();
    let jm = RunningJm::start(&env.data, &env.store_url).await;
    let client = jm.client().await;
    let (fake, rpc) = start_fake_tm("tm-d", &jm.url, env.store.clone()).await;
    fake.register(&rpc).await;
    let hb = spawn_heartbeats(fake.clone(), rpc.clone());
    // The third completion cannot be recorded (the job store fails right after `_metadata` was written).
    weir_common::service::fault::arm("checkpoint-after-metadata=2*off->1*return(error:disk full)->off").unwrap();
    let id = submit(&client).await;
    let failed =
        wait_checkpoint(&client, &id, "for a failed checkpoint", |c| c.status() == pb::CheckpointStatus::Failed).await;
    assert_eq!(failed.id, 3, "{failed:?}");
    assert!(
        failed.failure_reason.contains("cannot record the checkpoint in the job store")
            && failed.failure_reason.contains("disk full"),
        "{failed:?}"
    );
    wait_checkpoint(&client, &id, "for the next checkpoint to complete", |c| {
        c.id == 4 && c.status() == pb::CheckpointStatus::Completed
    })
    .await;
    {
        let s = fake.state.lock();
        assert!(
            !s.notifications.iter().any(|n| n.checkpoint_id == 3 && completed(n)),
            "checkpoint 3 was announced complete although the job store never recorded it"
        );
        assert!(s.notifications.iter().any(|n| n.checkpoint_id == 3 && !completed(n)), "it is aborted instead");
    }
    let root = env.cp_root.clone();
    let job = id.clone();
    wait_until("for chk-3 to be deleted", || !chk_dir(&root, &job, 3).exists()).await;
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(env.data.join("jobs").join(format!("{id}.json"))).unwrap()).unwrap();
    let retained: Vec<u64> = stored["retained"].as_array().unwrap().iter().map(|r| r["id"].as_u64().unwrap()).collect();
    assert!(!retained.contains(&3), "{retained:?}");
    hb.abort();
    jm.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_states_whose_reports_were_lost_arrive_with_heartbeats() {
    // Failpoints are process-wide: tests that share this process take turns.
    let _failpoints = fail::FailScenario::setup();
    let env = env();
    let jm = RunningJm::start(&env.data, &env.store_url).await;
    let client = jm.client().await;
    let (fake, rpc) = start_fake_tm("tm-e", &jm.url, env.store.clone()).await;
    fake.register(&rpc).await;
    let hb = spawn_heartbeats(fake.clone(), rpc.clone());
    // Every END_OF_INPUT and FINISHED report is lost; only heartbeats carry them.
    fake.state.lock().lose_reports = vec![pb::TaskState::EndOfInput, pb::TaskState::Finished];
    let id = submit(&client).await;
    wait_job(&client, &id, "for RUNNING", |j| j.state() == pb::JobState::Running).await;
    fake.state.lock().end_of_input = true;
    for d in fake.current_tasks() {
        fake.report(&d, pb::TaskState::EndOfInput).await;
    }
    let done = wait_job(&client, &id, "for FINISHED", |j| j.state() == pb::JobState::Finished).await;
    assert_eq!(done.restarts, 0);
    let last = checkpoints(&client, &id).await.pop().unwrap();
    assert!(last.is_final && last.status() == pb::CheckpointStatus::Completed, "{last:?}");
    hb.abort();
    jm.stop().await;
}

/// Files below `dir`, recursively (none when it does not exist).
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                found.push(p);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_savepoint_the_job_store_did_not_record_fails_and_is_never_notified() {
    let _failpoints = fail::FailScenario::setup();
    let env = env();
    let jm = RunningJm::start(&env.data, &env.store_url).await;
    let client = jm.client().await;
    let (fake, rpc) = start_fake_tm("tm-f", &jm.url, env.store.clone()).await;
    fake.register(&rpc).await;
    let hb = spawn_heartbeats(fake.clone(), rpc.clone());
    // No periodic checkpoints: the job store is written exactly twice per savepoint (its id when it is
    // triggered, its completion), so the failpoint below hits the completion and nothing else.
    let spec = SPEC.replace("checkpointing: { interval_ms: 100, retained: 2 }", "checkpointing: { retained: 2 }");
    let spec = weir_common::job::spec::parse_spec_text(&spec).unwrap();
    let id = client
        .clone()
        .submit_job(pb::SubmitJobRequest { spec: Some(spec), ..Default::default() })
        .await
        .unwrap()
        .into_inner()
        .job_id;
    wait_job(&client, &id, "for RUNNING", |j| j.state() == pb::JobState::Running).await;
    let sp_root = env._dir.path().join("savepoints");
    let target_dir = format!("file://{}", sp_root.display());

    // Both ways of taking a savepoint: trigger, and stop with a savepoint.
    let mut last_failed = 0;
    for stop in [false, true] {
        weir_common::service::fault::arm("job-store-save=1*off->1*return(error:disk full)->off").unwrap();
        let err = if stop {
            let req = pb::StopJobRequest { job_id: id.clone(), target_dir: target_dir.clone(), ..Default::default() };
            client.clone().stop_job(req).await.unwrap_err()
        } else {
            let req = pb::TriggerSavepointRequest {
                job_id: id.clone(),
                target_dir: target_dir.clone(),
                ..Default::default()
            };
            client.clone().trigger_savepoint(req).await.unwrap_err()
        };
        assert!(
            err.message().contains("cannot record the savepoint in the job store")
                && err.message().contains("disk full"),
            "stop {stop}: the client hears why: {}",
            err.message()
        );
        let failed = wait_checkpoint(&client, &id, "for the failed savepoint in the history", |c| {
            c.is_savepoint && c.status() == pb::CheckpointStatus::Failed && c.id > last_failed
        })
        .await;
        last_failed = failed.id;
        assert!(failed.failure_reason.contains("cannot record the savepoint"), "stop {stop}: {failed:?}");
        assert!(
            !fake.state.lock().notifications.iter().any(|n| n.checkpoint_id == failed.id && completed(n)),
            "stop {stop}: savepoint {} was announced complete although the job store never recorded it",
            failed.id
        );
        let root = sp_root.clone();
        wait_until("for the failed savepoint's files to be deleted", || files_below(&root).is_empty()).await;
        let info = job_info(&client, &id).await;
        assert_eq!(info.state(), pb::JobState::Running, "stop {stop}: the job keeps running: {info:?}");
        weir_common::service::fault::disarm("job-store-save");
    }

    // Recorded, a savepoint completes as before, and the stop then ends the job.
    let req = pb::StopJobRequest { job_id: id.clone(), target_dir: target_dir.clone(), ..Default::default() };
    let done = client.clone().stop_job(req).await.unwrap().into_inner();
    assert!(done.savepoint.starts_with(&target_dir), "{done:?}");
    let sp_id = done.checkpoint_id;
    let state = fake.state.clone();
    wait_until("for the completed stop to be notified", || {
        state
            .lock()
            .notifications
            .iter()
            .any(|n| n.checkpoint_id == sp_id && n.outcome == pb::CheckpointOutcome::Stop as i32)
    })
    .await;
    wait_job(&client, &id, "for FINISHED", |j| j.state() == pb::JobState::Finished).await;
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(env.data.join("jobs").join(format!("{id}.json"))).unwrap()).unwrap();
    assert_eq!(stored["checkpoints_completed"], 1, "only the recorded savepoint counts: {stored}");
    hb.abort();
    jm.stop().await;
}

/// Whether a notification says its checkpoint completed.
fn completed(n: &pb::NotifyCheckpointRequest) -> bool {
    n.outcome != pb::CheckpointOutcome::Aborted as i32
}
