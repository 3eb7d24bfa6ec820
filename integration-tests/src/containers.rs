//! Weir in containers (podman): the compose cluster of `deploy/compose.yaml`, started by `scripts/cluster-up.sh`
//! and removed by `scripts/cluster-down.sh` (also when a test fails), driven from the host with the `weir` CLI
//! over mutual TLS and a token, as an operator would.

use crate::process::{run_with_timeout, CommandOutput};
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The repository's root (scripts, deploy files).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// Podman's settings for this machine (runc, ulimits).
pub fn containers_conf() -> PathBuf {
    repo_root().join("deploy/containers/containers.conf")
}

/// Whether podman is installed (`scripts/setup.sh` installs it; tests skip, saying so, where it is not).
pub fn podman_available() -> bool {
    Command::new("podman").arg("--version").output().map(|o| o.status.success()).unwrap_or(false)
}

/// `podman ARGS`, bounded by `timeout`.
pub fn podman(args: &[&str], timeout: Duration) -> Result<CommandOutput> {
    let mut cmd = Command::new("podman");
    cmd.args(args).env("CONTAINERS_CONF", containers_conf());
    run_with_timeout(cmd, timeout)
}

/// `podman ARGS` that must succeed; returns its stdout.
pub fn podman_ok(args: &[&str], timeout: Duration) -> Result<String> {
    let out = podman(args, timeout)?;
    if !out.status.success() {
        bail!("podman {} failed: {out}", args.join(" "));
    }
    Ok(out.stdout)
}

/// Builds the images (`scripts/image.sh`): the first time about 4 minutes (debootstrap), then under a minute.
pub fn build_images() -> Result<String> {
    let mut cmd = Command::new(repo_root().join("scripts/image.sh"));
    cmd.env("CONTAINERS_CONF", containers_conf());
    let out = run_with_timeout(cmd, Duration::from_secs(900))?;
    if !out.status.success() {
        bail!("scripts/image.sh failed: {out}");
    }
    Ok(out.stdout.lines().last().unwrap_or_default().to_string())
}

/// A tool `scripts/setup.sh` installs into its Python venv (e.g. `kubernetes-validate`).
pub fn tools_bin(name: &str) -> PathBuf {
    let tools = std::env::var_os("WEIR_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/weir/tools"));
    tools.join("venv/bin").join(name)
}

/// A running compose cluster.
pub struct ComposeCluster {
    dir: tempfile::TempDir,
    /// The job managers' client addresses on the host.
    pub jobmanagers: Vec<String>,
    token_file: PathBuf,
    ca_file: PathBuf,
    /// Where the task managers' `/var/lib/weir/out` is on the host.
    pub out_dir: PathBuf,
    /// The compose project (its containers are `<project>_<service>_1`).
    pub project: String,
    /// How long `cluster-up.sh` took, start to ready.
    pub startup: Duration,
}

impl ComposeCluster {
    /// Starts the cluster under the compose project `project` and waits until it is ready.
    pub fn up(project: &str) -> Result<ComposeCluster> {
        let dir = tempfile::Builder::new().prefix("weir-compose-").tempdir()?;
        let mut cmd = Command::new(repo_root().join("scripts/cluster-up.sh"));
        cmd.env("WEIR_CLUSTER_DIR", dir.path()).env("WEIR_PROJECT", project).env("CONTAINERS_CONF", containers_conf());
        let started = Instant::now();
        let out = run_with_timeout(cmd, Duration::from_secs(300));
        let startup = started.elapsed();
        let down = |dir: &Path| {
            let _ = Self::down_dir(dir);
        };
        let out = match out {
            Ok(o) if o.status.success() => o,
            Ok(o) => {
                let logs = Self::logs_of(project);
                down(dir.path());
                bail!("scripts/cluster-up.sh failed: {o}\n{logs}");
            }
            Err(e) => {
                down(dir.path());
                return Err(e);
            }
        };
        let last = out.stdout.lines().last().unwrap_or_default();
        let info: serde_json::Value =
            serde_json::from_str(last).with_context(|| format!("cluster-up.sh's last line is not JSON: {last:?}"))?;
        let text = |k: &str| info[k].as_str().map(str::to_string).ok_or_else(|| anyhow!("no {k} in {info}"));
        let jobmanagers = info["jobmanagers"]
            .as_array()
            .ok_or_else(|| anyhow!("no jobmanagers in {info}"))?
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        Ok(ComposeCluster {
            jobmanagers,
            token_file: text("token_file")?.into(),
            ca_file: text("ca_file")?.into(),
            out_dir: text("out_dir")?.into(),
            project: text("project")?,
            dir,
            startup,
        })
    }

    fn down_dir(dir: &Path) -> Result<CommandOutput> {
        let mut cmd = Command::new(repo_root().join("scripts/cluster-down.sh"));
        cmd.arg(dir).env("CONTAINERS_CONF", containers_conf());
        run_with_timeout(cmd, Duration::from_secs(120))
    }

    /// The last lines of every container's log.
    fn logs_of(project: &str) -> String {
        let filter = format!("label=io.podman.compose.project={project}");
        let names = podman(&["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"], Duration::from_secs(20))
            .map(|o| o.stdout)
            .unwrap_or_default();
        let mut all = String::new();
        for name in names.lines() {
            let log = podman(&["logs", "--tail", "15", name], Duration::from_secs(20))
                .map(|o| format!("{}{}", o.stdout, o.stderr))
                .unwrap_or_default();
            all.push_str(&format!("----- {name}\n{log}\n"));
        }
        all
    }

    /// The last lines of every container's log.
    pub fn logs(&self) -> String {
        Self::logs_of(&self.project)
    }

    /// The container of a compose service.
    pub fn container(&self, service: &str) -> String {
        format!("{}_{service}_1", self.project)
    }

    /// `weir ARGS` on the host against the cluster (mutual TLS is only between members: the CLI checks the job
    /// managers' certificate and presents the token).
    pub fn weir(&self, args: &[&str]) -> Result<CommandOutput> {
        let mut cmd = Command::new(crate::binary("weir")?);
        cmd.args(args)
            .env("WEIR_JOBMANAGER", self.jobmanagers.join(","))
            .env("WEIR_TOKEN_FILE", &self.token_file)
            .env("WEIR_TLS_CA", &self.ca_file)
            .env_remove("WEIR_TLS_CERT")
            .env_remove("WEIR_TLS_KEY");
        run_with_timeout(cmd, Duration::from_secs(60))
    }

    /// `weir ARGS --output json`, which must succeed.
    pub fn weir_json(&self, args: &[&str]) -> Result<serde_json::Value> {
        let mut all = args.to_vec();
        all.extend(["--output", "json"]);
        let out = self.weir(&all)?;
        if !out.status.success() {
            bail!("weir {} failed: {out}", all.join(" "));
        }
        serde_json::from_str(&out.stdout).with_context(|| format!("weir {} printed no JSON: {out}", all.join(" ")))
    }

    /// Submits a spec (YAML text); returns the job id.
    pub fn submit(&self, spec: &str, from_savepoint: Option<&str>) -> Result<String> {
        static SPECS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = SPECS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = self.dir.path().join(format!("spec-{n}.yaml"));
        std::fs::write(&file, spec)?;
        let path = file.to_string_lossy().to_string();
        let mut args = vec!["job", "submit", path.as_str()];
        if let Some(sp) = from_savepoint {
            args.extend(["--from-savepoint", sp]);
        }
        let out = self.weir(&args)?;
        if !out.status.success() {
            bail!("submitting failed: {out}");
        }
        Ok(out.stdout.trim().lines().last().unwrap_or_default().trim().to_string())
    }

    /// The job's status (`weir job status --output json`).
    pub fn job(&self, id: &str) -> Result<serde_json::Value> {
        self.weir_json(&["job", "status", id])
    }

    /// Waits until `done` holds of the job's status, or fails (naming the last status) after `timeout`. A job
    /// manager that does not answer for a moment (a failover) is waited out.
    pub fn wait_job(
        &self,
        id: &str,
        timeout: Duration,
        what: &str,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> Result<serde_json::Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = match self.job(id) {
                Ok(job) if done(&job) => return Ok(job),
                Ok(job) if job["state"] == "FAILED" || job["state"] == "CANCELED" => {
                    bail!("waiting for {what}: the job ended: {job}")
                }
                Ok(job) => job.to_string(),
                Err(e) => format!("{e:#}"),
            };
            if Instant::now() >= deadline {
                bail!("waiting for {what}: not within {timeout:?}; last: {last}\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The compose service of the leading job manager (its readiness says so).
    pub fn leader(&self) -> Result<String> {
        for service in ["jobmanager1", "jobmanager2"] {
            let out = podman(
                &[
                    "exec",
                    &self.container(service),
                    "/usr/local/bin/weir",
                    "health",
                    "127.0.0.1:6129",
                    "--service",
                    "weir.ready",
                ],
                Duration::from_secs(20),
            )?;
            if out.status.success() {
                return Ok(service.to_string());
            }
        }
        bail!("no job manager is ready (leading)")
    }

    /// Stops a service's container as an upgrade does: SIGTERM, and an error (with the logs) if it needed
    /// the SIGKILL that follows after podman's default grace period of 10 s.
    pub fn stop_container(&self, service: &str) -> Result<()> {
        let name = self.container(service);
        let out = podman(&["stop", "--time", "10", &name], Duration::from_secs(60))?;
        if !out.status.success() || out.stderr.contains("resorting to SIGKILL") {
            bail!("podman stop {name}: it did not stop on SIGTERM within 10 s: {out}\n{}", self.logs());
        }
        Ok(())
    }

    /// Starts again (on the current images) whatever containers of the cluster are missing, and waits until it
    /// is ready: how an upgrade brings the recreated containers up.
    pub fn recreate(&self) -> Result<()> {
        let mut cmd = Command::new(repo_root().join("scripts/cluster-up.sh"));
        cmd.env("WEIR_CLUSTER_DIR", self.dir.path())
            .env("WEIR_PROJECT", &self.project)
            .env("CONTAINERS_CONF", containers_conf());
        let out = run_with_timeout(cmd, Duration::from_secs(300))?;
        if !out.status.success() {
            bail!("scripts/cluster-up.sh (again) failed: {out}\n{}", self.logs());
        }
        Ok(())
    }

    /// Removes the cluster (also done on drop).
    pub fn down(self) -> Result<()> {
        let out = Self::down_dir(self.dir.path())?;
        if !out.status.success() {
            bail!("scripts/cluster-down.sh failed: {out}");
        }
        Ok(())
    }
}

impl Drop for ComposeCluster {
    fn drop(&mut self) {
        let _ = Self::down_dir(self.dir.path());
    }
}
