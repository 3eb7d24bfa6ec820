//! `weir local`: a whole cluster on this machine, as child processes.
//!
//! 1. Start `weir-jobmanager` and read the line it prints once listening; then start the task managers
//!    against that address and read theirs (each with a timeout, failing clearly if a child exits early).
//! 2. Wait until every task manager is registered (`ClusterOverview`), then print the job manager's address
//!    and write `DIR/cluster.json` (addresses, pids, command lines) for scripts.
//! 3. Run until Ctrl-C or SIGTERM; a child that dies meanwhile is logged and the others keep running.
//! 4. Stop: SIGTERM to every child, SIGKILL to those still running after [`STOP_GRACE`].

use crate::args::{LocalArgs, OutputFormat};
use crate::client::JobManager;
use crate::commands::print_stdout;
use crate::error::CliError;
use crate::progress::Progress;
use crate::settings::Settings;
use anyhow::{anyhow, bail, Context};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::ChildStdout;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// How long stopping children may take before they are killed.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often registration is checked while starting.
const REGISTRATION_POLL: Duration = Duration::from_millis(200);

// ------------------------------------------------------------------------------------------- stdout lines

/// What a task manager prints once listening.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskManagerLine {
    /// The task manager's id.
    pub id: String,
    /// Its gRPC address, `http://HOST:PORT`.
    pub rpc_address: String,
    /// Its data-plane address, `HOST:PORT`.
    pub data_address: String,
}

/// Parses `weir-jobmanager listening on http://HOST:PORT` into the address.
pub fn parse_jobmanager_line(line: &str) -> Option<String> {
    let mut words = line.split_whitespace();
    if (words.next()?, words.next()?, words.next()?) != ("weir-jobmanager", "listening", "on") {
        return None;
    }
    let addr = words.next()?;
    // An HA job manager adds "(standby until elected)".
    let rest: Vec<&str> = words.collect();
    if !(rest.is_empty() || rest == ["(standby", "until", "elected)"]) || !addr.contains("://") {
        return None;
    }
    Some(addr.to_string())
}

/// Parses `weir-taskmanager TM_ID listening on http://HOST:PORT data HOST:PORT`.
pub fn parse_taskmanager_line(line: &str) -> Option<TaskManagerLine> {
    let w: Vec<&str> = line.split_whitespace().collect();
    match w.as_slice() {
        ["weir-taskmanager", id, "listening", "on", rpc, "data", data] if rpc.contains("://") => {
            Some(TaskManagerLine { id: id.to_string(), rpc_address: rpc.to_string(), data_address: data.to_string() })
        }
        _ => None,
    }
}

/// The address to connect to for an address a server printed: a wildcard host becomes loopback.
pub fn connectable_address(addr: &str) -> String {
    addr.replacen("://0.0.0.0:", "://127.0.0.1:", 1).replacen("://[::]:", "://[::1]:", 1)
}

// ------------------------------------------------------------------------------------------ cluster.json

/// What `weir local --output json` prints and writes to `DIR/cluster.json`.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct ClusterFile {
    /// The job manager's client address (with several, all of them comma-separated: what `--jobmanager`
    /// takes).
    pub jobmanager: String,
    /// The (first) job manager's pid.
    pub jobmanager_pid: u32,
    /// Every job manager's client address and pid, in start order.
    pub jobmanagers: Vec<JobManagerEntry>,
    /// With `--ha etcd`: the etcd client URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etcd: Option<String>,
    /// The task managers, in start order.
    pub taskmanagers: Vec<TaskManagerEntry>,
    /// The cluster's directory.
    pub dir: String,
    /// The checkpoint store URL.
    pub checkpoint_store: String,
}

/// One job manager of a local cluster.
#[allow(missing_docs)] // its fields are the keys of DIR/cluster.json, which scripts read
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct JobManagerEntry {
    pub address: String,
    pub pid: u32,
}

/// One task manager of a local cluster.
#[allow(missing_docs)] // its fields are the keys of DIR/cluster.json, which scripts read
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct TaskManagerEntry {
    pub id: String,
    pub pid: u32,
    pub rpc_address: String,
    pub data_address: String,
    pub data_dir: String,
    /// Where its stderr goes (`--logs-to-files`), else null.
    pub log: Option<String>,
    /// The command line it was started with (to start it again by hand).
    pub command: Vec<String>,
}

// ---------------------------------------------------------------------------------------------- children

/// A child exit, as reported to the run loop.
struct Exited {
    name: String,
    pid: u32,
    status: String,
}

/// A running (or finished) child process.
struct Proc {
    name: String,
    pid: u32,
    /// `Some(status)` once it has exited.
    exit: watch::Receiver<Option<String>>,
}

impl Proc {
    fn exit_status(&self) -> Option<String> {
        self.exit.borrow().clone()
    }

    /// Waits for the child's exit, up to `limit`.
    async fn wait_exit(&mut self, limit: Duration) -> Option<String> {
        let _ = tokio::time::timeout(limit, self.exit.wait_for(|s| s.is_some())).await;
        self.exit_status()
    }
}

/// Where a child's stderr (and anything extra it prints on stdout) goes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Sink {
    /// Our stderr; stdout lines get a `[name]` prefix.
    Terminal(String),
    /// A log file.
    File(PathBuf),
}

impl Sink {
    fn stderr_stdio(&self) -> anyhow::Result<Stdio> {
        match self {
            Sink::Terminal(_) => Ok(Stdio::inherit()),
            Sink::File(p) => Ok(Stdio::from(open_log(p)?)),
        }
    }

    /// Forwards the rest of a child's stdout (it must be drained, or the child would block or fail on write).
    fn forward(&self, mut lines: Lines<BufReader<ChildStdout>>) {
        let sink = self.clone();
        tokio::spawn(async move {
            let mut file = match &sink {
                Sink::File(p) => open_log(p).ok(),
                Sink::Terminal(_) => None,
            };
            while let Ok(Some(line)) = lines.next_line().await {
                match (&sink, file.as_mut()) {
                    (Sink::Terminal(name), _) => eprintln!("[{name}] {line}"),
                    (Sink::File(_), Some(f)) => {
                        let _ = writeln!(f, "{line}");
                    }
                    (Sink::File(_), None) => {}
                }
            }
        });
    }

    fn write_line(&self, line: &str) {
        match self {
            Sink::Terminal(name) => eprintln!("[{name}] {line}"),
            Sink::File(p) => {
                if let Ok(mut f) = open_log(p) {
                    let _ = writeln!(f, "{line}");
                }
            }
        }
    }

    fn hint(&self) -> String {
        match self {
            Sink::Terminal(_) => "see its output above".to_string(),
            Sink::File(p) => format!("see {}", p.display()),
        }
    }
}

fn open_log(path: &Path) -> anyhow::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open log file {}", path.display()))
}

/// The children of the local cluster.
struct Cluster {
    procs: Vec<Proc>,
    events_tx: mpsc::UnboundedSender<Exited>,
    events: mpsc::UnboundedReceiver<Exited>,
}

impl Cluster {
    fn new() -> Self {
        let (events_tx, events) = mpsc::unbounded_channel();
        Cluster { procs: Vec::new(), events_tx, events }
    }

    /// Starts a child with stdout piped; returns its index and its stdout lines.
    fn spawn(
        &mut self,
        name: &str,
        program: &Path,
        args: &[String],
        sink: &Sink,
    ) -> anyhow::Result<(usize, Lines<BufReader<ChildStdout>>)> {
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(sink.stderr_stdio()?);
        // Its own process group: Ctrl-C in the terminal reaches only `weir`, which stops the children in order.
        cmd.process_group(0);
        #[cfg(target_os = "linux")]
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            // If `weir` itself is killed, its children get SIGTERM instead of running on as orphans.
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().with_context(|| format!("cannot start {name} ({})", program.display()))?;
        let pid = child.id().ok_or_else(|| anyhow!("{name} exited at once"))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("{name} has no stdout"))?;
        let (tx, rx) = watch::channel(None);
        let events = self.events_tx.clone();
        let child_name = name.to_string();
        tokio::spawn(async move {
            let status = match child.wait().await {
                Ok(s) => s.to_string(),
                Err(e) => format!("unknown exit status ({e})"),
            };
            tx.send_replace(Some(status.clone()));
            let _ = events.send(Exited { name: child_name, pid, status });
        });
        self.procs.push(Proc { name: name.to_string(), pid, exit: rx });
        Ok((self.procs.len() - 1, BufReader::new(stdout).lines()))
    }

    /// Reads a child's stdout until `parse` accepts a line (other lines are passed to the sink).
    async fn read_ready<T>(
        &mut self,
        idx: usize,
        lines: &mut Lines<BufReader<ChildStdout>>,
        sink: &Sink,
        deadline: Instant,
        parse: impl Fn(&str) -> Option<T>,
    ) -> anyhow::Result<T> {
        let proc = &mut self.procs[idx];
        let mut exit = proc.exit.clone();
        loop {
            tokio::select! {
                biased;
                line = lines.next_line() => match line {
                    Ok(Some(line)) => match parse(&line) {
                        Some(t) => return Ok(t),
                        None => sink.write_line(&line),
                    },
                    Ok(None) => {
                        match proc.wait_exit(Duration::from_secs(2)).await {
                            Some(status) => {
                                bail!("{} exited before it was listening ({status}); {}", proc.name, sink.hint())
                            }
                            None => bail!("{} closed its stdout before it was listening; {}", proc.name, sink.hint()),
                        }
                    }
                    Err(e) => bail!("cannot read the stdout of {}: {e}", proc.name),
                },
                status = async { exit.wait_for(|s| s.is_some()).await.ok().and_then(|s| s.clone()) } => {
                    let status = status.unwrap_or_default();
                    bail!("{} exited before it was listening ({status}); {}", proc.name, sink.hint());
                }
                _ = tokio::time::sleep_until(deadline) => {
                    bail!("{} did not report that it is listening in time (see --startup-timeout); {}",
                          proc.name, sink.hint());
                }
            }
        }
    }

    /// The first child that has exited, with its status.
    fn first_exited(&self) -> Option<(&str, String)> {
        self.procs.iter().find_map(|p| p.exit_status().map(|s| (p.name.as_str(), s)))
    }

    fn all_exited(&self) -> bool {
        self.procs.iter().all(|p| p.exit_status().is_some())
    }

    /// SIGTERM to every running child; SIGKILL to those still running after `grace`.
    async fn shutdown(&mut self, grace: Duration) {
        for p in self.procs.iter().filter(|p| p.exit_status().is_none()) {
            signal_pid(p.pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + grace;
        for p in self.procs.iter_mut() {
            let _ = tokio::time::timeout_at(deadline, p.exit.wait_for(|s| s.is_some())).await;
        }
        for p in self.procs.iter_mut() {
            if p.exit_status().is_none() {
                tracing::warn!(process = %p.name, pid = p.pid, "did not stop within {grace:?}; killing it");
                signal_pid(p.pid, libc::SIGKILL);
                p.wait_exit(Duration::from_secs(5)).await;
            }
        }
    }
}

fn signal_pid(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety requirements; the pid is our unreaped child.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

// ------------------------------------------------------------------------------------------------ binaries

/// The binary `name`: `explicit` if given, else the file next to the running `weir`, else `name` (PATH).
pub fn find_binary(name: &str, explicit: Option<&Path>) -> PathBuf {
    if let Some(p) = explicit {
        return p.to_path_buf();
    }
    if let Some(dir) = std::env::current_exe().ok().and_then(|exe| exe.parent().map(Path::to_path_buf)) {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return candidate;
        }
    }
    PathBuf::from(name)
}

// -------------------------------------------------------------------------------------------------- run

/// Runs `weir local` until Ctrl-C or SIGTERM.
pub async fn run(settings: &Settings, args: LocalArgs) -> Result<ExitCode, CliError> {
    let mut sigint = signal(SignalKind::interrupt()).context("cannot install the SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("cannot install the SIGTERM handler")?;

    std::fs::create_dir_all(&args.dir).with_context(|| format!("cannot create {}", args.dir.display()))?;
    let dir = args.dir.canonicalize().with_context(|| format!("cannot resolve {}", args.dir.display()))?;
    let mut cluster = Cluster::new();
    let started = tokio::select! {
        r = start(&mut cluster, &args, &dir, settings.rpc_timeout) => r.map_err(CliError::from),
        _ = sigint.recv() => Err(CliError::Failed("interrupted before the cluster was ready".into())),
        _ = sigterm.recv() => Err(CliError::Failed("terminated before the cluster was ready".into())),
    };
    let info = match started {
        Ok(info) => info,
        Err(e) => {
            cluster.shutdown(STOP_GRACE).await;
            return Err(e);
        }
    };

    if let Err(e) = write_cluster_file(&dir.join("cluster.json"), &info) {
        cluster.shutdown(STOP_GRACE).await;
        return Err(e.into());
    }
    match settings.output {
        OutputFormat::Text => print_stdout(&format!("jobmanager: {}\n", info.jobmanager)),
        // One line: a script reads it while `weir local` keeps running.
        OutputFormat::Json => {
            print_stdout(&format!("{}\n", serde_json::to_string(&info).map_err(anyhow::Error::from)?))
        }
    }
    eprintln!(
        "local cluster ready: job manager {} and {} task manager(s) with {} slot(s) each; state in {}; \
         Ctrl-C stops it",
        info.jobmanager,
        info.taskmanagers.len(),
        args.slots,
        dir.display()
    );

    loop {
        tokio::select! {
            _ = sigint.recv() => break,
            _ = sigterm.recv() => break,
            Some(ev) = cluster.events.recv() => {
                tracing::warn!(process = %ev.name, pid = ev.pid, status = %ev.status,
                               "a process of the local cluster exited; the others keep running");
                if cluster.all_exited() {
                    return Err(CliError::Failed("every process of the local cluster has exited".into()));
                }
            }
        }
    }
    eprintln!("stopping the local cluster");
    cluster.shutdown(STOP_GRACE).await;
    Ok(ExitCode::SUCCESS)
}

/// Starts the job manager and the task managers and waits until they are registered.
/// What `weir local` starts, decided from its arguments before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LocalPlan {
    /// DIR/logs when each process logs to a file there; `None`: to this terminal.
    logs: Option<PathBuf>,
    /// Where checkpoints go.
    checkpoint_store: String,
    /// An etcd is started and the job managers elect a leader in it.
    ha: bool,
    /// The job managers, the first one the one a client is pointed at.
    jobmanagers: Vec<JobManagerPlan>,
    /// Each task manager's name and data directory.
    taskmanagers: Vec<(String, PathBuf)>,
}

/// One job manager to start.
#[derive(Debug, Clone, PartialEq, Eq)]
struct JobManagerPlan {
    /// Its process name (and log file's).
    name: String,
    /// Its data directory.
    dir: PathBuf,
    /// The address it binds; `None`: a free port on 127.0.0.1 (an HA job manager publishes its address, so it
    /// needs a known port).
    bind: Option<String>,
}

/// Decides what `weir local` starts: which processes, where their data and logs go, how they bind.
fn plan_local(args: &LocalArgs, dir: &Path) -> anyhow::Result<LocalPlan> {
    let ha = match args.ha.as_str() {
        "none" if args.jobmanagers > 1 => bail!("--jobmanagers {} needs --ha etcd", args.jobmanagers),
        "none" => false,
        "etcd" => true,
        other => bail!("--ha: expected none or etcd, got {other:?}"),
    };
    let jobmanagers = (0..args.jobmanagers)
        .map(|i| JobManagerPlan {
            name: if i == 0 { "weir-jobmanager".to_string() } else { format!("weir-jobmanager-{i}") },
            dir: if i == 0 { dir.join("jobmanager") } else { dir.join(format!("jobmanager-{i}")) },
            bind: (!ha || (i == 0 && !args.bind.ends_with(":0"))).then(|| args.bind.clone()),
        })
        .collect();
    Ok(LocalPlan {
        logs: args.logs_to_files.then(|| dir.join("logs")),
        checkpoint_store: args
            .checkpoint_store
            .clone()
            .unwrap_or_else(|| format!("file://{}", dir.join("checkpoints").display())),
        ha,
        jobmanagers,
        taskmanagers: (0..args.taskmanagers)
            .map(|i| (format!("weir-taskmanager-{i}"), dir.join(format!("tm-{i}"))))
            .collect(),
    })
}

impl LocalPlan {
    /// Where a process's stderr goes: `weir-jobmanager` to DIR/logs/jobmanager.log, `weir-taskmanager-<i>` to
    /// DIR/logs/taskmanager-<i>.log, or this terminal.
    fn sink_for(&self, name: &str) -> Sink {
        match &self.logs {
            Some(logs) => Sink::File(logs.join(format!("{}.log", name.trim_start_matches("weir-")))),
            None => Sink::Terminal(name.to_string()),
        }
    }

    /// A job manager's command line, binding `bind`, with the HA flags when an etcd runs at `etcd`.
    fn jobmanager_args(&self, jm: &JobManagerPlan, bind: &str, etcd: Option<&str>) -> Vec<String> {
        let mut args = vec![
            "--bind".to_string(),
            bind.to_string(),
            "--data-dir".to_string(),
            jm.dir.display().to_string(),
            "--checkpoint-store".to_string(),
            self.checkpoint_store.clone(),
        ];
        if let Some(etcd) = etcd {
            args.extend([
                "--advertise-address".to_string(),
                format!("http://{bind}"),
                "--ha".to_string(),
                "etcd".to_string(),
                "--etcd-endpoints".to_string(),
                etcd.to_string(),
                "--ha-cluster-id".to_string(),
                "local".to_string(),
            ]);
        }
        args
    }
}

/// A task manager's command line: registering with `jobmanagers`, on free loopback ports.
fn taskmanager_args(jobmanagers: &str, slots: u32, data_dir: &Path) -> Vec<String> {
    vec![
        "--jobmanager".to_string(),
        jobmanagers.to_string(),
        "--bind".to_string(),
        "127.0.0.1:0".to_string(),
        "--data-bind".to_string(),
        "127.0.0.1:0".to_string(),
        "--slots".to_string(),
        slots.to_string(),
        "--data-dir".to_string(),
        data_dir.display().to_string(),
    ]
}

/// Starts what [`plan_local`] decides, in order: etcd, the job managers, the task managers; then waits until
/// every task manager is registered.
async fn start(
    cluster: &mut Cluster,
    args: &LocalArgs,
    dir: &Path,
    rpc_timeout: Duration,
) -> anyhow::Result<ClusterFile> {
    let startup_timeout = Duration::from_secs(args.startup_timeout);
    let plan = plan_local(args, dir)?;
    if let Some(logs) = &plan.logs {
        std::fs::create_dir_all(logs).with_context(|| format!("cannot create {}", logs.display()))?;
    }
    let etcd = if plan.ha {
        Some(start_etcd(cluster, args, dir, &plan.sink_for("etcd"), startup_timeout).await?)
    } else {
        None
    };

    let jm_bin = find_binary("weir-jobmanager", args.jobmanager_bin.as_deref());
    let mut jobmanagers = Vec::new();
    for jm in &plan.jobmanagers {
        std::fs::create_dir_all(&jm.dir).with_context(|| format!("cannot create {}", jm.dir.display()))?;
        let bind = match &jm.bind {
            Some(b) => b.clone(),
            None => format!("127.0.0.1:{}", free_port()?),
        };
        let jm_args = plan.jobmanager_args(jm, &bind, etcd.as_deref());
        let sink = plan.sink_for(&jm.name);
        let (jm_idx, mut jm_lines) = cluster.spawn(&jm.name, &jm_bin, &jm_args, &sink)?;
        let deadline = Instant::now() + startup_timeout;
        let jm_addr = cluster.read_ready(jm_idx, &mut jm_lines, &sink, deadline, parse_jobmanager_line).await?;
        sink.forward(jm_lines);
        let address = connectable_address(&jm_addr);
        let pid = cluster.procs[jm_idx].pid;
        eprintln!("job manager listening on {address} (pid {pid})");
        jobmanagers.push(JobManagerEntry { address, pid });
    }
    let jm_addr = jobmanagers.iter().map(|j| j.address.as_str()).collect::<Vec<_>>().join(",");
    let jobmanager_pid = jobmanagers[0].pid;

    // The task managers: all started at once, then their lines read in order.
    let tm_bin = find_binary("weir-taskmanager", args.taskmanager_bin.as_deref());
    let mut started = Vec::new();
    for (name, data_dir) in &plan.taskmanagers {
        std::fs::create_dir_all(data_dir).with_context(|| format!("cannot create {}", data_dir.display()))?;
        let tm_args = taskmanager_args(&jm_addr, args.slots, data_dir);
        let sink = plan.sink_for(name);
        let (idx, lines) = cluster.spawn(name, &tm_bin, &tm_args, &sink)?;
        started.push((idx, lines, sink, data_dir, tm_args));
    }
    let deadline = Instant::now() + startup_timeout;
    let mut taskmanagers = Vec::new();
    for (idx, mut lines, sink, data_dir, tm_args) in started {
        let line = cluster.read_ready(idx, &mut lines, &sink, deadline, parse_taskmanager_line).await?;
        sink.forward(lines);
        let pid = cluster.procs[idx].pid;
        eprintln!("task manager {} listening on {} (pid {pid})", line.id, line.rpc_address);
        taskmanagers.push(TaskManagerEntry {
            id: line.id,
            pid,
            rpc_address: line.rpc_address,
            data_address: line.data_address,
            data_dir: data_dir.display().to_string(),
            log: match &sink {
                Sink::File(p) => Some(p.display().to_string()),
                Sink::Terminal(_) => None,
            },
            command: std::iter::once(tm_bin.display().to_string()).chain(tm_args).collect(),
        });
    }

    // Registration.
    let ids: Vec<&str> = taskmanagers.iter().map(|t| t.id.as_str()).collect();
    wait_registered(cluster, &jm_addr, &ids, rpc_timeout, Instant::now() + startup_timeout).await?;

    Ok(ClusterFile {
        jobmanager: jm_addr,
        jobmanager_pid,
        jobmanagers,
        etcd,
        taskmanagers,
        dir: dir.display().to_string(),
        checkpoint_store: plan.checkpoint_store,
    })
}

/// A free TCP port on 127.0.0.1 (bound and released; the process started next binds it).
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts a one-member etcd with its data under DIR/etcd and waits until it takes connections; returns its
/// client URL.
async fn start_etcd(
    cluster: &mut Cluster,
    args: &LocalArgs,
    dir: &Path,
    sink: &Sink,
    startup_timeout: Duration,
) -> anyhow::Result<String> {
    let (client, peer) = (free_port()?, free_port()?);
    let data = dir.join("etcd");
    std::fs::create_dir_all(&data).with_context(|| format!("cannot create {}", data.display()))?;
    let bin = args.etcd_bin.clone().unwrap_or_else(|| PathBuf::from("etcd"));
    let url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let etcd_args = vec![
        "--name".to_string(),
        "weir-local".to_string(),
        "--data-dir".to_string(),
        data.display().to_string(),
        "--listen-client-urls".to_string(),
        url.clone(),
        "--advertise-client-urls".to_string(),
        url.clone(),
        "--listen-peer-urls".to_string(),
        peer_url.clone(),
        "--initial-advertise-peer-urls".to_string(),
        peer_url.clone(),
        "--initial-cluster".to_string(),
        format!("weir-local={peer_url}"),
    ];
    let (idx, lines) = cluster.spawn("etcd", &bin, &etcd_args, sink).with_context(|| {
        format!("cannot start etcd ({}); scripts/setup.sh installs Debian's etcd-server", bin.display())
    })?;
    sink.forward(lines);
    let deadline = Instant::now() + startup_timeout;
    loop {
        if let Some(status) = cluster.procs[idx].exit_status() {
            bail!("etcd exited while starting ({status}); {}", sink.hint());
        }
        if tokio::net::TcpStream::connect(("127.0.0.1", client)).await.is_ok() {
            eprintln!("etcd listening on {url} (pid {})", cluster.procs[idx].pid);
            return Ok(url);
        }
        if Instant::now() >= deadline {
            bail!("etcd did not listen on {url} in time (see --startup-timeout); {}", sink.hint());
        }
        tokio::time::sleep(REGISTRATION_POLL).await;
    }
}

/// Polls `ClusterOverview` until every task manager in `ids` is registered, showing progress on stderr.
async fn wait_registered(
    cluster: &Cluster,
    jm_addr: &str,
    ids: &[&str],
    rpc_timeout: Duration,
    deadline: Instant,
) -> anyhow::Result<()> {
    let mut progress = Progress::stderr();
    let mut jm: Option<JobManager> = None;
    let mut last_problem = String::new();
    loop {
        if let Some((name, status)) = cluster.first_exited() {
            progress.finish();
            bail!("{name} exited while the cluster was starting ({status})");
        }
        if jm.is_none() {
            match JobManager::connect(jm_addr, rpc_timeout, Default::default()).await {
                Ok(c) => jm = Some(c),
                Err(e) => last_problem = e.to_string(),
            }
        }
        if let Some(c) = &jm {
            match c.cluster_overview().await {
                Ok(overview) => {
                    let registered: Vec<&str> = overview.task_managers.iter().map(|t| t.id.as_str()).collect();
                    let ready = ids.iter().filter(|id| registered.contains(id)).count();
                    let line = format!("task managers registered: {ready}/{}", ids.len());
                    progress.update(&line, &line);
                    if ready == ids.len() {
                        progress.finish();
                        return Ok(());
                    }
                    last_problem = format!("registered task managers: {registered:?}, expected {ids:?}");
                }
                Err(e) => last_problem = e.to_string(),
            }
        }
        if Instant::now() >= deadline {
            progress.finish();
            bail!("the task managers did not all register with the job manager in time ({last_problem})");
        }
        tokio::time::sleep(REGISTRATION_POLL).await;
    }
}

/// Writes `cluster.json` atomically (a reader never sees half of it).
fn write_cluster_file(path: &Path, info: &ClusterFile) -> anyhow::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_string_pretty(info)? + "\n";
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(extra: &[&str]) -> LocalArgs {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Wrap {
            #[command(flatten)]
            local: LocalArgs,
        }
        let mut argv = vec!["weir", "--dir", "/d"];
        argv.extend_from_slice(extra);
        Wrap::parse_from(argv).local
    }

    #[test]
    fn the_default_plan_is_one_job_manager_and_one_task_manager_logging_here_with_checkpoints_under_dir() {
        let args = local(&[]);
        let plan = plan_local(&args, Path::new("/d")).expect("valid");
        assert!(!plan.ha && plan.logs.is_none());
        assert_eq!(plan.checkpoint_store, "file:///d/checkpoints");
        assert_eq!(
            plan.jobmanagers,
            vec![JobManagerPlan {
                name: "weir-jobmanager".into(),
                dir: PathBuf::from("/d/jobmanager"),
                bind: Some(args.bind.clone())
            }]
        );
        assert_eq!(plan.taskmanagers, vec![("weir-taskmanager-0".to_string(), PathBuf::from("/d/tm-0"))]);
        assert_eq!(plan.sink_for("weir-taskmanager-0"), Sink::Terminal("weir-taskmanager-0".into()));
        let jm = plan.jobmanager_args(&plan.jobmanagers[0], "127.0.0.1:6123", None);
        assert!(!jm.iter().any(|a| a.starts_with("--ha") || a == "--etcd-endpoints"), "{jm:?}");
    }

    #[test]
    fn several_job_managers_need_ha_and_an_unknown_ha_mode_is_refused() {
        let e = plan_local(&local(&["--jobmanagers", "2"]), Path::new("/d")).expect_err("refused");
        assert_eq!(e.to_string(), "--jobmanagers 2 needs --ha etcd");
        let e = plan_local(&local(&["--ha", "zookeeper"]), Path::new("/d")).expect_err("refused");
        assert_eq!(e.to_string(), "--ha: expected none or etcd, got \"zookeeper\"");
    }

    #[test]
    fn with_ha_only_the_first_job_manager_keeps_a_given_port_and_every_one_gets_the_ha_flags() {
        let args = local(&["--ha", "etcd", "--jobmanagers", "3", "--bind", "127.0.0.1:6123"]);
        let plan = plan_local(&args, Path::new("/d")).expect("valid");
        assert!(plan.ha);
        let binds: Vec<Option<&str>> = plan.jobmanagers.iter().map(|j| j.bind.as_deref()).collect();
        assert_eq!(binds, vec![Some("127.0.0.1:6123"), None, None]);
        assert_eq!(plan.jobmanagers[2].dir, PathBuf::from("/d/jobmanager-2"));
        assert_eq!(plan.jobmanagers[2].name, "weir-jobmanager-2");
        let jm = plan.jobmanager_args(&plan.jobmanagers[1], "127.0.0.1:7000", Some("http://127.0.0.1:2379"));
        let flag = |f: &str| jm.iter().position(|a| a == f).map(|i| jm[i + 1].as_str());
        assert_eq!(flag("--advertise-address"), Some("http://127.0.0.1:7000"));
        assert_eq!(flag("--etcd-endpoints"), Some("http://127.0.0.1:2379"));
        assert_eq!(flag("--data-dir"), Some("/d/jobmanager-1"));
        // Port 0 cannot be published: the first one gets a free port too.
        let plan = plan_local(&local(&["--ha", "etcd", "--bind", "127.0.0.1:0"]), Path::new("/d")).expect("valid");
        assert_eq!(plan.jobmanagers[0].bind, None);
    }

    #[test]
    fn logs_to_files_names_each_file_after_its_process() {
        let plan = plan_local(
            &local(&["--logs-to-files", "--taskmanagers", "2", "--checkpoint-store", "s3://b/c"]),
            Path::new("/d"),
        )
        .expect("valid");
        assert_eq!(plan.checkpoint_store, "s3://b/c");
        assert_eq!(plan.sink_for("weir-jobmanager"), Sink::File(PathBuf::from("/d/logs/jobmanager.log")));
        assert_eq!(plan.sink_for("weir-taskmanager-1"), Sink::File(PathBuf::from("/d/logs/taskmanager-1.log")));
        assert_eq!(plan.taskmanagers[1].1, PathBuf::from("/d/tm-1"));
        let tm = taskmanager_args("http://a:1,http://b:2", 4, Path::new("/d/tm-1"));
        assert_eq!(
            tm,
            [
                "--jobmanager",
                "http://a:1,http://b:2",
                "--bind",
                "127.0.0.1:0",
                "--data-bind",
                "127.0.0.1:0",
                "--slots",
                "4",
                "--data-dir",
                "/d/tm-1"
            ]
        );
    }

    #[test]
    fn jobmanager_line() {
        assert_eq!(
            parse_jobmanager_line("weir-jobmanager listening on http://127.0.0.1:6123"),
            Some("http://127.0.0.1:6123".to_string())
        );
        assert_eq!(
            parse_jobmanager_line("weir-jobmanager listening on http://[::1]:40000\r\n"),
            Some("http://[::1]:40000".to_string())
        );
        assert_eq!(parse_jobmanager_line("weir-jobmanager listening on"), None);
        assert_eq!(parse_jobmanager_line("weir-jobmanager listening on 127.0.0.1:1"), None);
        assert_eq!(parse_jobmanager_line("weir-taskmanager listening on http://h:1"), None);
        assert_eq!(parse_jobmanager_line("starting up"), None);
        assert_eq!(parse_jobmanager_line(""), None);
    }

    #[test]
    fn taskmanager_line() {
        assert_eq!(
            parse_taskmanager_line("weir-taskmanager tm-7f3a listening on http://127.0.0.1:40001 data 127.0.0.1:40002"),
            Some(TaskManagerLine {
                id: "tm-7f3a".into(),
                rpc_address: "http://127.0.0.1:40001".into(),
                data_address: "127.0.0.1:40002".into(),
            })
        );
        assert_eq!(parse_taskmanager_line("weir-taskmanager tm-1 listening on http://h:1"), None);
        assert_eq!(parse_taskmanager_line("weir-taskmanager tm-1 listening on http://h:1 data h:2 extra"), None);
        assert_eq!(parse_taskmanager_line("weir-jobmanager listening on http://h:1"), None);
    }

    #[test]
    fn wildcard_hosts_become_loopback() {
        assert_eq!(connectable_address("http://0.0.0.0:6123"), "http://127.0.0.1:6123");
        assert_eq!(connectable_address("http://[::]:6123"), "http://[::1]:6123");
        assert_eq!(connectable_address("http://10.1.2.3:6123"), "http://10.1.2.3:6123");
    }

    #[test]
    fn explicit_binary_wins_and_missing_falls_back_to_path() {
        assert_eq!(find_binary("weir-x", Some(Path::new("/opt/tm"))), PathBuf::from("/opt/tm"));
        assert_eq!(find_binary("weir-surely-not-built", None), PathBuf::from("weir-surely-not-built"));
    }

    #[test]
    fn cluster_file_json() {
        let f = ClusterFile {
            jobmanager: "http://127.0.0.1:6123".into(),
            jobmanager_pid: 10,
            jobmanagers: vec![JobManagerEntry { address: "http://127.0.0.1:6123".into(), pid: 10 }],
            etcd: None,
            taskmanagers: vec![TaskManagerEntry {
                id: "tm-a".into(),
                pid: 11,
                rpc_address: "http://127.0.0.1:5000".into(),
                data_address: "127.0.0.1:5001".into(),
                data_dir: "/d/tm-0".into(),
                log: None,
                command: vec!["weir-taskmanager".into()],
            }],
            dir: "/d".into(),
            checkpoint_store: "file:///d/checkpoints".into(),
        };
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["jobmanager"], "http://127.0.0.1:6123");
        assert_eq!(v["jobmanager_pid"], 10);
        assert_eq!(v["taskmanagers"][0]["id"], "tm-a");
        assert_eq!(v["taskmanagers"][0]["pid"], 11);
        assert_eq!(v["taskmanagers"][0]["log"], serde_json::Value::Null);
    }
}
