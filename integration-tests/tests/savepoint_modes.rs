//! How a savepoint is taken and owned: `job stop --savepoint --drain` ends the input first (keyed-count emits
//! what it counted) and a job restored from it does not emit again; a claimed savepoint is deleted once the
//! job's own checkpoints subsume it; a savepoint moved to the S3 server restores from there; a task manager
//! killed while a rescaled restore runs leaves the output exact; and the operator-state guard declines
//! checkpoints over `--operator-state-limit` while the job keeps running; a source new in a restored job reads
//! from its beginning; a job restored with another sink path commits the savepoint's pending files where they
//! were written; a retained checkpoint restores like a savepoint, in both modes, and who owns its files
//! afterwards is what the mode says.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use weir_common::job::datagen::{key_of, split_range};
use weir_integration_tests::{
    job_state, read_sink_output, verify_job_output, wait_until, Cluster, ClusterOptions, CountJob, JobState, S3Server,
};

fn local_path(url: &str) -> PathBuf {
    PathBuf::from(url.strip_prefix("file://").expect("a file:// savepoint"))
}

/// Every file under `dir`, relative to it.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// The per-key counts of the records `datagen` had emitted when the savepoint at `dir` was taken, read from
/// its split positions (operator state `splits`: per element a `u32` split id and the `u64` next index).
fn consumed_counts(dir: &Path, job: &CountJob) -> anyhow::Result<HashMap<u64, u64>> {
    let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("_metadata"))?)?;
    let count = job.records.expect("bounded");
    let mut counts = HashMap::new();
    for st in meta["operators"]["events"]["subtasks"].as_array().expect("datagen's subtasks") {
        let h = &st["operator_state"];
        let blob = std::fs::read(dir.join(h["file"]["path"].as_str().expect("blob path")))?;
        let splits = h["states"].as_array().unwrap().iter().find(|s| s["name"] == "splits").expect("splits state");
        for off in splits["offsets"]["inline"].as_array().expect("inline offsets") {
            let off = off.as_u64().unwrap() as usize;
            let len = u32::from_le_bytes(blob[off..off + 4].try_into()?) as usize;
            assert_eq!(len, 12, "a split position is 12 bytes");
            let id = u32::from_le_bytes(blob[off + 4..off + 8].try_into()?);
            let next = u64::from_le_bytes(blob[off + 8..off + 16].try_into()?);
            let (start, _) = split_range(id, 128, Some(count));
            for i in start..next {
                *counts.entry(key_of(job.seed, i, job.keys)).or_insert(0) += 1;
            }
        }
    }
    Ok(counts)
}

#[test]
fn a_drained_stop_emits_what_was_counted_and_its_restore_emits_nothing_again() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 2))?;
    let out = cluster.output_dir("counts")?;
    let job = CountJob::bounded("drain", 2_000_000, 3_000, 5).rate(100_000).checkpoint_every_ms(300).into_files(&out);
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_checkpoints(&id, 2, Duration::from_secs(60))?;
    let url = cluster.stop_with_savepoint(&id, true, "native")?;
    let consumed = consumed_counts(&local_path(&url), &job)?;
    let total: u64 = consumed.values().sum();
    assert!(total > 0 && total < 2_000_000, "the drain ended the input part-way: {total} records");
    // keyed-count emitted its counts at the (drained) end of input, and the sink committed them.
    let output = read_sink_output(&out)?;
    assert_eq!(output, consumed, "the drained output is the count of every record read");

    // Restored (at another parallelism) from a drained savepoint, the job is at its end: nothing is emitted again.
    let r = cluster.submit_from(&job.clone().parallelism(3).yaml(), &url, "", false)?;
    cluster.wait_for_state(&r, &[JobState::Finished], Duration::from_secs(60))?;
    assert_eq!(read_sink_output(&out)?, consumed, "a job restored at end of input emits nothing again");
    cluster.stop();
    Ok(())
}

/// A job restored from a savepoint with a source under a new uid: the counts restore, the new source (none of
/// whose state the savepoint holds) reads its sequence from the beginning, and the old source's state is dropped
/// with `--allow-non-restored-state`.
#[test]
fn a_source_new_in_a_restored_job_reads_from_its_beginning() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2))?;
    let first = CountJob::bounded("first", 2_000_000, 3_000, 5).rate(100_000).checkpoint_every_ms(300).into_blackhole();
    let id = cluster.submit(&first.yaml())?;
    cluster.wait_for_checkpoints(&id, 2, Duration::from_secs(60))?;
    let url = cluster.stop_with_savepoint(&id, false, "native")?;
    let mut expected = consumed_counts(&local_path(&url), &first)?;
    assert!(!expected.is_empty());

    let out = cluster.output_dir("counts")?;
    let second = CountJob::bounded("second", 50_000, 3_000, 6).into_files(&out);
    let spec = second.yaml().replace("uid: events", "uid: fresh").replace("input: events", "input: fresh");
    let r = cluster.submit_from(&spec, &url, "", true)?;
    let done = cluster.wait_for_state(&r, &[JobState::Finished], Duration::from_secs(120))?;
    assert!(done.dropped_state.iter().any(|d| d.contains("events")), "{:?}", done.dropped_state);
    for i in 0..50_000 {
        *expected.entry(key_of(6, i, 3_000)).or_insert(0) += 1;
    }
    assert_eq!(read_sink_output(&out)?, expected, "restored counts plus every record of the new source");
    cluster.stop();
    Ok(())
}

#[test]
fn a_claimed_savepoint_is_deleted_once_the_jobs_checkpoints_subsume_it() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 2))?;
    let out = cluster.output_dir("counts")?;
    let job = CountJob::bounded("claim", 600_000, 3_000, 9)
        .rate(100_000)
        .checkpoint_every_ms(300)
        .retain_checkpoints(2)
        .into_files(&out);
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_checkpoints(&id, 2, Duration::from_secs(60))?;
    let url = cluster.stop_with_savepoint(&id, false, "native")?;
    let sp = local_path(&url);
    assert!(sp.join("_metadata").is_file());

    let r = cluster.submit_from(&job.clone().parallelism(3).yaml(), &url, "claim", false)?;
    let running = cluster.wait_for_state(&r, &[JobState::Running], Duration::from_secs(30))?;
    assert!(running.restored_from.contains("claim"), "{running:?}");
    // Two checkpoints of its own (retained: 2) subsume the savepoint: the job deletes it.
    cluster.wait_for_checkpoints(&r, 2, Duration::from_secs(60))?;
    wait_until("for the claimed savepoint to be deleted", Duration::from_secs(20), || {
        Ok((!sp.join("_metadata").exists()).then_some(()))
    })?;
    assert_eq!(files_under(&sp), Vec::<PathBuf>::new(), "every file of the claimed savepoint is gone");
    cluster.wait_for_state(&r, &[JobState::Finished], Duration::from_secs(120))?;
    verify_job_output(&job, &out)?;
    cluster.stop();
    Ok(())
}

#[test]
fn a_savepoint_moved_to_s3_restores_from_there() -> anyhow::Result<()> {
    let s3 = S3Server::start()?;
    let bucket = s3.endpoint("checkpoints");
    let mut cluster = Cluster::start(ClusterOptions::new(2, 2).with_s3(bucket.clone()))?;
    let out = cluster.output_dir("counts")?;
    let job = CountJob::bounded("to-s3", 600_000, 3_000, 11).rate(100_000).checkpoint_every_ms(300).into_files(&out);
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_checkpoints(&id, 2, Duration::from_secs(60))?;
    // Taken on local disk, then copied to the S3 server under another prefix and deleted locally.
    let local_dir = cluster.dir().join("local-savepoints");
    let out_json =
        cluster.cli_json(&["job", "stop", &id, "--savepoint", &format!("file://{}", local_dir.display())])?;
    let url = out_json["savepoint"].as_str().unwrap().to_string();
    cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(60))?;
    let sp = local_path(&url);
    let moved = weir_integration_tests::S3Endpoint { prefix: "moved/sp".into(), ..bucket.clone() };
    let store = moved.store()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let files = files_under(&sp);
    for f in &files {
        rt.block_on(store.put_file(&f.to_string_lossy(), &sp.join(f)))?;
    }
    std::fs::remove_dir_all(&sp)?;
    assert!(files.iter().any(|f| f.ends_with("_metadata")), "{files:?}");

    let r = cluster.submit_from(&job.clone().parallelism(3).yaml(), &moved.url(), "", false)?;
    cluster.wait_for_state(&r, &[JobState::Finished], Duration::from_secs(120))?;
    verify_job_output(&job, &out)?;
    let still: Vec<String> = moved.list()?;
    assert_eq!(still.len(), files.len(), "the savepoint on S3 is untouched: {still:?}");
    cluster.stop();
    Ok(())
}

#[test]
fn a_taskmanager_killed_during_a_rescaled_restore_leaves_the_output_exact() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(3, 2))?;
    let out = cluster.output_dir("counts")?;
    let job = CountJob::bounded("kill-restore", 600_000, 3_000, 13)
        .rate(100_000)
        .checkpoint_every_ms(300)
        .restart_delay_ms(200)
        .emit_updates()
        .into_files(&out);
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_checkpoints(&id, 2, Duration::from_secs(60))?;
    let url = cluster.stop_with_savepoint(&id, false, "native")?;
    let r = cluster.submit_from(&job.clone().parallelism(4).yaml(), &url, "", false)?;
    // Killed as soon as one of its task managers holds tasks of the restore.
    let victim = wait_until("for the restore to be deployed", Duration::from_secs(30), || {
        Ok(cluster.busy_taskmanagers()?.first().copied())
    })?;
    cluster.kill_taskmanager(victim)?;
    cluster.start_taskmanager()?;
    let done = cluster.wait_for_state(&r, &[JobState::Finished], Duration::from_secs(120))?;
    // A kill that lands while the restore is still being deployed makes the job manager deploy it again (a new
    // attempt, not counted as a restart); one that lands after it restarts the job. Either way: a new attempt.
    assert!(done.attempt >= 2, "the kill forced a new attempt: {done:?}");
    verify_job_output(&job, &out)?;
    cluster.stop();
    Ok(())
}

#[test]
fn operator_state_over_the_limit_declines_checkpoints_and_the_job_keeps_running() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2))?;
    // datagen's 128 split positions take 128 x 16 bytes: over a limit of 1000 bytes.
    cluster.terminate_jobmanager(Duration::from_secs(10))?;
    cluster.set_jobmanager_env(vec![("WEIR_OPERATOR_STATE_LIMIT".into(), "1000".into())]);
    cluster.restart_jobmanager()?;
    wait_until("for the task manager to register again", Duration::from_secs(30), || {
        Ok((cluster.overview()?.task_managers.len() == 1).then_some(()))
    })?;
    let job = CountJob::unbounded("guarded", 1_000, 1).rate(10_000).checkpoint_every_ms(200).into_blackhole();
    let id = cluster.submit(&job.yaml())?;
    let failed = wait_until("for two declined checkpoints", Duration::from_secs(60), || {
        let failed: Vec<_> = cluster
            .checkpoints(&id)?
            .into_iter()
            .filter(|c| c.status() == weir_proto::CheckpointStatus::Failed)
            .collect();
        Ok((failed.len() >= 2).then_some(failed))
    })?;
    let reason = &failed[0].failure_reason;
    assert!(
        reason.contains(&format!("job {id}"))
            && reason.contains("operator state \"splits\" of operator \"events\" holds 128 elements, 2048 bytes")
            && reason.contains("above the limit of 1000 bytes"),
        "{reason}"
    );
    let listed = cluster.cli_json(&["checkpoints", &id])?;
    assert!(listed.to_string().contains("--operator-state-limit"), "weir checkpoints shows the reason: {listed}");
    let info = cluster.job(&id)?;
    assert_eq!(job_state(&info), Some(JobState::Running), "{info:?}");
    assert_eq!(info.restarts, 0, "a declined checkpoint is no failure of the job: {info:?}");
    cluster.cancel(&id)?;
    cluster.stop();
    Ok(())
}

/// A job restored with another sink path: the files its savepoint lists as pending are committed where they
/// were written (Flink's committables carry their paths too), new files go to the new path, and the two
/// together are exact.
#[test]
fn a_job_restored_with_another_sink_path_commits_the_savepoints_files_where_they_were_written() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 4))?;
    let out = cluster.output_dir("counts")?;
    let job = CountJob::bounded("moved-sink", 400_000, 3_000, 17)
        .rate(100_000)
        .checkpoint_every_ms(300)
        .emit_updates()
        .into_files(&out);
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_checkpoints(&id, 2, Duration::from_secs(60))?;
    let url = cluster.stop_with_savepoint(&id, false, "native")?;
    let elsewhere = out.join("restored");
    let r = cluster.submit_from(&job.clone().into_files(&elsewhere).yaml(), &url, "", false)?;
    let done = cluster.wait_for_state(&r, &[JobState::Finished], Duration::from_secs(120))?;
    assert_eq!(done.restarts, 0, "the restore succeeded at once: {done:?}");
    assert!(std::fs::read_dir(&elsewhere)?.count() > 0, "the restored job wrote to its own path");
    // `out` holds `restored/`: both jobs' output, every running count once.
    verify_job_output(&job, &out)?;
    cluster.stop();
    Ok(())
}

/// The files a checkpoint's `_metadata` references (relative to the checkpoint store's root), and the
/// checkpoint's own directory.
fn checkpoint_files(store: &Path, chk: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(chk.join("_metadata"))?)?;
    let mut files = vec![chk.join("_metadata")];
    fn collect(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                if let (Some(p), Some(_)) = (m.get("path").and_then(|p| p.as_str()), m.get("size")) {
                    out.push(p.to_string());
                }
                m.values().for_each(|v| collect(v, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| collect(v, out)),
            _ => {}
        }
    }
    let mut paths = Vec::new();
    collect(&meta["operators"], &mut paths);
    files.extend(paths.into_iter().map(|p| store.join(p)));
    Ok(files)
}

/// A retained checkpoint `<store>/<job>/chk-<n>` restores like a savepoint (README), with `emit: updates` so
/// that every step's output proves the state went on. The first job is canceled; its checkpoint restores at
/// another parallelism in no-claim mode, and that job never deletes any of its files, whatever it subsumes.
/// That job is canceled in turn; its checkpoint restores at the same parallelism in claim mode and runs to the
/// end: the output of the three together is exact, and the claimed checkpoint (its directory and every file it
/// references) is deleted once the claiming job's own checkpoints subsume it. Meanwhile a running job's own
/// checkpoint cannot be claimed, and a claimed one cannot be restored by anyone else.
#[test]
fn a_retained_checkpoint_restores_like_a_savepoint_in_both_modes() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    let out = cluster.output_dir("counts")?;
    let store = cluster.checkpoint_dir().expect("a local store");
    let job = CountJob::bounded("retained", 1_200_000, 3_000, 19)
        .rate(100_000)
        .checkpoint_every_ms(300)
        .retain_checkpoints(2)
        .emit_updates()
        .into_files(&out);
    let chk_url = |job_id: &str, n: u64| format!("file://{}", store.join(job_id).join(format!("chk-{n}")).display());

    // The first job's checkpoint, while it runs: no-claim would do, but it cannot be claimed.
    let a = cluster.submit(&job.yaml())?;
    let running = cluster.wait_for_checkpoints(&a, 3, Duration::from_secs(60))?;
    let n = running.last_completed_checkpoint.expect("a checkpoint");
    let err = cluster.submit_from(&job.yaml(), &chk_url(&a, n), "claim", false).expect_err("refused");
    let msg = format!("{err:#}");
    assert!(
        msg.contains(&format!("checkpoint of job {a}, which is still running")) && msg.contains("no-claim"),
        "{msg}"
    );
    cluster.cancel(&a)?;
    let a_done = cluster.wait_for_state(&a, &[JobState::Canceled], Duration::from_secs(30))?;
    let n = a_done.last_completed_checkpoint.expect("a checkpoint");
    let a_chk = store.join(&a).join(format!("chk-{n}"));
    let a_files = checkpoint_files(&store, &a_chk)?;
    assert!(a_files.iter().any(|f| f.starts_with(store.join(&a).join("shared"))), "incremental: {a_files:?}");

    // No-claim, at another parallelism: the job runs several checkpoints of its own and never deletes a file of
    // the checkpoint it restored from.
    let b = cluster.submit_from(&job.clone().parallelism(3).yaml(), &chk_url(&a, n), "no-claim", false)?;
    let b_running = cluster.wait_for_checkpoints(&b, 4, Duration::from_secs(60))?;
    assert!(b_running.restored_from.contains(&format!("chk-{n}")), "{b_running:?}");
    cluster.cancel(&b)?;
    let b_done = cluster.wait_for_state(&b, &[JobState::Canceled], Duration::from_secs(30))?;
    let m = b_done.last_completed_checkpoint.expect("a checkpoint");
    let b_chk = store.join(&b).join(format!("chk-{m}"));
    let b_files = checkpoint_files(&store, &b_chk)?;

    // Claim, at the same parallelism, checkpointing slowly so that its restore stays the job's restore point
    // for a while: meanwhile nobody else may restore from what it claimed, in either mode.
    let slow = job.clone().parallelism(3).checkpoint_every_ms(2_500);
    let c = cluster.submit_from(&slow.yaml(), &chk_url(&b, m), "claim", false)?;
    cluster.wait_for_state(&c, &[JobState::Running], Duration::from_secs(30))?;
    for mode in ["no-claim", "claim"] {
        let err = cluster.submit_from(&slow.yaml(), &chk_url(&b, m), mode, false).expect_err("refused");
        let msg = format!("{err:#}");
        assert!(msg.contains(&format!("job {c} restores from it in claim mode")), "{mode}: {msg}");
    }
    cluster.wait_for_state(&c, &[JobState::Finished], Duration::from_secs(120))?;
    verify_job_output(&job, &out)?;
    // Claimed: gone once subsumed (the job's checkpoints, retained 2, subsumed it before it finished).
    wait_until("for the claimed checkpoint's files to be deleted", Duration::from_secs(20), || {
        Ok(b_files.iter().all(|f| !f.exists()).then_some(()))
    })?;
    // Not claimed: every file is still there.
    let missing: Vec<&PathBuf> = a_files.iter().filter(|f| !f.exists()).collect();
    assert!(missing.is_empty(), "a no-claim restore deleted files of the checkpoint it restored from: {missing:?}");
    cluster.stop();
    Ok(())
}
