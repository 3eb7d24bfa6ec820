//! A real Weir cluster on this machine: one job manager and N task managers as child processes, in a
//! directory of their own, with helpers that read like the scenarios they serve — kill a task manager, start
//! another, restart the job manager on the same address, wait for a job to finish.

use crate::process::{log_tail, run_with_timeout, CommandOutput, Process};
use crate::s3::S3Endpoint;
use anyhow::{anyhow, bail, Context, Result};
use rand::Rng;
use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use weir_proto::client_api_client::ClientApiClient;
use weir_proto::{
    CancelJobRequest, CheckpointInfo, ClusterOverviewRequest, ClusterOverviewResponse, GetJobRequest, JobInfo,
    ListCheckpointsRequest, ListJobsRequest, SubmitJobRequest,
};

/// How long one gRPC call may take before it counts as failed.
const RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a process may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a `weir` command may run.
const CLI_TIMEOUT: Duration = Duration::from_secs(60);
/// How often waits poll.
const POLL: Duration = Duration::from_millis(100);

// ------------------------------------------------------------------------------------------- binaries

/// The directory holding `weir-jobmanager`, `weir-taskmanager` and `weir`: `$WEIR_BIN_DIR`, else the
/// directory of the running executable or its parent (test executables live in `target/release/deps/`).
pub fn bin_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("WEIR_BIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().context("cannot find the running executable")?;
    let here = exe.parent().ok_or_else(|| anyhow!("executable {} has no directory", exe.display()))?;
    let candidates = [Some(here), here.parent()];
    for dir in candidates.into_iter().flatten() {
        if dir.join("weir-jobmanager").is_file() {
            return Ok(dir.to_path_buf());
        }
    }
    Ok(here.parent().unwrap_or(here).to_path_buf())
}

/// The path of one Weir binary, or an error that says how to build it.
pub fn binary(name: &str) -> Result<PathBuf> {
    let dir = bin_dir()?;
    let path = dir.join(name);
    if !path.is_file() {
        bail!(
            "{name} not found in {} (build it first: cargo build --release --workspace --bins; \
             or point WEIR_BIN_DIR at the directory holding it)",
            dir.display()
        );
    }
    Ok(path)
}

// ------------------------------------------------------------------------------------------- job states

/// The states of a job: the protocol's enum (shown by name, `RUNNING`, as the CLI prints it).
pub use weir_proto::JobState;

/// The state of a job as reported (`None` for a value this version of the protocol does not know).
pub fn job_state(job: &JobInfo) -> Option<JobState> {
    JobState::try_from(job.state).ok().filter(|s| *s != JobState::Unspecified)
}

/// One line about a job, for progress output and error messages.
pub fn describe_job(job: &JobInfo) -> String {
    let mut s = format!(
        "{} {} attempt {} restarts {} checkpoints completed {} failed {} last completed {}",
        job.id,
        job.state(),
        job.attempt,
        job.restarts,
        job.checkpoints_completed,
        job.checkpoints_failed,
        job.last_completed_checkpoint.map(|c| c.to_string()).unwrap_or_else(|| "-".into())
    );
    if !job.failure.is_empty() {
        s.push_str(&format!(" failure: {}", job.failure));
    }
    s
}

/// An error that ends a wait at once instead of being retried until the timeout (e.g. a job that failed
/// while a test waits for it to finish).
#[derive(Debug)]
pub struct Fatal(pub String);

impl fmt::Display for Fatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Fatal {}

/// Polls `check` until it returns `Ok(Some(_))`. An `Err` is remembered and polling goes on (the cluster
/// may be restarting), unless it is a [`Fatal`]. After `timeout` the error names `what` and the last error.
pub fn wait_until<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let start = Instant::now();
    let mut last_err: Option<anyhow::Error>;
    loop {
        match check() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => last_err = None,
            Err(e) if e.downcast_ref::<Fatal>().is_some() => return Err(e.context(format!("while waiting {what}"))),
            Err(e) => last_err = Some(e),
        }
        if start.elapsed() >= timeout {
            return Err(match last_err {
                Some(e) => e.context(format!("timed out after {timeout:?} waiting {what}")),
                None => anyhow!("timed out after {timeout:?} waiting {what}"),
            });
        }
        std::thread::sleep(POLL);
    }
}

// ------------------------------------------------------------------------------------------- options

/// Where the cluster keeps checkpoints.
#[derive(Clone, Debug, Default)]
pub enum CheckpointStore {
    /// `file://<cluster dir>/checkpoints`.
    #[default]
    Local,
    /// An S3-compatible server (moto, possibly behind a proxy).
    S3(S3Endpoint),
}

/// The task-manager binary unless [`ClusterOptions::taskmanager_binary`] names another.
pub const DEFAULT_TASKMANAGER_BINARY: &str = "weir-taskmanager";

/// What cluster to start.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Task managers started with the cluster.
    pub taskmanagers: usize,
    /// Slots per task manager.
    pub slots: u32,
    /// Checkpoint store.
    pub store: CheckpointStore,
    /// Heartbeat interval the job manager tells task managers to use.
    pub heartbeat_interval_ms: u64,
    /// A task manager silent for this long is lost.
    pub heartbeat_timeout_ms: u64,
    /// Keep the cluster's directory here instead of a fresh temporary one (kept after the run).
    pub dir: Option<PathBuf>,
    /// Extra environment for every process.
    pub env: Vec<(String, String)>,
    /// The task-manager binary (found like every Weir binary): `weir-taskmanager`, or a user's own build
    /// with extra operator kinds registered, such as `weir-example-taskmanager`.
    pub taskmanager_binary: String,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            taskmanagers: 2,
            slots: 2,
            store: CheckpointStore::Local,
            heartbeat_interval_ms: 300,
            heartbeat_timeout_ms: 3000,
            dir: None,
            env: Vec::new(),
            taskmanager_binary: DEFAULT_TASKMANAGER_BINARY.to_string(),
        }
    }
}

impl ClusterOptions {
    /// `n` task managers with `slots` slots each, checkpoints on local disk.
    pub fn new(taskmanagers: usize, slots: u32) -> Self {
        ClusterOptions { taskmanagers, slots, ..Default::default() }
    }

    /// Checkpoints in S3.
    pub fn with_s3(mut self, endpoint: S3Endpoint) -> Self {
        self.store = CheckpointStore::S3(endpoint);
        self
    }

    /// Keep the cluster's files in `dir`.
    pub fn in_dir(mut self, dir: &Path) -> Self {
        self.dir = Some(dir.to_path_buf());
        self
    }

    /// Run task managers from the binary `name` instead of `weir-taskmanager`.
    pub fn with_taskmanager_binary(mut self, name: &str) -> Self {
        self.taskmanager_binary = name.to_string();
        self
    }
}

// ------------------------------------------------------------------------------------------- cluster

enum ClusterDir {
    Temp(tempfile::TempDir),
    Kept(PathBuf),
}

impl ClusterDir {
    fn path(&self) -> &Path {
        match self {
            ClusterDir::Temp(t) => t.path(),
            ClusterDir::Kept(p) => p,
        }
    }
}

/// A task manager started by the harness, dead or alive.
struct TaskManager {
    id: String,
    process: Process,
}

/// A job manager and its task managers, running. Everything is killed when dropped; when dropped without
/// [`Cluster::stop`] (a failing test) the tail of every log is printed and the directory is kept.
pub struct Cluster {
    options: ClusterOptions,
    dir: Option<ClusterDir>,
    rt: tokio::runtime::Runtime,
    jobmanager: Option<Process>,
    address: String,
    taskmanagers: Vec<TaskManager>,
    client: Option<ClientApiClient<Channel>>,
    startup: Duration,
    stopped: bool,
    /// Extra environment of the job manager from its next start on (e.g. `WEIR_FAILPOINTS`).
    jobmanager_env: Vec<(String, String)>,
    // Dropped after the processes are killed (fields drop after `Drop::drop`): one cluster at a time.
    _lock: crate::lock::ClusterLock,
}

impl Cluster {
    /// Starts a job manager on a free port and the task managers, and waits until all are registered.
    pub fn start(options: ClusterOptions) -> Result<Cluster> {
        binary("weir-jobmanager")?;
        binary(&options.taskmanager_binary)?;
        let lock = crate::lock::ClusterLock::acquire(&crate::lock::lock_path(&bin_dir()?), crate::lock::LOCK_TIMEOUT)?;
        let began = Instant::now();
        let dir = match &options.dir {
            Some(d) => {
                std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
                ClusterDir::Kept(d.canonicalize()?)
            }
            None => ClusterDir::Temp(tempfile::Builder::new().prefix("weir-cluster-").tempdir()?),
        };
        std::fs::create_dir_all(dir.path().join("logs"))?;
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        let mut cluster = Cluster {
            options,
            dir: Some(dir),
            rt,
            jobmanager: None,
            address: String::new(),
            taskmanagers: Vec::new(),
            client: None,
            startup: Duration::ZERO,
            stopped: false,
            jobmanager_env: Vec::new(),
            _lock: lock,
        };
        cluster.spawn_jobmanager("127.0.0.1:0")?;
        let mut ids = Vec::new();
        for _ in 0..cluster.options.taskmanagers {
            let i = cluster.spawn_taskmanager(&[])?;
            ids.push(cluster.taskmanagers[i].id.clone());
        }
        cluster.wait_until_registered(&ids)?;
        cluster.startup = began.elapsed();
        Ok(cluster)
    }

    /// The cluster's directory (data, checkpoints, logs).
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("dir lives as long as the cluster").path()
    }

    /// A fresh directory for a job's output, inside the cluster's directory.
    pub fn output_dir(&self, name: &str) -> Result<PathBuf> {
        let d = self.dir().join("output").join(name);
        std::fs::create_dir_all(&d)?;
        Ok(d)
    }

    /// The directory of the local checkpoint store (`None` with S3).
    pub fn checkpoint_dir(&self) -> Option<PathBuf> {
        match self.options.store {
            CheckpointStore::Local => Some(self.dir().join("checkpoints")),
            CheckpointStore::S3(_) => None,
        }
    }

    /// The job manager's address, `http://127.0.0.1:PORT`.
    pub fn jobmanager_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Time from spawning the job manager until every task manager was registered.
    pub fn startup_time(&self) -> Duration {
        self.startup
    }

    fn checkpoint_store_url(&self) -> String {
        match &self.options.store {
            CheckpointStore::Local => format!("file://{}", self.dir().join("checkpoints").display()),
            CheckpointStore::S3(s3) => s3.url(),
        }
    }

    fn env(&self) -> Vec<(String, String)> {
        let mut env = self.options.env.clone();
        if let CheckpointStore::S3(s3) = &self.options.store {
            env.extend(s3.env());
        }
        env
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.dir().join("logs").join(format!("{name}.log"))
    }

    fn spawn_jobmanager(&mut self, bind: &str) -> Result<()> {
        let data = self.dir().join("jobmanager");
        std::fs::create_dir_all(&data)?;
        let mut cmd = Command::new(binary("weir-jobmanager")?);
        cmd.arg("--bind")
            .arg(bind)
            .arg("--data-dir")
            .arg(&data)
            .arg("--checkpoint-store")
            .arg(self.checkpoint_store_url())
            .arg("--heartbeat-interval-ms")
            .arg(self.options.heartbeat_interval_ms.to_string())
            .arg("--heartbeat-timeout-ms")
            .arg(self.options.heartbeat_timeout_ms.to_string())
            .envs(self.env())
            .envs(self.jobmanager_env.clone());
        let mut jm = Process::spawn("jobmanager", cmd, &self.log_path("jobmanager"))?;
        let address = jm.wait_for_stdout(START_TIMEOUT, |line| {
            line.strip_prefix("weir-jobmanager listening on http://").map(|a| a.trim().to_string())
        })?;
        self.address = address;
        self.jobmanager = Some(jm);
        self.client = None;
        Ok(())
    }

    fn spawn_taskmanager(&mut self, extra_env: &[(String, String)]) -> Result<usize> {
        let index = self.taskmanagers.len();
        let id = format!("tm-{index}");
        let data = self.dir().join(&id);
        std::fs::create_dir_all(&data)?;
        let mut cmd = Command::new(binary(&self.options.taskmanager_binary)?);
        cmd.arg("--jobmanager")
            .arg(self.jobmanager_url())
            .arg("--bind")
            .arg("127.0.0.1:0")
            .arg("--data-bind")
            .arg("127.0.0.1:0")
            .arg("--slots")
            .arg(self.options.slots.to_string())
            .arg("--data-dir")
            .arg(&data)
            .arg("--tm-id")
            .arg(&id)
            .envs(self.env())
            .envs(extra_env.iter().cloned());
        let mut process = Process::spawn(&id, cmd, &self.log_path(&id))?;
        let prefix = format!("weir-taskmanager {id} listening on ");
        process.wait_for_stdout(START_TIMEOUT, |line| line.starts_with(&prefix).then_some(()))?;
        self.taskmanagers.push(TaskManager { id, process });
        Ok(index)
    }

    fn wait_until_registered(&mut self, ids: &[String]) -> Result<()> {
        let what = format!("for task managers {ids:?} to register");
        wait_until(&what, START_TIMEOUT, || {
            let registered: BTreeSet<String> = self.overview()?.task_managers.into_iter().map(|t| t.id).collect();
            Ok(ids.iter().all(|id| registered.contains(id)).then_some(()))
        })
    }

    // --------------------------------------------------------------------------------- faults

    /// Starts one more task manager and waits until it is registered; returns its index.
    pub fn start_taskmanager(&mut self) -> Result<usize> {
        self.start_taskmanager_with_env(&[])
    }

    /// [`Cluster::start_taskmanager`] with extra environment for that process (e.g. `WEIR_FAILPOINTS`).
    pub fn start_taskmanager_with_env(&mut self, env: &[(String, String)]) -> Result<usize> {
        let i = self.spawn_taskmanager(env)?;
        let id = self.taskmanagers[i].id.clone();
        self.wait_until_registered(&[id])?;
        Ok(i)
    }

    /// Deploys a new release of the task managers, as a user upgrading their job does: terminates every live
    /// task manager, starts as many from the binary `name`, and waits until the job manager knows only the new
    /// ones (the old ones' heartbeats time out), so that it resolves specs against the new binary's kinds.
    pub fn replace_taskmanagers(&mut self, name: &str) -> Result<()> {
        binary(name)?;
        let live = self.live_taskmanagers();
        for &i in &live {
            self.terminate_taskmanager(i, Duration::from_secs(20))?;
        }
        self.options.taskmanager_binary = name.to_string();
        let mut ids = Vec::new();
        for _ in 0..live.len().max(1) {
            let i = self.spawn_taskmanager(&[])?;
            ids.push(self.taskmanagers[i].id.clone());
        }
        let what = format!("for only task managers {ids:?} to be registered");
        let timeout = START_TIMEOUT + Duration::from_millis(self.options.heartbeat_timeout_ms * 3);
        wait_until(&what, timeout, || {
            let registered: BTreeSet<String> = self.overview()?.task_managers.into_iter().map(|t| t.id).collect();
            Ok((registered == ids.iter().cloned().collect::<BTreeSet<_>>()).then_some(()))
        })
    }

    /// SIGKILLs task manager `i`, as a crashing machine would.
    pub fn kill_taskmanager(&mut self, i: usize) -> Result<()> {
        let tm = self.taskmanagers.get_mut(i).ok_or_else(|| anyhow!("no task manager {i}"))?;
        tm.process.kill();
        Ok(())
    }

    /// SIGTERMs task manager `i` and returns its exit status (an error if it takes longer than `timeout`).
    pub fn terminate_taskmanager(&mut self, i: usize, timeout: Duration) -> Result<std::process::ExitStatus> {
        let tm = self.taskmanagers.get_mut(i).ok_or_else(|| anyhow!("no task manager {i}"))?;
        tm.process.terminate(timeout)
    }

    /// Process id of task manager `i`.
    pub fn taskmanager_pid(&self, i: usize) -> Option<u32> {
        self.taskmanagers.get(i).map(|t| t.process.pid())
    }

    /// Indices of task managers still running.
    pub fn live_taskmanagers(&mut self) -> Vec<usize> {
        (0..self.taskmanagers.len()).filter(|&i| self.taskmanagers[i].process.is_running()).collect()
    }

    /// Indices of live task managers that run at least one task (a slot in use), per the job manager.
    pub fn busy_taskmanagers(&mut self) -> Result<Vec<usize>> {
        let overview = self.overview()?;
        let busy: BTreeSet<String> =
            overview.task_managers.into_iter().filter(|t| t.free_slots < t.slots).map(|t| t.id).collect();
        let live = self.live_taskmanagers();
        Ok(live.into_iter().filter(|&i| busy.contains(&self.taskmanagers[i].id)).collect())
    }

    /// Job `id`, once running with `checkpoints` completed checkpoints, through a SIGKILL of a task manager that
    /// runs its tasks (another started in its place): its state when it finished, having restarted at least once.
    pub fn finish_through_a_kill(&mut self, id: &str, checkpoints: u64) -> Result<JobInfo> {
        self.wait_for_state(id, &[JobState::Running], Duration::from_secs(30))?;
        self.wait_for_checkpoints(id, checkpoints, Duration::from_secs(60))?;
        let victim = *self.busy_taskmanagers()?.first().context("no busy task manager")?;
        self.kill_taskmanager(victim)?;
        self.start_taskmanager()?;
        let done = self.wait_for_state(id, &[JobState::Finished], Duration::from_secs(180))?;
        if done.restarts < 1 {
            bail!("the kill did not restart job {id}: {done:?}");
        }
        Ok(done)
    }

    /// SIGKILLs a randomly chosen task manager that runs tasks (waiting up to 10 s for one to be busy);
    /// returns its index.
    pub fn kill_random_busy_taskmanager(&mut self, rng: &mut impl Rng) -> Result<usize> {
        let busy = wait_until("for a task manager with tasks", Duration::from_secs(10), || {
            let busy = self.busy_taskmanagers()?;
            Ok((!busy.is_empty()).then_some(busy))
        })?;
        let victim = busy[rng.random_range(0..busy.len())];
        self.kill_taskmanager(victim)?;
        Ok(victim)
    }

    /// Extra environment for the job manager from its next (re)start on.
    pub fn set_jobmanager_env(&mut self, env: Vec<(String, String)>) {
        self.jobmanager_env = env;
    }

    /// Whether the job manager process is running.
    pub fn jobmanager_is_running(&mut self) -> bool {
        self.jobmanager.as_mut().is_some_and(|jm| jm.is_running())
    }

    /// SIGKILLs the job manager.
    pub fn kill_jobmanager(&mut self) {
        if let Some(jm) = self.jobmanager.as_mut() {
            jm.kill();
        }
        self.client = None;
    }

    /// Starts the job manager again with the same data directory, checkpoint store and address (task managers
    /// know it by that address).
    pub fn restart_jobmanager(&mut self) -> Result<()> {
        if self.jobmanager.as_mut().is_some_and(|jm| jm.is_running()) {
            bail!("the job manager is still running; kill or terminate it first");
        }
        let bind = self.address.clone();
        // The port was just released; binding it again can race with the kernel's cleanup, so retry briefly.
        let mut last = None;
        for _ in 0..10 {
            match self.spawn_jobmanager(&bind) {
                Ok(()) => return Ok(()),
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        Err(last.expect("tried at least once").context(format!("cannot restart the job manager on {bind}")))
    }

    /// SIGTERMs the job manager and returns its exit status (an error if it takes longer than `timeout`).
    pub fn terminate_jobmanager(&mut self, timeout: Duration) -> Result<std::process::ExitStatus> {
        self.client = None;
        self.jobmanager.as_mut().ok_or_else(|| anyhow!("no job manager"))?.terminate(timeout)
    }

    /// Process id of the job manager.
    pub fn jobmanager_pid(&self) -> Option<u32> {
        self.jobmanager.as_ref().map(|p| p.pid())
    }

    /// Everything the job manager logged, across restarts.
    pub fn jobmanager_log(&self) -> Result<String> {
        let path = self.log_path("jobmanager");
        Ok(String::from_utf8_lossy(&std::fs::read(&path)?).into_owned())
    }

    /// Everything every process of the cluster logged (job manager and task managers, dead or alive).
    pub fn all_logs(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(self.dir().join("logs")).into_iter().flatten().flatten() {
            out.push_str(&String::from_utf8_lossy(&std::fs::read(entry.path()).unwrap_or_default()));
        }
        out
    }

    /// Peak resident memory (KiB) of every live process, by name.
    pub fn peak_rss(&mut self) -> Vec<(String, Option<u64>)> {
        let mut out = Vec::new();
        if let Some(jm) = self.jobmanager.as_mut() {
            if jm.is_running() {
                out.push(("jobmanager".to_string(), jm.peak_rss_kib()));
            }
        }
        for tm in &mut self.taskmanagers {
            if tm.process.is_running() {
                out.push((tm.id.clone(), tm.process.peak_rss_kib()));
            }
        }
        out
    }

    // --------------------------------------------------------------------------------- client API

    fn client(&mut self) -> Result<ClientApiClient<Channel>> {
        if let Some(c) = &self.client {
            return Ok(c.clone());
        }
        let url = self.jobmanager_url();
        let channel = self.rt.block_on(async {
            tokio::time::timeout(
                RPC_TIMEOUT,
                Channel::from_shared(url.clone())?.connect_timeout(Duration::from_secs(5)).connect(),
            )
            .await
            .map_err(|_| anyhow!("connecting to {url} timed out"))?
            .with_context(|| format!("cannot connect to the job manager at {url}"))
        })?;
        let client = ClientApiClient::new(channel);
        self.client = Some(client.clone());
        Ok(client)
    }

    fn call<T, F, Fut>(&mut self, what: &str, f: F) -> Result<T>
    where
        F: FnOnce(ClientApiClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let client = self.client()?;
        let result = self.rt.block_on(async { tokio::time::timeout(RPC_TIMEOUT, f(client)).await });
        match result {
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            Ok(Err(status)) => {
                if matches!(status.code(), tonic::Code::Unavailable | tonic::Code::Unknown) {
                    self.client = None;
                }
                Err(anyhow::Error::new(RpcError(status)).context(what.to_string()))
            }
            Err(_) => {
                self.client = None;
                bail!("{what}: no answer within {RPC_TIMEOUT:?}")
            }
        }
    }

    /// Submits a job spec (YAML) over gRPC and returns the job id.
    pub fn submit(&mut self, spec_yaml: &str) -> Result<String> {
        let spec = weir_common::job::spec::parse_spec_text(spec_yaml).context("the test's own job spec is invalid")?;
        self.submit_spec(spec)
    }

    /// Submits a job spec in its protobuf form (one no YAML file would hold, say) and returns the job id.
    pub fn submit_spec(&mut self, spec: weir_proto::JobSpec) -> Result<String> {
        let resp = self.call("SubmitJob", |mut c| async move {
            c.submit_job(SubmitJobRequest { spec: Some(spec), ..Default::default() }).await
        })?;
        Ok(resp.job_id)
    }

    /// Submits a job spec (YAML) over gRPC that starts from a savepoint or retained checkpoint.
    pub fn submit_from(
        &mut self,
        spec_yaml: &str,
        savepoint: &str,
        restore_mode: &str,
        allow_non_restored: bool,
    ) -> Result<String> {
        let spec = weir_common::job::spec::parse_spec_text(spec_yaml).context("the test's own job spec is invalid")?;
        self.submit_spec_from(spec, savepoint, restore_mode, allow_non_restored)
    }

    /// [`Cluster::submit_from`] with a spec in its protobuf form.
    pub fn submit_spec_from(
        &mut self,
        spec: weir_proto::JobSpec,
        savepoint: &str,
        restore_mode: &str,
        allow_non_restored: bool,
    ) -> Result<String> {
        let req = SubmitJobRequest {
            spec: Some(spec),
            from_savepoint: savepoint.to_string(),
            restore_mode: weir_common::checkpoint::parse_restore_mode(restore_mode).map_err(|e| anyhow!(e))? as i32,
            allow_non_restored_state: allow_non_restored,
        };
        let resp = self.call("SubmitJob", |mut c| async move { c.submit_job(req).await })?;
        Ok(resp.job_id)
    }

    /// `weir job stop ID --savepoint [--drain] [--format F]`: returns the savepoint's URL once the job ended.
    pub fn stop_with_savepoint(&mut self, id: &str, drain: bool, format: &str) -> Result<String> {
        let mut args = vec!["job", "stop", id, "--savepoint", "--format", format];
        if drain {
            args.push("--drain");
        }
        let out = self.cli_json(&args)?;
        let url = out["savepoint"].as_str().ok_or_else(|| anyhow!("no savepoint URL in {out}"))?.to_string();
        self.wait_for_state(id, &[JobState::Finished], Duration::from_secs(60))?;
        Ok(url)
    }

    /// The job's current info.
    pub fn job(&mut self, id: &str) -> Result<JobInfo> {
        let job_id = id.to_string();
        let resp = self.call("GetJob", |mut c| async move { c.get_job(GetJobRequest { job_id }).await })?;
        resp.job.ok_or_else(|| anyhow!("GetJob({id}) returned no job"))
    }

    /// Every job the job manager knows (read a page at a time).
    pub fn jobs(&mut self) -> Result<Vec<JobInfo>> {
        let mut jobs = Vec::new();
        let mut page_token = String::new();
        loop {
            let req = ListJobsRequest { page_size: 0, page_token };
            let page = self.call("ListJobs", |mut c| async move { c.list_jobs(req).await })?;
            jobs.extend(page.jobs);
            if page.next_page_token.is_empty() {
                return Ok(jobs);
            }
            page_token = page.next_page_token;
        }
    }

    /// Cancels a job.
    pub fn cancel(&mut self, id: &str) -> Result<()> {
        let job_id = id.to_string();
        self.call("CancelJob", |mut c| async move { c.cancel_job(CancelJobRequest { job_id }).await })?;
        Ok(())
    }

    /// The job's checkpoints, as the job manager lists them.
    pub fn checkpoints(&mut self, id: &str) -> Result<Vec<CheckpointInfo>> {
        let job_id = id.to_string();
        let resp = self.call("ListCheckpoints", |mut c| async move {
            c.list_checkpoints(ListCheckpointsRequest { job_id }).await
        })?;
        Ok(resp.checkpoints)
    }

    /// Registered task managers and slots.
    pub fn overview(&mut self) -> Result<ClusterOverviewResponse> {
        self.call("ClusterOverview", |mut c| async move { c.cluster_overview(ClusterOverviewRequest {}).await })
    }

    // --------------------------------------------------------------------------------- waits

    /// Waits until the job is in one of `states`. Reaching another terminal state ends the wait at once.
    pub fn wait_for_state(&mut self, id: &str, states: &[JobState], timeout: Duration) -> Result<JobInfo> {
        let names: Vec<&str> = states.iter().map(|s| s.name()).collect();
        let what = format!("for job {id} to be {}", names.join(" or "));
        let mut last: Option<JobInfo> = None;
        let result = wait_until(&what, timeout, || {
            let job = self.job(id)?;
            last = Some(job.clone());
            match job_state(&job) {
                Some(s) if states.contains(&s) => Ok(Some(job)),
                Some(s) if s.is_terminal() => Err(Fatal(format!("job ended as {s}: {}", describe_job(&job))).into()),
                _ => Ok(None),
            }
        });
        result.map_err(|e| match last {
            Some(job) => e.context(format!("last seen: {}", describe_job(&job))),
            None => e,
        })
    }

    /// Waits until at least `n` checkpoints of the job completed (as the job manager counts them); returns
    /// the job's info then.
    pub fn wait_for_checkpoints(&mut self, id: &str, n: u64, timeout: Duration) -> Result<JobInfo> {
        let what = format!("for {n} completed checkpoints of job {id}");
        wait_until(&what, timeout, || {
            let job = self.live_job(id)?;
            Ok((job.checkpoints_completed >= n).then_some(job))
        })
    }

    /// Waits until a checkpoint with an id above `after` is COMPLETED; returns it.
    pub fn wait_for_checkpoint_after(&mut self, id: &str, after: u64, timeout: Duration) -> Result<CheckpointInfo> {
        let what = format!("for a checkpoint of job {id} after {after} to complete");
        wait_until(&what, timeout, || {
            self.live_job(id)?;
            Ok(self
                .checkpoints(id)?
                .into_iter()
                .find(|c| c.id > after && c.status() == weir_proto::CheckpointStatus::Completed))
        })
    }

    /// The job's info; a [`Fatal`] error if it has ended.
    fn live_job(&mut self, id: &str) -> Result<JobInfo> {
        let job = self.job(id)?;
        if let Some(s) = job_state(&job).filter(|s| s.is_terminal()) {
            return Err(Fatal(format!("job ended as {s}: {}", describe_job(&job))).into());
        }
        Ok(job)
    }

    // --------------------------------------------------------------------------------- CLI

    /// Runs `weir ARGS --jobmanager URL` (also given as `WEIR_JOBMANAGER`).
    pub fn cli(&self, args: &[&str]) -> Result<CommandOutput> {
        let mut cmd = Command::new(binary("weir")?);
        cmd.args(args).arg("--jobmanager").arg(self.jobmanager_url()).env("WEIR_JOBMANAGER", self.jobmanager_url());
        run_with_timeout(cmd, CLI_TIMEOUT)
    }

    /// Runs `weir ARGS --output json` and parses what it prints; a non-zero exit is an error.
    pub fn cli_json(&self, args: &[&str]) -> Result<serde_json::Value> {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--output", "json"]);
        let out = self.cli(&all)?;
        if !out.status.success() {
            bail!("weir {} failed: {out}", all.join(" "));
        }
        serde_json::from_str(&out.stdout).with_context(|| format!("weir {} printed no JSON: {out}", all.join(" ")))
    }

    // --------------------------------------------------------------------------------- end

    /// The tail of every process's log.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        if let Some(jm) = &self.jobmanager {
            out.push_str(&jm.tail(lines));
        }
        for tm in &self.taskmanagers {
            out.push_str(&log_tail(&tm.id, tm.process.log(), lines));
        }
        out
    }

    /// Stops every process (the scenario passed): nothing is printed and a temporary directory is removed.
    pub fn stop(mut self) {
        self.stopped = true;
        self.kill_all();
    }

    fn kill_all(&mut self) {
        for tm in &mut self.taskmanagers {
            tm.process.kill();
        }
        if let Some(jm) = self.jobmanager.as_mut() {
            jm.kill();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_all();
        if !self.stopped {
            eprintln!("\n===== the cluster was not stopped cleanly; logs follow\n{}", self.log_tails(60));
            if let Some(ClusterDir::Temp(t)) = self.dir.take() {
                eprintln!("===== cluster directory kept at {}", t.keep().display());
            }
        }
    }
}

/// A gRPC error status, kept whole so tests can check its code.
#[derive(Debug)]
pub struct RpcError(pub tonic::Status);

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.0.code(), self.0.message())
    }
}

impl std::error::Error for RpcError {}

/// The `restore_path` of every `restored keyed state` line in `logs` (task-manager logs) of operator `uid` of
/// job `job_id`: one per restored subtask and attempt, in log order — `open`, `import`, `import+copy`, `copy`,
/// `load` or `empty` (`weir_state::rescale::RestorePath`).
pub fn restore_paths_in(logs: &str, job_id: &str, uid: &str) -> Vec<String> {
    logs.lines()
        .filter(|l| l.contains("restored keyed state"))
        .filter(|l| log_field(l, "job_id") == Some(job_id) && log_field(l, "uid") == Some(uid))
        .filter_map(|l| log_field(l, "restore_path").map(str::to_string))
        .collect()
}

/// The value of field `name` in a log line (`name=value` or `name="value"`, the name not part of a longer one).
fn log_field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let pattern = format!("{name}=");
    let mut from = 0;
    while let Some(at) = line[from..].find(&pattern).map(|i| from + i) {
        from = at + pattern.len();
        let before = line[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
            continue;
        }
        let rest = &line[from..];
        return Some(match rest.strip_prefix('"') {
            Some(quoted) => quoted.split('"').next().unwrap_or_default(),
            None => rest.split(|c: char| c.is_whitespace() || c == '}' || c == ',').next().unwrap_or_default(),
        });
    }
    None
}

impl Cluster {
    /// [`restore_paths_in`] the logs of every process of the cluster.
    pub fn restore_paths(&self, job_id: &str, uid: &str) -> Vec<String> {
        restore_paths_in(&self.all_logs(), job_id, uid)
    }
}

#[cfg(test)]
mod restore_path_tests {
    use super::*;

    #[test]
    fn restore_paths_are_read_per_job_and_operator() {
        let logs = "\
2026-01-01T00:00:00Z  INFO task: weir_taskmanager::task::restore: restored keyed state uid=\"counts\" backend=\"rocksdb\" restore_path=\"import\" sources=4 job_id=j1 attempt=1 vertex=1 subtask=0
2026-01-01T00:00:00Z  INFO task{job_id=j1 attempt=1}: weir_taskmanager::task::restore: restored keyed state uid=\"counts\" restore_path=\"open\"
2026-01-01T00:00:00Z  INFO task: restored keyed state uid=\"counts2\" restore_path=\"copy\" job_id=j1
2026-01-01T00:00:00Z  INFO task: restored keyed state uid=\"counts\" restore_path=\"copy\" job_id=j2
2026-01-01T00:00:00Z  INFO task: restored keyed state uid=\"counts\" restore_path=\"import+copy\" other_job_id=j2 job_id=j1
";
        assert_eq!(restore_paths_in(logs, "j1", "counts"), ["import", "open", "import+copy"]);
        assert_eq!(restore_paths_in(logs, "j2", "counts"), ["copy"]);
        assert!(restore_paths_in(logs, "j3", "counts").is_empty());
    }
}
