//! Config of the Kafka source kind `kafka` (DESIGN §6): which topics, where a partition without a restored
//! offset starts, bounded or not, and how a record becomes a row. Checked at submission, naming the field.

use crate::builtin::{field_err, ConfigFieldError};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Where a partition the source has no restored offset for starts (Flink's `OffsetsInitializer`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KafkaStart {
    /// Its first record still retained.
    Earliest,
    /// Its end at the time the source first sees it: only records produced later.
    Latest,
    /// The offset the consumer group committed for it; the earliest where there is none.
    Committed,
    /// Its first record with a timestamp at or after this (ms since the epoch); its end if none is.
    Timestamp(i64),
    /// The given offsets, by topic and partition; partitions not listed start at their earliest record.
    Offsets(BTreeMap<String, BTreeMap<i32, i64>>),
}

/// How a Kafka record becomes a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KafkaFormat {
    /// The record's key and value as bytes (`key`, `value`).
    Raw,
}

/// Config of the `kafka` source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaSourceConfig {
    /// `host:port[,host:port…]` of the brokers to bootstrap from.
    pub bootstrap_servers: String,
    /// The topics read (at least one).
    pub topics: Vec<String>,
    /// Where partitions without a restored offset start.
    pub start: KafkaStart,
    /// Stop at the end offsets seen when each partition is first read (a finite input), instead of reading on.
    pub bounded: bool,
    /// How records become rows.
    pub format: KafkaFormat,
    /// The consumer group offsets are committed to on checkpoint completion (monitoring only) and, with
    /// `start: committed`, read from; default `weir-<operator uid>` (set by the task manager).
    pub group_id: Option<String>,
    /// How often the source looks for new partitions, ms (0: never).
    pub discovery_interval_ms: u64,
}

/// Fields a `kafka` source config may have.
const FIELDS: &[&str] =
    &["bootstrap_servers", "topics", "start", "bounded", "format", "group_id", "discovery_interval_ms"];

/// Default interval between partition discoveries (Flink's `partition.discovery.interval.ms` default, 5 min,
/// is for clusters that rarely change; a test or a demo wants to see a new partition soon).
const DEFAULT_DISCOVERY_MS: u64 = 30_000;

/// `start` as written in a spec: a word, or a map with one key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StartMap {
    timestamp_ms: Option<i64>,
    offsets: Option<BTreeMap<String, BTreeMap<String, i64>>>,
    earliest: Option<serde_json::Value>,
    latest: Option<serde_json::Value>,
    committed: Option<serde_json::Value>,
}

impl KafkaSourceConfig {
    /// Reads and checks a `kafka` source config.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        if let Some(unknown) = map.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(field_err(unknown, format!("unknown field (known fields: {})", FIELDS.join(", "))));
        }
        let bootstrap_servers = match map.get("bootstrap_servers").map(|s| s.trim()) {
            Some(s) if !s.is_empty() => s.to_string(),
            _ => return Err(field_err("bootstrap_servers", "required: host:port of at least one broker")),
        };
        let topics = parse_topics(map.get("topics"))?;
        let start = match map.get("start") {
            None => KafkaStart::Earliest,
            Some(s) => parse_start(s)?,
        };
        let bounded = match map.get("bounded").map(|s| s.trim()) {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => return Err(field_err("bounded", format!("expected true or false, got {other:?}"))),
        };
        let format = match map.get("format").map(|s| s.trim()) {
            None | Some("raw") => KafkaFormat::Raw,
            Some(other) => return Err(field_err("format", format!("unknown format {other:?} (known: raw)"))),
        };
        let discovery_interval_ms = match map.get("discovery_interval_ms") {
            None => DEFAULT_DISCOVERY_MS,
            Some(s) => s.trim().replace('_', "").parse::<u64>().map_err(|_| {
                field_err("discovery_interval_ms", format!("expected a non-negative integer, got {s:?}"))
            })?,
        };
        let group_id = map.get("group_id").map(|s| s.trim().to_string());
        if group_id.as_deref() == Some("") {
            return Err(field_err("group_id", "must not be empty"));
        }
        if let KafkaStart::Offsets(offsets) = &start {
            if let Some(t) = offsets.keys().find(|t| !topics.contains(t)) {
                return Err(field_err("start", format!("offsets name topic {t:?}, which `topics` does not list")));
            }
        }
        Ok(KafkaSourceConfig { bootstrap_servers, topics, start, bounded, format, group_id, discovery_interval_ms })
    }
}

/// `topics`: a list of names, or one name.
fn parse_topics(raw: Option<&String>) -> Result<Vec<String>, ConfigFieldError> {
    let Some(raw) = raw else {
        return Err(field_err("topics", "required: the topics to read, a list of names"));
    };
    let topics: Vec<String> = match serde_json::from_str::<Vec<String>>(raw) {
        Ok(list) => list,
        Err(_) if !raw.trim_start().starts_with('[') => vec![raw.trim().to_string()],
        Err(e) => return Err(field_err("topics", format!("expected a list of topic names: {e}"))),
    };
    if topics.is_empty() {
        return Err(field_err("topics", "must name at least one topic"));
    }
    for t in &topics {
        // Kafka's own rule for topic names.
        let legal = !t.is_empty()
            && t.len() <= 249
            && t != "."
            && t != ".."
            && t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !legal {
            return Err(field_err(
                "topics",
                format!("{t:?} is not a legal topic name (1–249 of a-z, A-Z, 0-9, '.', '_', '-')"),
            ));
        }
    }
    Ok(topics)
}

/// `start`: `earliest`, `latest`, `committed`, `{ timestamp_ms: N }` or `{ offsets: { topic: { partition:
/// offset } } }` — exactly one.
fn parse_start(raw: &str) -> Result<KafkaStart, ConfigFieldError> {
    match raw.trim() {
        "earliest" => return Ok(KafkaStart::Earliest),
        "latest" => return Ok(KafkaStart::Latest),
        "committed" => return Ok(KafkaStart::Committed),
        s if !s.starts_with('{') => {
            return Err(field_err(
                "start",
                format!("unknown start {s:?} (earliest, latest, committed, {{ timestamp_ms }} or {{ offsets }})"),
            ))
        }
        _ => {}
    }
    let m: StartMap = serde_json::from_str(raw).map_err(|e| {
        field_err("start", format!("expected earliest, latest, committed, {{ timestamp_ms }} or {{ offsets }}: {e}"))
    })?;
    let named: Vec<&str> = [
        ("timestamp_ms", m.timestamp_ms.is_some()),
        ("offsets", m.offsets.is_some()),
        ("earliest", m.earliest.is_some()),
        ("latest", m.latest.is_some()),
        ("committed", m.committed.is_some()),
    ]
    .into_iter()
    .filter_map(|(name, set)| set.then_some(name))
    .collect();
    if named.len() != 1 {
        return Err(field_err("start", format!("name exactly one starting point, not {}", named.join(" and "))));
    }
    if let Some(ts) = m.timestamp_ms {
        if ts < 0 {
            return Err(field_err("start", format!("timestamp_ms must not be negative, got {ts}")));
        }
        return Ok(KafkaStart::Timestamp(ts));
    }
    if let Some(offsets) = m.offsets {
        let mut out = BTreeMap::new();
        for (topic, parts) in offsets {
            let mut per = BTreeMap::new();
            for (p, off) in parts {
                let partition = p.trim().parse::<i32>().ok().filter(|p| *p >= 0).ok_or_else(|| {
                    field_err("start", format!("offsets of {topic:?}: {p:?} is not a partition number"))
                })?;
                if off < 0 {
                    return Err(field_err("start", format!("offsets of {topic:?}/{partition}: {off} is negative")));
                }
                per.insert(partition, off);
            }
            out.insert(topic, per);
        }
        return Ok(KafkaStart::Offsets(out));
    }
    Ok(match named[0] {
        "earliest" => KafkaStart::Earliest,
        "latest" => KafkaStart::Latest,
        _ => KafkaStart::Committed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn base() -> Vec<(&'static str, &'static str)> {
        vec![("bootstrap_servers", "127.0.0.1:9092"), ("topics", r#"["events"]"#)]
    }

    fn with(extra: &[(&'static str, &'static str)]) -> BTreeMap<String, String> {
        let mut v = base();
        v.extend_from_slice(extra);
        m(&v)
    }

    #[test]
    fn defaults_and_every_start() {
        let c = KafkaSourceConfig::from_map(&with(&[])).unwrap();
        assert_eq!(
            c,
            KafkaSourceConfig {
                bootstrap_servers: "127.0.0.1:9092".into(),
                topics: vec!["events".into()],
                start: KafkaStart::Earliest,
                bounded: false,
                format: KafkaFormat::Raw,
                group_id: None,
                discovery_interval_ms: DEFAULT_DISCOVERY_MS,
            }
        );
        let start = |s: &'static str| KafkaSourceConfig::from_map(&with(&[("start", s)])).map(|c| c.start);
        assert_eq!(start("latest").unwrap(), KafkaStart::Latest);
        assert_eq!(start("committed").unwrap(), KafkaStart::Committed);
        assert_eq!(start(r#"{"timestamp_ms": 1700000000000}"#).unwrap(), KafkaStart::Timestamp(1_700_000_000_000));
        assert_eq!(start(r#"{"latest": true}"#).unwrap(), KafkaStart::Latest);
        let offsets = start(r#"{"offsets": {"events": {"0": 5, "3": 0}}}"#).unwrap();
        assert_eq!(offsets, KafkaStart::Offsets([("events".into(), [(0, 5), (3, 0)].into())].into()));
        let one = KafkaSourceConfig::from_map(&m(&[("bootstrap_servers", "b:1"), ("topics", "solo")])).unwrap();
        assert_eq!(one.topics, vec!["solo".to_string()]);
        assert!(KafkaSourceConfig::from_map(&with(&[("bounded", "true")])).unwrap().bounded);
    }

    #[test]
    fn bad_configs_name_the_field() {
        let err = |map: BTreeMap<String, String>| KafkaSourceConfig::from_map(&map).unwrap_err().to_string();
        let cases: Vec<(BTreeMap<String, String>, &str, &str)> = vec![
            (m(&[("topics", r#"["t"]"#)]), "bootstrap_servers", "required"),
            (m(&[("bootstrap_servers", "b:1")]), "topics", "required"),
            (with(&[("topics", "[]")]), "topics", "at least one"),
            (with(&[("topics", r#"["a b"]"#)]), "topics", "not a legal topic name"),
            (with(&[("start", "newest")]), "start", "unknown start"),
            (
                with(&[("start", r#"{"latest": true, "offsets": {"events": {"0": 1}}}"#)]),
                "start",
                "not offsets and latest",
            ),
            (with(&[("start", r#"{"offsets": {"other": {"0": 1}}}"#)]), "start", "which `topics` does not list"),
            (with(&[("start", r#"{"offsets": {"events": {"x": 1}}}"#)]), "start", "not a partition number"),
            (with(&[("start", r#"{"offsets": {"events": {"0": -1}}}"#)]), "start", "negative"),
            (with(&[("start", r#"{"timestamp_ms": -5}"#)]), "start", "negative"),
            (with(&[("bounded", "yes")]), "bounded", "true or false"),
            (with(&[("format", "protobuf")]), "format", "unknown format"),
            (with(&[("group_id", " ")]), "group_id", "empty"),
            (with(&[("discovery_interval_ms", "-1")]), "discovery_interval_ms", "non-negative"),
            (with(&[("topic", "x")]), "topic", "unknown field"),
        ];
        for (map, field, says) in cases {
            let e = err(map);
            assert!(e.contains(field) && e.contains(says), "expected {field:?} / {says:?} in {e:?}");
        }
    }
}
