//! The built-in kinds' checks of specs, as a task manager runs them when the job manager asks it to check a
//! spec (`CheckSpec`): configs read and checked naming the field, columns worked out and checked on every edge,
//! side outputs, event time.

#![cfg(test)]

use super::registry;
use weir_common::job::spec::*;
use weir_common::job::watermarks::WatermarkStrategy;
use weir_proto as pb;

const DEMO: &str = r#"
name: demo
parallelism: 2
checkpointing: { interval_ms: 1000 }
operators:
  - { uid: events, kind: datagen, config: { count: 1000000, keys: 10000, seed: 1 } }
  - { uid: counts, kind: keyed-count, input: events }
  - { uid: out, kind: file-sink, input: counts, parallelism: 1, config: { path: /tmp/out } }
"#;

fn resolve_text(text: &str) -> Result<ResolvedJob, SpecError> {
    resolve(&parse_spec_text(text)?, &registry())
}

fn err_of(text: &str) -> String {
    resolve_text(text).unwrap_err().to_string()
}

/// A source and a chain of `n - 1` counters, in protobuf form.
fn chain(n: usize) -> pb::JobSpec {
    let mut operators = vec![pb::OperatorSpec { uid: "op-0".into(), kind: "datagen".into(), ..Default::default() }];
    for i in 1..n {
        operators.push(pb::OperatorSpec {
            uid: format!("op-{i}"),
            kind: "keyed-count".into(),
            input: format!("op-{}", i - 1),
            ..Default::default()
        });
    }
    pb::JobSpec { name: "chain".into(), operators, ..Default::default() }
}

#[test]
fn project_and_filter_columns_are_worked_out_and_checked_at_submission() {
    let spec = |select: &str, key: &str, next: &str| {
        format!(
            "name: q\noperators:\n\
             - {{ uid: events, kind: nexmark, config: {{ events: 10 }} }}\n\
             - {{ uid: bids, kind: filter, input: events, config: {{ where: \"event_type = 2\" }} }}\n\
             - {{ uid: p, kind: project, input: bids, config: {{ select: \"{select}\"{key} }} }}\n\
             - {{ uid: next, kind: {next}, input: p }}\n"
        )
    };
    // A keyed kind after a project that sets the key.
    let ok = spec("bid_auction AS auction, 0.908 * bid_price AS price", ", key: bid_auction", "keyed-count");
    resolve_text(&ok).unwrap();
    let e = resolve_text(&spec("bid_auction AS auction", "", "keyed-count")).unwrap_err().to_string();
    assert!(e.contains("\"next\"") && e.contains("needs column \"key\""), "{e}");
    let e = resolve_text(&spec("bid_nope", "", "blackhole")).unwrap_err().to_string();
    assert!(e.contains("\"p\"") && e.contains("config.select") && e.contains("No field named bid_nope"), "{e}");
    let e = resolve_text(&spec("person_name + 1 AS x", "", "blackhole")).unwrap_err().to_string();
    assert!(e.contains("config.select") && e.contains("Cannot coerce arithmetic expression Utf8 + Int64"), "{e}");
    let e = resolve_text(&spec("*", ", key: bid_price * 1.5e0", "blackhole")).unwrap_err().to_string();
    assert!(e.contains("config.key") && e.contains("float64"), "{e}");
    let e = resolve_text(&spec("a AS", "", "blackhole")).unwrap_err().to_string();
    assert!(e.contains("config.select") && e.contains("after AS"), "{e}");
    let bad_where = spec("*", "", "blackhole").replace("event_type = 2", "event_type");
    let e = resolve_text(&bad_where).unwrap_err().to_string();
    assert!(e.contains("\"bids\"") && e.contains("config.where") && e.contains("must be a condition"), "{e}");
    let e = resolve_text(&spec("*", "", "blackhole").replace("where:", "when:")).unwrap_err().to_string();
    assert!(e.contains("config.when") && e.contains("unknown field"), "{e}");
}

#[test]
fn side_outputs_are_read_as_uid_dot_tag_and_must_exist() {
    let spec = |late: &str, input: &str| {
        format!(
            "name: s\noperators:\n  \
             - {{ uid: src, kind: datagen, config: {{ event_time: {{ start_ms: 0 }} }}, \
                  watermarks: {{ max_out_of_orderness_ms: 5 }} }}\n  \
             - {{ uid: win, kind: window-aggregate, input: src, config: {{ window: {{ tumbling_ms: 10 }}, late: {late} }} }}\n  \
             - {{ uid: l, kind: file-sink, input: {input}, config: {{ path: /tmp/l }} }}\n"
        )
    };
    let job = resolve_text(&spec("side-output", "win.late")).unwrap();
    assert_eq!(job.operators[2].input_tag.as_deref(), Some("late"));
    let e = err_of(&spec("drop", "win.late"));
    assert!(e.contains("\"win\" has no side output \"late\"") && e.contains("late: side-output"), "{e}");
    let e = err_of(&spec("side-output", "src.late"));
    assert!(e.contains("kind \"datagen\" has no side outputs"), "{e}");
    let e = err_of(&spec("side-output", "win.early"));
    assert!(e.contains("has side outputs late"), "{e}");
    let e = err_of(&spec("side-output", "nowhere.late"));
    assert!(e.contains("no operator has uid \"nowhere.late\""), "{e}");
}

#[test]
fn nested_config_travels_typed_and_watermarks_resolve() {
    let timed = DEMO.replace(
        "seed: 1 } }",
        "seed: 1, event_time: { start_ms: 1000, max_disorder_ms: 20 } }, \
         watermarks: { strategy: bounded-out-of-orderness, max_out_of_orderness_ms: 20, idle_timeout_ms: 500 } }",
    );
    let spec = parse_spec_text(&timed).unwrap();
    let event_time = weir_common::job::config_value::from_proto(&spec.operators[0].config["event_time"]).unwrap();
    assert_eq!(event_time, serde_json::json!({ "start_ms": 1000, "max_disorder_ms": 20 }), "a map travels as a map");
    let job = resolve(&spec, &registry()).unwrap();
    assert_eq!(
        job.operators[0].watermarks,
        Some(WatermarkStrategy {
            max_out_of_orderness_ms: 20,
            idle_timeout_ms: Some(500),
            auto_watermark_interval_ms: 200
        })
    );
    assert_eq!(job.operators[1].watermarks, None);
    // Lists travel the same way; a kind that expects a scalar says so.
    let listed = DEMO.replace("keys: 10000", "keys: [1, 2]");
    let e = err_of(&listed);
    assert!(e.contains("config.keys") && e.contains("expected a non-negative integer, got a list"), "{e}");
}

#[test]
fn a_join_reads_two_inputs_and_says_what_is_wrong_with_them() {
    let spec = |join: &str| {
        format!(
            "name: j\nparallelism: 2\noperators:\n\
             - {{ uid: events, kind: nexmark, config: {{ events: 10 }} }}\n\
             - {{ uid: a, kind: project, input: events, config: {{ select: auction_id AS a_id, key: auction_seller }} }}\n\
             - {{ uid: p, kind: project, input: events, config: {{ select: person_name AS name, key: person_id }} }}\n\
             - {{ uid: j, kind: join, {join} }}\n\
             - {{ uid: out, kind: blackhole, input: j }}\n"
        )
    };
    let job = resolve_text(&spec("inputs: [a, p], config: { select: \"name, a_id\" }")).unwrap();
    assert_eq!((job.operators[3].input, job.operators[3].second_input), (Some(1), Some(2)));
    assert_eq!(job.operators[3].partitioning, Partitioning::KeyBy);
    let g = weir_common::deploy::descriptor::ExecutionGraph::build(&job);
    let join = g.vertices.iter().find(|v| v.operators[0] == 3).expect("the join's vertex");
    // Both projects are chained to the source (a chain that fans out): one vertex feeds both inputs.
    assert_eq!(
        (join.input, join.second_input),
        (
            Some((weir_common::ids::VertexId(0), Partitioning::KeyBy)),
            Some((weir_common::ids::VertexId(0), Partitioning::KeyBy))
        )
    );
    assert_eq!(g.vertices[0].operators, vec![0, 1, 2]);
    assert_eq!((g.vertices[0].output_from.clone(), g.vertices[0].output_to_input.clone()), (vec![1, 2], vec![0, 1]));
    let refused = [
        ("input: a", "joins two inputs"),
        ("inputs: [a]", "joins two inputs"),
        ("inputs: [a, a]", "different operators"),
        ("inputs: [a, nope]", "no operator has uid \"nope\""),
        ("input: a, inputs: [a, p]", "not both"),
        ("inputs: [a, p, events]", "at most two"),
        ("inputs: [a, p], config: { where: \"name\" }", "must be a condition"),
        ("inputs: [a, p], config: { select: \"nope\" }", "No field named nope"),
        ("inputs: [a, events]", "needs column \"key\""),
    ];
    for (join, why) in refused {
        let e = resolve_text(&spec(join)).unwrap_err().to_string();
        assert!(e.contains("\"j\"") && e.contains(why), "{join}: {e}");
    }
    let e = resolve_text(&spec("inputs: [a, p]").replace("person_name AS name", "person_name AS a_id")).unwrap_err();
    assert!(e.to_string().contains("both inputs have a column \"a_id\""), "{e}");
    let e =
        resolve_text(&spec("inputs: [a, p]").replace("kind: blackhole, input: j", "kind: blackhole, inputs: [a, p]"))
            .unwrap_err();
    assert!(e.to_string().contains("reads one input"), "{e}");
    let cycle = spec("inputs: [a, out]")
        .replace("kind: blackhole, input: j", "kind: project, input: j, config: { select: \"*\" }");
    assert!(resolve_text(&cycle).unwrap_err().to_string().contains("cycle"));
}

/// The columns a config names are checked against the input at submission (a misspelt `field` once failed
/// the job at its first batch, with the cause only in a task manager's log).
#[test]
fn columns_a_config_names_must_be_in_the_input() {
    let window = |config: &str| {
        DEMO.replace(
            "kind: keyed-count, input: events }",
            &format!("kind: window-aggregate, input: events, config: {{ window: {{ tumbling_ms: 10 }}, {config} }} }}"),
        )
        .replace("seed: 1 } }", "seed: 1, event_time: {} } }")
    };
    resolve_text(&window("aggregate: sum")).unwrap();
    resolve_text(&window("aggregate: count, field: nope")).unwrap();
    let e = err_of(&window("aggregate: sum, field: nope"));
    assert!(e.contains("\"counts\"") && e.contains("config.field") && e.contains("no input column \"nope\""), "{e}");
    let e = err_of(&window("aggregate: max, field: key"));
    assert!(e.contains("config.field") && e.contains("\"key\" is binary, not int64"), "{e}");

    let sink = |config: &str| {
        DEMO.replace(
            "kind: file-sink, input: counts, parallelism: 1, config: { path: /tmp/out } }",
            &format!(
                "kind: kafka-sink, input: counts, config: {{ bootstrap_servers: 'b:9092', topic: t, {config} }} }}"
            ),
        )
    };
    resolve_text(&sink("key_field: value, headers: [key]")).unwrap();
    let e = err_of(&sink("key_field: user"));
    assert!(e.contains("\"out\"") && e.contains("config.key_field") && e.contains("\"user\""), "{e}");
    let e = err_of(&sink("headers: [value, region]"));
    assert!(e.contains("config.headers") && e.contains("\"region\""), "{e}");
    let avro = |fields: &str| {
        sink(&format!(r#"format: avro, avro_schema: '{{"type": "record", "name": "C", "fields": [{fields}]}}'"#))
    };
    resolve_text(&avro(r#"{"name": "value", "type": "long"}, {"name": "key", "type": "bytes"}"#)).unwrap();
    let e = err_of(&avro(r#"{"name": "count", "type": "long"}"#));
    assert!(e.contains("config.avro_schema") && e.contains("field \"count\""), "{e}");
    let e = err_of(&avro(r#"{"name": "value", "type": "string"}"#));
    assert!(e.contains("config.avro_schema") && e.contains("int64, not utf8"), "{e}");
}

#[test]
fn bad_specs_name_the_problem() {
    let unknown = DEMO.replace("kind: keyed-count", "kind: keyed-cuont");
    assert!(err_of(&unknown).contains("operator \"counts\": field \"kind\": unknown operator kind \"keyed-cuont\""));
    let missing = DEMO.replace("input: events", "input: evnts");
    assert!(err_of(&missing).contains("operator \"counts\": field \"input\": no operator has uid \"evnts\""));
    let no_input = DEMO.replace(", input: events", "");
    assert!(err_of(&no_input).contains("operator \"counts\": field \"input\": missing"));
    let dup = DEMO.replace("uid: out", "uid: counts");
    assert!(err_of(&dup).contains("duplicate uid"));
    let too_wide =
        DEMO.replace("parallelism: 1,", "parallelism: 300,").replace("name: demo", "name: demo\nmax_parallelism: 128");
    assert!(err_of(&too_wide)
        .contains("operator \"out\": field \"parallelism\": 300 is above the job's max_parallelism 128"));
    let zero_keys = DEMO.replace("keys: 10000", "keys: 0");
    assert!(err_of(&zero_keys).contains("operator \"events\": field \"config.keys\": must be at least 1"));
    assert!(err_of("name: x\noperators: [ {uid: a, kind: datagen").starts_with("malformed job spec"));
    assert!(err_of("name: x\nbogus: 1\noperators: []").contains("unknown field `bogus`"));
}

#[test]
fn limits_are_refused_by_name_and_echo_little() {
    // Every value within its limit, together too much.
    let mut spec = chain(2);
    for i in 0..20 {
        spec.operators[0].config.insert(format!("k{i}"), "v".repeat(MAX_CONFIG_VALUE_BYTES).into());
    }
    let e = check_limits(&spec).unwrap_err().to_string();
    assert!(e.contains("\"spec\"") && e.contains("1048576"), "{e}");

    let e = resolve(&chain(MAX_OPERATORS + 1), &registry()).unwrap_err().to_string();
    assert!(e.contains("\"operators\"") && e.contains(&MAX_OPERATORS.to_string()), "{e}");
    assert!(resolve(&chain(MAX_OPERATORS), &registry()).is_ok(), "the limit itself is fine");

    let mut spec = chain(2);
    spec.name = "n".repeat(MAX_NAME_BYTES + 1);
    let e = check_limits(&spec).unwrap_err().to_string();
    assert!(e.contains("\"name\"") && e.len() < 200, "{e}");

    let mut spec = chain(2);
    spec.operators[0].config.insert("seed".into(), "9".repeat(MAX_CONFIG_VALUE_BYTES + 1).into());
    let e = check_limits(&spec).unwrap_err().to_string();
    assert!(e.contains("config.seed") && e.contains("65536") && e.len() < 200, "{e}");

    let mut spec = chain(2);
    spec.operators[1].uid = "x".repeat(5000);
    let e = check_limits(&spec).unwrap_err().to_string();
    assert!(e.contains("\"uid\"") && e.contains("5000 bytes") && e.len() < 300, "{e}");
    // A uid under the byte limit but with characters a uid may not have: refused, echoing its start only.
    let mut spec = chain(2);
    spec.operators[1].uid = format!("{}!", "y".repeat(120));
    let e = resolve(&spec, &registry()).unwrap_err().to_string();
    assert!(e.contains("… (121 bytes)") && !e.contains(&"y".repeat(100)), "{e}");

    // A value echoed by a config check is cut too.
    let mut spec = chain(2);
    spec.operators[0].config.insert("keys".into(), "z".repeat(10_000).into());
    let e = resolve(&spec, &registry()).unwrap_err().to_string();
    assert!(e.contains("config.keys") && e.len() < 300, "{e}");

    let mut spec = chain(2);
    spec.parallelism = Some(0);
    let e = resolve(&spec, &registry()).unwrap_err().to_string();
    assert!(e.contains("\"parallelism\"") && e.contains("at least 1"), "{e}");
    spec.parallelism = None;
    assert_eq!(resolve(&spec, &registry()).unwrap().parallelism, 1, "unset is 1");
}

#[test]
fn config_values_arrive_typed_and_bad_ones_are_refused_by_field() {
    use weir_proto::config_value::Kind;
    let list = |items: Vec<pb::ConfigValue>| pb::ConfigValue { kind: Some(Kind::List(pb::ConfigList { items })) };
    // Numbers arrive as numbers, past 2^53 exactly.
    let mut spec = chain(2);
    spec.operators[0].config.insert("seed".into(), pb::ConfigValue { kind: Some(Kind::Uint(u64::MAX)) });
    let job = resolve(&spec, &registry()).unwrap();
    assert_eq!(job.operators[0].config["seed"], serde_json::json!(u64::MAX));

    // A nested value counts its encoded size against the limit.
    let mut spec = chain(2);
    let big = list((0..MAX_CONFIG_VALUE_BYTES / 4).map(|i| pb::ConfigValue::from(i as i64 * 1000)).collect());
    spec.operators[0].config.insert("event_time".into(), big);
    let e = check_limits(&spec).unwrap_err().to_string();
    assert!(e.contains("config.event_time") && e.contains("65536"), "{e}");

    // Nested past the limit: refused naming the field, not recursed into without end.
    let mut spec = chain(2);
    let mut deep = pb::ConfigValue::from(1i64);
    for _ in 0..=weir_common::job::config_value::MAX_CONFIG_DEPTH {
        deep = list(vec![deep]);
    }
    spec.operators[0].config.insert("event_time".into(), deep);
    let e = resolve(&spec, &registry()).unwrap_err().to_string();
    assert!(e.contains("config.event_time") && e.contains("levels deep"), "{e}");

    // A float NaN cannot be written in a spec: refused.
    let mut spec = chain(2);
    spec.operators[0].config.insert("seed".into(), pb::ConfigValue { kind: Some(Kind::Float(f64::NAN)) });
    let e = resolve(&spec, &registry()).unwrap_err().to_string();
    assert!(e.contains("config.seed") && e.contains("not a finite number"), "{e}");

    // A map where text is expected is refused by the kind, naming the field.
    let mut spec = chain(2);
    let map = pb::ConfigValue { kind: Some(Kind::Map(pb::ConfigMap::default())) };
    spec.operators[0].config.insert("seed".into(), map);
    let e = resolve(&spec, &registry()).unwrap_err().to_string();
    assert!(e.contains("config.seed") && e.contains("got a map"), "{e}");

    // A config an older client sent as text is refused, not dropped.
    let mut spec = chain(2);
    spec.operators[0].legacy_config.insert("seed".into(), "7".into());
    let e = check_limits(&spec).unwrap_err().to_string();
    assert!(e.contains("config") && e.contains("older than this cluster"), "{e}");
}

#[test]
fn the_job_manager_checks_watermarks_on_the_wire_too() {
    let timed = DEMO.replace("seed: 1 } }", "seed: 1, event_time: {} } }");
    let mut spec = parse_spec_text(&timed).unwrap();
    spec.operators[0].watermarks = Some(pb::WatermarkSpec { max_out_of_orderness_ms: -1, ..Default::default() });
    let e = resolve(&spec, &registry()).unwrap_err().to_string();
    assert!(
        e.contains("\"events\"") && e.contains("watermarks.max_out_of_orderness_ms") && e.contains("negative"),
        "{e}"
    );
    spec.operators[0].watermarks = Some(pb::WatermarkSpec::default());
    assert!(resolve(&spec, &registry()).is_ok());
    spec.operators[0].config.remove("event_time");
    let e = resolve(&spec, &registry()).unwrap_err().to_string();
    assert!(e.contains("no event timestamps") && e.contains("event_time"), "{e}");
    spec.operators[0].config.insert(
        "event_time".into(),
        pb::ConfigValue { kind: Some(weir_proto::config_value::Kind::Map(pb::ConfigMap::default())) },
    );
    spec.operators[1].watermarks = Some(pb::WatermarkSpec::default());
    let e = resolve(&spec, &registry()).unwrap_err().to_string();
    assert!(e.contains("\"counts\"") && e.contains("only a source"), "{e}");
}
