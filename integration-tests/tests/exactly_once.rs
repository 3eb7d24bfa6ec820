//! A bounded job survives three task-manager crashes with its output exact. `keyed-count` emits every running
//! count (`emit: updates`) into three file-sink subtasks, so three writers commit all through the run and
//! each crash cuts their commit protocol somewhere mid-way: the committed lines must be `key,1` … `key,n` for
//! a key with n records, each exactly once. On RocksDB and on the heap backend.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use weir_integration_tests::{
    scenario_seed, verify_job_output, wait_for_no_orphaned_shared_files, Cluster, ClusterOptions, CountJob, JobState,
};

const RECORDS: u64 = 2_000_000;
const KEYS: u64 = 100_000;
const RATE: u64 = 100_000; // 20 s of input

#[test]
fn output_is_exact_after_three_taskmanager_crashes() -> anyhow::Result<()> {
    three_crashes(false)
}

#[test]
fn output_is_exact_after_three_taskmanager_crashes_on_heap() -> anyhow::Result<()> {
    three_crashes(true)
}

fn three_crashes(heap: bool) -> anyhow::Result<()> {
    let seed = scenario_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cluster = Cluster::start(ClusterOptions::new(3, 2))?;
    let out = cluster.output_dir("counts")?;
    let mut job = CountJob::bounded("exactly-once", RECORDS, KEYS, seed % 1000)
        .rate(RATE)
        .parallelism(2)
        .checkpoint_every_ms(500)
        .emit_updates()
        .sink_parallelism(3)
        .into_files(&out);
    if heap {
        job = job.heap();
    }
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;

    let mut last_before_crash = 0;
    for crash in 1..=3 {
        // Each crash comes after a checkpoint newer than the one the previous crash restored from, at a random
        // moment of the checkpoint cycle, so that every restore starts from a different checkpoint.
        cluster.wait_for_checkpoint_after(&id, last_before_crash, Duration::from_secs(60))?;
        std::thread::sleep(Duration::from_millis(rng.random_range(500..3000)));
        let before = cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
        let victim = cluster.kill_random_busy_taskmanager(&mut rng)?;
        last_before_crash = before.last_completed_checkpoint.unwrap_or(0);
        eprintln!("crash {crash}: killed tm-{victim} after checkpoint {last_before_crash}");
        cluster.start_taskmanager()?;
    }

    let done = cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(120))?;
    // Every crash hit a task manager with tasks while the job was running: each forced a restart.
    assert!(done.restarts >= 3, "three crashes but {} restarts: {done:?}", done.restarts);
    verify_job_output(&job, &out)?;
    // Uploads the crashes cut short, and those of canceled tasks, leave no shared file behind.
    let root = cluster.checkpoint_dir().ok_or_else(|| anyhow::anyhow!("local store expected"))?;
    wait_for_no_orphaned_shared_files(&root, &id, Duration::from_secs(20))?;
    cluster.stop();
    Ok(())
}
