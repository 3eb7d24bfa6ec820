//! Fault injection on the control path, in the style of TiKV's failpoints (the `fail` crate): named points
//! where a real fault lands — object-store calls, job-store writes, control RPCs in both directions, the
//! asynchronous snapshot upload, the sink's commit, the gap between writing `_metadata` and recording a
//! checkpoint. A test arms them in the real binaries through the `WEIR_FAILPOINTS` environment variable, read
//! once at start: `name=actions;name=actions…`, where `actions` is the `fail` crate's syntax
//! (`[p%][n*]task[(arg)]`, chained with `->`), e.g. `store-put=10%return(error)` or
//! `job-store-save=3*off->return(error:disk full)`.
//!
//! Weir reads the `return` argument itself, so that asynchronous code never blocks a runtime thread:
//! `error[:message]` fails the call, `delay:MS` waits that long before the call goes on, `exit` ends the
//! process at once (as a SIGKILL would: no cleanup). The `fail` crate's own `sleep`, `pause` and `panic`
//! tasks block or unwind the calling thread and are meant for synchronous points only.
//!
//! No point sits on the per-record path: they cost a lookup in an empty map per control call.

use std::time::Duration;

/// The error an armed failpoint injects: the call at `point` fails with `message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (failpoint {point})")]
pub struct InjectedFault {
    /// The failpoint.
    pub point: String,
    /// The message it was armed with.
    pub message: String,
}

/// The environment variable that arms failpoints at process start.
pub const ENV: &str = "WEIR_FAILPOINTS";

/// Every failpoint name, so that a misspelt one in [`ENV`] is refused instead of silently doing nothing.
pub const POINTS: &[&str] = &[
    // Object store (both sides): every put, get, delete and list.
    "store-put",
    "store-get",
    "store-delete",
    "store-list",
    // The job manager's job store: every write of a job record.
    "job-store-save",
    // Between writing a checkpoint's `_metadata` and recording the checkpoint in the job store.
    "checkpoint-after-metadata",
    // The job manager's sending of a checkpoint notification (a delay holds it back).
    "jm-send-notify",
    // The HA leader's health probe (a delay makes it hang: the leader resigns).
    "leader-health",
    // Job manager → task manager RPCs, as the task manager receives them.
    "rpc-deploy",
    "rpc-trigger",
    "rpc-notify",
    "rpc-cancel",
    "rpc-end-input",
    // Task manager → job manager RPCs, as the job manager receives them.
    "rpc-register",
    "rpc-heartbeat",
    "rpc-task-state",
    "rpc-acknowledge",
    "rpc-decline",
    // A task's asynchronous snapshot upload, before anything is uploaded.
    "task-upload",
    // A sink's commit of a pending file (the rename that makes it visible).
    "sink-commit",
];

/// What an armed failpoint asks of the code that reached it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Fail the call with this message.
    Error(String),
    /// Wait this long, then go on.
    Delay(Duration),
    /// End the process now.
    Exit,
}

/// A `WEIR_FAILPOINTS` value that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FaultConfigError {
    /// An entry is not `name=actions`.
    #[error("{ENV}: entry {0:?} is not name=actions")]
    Malformed(String),
    /// The name is not a failpoint.
    #[error("{ENV}: unknown failpoint {name:?} (known: {known})")]
    UnknownPoint {
        /// The name given.
        name: String,
        /// The known names.
        known: String,
    },
    /// The `fail` crate refused the actions.
    #[error("{ENV}: failpoint {name:?}: {reason}")]
    BadActions {
        /// The failpoint.
        name: String,
        /// Why.
        reason: String,
    },
}

/// Arms the failpoints named in [`ENV`], if it is set; returns how many were armed.
pub fn arm_from_env() -> Result<usize, FaultConfigError> {
    match std::env::var(ENV) {
        Ok(spec) => arm(&spec),
        Err(_) => Ok(0),
    }
}

/// Arms the failpoints of a `name=actions;…` list.
pub fn arm(spec: &str) -> Result<usize, FaultConfigError> {
    let mut n = 0;
    for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, actions) = entry.split_once('=').ok_or_else(|| FaultConfigError::Malformed(entry.to_string()))?;
        let name = name.trim();
        if !POINTS.contains(&name) {
            return Err(FaultConfigError::UnknownPoint { name: name.to_string(), known: POINTS.join(", ") });
        }
        fail::cfg(name, actions.trim())
            .map_err(|reason| FaultConfigError::BadActions { name: name.to_string(), reason })?;
        tracing::warn!(failpoint = name, actions = actions.trim(), "failpoint armed");
        n += 1;
    }
    Ok(n)
}

/// Disarms one failpoint (tests).
pub fn disarm(name: &str) {
    fail::remove(name);
}

fn parse(arg: Option<String>) -> Fault {
    let arg = arg.unwrap_or_default();
    let arg = arg.trim();
    if arg == "exit" {
        return Fault::Exit;
    }
    if let Some(ms) = arg.strip_prefix("delay:") {
        if let Ok(ms) = ms.trim().parse::<u64>() {
            return Fault::Delay(Duration::from_millis(ms));
        }
    }
    let message = arg.strip_prefix("error").map(|m| m.trim_start_matches(':').trim()).unwrap_or(arg);
    Fault::Error(if message.is_empty() { "injected fault".to_string() } else { message.to_string() })
}

/// What failpoint `name` asks for now, if it is armed and fires ([`Fault::Exit`] never returns).
pub fn check(name: &str) -> Option<Fault> {
    let fault = fail::eval(name, parse)?;
    if fault == Fault::Exit {
        exit_now(name);
    }
    tracing::info!(failpoint = name, ?fault, "failpoint fired");
    Some(fault)
}

/// Reaches failpoint `name` in synchronous code: a delay blocks the calling thread; returns the injected
/// error's message.
pub fn hit_blocking(name: &str) -> Result<(), InjectedFault> {
    match check(name) {
        None => Ok(()),
        Some(Fault::Delay(d)) => {
            std::thread::sleep(d);
            Ok(())
        }
        Some(Fault::Error(message)) => Err(InjectedFault { point: name.to_string(), message }),
        Some(Fault::Exit) => Ok(()),
    }
}

/// Reaches failpoint `name` in asynchronous code: a delay sleeps without blocking the runtime; returns the
/// injected error's message.
pub async fn hit(name: &str) -> Result<(), InjectedFault> {
    match check(name) {
        None => Ok(()),
        Some(Fault::Delay(d)) => {
            tokio::time::sleep(d).await;
            Ok(())
        }
        Some(Fault::Error(message)) => Err(InjectedFault { point: name.to_string(), message }),
        Some(Fault::Exit) => Ok(()),
    }
}

fn exit_now(name: &str) -> ! {
    // As abrupt as a SIGKILL: no destructors, no flushing of buffered state; stderr is unbuffered.
    eprintln!("failpoint {name}: exiting the process");
    std::process::abort()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_and_configuration() {
        // Points no other test of this crate reaches: failpoints are process-wide, and tests run in parallel.
        let _scenario = fail::FailScenario::setup();
        assert_eq!(parse(None), Fault::Error("injected fault".into()));
        assert_eq!(parse(Some("error:disk full".into())), Fault::Error("disk full".into()));
        assert_eq!(parse(Some("delay:250".into())), Fault::Delay(Duration::from_millis(250)));
        assert_eq!(parse(Some("exit".into())), Fault::Exit);
        assert!(matches!(arm("nope=return"), Err(FaultConfigError::UnknownPoint { .. })));
        assert!(matches!(arm("store-put"), Err(FaultConfigError::Malformed(_))));
        assert!(matches!(arm("store-put=bogus(1"), Err(FaultConfigError::BadActions { .. })));

        assert_eq!(hit_blocking("rpc-deploy"), Ok(()), "not armed");
        assert_eq!(arm(" rpc-deploy = 2*return(error:boom) ; ").unwrap(), 1);
        let fault = hit_blocking("rpc-deploy").expect_err("armed");
        assert_eq!(fault, InjectedFault { point: "rpc-deploy".into(), message: "boom".into() });
        assert_eq!(fault.to_string(), "boom (failpoint rpc-deploy)");
        assert!(hit_blocking("rpc-deploy").is_err());
        assert_eq!(hit_blocking("rpc-deploy"), Ok(()), "fired twice, as asked");
        arm("rpc-notify=return(delay:1)").unwrap();
        assert_eq!(hit_blocking("rpc-notify"), Ok(()));
        disarm("rpc-notify");
        assert_eq!(check("rpc-notify"), None);
    }
}
