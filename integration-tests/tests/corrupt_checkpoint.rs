//! The newest retained checkpoints are corrupt when a task manager crashes: the job manager warns about
//! them, restores from the oldest good one, says so in the job status, and the output is still exact: the
//! sink, writing all the time (`emit: updates`), does not commit the replay of what the newer ones committed.

use rand::rngs::StdRng;
use rand::SeedableRng;
use std::path::{Path, PathBuf};
use std::time::Duration;
use weir_integration_tests::{
    scenario_seed, verify_job_output, wait_until, Cluster, ClusterOptions, CountJob, JobState,
};

const RECORDS: u64 = 1_000_000;
const KEYS: u64 = 50_000;
const RATE: u64 = 60_000; // ~17 s of input

/// `(n, path)` of every `chk-<n>/_metadata` of a job in a local checkpoint store, oldest first.
fn metadata_files(job_dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(job_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.strip_prefix("chk-")?.parse().ok()?;
            let meta = e.path().join("_metadata");
            meta.is_file().then_some((n, meta))
        })
        .collect();
    found.sort();
    found
}

/// Whether a log line names checkpoint `n` (as `chk-n`, `checkpoint n`, `checkpoint=n` or `checkpoint_id=n`).
fn names_checkpoint(line: &str, n: u64) -> bool {
    ["chk-", "checkpoint ", "checkpoint=", "checkpoint_id=", "checkpoint: "].iter().any(|prefix| {
        let needle = format!("{prefix}{n}");
        line.match_indices(&needle).any(|(at, _)| !line[at + needle.len()..].starts_with(|c: char| c.is_ascii_digit()))
    })
}

#[test]
fn restores_from_an_older_checkpoint_when_the_newest_are_corrupt() -> anyhow::Result<()> {
    let seed = scenario_seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cluster = Cluster::start(ClusterOptions::new(2, 2))?;
    let out = cluster.output_dir("counts")?;
    // The restart delay leaves time to corrupt the checkpoints between the crash and the restore.
    let job = CountJob::bounded("corrupt", RECORDS, KEYS, seed % 1000)
        .rate(RATE)
        .checkpoint_every_ms(500)
        .retain_checkpoints(3)
        .restart_delay_ms(2000)
        .emit_updates()
        .sink_parallelism(3)
        .into_files(&out);
    let id = cluster.submit(&job.yaml())?;
    let before = cluster.wait_for_checkpoints(&id, 4, Duration::from_secs(60))?;

    // Crash first: no checkpoint can complete without the dead task manager's tasks. A checkpoint the dead
    // one had already acknowledged may still complete until the job manager fails the job over (it aborts
    // the checkpoint in flight then), so wait for the failover, then corrupt while the restart delay runs.
    let victim = cluster.kill_random_busy_taskmanager(&mut rng)?;
    wait_until("for the job to fail over after the crash", Duration::from_secs(30), || {
        let job = cluster.job(&id)?;
        Ok((job.restarts > before.restarts).then_some(()))
    })?;
    let job_dir = cluster.checkpoint_dir().expect("local store").join(&id);
    let retained = metadata_files(&job_dir);
    assert!(retained.len() >= 2, "expected at least 2 retained checkpoints in {}: {retained:?}", job_dir.display());
    let (good, _) = retained[0].clone();
    let corrupted: Vec<u64> = retained[1..].iter().map(|(n, _)| *n).collect();
    for (_, path) in &retained[1..] {
        std::fs::write(path, b"\x00garbage, not checkpoint metadata\xff")?;
    }
    eprintln!("killed tm-{victim}; corrupted checkpoints {corrupted:?}, left {good} intact");
    cluster.start_taskmanager()?;

    let done = cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(120))?;
    assert!(done.restarts >= 1, "the job never restarted: {done:?}");
    let newest = *corrupted.last().expect("at least one corrupted");
    let log = cluster.jobmanager_log()?;
    assert!(
        log.lines().any(|l| l.contains("WARN") && names_checkpoint(l, newest)),
        "the job manager logged no warning naming the corrupt checkpoint {newest}"
    );
    assert!(
        done.restored_from.contains(&format!("fell back to checkpoint {good}"))
            && names_checkpoint(&done.restored_from, newest),
        "the job status names the fallback: {:?}",
        done.restored_from
    );
    // The sink committed the output of the corrupted checkpoints before the crash; the replay from the older
    // one must not commit it again.
    verify_job_output(&job, &out)?;
    cluster.stop();
    Ok(())
}
