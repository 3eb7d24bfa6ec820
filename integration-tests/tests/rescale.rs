//! Rescaling through savepoints. The golden chain: one bounded, rate-limited `datagen → keyed-count →
//! file-sink` job runs (1) uninterrupted and (2) at parallelism 2, stopped with a savepoint, restored at 4,
//! stopped, restored at 1, stopped, restored at 3 to the end; both outputs must equal the formula's counts
//! exactly. On RocksDB, on heap, moving heap → RocksDB through a canonical savepoint, and with the sink's own
//! parallelism changing 2 → 3 → 1.
//!
//! Every chain emits every running count (`emit: updates`), so each step's committed output proves that the
//! step before it handed its state over: a source that started again from the beginning, or counts that
//! started again from zero, would commit some `key,i` twice, and a source that skipped records would leave a
//! gap. (With `emit: end` the last step alone, restored from nothing, would produce the same final counts.)
//!
//! Each restored step also checks how the counter's state came back, as the task managers log it per subtask
//! (`restore_path`, [`expected_restore_paths`]): a RocksDB subtask whose key groups were one old subtask's opens
//! its snapshot; one whose key groups were several old subtasks' merges their native snapshots, importing their
//! SST files (copying the rows of states an earlier rescale cut with range deletes); the heap loads. The chain
//! from heap through a canonical savepoint is the one whose 4 → 1 step imports every file: its 4 snapshots were
//! built by ingestion, never cut.

use std::time::Duration;
use weir_integration_tests::{job_state, verify_job_output, Cluster, ClusterOptions, CountJob, JobState};

const RECORDS: u64 = 300_000;
const KEYS: u64 = 5_000;
const RATE: u64 = 50_000; // 6 s of input

/// One step of a chain: parallelism, backend, the format of the savepoint that ends the step, and the sink's
/// parallelism.
struct Step {
    parallelism: u32,
    backend: &'static str,
    savepoint_format: &'static str,
    sink_parallelism: u32,
}

fn step(parallelism: u32, backend: &'static str, savepoint_format: &'static str) -> Step {
    Step { parallelism, backend, savepoint_format, sink_parallelism: 1 }
}

/// Runs `job` through `steps`: each but the last runs ~1 s, is stopped with a savepoint and the next restores it
/// at its parallelism; the last runs to the end. Returns the savepoints taken.
fn chain(cluster: &mut Cluster, job: &CountJob, steps: &[Step]) -> anyhow::Result<Vec<String>> {
    let mut savepoint: Option<String> = None;
    let mut savepoints = Vec::new();
    let mut fresh = true;
    for (i, s) in steps.iter().enumerate() {
        let mut j = job.clone().parallelism(s.parallelism).sink_parallelism(s.sink_parallelism);
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
            if i > 0 {
                check_restore_paths(cluster, &id, &steps[i - 1], s, fresh)?;
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(1200));
        let url = cluster.stop_with_savepoint(&id, false, s.savepoint_format)?;
        if i > 0 {
            check_restore_paths(cluster, &id, &steps[i - 1], s, fresh)?;
        }
        // This step's snapshots hold no range deletion unless it restored a native RocksDB snapshot.
        fresh = i == 0 || steps[i - 1].savepoint_format == "canonical";
        eprintln!("step {i}: parallelism {} on {} stopped with savepoint {url}", s.parallelism, s.backend);
        let job_after = cluster.job(&id)?;
        assert_eq!(job_state(&job_after), Some(JobState::Finished), "{job_after:?}");
        savepoint = Some(url.clone());
        savepoints.push(url);
    }
    Ok(savepoints)
}

/// The restore paths a subtask of step `to` may log, restored from the savepoint that ended step `from`, and
/// those of which at least one subtask must take one. Heap state is loaded; RocksDB state from a canonical
/// savepoint is copied in. From a native one, a subtask whose key groups were one old subtask's opens that
/// snapshot (cut to its range by range deletes); key-group ranges of `p` subtasks nest in those of `q` when `p`
/// is a multiple of `q` (Flink's ranges of 128 key groups), so exactly when it is not, some subtask's key groups
/// were several old subtasks', whose snapshots it merges: by importing their SST files when no range deletion
/// is in them (`fresh`: step `from` did not restore a native snapshot, so nothing cut it), else copying the rows
/// of the states an earlier cut left range deletions in (all of them or some: compactions drop such deletions).
fn expected_restore_paths(from: &Step, to: &Step, fresh: bool) -> (&'static [&'static str], &'static [&'static str]) {
    match (to.backend, from.savepoint_format) {
        ("heap", _) => (&["load"], &["load"]),
        (_, "canonical") => (&["copy"], &["copy"]),
        _ if to.parallelism.is_multiple_of(from.parallelism) => (&["open"], &["open"]),
        _ if fresh => (&["open", "import"], &["import"]),
        _ => (&["open", "import", "import+copy", "copy"], &["import", "import+copy", "copy"]),
    }
}

/// Fails unless every subtask of the counter of job `id` (step `to`, restored from step `from`, `fresh` as in
/// [`expected_restore_paths`]) logged how it restored its state, each by a path that allows.
fn check_restore_paths(cluster: &Cluster, id: &str, from: &Step, to: &Step, fresh: bool) -> anyhow::Result<()> {
    let paths = cluster.restore_paths(id, "counts");
    let (allowed, needed) = expected_restore_paths(from, to, fresh);
    let step = format!("{} at {} -> {} at {}", from.backend, from.parallelism, to.backend, to.parallelism);
    eprintln!("{step}: counts restored by {paths:?}");
    anyhow::ensure!(
        paths.len() == to.parallelism as usize,
        "{step}: {} restore lines of counts for {} subtasks: {paths:?}",
        paths.len(),
        to.parallelism
    );
    anyhow::ensure!(
        paths.iter().all(|p| allowed.contains(&p.as_str())) && paths.iter().any(|p| needed.contains(&p.as_str())),
        "{step}: counts restored by {paths:?}; expected only {allowed:?}, one at least of {needed:?}"
    );
    Ok(())
}

fn golden(steps: [Step; 4]) -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    let uninterrupted = cluster.output_dir("uninterrupted")?;
    let chained = cluster.output_dir("chained")?;
    let base = CountJob::bounded("golden", RECORDS, KEYS, 7).rate(RATE).checkpoint_every_ms(300).emit_updates();
    let mut whole = base.clone().into_files(&uninterrupted).parallelism(2);
    whole.state_backend = steps[0].backend.to_string();
    let id = cluster.submit(&whole.yaml())?;
    cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(120))?;
    verify_job_output(&whole, &uninterrupted)?;

    let job = base.into_files(&chained);
    let savepoints = chain(&mut cluster, &job, &steps)?;
    assert_eq!(savepoints.len(), 3);
    verify_job_output(&job, &chained)?;
    cluster.stop();
    Ok(())
}

#[test]
fn golden_chain_on_rocksdb() -> anyhow::Result<()> {
    golden([
        step(2, "rocksdb", "native"),
        step(4, "rocksdb", "native"),
        step(1, "rocksdb", "native"),
        step(3, "rocksdb", "native"),
    ])
}

#[test]
fn golden_chain_on_heap() -> anyhow::Result<()> {
    golden([step(2, "heap", "native"), step(4, "heap", "native"), step(1, "heap", "native"), step(3, "heap", "native")])
}

#[test]
fn golden_chain_from_heap_to_rocksdb_through_a_canonical_savepoint() -> anyhow::Result<()> {
    golden([
        step(2, "heap", "canonical"),
        step(4, "rocksdb", "native"),
        step(1, "rocksdb", "native"),
        step(3, "rocksdb", "native"),
    ])
}

/// The sink's own subtasks rescale too (2 → 3 → 1, then 2): its pending files and commits move with them.
#[test]
fn golden_chain_with_the_sink_rescaled() -> anyhow::Result<()> {
    let sink = |s: Step, p| Step { sink_parallelism: p, ..s };
    golden([
        sink(step(2, "rocksdb", "native"), 2),
        sink(step(4, "rocksdb", "native"), 3),
        sink(step(1, "rocksdb", "native"), 1),
        sink(step(3, "rocksdb", "native"), 2),
    ])
}
