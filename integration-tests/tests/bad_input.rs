//! Bad job specs are rejected before a job exists, with exit code 2 and a message naming the operator and
//! field; bad config files stop a binary at once with a one-line reason. Specs over the size limits (40,000
//! operators, a config value of megabytes, a name of megabytes, a long uid) are refused at once, naming the
//! limit and echoing little, while a job runs on untouched. Jobs are listed a page at a time, and the record of
//! an ended job can be deleted.

use std::path::Path;
use std::process::Command;
use std::time::Duration;
use weir_common::job::kind::KindCatalog;
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

/// [`GOOD`] with a `filter` of condition `condition` between the source and the count.
fn filter(condition: &str) -> String {
    GOOD.replace(
        "  - { uid: counts, kind: keyed-count, input: events }",
        &format!(
            "  - {{ uid: filtered, kind: filter, input: events, config: {{ where: \"{condition}\" }} }}\n  \
             - {{ uid: counts, kind: keyed-count, input: filtered }}"
        ),
    )
}

/// [`GOOD`] with a `project` of select list `select` after the source, into the sink.
fn select(select: &str) -> String {
    GOOD.replace(
        "  - { uid: counts, kind: keyed-count, input: events }",
        &format!("  - {{ uid: selected, kind: project, input: events, config: {{ select: \"{select}\" }} }}"),
    )
    .replace("input: counts, parallelism: 1", "input: selected, parallelism: 1")
}

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
        // The hostile-input probe's specs: each once crashed a process, ran for hours or grew without bound.
        BadSpec {
            name: "a where of 1,300 nested parentheses",
            spec: filter(&format!("{}value > 1{}", "(".repeat(1_300), ")".repeat(1_300))),
            mentions: &[&["filtered"], &["where"], &["levels deep"]],
        },
        BadSpec {
            name: "NOT 16,000 times",
            spec: filter(&format!("{}value > 1", "NOT ".repeat(16_000))),
            mentions: &[&["filtered"], &["where"], &["levels deep"]],
        },
        BadSpec {
            name: "a minus 20,000 times",
            spec: filter(&format!("{}value > 1", "- ".repeat(20_000))),
            mentions: &[&["filtered"], &["where"], &["levels deep"]],
        },
        BadSpec {
            name: "a flat sum of 16,000 terms",
            spec: filter(&format!("value{} > 1", " + 1".repeat(16_000))),
            mentions: &[&["filtered"], &["where"], &["levels deep"]],
        },
        BadSpec {
            name: "a select of 2,500 terms",
            spec: select(&format!("value{} AS x", " + 1".repeat(2_500))),
            mentions: &[&["selected"], &["select"], &["levels deep"]],
        },
        BadSpec {
            name: "a key that is NULL",
            spec: select("value").replace("select: \"value\" }", "select: \"value\", key: \"NULL\" }"),
            mentions: &[&["selected"], &["key"], &["cannot be null"]],
        },
        BadSpec {
            name: "a sliding window of a year sliding by a year less 1 ms",
            spec: GOOD
                .replace(
                    "kind: keyed-count, input: events }",
                    "kind: window-aggregate, input: events, config: { window: { sliding_ms: 31536000000, \
                     slide_ms: 31535999999 } } }",
                )
                .replace("seed: 1 } }", "seed: 1, event_time: { step_ms: 1 } } }"),
            mentions: &[&["counts"], &["window"], &["slices"], &["10000"]],
        },
        BadSpec {
            name: "datagen of 4294967295 splits",
            spec: GOOD.replace("seed: 1 }", "seed: 1, splits: 4294967295 }"),
            mentions: &[&["events"], &["splits"], &["10000000"]],
        },
        BadSpec {
            name: "nexmark of 4294967295 splits",
            spec: nexmark("splits: 4294967295"),
            mentions: &[&["events"], &["splits"], &["10000000"]],
        },
        BadSpec {
            name: "a sum over a column that does not exist",
            spec: GOOD
                .replace(
                    "kind: keyed-count, input: events }",
                    "kind: window-aggregate, input: events, config: { window: { tumbling_ms: 10 }, aggregate: sum, \
                     field: price } }",
                )
                .replace("seed: 1 } }", "seed: 1, event_time: { step_ms: 1 } } }"),
            mentions: &[&["counts"], &["config.field"], &["price"]],
        },
        BadSpec {
            name: "datagen starting at the end of time",
            spec: GOOD.replace("seed: 1 } }", "seed: 1, event_time: { start_ms: 9223372036854775807 } } }"),
            mentions: &[&["events"], &["event_time"], &["9999-12-31"]],
        },
        BadSpec {
            name: "datagen starting at the beginning of time",
            spec: GOOD.replace("seed: 1 } }", "seed: 1, event_time: { start_ms: -9223372036854775808 } } }"),
            mentions: &[&["events"], &["event_time"], &["0001-01-01"]],
        },
        BadSpec {
            name: "datagen stepping 2^64 - 1 ms",
            spec: GOOD.replace("seed: 1 } }", "seed: 1, event_time: { step_ms: 18446744073709551615 } } }"),
            mentions: &[&["events"], &["event_time"], &["step_ms"]],
        },
        BadSpec {
            name: "a kafka sink keyed by a column that does not exist",
            spec: GOOD.replace(
                "uid: out, kind: blackhole, input: counts, parallelism: 1",
                "uid: out, kind: kafka-sink, input: counts, parallelism: 1, config: { bootstrap_servers: \
                 '127.0.0.1:9', topic: t, key_field: user }",
            ),
            mentions: &[&["out"], &["config.key_field"], &["user"]],
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
        if weir_common::job::spec::parse_spec_text(&case.spec).is_ok() {
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

/// `weir kinds` lists what the task managers offer, built-in and user kinds alike, with what a spec needs: role,
/// config fields and their docs, states, and columns; and every field it lists is one a config may set.
#[test]
fn weir_kinds_lists_every_kind_with_its_config_fields() -> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::new(1, 1).with_taskmanager_binary("weir-example-taskmanager"))?;
    let listed = cluster.cli_json(&["kinds"])?;
    let kinds = listed.as_array().cloned().unwrap_or_default();
    let kind = |name: &str| kinds.iter().find(|k| k["kind"] == name).cloned();
    let names: Vec<&str> = kinds.iter().filter_map(|k| k["kind"].as_str()).collect();
    for name in weir_taskmanager::builtins::registry().names() {
        assert!(names.contains(&name), "built-in {name} is not listed: {names:?}");
    }
    assert!(names.contains(&"state-kinds"), "a user kind of the example task manager is listed: {names:?}");

    let datagen = kind("datagen").expect("datagen is listed");
    assert_eq!(datagen["role"], "source");
    let count = datagen["config"].as_array().and_then(|f| f.iter().find(|f| f["name"] == "count").cloned());
    assert!(
        count.as_ref().and_then(|c| c["doc"].as_str()).is_some_and(|d| d.contains("records")),
        "datagen's count field and its doc: {datagen}"
    );
    assert_eq!(datagen["states"][0]["kind"], "operator-list", "{datagen}");
    assert_eq!(datagen["output"], "columns");
    assert_eq!(datagen["output_columns"][1]["name"], "value", "{datagen}");
    let windows = kind("window-aggregate").expect("window-aggregate is listed");
    assert_eq!(windows["needs_event_time"], true);
    assert_eq!(windows["keyed"], true);
    // The fields whose value the stored state depends on are marked, in JSON and text.
    let field = |name: &str| windows["config"].as_array().and_then(|f| f.iter().find(|f| f["name"] == name).cloned());
    assert_eq!(field("window").map(|w| w["shapes_state"].clone()), Some(true.into()), "{windows}");
    assert_eq!(field("late").map(|w| w["shapes_state"].is_null()), Some(true), "{windows}");
    let text = cluster.cli(&["kinds", "window-aggregate"])?;
    assert!(text.stdout.contains("*window ") && text.stdout.contains(" late "), "{text}");
    let counts = kind("keyed-count").expect("keyed-count is listed");
    assert_eq!(counts["states"][0]["name"], "count");
    assert_eq!(counts["states"][0]["kind"], "value");

    // Each listed field is accepted as a field (whatever its value says), and one not listed is refused by name.
    let fields: Vec<String> = datagen["config"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["name"].as_str().map(String::from))
        .collect();
    let refused = cluster.cli(&["kinds", "no-such-kind"])?;
    assert_ne!(refused.code(), Some(0), "{refused}");
    assert!(refused.stderr.contains("no-such-kind"), "{refused}");
    let text = cluster.cli(&["kinds", "datagen"])?;
    assert!(text.status.success(), "{text}");
    for f in &fields {
        assert!(text.stdout.contains(f.as_str()), "`weir kinds datagen` shows field {f}: {text}");
    }
    assert!(!text.stdout.contains("keyed-count"), "only the kind asked for: {text}");
    let specs = cluster.output_dir("specs")?;
    let file = specs.join("unknown-field.yaml");
    write_file(
        &file,
        "name: u\noperators:\n  - { uid: s, kind: datagen, config: { count: 10, colour: red } }\n  - { uid: o, kind: blackhole, input: s }\n",
    )?;
    let out = cluster.cli(&["job", "submit", file.to_str().unwrap_or_default()])?;
    assert_eq!(out.code(), Some(2), "{out}");
    for f in fields.iter().chain(["colour".to_string()].iter()) {
        assert!(out.stderr.contains(f.as_str()), "the refusal names {f}, as `weir kinds` does: {out}");
    }
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
    big_value.operators[0].config.insert("seed".into(), "7".repeat(3_500_000).into());
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

/// Every committed line under `dir` (files whose names do not start with a dot, in any folder).
fn committed_lines(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with('.')) {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
            } else {
                lines.extend(std::fs::read_to_string(&path)?.lines().map(str::to_string));
            }
        }
    }
    Ok(lines)
}

/// CPU seconds a process has used (user and system), from `/proc`.
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command (which may hold spaces) start after its closing parenthesis.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11).unwrap_or(&"0").parse::<u64>()? + fields.get(12).unwrap_or(&"0").parse::<u64>()?;
    Ok(ticks as f64 / 100.0)
}

/// The hostile-input probe's inputs that once took processes down, fed to a cluster with a job running: the job
/// manager refuses deep expressions by name (it once overflowed its stack), every task manager stays up, the
/// expressions it accepts run (as deep as allowed, NULL arithmetic), and the running job never notices.
#[test]
fn hostile_specs_are_refused_or_run_and_the_running_job_is_unharmed() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 2))?;
    let steady = weir_integration_tests::CountJob::unbounded("steady", 1_000, 3)
        .rate(20_000)
        .checkpoint_every_ms(200)
        .into_blackhole();
    let id = cluster.submit(&steady.yaml())?;
    let before = cluster.wait_for_checkpoints(&id, 2, Duration::from_secs(60))?;

    // Straight to the job manager (no CLI in between): refused by name, at once, and it lives on.
    let deep = [
        ("20,000 parentheses", filter(&format!("{}value > 1{}", "(".repeat(20_000), ")".repeat(20_000)))),
        ("NOT 16,000 times", filter(&format!("{}value > 1", "NOT ".repeat(16_000)))),
        ("a sum of 16,000 terms", filter(&format!("value{} > 1", " + 1".repeat(16_000)))),
        ("a select of 2,500 terms", select(&format!("value{} AS x", " + 1".repeat(2_500)))),
    ];
    for (what, spec) in deep {
        let took =
            refused_quickly(&mut cluster, what, weir_common::job::spec::parse_spec_text(&spec)?, &["levels deep"]);
        assert!(took < Duration::from_secs(2), "{what}: {took:?}");
        assert!(cluster.jobmanager_is_running(), "the job manager died on {what}");
    }

    // What it accepts runs, on every task manager: a sum as deep as the limit, and arithmetic on NULL (which
    // once panicked the task); a filter on NULL passes nothing.
    let out = cluster.output_dir("accepted")?;
    let nothing = cluster.output_dir("nothing")?;
    let accepted = format!(
        "name: accepted\nparallelism: 2\nrestart: {{ strategy: none }}\ncheckpointing: {{ interval_ms: 200 }}\n\
         operators:\n\
         \x20 - {{ uid: events, kind: datagen, config: {{ count: 1000, keys: 10, seed: 1 }} }}\n\
         \x20 - {{ uid: deep, kind: project, input: events, config: {{ select: \"value{} AS deep, NULL / NULL AS a, \
         NULL % NULL AS b, MOD(NULL, NULL) AS c, -NULL AS d\", where: \"NULL OR value > 0\" }} }}\n\
         \x20 - {{ uid: out, kind: file-sink, input: deep, config: {{ path: {} }} }}\n\
         \x20 - {{ uid: none, kind: filter, input: events, config: {{ where: \"NULL\" }} }}\n\
         \x20 - {{ uid: sink-none, kind: file-sink, input: none, config: {{ path: {} }} }}\n",
        " + 1".repeat(255),
        out.display(),
        nothing.display()
    );
    let accepted_id = cluster.submit(&accepted)?;
    let info =
        cluster.wait_for_state(&accepted_id, &[weir_integration_tests::JobState::Finished], Duration::from_secs(60))?;
    assert_eq!(info.restarts, 0, "{info:?}");
    let lines = committed_lines(&out)?;
    assert_eq!(lines.len(), 1000);
    assert!(lines.iter().all(|l| l == "256,,,,"), "{:?}", &lines[..3]);
    assert!(committed_lines(&nothing)?.is_empty());
    assert_eq!(cluster.live_taskmanagers().len(), 2, "a task manager died");

    // The running job never noticed.
    let after = cluster.wait_for_checkpoint_after(
        &id,
        before.last_completed_checkpoint.unwrap_or(0) + 2,
        Duration::from_secs(30),
    )?;
    assert_eq!(after.status(), weir_proto::CheckpointStatus::Completed);
    let info = cluster.job(&id)?;
    assert_eq!((info.restarts, info.attempt), (before.restarts, before.attempt), "{info:?}");
    cluster.cancel(&id)?;
    cluster.stop();
    Ok(())
}

/// Hostile spec files to the CLI: it reads no more than a spec may hold, refuses deep nesting at once, reads past
/// a byte-order mark, names the limits, and quotes little of what it refuses.
#[test]
fn the_cli_refuses_hostile_spec_files_quickly_naming_the_limit() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(1, 1))?;
    let dir = cluster.output_dir("specs")?;
    let submit =
        |name: &str, text: Option<&str>| -> anyhow::Result<(weir_integration_tests::CommandOutput, Duration)> {
            let path = match text {
                Some(t) => {
                    let p = dir.join(name);
                    write_file(&p, t)?;
                    p
                }
                None => std::path::PathBuf::from(name),
            };
            let began = std::time::Instant::now();
            let out = cluster.cli(&["job", "submit", path.to_str().unwrap_or_default()])?;
            Ok((out, began.elapsed()))
        };
    let nested = format!("{{\"name\": \"x\", \"operators\": {}{}}}", "[".repeat(100_000), "]".repeat(100_000));
    let big_value = GOOD.replace("seed: 1 }", &format!("seed: 1, note: \"{}\" }}", "v".repeat(100_000)));
    let one_line = format!("name: x\noperators: \"{}\"", "o".repeat(200_000));
    let cases: Vec<(&str, Option<String>, &[&str])> = vec![
        ("/dev/zero", None, &["1048576", "limit of a spec"]),
        ("huge.yaml", Some(format!("name: x\n# {}\noperators: []\n", "c".repeat(50 << 20))), &["1048576"]),
        ("nested.json", Some(nested), &["64 levels"]),
        ("big-value.yaml", Some(big_value), &["config.note", "65536"]),
        ("one-line.yaml", Some(one_line), &["invalid type"]),
        ("bom.yaml", Some(format!("\u{feff}{}", GOOD.replace("keys: 10", "keys: 0"))), &["keys"]),
    ];
    for (name, text, mentions) in cases {
        let (out, took) = submit(name, text.as_deref())?;
        let error = out.stderr.lines().find(|l| l.starts_with("error:")).unwrap_or_default().to_string();
        assert_eq!(out.code(), Some(2), "{name}: {out}");
        for m in mentions {
            assert!(error.contains(m), "{name}: {m:?} not in {error}");
        }
        assert!(error.len() < 1024, "{name}: the error is {} bytes", error.len());
        assert!(took < Duration::from_secs(5), "{name}: took {took:?}");
        assert!(!error.contains("missing field `operators`"), "{name}: {error}");
    }
    assert!(cluster.jobs()?.is_empty());
    cluster.stop();
    Ok(())
}

/// A window job whose firing runs for hours (10,000 slices per window, each of 11,000 windows of a key fired at
/// the end of input) is canceled: its task stops within seconds, not after the firing (a canceled task once
/// spun on for minutes). And a job that fails at once, with the default restart strategy, backs off (1 s, 1.5 s,
/// 2.25 s, …) and names its own failure, not the broken connections of its neighbours.
#[test]
fn a_canceled_firing_stops_and_a_failing_job_backs_off_naming_its_own_cause() -> anyhow::Result<()> {
    use weir_integration_tests::JobState;
    let mut cluster = Cluster::start(ClusterOptions::new(2, 2))?;
    let spinning = "name: spinning\nparallelism: 2\nstate_backend: heap\noperators:\n\
        \x20 - { uid: events, kind: datagen, config: { count: 200000, keys: 1000, seed: 1, event_time: { step_ms: 1 } } }\n\
        \x20 - { uid: windows, kind: window-aggregate, input: events, config: { window: { sliding_ms: 10000, slide_ms: 1 } } }\n\
        \x20 - { uid: out, kind: blackhole, input: windows }\n";
    let id = cluster.submit(spinning)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    let pids: Vec<u32> = (0..2).filter_map(|i| cluster.taskmanager_pid(i)).collect();
    let cpu = |pids: &[u32]| -> anyhow::Result<f64> { pids.iter().map(|p| cpu_seconds(*p)).sum() };
    // Firing: the task managers burn CPU (the 200,000 records take a fraction of a second).
    let start = cpu(&pids)?;
    weir_integration_tests::wait_until("for the windows to fire", Duration::from_secs(30), || {
        Ok((cpu(&pids)? - start > 3.0).then_some(()))
    })?;
    cluster.cancel(&id)?;
    cluster.wait_for_state(&id, &[JobState::Canceled], Duration::from_secs(10))?;
    // Within a few seconds of the cancel the task threads have stopped: the task managers idle.
    let idle = weir_integration_tests::wait_until("for the task managers to idle", Duration::from_secs(10), || {
        let before = cpu(&pids)?;
        std::thread::sleep(Duration::from_secs(2));
        let used = cpu(&pids)? - before;
        Ok((used < 0.5).then_some(used))
    })?;
    eprintln!("after the cancel: {idle:.2} CPU seconds in 2 s");
    assert!(cluster.all_logs().contains("task canceled"));

    // A source that fails at once (its event time passes the year 9999 at its second record): the default
    // restart strategy backs off, and the failure reason is the source's own error.
    let poison = "name: poison\nparallelism: 2\noperators:\n\
        \x20 - { uid: events, kind: datagen, config: { keys: 10, seed: 1, splits: 2, event_time: { start_ms: 253402300799000, step_ms: 1000 } } }\n\
        \x20 - { uid: counts, kind: keyed-count, input: events }\n\
        \x20 - { uid: out, kind: blackhole, input: counts }\n";
    let poison_id = cluster.submit(poison)?;
    let info = weir_integration_tests::wait_until("for three restarts", Duration::from_secs(60), || {
        let info = cluster.job(&poison_id)?;
        Ok((info.restarts >= 3).then_some(info))
    })?;
    assert!(info.failure.contains("event time") && info.failure.contains("9999-12-31"), "{}", info.failure);
    assert!(info.failure.contains("\"events\""), "the source is named: {}", info.failure);
    let delays: Vec<u64> = cluster
        .jobmanager_log()?
        .lines()
        .filter(|l| l.contains(&poison_id) && l.contains("job restarts after the delay"))
        .filter_map(|l| l.split("delay_ms=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect();
    assert!(delays.len() >= 3, "{delays:?}");
    // 1 s, 1.5 s, 2.25 s, each moved by up to 10 %: growing, never back below the first.
    assert!((900..=1100).contains(&delays[0]), "{delays:?}");
    assert!(delays.windows(2).all(|w| w[1] > w[0]), "{delays:?}");
    cluster.cancel(&poison_id)?;
    cluster.stop();
    Ok(())
}
