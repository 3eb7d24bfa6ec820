//! A user operator kind in a user-built task manager: the `buffering-sink` of `examples/` (Flink's
//! `BufferingSink` with transactional write-outs), run by `weir-example-taskmanager`, keeps its output exact
//! across task-manager crashes.
//!
//! - `counts_…`: `datagen` → `keyed-count` (`emit: updates`) → `buffering-sink`; every running count is
//!   committed exactly once, all through the run and across the crashes.
//! - `records_…`: `datagen` → `buffering-sink`; every record is buffered, written out and committed across
//!   many checkpoints and the crashes, so the committed lines must be exactly the generated records.
//!
//! Build the binaries first: `cargo build --release --workspace --bins`.

use anyhow::{bail, Context};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use weir_integration_tests::{
    read_sink_lines, scenario_seed, verify_counts, verify_running_counts, Cluster, ClusterOptions, JobState,
};

const TASKMANAGER: &str = "weir-example-taskmanager";
const RECORDS: u64 = 500_000;
const KEYS: u64 = 50_000;
const RATE: u64 = 40_000; // 12.5 s of input
const THRESHOLD: u64 = 1000;
const CRASHES: u32 = 2;

/// `datagen` (→ `keyed-count` emitting running counts when `counted`) → `buffering-sink`, parallelism 2
/// everywhere.
fn spec(name: &str, seed: u64, counted: bool, out: &Path) -> String {
    let (counter, sink_input) = if counted {
        ("\n  - { uid: counts, kind: keyed-count, input: events, config: { emit: updates } }", "counts")
    } else {
        ("", "events")
    };
    format!(
        "name: {name}\n\
         parallelism: 2\n\
         state_backend: rocksdb\n\
         checkpointing: {{ interval_ms: 500 }}\n\
         restart: {{ strategy: fixed-delay, attempts: 100, delay_ms: 500 }}\n\
         operators:\n  \
           - {{ uid: events, kind: datagen, config: {{ count: {RECORDS}, keys: {KEYS}, seed: {seed}, \
                rate_per_sec: {RATE} }} }}{counter}\n  \
           - {{ uid: out, kind: buffering-sink, input: {sink_input}, parallelism: 2, \
                config: {{ path: {out:?}, threshold: {THRESHOLD} }} }}\n"
    )
}

/// Runs the job on three example task managers, SIGKILLs a busy one `CRASHES` times (each after a newer
/// completed checkpoint, with a replacement), and waits until the job finished.
fn run_with_crashes(cluster: &mut Cluster, spec: &str, rng: &mut StdRng) -> anyhow::Result<()> {
    let id = cluster.submit(spec)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    let mut last_before_crash = 0;
    for crash in 1..=CRASHES {
        cluster.wait_for_checkpoint_after(&id, last_before_crash, Duration::from_secs(60))?;
        std::thread::sleep(Duration::from_millis(rng.random_range(300..2000)));
        let before = cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
        let victim = cluster.kill_random_busy_taskmanager(rng)?;
        last_before_crash = before.last_completed_checkpoint.unwrap_or(0);
        eprintln!("crash {crash}: killed tm-{victim} after checkpoint {last_before_crash}");
        cluster.start_taskmanager()?;
    }
    let done = cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180))?;
    eprintln!("finished: {} restarts, {} checkpoints completed", done.restarts, done.checkpoints_completed);
    if done.restarts < CRASHES {
        bail!("{CRASHES} crashes but {} restarts: {done:?}", done.restarts);
    }
    Ok(())
}

/// Sums the values per key over every committed (not dot-prefixed) file of `dir`; also returns the number of
/// lines. Every line must be `key,1`: one generated record.
fn sum_records(dir: &Path) -> anyhow::Result<(HashMap<u64, u64>, u64)> {
    let mut sums = HashMap::new();
    let mut lines = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let text = std::fs::read_to_string(entry.path())?;
        for (n, line) in text.lines().enumerate() {
            let parsed = line.split_once(',').and_then(|(k, v)| Some((k.parse::<u64>().ok()?, v.parse::<u64>().ok()?)));
            let (key, value) =
                parsed.with_context(|| format!("{}:{}: bad line {line:?}", entry.path().display(), n + 1))?;
            if value != 1 {
                bail!("{}:{}: value {value}, a generated record has 1", entry.path().display(), n + 1);
            }
            *sums.entry(key).or_insert(0) += value;
            lines += 1;
        }
    }
    Ok((sums, lines))
}

fn start_cluster() -> anyhow::Result<Cluster> {
    Cluster::start(ClusterOptions::new(3, 2).with_taskmanager_binary(TASKMANAGER))
}

#[test]
fn counts_through_the_buffering_sink_are_exact_after_crashes() -> anyhow::Result<()> {
    let seed = scenario_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cluster = start_cluster()?;
    let out = cluster.output_dir("counts")?;
    run_with_crashes(&mut cluster, &spec("buffering-counts", seed % 1000, true, &out), &mut rng)?;
    if let Err(diff) = verify_running_counts(&read_sink_lines(&out)?, seed % 1000, RECORDS, KEYS) {
        panic!("{diff}");
    }
    cluster.stop();
    Ok(())
}

#[test]
fn records_through_the_buffering_sink_are_exact_after_crashes() -> anyhow::Result<()> {
    let seed = scenario_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cluster = start_cluster()?;
    let out = cluster.output_dir("records")?;
    run_with_crashes(&mut cluster, &spec("buffering-records", seed % 1000, false, &out), &mut rng)?;
    let (sums, lines) = sum_records(&out)?;
    // Each key's number of committed lines must be its number of generated records: a duplicate or a lost
    // record changes a count.
    if let Err(diff) = verify_counts(&sums, seed % 1000, RECORDS, KEYS) {
        panic!("{diff}");
    }
    assert_eq!(lines, RECORDS, "committed lines");
    cluster.stop();
    Ok(())
}
