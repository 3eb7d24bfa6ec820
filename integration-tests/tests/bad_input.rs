//! Bad job specs are rejected before a job exists, with exit code 2 and a message naming the operator and
//! field; bad config files stop a binary at once with a one-line reason. Specs over the size limits (40,000
//! operators, a config value of megabytes, a name of megabytes, a long uid) are refused at once, naming the
//! limit and echoing little, while a job runs on untouched. Jobs are listed a page at a time, and the record of
//! an ended job can be deleted.

use std::path::Path;
use std::process::Command;
use std::time::Duration;
use weir_integration_tests::process::{run_with_timeout, write_file};
use weir_integration_tests::{binary, Cluster, ClusterOptions, RpcError};

/// The good spec with a `nexmark` source of config `config` (a bid stream has no key: blackhole, not the count).
fn nexmark(config: &str) -> String {
    GOOD.replace(
        "kind: datagen, config: { count: 1000, keys: 10, seed: 1 }",
        &format!("kind: nexmark, config: {{ {config} }}"),
    )
    .replace("uid: out, kind: blackhole, input: counts", "uid: out, kind: blackhole, input: events")
    .replace("  - { uid: counts, kind: keyed-count, input: events }\n", "")
}

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
            // `state-kinds` emits bytes values; `distinct-values` counts integer ones.
            name: "edge schemas differ",
            spec: GOOD.replace(
                "  - { uid: out, kind: blackhole, input: counts, parallelism: 1 }",
                "  - { uid: kinds, kind: state-kinds, input: events }\n  \
                 - { uid: distinct, kind: distinct-values, input: kinds }\n  \
                 - { uid: out, kind: blackhole, input: distinct, parallelism: 1 }",
            ),
            mentions: &[&["distinct"], &["kinds"], &["\"value\""], &["binary"], &["int64"]],
        },
        BadSpec {
            name: "a schema for a kind that declares its own",
            spec: GOOD.replace("seed: 1 } }", "seed: 1 }, schema: [{ name: key, type: utf8 }] }"),
            mentions: &[&["events"], &["schema"], &["declares"]],
        },
        BadSpec {
            name: "a schema of an unknown type",
            spec: GOOD.replace("seed: 1 } }", "seed: 1 }, schema: [{ name: price, type: decimal }] }"),
            mentions: &[&["events"], &["schema"], &["price"], &["decimal"]],
        },
        BadSpec {
            name: "a window that is neither tumbling, sliding nor session",
            spec: GOOD.replace(
                "kind: keyed-count, input: events }",
                "kind: window-aggregate, input: events, config: { window: { sliding_ms: 1000 } } }",
            )
            .replace("seed: 1 } }", "seed: 1, event_time: { step_ms: 1 } } }"),
            mentions: &[&["counts"], &["window"], &["slide_ms"]],
        },
        BadSpec {
            name: "late records read from a window that drops them",
            spec: GOOD
                .replace(
                    "kind: keyed-count, input: events }",
                    "kind: window-aggregate, input: events, config: { window: { tumbling_ms: 10 } } }",
                )
                .replace("input: counts, parallelism: 1", "input: counts.late, parallelism: 1")
                .replace("seed: 1 } }", "seed: 1, event_time: { step_ms: 1 } } }"),
            mentions: &[&["out"], &["counts"], &["side output \"late\""], &["late: side-output"]],
        },
        BadSpec {
            name: "a side output of a kind that has none",
            spec: GOOD.replace("input: counts, parallelism: 1", "input: counts.late, parallelism: 1"),
            mentions: &[&["out"], &["keyed-count"], &["no side outputs"]],
        },
        BadSpec {
            name: "windows over a source without event time",
            spec: GOOD.replace(
                "kind: keyed-count, input: events }",
                "kind: window-aggregate, input: events, config: { window: { tumbling_ms: 10 } } }",
            ),
            mentions: &[&["counts"], &["event time"], &["events"]],
        },
        BadSpec {
            name: "an unknown aggregate",
            spec: GOOD.replace(
                "kind: keyed-count, input: events }",
                "kind: window-aggregate, input: events, config: { window: { tumbling_ms: 10 }, aggregate: median } }",
            )
            .replace("seed: 1 } }", "seed: 1, event_time: { step_ms: 1 } } }"),
            mentions: &[&["counts"], &["aggregate"], &["median"]],
        },
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
            name: "a nexmark source at zero events per second",
            spec: nexmark("tps: 0"),
            mentions: &[&["events"], &["tps"]],
        },
        BadSpec {
            name: "nexmark proportions that sum to zero",
            spec: nexmark("person_proportion: 0, auction_proportion: 0, bid_proportion: 0"),
            mentions: &[&["events"], &["person_proportion"], &["sum to zero"]],
        },
        BadSpec {
            name: "a nexmark stream longer than 2^53 events",
            spec: nexmark("events: 9007199254740993"),
            mentions: &[&["events"], &["2^53"]],
        },
        BadSpec {
            name: "a nexmark stream with a negative rate",
            spec: nexmark("rate_per_sec: -10"),
            mentions: &[&["events"], &["rate_per_sec"]],
        },
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
            name: "watermarks on a source without timestamps",
            spec: GOOD.replace("seed: 1 } }", "seed: 1 }, watermarks: { max_out_of_orderness_ms: 100 } }"),
            mentions: &[&["events"], &["watermarks"], &["timestamps"], &["event_time"]],
        },
        BadSpec {
            name: "negative out-of-orderness",
            spec: GOOD.replace(
                "seed: 1 } }",
                "seed: 1, event_time: { step_ms: 10 } }, watermarks: { max_out_of_orderness_ms: -5 } }",
            ),
            mentions: &[&["events"], &["watermarks.max_out_of_orderness_ms"], &["negative"]],
        },
        BadSpec {
            name: "out-of-orderness over 7 days",
            spec: GOOD.replace(
                "seed: 1 } }",
                "seed: 1, event_time: {} }, watermarks: { max_out_of_orderness_ms: 604800001 } }",
            ),
            mentions: &[&["events"], &["watermarks.max_out_of_orderness_ms"], &["7 days"]],
        },
        BadSpec {
            name: "watermarks on an operator",
            spec: GOOD.replace("input: events }", "input: events, watermarks: { max_out_of_orderness_ms: 10 } }"),
            mentions: &[&["counts"], &["watermarks"], &["only a source"]],
        },
        BadSpec {
            name: "unknown field of event_time",
            spec: GOOD.replace("seed: 1 } }", "seed: 1, event_time: { start: 5 } } }"),
            mentions: &[&["events"], &["config.event_time"], &["start"]],
        },
        BadSpec {
            name: "parallelism 0",
            spec: GOOD.replace("parallelism: 2\n", "parallelism: 0\n"),
            mentions: &[&["parallelism"], &["at least 1"]],
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
    // The examples' task manager: built-in kinds and user kinds with declared schemas.
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2).with_taskmanager_binary("weir-example-taskmanager"))?;
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

/// A spec of `n` operators, a source and a chain of counters.
fn chain_spec(n: usize) -> weir_proto::JobSpec {
    let mut operators =
        vec![weir_proto::OperatorSpec { uid: "op-0".into(), kind: "datagen".into(), ..Default::default() }];
    for i in 1..n {
        operators.push(weir_proto::OperatorSpec {
            uid: format!("op-{i}"),
            kind: "keyed-count".into(),
            input: format!("op-{}", i - 1),
            ..Default::default()
        });
    }
    weir_proto::JobSpec { name: "huge".into(), operators, ..Default::default() }
}

/// A spec over a limit: refused with `INVALID_ARGUMENT`, quickly, naming `mentions`, and with a short message.
fn refused_quickly(cluster: &mut Cluster, what: &str, spec: weir_proto::JobSpec, mentions: &[&str]) -> Duration {
    let began = std::time::Instant::now();
    let err = cluster.submit_spec(spec).expect_err(what);
    let took = began.elapsed();
    let Some(RpcError(status)) = err.downcast_ref::<RpcError>() else { panic!("{what}: {err:#}") };
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{what}: {status:?}");
    for m in mentions {
        assert!(status.message().contains(m), "{what}: {m:?} not in {}", status.message());
    }
    assert!(status.message().len() < 1024, "{what}: the error echoes {} bytes", status.message().len());
    eprintln!("{what}: refused in {took:?}: {}", status.message());
    took
}

#[test]
fn oversized_specs_are_refused_at_once_and_the_running_job_is_untouched() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2))?;
    let job = weir_integration_tests::CountJob::unbounded("steady", 1_000, 3)
        .rate(20_000)
        .checkpoint_every_ms(200)
        .into_blackhole();
    let id = cluster.submit(&job.yaml())?;
    let before = cluster.wait_for_checkpoints(&id, 2, Duration::from_secs(60))?;

    // 40,000 chained operators (1.2 MB, under gRPC's 4 MiB): refused in under a second, naming the limit.
    let took = refused_quickly(&mut cluster, "40,000 operators", chain_spec(40_000), &["operators", "1024"]);
    assert!(took < Duration::from_secs(1), "a 40,000-operator spec took {took:?} to refuse");
    // A config value of 3.5 MB: the error names the field and the limit, and does not echo the value.
    let mut big_value = chain_spec(2);
    big_value.operators[0].config.insert("seed".into(), "7".repeat(3_500_000));
    refused_quickly(&mut cluster, "a 3.5 MB config value", big_value, &["config.seed", "65536"]);
    // A name of 3 MB: refused (two of them once broke `weir job list` for everyone).
    let mut big_name = chain_spec(2);
    big_name.name = "n".repeat(3_000_000);
    refused_quickly(&mut cluster, "a 3 MB name", big_name, &["name", "256"]);
    // A uid of 200 characters: refused, echoing only its start.
    let mut long_uid = chain_spec(2);
    long_uid.operators[0].uid = "u".repeat(200);
    long_uid.operators[1].input = "u".repeat(200);
    let _ = refused_quickly(&mut cluster, "a 200-character uid", long_uid, &["uid", "128"]);

    // The running job never noticed: still running, no restart, and it goes on checkpointing.
    let after = cluster.wait_for_checkpoint_after(
        &id,
        before.last_completed_checkpoint.unwrap_or(0) + 2,
        Duration::from_secs(30),
    )?;
    let info = cluster.job(&id)?;
    assert_eq!(weir_integration_tests::job_state(&info), Some(weir_integration_tests::JobState::Running), "{info:?}");
    assert_eq!((info.restarts, info.attempt), (before.restarts, before.attempt), "{info:?}");
    assert_eq!(after.status(), weir_proto::CheckpointStatus::Completed);

    // Many jobs: listed a page at a time, every one of them. They wait for slots the running job holds.
    let specs = cluster.output_dir("waiting")?;
    let waiting_spec = specs.join("waiting.yaml");
    write_file(&waiting_spec, GOOD)?;
    let mut waiting = Vec::new();
    for _ in 0..120 {
        waiting.push(cluster.submit(GOOD)?);
    }
    let listed = cluster.cli_json(&["job", "list"])?;
    let ids: Vec<&str> = listed.as_array().expect("an array").iter().filter_map(|j| j["id"].as_str()).collect();
    assert_eq!(ids.len(), 121, "every job listed across pages");
    assert!(waiting.iter().all(|w| ids.contains(&w.as_str())));

    // Deleting: a job that has not ended is refused; an ended one's record goes, its checkpoints stay unless asked.
    let out = cluster.cli(&["job", "delete", &id])?;
    assert!(!out.status.success() && out.stderr.contains("cancel it first"), "{out}");
    for w in &waiting {
        cluster.cancel(w)?;
        let out = cluster.cli(&["job", "delete", w, "--output", "json"])?;
        assert!(out.status.success(), "{out}");
    }
    assert_eq!(cluster.jobs()?.len(), 1, "only the running job is left");
    cluster.cancel(&id)?;
    let chk = cluster.checkpoint_dir().expect("local store").join(&id);
    let out = cluster.cli(&["job", "delete", &id])?;
    assert!(out.status.success() && out.stdout.contains("kept"), "{out}");
    assert!(chk.exists(), "the checkpoints are kept unless asked");
    let err = cluster.job(&id).expect_err("the record is gone");
    assert!(format!("{err:#}").contains("no job with id"), "{err:#}");
    // A job deleted with its checkpoints: the directory goes too.
    let gone = cluster.submit(&job.yaml())?;
    cluster.wait_for_checkpoints(&gone, 2, Duration::from_secs(60))?;
    cluster.cancel(&gone)?;
    let gone_dir = cluster.checkpoint_dir().expect("local store").join(&gone);
    weir_integration_tests::wait_until("for the job to be canceled", Duration::from_secs(30), || {
        Ok((weir_integration_tests::job_state(&cluster.job(&gone)?)
            == Some(weir_integration_tests::JobState::Canceled))
        .then_some(()))
    })?;
    let out = cluster.cli_json(&["job", "delete", &gone, "--delete-checkpoints"])?;
    assert!(out["deleted_files"].as_u64().unwrap_or(0) > 0, "{out}");
    assert!(!gone_dir.exists(), "{} is left", gone_dir.display());
    assert!(cluster.jobs()?.is_empty());
    cluster.stop();
    Ok(())
}
