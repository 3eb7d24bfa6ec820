//! A keyed user operator with time-to-live state in a user-built task manager: the `distinct-values` kind of
//! `examples/` (per key, the distinct values seen, in a `MapState<i64, u64>` with TTL), run by
//! `weir-example-taskmanager`, keeps its keyed state across a task-manager crash.
//!
//! `datagen` → `keyed-count` (`emit: updates`) → `distinct-values` (a TTL far longer than the job, so nothing
//! expires) → `file-sink`, with a task manager SIGKILLed mid-run and replaced. The counter turns a key's n
//! records into the values 1, 2, … n, all different, so the distinct count of a key must be exactly n, its
//! number of records: a `distinct-values` map lost or only partly restored counts fewer (the values before the
//! checkpoint are missing), and so does a lost counter (its values start again at 1). A key emitted twice or
//! a key no record has shows too. TTL expiry across a restore is tested on the manual clock in `examples/`.
//!
//! Build the binaries first: `cargo build --release --workspace --bins`.

use anyhow::bail;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::time::Duration;
use weir_integration_tests::{read_sink_output, scenario_seed, verify_counts, Cluster, ClusterOptions, JobState};

const TASKMANAGER: &str = "weir-example-taskmanager";
const RECORDS: u64 = 200_000;
const KEYS: u64 = 1000;
const RATE: u64 = 50_000; // 4 s of input
const CHECKPOINT_MS: u64 = 300;
/// One hour: nothing expires while the job runs.
const TTL_MS: u64 = 3_600_000;

/// `datagen` → `keyed-count` → `distinct-values` (parallelism 2, partitioned by key) → `file-sink`
/// (parallelism 1).
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
           - {{ uid: counts, kind: keyed-count, input: events, config: {{ emit: updates }} }}\n  \
           - {{ uid: distinct, kind: distinct-values, input: counts, config: {{ ttl_ms: {TTL_MS} }} }}\n  \
           - {{ uid: out, kind: file-sink, input: distinct, parallelism: 1, config: {{ path: {out:?} }} }}\n"
    )
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
    // Key k's distinct count is its number of records, exactly what `verify_counts` expects of a count.
    let output = read_sink_output(&out)?;
    if let Err(diff) = verify_counts(&output, seed % 1000, RECORDS, KEYS) {
        panic!("distinct counts: {diff}");
    }
    cluster.stop();
    Ok(())
}
