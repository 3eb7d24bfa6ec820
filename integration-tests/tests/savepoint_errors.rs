//! Bad savepoints are refused before anything is deployed, with a message naming the problem, and the job
//! they were taken from keeps running: a URL that is no savepoint, a truncated or tampered `_metadata`, a
//! missing state file, a different max parallelism, state of operators the job lacks (allowed with
//! `--allow-non-restored-state`, and then listed in the job's status). Also: `savepoint inspect` and `dispose`,
//! a savepoint moved to another directory, a no-claim restore that leaves every file of the savepoint as it
//! was, and state of another kind (or state signature) at the same uid, refused or dropped with permission.
//! A mistyped savepoint path is refused and nothing is created there; a savepoint that fails leaves no
//! files, also when a task acknowledges it late.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use weir_integration_tests::{job_state, verify_job_output, Cluster, ClusterOptions, CountJob, JobState};

/// Every file under `dir` with its bytes.
fn snapshot_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.strip_prefix(dir).unwrap().to_path_buf(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn copy_dir(from: &Path, to: &Path) {
    for (rel, bytes) in snapshot_files(from) {
        let p = to.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
}

fn local_path(url: &str) -> PathBuf {
    PathBuf::from(url.strip_prefix("file://").expect("a file:// savepoint"))
}

fn refused(cluster: &mut Cluster, spec: &str, url: &str, allow: bool, expected: &str) {
    let err = cluster.submit_from(spec, url, "", allow).expect_err("the submission is refused");
    let msg = format!("{err:#}");
    assert!(msg.contains(expected), "expected {expected:?} in: {msg}");
}

#[test]
fn bad_savepoints_are_refused_before_deploying_and_good_ones_restore() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 4))?;
    let out = cluster.output_dir("counts")?;
    let job = CountJob::bounded("sp", 1_200_000, 2_000, 3).rate(80_000).checkpoint_every_ms(300).into_files(&out);
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    std::thread::sleep(Duration::from_millis(800));
    // A savepoint of a running job: it keeps running.
    let taken = cluster.cli_json(&["savepoint", "trigger", &id])?;
    let url = taken["savepoint"].as_str().unwrap().to_string();
    assert_eq!(job_state(&cluster.job(&id)?), Some(JobState::Running));
    let sp = local_path(&url);
    assert!(sp.join("_metadata").is_file(), "{url}");

    // Inspect: operators, parallelism, key groups, operator-state elements.
    let inspect = cluster.cli_json(&["savepoint", "inspect", &url])?;
    let ops = inspect["operators"].as_array().unwrap();
    let uids: Vec<&str> = ops.iter().map(|o| o["uid"].as_str().unwrap()).collect();
    assert_eq!(uids, vec!["counts", "events", "out"], "{inspect}");
    let events = &ops[1];
    assert_eq!(events["parallelism"], 2);
    assert_eq!(events["max_parallelism"], 128);
    let splits = events["states"].as_array().unwrap().iter().find(|s| s["name"] == "splits").unwrap();
    assert_eq!(splits["elements"], 128, "datagen's 128 splits: {inspect}");
    assert_eq!(ops[0]["subtasks"][1]["key_groups"], serde_json::json!([64, 127]));
    let count =
        ops[0]["states"].as_array().unwrap().iter().find(|s| s["name"] == "count").expect("keyed-count's state");
    assert_eq!(count["kind"], "value", "{inspect}");
    assert!(count["bytes"].as_u64().unwrap() > 0, "{inspect}");

    let spec = job.clone().parallelism(3).yaml();
    let dir = cluster.dir().join("bad");
    // No savepoint at all.
    std::fs::create_dir_all(dir.join("empty"))?;
    refused(&mut cluster, &spec, &format!("file://{}", dir.join("empty").display()), false, "no _metadata file");
    // A mistyped path: refused, and nothing is created there (by the submission or by `inspect`).
    let typo = dir.join("typo/savepoint-x");
    refused(&mut cluster, &spec, &format!("file://{}", typo.display()), false, "no such directory");
    let inspected = cluster.cli_json(&["savepoint", "inspect", &format!("file://{}", typo.display())]);
    let msg = format!("{:#}", inspected.expect_err("inspect refuses a missing savepoint"));
    assert!(msg.contains("no such directory"), "{msg}");
    assert!(!dir.join("typo").exists(), "a refused savepoint path is left as it was");
    // Truncated and tampered metadata.
    let truncated = dir.join("truncated");
    copy_dir(&sp, &truncated);
    let meta = std::fs::read(truncated.join("_metadata"))?;
    std::fs::write(truncated.join("_metadata"), &meta[..meta.len() / 2])?;
    refused(&mut cluster, &spec, &format!("file://{}", truncated.display()), false, "cannot be read");
    let tampered = dir.join("tampered");
    copy_dir(&sp, &tampered);
    let text = String::from_utf8(std::fs::read(tampered.join("_metadata"))?)?;
    std::fs::write(tampered.join("_metadata"), text.replacen("\"path\": \"", "\"path\": \"../", 1))?;
    refused(&mut cluster, &spec, &format!("file://{}", tampered.display()), false, "unsafe path");
    // A missing state file.
    let missing = dir.join("missing");
    copy_dir(&sp, &missing);
    std::fs::remove_file(missing.join("events/0/opstate"))?;
    refused(&mut cluster, &spec, &format!("file://{}", missing.display()), false, "events/0/opstate is missing");
    // Another max parallelism.
    let other_max = spec.replace("parallelism: 3\n", "parallelism: 3\nmax_parallelism: 256\n");
    refused(&mut cluster, &other_max, &url, false, "max_parallelism 128 and the job sets 256");
    // State for operators the job lacks.
    let renamed = spec.replace("uid: counts", "uid: tallies").replace("input: counts", "input: tallies");
    refused(&mut cluster, &renamed, &url, false, "operators the job does not have: counts");
    // The job the savepoint came from kept running through all of this.
    assert_eq!(job_state(&cluster.job(&id)?), Some(JobState::Running), "the job is unharmed");

    // Stopped with a savepoint, moved to another directory, restored there (no-claim) at another
    // parallelism: the output is exact, and the savepoint's files stay as they were through several
    // checkpoints of the restored job, the first of which is a full one.
    let stopped = cluster.stop_with_savepoint(&id, false, "native")?;
    // Allowed (from the first savepoint): the job runs and says which state it dropped.
    let allowed = spec.replace("uid: counts", "uid: tallies").replace("input: counts", "input: tallies");
    let a = cluster.submit_from(&allowed, &url, "", true)?;
    let info = cluster.wait_for_state(&a, &[JobState::Running], Duration::from_secs(30))?;
    assert_eq!(info.dropped_state, vec!["counts".to_string()], "{info:?}");
    cluster.cancel(&a)?;

    let moved = cluster.dir().join("moved").join("sp");
    copy_dir(&local_path(&stopped), &moved);
    std::fs::remove_dir_all(local_path(&stopped))?;
    let before = snapshot_files(&moved);
    let relocated = job.clone().parallelism(3);
    let r = cluster.submit_from(&relocated.yaml(), &format!("file://{}", moved.display()), "no-claim", false)?;
    cluster.wait_for_checkpoints(&r, 3, Duration::from_secs(60))?;
    cluster.wait_for_state(&r, &[JobState::Finished], Duration::from_secs(120))?;
    verify_job_output(&relocated, &out)?;
    assert_eq!(snapshot_files(&moved), before, "a no-claim restore never changes the savepoint");
    let first = cluster
        .checkpoints(&r)?
        .into_iter()
        .find(|c| c.status() == weir_proto::CheckpointStatus::Completed)
        .expect("a checkpoint");
    assert_eq!(
        first.uploaded_bytes, first.full_size_bytes,
        "the first checkpoint after a no-claim restore is full: {first:?}"
    );

    // Dispose: the savepoint is gone; a checkpoint directory is not a savepoint and is refused.
    let disposed = cluster.cli_json(&["savepoint", "dispose", &url])?;
    assert!(disposed["deleted_files"].as_u64().unwrap() > 0, "{disposed}");
    assert!(!sp.join("_metadata").exists());
    let again = cluster.cli(&["savepoint", "inspect", &url])?;
    // Its directory went with it.
    assert!(!again.status.success() && again.stderr.contains("no such directory"), "{again}");
    cluster.stop();
    Ok(())
}

/// A savepoint of `keyed-count` restored into another kind at the same uid (`distinct-values`, of the example
/// task manager): `weir savepoint check` and the submission refuse it before deploying, naming both kinds;
/// the operator's `drop_state_on_change: true` or `--allow-non-restored-state` drop the state instead, and the
/// job status says so.
#[test]
fn state_of_another_kind_at_the_same_uid_is_refused_or_dropped_with_permission() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 3).with_taskmanager_binary("weir-example-taskmanager"))?;
    let job = CountJob::bounded("kinds", 2_000_000, 2_000, 3).rate(100_000).checkpoint_every_ms(300).into_blackhole();
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_checkpoints(&id, 1, Duration::from_secs(60))?;
    let url = cluster.stop_with_savepoint(&id, false, "native")?;
    let meta: serde_json::Value = serde_json::from_slice(&std::fs::read(local_path(&url).join("_metadata"))?)?;
    let counts = &meta["operators"]["counts"];
    assert_eq!(counts["kind"], "keyed-count");
    assert_eq!(counts["signature"]["text"], "key: seq<u8>\nvalue \"count\": u64", "{counts}");

    let other = job.yaml().replace("kind: keyed-count", "kind: distinct-values");
    // `weir savepoint check` says the same before any submission, per operator and state.
    let dir = cluster.output_dir("specs")?;
    let (same_spec, other_spec) = (dir.join("same.yaml"), dir.join("other.yaml"));
    std::fs::write(&same_spec, job.yaml().replace("uid: out", "uid: sink"))?;
    std::fs::write(&other_spec, &other)?;
    let check = |cluster: &Cluster, spec: &Path, allow: bool| -> anyhow::Result<(bool, serde_json::Value)> {
        let spec = spec.display().to_string();
        let mut args = vec!["savepoint", "check", url.as_str(), spec.as_str(), "--output", "json"];
        if allow {
            args.push("--allow-non-restored-state");
        }
        let out = cluster.cli(&args)?;
        Ok((out.status.success(), serde_json::from_str(&out.stdout)?))
    };
    let verdict = |report: &serde_json::Value, uid: &str| -> serde_json::Value {
        report["operators"].as_array().unwrap().iter().find(|o| o["uid"] == uid).cloned().unwrap_or_default()
    };
    let (exit_ok, same) = check(&cluster, &same_spec, false)?;
    assert!(!exit_ok && same["ok"] == false, "the old sink's state would be dropped without permission: {same}");
    assert_eq!(verdict(&same, "counts")["verdict"], "RESTORED", "{same}");
    assert_eq!(verdict(&same, "counts")["states"][0]["name"], "count", "{same}");
    assert_eq!(verdict(&same, "events")["states"][0]["name"], "splits", "{same}");
    assert_eq!(verdict(&same, "sink")["verdict"], "NEW", "{same}");
    assert_eq!(verdict(&same, "out")["verdict"], "DROPPED", "{same}");
    let (exit_ok, allowed) = check(&cluster, &same_spec, true)?;
    assert!(exit_ok && allowed["ok"] == true, "{allowed}");
    let (exit_ok, changed) = check(&cluster, &other_spec, false)?;
    assert!(!exit_ok && changed["ok"] == false, "{changed}");
    let counts = verdict(&changed, "counts");
    assert_eq!(counts["verdict"], "DROPPED", "{changed}");
    assert!(counts["reason"].as_str().unwrap().contains("written by kind \"keyed-count\""), "{changed}");

    refused(
        &mut cluster,
        &other,
        &url,
        false,
        "operator \"counts\" DROPPED: its state was written by kind \"keyed-count\" and the job runs kind \"distinct-values\"",
    );
    // Two reasons at once (`counts` changed kind, `out` is gone): the refusal names both, with their states,
    // as `savepoint check` does — not only the first.
    let both = other.replace("uid: out", "uid: sink");
    let err = cluster.submit_from(&both, &url, "", false).expect_err("the submission is refused");
    let msg = format!("{err:#}");
    for expected in [
        "operators the job does not have: out",
        "operator \"counts\" DROPPED: its state was written by kind \"keyed-count\"",
        "state \"count\" DROPPED",
        "operator \"out\" DROPPED: the job has no operator with this uid",
        "--allow-non-restored-state",
    ] {
        assert!(msg.contains(expected), "expected {expected:?} in: {msg}");
    }
    assert!(cluster.jobs()?.iter().all(|j| j.id == id), "nothing was deployed");
    // With permission, the job says after the restore which states it dropped: every one, with why.
    let both_spec = dir.join("both.yaml");
    std::fs::write(&both_spec, &both)?;
    let out = cluster.cli(&[
        "job",
        "submit",
        &both_spec.display().to_string(),
        "--from-savepoint",
        &url,
        "--allow-non-restored-state",
        "--output",
        "json",
    ])?;
    assert!(out.status.success(), "{out}");
    assert!(out.stderr.contains("warning: the restore drops state \"count\" of operator \"counts\""), "{out}");
    let submitted: serde_json::Value = serde_json::from_str(&out.stdout)?;
    let b = submitted["id"].as_str().unwrap().to_string();
    let status = cluster.cli_json(&["job", "status", &b])?;
    let dropped: Vec<(String, String)> = status["dropped_states"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["uid"].as_str().unwrap().to_string(), d["state"].as_str().unwrap().to_string()))
        .collect();
    assert!(dropped.contains(&("counts".into(), "count".into())), "{status}");
    assert!(dropped.iter().any(|(uid, _)| uid == "out"), "{status}");
    assert_eq!(status["dropped_state"], serde_json::json!(["counts", "out"]), "{status}");
    cluster.cancel(&b)?;
    // The operator itself may allow it: `drop_state_on_change: true`.
    let permissive = other.replace("kind: distinct-values,", "kind: distinct-values, drop_state_on_change: true,");
    assert_ne!(permissive, other);
    let permissive_spec = dir.join("permissive.yaml");
    std::fs::write(&permissive_spec, &permissive)?;
    let (exit_ok, report) = check(&cluster, &permissive_spec, false)?;
    assert!(exit_ok && report["ok"] == true && verdict(&report, "counts")["verdict"] == "DROPPED", "{report}");
    let r = cluster.submit_from(&other, &url, "", true)?;
    let running = cluster.wait_for_state(&r, &[JobState::Running, JobState::Finished], Duration::from_secs(60))?;
    assert_eq!(running.dropped_state, vec!["counts".to_string()], "{running:?}");
    cluster.cancel(&r)?;
    cluster.stop();
    Ok(())
}

/// A savepoint that times out because one task's upload hangs: its client learns why and the job keeps
/// running. The slow task uploads into the savepoint's directory after the failure, and its late
/// acknowledgement makes the job manager delete that directory again: nothing is left. The next savepoint
/// succeeds.
#[test]
fn a_failed_savepoint_leaves_no_files_even_when_a_task_acknowledges_late() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(0, 4))?;
    // This task manager's first snapshot upload waits 4 s, well past the savepoint's 1.5 s timeout.
    cluster.start_taskmanager_with_env(&[("WEIR_FAILPOINTS".into(), "task-upload=1*return(delay:4000)".into())])?;
    let out = cluster.output_dir("counts")?;
    // No periodic checkpoint comes first: the first upload is the savepoint's.
    let job = CountJob::unbounded("late-ack", 2_000, 3)
        .rate(20_000)
        .checkpoint_every_ms(600_000)
        .checkpoint_timeout_ms(1_500)
        .into_files(&out);
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    let target = cluster.dir().join("savepoints");
    let target_url = format!("file://{}", target.display());
    let failed = cluster.cli_json(&["savepoint", "trigger", &id, &target_url]);
    let msg = format!("{:#}", failed.expect_err("the savepoint times out"));
    assert!(msg.contains("savepoint failed") && msg.contains("expired"), "{msg}");
    assert_eq!(job_state(&cluster.job(&id)?), Some(JobState::Running), "the job is unharmed");
    // The slow task's files arrive after the failure; its acknowledgement gets them deleted.
    weir_integration_tests::wait_until("for the late acknowledgement's cleanup", Duration::from_secs(30), || {
        let log = cluster.jobmanager_log()?;
        Ok(log
            .lines()
            .any(|l| l.contains("deleted the files of a failed savepoint") && l.contains("late"))
            .then_some(()))
    })?;
    let left: Vec<_> = std::fs::read_dir(&target).into_iter().flatten().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "a failed savepoint leaves nothing behind: {left:?}");
    // The failpoint fired once: the next savepoint completes.
    let taken = cluster.cli_json(&["savepoint", "trigger", &id, &target_url])?;
    let url = taken["savepoint"].as_str().unwrap().to_string();
    assert!(local_path(&url).join("_metadata").is_file(), "{url}");
    cluster.cancel(&id)?;
    cluster.stop();
    Ok(())
}
