//! The task manager as a service: the `TaskManagerApi` gRPC server (deploy, trigger, notify, cancel), the
//! registration and heartbeat loop with the job manager, and shutdown.

use crate::api::registry::Registry;
use crate::net::DataServer;
use crate::report::Reporter;
use crate::task::{self, TaskEnv, TaskEvent, TaskHandle};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tonic::{Request, Response, Status};
use weir_common::checkpoint::{CheckpointOutcome, SavepointTarget};
use weir_common::deploy::descriptor::{RestoreDescriptor, TaskDescriptor};
use weir_common::ids::CheckpointId;
use weir_common::service::cluster::JmLink;
use weir_common::service::store::StoreOptions;
use weir_proto as pb;
use weir_proto::job_manager_internal_client::JobManagerInternalClient;

/// The job manager this task manager registered with: its session and epoch.
#[derive(Clone, Debug, Default)]
struct Session {
    id: String,
    epoch: u64,
}

type TaskKey = (String, u32, u32);

/// A task manager: its tasks, its registration with the job manager and its environment.
pub struct TaskManager {
    id: String,
    env: Arc<TaskEnv>,
    tasks: Mutex<HashMap<TaskKey, TaskHandle>>,
    /// Tasks being canceled whose threads may not have ended yet (key, attempt, done).
    stopping: Mutex<Vec<(TaskKey, u32, tokio::sync::watch::Receiver<bool>)>>,
    session: Mutex<Option<Session>>,
    /// The newest leader epoch seen: messages of an older one come from a deposed leader.
    newest_epoch: std::sync::atomic::AtomicU64,
    /// Woken when a message shows a newer leader than the one registered with: register again.
    newer_leader: tokio::sync::Notify,
    slots: u32,
    rpc_address: String,
    data_address: String,
}

/// Settings for [`TaskManager::new`].
pub struct TaskManagerSettings {
    /// Task manager id.
    pub id: String,
    /// Number of slots.
    pub slots: u32,
    /// Advertised gRPC address (`http://host:port`).
    pub rpc_address: String,
    /// Advertised data-plane address (`host:port`).
    pub data_address: String,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Object-store settings for checkpoints.
    pub store_options: StoreOptions,
    /// Tuning of RocksDB keyed backends.
    pub rocks: weir_state::rocks::RocksOptions,
}

impl TaskManager {
    /// Builds a task manager; call from inside a tokio runtime.
    pub fn new(
        settings: TaskManagerSettings,
        registry: Registry,
        data_server: Arc<DataServer>,
        jm: JmLink,
    ) -> Arc<TaskManager> {
        let reporter = Reporter::start(jm, settings.id.clone());
        let env = Arc::new(TaskEnv {
            runtime: tokio::runtime::Handle::current(),
            data_server,
            registry: Arc::new(registry),
            data_dir: settings.data_dir,
            reporter,
            store_options: settings.store_options,
            connect_timeout: Duration::from_secs(60),
            rocks: settings.rocks,
        });
        Arc::new(TaskManager {
            id: settings.id,
            env,
            tasks: Mutex::new(HashMap::new()),
            stopping: Mutex::new(Vec::new()),
            session: Mutex::new(None),
            newest_epoch: Default::default(),
            newer_leader: tokio::sync::Notify::new(),
            slots: settings.slots,
            rpc_address: settings.rpc_address,
            data_address: settings.data_address,
        })
    }

    /// The registry as the job manager sees it.
    fn kinds(&self) -> Vec<pb::OperatorKindInfo> {
        self.env.registry.kinds().map(pb::OperatorKindInfo::from).collect()
    }

    /// The event queues of every task of one attempt of a job.
    fn event_senders(&self, job_id: &str, attempt: u32) -> Vec<tokio::sync::mpsc::Sender<TaskEvent>> {
        let tasks = self.tasks.lock();
        tasks.iter().filter(|(k, h)| k.0 == job_id && h.attempt == attempt).map(|(_, h)| h.events.clone()).collect()
    }

    /// Cancels every task matching `pred` and waits (bounded) for their threads to end.
    pub async fn cancel_where(&self, pred: impl Fn(&TaskKey, &TaskHandle) -> bool) -> u32 {
        let victims: Vec<(TaskKey, TaskHandle)> = {
            let mut tasks = self.tasks.lock();
            let keys: Vec<TaskKey> = tasks.iter().filter(|(k, h)| pred(k, h)).map(|(k, _)| k.clone()).collect();
            keys.into_iter().filter_map(|k| tasks.remove(&k).map(|h| (k, h))).collect()
        };
        let n = victims.len() as u32;
        {
            // Visible to a deployment of the same subtask that runs meanwhile (see `wait_until_stopped`).
            let mut stopping = self.stopping.lock();
            stopping.retain(|(_, _, done)| !*done.borrow());
            stopping.extend(victims.iter().map(|(k, h)| (k.clone(), h.attempt, h.done.clone())));
        }
        for (_, h) in &victims {
            let _ = h.cancel.send(true);
            let _ = h.events.try_send(TaskEvent::Cancel);
        }
        for (key, mut h) in victims {
            // A full event queue may have refused the cancel: keep trying until the thread ends.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
            while !*h.done.borrow() && tokio::time::Instant::now() < deadline {
                let _ = h.events.try_send(TaskEvent::Cancel);
                let _ = tokio::time::timeout(Duration::from_millis(200), h.done.changed()).await;
            }
            if !*h.done.borrow() {
                tracing::warn!(job_id = %key.0, vertex = key.1, subtask = key.2, "task did not stop within 15 s");
            }
        }
        n
    }

    /// Waits (bounded) until no task of `key` older than `attempt` is still stopping: a cancel running at the
    /// same time (a `CancelJob`, say) took it out of the task table, but its thread may still hold files that
    /// the new attempt must not race with (a sink's cleanup of its hidden files, RocksDB directories).
    async fn wait_until_stopped(&self, key: &TaskKey, attempt: u32) {
        let older: Vec<tokio::sync::watch::Receiver<bool>> = self
            .stopping
            .lock()
            .iter()
            .filter(|(k, a, done)| k == key && *a < attempt && !*done.borrow())
            .map(|(_, _, done)| done.clone())
            .collect();
        for mut done in older {
            if tokio::time::timeout(Duration::from_secs(15), done.wait_for(|d| *d)).await.is_err() {
                tracing::warn!(job_id = %key.0, vertex = key.1, subtask = key.2, "an older attempt did not stop within 15 s");
            }
        }
    }

    /// Whether it has registered with a job manager (its readiness; it stays ready while it re-registers).
    pub fn is_registered(&self) -> bool {
        self.session.lock().is_some()
    }

    /// Registers with the (leading) job manager and heartbeats until `shutdown` fires; re-registers (cancelling
    /// all tasks) whenever the job manager asks, restarted, or another leader took over.
    pub async fn run_registration(self: Arc<Self>, jm: JmLink, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        use std::sync::atomic::Ordering;
        let mut interval = Duration::from_millis(1000);
        loop {
            // Register, retrying (and following the leader) until it works.
            let req = pb::RegisterTaskManagerRequest {
                tm_id: self.id.clone(),
                rpc_address: self.rpc_address.clone(),
                data_address: self.data_address.clone(),
                slots: self.slots,
                operator_kinds: self.kinds(),
            };
            // A refusal is said at warning level when it first happens, when its reason changes, and then every
            // half minute: a task manager the job manager will not admit must not retry in silence.
            let mut refused: Option<(String, std::time::Instant)> = None;
            let resp = loop {
                if *shutdown.borrow() {
                    return;
                }
                let result = match jm.channel() {
                    Ok(c) => JobManagerInternalClient::new(c).register_task_manager(req.clone()).await,
                    Err(e) => Err(Status::invalid_argument(e.to_string())),
                };
                match result {
                    Ok(r) if r.get_ref().jm_epoch < self.newest_epoch.load(Ordering::SeqCst) => {
                        tracing::debug!(
                            epoch = r.get_ref().jm_epoch,
                            "a deposed job manager took the registration; retrying"
                        );
                    }
                    Ok(r) => break r.into_inner(),
                    Err(e) => {
                        let mut reason = weir_common::service::security::status_chain(&e);
                        let moved = jm.observe(&e);
                        if moved {
                            tracing::debug!(jobmanager = %jm.current(), error = %reason, "registration failed, retrying");
                            continue;
                        }
                        let say = match &refused {
                            Some((r, at)) => *r != reason || at.elapsed() >= Duration::from_secs(30),
                            None => true,
                        };
                        if say {
                            refused = Some((reason.clone(), std::time::Instant::now()));
                            // A broken connection says little; with TLS, one handshake of our own says why.
                            if let (
                                Some(tls),
                                tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled,
                            ) = (&jm.security().tls, e.code())
                            {
                                if let Some(why) =
                                    weir_common::service::security::diagnose_tls(&jm.current(), tls).await
                                {
                                    reason = format!("{reason} (TLS: {why})");
                                }
                            }
                            tracing::warn!(jobmanager = %jm.current(), error = %reason,
                                "the job manager did not accept this task manager's registration; retrying");
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                    _ = shutdown.changed() => {}
                }
            };
            let canceled = self.cancel_where(|_, _| true).await;
            self.newest_epoch.fetch_max(resp.jm_epoch, Ordering::SeqCst);
            *self.session.lock() = Some(Session { id: resp.jm_session.clone(), epoch: resp.jm_epoch });
            if resp.heartbeat_interval_ms > 0 {
                interval = Duration::from_millis(resp.heartbeat_interval_ms);
            }
            tracing::info!(tm_id = %self.id, jobmanager = %jm.current(), epoch = resp.jm_epoch, canceled_tasks = canceled, "registered with job manager");
            // Heartbeat until asked to register again, or until another job manager leads.
            let mut failures = 0u32;
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = self.newer_leader.notified() => {
                        tracing::info!("a newer leader sent a message; registering with the leader");
                        break;
                    }
                    _ = shutdown.changed() => { if *shutdown.borrow() { return; } }
                }
                let hb = pb::HeartbeatRequest {
                    tm_id: self.id.clone(),
                    jm_session: resp.jm_session.clone(),
                    tasks: self.env.reporter.task_statuses(),
                };
                let Ok(channel) = jm.channel() else { break };
                let mut client = JobManagerInternalClient::new(channel);
                let answer = tokio::time::timeout(interval * 3, client.heartbeat(hb))
                    .await
                    .unwrap_or_else(|_| Err(Status::deadline_exceeded("heartbeat timed out")));
                match answer {
                    Ok(r) if r.get_ref().reregister => {
                        tracing::info!("job manager asked to register again");
                        break;
                    }
                    Ok(_) => failures = 0,
                    Err(e) => {
                        tracing::debug!(error = %e.message(), "heartbeat failed");
                        failures += 1;
                        // A standby's answer, or a leader silent for long: go where the link points now. A lone
                        // job manager that restarts keeps its address, and this keeps heartbeating it.
                        if (weir_common::service::cluster::is_not_leader(&e) || failures >= 3) && jm.observe(&e) {
                            break;
                        }
                    }
                }
            }
        }
    }

    /// Admits a message of the job manager registered with; refuses one of a deposed leader (older epoch) or
    /// of another job manager, and registers again when the message shows a newer leader.
    fn check_session(&self, session: &str, epoch: u64) -> Result<(), Status> {
        use std::sync::atomic::Ordering;
        let newest = self.newest_epoch.load(Ordering::SeqCst);
        if epoch < newest {
            tracing::warn!(epoch, newest, "refusing a message of a deposed job manager");
            return Err(Status::failed_precondition(format!(
                "deposed job manager: its epoch {epoch} is older than the leader's {newest}"
            )));
        }
        match self.session.lock().as_ref() {
            Some(s) if s.id == session && s.epoch == epoch => Ok(()),
            Some(s) if epoch > s.epoch => {
                self.newest_epoch.fetch_max(epoch, Ordering::SeqCst);
                self.newer_leader.notify_one();
                Err(Status::failed_precondition("a newer leader: this task manager registers with it first"))
            }
            _ => Err(Status::failed_precondition(
                "stale job manager session: this task manager registered with another one",
            )),
        }
    }

    fn task_key(r: &pb::TaskRef) -> TaskKey {
        (r.job_id.clone(), r.vertex, r.subtask)
    }
}

/// Failpoint `name` as the error a lost request would be.
async fn fault(name: &str) -> Result<(), Status> {
    weir_common::service::fault::hit(name).await.map_err(|f| Status::unavailable(f.to_string()))
}

/// The gRPC face of a [`TaskManager`].
#[derive(Clone)]
pub struct TaskManagerService(pub Arc<TaskManager>);

#[tonic::async_trait]
impl pb::task_manager_api_server::TaskManagerApi for TaskManagerService {
    async fn deploy_task(
        &self,
        req: Request<pb::DeployTaskRequest>,
    ) -> Result<Response<pb::DeployTaskResponse>, Status> {
        fault("rpc-deploy").await?;
        let req = req.into_inner();
        let tm = &self.0;
        tm.check_session(&req.jm_session, req.jm_epoch)?;
        let mut desc = req
            .descriptor
            .ok_or_else(|| Status::invalid_argument("bad task descriptor: it is missing"))
            .and_then(|d| {
                TaskDescriptor::try_from(d).map_err(|e| Status::invalid_argument(format!("bad task descriptor: {e}")))
            })?;
        desc.restore = req
            .restore
            .map(RestoreDescriptor::try_from)
            .transpose()
            .map_err(|e| Status::invalid_argument(format!("bad restore descriptor: {e}")))?;
        let key = (desc.job_id.0.clone(), desc.vertex.0, desc.subtask.0);
        let attempt = desc.attempt.0;
        // An older attempt of the same subtask must be gone before the new one starts (it may hold files).
        tm.cancel_where(|k, h| *k == key && h.attempt < attempt).await;
        tm.wait_until_stopped(&key, attempt).await;
        {
            let mut tasks = tm.tasks.lock();
            tasks.retain(|_, h| !*h.done.borrow());
            if tasks.get(&key).is_some_and(|h| h.attempt >= attempt) {
                return Err(Status::already_exists("this subtask is already deployed for this or a newer attempt"));
            }
            tracing::info!(job_id = %desc.job_id, attempt, vertex = desc.vertex.0, subtask = desc.subtask.0, "deploying task");
            let handle = task::spawn(desc, tm.env.clone()).map_err(|e| Status::internal(e.to_string()))?;
            tasks.insert(key, handle);
        }
        Ok(Response::new(pb::DeployTaskResponse {}))
    }

    async fn trigger_checkpoint(
        &self,
        req: Request<pb::TriggerCheckpointRequest>,
    ) -> Result<Response<pb::TriggerCheckpointResponse>, Status> {
        fault("rpc-trigger").await?;
        let req = req.into_inner();
        self.0.check_session(&req.jm_session, req.jm_epoch)?;
        let r = req.task.ok_or_else(|| Status::invalid_argument("missing task"))?;
        let sender = {
            let tasks = self.0.tasks.lock();
            tasks.get(&TaskManager::task_key(&r)).filter(|h| h.attempt == r.attempt).map(|h| h.events.clone())
        };
        let savepoint = req
            .savepoint
            .map(SavepointTarget::try_from)
            .transpose()
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        match sender {
            Some(tx) => {
                let _ = tx
                    .send(TaskEvent::Trigger {
                        id: CheckpointId(req.checkpoint_id),
                        timestamp_ms: req.timestamp_ms,
                        savepoint,
                    })
                    .await;
                Ok(Response::new(pb::TriggerCheckpointResponse {}))
            }
            None => Err(Status::not_found("no such task for this attempt")),
        }
    }

    async fn notify_checkpoint(
        &self,
        req: Request<pb::NotifyCheckpointRequest>,
    ) -> Result<Response<pb::NotifyCheckpointResponse>, Status> {
        fault("rpc-notify").await?;
        let req = req.into_inner();
        self.0.check_session(&req.jm_session, req.jm_epoch)?;
        let outcome = match CheckpointOutcome::try_from(req.outcome) {
            Ok(CheckpointOutcome::Unspecified) | Err(_) => {
                return Err(Status::invalid_argument(format!("unknown checkpoint outcome {}", req.outcome)))
            }
            Ok(o) => o,
        };
        let senders = self.0.event_senders(&req.job_id, req.attempt);
        for tx in senders {
            let _ = tx.send(TaskEvent::Notify { id: CheckpointId(req.checkpoint_id), outcome }).await;
        }
        Ok(Response::new(pb::NotifyCheckpointResponse {}))
    }

    async fn cancel_job(
        &self,
        req: Request<pb::CancelTasksRequest>,
    ) -> Result<Response<pb::CancelTasksResponse>, Status> {
        fault("rpc-cancel").await?;
        let req = req.into_inner();
        self.0.check_session(&req.jm_session, req.jm_epoch)?;
        let n = self.0.cancel_where(|k, h| k.0 == req.job_id && h.attempt <= req.up_to_attempt).await;
        Ok(Response::new(pb::CancelTasksResponse { canceled: n }))
    }

    async fn end_input(&self, req: Request<pb::EndInputRequest>) -> Result<Response<pb::EndInputResponse>, Status> {
        fault("rpc-end-input").await?;
        let req = req.into_inner();
        self.0.check_session(&req.jm_session, req.jm_epoch)?;
        let senders = self.0.event_senders(&req.job_id, req.attempt);
        // Every task of the attempt is told; only sources act on it.
        let mut tasks = 0;
        for tx in senders {
            if tx.send(TaskEvent::EndInput).await.is_ok() {
                tasks += 1;
            }
        }
        Ok(Response::new(pb::EndInputResponse { tasks }))
    }

    async fn check_spec(&self, req: Request<pb::CheckSpecRequest>) -> Result<Response<pb::CheckSpecResponse>, Status> {
        let spec = req.into_inner().spec.ok_or_else(|| Status::invalid_argument("missing job spec"))?;
        let env = self.0.env.clone();
        // Off the runtime's workers: a large spec takes a while, and heartbeats must go on.
        let error =
            tokio::task::spawn_blocking(move || match weir_common::job::spec::resolve(&spec, env.registry.as_ref()) {
                Ok(_) => String::new(),
                Err(e) => e.to_string(),
            })
            .await
            .map_err(|e| Status::internal(format!("checking the spec failed: {e}")))?;
        Ok(Response::new(pb::CheckSpecResponse { error }))
    }

    async fn resolve_serializers(
        &self,
        req: Request<pb::ResolveSerializersRequest>,
    ) -> Result<Response<pb::ResolveSerializersResponse>, Status> {
        let pairs = req.into_inner().pairs;
        // Off the runtime's workers: parsing schemas and descriptors takes a while, and heartbeats must go on.
        let answer = tokio::task::spawn_blocking(move || resolve_serializers(pairs))
            .await
            .map_err(|e| Status::internal(format!("resolving serializers failed: {e}")))?;
        Ok(Response::new(answer))
    }
}

/// The most serializer pairs one request may judge: a savepoint check asks for a few per state.
pub const MAX_SERIALIZER_PAIRS: usize = 100_000;

/// Judges each pair by the formats' own rules, with both schemas as a person reads them.
fn resolve_serializers(pairs: Vec<pb::SerializerPair>) -> pb::ResolveSerializersResponse {
    use weir_common::state::serializer::{SerializerJudge, SerializerSnapshot};
    if pairs.len() > MAX_SERIALIZER_PAIRS {
        let error = format!("{} serializer pairs to resolve; at most {MAX_SERIALIZER_PAIRS} are", pairs.len());
        return pb::ResolveSerializersResponse { results: vec![], error };
    }
    let rules = weir_state::typed::evolution::FormatRules;
    let results = pairs
        .into_iter()
        .map(|p| {
            let written: SerializerSnapshot = p.written.unwrap_or_default().into();
            let reading: SerializerSnapshot = p.reading.unwrap_or_default().into();
            let resolution = rules.resolve(&written, &reading);
            let reason = match &resolution {
                weir_common::state::serializer::Resolution::Incompatible(why) => why.clone(),
                _ => String::new(),
            };
            pb::ResolvedSerializers {
                resolution: pb::SerializerResolution::from(&resolution) as i32,
                reason,
                written_text: rules.schema_text(&written),
                reading_text: rules.schema_text(&reading),
            }
        })
        .collect();
    pb::ResolveSerializersResponse { results, error: String::new() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::task_manager_api_server::TaskManagerApi;

    #[test]
    fn serializers_are_judged_by_the_formats_rules_and_a_flood_is_refused() {
        use weir_common::state::serializer::SerializerSnapshot;
        let avro = |fields: &str| pb::SerializerSnapshot {
            format: weir_common::state::serializer::FORMAT_AVRO.into(),
            version: 1,
            root: "P".into(),
            schema: format!(r#"{{"type":"record","name":"P","fields":[{fields}]}}"#),
        };
        let v1 = avro(r#"{"name":"n","type":"long"}"#);
        let v2 = avro(r#"{"name":"n","type":"long"},{"name":"w","type":"long","default":1}"#);
        let v3 = avro(r#"{"name":"n","type":"string"}"#);
        let plain = |s: &str| pb::SerializerSnapshot::from(&SerializerSnapshot::signature(s));
        let pair = |w: &pb::SerializerSnapshot, r: &pb::SerializerSnapshot| pb::SerializerPair {
            written: Some(w.clone()),
            reading: Some(r.clone()),
        };
        let answer = resolve_serializers(vec![
            pair(&v1, &v1),
            pair(&v1, &v2),
            pair(&v1, &v3),
            pair(&plain("u8"), &plain("u64")),
        ]);
        assert!(answer.error.is_empty(), "{answer:?}");
        let got: Vec<pb::SerializerResolution> = answer.results.iter().map(|r| r.resolution()).collect();
        use pb::SerializerResolution::*;
        assert_eq!(got, vec![AsIs, AfterMigration, Incompatible, Incompatible]);
        assert!(answer.results[2].reason.contains("Avro schema resolution"), "{:?}", answer.results[2]);
        assert!(answer.results[1].reading_text.contains("\"w\""), "{:?}", answer.results[1]);

        let flood = resolve_serializers(vec![pb::SerializerPair::default(); MAX_SERIALIZER_PAIRS + 1]);
        assert!(flood.results.is_empty() && flood.error.contains("at most"), "{:?}", flood.error);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_job_manager_message_is_fenced_by_the_session() {
        let tmp = tempfile::tempdir().unwrap();
        let jm = JmLink::new(vec!["http://127.0.0.1:9".into()], Default::default(), Duration::from_secs(1)).unwrap();
        let settings = TaskManagerSettings {
            id: "tm".into(),
            slots: 1,
            rpc_address: "http://127.0.0.1:1".into(),
            data_address: "127.0.0.1:1".into(),
            data_dir: tmp.path().to_path_buf(),
            store_options: StoreOptions::default(),
            rocks: Default::default(),
        };
        let tm = TaskManager::new(settings, crate::builtins::registry(), Arc::new(DataServer::default()), jm);
        *tm.session.lock() = Some(Session { id: "current".into(), epoch: 5 });
        tm.newest_epoch.store(5, std::sync::atomic::Ordering::SeqCst);
        let svc = TaskManagerService(tm);
        let task = pb::TaskRef { job_id: "j".into(), attempt: 1, vertex: 0, subtask: 0 };
        for session in ["stale", ""] {
            let trigger = pb::TriggerCheckpointRequest {
                task: Some(task.clone()),
                checkpoint_id: 1,
                timestamp_ms: 0,
                jm_session: session.into(),
                savepoint: None,
                jm_epoch: 5,
            };
            let e = svc.trigger_checkpoint(Request::new(trigger)).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::FailedPrecondition, "trigger from session {session:?}: {e}");
            let notify = pb::NotifyCheckpointRequest {
                job_id: "j".into(),
                attempt: 1,
                checkpoint_id: 1,
                outcome: CheckpointOutcome::Completed as i32,
                jm_session: session.into(),
                jm_epoch: 5,
            };
            let e = svc.notify_checkpoint(Request::new(notify)).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::FailedPrecondition, "notify from session {session:?}: {e}");
            let cancel = pb::CancelTasksRequest {
                job_id: "j".into(),
                up_to_attempt: 1,
                jm_session: session.into(),
                jm_epoch: 5,
            };
            let e = svc.cancel_job(Request::new(cancel)).await.unwrap_err();
            assert_eq!(e.code(), tonic::Code::FailedPrecondition, "cancel from session {session:?}: {e}");
        }
        // A deposed leader (an older epoch) is refused whatever its session.
        let cancel =
            pb::CancelTasksRequest { job_id: "j".into(), up_to_attempt: 1, jm_session: "current".into(), jm_epoch: 4 };
        let e = svc.cancel_job(Request::new(cancel)).await.unwrap_err();
        assert!(e.message().contains("deposed job manager"), "{e}");
        // A newer leader is not obeyed before this task manager registered with it, but it is noticed.
        let cancel =
            pb::CancelTasksRequest { job_id: "j".into(), up_to_attempt: 1, jm_session: "newer".into(), jm_epoch: 6 };
        let e = svc.cancel_job(Request::new(cancel)).await.unwrap_err();
        assert!(e.message().contains("newer leader"), "{e}");
        assert_eq!(svc.0.newest_epoch.load(std::sync::atomic::Ordering::SeqCst), 6);
        tokio::time::timeout(Duration::from_secs(1), svc.0.newer_leader.notified())
            .await
            .expect("re-registration asked");
        // From now on the old leader's epoch 5 is deposed too.
        let cancel =
            pb::CancelTasksRequest { job_id: "j".into(), up_to_attempt: 1, jm_session: "current".into(), jm_epoch: 5 };
        assert!(svc.cancel_job(Request::new(cancel)).await.unwrap_err().message().contains("deposed"));
        *svc.0.session.lock() = Some(Session { id: "newer".into(), epoch: 6 });
        // The current job manager is obeyed (there is no such task to trigger, which it is told).
        let cancel =
            pb::CancelTasksRequest { job_id: "j".into(), up_to_attempt: 1, jm_session: "newer".into(), jm_epoch: 6 };
        assert_eq!(svc.cancel_job(Request::new(cancel)).await.unwrap().into_inner().canceled, 0);
        let trigger = pb::TriggerCheckpointRequest {
            task: Some(task),
            checkpoint_id: 1,
            timestamp_ms: 0,
            jm_session: "newer".into(),
            savepoint: None,
            jm_epoch: 6,
        };
        assert_eq!(svc.trigger_checkpoint(Request::new(trigger)).await.unwrap_err().code(), tonic::Code::NotFound);
    }
}
