//! A job that fails every time it starts is restarted as often as its strategy allows and then ends
//! `FAILED`, with the cause and the strategy's verdict in `weir job status`.
//!
//! The failure is deterministic: the file sink's directory lies under a regular file, so the sink cannot
//! create it when it starts. Source and sink are chained into one task, so each attempt fails exactly once.

use std::time::Duration;
use weir_integration_tests::process::write_file;
use weir_integration_tests::{Cluster, ClusterOptions, JobState};

const WAIT: Duration = Duration::from_secs(60);

/// A restart strategy under test and what its verdict must say.
struct Case {
    name: &'static str,
    restart: &'static str,
    verdict: &'static str,
}

const CASES: &[Case] = &[
    Case {
        name: "fixed",
        restart: "{ strategy: fixed-delay, attempts: 2, delay_ms: 200 }",
        verdict: "fixed-delay allows 2 restarts",
    },
    Case {
        name: "exponential",
        restart: "{ strategy: exponential-delay, attempts: 2, delay_ms: 100, max_delay_ms: 400, jitter_factor: 0 }",
        verdict: "exponential-delay allows 2 restarts",
    },
    Case {
        name: "rate",
        restart: "{ strategy: failure-rate, max_failures_per_interval: 2, failure_rate_interval_ms: 600000, \
                  delay_ms: 100 }",
        verdict: "failure-rate allows 2 failures within 600000 ms",
    },
];

#[test]
fn a_job_failing_at_every_start_fails_after_its_last_restart() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, CASES.len() as u32))?;
    let dir = cluster.output_dir("restart")?;
    let blocker = dir.join("a-file");
    write_file(&blocker, "not a directory\n")?;
    let sink_dir = blocker.join("out");

    let mut jobs = Vec::new();
    for case in CASES {
        let spec = format!(
            "name: failing-{name}\n\
             parallelism: 1\n\
             restart: {restart}\n\
             operators:\n  \
               - {{ uid: events, kind: datagen, config: {{ count: 100, keys: 10, seed: 1 }} }}\n  \
               - {{ uid: out, kind: file-sink, input: events, partitioning: forward, config: {{ path: {sink:?} }} }}\n",
            name = case.name,
            restart = case.restart,
            sink = sink_dir,
        );
        let file = dir.join(format!("{}.yaml", case.name));
        write_file(&file, &spec)?;
        let out = cluster.cli(&["job", "submit", file.to_str().unwrap()])?;
        anyhow::ensure!(out.status.success(), "{}: submit failed: {out}", case.name);
        let id = out.stdout.trim().to_string();
        anyhow::ensure!(!id.is_empty(), "{}: submit printed no job id: {out}", case.name);
        jobs.push((case, id));
    }

    let mut failures = Vec::new();
    for (case, id) in &jobs {
        cluster.wait_for_state(id, &[JobState::Failed], WAIT)?;
        let status = cluster.cli_json(&["job", "status", id])?;
        let reason = status["failure_reason"].as_str().unwrap_or_default().to_string();
        let mut problems = Vec::new();
        if status["state"] != "FAILED" {
            problems.push("state is not FAILED".to_string());
        }
        if status["restarts"] != 2 {
            problems.push("restarts is not 2".to_string());
        }
        if status["attempt"] != 3 {
            problems.push("it did not run exactly 3 attempts (two restarts, the third failure ends it)".to_string());
        }
        for wanted in [sink_dir.to_str().unwrap_or_default(), "not restarted", case.verdict] {
            if !reason.contains(wanted) {
                problems.push(format!("failure_reason does not mention {wanted:?}"));
            }
        }
        if status["failure"] != status["failure_reason"] {
            problems.push("failure and failure_reason differ".to_string());
        }
        let text = cluster.cli(&["job", "status", id])?;
        if !text.stdout.contains(case.verdict) || !text.stdout.contains("FAILED") {
            problems.push(format!("the text status does not show the state and the verdict: {}", text.stdout));
        }
        if !problems.is_empty() {
            failures.push(format!("{} (job {id}): {}\n  status: {status}", case.name, problems.join("; ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    cluster.stop();
    Ok(())
}
