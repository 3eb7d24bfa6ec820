//! A checkpoint store that cannot be written is found when the job manager starts and when a job is
//! submitted — not by every checkpoint afterwards — while a store that is merely down does not stop a healthy
//! cluster; and a bounded job whose final checkpoint keeps failing says so in `weir job status`.

use std::process::Command;
use std::time::Duration;
use weir_integration_tests::process::run_with_timeout;
use weir_integration_tests::{
    binary, wait_until, Cluster, ClusterOptions, CountJob, JobState, S3Endpoint, S3Server, TcpProxy,
};

#[test]
fn a_job_manager_whose_store_refuses_writes_does_not_start() -> anyhow::Result<()> {
    let s3 = S3Server::start()?;
    let tmp = tempfile::tempdir()?;
    let missing = S3Endpoint { bucket: "no-such-bucket".into(), ..s3.endpoint("checkpoints") };
    let mut cmd = Command::new(binary("weir-jobmanager")?);
    cmd.args(["--bind", "127.0.0.1:0", "--data-dir"])
        .arg(tmp.path())
        .args(["--checkpoint-store", &missing.url()])
        .envs(missing.env());
    let out = run_with_timeout(cmd, Duration::from_secs(60))?;
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(
        out.stderr.contains("s3://no-such-bucket/checkpoints") && out.stderr.contains("refuses writes"),
        "the reason names the store and says it refuses: {out}"
    );
    Ok(())
}

#[test]
fn an_unreachable_store_is_no_reason_to_refuse_a_cluster_but_a_refusing_one_is_for_a_job() -> anyhow::Result<()> {
    let s3 = S3Server::start()?;
    let proxy = TcpProxy::start(s3.addr())?;
    // Down while the job manager starts, and while a job is submitted: it starts anyway (with a warning) and
    // accepts the job.
    proxy.down();
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2).with_s3(s3.endpoint_via(proxy.addr(), "checkpoints")))?;
    let log = cluster.jobmanager_log()?;
    assert!(log.contains("not reachable at start"), "the job manager warned about the store:\n{log}");
    // No checkpoint in this test's time, so the bucket stays empty and can be deleted below.
    let job = CountJob::unbounded("probe", 1000, 3).rate(1000).checkpoint_every_ms(3_600_000).into_blackhole();
    let id = cluster.submit(&job.yaml())?;
    proxy.up();
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    cluster.cancel(&id)?;
    cluster.wait_for_state(&id, &[JobState::Canceled], Duration::from_secs(30))?;

    // The bucket goes away: the store now answers and refuses, and a new job is turned down with the reason.
    s3.delete_bucket()?;
    let spec = cluster.dir().join("probe.yaml");
    std::fs::write(&spec, job.yaml())?;
    let out = cluster.cli(&["job", "submit", &spec.display().to_string()])?;
    assert_ne!(out.code(), Some(0), "{out}");
    assert!(out.stderr.contains("refuses writes") && out.stderr.contains("s3://weir/checkpoints"), "{out}");
    assert_eq!(cluster.jobs()?.len(), 1, "nothing was created");
    cluster.stop();
    Ok(())
}

#[test]
fn a_bounded_job_waiting_on_a_failing_final_checkpoint_says_why() -> anyhow::Result<()> {
    let s3 = S3Server::start()?;
    let proxy = TcpProxy::start(s3.addr())?;
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2).with_s3(s3.endpoint_via(proxy.addr(), "checkpoints")))?;
    let out = cluster.output_dir("final")?;
    let job = CountJob::bounded("final", 20_000, 100, 5).rate(10_000).checkpoint_every_ms(60_000).into_files(&out);
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    proxy.down();
    let status =
        wait_until("for the job status to name the failing final checkpoint", Duration::from_secs(90), || {
            let status = cluster.cli_json(&["job", "status", &id])?;
            Ok(status["waiting"].as_str().is_some_and(|w| w.contains("final checkpoint")).then_some(status))
        })?;
    assert_eq!(status["state"], "RUNNING", "{status}");
    let text = cluster.cli(&["job", "status", &id])?;
    assert!(text.stdout.contains("waiting") && text.stdout.contains("final checkpoint"), "{text}");
    proxy.up();
    let done = cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(90))?;
    assert!(done.waiting.is_empty(), "nothing to wait for once it finished: {done:?}");
    cluster.stop();
    Ok(())
}
