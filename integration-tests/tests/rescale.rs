//! Rescaling through savepoints. The golden chain: one bounded, rate-limited `datagen → keyed-count →
//! file-sink` job runs (1) uninterrupted and (2) at parallelism 2, stopped with a savepoint, restored at 4,
//! stopped, restored at 1, stopped, restored at 3 to the end; both outputs must equal the formula's counts
//! exactly. On RocksDB, on heap, moving heap → RocksDB through a canonical savepoint, and with `emit: updates`
//! (every running count committed exactly once across all four jobs).

use std::time::Duration;
use weir_integration_tests::{verify_job_output, Cluster, ClusterOptions, CountJob, JobState};

const RECORDS: u64 = 300_000;
const KEYS: u64 = 5_000;
const RATE: u64 = 50_000; // 6 s of input

/// One step of a chain: parallelism, backend, and the format of the savepoint that ends the step.
struct Step {
    parallelism: u32,
    backend: &'static str,
    savepoint_format: &'static str,
}

fn step(parallelism: u32, backend: &'static str, savepoint_format: &'static str) -> Step {
    Step { parallelism, backend, savepoint_format }
}

/// Runs `job` through `steps`: each but the last runs ~1 s, is stopped with a savepoint and the next restores it
/// at its parallelism; the last runs to the end. Returns the savepoints taken.
fn chain(cluster: &mut Cluster, job: &CountJob, steps: &[Step]) -> anyhow::Result<Vec<String>> {
    let mut savepoint: Option<String> = None;
    let mut savepoints = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let mut j = job.clone().parallelism(s.parallelism);
        j.state_backend = s.backend.to_string();
        let id = match &savepoint {
            None => cluster.submit(&j.yaml())?,
            Some(url) => cluster.submit_from(&j.yaml(), url, "", false)?,
        };
        let running = cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
        if let Some(url) = &savepoint {
            assert!(running.restored_from.contains(url.as_str()), "restored from {url}: {running:?}");
        }
        if i + 1 == steps.len() {
            let done = cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(120))?;
            assert!(done.restored_from.contains("savepoint"), "the last step restored: {done:?}");
            break;
        }
        std::thread::sleep(Duration::from_millis(1200));
        let url = cluster.stop_with_savepoint(&id, false, s.savepoint_format)?;
        eprintln!("step {i}: parallelism {} on {} stopped with savepoint {url}", s.parallelism, s.backend);
        let job_after = cluster.job(&id)?;
        assert_eq!(JobState::of(&job_after), Some(JobState::Finished), "{job_after:?}");
        savepoint = Some(url.clone());
        savepoints.push(url);
    }
    Ok(savepoints)
}

fn golden(backends: [&'static str; 4], first_format: &'static str, updates: bool) -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    let uninterrupted = cluster.output_dir("uninterrupted")?;
    let chained = cluster.output_dir("chained")?;
    let mut base = CountJob::bounded("golden", RECORDS, KEYS, 7).rate(RATE).checkpoint_every_ms(300);
    if updates {
        base = base.emit_updates();
    }
    let mut whole = base.clone().into_files(&uninterrupted).parallelism(2);
    whole.state_backend = backends[0].to_string();
    let id = cluster.submit(&whole.yaml())?;
    cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(120))?;
    verify_job_output(&whole, &uninterrupted)?;

    let job = base.into_files(&chained);
    let steps = [
        step(2, backends[0], first_format),
        step(4, backends[1], "native"),
        step(1, backends[2], "native"),
        step(3, backends[3], "native"),
    ];
    let savepoints = chain(&mut cluster, &job, &steps)?;
    assert_eq!(savepoints.len(), 3);
    verify_job_output(&job, &chained)?;
    cluster.stop();
    Ok(())
}

#[test]
fn golden_chain_on_rocksdb() -> anyhow::Result<()> {
    golden(["rocksdb"; 4], "native", false)
}

#[test]
fn golden_chain_on_heap() -> anyhow::Result<()> {
    golden(["heap"; 4], "native", false)
}

#[test]
fn golden_chain_from_heap_to_rocksdb_through_a_canonical_savepoint() -> anyhow::Result<()> {
    golden(["heap", "rocksdb", "rocksdb", "rocksdb"], "canonical", false)
}

#[test]
fn golden_chain_with_every_running_count_exactly_once() -> anyhow::Result<()> {
    golden(["rocksdb"; 4], "native", true)
}
