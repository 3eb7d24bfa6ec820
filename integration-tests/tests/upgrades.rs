//! Upgrading a job's code between a savepoint and its restore, with a custom task-manager binary in two
//! versions (`weir-example-taskmanager` and `weir-example-taskmanager-v2`, `weir_examples::upgrades`): an Avro
//! state with a field removed and one added (with a default) is migrated over a million keys, every count
//! exact, while the job is also rescaled 2 → 3 on RocksDB, and while it moves from RocksDB to the heap through
//! a canonical savepoint (at parallelism 1); a bincode state whose struct changed is reported `DROPPED` and restored only
//! with permission (and, for an operator with `uid_stated: true`, on purpose without it); a Protobuf field
//! number reused with another type and a changed key type are refused before anything is deployed, naming the
//! field and the key.

use std::path::Path;
use std::time::{Duration, Instant};
use weir_integration_tests::{
    counts_after, datagen_positions, read_sink_output, verify_job_output, Cluster, ClusterOptions, CountJob, JobState,
};

const V1: &str = "weir-example-taskmanager";
const V2: &str = "weir-example-taskmanager-v2";

/// `weir savepoint check URL SPEC --output json [--allow-non-restored-state]`: whether it exited 0, and its JSON.
fn check(cluster: &Cluster, url: &str, spec: &Path, allow: bool) -> anyhow::Result<(bool, serde_json::Value)> {
    let spec = spec.display().to_string();
    let mut args = vec!["savepoint", "check", url, spec.as_str(), "--output", "json"];
    if allow {
        args.push("--allow-non-restored-state");
    }
    let out = cluster.cli(&args)?;
    Ok((out.status.success(), serde_json::from_str(&out.stdout)?))
}

fn operator(report: &serde_json::Value, uid: &str) -> serde_json::Value {
    report["operators"].as_array().unwrap().iter().find(|o| o["uid"] == uid).cloned().unwrap_or_default()
}

/// A counting job whose counter is the example kind `kind`.
fn job_of(kind: &str, job: &CountJob, backend: &str) -> String {
    let yaml = job.yaml().replace("kind: keyed-count", &format!("kind: {kind}"));
    yaml.replace("state_backend: rocksdb", &format!("state_backend: {backend}"))
}

/// Runs `spec` on v1 for about `run_for`, and stops it with a savepoint in `format`.
fn savepoint_of(cluster: &mut Cluster, spec: &str, run_for: Duration, format: &str) -> anyhow::Result<String> {
    let id = cluster.submit(spec)?;
    let started = Instant::now();
    cluster.wait_for_checkpoints(&id, 1, Duration::from_secs(120))?;
    if let Some(rest) = run_for.checked_sub(started.elapsed()) {
        std::thread::sleep(rest);
    }
    cluster.stop_with_savepoint(&id, false, format)
}

/// The Avro state migrates while the job also changes shape: the savepoint is taken at parallelism 2 on `from`
/// (in `format`) and restored at `parallelism` on `to`.
fn avro_state_migrates(from: &str, format: &str, to: &str, parallelism: u32) -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 4).with_taskmanager_binary(V1))?;
    let out = cluster.output_dir("counts")?;
    // A million keys, about 2.4M records (all but ~9% of the keys) read before the savepoint.
    let job = CountJob::bounded("profiles", 3_600_000, 1_000_000, 11)
        .rate(400_000)
        .checkpoint_every_ms(1_000)
        .into_files(&out);
    let url = savepoint_of(&mut cluster, &job_of("profiles", &job, from), Duration::from_secs(6), format)?;
    let spec = job_of("profiles", &job.clone().parallelism(parallelism), to);
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(Path::new(url.strip_prefix("file://").unwrap()).join("_metadata"))?)?;
    let written = &meta["operators"]["counts"]["signature"]["states"][0];
    assert_eq!(written["value"]["format"], "avro", "the savepoint records the Avro schema: {written}");

    cluster.replace_taskmanagers(V2)?;
    let spec_file = cluster.output_dir("specs")?.join("profiles.yaml");
    std::fs::write(&spec_file, &spec)?;
    let (exit_ok, report) = check(&cluster, &url, &spec_file, false)?;
    assert!(exit_ok && report["ok"] == true, "{report}");
    let counts = operator(&report, "counts");
    assert_eq!(counts["verdict"], "MIGRATED", "{report}");
    let state = &counts["states"][0];
    assert_eq!((&state["name"], &state["verdict"]), (&"tally".into(), &"MIGRATED".into()), "{report}");
    assert!(state["reason"].as_str().unwrap().contains("avro Profile"), "{report}");
    assert!(state["from"].as_str().unwrap().contains("\"label\""), "{report}");
    assert!(state["to"].as_str().unwrap().contains("\"weight\""), "{report}");

    let r = cluster.submit_from(&spec, &url, "", false)?;
    cluster.wait_for_state(&r, &[JobState::Finished], Duration::from_secs(300))?;
    // v2 adds each profile's weight per record: a migrated profile without its default (1) would count wrong.
    verify_job_output(&job, &out)?;
    // The v2 task manager logged each subtask's migration: most of the million keys were in the savepoint.
    let log = std::fs::read_to_string(cluster.dir().join("logs").join("tm-1.log"))?;
    let migrated: u64 = log
        .lines()
        .filter(|l| l.contains("state migrated"))
        .filter_map(|l| l.split("values=").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse::<u64>().ok())
        .sum();
    println!("{from} ({format}) -> {to} at parallelism {parallelism}: {migrated} values migrated");
    assert!(migrated > 500_000, "{migrated} values migrated; the log: {log}");
    cluster.stop();
    Ok(())
}

#[test]
fn avro_state_with_a_field_added_migrates_on_rocksdb_rescaled_2_to_3_with_every_value_exact() -> anyhow::Result<()> {
    avro_state_migrates("rocksdb", "native", "rocksdb", 3)
}

#[test]
fn avro_state_migrates_from_a_canonical_rocksdb_savepoint_into_the_heap_with_every_value_exact() -> anyhow::Result<()> {
    avro_state_migrates("rocksdb", "canonical", "heap", 1)
}

#[test]
fn changed_bincode_protobuf_and_key_types_are_judged_before_deploying() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 8).with_taskmanager_binary(V1))?;
    let specs = cluster.output_dir("specs")?;
    let mut savepoints = Vec::new();
    for kind in ["sessions", "people", "visits", "people-stated"] {
        let out = cluster.output_dir(kind)?;
        let job = CountJob::bounded(kind, 400_000, 2_000, 5).rate(100_000).checkpoint_every_ms(300).into_files(&out);
        let spec = match kind {
            // `uid_stated: true`: the operator's uid carries its state signature.
            "people-stated" => job_of("people, uid_stated: true", &job, "rocksdb"),
            _ => job_of(kind, &job, "rocksdb"),
        };
        let url = savepoint_of(&mut cluster, &spec, Duration::from_secs(1), "native")?;
        let file = specs.join(format!("{kind}.yaml"));
        std::fs::write(&file, &spec)?;
        savepoints.push((kind, job, spec, file, url, out));
    }
    cluster.replace_taskmanagers(V2)?;
    let jobs_before = cluster.jobs()?.len();

    for (kind, job, spec, file, url, out) in &savepoints {
        let (exit_ok, report) = check(&cluster, url, file, false)?;
        let counts = operator(&report, "counts");
        let (allowed_ok, allowed) = check(&cluster, url, file, true)?;
        let submitted = cluster.submit_from(spec, url, "", false);
        match *kind {
            // A field number reused with another type: refused, whatever the permission, naming the field.
            "sessions" => {
                assert!(!exit_ok && !allowed_ok && allowed["ok"] == false, "{report}");
                assert_eq!(counts["verdict"], "INCOMPATIBLE", "{report}");
                let reason = counts["states"][0]["reason"].as_str().unwrap();
                assert!(reason.contains("field number 2") && reason.contains("`string label`"), "{report}");
                assert!(reason.contains("`double ratio`"), "{report}");
                let err = format!("{:#}", submitted.expect_err("refused"));
                assert!(err.contains("field number 2"), "{err}");
                assert!(cluster.submit_from(spec, url, "", true).is_err(), "permission does not help");
            }
            // The key type changed: refused.
            "visits" => {
                assert!(!exit_ok && !allowed_ok, "{report}");
                assert_eq!(counts["verdict"], "INCOMPATIBLE", "{report}");
                assert!(counts["reason"].as_str().unwrap().contains("key type changed"), "{report}");
                assert!(counts["reason"].as_str().unwrap().contains("seq<u8"), "{report}");
                let err = format!("{:#}", submitted.expect_err("refused"));
                assert!(err.contains("key type changed"), "{err}");
            }
            // bincode cannot evolve: the state is dropped, with permission only.
            "people" => {
                assert!(!exit_ok && report["ok"] == false, "{report}");
                assert_eq!(counts["verdict"], "DROPPED", "{report}");
                assert!(counts["states"][0]["reason"].as_str().unwrap().contains("bincode"), "{report}");
                assert!(allowed_ok && allowed["ok"] == true, "{allowed}");
                assert!(submitted.is_err(), "without permission the submission is refused");
                assert_eq!(cluster.jobs()?.len(), jobs_before, "nothing was deployed");
                let r = cluster.submit_from(spec, url, "", true)?;
                let done = cluster.wait_for_state(&r, &[JobState::Finished], Duration::from_secs(120))?;
                assert!(done.dropped_state.iter().any(|d| d.contains("counts")), "{:?}", done.dropped_state);
                // The counts start afresh from zero, and the source (whose state was kept) goes on where it
                // stopped: the output is exactly the counts of the records after the savepoint's positions.
                let sp_dir = Path::new(url.strip_prefix("file://").expect("a local savepoint"));
                let positions = datagen_positions(sp_dir, "events")?;
                assert_eq!(positions.len(), 128, "every split's position is in the savepoint");
                let read_before: u64 = positions
                    .iter()
                    .map(|(&j, &next)| next - weir_common::job::datagen::split_range(j, 128, Some(400_000)).0)
                    .sum();
                assert!(read_before > 0, "the first run read records before its savepoint");
                let expected = counts_after(job.seed, 400_000, job.keys, 128, &positions);
                let got = read_sink_output(out)?;
                assert_eq!(got.values().sum::<u64>(), 400_000 - read_before, "records counted after the restore");
                assert!(
                    got == expected,
                    "the output is not the counts after the savepoint ({} keys, {} expected)",
                    got.len(),
                    expected.len()
                );
            }
            // With uid_stated, the changed signature is a new uid: the old state is dropped on purpose, no
            // permission needed.
            "people-stated" => {
                assert!(exit_ok && report["ok"] == true, "{report}");
                let stated: Vec<&serde_json::Value> = report["operators"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|o| o["uid"].as_str().is_some_and(|u| u.starts_with("counts@")))
                    .collect();
                assert_eq!(stated.len(), 2, "the old and the new stated uid: {report}");
                let old = stated.iter().find(|o| o["verdict"] == "DROPPED").expect("the old uid dropped");
                assert!(old["reason"].as_str().unwrap().contains("uid_stated"), "{report}");
                assert!(stated.iter().any(|o| o["verdict"] == "NEW"), "{report}");
                let r = submitted?;
                let done = cluster.wait_for_state(&r, &[JobState::Finished], Duration::from_secs(120))?;
                assert!(done.dropped_state.iter().any(|d| d.contains("counts@")), "{:?}", done.dropped_state);
            }
            _ => unreachable!(),
        }
    }
    assert_eq!(cluster.jobs()?.len(), jobs_before + 2, "only the permitted restores were deployed");
    cluster.stop();
    Ok(())
}

/// A user's window kinds (`weir_examples::windows`, on Weir's window library) upgraded with windows open: the
/// Avro accumulator of `window-profiles` (a field removed, one added with a default) is `MIGRATED`, the
/// Protobuf elements of the process-window kind `window-visits` (a field number reused) are `INCOMPATIBLE` —
/// `savepoint check` shows each operator's window contents and timers —; restored into v2 without the refused
/// operator, every tumbling window fires exactly once with its exact count (v2 adds each accumulator's
/// `weight`, so a migrated accumulator without its default would count wrong).
#[test]
fn window_accumulators_of_a_user_kind_migrate_or_are_refused_and_open_windows_fire_once() -> anyhow::Result<()> {
    use weir_integration_tests::windows::{check_rows, expected, records, spec, Shape};
    let (count, keys, rate) = (30_000u64, 200u64, 6_000u64);
    let mut cluster = Cluster::start(ClusterOptions::new(1, 8).with_taskmanager_binary(V1))?;
    let dirs = [cluster.output_dir("profiles")?, cluster.output_dir("visits")?];
    let sinks = [(Shape::Tumbling(100), dirs[0].as_path()), (Shape::Session(50), dirs[1].as_path())];
    let kinds = |yaml: String| {
        yaml.replace("uid: win0, kind: window-aggregate", "uid: win0, kind: window-profiles")
            .replace("uid: win1, kind: window-aggregate", "uid: win1, kind: window-visits")
    };
    let both = kinds(spec("user-windows", "rocksdb", 2, count, keys, rate, &sinks));
    let id = cluster.submit(&both)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    std::thread::sleep(Duration::from_millis(1500));
    let url = cluster.stop_with_savepoint(&id, false, "native")?;

    cluster.replace_taskmanagers(V2)?;
    let spec_file = cluster.output_dir("specs")?.join("user-windows.yaml");
    std::fs::write(&spec_file, &both)?;
    let (exit_ok, report) = check(&cluster, &url, &spec_file, false)?;
    assert!(!exit_ok && report["ok"] == false, "an incompatible state fails the check: {report}");
    let state = |op: &serde_json::Value, name: &str| {
        op["states"].as_array().and_then(|s| s.iter().find(|s| s["name"] == name).cloned()).unwrap_or_default()
    };
    let profiles = operator(&report, "win0");
    assert_eq!(profiles["verdict"], "MIGRATED", "{report}");
    let contents = state(&profiles, "window-contents");
    assert_eq!(contents["verdict"], "MIGRATED", "{report}");
    assert!(contents["from"].as_str().unwrap_or("").contains("\"label\""), "{report}");
    assert!(contents["to"].as_str().unwrap_or("").contains("\"weight\""), "{report}");
    assert!(!state(&profiles, "_timers.event").is_null(), "the check lists the window's timers: {report}");
    let visits = operator(&report, "win1");
    assert_eq!(visits["verdict"], "INCOMPATIBLE", "{report}");
    let elements = state(&visits, "window-contents");
    assert_eq!(elements["verdict"], "INCOMPATIBLE", "{report}");
    let why = elements["reason"].as_str().unwrap_or("");
    assert!(why.contains("label") && why.contains("ratio"), "{report}");
    for name in ["window-sessions", "_timers.event"] {
        assert!(!state(&visits, name).is_null(), "the check lists {name}: {report}");
    }

    // Without the refused operator (and its sink), the job restores into v2 and finishes.
    let one = kinds(spec("user-windows", "rocksdb", 2, count, keys, rate, &sinks[..1]));
    let r = cluster.submit_from(&one, &url, "", true)?;
    cluster.wait_for_state(&r, &[JobState::Finished], Duration::from_secs(180))?;
    check_rows("window-profiles after the upgrade", &dirs[0], &expected(Shape::Tumbling(100), &records(count, keys)))?;
    cluster.stop();
    Ok(())
}
