//! One child process of a test: spawned with its stderr and stdout in a log file, its stdout lines also
//! readable with a timeout (processes announce their addresses there), killed when dropped.

use anyhow::{anyhow, bail, Context, Result};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// A running (or exited) child process with its log file.
pub struct Process {
    name: String,
    child: Child,
    log: PathBuf,
    stdout_lines: Receiver<String>,
    exit: Option<ExitStatus>,
}

/// Makes the child die with its parent thread, so that no process outlives a test that was killed outright
/// (by a test runner's timeout, say) and never ran its destructors.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches nothing but the calling (child) process.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

impl Process {
    /// Starts `cmd`; its stderr and stdout are appended to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Process> {
        let mut log_file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open log file {}", log.display()))?;
        writeln!(log_file, "=== {name}: {}", describe(&cmd))?;
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::from(log_file.try_clone()?));
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        // Plain text in log files.
        cmd.env("NO_COLOR", "1");
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().with_context(|| format!("cannot start {name} ({})", describe(&cmd)))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, stdout_lines) = mpsc::channel();
        std::thread::Builder::new().name(format!("{name}-stdout")).spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(log_file, "{line}");
                let _ = tx.send(line);
            }
        })?;
        Ok(Process { name: name.to_string(), child, log: log.to_path_buf(), stdout_lines, exit: None })
    }

    /// The name given at spawn, e.g. `jobmanager` or `tm-2`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The operating-system process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log file holding the process's stderr and stdout.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Waits for the first stdout line for which `parse` returns something.
    pub fn wait_for_stdout<T>(&mut self, timeout: Duration, mut parse: impl FnMut(&str) -> Option<T>) -> Result<T> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout_lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(v) = parse(&line) {
                        return Ok(v);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    bail!("{} printed no expected line on stdout within {timeout:?}\n{}", self.name, self.tail(30))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // Stdout closed: the process exited (or closed stdout, which the binaries never do).
                    let status = self.wait_exit(Duration::from_secs(5)).ok();
                    bail!(
                        "{} exited before printing the expected line (status {})\n{}",
                        self.name,
                        status.map(|s| s.to_string()).unwrap_or_else(|| "unknown".into()),
                        self.tail(30)
                    )
                }
            }
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.poll_exit().is_none()
    }

    fn poll_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    /// Waits for the process to exit on its own.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.poll_exit() {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                bail!("{} (pid {}) still running after {timeout:?}", self.name, self.pid());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, as a crashing machine would; reaps the process.
    pub fn kill(&mut self) {
        if self.poll_exit().is_none() {
            let _ = self.child.kill();
            self.exit = self.child.wait().ok();
        }
    }

    /// SIGTERM, then waits up to `timeout` for the exit status. On timeout the process is killed and this is
    /// an error.
    pub fn terminate(&mut self, timeout: Duration) -> Result<ExitStatus> {
        if let Some(status) = self.poll_exit() {
            bail!("{} had already exited ({status}) before SIGTERM", self.name);
        }
        signal(self.pid(), libc::SIGTERM)?;
        match self.wait_exit(timeout) {
            Ok(status) => Ok(status),
            Err(e) => {
                self.kill();
                Err(e.context(format!("{} did not stop on SIGTERM; killed it", self.name)))
            }
        }
    }

    /// Peak resident memory (VmHWM) in KiB while the process runs.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        peak_rss_kib(self.pid())
    }

    /// The last `lines` lines of the log, headed by the process name.
    pub fn tail(&self, lines: usize) -> String {
        log_tail(&self.name, &self.log, lines)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends a signal to a process id.
pub fn signal(pid: u32, sig: libc::c_int) -> Result<()> {
    // SAFETY: kill(2) has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    if rc != 0 {
        return Err(anyhow!("kill({pid}, {sig}): {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Whether a process id names a live (not zombie) process.
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // Field 3 is the state; after the parenthesised command name.
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) != Some("Z"),
        Err(_) => false,
    }
}

/// Peak resident memory (VmHWM) of a process in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The last `lines` lines of a log file, headed by `name`; before them, the first few errors, warnings and
/// panics from earlier in the log (where the cause of a failure often is).
pub fn log_tail(name: &str, log: &Path, lines: usize) -> String {
    const EARLIER: usize = 15;
    let text = match std::fs::read(log) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => return format!("----- {name}: cannot read {}: {e}\n", log.display()),
    };
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    let notable: Vec<&str> = all[..start]
        .iter()
        .copied()
        .filter(|l| l.contains(" ERROR ") || l.contains(" WARN ") || l.contains("panicked"))
        .take(EARLIER)
        .collect();
    let mut out = String::new();
    if !notable.is_empty() {
        out.push_str(&format!("----- {name}: first errors and warnings before the tail\n"));
        for l in notable {
            out.push_str(l);
            out.push('\n');
        }
    }
    out.push_str(&format!("----- {name}: last {} of {} lines of {}\n", all.len() - start, all.len(), log.display()));
    for l in &all[start..] {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// What a short-lived command did.
#[derive(Debug)]
pub struct CommandOutput {
    /// Exit status.
    pub status: ExitStatus,
    /// Everything it printed on stdout.
    pub stdout: String,
    /// Everything it printed on stderr.
    pub stderr: String,
}

impl CommandOutput {
    /// The exit code (`None` when killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

impl std::fmt::Display for CommandOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}\n--- stdout:\n{}--- stderr:\n{}", self.status, self.stdout, self.stderr)
    }
}

/// Runs a command to completion, killing it after `timeout`.
pub fn run_with_timeout(mut cmd: Command, timeout: Duration) -> Result<CommandOutput> {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    die_with_parent(&mut cmd);
    let what = describe(&cmd);
    let mut child = cmd.spawn().with_context(|| format!("cannot run {what}"))?;
    let out = reader(child.stdout.take().expect("piped"));
    let err = reader(child.stderr.take().expect("piped"));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = out.join().map_err(|_| anyhow!("stdout reader panicked"))?;
    let stderr = err.join().map_err(|_| anyhow!("stderr reader panicked"))?;
    Ok(CommandOutput { status, stdout, stderr })
}

fn reader(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// A free TCP port on 127.0.0.1 (bound and released; fine for a server started right after).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Creates (truncates) a file and writes `text` to it.
pub fn write_file(path: &Path, text: &str) -> Result<()> {
    let mut f = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}
