//! Every keyed state kind (value, list, map, reducing, aggregating) and every operator state kind (list,
//! union, broadcast) survives a rescale 3 → 5 → 2 through savepoints with its content exact, on RocksDB and
//! on heap. The `state-kinds` operator (examples crate) keeps all of them; at end of input it emits what they
//! hold, and the committed output is compared with what the datagen formula says — after the scale-out too:
//! the savepoint of the first step is restored twice, once at 5 run to the end (every state kind checked on
//! five subtasks, union and broadcast state on the new ones among them), once at 5 stopped again and
//! restored at 2.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;
use weir_common::job::datagen::key_of;
use weir_integration_tests::{Cluster, ClusterOptions, JobState};

const RECORDS: u64 = 200_000;
const KEYS: u64 = 2_000;
const SEED: u64 = 17;

fn spec(parallelism: u32, backend: &str, out: &Path) -> String {
    format!(
        "name: kinds\n\
         parallelism: {parallelism}\n\
         state_backend: {backend}\n\
         checkpointing: {{ interval_ms: 300 }}\n\
         restart: {{ strategy: fixed-delay, attempts: 3, delay_ms: 200 }}\n\
         operators:\n  \
           - {{ uid: events, kind: datagen, config: {{ count: {RECORDS}, keys: {KEYS}, seed: {SEED}, rate_per_sec: 40000 }} }}\n  \
           - {{ uid: kinds, kind: state-kinds, input: events }}\n  \
           - {{ uid: out, kind: file-sink, input: kinds, parallelism: 1, config: {{ path: {out:?} }} }}\n"
    )
}

/// Every committed line under `dir` (dot-prefixed files are in progress).
fn committed_lines(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        lines.extend(std::fs::read_to_string(e.path()).unwrap().lines().map(str::to_string));
    }
    lines
}

fn rescale_3_5_2(backend: &str) -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 3).with_taskmanager_binary("weir-example-taskmanager"))?;
    let out = cluster.output_dir("kinds")?;
    let scaled_out = cluster.output_dir("kinds-at-5")?;
    let first = cluster.submit(&spec(3, backend, &out))?;
    cluster.wait_for_checkpoints(&first, 2, Duration::from_secs(60))?;
    let at_3 = cluster.stop_with_savepoint(&first, false, "native")?;
    // The scale-out, run to the end: every kind of state on five subtasks.
    let to_5 = cluster.submit_from(&spec(5, backend, &scaled_out), &at_3, "", false)?;
    cluster.wait_for_state(&to_5, &[JobState::Finished], Duration::from_secs(120))?;
    check_output(&scaled_out, 5)?;
    // The chain: at 5 again, stopped, then at 2 to the end.
    let again = cluster.submit_from(&spec(5, backend, &out), &at_3, "", false)?;
    cluster.wait_for_checkpoints(&again, 2, Duration::from_secs(60))?;
    let at_5 = cluster.stop_with_savepoint(&again, false, "native")?;
    let last = cluster.submit_from(&spec(2, backend, &out), &at_5, "", false)?;
    cluster.wait_for_state(&last, &[JobState::Finished], Duration::from_secs(120))?;
    check_output(&out, 2)?;
    cluster.stop();
    Ok(())
}

/// Checks what a run that ended at parallelism `p` committed under `out`: every state kind's content exact.
fn check_output(out: &Path, p: usize) -> anyhow::Result<()> {
    let mut expected_counts: BTreeMap<u64, u64> = BTreeMap::new();
    for i in 0..RECORDS {
        *expected_counts.entry(key_of(SEED, i, KEYS)).or_insert(0) += 1;
    }
    let (mut keyed, mut tokens, mut members, mut configs) = (BTreeMap::new(), Vec::new(), Vec::new(), Vec::new());
    for line in committed_lines(out) {
        let (key, value) = line.split_once(',').expect("key,value");
        match key {
            "token" => tokens.push(value.to_string()),
            "members" => members.push(value.to_string()),
            "config" => configs.push(value.to_string()),
            k => assert!(keyed.insert(k.parse::<u64>()?, value.to_string()).is_none(), "key {k} twice"),
        }
    }
    // Keyed state: every kind holds exactly what the key's n records put there.
    assert_eq!(keyed.len(), expected_counts.len(), "one line per key");
    for (k, n) in &expected_counts {
        let tri = n * (n + 1) / 2;
        let squares: u64 = (1..=*n).map(|i| i * i).sum();
        assert_eq!(keyed[k], format!("{n}|{n}|{tri}|{n}|{squares}|{tri}|{n}"), "key {k}");
    }
    // Operator list state: each of the first run's 30 tokens exactly once, wherever it ended up.
    tokens.sort();
    let all: Vec<String> = (0..3).flat_map(|i| (0..10).map(move |j| format!("t-{i}-{j}"))).collect();
    let all_sorted: Vec<String> = all.iter().cloned().collect::<BTreeSet<_>>().into_iter().collect();
    assert_eq!(tokens, all_sorted, "list state: every element once");
    // Union state: every subtask of the last run holds every element of the first run's 3 subtasks.
    assert_eq!(members, vec!["m-0,m-1,m-2".to_string(); p], "union state on every subtask");
    // Broadcast state: the same copy on every subtask.
    assert_eq!(configs, vec!["rule=r1".to_string(); p], "broadcast state on every subtask");
    Ok(())
}

#[test]
fn every_state_kind_survives_3_5_2_on_rocksdb() -> anyhow::Result<()> {
    rescale_3_5_2("rocksdb")
}

#[test]
fn every_state_kind_survives_3_5_2_on_heap() -> anyhow::Result<()> {
    rescale_3_5_2("heap")
}

#[test]
fn a_restore_whose_union_state_fans_out_over_the_limit_is_refused_before_deploying() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 3).with_taskmanager_binary("weir-example-taskmanager"))?;
    let out = cluster.output_dir("kinds")?;
    let id = cluster.submit(&spec(3, "rocksdb", &out))?;
    cluster.wait_for_checkpoints(&id, 1, Duration::from_secs(60))?;
    let url = cluster.stop_with_savepoint(&id, false, "native")?;
    // The union state (3 elements of 7 bytes) read by each of 5 subtasks: 105 bytes, over a limit of 100.
    cluster.terminate_jobmanager(Duration::from_secs(10))?;
    cluster.set_jobmanager_env(vec![("WEIR_UNION_STATE_FANOUT_LIMIT".into(), "100".into())]);
    cluster.restart_jobmanager()?;
    // The job manager learns the kinds from the task managers: wait until both registered again.
    weir_integration_tests::wait_until("for the task managers to register again", Duration::from_secs(30), || {
        Ok((cluster.overview()?.task_managers.len() == 2).then_some(()))
    })?;
    let file = cluster.dir().join("kinds-5.yaml");
    std::fs::write(&file, spec(5, "rocksdb", &out))?;
    let refused = cluster.cli(&["job", "submit", &file.to_string_lossy(), "--from-savepoint", &url])?;
    assert!(!refused.status.success(), "{refused}");
    assert!(
        refused.stderr.contains("operator \"kinds\"")
            && refused.stderr.contains("restored at parallelism 5")
            && refused.stderr.contains("105 bytes in all")
            && refused.stderr.contains("union-state fan-out limit of 100 bytes"),
        "{refused}"
    );
    assert!(cluster.jobs()?.iter().all(|j| j.id == id), "nothing was deployed: {:?}", cluster.jobs()?);
    // At parallelism 4 (84 bytes) the same savepoint restores.
    let ok = cluster.submit_from(&spec(4, "rocksdb", &out), &url, "", false)?;
    cluster.wait_for_state(&ok, &[JobState::Finished], Duration::from_secs(120))?;
    cluster.stop();
    Ok(())
}
