//! Bad job specs are rejected before a job exists, with exit code 2 and a message naming the operator and
//! field; bad config files stop a binary at once with a one-line reason.

use std::path::Path;
use std::process::Command;
use std::time::Duration;
use weir_integration_tests::process::{run_with_timeout, write_file};
use weir_integration_tests::{binary, Cluster, ClusterOptions, RpcError};

const GOOD: &str = "\
name: bad-input
parallelism: 2
operators:
  - { uid: events, kind: datagen, config: { count: 1000, keys: 10, seed: 1 } }
  - { uid: counts, kind: keyed-count, input: events }
  - { uid: out, kind: blackhole, input: counts, parallelism: 1 }
";

/// [`GOOD`] with one more job-level line (a `checkpointing:` or `restart:` block).
fn with_job_field(line: &str) -> String {
    GOOD.replace("parallelism: 2\n", &format!("parallelism: 2\n{line}\n"))
}

/// A bad spec and what its error message must mention (any one of each group, case-insensitive).
struct BadSpec {
    name: &'static str,
    spec: String,
    mentions: &'static [&'static [&'static str]],
}

fn bad_specs() -> Vec<BadSpec> {
    let cycle = "\
name: cycle
operators:
  - { uid: events, kind: datagen }
  - { uid: left, kind: keyed-count, input: right }
  - { uid: right, kind: keyed-count, input: left }
  - { uid: out, kind: blackhole, input: right }
";
    vec![
        BadSpec {
            name: "unknown kind",
            spec: GOOD.replace("kind: keyed-count", "kind: keyed-cuont"),
            mentions: &[&["counts"], &["kind"], &["keyed-cuont"]],
        },
        BadSpec {
            name: "missing input",
            spec: GOOD.replace("input: events", "input: evnts"),
            mentions: &[&["counts"], &["input"], &["evnts"]],
        },
        BadSpec { name: "cycle", spec: cycle.to_string(), mentions: &[&["left", "right"], &["input"], &["cycle"]] },
        BadSpec {
            name: "duplicate uid",
            spec: GOOD.replace("uid: out", "uid: counts"),
            mentions: &[&["counts"], &["uid"], &["duplicate"]],
        },
        BadSpec {
            name: "parallelism above max_parallelism",
            spec: GOOD
                .replace("parallelism: 2\n", "parallelism: 2\nmax_parallelism: 4\n")
                .replace("parallelism: 1 }", "parallelism: 8 }"),
            mentions: &[&["out"], &["parallelism"], &["max_parallelism", "max parallelism"]],
        },
        BadSpec {
            name: "unknown keyed-count emit",
            spec: GOOD.replace("input: events }", "input: events, config: { emit: sometimes } }"),
            mentions: &[&["counts"], &["emit"], &["sometimes"]],
        },
        BadSpec { name: "zero keys", spec: GOOD.replace("keys: 10", "keys: 0"), mentions: &[&["events"], &["keys"]] },
        BadSpec {
            name: "checkpoint interval 0",
            spec: with_job_field("checkpointing: { interval_ms: 0 }"),
            // The message says how checkpointing is turned off instead.
            mentions: &[&["checkpointing.interval_ms"], &["leave interval_ms out"]],
        },
        BadSpec {
            name: "checkpoint timeout 0",
            spec: with_job_field("checkpointing: { interval_ms: 1000, timeout_ms: 0 }"),
            mentions: &[&["checkpointing.timeout_ms"], &["positive"]],
        },
        BadSpec {
            name: "retained 0",
            spec: with_job_field("checkpointing: { interval_ms: 1000, retained: 0 }"),
            mentions: &[&["checkpointing.retained"], &["at least 1"]],
        },
        BadSpec {
            name: "checkpoint interval of 50 days",
            spec: with_job_field("checkpointing: { interval_ms: 4320000000 }"),
            mentions: &[&["checkpointing.interval_ms"], &["7 days"]],
        },
        BadSpec {
            name: "checkpoint timeout of 30 years",
            spec: with_job_field("checkpointing: { interval_ms: 1000, timeout_ms: 1000000000000 }"),
            mentions: &[&["checkpointing.timeout_ms"], &["7 days"]],
        },
        BadSpec {
            name: "negative checkpoint interval",
            spec: with_job_field("checkpointing: { interval_ms: -1000 }"),
            mentions: &[&["checkpointing.interval_ms"], &["-1000 is negative"]],
        },
        BadSpec {
            name: "unknown restart strategy",
            spec: with_job_field("restart: { strategy: fixd-delay, attempts: 3 }"),
            mentions: &[&["restart.strategy"], &["fixd-delay"], &["failure-rate"]],
        },
        BadSpec {
            name: "restart delay of 10 days",
            spec: with_job_field("restart: { strategy: fixed-delay, attempts: 3, delay_ms: 864000000 }"),
            mentions: &[&["restart.delay_ms"], &["7 days"]],
        },
        BadSpec {
            name: "negative restart delay",
            spec: with_job_field("restart: { strategy: fixed-delay, attempts: 3, delay_ms: -500 }"),
            mentions: &[&["restart.delay_ms"], &["-500 is negative"]],
        },
        BadSpec {
            name: "exponential max delay of 10 days",
            spec: with_job_field("restart: { strategy: exponential-delay, max_delay_ms: 864000000 }"),
            mentions: &[&["restart.max_delay_ms"], &["7 days"]],
        },
        BadSpec {
            name: "failure-rate interval 0",
            spec: with_job_field("restart: { strategy: failure-rate, failure_rate_interval_ms: 0 }"),
            mentions: &[&["restart.failure_rate_interval_ms"], &["out of range"]],
        },
        BadSpec {
            name: "setting of another restart strategy",
            spec: with_job_field("restart: { strategy: fixed-delay, attempts: 3, multiplier: 2 }"),
            mentions: &[&["restart.multiplier"], &["does not apply"]],
        },
        BadSpec {
            name: "malformed YAML",
            spec: "name: x\noperators: [ { uid: a, kind: datagen\n".to_string(),
            mentions: &[&["yaml", "malformed", "parse", "expected"]],
        },
    ]
}

fn missing_mentions(text: &str, mentions: &[&[&str]]) -> Vec<String> {
    let lower = text.to_lowercase();
    mentions
        .iter()
        .filter(|any| !any.iter().any(|m| lower.contains(&m.to_lowercase())))
        .map(|any| any.join(" or "))
        .collect()
}

#[test]
fn bad_specs_are_rejected_and_create_no_job() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2))?;
    let specs = cluster.output_dir("specs")?;
    let mut failures = Vec::new();

    for case in bad_specs() {
        let file = specs.join(format!("{}.yaml", case.name.replace(' ', "-")));
        write_file(&file, &case.spec)?;
        let out = cluster.cli(&["job", "submit", file.to_str().unwrap()])?;
        let error_line = out.stderr.lines().find(|l| l.starts_with("error:"));
        if out.code() != Some(2) {
            failures.push(format!("{}: expected exit code 2, got {}", case.name, out));
        } else if error_line.is_none() {
            failures.push(format!("{}: no `error: ...` line on stderr: {}", case.name, out));
        } else {
            let missing = missing_mentions(error_line.unwrap(), case.mentions);
            if !missing.is_empty() {
                failures.push(format!("{}: the error does not mention {}: {}", case.name, missing.join(", "), out));
            }
        }

        // The job manager validates too (another client may skip the CLI's checks).
        if weir_common::spec::parse_spec_text(&case.spec).is_ok() {
            match cluster.submit(&case.spec) {
                Ok(id) => failures.push(format!("{}: the job manager accepted it as job {id}", case.name)),
                Err(e) => match e.downcast_ref::<RpcError>() {
                    Some(RpcError(status)) if status.code() == tonic::Code::InvalidArgument => {
                        let missing = missing_mentions(status.message(), case.mentions);
                        if !missing.is_empty() {
                            failures.push(format!(
                                "{}: the job manager's INVALID_ARGUMENT does not mention {}: {}",
                                case.name,
                                missing.join(", "),
                                status.message()
                            ));
                        }
                    }
                    _ => failures.push(format!("{}: the job manager answered {e:#}, not INVALID_ARGUMENT", case.name)),
                },
            }
        }
    }

    let listed = cluster.cli_json(&["job", "list"])?;
    let listed_jobs = match &listed {
        serde_json::Value::Array(a) => a.clone(),
        serde_json::Value::Object(o) => o.get("jobs").and_then(|j| j.as_array()).cloned().unwrap_or_default(),
        _ => Vec::new(),
    };
    if !listed_jobs.is_empty() {
        failures.push(format!("`weir job list` shows jobs after only bad submissions: {listed}"));
    }
    let jobs = cluster.jobs()?;
    if !jobs.is_empty() {
        failures.push(format!("the job manager has jobs after only bad submissions: {jobs:?}"));
    }

    assert!(failures.is_empty(), "{} problems:\n{}", failures.len(), failures.join("\n\n"));
    cluster.stop();
    Ok(())
}

fn expect_config_rejected(name: &str, args: &[&str], dir: &Path) -> Option<String> {
    let config = dir.join(format!("{name}.toml"));
    write_file(&config, "bogus_key = 1\n").unwrap();
    let mut cmd = Command::new(binary(name).unwrap());
    cmd.args(args).arg("--config").arg(&config);
    let out = match run_with_timeout(cmd, Duration::from_secs(20)) {
        Ok(out) => out,
        Err(e) => return Some(format!("{name} with an unknown config key did not exit: {e:#}")),
    };
    let lines: Vec<&str> = out.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    if out.status.success() {
        Some(format!("{name} accepted a config file with an unknown key: {out}"))
    } else if lines.len() != 1 || !lines[0].contains("bogus_key") {
        Some(format!("{name} should give a one-line reason naming `bogus_key`: {out}"))
    } else {
        None
    }
}

#[test]
fn unknown_config_keys_stop_the_binaries_with_a_one_line_reason() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let store = format!("file://{}/checkpoints", dir.path().display());
    let jm_args = ["--bind", "127.0.0.1:0", "--data-dir", data.to_str().unwrap(), "--checkpoint-store", &store];
    let tm_args = [
        "--jobmanager",
        "http://127.0.0.1:9",
        "--bind",
        "127.0.0.1:0",
        "--slots",
        "1",
        "--data-dir",
        data.to_str().unwrap(),
    ];
    let problems: Vec<String> = [
        expect_config_rejected("weir-jobmanager", &jm_args, dir.path()),
        expect_config_rejected("weir-taskmanager", &tm_args, dir.path()),
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}
