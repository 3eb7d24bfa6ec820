//! High-availability clusters for tests: real etcd members (Debian's `etcd`), several job managers with
//! `--ha etcd`, task managers that know every job-manager address, and the `weir` CLI (which follows the
//! leader) as the client. Ports are free ones on 127.0.0.1, files live in a temporary directory, and every
//! process is killed when the cluster is dropped.

use crate::cluster::{binary, wait_until};
use crate::process::{free_port, run_with_timeout, Process};
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long a process may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The `etcd` binary (Debian's `etcd-server`, installed by `scripts/setup.sh`).
pub fn etcd_binary() -> Result<PathBuf> {
    for p in ["/usr/bin/etcd", "/usr/local/bin/etcd"] {
        if Path::new(p).exists() {
            return Ok(PathBuf::from(p));
        }
    }
    bail!("etcd not found: run scripts/setup.sh (it installs Debian's etcd-server)")
}

/// Adds the flags of etcd member `name` (data in `data`, serving clients at `client_url` and peers at
/// `peer_url`, in the cluster `initial_cluster` = `name=peer_url,…`) to an `etcd` command.
pub fn etcd_member_args(
    cmd: &mut Command,
    name: &str,
    data: &Path,
    client_url: &str,
    peer_url: &str,
    initial_cluster: &str,
) {
    cmd.arg("--name").arg(name).arg("--data-dir").arg(data);
    cmd.args(["--listen-client-urls", client_url, "--advertise-client-urls", client_url]);
    cmd.args(["--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url]);
    cmd.args(["--initial-cluster", initial_cluster]);
}

struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    process: Option<Process>,
}

/// An etcd cluster of one or more members on loopback.
pub struct EtcdCluster {
    dir: PathBuf,
    members: Vec<Member>,
    /// TLS for clients (mutual: etcd requires a client certificate of the same CA).
    tls: Option<crate::pki::MemberFiles>,
}

impl EtcdCluster {
    /// Starts `n` members under `dir` and waits until each serves clients.
    pub fn start(dir: &Path, n: usize) -> Result<EtcdCluster> {
        EtcdCluster::start_with(dir, n, None)
    }

    /// [`EtcdCluster::start`], serving clients over TLS with `tls` (and requiring client certificates).
    pub fn start_with(dir: &Path, n: usize, tls: Option<crate::pki::MemberFiles>) -> Result<EtcdCluster> {
        let mut members = Vec::new();
        for i in 0..n {
            members.push(Member {
                name: format!("etcd-{i}"),
                client_port: free_port()?,
                peer_port: free_port()?,
                process: None,
            });
        }
        let mut cluster = EtcdCluster { dir: dir.to_path_buf(), members, tls };
        for i in 0..n {
            cluster.spawn(i, "new")?;
        }
        for i in 0..n {
            cluster.wait_ready(i)?;
        }
        Ok(cluster)
    }

    fn initial_cluster(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn spawn(&mut self, i: usize, state: &str) -> Result<()> {
        let initial = self.initial_cluster();
        let m = &self.members[i];
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let data = self.dir.join(&m.name);
        std::fs::create_dir_all(&data)?;
        let mut cmd = Command::new(etcd_binary()?);
        let (client, peer) =
            (format!("{scheme}://127.0.0.1:{}", m.client_port), format!("http://127.0.0.1:{}", m.peer_port));
        etcd_member_args(&mut cmd, &m.name, &data, &client, &peer, &initial);
        cmd.arg("--initial-cluster-state")
            .arg(state)
            .arg("--initial-cluster-token")
            .arg(format!("weir-test-{}", std::process::id()))
            .env("ETCD_UNSUPPORTED_ARCH", std::env::consts::ARCH);
        if let Some(tls) = &self.tls {
            cmd.arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--client-cert-auth");
        }
        let log = self.dir.join(format!("{}.log", m.name));
        let process = Process::spawn(&m.name, cmd, &log)?;
        self.members[i].process = Some(process);
        Ok(())
    }

    fn ready_lines(&self, i: usize) -> usize {
        let log = self.dir.join(format!("{}.log", self.members[i].name));
        std::fs::read_to_string(&log).unwrap_or_default().matches("ready to serve client requests").count()
    }

    /// Waits until member `i` logged that it serves clients more than `seen` times (its log is appended to
    /// across restarts).
    fn wait_ready_after(&self, i: usize, seen: usize) -> Result<()> {
        wait_until(&format!("for {} to serve clients", self.members[i].name), START_TIMEOUT, || {
            Ok((self.ready_lines(i) > seen).then_some(()))
        })
    }

    fn wait_ready(&self, i: usize) -> Result<()> {
        self.wait_ready_after(i, 0)
    }

    /// Client URLs of every member, comma-separated.
    pub fn endpoints(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        self.members.iter().map(|m| format!("{scheme}://127.0.0.1:{}", m.client_port)).collect::<Vec<_>>().join(",")
    }

    /// SIGKILLs member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(p) = self.members[i].process.as_mut() {
            p.kill();
        }
    }

    /// Starts members `which` again with their data directories, all at once (a member without a quorum
    /// does not serve), and waits until each serves.
    pub fn restart(&mut self, which: &[usize]) -> Result<()> {
        let seen: Vec<usize> = which.iter().map(|&i| self.ready_lines(i)).collect();
        for &i in which {
            self.spawn(i, "existing")?;
        }
        for (&i, &n) in which.iter().zip(&seen) {
            self.wait_ready_after(i, n)?;
        }
        Ok(())
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

/// Several HA job managers, their task managers and an etcd cluster.
pub struct HaCluster {
    /// The cluster's directory; kept when a test fails.
    dir: Option<tempfile::TempDir>,
    /// The etcd cluster.
    pub etcd: EtcdCluster,
    jobmanagers: Vec<(String, Option<Process>)>,
    /// Each job manager's metrics address, with [`HaOptions::metrics`].
    metrics: Vec<Option<String>>,
    /// Each job manager's health-service address, with [`HaOptions::health`].
    health: Vec<Option<String>>,
    taskmanagers: Vec<Process>,
    jm_args: Vec<String>,
    /// Data-plane address of each task manager.
    pub data_addresses: Vec<String>,
    /// gRPC address (`http://` or `https://`) of each task manager.
    pub rpc_addresses: Vec<String>,
    slots: u32,
    cli_args: Vec<String>,
    cli_env: Vec<(String, String)>,
    first_jm_env: Vec<(String, String)>,
    /// The proxy between the first job manager and etcd (with [`HaOptions::first_jm_etcd_proxy`]).
    pub etcd_proxy: Option<crate::proxy::TcpProxy>,
    /// The proxy between the first job manager and the S3 checkpoint store (with
    /// [`HaOptions::first_jm_store_proxy`]).
    pub store_proxy: Option<crate::proxy::TcpProxy>,
    /// The S3 server of the checkpoint store, when there is one.
    _s3: Option<crate::s3::S3Server>,
    /// Environment every process gets (the store's), under `env`.
    store_env: Vec<(String, String)>,
    env: Vec<(String, String)>,
    stopped: bool,
    _lock: crate::lock::ClusterLock,
}

/// What HA cluster to start.
#[derive(Clone, Debug)]
pub struct HaOptions {
    /// Job managers.
    pub jobmanagers: usize,
    /// Task managers.
    pub taskmanagers: usize,
    /// Slots per task manager.
    pub slots: u32,
    /// etcd members.
    pub etcd_members: usize,
    /// Lease TTL of the leader.
    pub lease_ttl_ms: u64,
    /// Extra flags of every job manager.
    pub jm_args: Vec<String>,
    /// Extra flags of every task manager.
    pub tm_args: Vec<String>,
    /// Extra flags of every `weir` call (`--tls-ca`, say).
    pub cli_args: Vec<String>,
    /// Environment of every `weir` call (`WEIR_TOKEN`, say).
    pub cli_env: Vec<(String, String)>,
    /// Environment of the first job manager only (which is started, and leads, before the others start).
    pub first_jm_env: Vec<(String, String)>,
    /// The first job manager reaches etcd through a [`TcpProxy`] the test can take down (a partition
    /// between that job manager and etcd only).
    pub first_jm_etcd_proxy: bool,
    /// The checkpoint store is an S3 bucket (moto) that the first job manager reaches through a [`TcpProxy`]
    /// the test can stall (a store that stops answering that job manager only); everyone else reaches it
    /// directly.
    pub first_jm_store_proxy: bool,
    /// Every job manager serves Prometheus metrics on a port of its own ([`HaCluster::metrics`]).
    pub metrics: bool,
    /// Every job manager serves the gRPC health service on a port of its own ([`HaCluster::ready`]).
    pub health: bool,
    /// etcd serves clients over TLS with these files (the job managers need TLS flags of the same CA).
    pub etcd_tls: Option<crate::pki::MemberFiles>,
}

impl Default for HaOptions {
    fn default() -> Self {
        HaOptions {
            jobmanagers: 3,
            taskmanagers: 2,
            slots: 2,
            etcd_members: 1,
            lease_ttl_ms: 3000,
            jm_args: Vec::new(),
            tm_args: Vec::new(),
            cli_args: Vec::new(),
            cli_env: Vec::new(),
            first_jm_env: Vec::new(),
            first_jm_etcd_proxy: false,
            first_jm_store_proxy: false,
            metrics: false,
            health: false,
            etcd_tls: None,
        }
    }
}

impl HaCluster {
    /// Starts etcd, the job managers (one becomes leader) and the task managers.
    pub fn start(options: HaOptions) -> Result<HaCluster> {
        binary("weir-jobmanager")?;
        let lock = crate::lock::ClusterLock::acquire(
            &crate::lock::lock_path(&crate::cluster::bin_dir()?),
            crate::lock::LOCK_TIMEOUT,
        )?;
        let dir = tempfile::Builder::new().prefix("weir-ha-").tempdir()?;
        std::fs::create_dir_all(dir.path().join("logs"))?;
        let etcd = EtcdCluster::start_with(dir.path(), options.etcd_members, options.etcd_tls.clone())?;
        let mut store = format!("file://{}", dir.path().join("checkpoints").display());
        let mut first_jm_env = options.first_jm_env.clone();
        let (mut s3, mut store_proxy, mut store_env) = (None, None, Vec::new());
        if options.first_jm_store_proxy {
            let server = crate::s3::S3Server::start()?;
            let proxy = crate::proxy::TcpProxy::start(server.addr())?;
            let direct = server.endpoint("checkpoints");
            store = direct.url();
            store_env = direct.env();
            // The first job manager's variables come after everyone's: its endpoint is the proxy.
            first_jm_env.extend(server.endpoint_via(proxy.addr(), "checkpoints").env());
            (s3, store_proxy) = (Some(server), Some(proxy));
        }
        let mut jm_args = vec![
            "--ha".to_string(),
            "etcd".into(),
            "--ha-cluster-id".into(),
            "test".into(),
            "--ha-lease-ttl-ms".into(),
            options.lease_ttl_ms.to_string(),
            "--etcd-timeout-ms".into(),
            "2000".into(),
            "--checkpoint-store".into(),
            store,
            "--heartbeat-interval-ms".into(),
            "300".into(),
            "--heartbeat-timeout-ms".into(),
            "3000".into(),
        ];
        jm_args.extend(options.jm_args.iter().cloned());
        let mut cluster = HaCluster {
            dir: Some(dir),
            etcd,
            jobmanagers: Vec::new(),
            metrics: Vec::new(),
            health: Vec::new(),
            taskmanagers: Vec::new(),
            jm_args,
            data_addresses: Vec::new(),
            rpc_addresses: Vec::new(),
            slots: options.slots,
            cli_args: options.cli_args.clone(),
            cli_env: options.cli_env.clone(),
            first_jm_env,
            etcd_proxy: None,
            store_proxy,
            _s3: s3,
            store_env,
            env: Vec::new(),
            stopped: false,
            _lock: lock,
        };
        for _ in 0..options.jobmanagers {
            let port = free_port()?;
            cluster.jobmanagers.push((format!("127.0.0.1:{port}"), None));
            let metrics = if options.metrics { Some(format!("127.0.0.1:{}", free_port()?)) } else { None };
            cluster.metrics.push(metrics);
            let health = if options.health { Some(format!("127.0.0.1:{}", free_port()?)) } else { None };
            cluster.health.push(health);
        }
        if options.first_jm_etcd_proxy {
            let endpoints = cluster.etcd.endpoints();
            let first =
                endpoints.split(',').next().unwrap_or_default().split("://").nth(1).unwrap_or_default().to_string();
            cluster.etcd_proxy = Some(crate::proxy::TcpProxy::start(first.parse()?)?);
        }
        // The first job manager leads: the others start once it does.
        cluster.start_jobmanager(0)?;
        cluster.wait_for_leader(Duration::from_secs(30))?;
        for i in 1..options.jobmanagers {
            cluster.start_jobmanager(i)?;
        }
        for i in 0..options.taskmanagers {
            cluster.start_taskmanager(&options.tm_args)?;
            let _ = i;
        }
        cluster.wait_for_leader(Duration::from_secs(30))?;
        wait_until("for the task managers to register", START_TIMEOUT, || {
            let o = cluster.cli_json(&["cluster"])?;
            let n = o["task_managers"].as_array().map_or(0, |a| a.len());
            Ok((n == options.taskmanagers).then_some(()))
        })?;
        Ok(cluster)
    }

    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("dir lives as long as the cluster").path()
    }

    /// A fresh directory for a job's output.
    pub fn output_dir(&self, name: &str) -> Result<PathBuf> {
        let d = self.dir().join("output").join(name);
        std::fs::create_dir_all(&d)?;
        Ok(d)
    }

    /// Every job manager's client address, comma-separated.
    pub fn addresses(&self) -> String {
        self.jobmanagers.iter().map(|(a, _)| format!("http://{a}")).collect::<Vec<_>>().join(",")
    }

    /// Extra environment for processes started from now on.
    pub fn set_env(&mut self, env: Vec<(String, String)>) {
        self.env = env;
    }

    /// Starts job manager `i` (again) on its address.
    pub fn start_jobmanager(&mut self, i: usize) -> Result<()> {
        let addr = self.jobmanagers[i].0.clone();
        let data = self.dir().join(format!("jm-{i}"));
        std::fs::create_dir_all(&data)?;
        let log = self.dir().join("logs").join(format!("jobmanager-{i}.log"));
        let mut last = None;
        // A port just released may take a moment to bind again.
        for _ in 0..10 {
            let mut cmd = Command::new(binary("weir-jobmanager")?);
            let etcd = match (&self.etcd_proxy, i) {
                (Some(proxy), 0) => {
                    format!("{}://{}", if self.etcd.tls.is_some() { "https" } else { "http" }, proxy.addr())
                }
                _ => self.etcd.endpoints(),
            };
            cmd.arg("--bind")
                .arg(&addr)
                .arg("--data-dir")
                .arg(&data)
                .args(&self.jm_args)
                .arg("--etcd-endpoints")
                .arg(etcd)
                .envs(self.store_env.clone())
                .envs(self.env.clone());
            if i == 0 {
                cmd.envs(self.first_jm_env.clone());
            }
            if let Some(m) = &self.metrics[i] {
                cmd.arg("--metrics-bind").arg(m);
            }
            if let Some(h) = &self.health[i] {
                cmd.arg("--health-bind").arg(h);
            }
            let mut p = Process::spawn(&format!("jobmanager-{i}"), cmd, &log)?;
            match p.wait_for_stdout(START_TIMEOUT, |l| l.starts_with("weir-jobmanager listening on").then_some(())) {
                Ok(()) => {
                    self.jobmanagers[i].1 = Some(p);
                    return Ok(());
                }
                Err(e) => {
                    p.kill();
                    last = Some(e);
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
        Err(last.expect("tried").context(format!("cannot start job manager {i} on {addr}")))
    }

    /// Starts one more task manager with extra flags; returns its index (it may or may not register).
    pub fn start_taskmanager(&mut self, extra: &[String]) -> Result<usize> {
        let i = self.taskmanagers.len();
        let data = self.dir().join(format!("tm-{i}"));
        std::fs::create_dir_all(&data)?;
        let log = self.dir().join("logs").join(format!("taskmanager-{i}.log"));
        let mut cmd = Command::new(binary("weir-taskmanager")?);
        cmd.arg("--jobmanager")
            .arg(self.addresses())
            .arg("--slots")
            .arg(self.slots.to_string())
            .arg("--data-dir")
            .arg(&data)
            .arg("--tm-id")
            .arg(format!("tm-{i}"))
            .args(extra)
            .envs(self.store_env.clone())
            .envs(self.env.clone());
        let mut p = Process::spawn(&format!("taskmanager-{i}"), cmd, &log)?;
        // `weir-taskmanager <id> listening on <rpc> data <data>`
        let (rpc, data) = p.wait_for_stdout(START_TIMEOUT, |l| {
            let rest = l.strip_prefix("weir-taskmanager")?.split(" listening on ").nth(1)?;
            let (rpc, data) = rest.split_once(" data ")?;
            Some((rpc.trim().to_string(), data.trim().to_string()))
        })?;
        self.taskmanagers.push(p);
        self.data_addresses.push(data);
        self.rpc_addresses.push(rpc);
        Ok(i)
    }

    /// Runs `weir ARGS --jobmanager <all> --output json` and parses its stdout.
    pub fn cli_json(&self, args: &[&str]) -> Result<serde_json::Value> {
        let out = self.cli(args)?;
        if out.code() != Some(0) {
            bail!("weir {}: {}", args.join(" "), out.stderr.trim());
        }
        serde_json::from_str(&out.stdout).with_context(|| format!("weir {} printed {:?}", args.join(" "), out.stdout))
    }

    /// Runs `weir ARGS` against the cluster with exactly the environment and flags given (no token, no TLS
    /// files of the cluster's own).
    pub fn cli_bare(&self, args: &[&str], env: &[(&str, &str)]) -> Result<crate::process::CommandOutput> {
        let mut cmd = Command::new(binary("weir")?);
        cmd.args(args).arg("--jobmanager").arg(self.addresses()).arg("--rpc-timeout").arg("3").env_remove("WEIR_TOKEN");
        for (k, v) in env {
            cmd.env(k, v);
        }
        run_with_timeout(cmd, Duration::from_secs(30))
    }

    /// Runs `weir ARGS --jobmanager <all> --output json`.
    pub fn cli(&self, args: &[&str]) -> Result<crate::process::CommandOutput> {
        let mut cmd = Command::new(binary("weir")?);
        cmd.args(args)
            .arg("--jobmanager")
            .arg(self.addresses())
            .arg("--output")
            .arg("json")
            .arg("--rpc-timeout")
            .arg("3")
            .args(&self.cli_args)
            .envs(self.env.clone())
            .envs(self.cli_env.clone());
        run_with_timeout(cmd, Duration::from_secs(30))
    }

    /// The leader's index, once one leads and answers.
    pub fn wait_for_leader(&self, timeout: Duration) -> Result<usize> {
        wait_until("for a leader", timeout, || {
            let Ok(o) = self.cli_json(&["cluster"]) else { return Ok(None) };
            let leader = o["leader"].as_str().unwrap_or_default();
            let leader = leader.trim_start_matches("http://").trim_start_matches("https://").to_string();
            Ok(self.jobmanagers.iter().position(|(a, _)| *a == leader))
        })
    }

    /// The Prometheus text of job manager `i` (with [`HaOptions::metrics`]).
    pub fn metrics(&self, i: usize) -> Result<String> {
        use std::io::{Read, Write};
        let addr = self.metrics[i].as_ref().ok_or_else(|| anyhow!("job manager {i} serves no metrics"))?;
        let mut s = std::net::TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        Ok(text)
    }

    /// Whether job manager `i` says it is ready (`weir health ADDR --service weir.ready` exits 0), with
    /// [`HaOptions::health`]: a job manager is ready while it leads.
    pub fn ready(&self, i: usize) -> Result<bool> {
        let addr = self.health[i].as_ref().ok_or_else(|| anyhow!("job manager {i} serves no health service"))?;
        let mut cmd = Command::new(binary("weir")?);
        cmd.args(["health", addr, "--service", "weir.ready"]);
        let out = run_with_timeout(cmd, Duration::from_secs(10))?;
        match out.code() {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => bail!("weir health {addr}: {out}"),
        }
    }

    /// SIGKILLs job manager `i`.
    pub fn kill_jobmanager(&mut self, i: usize) {
        if let Some(p) = self.jobmanagers[i].1.as_mut() {
            p.kill();
        }
    }

    /// Pauses (SIGSTOP) or resumes (SIGCONT) job manager `i`.
    pub fn signal_jobmanager(&mut self, i: usize, sig: libc::c_int) -> Result<()> {
        let pid = self.jobmanagers[i].1.as_ref().ok_or_else(|| anyhow!("job manager {i} is not running"))?.pid();
        crate::process::signal(pid, sig)
    }

    /// Everything job manager `i` logged.
    pub fn jobmanager_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir().join("logs").join(format!("jobmanager-{i}.log"))).unwrap_or_default()
    }

    /// Every log of the cluster (job managers, task managers, etcd), concatenated.
    pub fn all_logs(&self) -> String {
        let mut all = String::new();
        for dir in [self.dir().join("logs"), self.dir().to_path_buf()] {
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for e in entries.flatten() {
                    if e.path().extension().is_some_and(|x| x == "log") {
                        all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
                    }
                }
            }
        }
        all
    }

    /// Writes the job's spec into the cluster's directory, submits it with `weir job submit` and returns its id.
    pub fn submit(&self, job: &crate::CountJob) -> Result<String> {
        self.submit_yaml(&job.name, &job.yaml())
    }

    /// Writes `yaml` as `<name>.yaml` into the cluster's directory, submits it with `weir job submit` and returns
    /// the job's id.
    pub fn submit_yaml(&self, name: &str, yaml: &str) -> Result<String> {
        let spec = self.dir().join(format!("{name}.yaml"));
        std::fs::write(&spec, yaml)?;
        let out = self.cli_json(&["job", "submit", &spec.display().to_string()])?;
        out["id"].as_str().map(str::to_string).ok_or_else(|| anyhow!("weir job submit printed no id: {out}"))
    }

    /// A job's JSON as `weir job status` prints it.
    pub fn job(&self, id: &str) -> Result<serde_json::Value> {
        self.cli_json(&["job", "status", id])
    }

    /// Waits until a job is in `state`; returns its JSON.
    pub fn wait_for_state(&self, id: &str, state: &str, timeout: Duration) -> Result<serde_json::Value> {
        let began = Instant::now();
        wait_until(&format!("for job {id} to be {state}"), timeout, || {
            let Ok(j) = self.job(id) else { return Ok(None) };
            if j["state"] == "FAILED" {
                bail!("job {id} failed after {:?}: {}", began.elapsed(), j["failure_reason"]);
            }
            Ok((j["state"] == state).then_some(j))
        })
    }

    /// Stops every process; the directory is removed.
    pub fn stop(mut self) {
        self.stopped = true;
        self.kill_all();
    }

    fn kill_all(&mut self) {
        for p in &mut self.taskmanagers {
            p.kill();
        }
        for (_, p) in &mut self.jobmanagers {
            if let Some(p) = p.as_mut() {
                p.kill();
            }
        }
        for i in 0..self.etcd.len() {
            self.etcd.kill(i);
        }
    }
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        self.kill_all();
        if !self.stopped {
            if let Some(dir) = self.dir.take() {
                let kept = dir.keep();
                eprintln!("HA cluster directory kept for inspection: {}", kept.display());
                for (i, _) in self.jobmanagers.iter().enumerate() {
                    let log = kept.join("logs").join(format!("jobmanager-{i}.log"));
                    eprintln!("{}", crate::process::log_tail(&format!("jobmanager-{i}"), &log, 40));
                }
            }
        }
    }
}
