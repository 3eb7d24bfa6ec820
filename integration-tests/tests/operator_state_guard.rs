//! The job manager stays small however long operator lists grow: `datagen` with 5,000,000 splits (one
//! operator-list element each) at parallelism 4 checkpoints with a `_metadata` of kilobytes (the offsets travel
//! by reference), rescales to 2 and to 6 through savepoints with exact output, and the job manager's resident
//! memory stays within 30 MiB of what it was idle. The figures are printed (docs/benchmarks.md records them).

use std::time::Duration;
use weir_integration_tests::{verify_job_output, Cluster, ClusterOptions, CountJob, JobState};

const SPLITS: u64 = 5_000_000;
const RECORDS: u64 = 3_000_000;
const KEYS: u64 = 10_000;

fn jm_rss_kib(cluster: &mut Cluster) -> u64 {
    cluster.peak_rss().into_iter().find(|(n, _)| n == "jobmanager").and_then(|(_, r)| r).expect("the JM's peak RSS")
}

#[test]
fn five_million_splits_checkpoint_and_rescale_with_a_small_job_manager() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 3))?;
    let idle = jm_rss_kib(&mut cluster);
    let out = cluster.output_dir("counts")?;
    let job = CountJob::bounded("splits", RECORDS, KEYS, 21).rate(150_000).checkpoint_every_ms(2_000).into_files(&out);
    let with_splits =
        |p: u32| job.clone().parallelism(p).yaml().replace("seed: 21", &format!("seed: 21, splits: {SPLITS}"));

    let mut savepoint: Option<String> = None;
    for (step, p) in [4u32, 2, 6].into_iter().enumerate() {
        let spec = with_splits(p);
        let id = match &savepoint {
            None => cluster.submit(&spec)?,
            Some(url) => cluster.submit_from(&spec, url, "", false)?,
        };
        let done = cluster.wait_for_checkpoints(&id, 1, Duration::from_secs(120))?;
        let cp = cluster
            .checkpoints(&id)?
            .into_iter()
            .find(|c| c.status() == weir_proto::CheckpointStatus::Completed)
            .expect("a checkpoint");
        let meta =
            cluster.checkpoint_dir().expect("local store").join(&id).join(format!("chk-{}", cp.id)).join("_metadata");
        let meta_bytes = std::fs::metadata(&meta).map(|m| m.len()).unwrap_or(0);
        eprintln!(
            "parallelism {p}: checkpoint {} took {} ms, {} bytes in all, _metadata {meta_bytes} bytes (restored: {})",
            cp.id, cp.duration_ms, cp.full_size_bytes, done.restored_from
        );
        assert!(
            meta_bytes > 0 && meta_bytes < 64 << 10,
            "_metadata of {meta_bytes} bytes: offsets must travel by reference"
        );
        if step == 2 {
            cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180))?;
        } else {
            savepoint = Some(cluster.stop_with_savepoint(&id, false, "native")?);
        }
    }
    verify_job_output(&job, &out)?;
    let peak = jm_rss_kib(&mut cluster);
    eprintln!("job manager resident memory: idle {} KiB, peak {} KiB (+{} KiB)", idle, peak, peak - idle);
    assert!(peak - idle < 30 << 10, "the job manager grew by {} KiB with 5M operator-state elements", peak - idle);
    cluster.stop();
    Ok(())
}
