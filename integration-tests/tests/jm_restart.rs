//! The job manager crashes mid-job and comes back on the same address with the same data directory: the job
//! resumes from its last completed checkpoint in a new attempt, and its output is exact. The counts are
//! emitted as they change (`emit: updates`), so the file sink has files in flight when the job manager dies.
//! On RocksDB and on the heap backend.

use std::time::Duration;
use weir_integration_tests::{
    job_state, scenario_seed, verify_job_output, wait_until, Cluster, ClusterOptions, CountJob, JobState,
};

const RECORDS: u64 = 1_000_000;
const KEYS: u64 = 50_000;
const RATE: u64 = 80_000; // 12.5 s of input

#[test]
fn job_resumes_after_a_jobmanager_crash() -> anyhow::Result<()> {
    jobmanager_crash(false)
}

#[test]
fn job_resumes_after_a_jobmanager_crash_on_heap() -> anyhow::Result<()> {
    jobmanager_crash(true)
}

fn jobmanager_crash(heap: bool) -> anyhow::Result<()> {
    let seed = scenario_seed();
    let mut cluster = Cluster::start(ClusterOptions::new(2, 2))?;
    let out = cluster.output_dir("counts")?;
    let mut job = CountJob::bounded("jm-restart", RECORDS, KEYS, seed % 1000)
        .rate(RATE)
        .checkpoint_every_ms(500)
        .emit_updates()
        .into_files(&out);
    if heap {
        job = job.heap();
    }
    let id = cluster.submit(&job.yaml())?;

    let before = cluster.wait_for_checkpoints(&id, 3, Duration::from_secs(60))?;
    cluster.kill_jobmanager();
    std::thread::sleep(Duration::from_millis(500));
    cluster.restart_jobmanager()?;

    let resumed = wait_until("for the job to be redeployed", Duration::from_secs(60), || {
        let job = cluster.job(&id)?;
        let redeployed = job.attempt > before.attempt && job_state(&job) == Some(JobState::Running);
        Ok((redeployed || job_state(&job) == Some(JobState::Finished)).then_some(job))
    })?;
    assert!(
        resumed.attempt > before.attempt,
        "the job was not redeployed after the job manager restarted: attempt {} before, {} after",
        before.attempt,
        resumed.attempt
    );
    assert!(
        resumed.last_completed_checkpoint >= before.last_completed_checkpoint,
        "the restarted job manager forgot checkpoints: last completed {:?} before, {:?} after",
        before.last_completed_checkpoint,
        resumed.last_completed_checkpoint
    );

    cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(120))?;
    verify_job_output(&job, &out)?;
    cluster.stop();
    Ok(())
}
