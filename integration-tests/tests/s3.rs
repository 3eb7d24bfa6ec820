//! Checkpoints in an S3-compatible store (moto): a task-manager crash restores from S3 and the output is
//! exact. The counts are emitted as they change (`emit: updates`), so the crash lands among the file sink's
//! commits.

use rand::rngs::StdRng;
use rand::SeedableRng;
use std::time::Duration;
use weir_integration_tests::{scenario_seed, verify_job_output, Cluster, ClusterOptions, CountJob, JobState, S3Server};

const RECORDS: u64 = 1_000_000;
const KEYS: u64 = 50_000;
const RATE: u64 = 80_000; // 12.5 s of input

#[test]
fn restores_from_s3_after_a_taskmanager_crash() -> anyhow::Result<()> {
    let seed = scenario_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let s3 = S3Server::start()?;
    let bucket = s3.endpoint("checkpoints");
    let mut cluster = Cluster::start(ClusterOptions::new(2, 2).with_s3(bucket.clone()))?;
    let out = cluster.output_dir("counts")?;
    let job = CountJob::bounded("s3", RECORDS, KEYS, seed % 1000)
        .rate(RATE)
        .checkpoint_every_ms(500)
        .emit_updates()
        .into_files(&out);
    let id = cluster.submit(&job.yaml())?;

    let running = cluster.wait_for_checkpoints(&id, 2, Duration::from_secs(60))?;
    let objects = bucket.list()?;
    let metadata: Vec<&String> =
        objects.iter().filter(|k| k.starts_with(&format!("{id}/chk-")) && k.ends_with("/_metadata")).collect();
    assert!(!metadata.is_empty(), "no {id}/chk-*/_metadata in the bucket; it holds {objects:?}");

    let victim = cluster.kill_random_busy_taskmanager(&mut rng)?;
    eprintln!("killed tm-{victim} after checkpoint {:?}", running.last_completed_checkpoint);
    cluster.start_taskmanager()?;

    let done = cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(120))?;
    assert!(done.restarts >= 1, "the job never restarted: {done:?}");
    verify_job_output(&job, &out)?;
    cluster.stop();
    Ok(())
}
