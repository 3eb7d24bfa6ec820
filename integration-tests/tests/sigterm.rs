//! SIGTERM stops a task manager, the job manager and `weir local` within seconds, with exit status 0.

use std::path::Path;
use std::process::Command;
use std::time::Duration;
use weir_integration_tests::process::{pid_alive, signal, Process};
use weir_integration_tests::{binary, wait_until, Cluster, ClusterOptions, CountJob, JobState};

const STOP_WITHIN: Duration = Duration::from_secs(10);

/// A cluster running an endless job, so that the process to stop has work to cancel.
fn busy_cluster() -> anyhow::Result<(Cluster, String)> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2))?;
    let job = CountJob::unbounded("sigterm", 1000, 1).rate(10_000).checkpoint_every_ms(500).into_blackhole();
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_checkpoints(&id, 1, Duration::from_secs(60))?;
    Ok((cluster, id))
}

#[test]
fn taskmanager_stops_on_sigterm() -> anyhow::Result<()> {
    let (mut cluster, id) = busy_cluster()?;
    let status = cluster.terminate_taskmanager(0, STOP_WITHIN)?;
    assert!(status.success(), "the task manager exited with {status} on SIGTERM");
    // Its tasks are gone, so the job cannot stay RUNNING on it.
    cluster.wait_for_state(&id, &[JobState::Restarting, JobState::Created], Duration::from_secs(30))?;
    cluster.stop();
    Ok(())
}

#[test]
fn jobmanager_stops_on_sigterm() -> anyhow::Result<()> {
    let (mut cluster, _id) = busy_cluster()?;
    let status = cluster.terminate_jobmanager(STOP_WITHIN)?;
    assert!(status.success(), "the job manager exited with {status} on SIGTERM");
    cluster.stop();
    Ok(())
}

/// Every number under a key containing "pid" in `cluster.json`.
fn pids_in(json: &serde_json::Value, out: &mut Vec<u32>) {
    match json {
        serde_json::Value::Object(o) => {
            for (k, v) in o {
                match v {
                    serde_json::Value::Number(n) if k.contains("pid") => out.extend(n.as_u64().map(|p| p as u32)),
                    _ => pids_in(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| pids_in(v, out)),
        _ => {}
    }
}

fn read_cluster_json(dir: &Path) -> anyhow::Result<Option<Vec<u32>>> {
    let Ok(text) = std::fs::read_to_string(dir.join("cluster.json")) else { return Ok(None) };
    let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else { return Ok(None) };
    let mut pids = Vec::new();
    pids_in(&json, &mut pids);
    Ok(Some(pids))
}

#[test]
fn weir_local_stops_its_whole_cluster_on_sigterm() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let cluster_dir = dir.path().join("local");
    let mut cmd = Command::new(binary("weir")?);
    cmd.args(["local", "--taskmanagers", "2", "--slots", "1", "--bind", "127.0.0.1:0", "--dir"]).arg(&cluster_dir);
    let mut local = Process::spawn("weir-local", cmd, &dir.path().join("weir-local.log"))?;
    let mut pids = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        local.wait_for_stdout(Duration::from_secs(60), |line| line.contains("http://").then_some(()))?;
        pids = wait_until("for cluster.json with the cluster's pids", Duration::from_secs(60), || {
            Ok(read_cluster_json(&cluster_dir)?.filter(|p| p.len() >= 3))
        })?;
        let status = local.terminate(STOP_WITHIN)?;
        anyhow::ensure!(status.success(), "weir local exited with {status} on SIGTERM");
        wait_until("for the local cluster's processes to exit", Duration::from_secs(5), || {
            let alive: Vec<u32> = pids.iter().copied().filter(|&p| pid_alive(p)).collect();
            if alive.is_empty() {
                Ok(Some(()))
            } else {
                Err(anyhow::anyhow!("still running: {alive:?} of {pids:?}"))
            }
        })
    })();
    if result.is_err() {
        eprintln!("{}", local.tail(60));
        // Leave nothing behind: the processes weir local started are no children of this test.
        for pid in pids.into_iter().filter(|&p| pid_alive(p)) {
            let _ = signal(pid, libc::SIGKILL);
        }
    }
    result
}
