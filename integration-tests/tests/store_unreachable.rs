//! The checkpoint store becomes unreachable for a while — refusing connections, or swallowing them so that
//! requests hang: checkpoints fail with a reason, the job keeps running without a restart, and checkpoints
//! complete again once the store is back.

use std::time::Duration;
use weir_integration_tests::{
    describe_job, job_state, wait_until, Cluster, ClusterOptions, CountJob, JobState, S3Server, TcpProxy,
};

/// How the store goes away.
#[derive(Clone, Copy, Debug)]
enum Outage {
    /// Connections are reset at once.
    Refused,
    /// Connections hang; only the checkpoint timeout ends the checkpoint.
    Hanging,
}

/// The checkpoints `weir checkpoints ID --output json` lists (an array, or an object holding one).
fn listed_checkpoints(json: &serde_json::Value) -> Vec<serde_json::Value> {
    match json {
        serde_json::Value::Array(a) => a.clone(),
        serde_json::Value::Object(o) => o.get("checkpoints").and_then(|c| c.as_array()).cloned().unwrap_or_default(),
        _ => Vec::new(),
    }
}

fn store_outage(outage: Outage) -> anyhow::Result<()> {
    let s3 = S3Server::start()?;
    let proxy = TcpProxy::start(s3.addr())?;
    let mut cluster = Cluster::start(ClusterOptions::new(2, 2).with_s3(s3.endpoint_via(proxy.addr(), "checkpoints")))?;
    let job = CountJob::unbounded("store-unreachable", 10_000, 7)
        .rate(20_000)
        .checkpoint_every_ms(500)
        .checkpoint_timeout_ms(3000)
        .into_blackhole();
    let id = cluster.submit(&job.yaml())?;
    let healthy = cluster.wait_for_checkpoints(&id, 2, Duration::from_secs(60))?;

    match outage {
        Outage::Refused => proxy.down(),
        Outage::Hanging => proxy.stall(),
    }
    let failed =
        wait_until("for a checkpoint to fail while the store is unreachable", Duration::from_secs(60), || {
            let listed = cluster.cli_json(&["checkpoints", &id])?;
            Ok(listed_checkpoints(&listed).into_iter().find(|c| c["status"] == "FAILED"))
        })?;
    let reason = failed["failure_reason"].as_str().unwrap_or_default();
    assert!(!reason.trim().is_empty(), "a failed checkpoint without failure_reason: {failed}");
    let failed_id = failed["id"].as_u64().expect("checkpoint id is a number");
    eprintln!("{outage:?}: checkpoint {failed_id} failed: {reason}");

    let during = cluster.job(&id)?;
    assert_eq!(job_state(&during), Some(JobState::Running), "{}", describe_job(&during));
    assert_eq!(
        during.restarts,
        healthy.restarts,
        "the job restarted because the store was down: {}",
        describe_job(&during)
    );

    proxy.up();
    let recovered = cluster.wait_for_checkpoint_after(&id, failed_id, Duration::from_secs(90))?;
    eprintln!("{outage:?}: checkpoint {} completed after the store came back", recovered.id);
    let after = cluster.job(&id)?;
    assert_eq!(job_state(&after), Some(JobState::Running), "{}", describe_job(&after));
    assert_eq!(after.restarts, healthy.restarts, "the job restarted: {}", describe_job(&after));

    cluster.cancel(&id)?;
    cluster.wait_for_state(&id, &[JobState::Canceled], Duration::from_secs(30))?;
    cluster.stop();
    Ok(())
}

#[test]
fn checkpoints_fail_while_the_store_refuses_connections_and_the_job_keeps_running() -> anyhow::Result<()> {
    store_outage(Outage::Refused)
}

#[test]
fn checkpoints_expire_while_the_store_hangs_and_the_job_keeps_running() -> anyhow::Result<()> {
    store_outage(Outage::Hanging)
}
