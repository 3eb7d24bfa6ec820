//! The Nexmark queries of `bench/nexmark/` on a real cluster give Flink's results, row for row, over the same
//! stream (`bench/nexmark/expected/`): every query once, then q3 (a join, state on both sides) through a task
//! manager SIGKILLed mid-run and through a stop with savepoint and a restore at another parallelism.

use anyhow::Context;
use std::time::Duration;
use weir_integration_tests::nexmark::{check_result, QueryRun, QUERIES};
use weir_integration_tests::{Cluster, ClusterOptions, JobState};

#[test]
fn every_query_gives_flinks_result() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    let mut jobs = Vec::new();
    for q in QUERIES {
        let out = cluster.output_dir(q)?;
        let mut run = QueryRun::new(q);
        run.output = Some(out.clone());
        run.checkpoint_ms = 500;
        jobs.push((q, cluster.submit_spec(run.spec()?)?, out));
    }
    for (q, id, out) in jobs {
        cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180)).with_context(|| q.to_string())?;
        check_result(q, &out)?;
    }
    cluster.stop();
    Ok(())
}

#[test]
fn results_hold_through_a_kill_and_a_rescale() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    // A task manager killed mid-run: the restored job's committed output is the same (q3: the join's state).
    let out = cluster.output_dir("q3-kill")?;
    let mut run = QueryRun::new("q3");
    (run.output, run.checkpoint_ms, run.rate_per_sec) = (Some(out.clone()), 200, 40_000);
    let id = cluster.submit_spec(run.spec()?)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    cluster.wait_for_checkpoints(&id, 3, Duration::from_secs(60))?;
    let victim = *cluster.busy_taskmanagers()?.first().context("no busy task manager")?;
    cluster.kill_taskmanager(victim)?;
    cluster.start_taskmanager()?;
    let done = cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180))?;
    anyhow::ensure!(done.restarts >= 1, "the kill did not restart the job");
    check_result("q3", &out)?;

    // Stopped with a savepoint at parallelism 2, restored at 3: the source's two splits dealt to three subtasks,
    // the join's rows moved by key group.
    let out = cluster.output_dir("q3-rescale")?;
    let mut run = QueryRun::new("q3");
    (run.output, run.checkpoint_ms, run.rate_per_sec) = (Some(out.clone()), 200, 40_000);
    let id = cluster.submit_spec(run.spec()?)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    cluster.wait_for_checkpoints(&id, 2, Duration::from_secs(60))?;
    let savepoint = cluster.stop_with_savepoint(&id, false, "native")?;
    run.parallelism = 3;
    run.splits = Some(2);
    run.rate_per_sec = 0;
    let id = cluster.submit_spec_from(run.spec()?, &savepoint, "no-claim", false)?;
    cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180))?;
    check_result("q3", &out)?;
    cluster.stop();
    Ok(())
}
