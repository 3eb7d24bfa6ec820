//! High availability with a real etcd: three job managers elect a leader; the leader is SIGKILLed three times while
//! an `emit: updates` job runs, each time a standby takes over and the job continues from its latest checkpoint,
//! the committed output is exact, and readiness (`weir.ready`) follows the leader. Also: a paused leader (SIGSTOP:
//! alive but cut off from etcd and everyone) is replaced within the lease TTL, and when it resumes its delayed
//! messages are refused and it completes no checkpoint; a leader cut off from etcd only (a proxy that stops
//! forwarding) stops coordinating and its held-back notifications are refused by the task managers, and the two
//! leaders never complete the same checkpoint; etcd of three members survives losing one, and losing all of them
//! loses nothing; a leader whose checkpoint store hangs resigns; etcd unreachable at start-up, conflicting cluster
//! ids.

use anyhow::Context;
use std::time::{Duration, Instant};
use weir_integration_tests::ha::{EtcdCluster, HaCluster, HaOptions};
use weir_integration_tests::process::{free_port, run_with_timeout};
use weir_integration_tests::{binary, scenario_seed, verify_job_output, wait_until, CountJob};

#[test]
fn leader_killed_three_times_the_job_continues_exactly() -> anyhow::Result<()> {
    let mut c = HaCluster::start(HaOptions { health: true, ..HaOptions::default() })?;
    let (job, id, out) = updates_job(&c, "ha-failover", 1_200_000, 50_000, 40_000)?;
    c.wait_for_state(&id, "RUNNING", Duration::from_secs(60))?;
    let mut recoveries = Vec::new();
    let mut kills = 0;
    for round in 0..3 {
        let before = wait_until("for two more checkpoints", Duration::from_secs(60), || {
            let j = c.job(&id)?;
            Ok((j["checkpoints_completed"].as_u64().unwrap_or(0) >= 2 * (round + 1)).then_some(j))
        })?;
        if before["state"] == "FINISHED" {
            break;
        }
        let leader = c.wait_for_leader(Duration::from_secs(30))?;
        c.kill_jobmanager(leader);
        kills += 1;
        let killed = Instant::now();
        let attempt = before["attempt"].as_u64().unwrap_or(0);
        let resumed = wait_until("for the job to run again under a new leader", Duration::from_secs(60), || {
            let Ok(j) = c.job(&id) else { return Ok(None) };
            let again = j["attempt"].as_u64().unwrap_or(0) > attempt && j["state"] == "RUNNING";
            Ok((again || j["state"] == "FINISHED").then_some(j))
        })?;
        recoveries.push(killed.elapsed());
        let new_leader = c.wait_for_leader(Duration::from_secs(30))?;
        assert_ne!(new_leader, leader, "the killed job manager cannot lead");
        // Readiness (what container health checks and Kubernetes probes ask) follows leadership: the new leader
        // is ready, the standby is not (it is updated every 500 ms).
        let standby = (0..3).find(|&i| i != leader && i != new_leader).context("three job managers")?;
        wait_until("for readiness to follow the leader", Duration::from_secs(10), || {
            Ok((c.ready(new_leader)? && !c.ready(standby)?).then_some(()))
        })?;
        assert!(
            resumed["last_completed_checkpoint"].as_u64() >= before["last_completed_checkpoint"].as_u64(),
            "the new leader forgot checkpoints: {before} then {resumed}"
        );
        c.start_jobmanager(leader)?;
    }
    eprintln!("kill -> RUNNING again: {recoveries:?}");
    assert_eq!(kills, 3, "the job finished before the leader was killed three times: {recoveries:?}");
    assert_eq!(recoveries.len(), 3);
    c.wait_for_state(&id, "FINISHED", Duration::from_secs(180))?;
    verify_job_output(&job, &out)?;
    c.stop();
    Ok(())
}

#[test]
fn a_paused_leader_is_replaced_and_its_late_messages_are_refused() -> anyhow::Result<()> {
    // The first leader holds checkpoint notifications back for 6 s from the third on, so that it certainly
    // has messages in flight when it is paused: they leave when it resumes, late.
    let mut c = HaCluster::start(HaOptions {
        jobmanagers: 2,
        first_jm_env: vec![("WEIR_FAILPOINTS".into(), "jm-send-notify=2*off->return(delay:6000)".into())],
        ..Default::default()
    })?;
    let (job, id, out) = updates_job(&c, "ha-pause", 800_000, 20_000, 40_000)?;
    wait_until("for checkpoints", Duration::from_secs(60), || {
        Ok((c.job(&id)?["checkpoints_completed"].as_u64().unwrap_or(0) >= 4).then_some(()))
    })?;
    let old = c.wait_for_leader(Duration::from_secs(30))?;
    assert_eq!(old, 0, "the first job manager leads");
    let refusals = |c: &HaCluster| c.all_logs().matches("refusing a message of a deposed job manager").count();
    let refused_before = refusals(&c);
    // SIGSTOP: the process lives but says nothing to etcd or anyone, like a leader behind a partition.
    c.signal_jobmanager(old, libc::SIGSTOP)?;
    let paused = Instant::now();
    let new = wait_until("for a new leader", Duration::from_secs(30), || {
        Ok(c.wait_for_leader(Duration::from_secs(2)).ok().filter(|l| *l != old))
    })?;
    eprintln!("pause -> new leader seen by the CLI: {:?}", paused.elapsed());
    c.wait_for_state(&id, "RUNNING", Duration::from_secs(60))?;
    // Resumed, the old leader finds its lease gone: it stops coordinating; whatever it had in flight (triggers,
    // notifications) reaches task managers that registered with the new leader and refuse it.
    c.signal_jobmanager(old, libc::SIGCONT)?;
    wait_until("for the old leader to notice", Duration::from_secs(20), || {
        let log = c.jobmanager_log(old);
        Ok((log.contains("leadership lost") || log.contains("standby: following the leader")).then_some(()))
    })?;
    // Its held-back notifications arrive now, and the task managers say they refused them.
    wait_until("for a task manager to refuse the resumed leader's late messages", Duration::from_secs(30), || {
        Ok((refusals(&c) > refused_before).then_some(()))
    })?;
    c.wait_for_state(&id, "FINISHED", Duration::from_secs(180))?;
    verify_job_output(&job, &out)?;
    let old_log = c.jobmanager_log(old);
    let after_resume = old_log.rsplit("leadership lost").next().unwrap_or_default();
    assert!(
        !after_resume.contains("checkpoint completed"),
        "the deposed leader completed a checkpoint after losing leadership"
    );
    assert_ne!(new, old);
    c.stop();
    Ok(())
}

#[test]
fn unreachable_etcd_and_conflicting_cluster_ids_are_clear_errors() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = format!("file://{}", dir.path().join("checkpoints").display());
    // Nothing listens on this port: a clear error, within the bounded wait.
    let dead = format!("http://127.0.0.1:{}", free_port()?);
    let mut cmd = std::process::Command::new(binary("weir-jobmanager")?);
    cmd.args(["--bind", "127.0.0.1:0", "--ha", "etcd", "--etcd-endpoints", &dead, "--etcd-timeout-ms", "1500"])
        .args(["--advertise-address", "http://127.0.0.1:1", "--checkpoint-store", &store])
        .arg("--data-dir")
        .arg(dir.path().join("jm"));
    let began = Instant::now();
    let out = run_with_timeout(cmd, Duration::from_secs(30))?;
    assert_eq!(out.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("etcd at") && out.stderr.contains(&dead), "{}", out.stderr);
    assert!(began.elapsed() < Duration::from_secs(15), "waited {:?}", began.elapsed());

    // Two clusters on one checkpoint store: the second is refused, naming both ids.
    let etcd = EtcdCluster::start(dir.path(), 1)?;
    let start = |cluster_id: &str, endpoints: &str| -> anyhow::Result<weir_integration_tests::Process> {
        let mut cmd = std::process::Command::new(binary("weir-jobmanager")?);
        cmd.args(["--bind", "127.0.0.1:0", "--ha", "etcd", "--etcd-endpoints", endpoints])
            .args(["--ha-cluster-id", cluster_id, "--advertise-address", "http://127.0.0.1:1"])
            .args(["--checkpoint-store", &store])
            .arg("--data-dir")
            .arg(dir.path().join(format!("jm-{cluster_id}")));
        weir_integration_tests::Process::spawn(cluster_id, cmd, &dir.path().join(format!("{cluster_id}.log")))
    };
    let mut first = start("blue", &etcd.endpoints())?;
    first.wait_for_stdout(Duration::from_secs(30), |l| l.starts_with("weir-jobmanager listening").then_some(()))?;
    let mut second = start("green", &etcd.endpoints())?;
    let status = second.wait_exit(Duration::from_secs(30))?;
    assert_eq!(status.code(), Some(2));
    let log = std::fs::read_to_string(dir.path().join("green.log"))?;
    assert!(log.contains("belongs to HA cluster \"blue\"") && log.contains("\"green\""), "{log}");
    first.kill();
    Ok(())
}

/// Submits the job every HA scenario runs: `records` records over `keys` keys at `rate` records/s, a checkpoint
/// every 500 ms, `emit: updates` into a file sink (so commits happen all the time); returns it, its id and
/// its output directory.
fn updates_job(
    c: &HaCluster,
    name: &str,
    records: u64,
    keys: u64,
    rate: u64,
) -> anyhow::Result<(CountJob, String, std::path::PathBuf)> {
    let out = c.output_dir(name)?;
    let job = CountJob::bounded(name, records, keys, scenario_seed() % 1000)
        .rate(rate)
        .checkpoint_every_ms(500)
        .emit_updates()
        .into_files(&out);
    let id = c.submit(&job)?;
    Ok((job, id, out))
}

/// Checkpoint ids a job manager's log says it completed.
fn completed_ids(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains("checkpoint completed"))
        .filter_map(|l| l.split("checkpoint_id=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

#[test]
fn a_leader_cut_off_from_etcd_stops_and_its_held_back_notifications_are_refused() -> anyhow::Result<()> {
    // The first leader holds every checkpoint notification back for 8 s from the fourth on: some are still
    // on their way when it has lost leadership and the task managers follow the new leader.
    let c = HaCluster::start(HaOptions {
        jobmanagers: 2,
        first_jm_etcd_proxy: true,
        metrics: true,
        first_jm_env: vec![("WEIR_FAILPOINTS".into(), "jm-send-notify=3*off->return(delay:8000)".into())],
        ..Default::default()
    })?;
    let (job, id, out) = updates_job(&c, "ha-cut", 1_000_000, 20_000, 40_000)?;
    wait_until("for checkpoints", Duration::from_secs(60), || {
        Ok((c.job(&id)?["checkpoints_completed"].as_u64().unwrap_or(0) >= 6).then_some(()))
    })?;
    assert_eq!(c.wait_for_leader(Duration::from_secs(10))?, 0, "the first job manager leads");
    // Only the link between the leader and etcd goes: everything else still reaches it.
    let cut = Instant::now();
    c.etcd_proxy.as_ref().expect("proxy").down();
    wait_until("for the leader to stop coordinating", Duration::from_secs(15), || {
        Ok(c.jobmanager_log(0).contains("leadership lost").then_some(()))
    })?;
    let stopped = cut.elapsed();
    eprintln!("cut -> old leader stopped coordinating: {stopped:?}");
    // It deposes itself 2/3 of the TTL after its last good keep-alive, which is at most a keep-alive period
    // (TTL/4) before the cut: within the TTL. The margin covers writing and polling the log line.
    let (ttl, margin) = (Duration::from_millis(HaOptions::default().lease_ttl_ms), Duration::from_millis(1500));
    assert!(stopped <= ttl + margin, "the cut-off leader stopped after {stopped:?}, not within {ttl:?} + {margin:?}");
    wait_until("for the standby to lead", Duration::from_secs(30), || {
        Ok((c.wait_for_leader(Duration::from_secs(2)).ok() == Some(1)).then_some(()))
    })?;
    eprintln!("cut -> new leader: {:?}", cut.elapsed());
    wait_until("for a task manager to refuse the deposed leader", Duration::from_secs(30), || {
        Ok(c.all_logs().contains("refusing a message of a deposed job manager").then_some(()))
    })?;
    c.wait_for_state(&id, "FINISHED", Duration::from_secs(180))?;
    verify_job_output(&job, &out)?;
    // Never both: the checkpoints each leader completed are disjoint, and none of the old leader's came after
    // it lost leadership.
    let (old, new) = (c.jobmanager_log(0), c.jobmanager_log(1));
    let after = old.split("leadership lost").nth(1).unwrap_or_default();
    assert!(completed_ids(after).is_empty(), "the cut-off leader completed checkpoints {:?}", completed_ids(after));
    let (a, b) = (completed_ids(&old), completed_ids(&new));
    assert!(!a.is_empty() && !b.is_empty(), "both leaders completed checkpoints: {a:?} {b:?}");
    assert!(a.iter().all(|x| !b.contains(x)), "a checkpoint id was completed twice: {a:?} {b:?}");
    assert!(a.iter().max() < b.iter().min(), "the new leader reused checkpoint ids: {a:?} {b:?}");
    // The metrics say the same: the old leader lost its lease and does not lead; the new one leads at a later
    // epoch and resumed the job.
    let value = |text: &str, name: &str| -> Option<f64> {
        text.lines().find(|l| l.starts_with(name))?.rsplit(' ').next()?.parse().ok()
    };
    let (m0, m1) = (c.metrics(0)?, c.metrics(1)?);
    assert_eq!(value(&m0, "weir_jobmanager_is_leader"), Some(0.0), "{m0}");
    assert_eq!(value(&m0, "weir_jobmanager_leadership_lost_total{reason=\"lease\"}"), Some(1.0), "{m0}");
    assert_eq!(value(&m1, "weir_jobmanager_is_leader"), Some(1.0), "{m1}");
    assert!(value(&m1, "weir_jobmanager_epoch") > value(&m0, "weir_jobmanager_epoch"), "{m0}\n{m1}");
    assert!(value(&m1, "weir_jobmanager_resume_seconds_count").is_some_and(|n| n >= 1.0), "{m1}");
    c.stop();
    Ok(())
}

#[test]
fn etcd_losing_a_member_changes_nothing_and_losing_all_loses_nothing() -> anyhow::Result<()> {
    // The default lease TTL (5 s), not the tests' shorter one: the member killed may be etcd's own leader, and
    // etcd's election (a second or two on this machine) must fit within the job manager's tolerance for a
    // silent etcd (2/3 of the TTL). With 3 s it did not, once in a few runs.
    let c = HaOptions { jobmanagers: 2, etcd_members: 3, lease_ttl_ms: 5000, ..Default::default() };
    let mut c = HaCluster::start(c)?;
    let (job, id, out) = updates_job(&c, "ha-etcd", 1_200_000, 20_000, 40_000)?;
    c.wait_for_state(&id, "RUNNING", Duration::from_secs(60))?;
    let leader = c.wait_for_leader(Duration::from_secs(10))?;
    let attempt = c.job(&id)?["attempt"].as_u64();
    // One member of three down: the quorum holds, nothing changes.
    c.etcd.kill(2);
    let before = c.job(&id)?["checkpoints_completed"].as_u64().unwrap_or(0);
    wait_until("for checkpoints with a member down", Duration::from_secs(30), || {
        Ok((c.job(&id)?["checkpoints_completed"].as_u64().unwrap_or(0) >= before + 4).then_some(()))
    })?;
    assert_eq!(c.wait_for_leader(Duration::from_secs(10))?, leader, "the leader changed");
    assert_eq!(c.job(&id)?["attempt"].as_u64(), attempt, "the job restarted");
    // All members down: no checkpoint completes (none can be recorded), the job is not lost.
    c.etcd.kill(0);
    c.etcd.kill(1);
    std::thread::sleep(Duration::from_secs(3));
    let count = |c: &HaCluster| (0..2).map(|i| completed_ids(&c.jobmanager_log(i)).len()).sum::<usize>();
    let during = count(&c);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(count(&c), during, "a checkpoint completed while etcd was down");
    c.etcd.restart(&[0, 1, 2])?;
    c.wait_for_leader(Duration::from_secs(30))?;
    c.wait_for_state(&id, "FINISHED", Duration::from_secs(180))?;
    verify_job_output(&job, &out)?;
    c.stop();
    Ok(())
}

#[test]
fn a_leader_whose_store_hangs_resigns() -> anyhow::Result<()> {
    // The checkpoint store (S3) is reached by the first leader through a proxy; everyone else reaches it
    // directly. The proxy stops answering: the leader's health probes hang, and it resigns; the other leads.
    let c = HaCluster::start(HaOptions { jobmanagers: 2, first_jm_store_proxy: true, ..Default::default() })?;
    let (job, id, out) = updates_job(&c, "ha-hung", 1_200_000, 20_000, 30_000)?;
    wait_until("for checkpoints", Duration::from_secs(60), || {
        Ok((c.job(&id)?["checkpoints_completed"].as_u64().unwrap_or(0) >= 2).then_some(()))
    })?;
    assert_eq!(c.wait_for_leader(Duration::from_secs(10))?, 0, "the first job manager leads");
    c.store_proxy.as_ref().expect("store proxy").stall();
    wait_until("for the hung leader to resign", Duration::from_secs(90), || {
        Ok(c.jobmanager_log(0).contains("resigning leadership").then_some(()))
    })?;
    assert!(c.jobmanager_log(0).contains("leader health probe hung"), "it resigned for its hung probes");
    wait_until("for the other job manager to lead", Duration::from_secs(30), || {
        Ok((c.wait_for_leader(Duration::from_secs(2)).ok() == Some(1)).then_some(()))
    })?;
    c.wait_for_state(&id, "FINISHED", Duration::from_secs(180))?;
    verify_job_output(&job, &out)?;
    c.stop();
    Ok(())
}

#[test]
fn weir_local_starts_etcd_and_two_job_managers() -> anyhow::Result<()> {
    use std::io::BufRead;
    let dir = tempfile::tempdir()?;
    let cluster_dir = dir.path().join("c");
    let mut cmd = std::process::Command::new(binary("weir")?);
    cmd.args(["local", "--jobmanagers", "2", "--ha", "etcd", "--taskmanagers", "1", "--logs-to-files"])
        .args(["--output", "json", "--dir"])
        .arg(&cluster_dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn()?;
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(60));
    let result = (|| -> anyhow::Result<()> {
        let info: serde_json::Value = serde_json::from_str(&line?)?;
        let addresses = info["jobmanager"].as_str().unwrap_or_default().to_string();
        assert_eq!(addresses.split(',').count(), 2, "{info}");
        assert!(info["etcd"].as_str().is_some_and(|e| e.starts_with("http://127.0.0.1:")), "{info}");
        let mut weir = std::process::Command::new(binary("weir")?);
        weir.args(["cluster", "--output", "json", "--jobmanager", &addresses]);
        let out = run_with_timeout(weir, Duration::from_secs(30))?;
        let overview: serde_json::Value = serde_json::from_str(&out.stdout)?;
        let leader = overview["leader"].as_str().unwrap_or_default();
        assert!(addresses.split(',').any(|a| a == leader), "leader {leader:?} not among {addresses}");
        assert_eq!(overview["task_managers"].as_array().map_or(0, |a| a.len()), 1, "{overview}");
        Ok(())
    })();
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait()?;
    result?;
    assert!(status.success(), "weir local exited {status}");
    Ok(())
}
