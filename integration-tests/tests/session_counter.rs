//! A keyed user operator with time-to-live state in a user-built task manager: the `distinct-values` kind of
//! `examples/` (per key, the distinct values seen, in a `MapState<i64, u64>` with TTL), run by
//! `weir-example-taskmanager`, keeps its keyed state across a task-manager crash.
//!
//! `datagen` → `distinct-values` (a TTL far longer than the job, so nothing expires) → `file-sink`, with a
//! task manager SIGKILLed mid-run and replaced. Every datagen value is 1, so every generated key must come out
//! exactly once with a distinct count of exactly 1, and no other key may appear: a lost key, a key emitted
//! twice or a wrongly restored map all show.
//!
//! Build the binaries first: `cargo build --release --workspace --bins`.

use anyhow::bail;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;
use weir_common::datagen::expected_counts;
use weir_integration_tests::{read_sink_output, scenario_seed, Cluster, ClusterOptions, JobState};

const TASKMANAGER: &str = "weir-example-taskmanager";
const RECORDS: u64 = 200_000;
const KEYS: u64 = 1000;
const RATE: u64 = 50_000; // 4 s of input
const CHECKPOINT_MS: u64 = 300;
/// One hour: nothing expires while the job runs.
const TTL_MS: u64 = 3_600_000;

/// `datagen` → `distinct-values` (parallelism 2, partitioned by key) → `file-sink` (parallelism 1).
fn spec(seed: u64, out: &Path) -> String {
    format!(
        "name: session-counter\n\
         parallelism: 2\n\
         state_backend: rocksdb\n\
         checkpointing: {{ interval_ms: {CHECKPOINT_MS} }}\n\
         restart: {{ strategy: fixed-delay, attempts: 100, delay_ms: 500 }}\n\
         operators:\n  \
           - {{ uid: events, kind: datagen, config: {{ count: {RECORDS}, keys: {KEYS}, seed: {seed}, \
                rate_per_sec: {RATE} }} }}\n  \
           - {{ uid: distinct, kind: distinct-values, input: events, config: {{ ttl_ms: {TTL_MS} }} }}\n  \
           - {{ uid: out, kind: file-sink, input: distinct, parallelism: 1, config: {{ path: {out:?} }} }}\n"
    )
}

/// Every key datagen generates must have the distinct count 1 (its only value is 1); no other key may appear.
fn verify_distinct(output: &HashMap<u64, u64>, seed: u64) -> Result<(), String> {
    let expected = expected_counts(seed, RECORDS, KEYS);
    let mut missing = Vec::new();
    let mut wrong = Vec::new();
    for (key, &records) in expected.iter().enumerate() {
        let key = key as u64;
        match output.get(&key) {
            None if records > 0 => missing.push(key),
            Some(&got) if records > 0 && got != 1 => wrong.push((key, got)),
            _ => {}
        }
    }
    let mut extra: Vec<u64> =
        output.keys().copied().filter(|&k| k >= KEYS || expected[k as usize] == 0).collect::<Vec<_>>();
    if missing.is_empty() && wrong.is_empty() && extra.is_empty() {
        return Ok(());
    }
    missing.sort_unstable();
    wrong.sort_unstable();
    extra.sort_unstable();
    let expected_keys = expected.iter().filter(|&&c| c > 0).count();
    Err(format!(
        "distinct counts differ from datagen(seed {seed}, count {RECORDS}, keys {KEYS}): {} keys in the output, \
         {expected_keys} expected, each with count 1\n  {} missing, e.g. {:?}\n  {} unexpected, e.g. {:?}\n  \
         {} with a count other than 1, e.g. {:?}",
        output.len(),
        missing.len(),
        &missing[..missing.len().min(5)],
        extra.len(),
        &extra[..extra.len().min(5)],
        wrong.len(),
        &wrong[..wrong.len().min(5)],
    ))
}

#[test]
fn distinct_values_with_ttl_state_are_exact_after_a_crash() -> anyhow::Result<()> {
    let seed = scenario_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cluster = Cluster::start(ClusterOptions::new(3, 2).with_taskmanager_binary(TASKMANAGER))?;
    let out = cluster.output_dir("distinct")?;
    let id = cluster.submit(&spec(seed % 1000, &out))?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;

    // Crash after a completed checkpoint, at a random moment of the checkpoint cycle, while input still flows.
    cluster.wait_for_checkpoint_after(&id, 0, Duration::from_secs(60))?;
    std::thread::sleep(Duration::from_millis(rng.random_range(200..1200)));
    let before = cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
    let victim = cluster.kill_random_busy_taskmanager(&mut rng)?;
    eprintln!("killed tm-{victim} after checkpoint {}", before.last_completed_checkpoint.unwrap_or(0));
    cluster.start_taskmanager()?;

    let done = cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(120))?;
    eprintln!("finished: {} restarts, {} checkpoints completed", done.restarts, done.checkpoints_completed);
    if done.restarts < 1 {
        bail!("a task manager with tasks was killed but the job never restarted: {done:?}");
    }
    let output = read_sink_output(&out)?;
    if let Err(diff) = verify_distinct(&output, seed % 1000) {
        panic!("{diff}");
    }
    cluster.stop();
    Ok(())
}
