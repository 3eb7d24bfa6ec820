//! Config of the Kafka source kind `kafka` (DESIGN §6): which topics, where a partition without a restored
//! offset starts, bounded or not, and how a record becomes a row. Checked at submission, naming the field.

use super::avro::{parse_wire, AvroSchema, AvroWire};
use serde::Deserialize;
use std::collections::BTreeMap;
use weir_common::job::kind::{
    field, field_err, ConfigField, ConfigFieldError, ConfigReader, ConfigValue, OperatorConfig,
};
use weir_common::job::schema::Column;

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
    /// The value is a JSON object: the row is the record's key (`key`, bytes) and these columns, read from the
    /// object's fields of the same names (a field that is absent or null is null; in a column that is not
    /// nullable that makes the record malformed).
    Json {
        /// The columns, from the config's `schema`.
        columns: Vec<Column>,
        /// What becomes of a record that is not such an object.
        malformed: Malformed,
    },
    /// The value is an Avro record of this schema (its body, or Confluent's wire format): the row is the
    /// record's key (`key`, bytes) and the schema's fields, as columns of the same names.
    Avro {
        /// The record schema, from the config's `avro_schema`.
        schema: AvroSchema,
        /// How the body is framed.
        wire: AvroWire,
        /// What becomes of a record that is not such a record.
        malformed: Malformed,
    },
}

impl KafkaFormat {
    /// What becomes of a malformed record (`None`: raw bytes are never malformed).
    pub fn malformed(&self) -> Option<&Malformed> {
        match self {
            KafkaFormat::Raw => None,
            KafkaFormat::Json { malformed, .. } | KafkaFormat::Avro { malformed, .. } => Some(malformed),
        }
    }
}

/// A fact about a Kafka record besides its key and value, as a column of the same name (Flink SQL's metadata
/// columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metadata {
    /// `topic`: its topic (`utf8`).
    Topic,
    /// `partition`: its partition (`int32`).
    Partition,
    /// `offset`: its offset (`int64`).
    Offset,
    /// `timestamp`: its Kafka timestamp (`timestamp_ms`, null where the record has none).
    Timestamp,
    /// `headers`: its headers as a JSON object of strings (`utf8`; a value that is not UTF-8 is replaced as
    /// lossy text, a repeated name keeps its last value).
    Headers,
}

impl Metadata {
    /// Every kind, by name.
    const ALL: [(&'static str, Metadata); 5] = [
        ("topic", Metadata::Topic),
        ("partition", Metadata::Partition),
        ("offset", Metadata::Offset),
        ("timestamp", Metadata::Timestamp),
        ("headers", Metadata::Headers),
    ];

    /// Its column.
    pub fn column(self) -> Column {
        match self {
            Metadata::Topic => Column::new("topic", "utf8", false),
            Metadata::Partition => Column::new("partition", "int32", false),
            Metadata::Offset => Column::new("offset", "int64", false),
            Metadata::Timestamp => Column::new("timestamp", "timestamp_ms", true),
            Metadata::Headers => Column::new("headers", "utf8", false),
        }
    }
}

/// What a source does with a record its format cannot read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// The job fails, naming the partition, the offset and what is wrong.
    Fail,
    /// The record (key and value as they were) goes to this topic, and the job goes on.
    DeadLetter(String),
}

/// The column types a JSON schema may use.
const JSON_TYPES: &[&str] =
    &["bool", "int32", "int64", "uint32", "uint64", "float32", "float64", "utf8", "timestamp_ms"];

impl KafkaSourceConfig {
    /// The columns the source emits (besides the runtime's).
    pub fn output_columns(&self) -> Vec<Column> {
        let mut all = match &self.format {
            KafkaFormat::Raw => weir_common::job::schema::key_value("binary"),
            KafkaFormat::Json { columns, .. } => {
                let mut all = vec![weir_common::job::schema::key_column()];
                all.extend(columns.iter().cloned());
                all
            }
            KafkaFormat::Avro { schema, .. } => {
                let mut all = vec![weir_common::job::schema::key_column()];
                all.extend(schema.columns());
                all
            }
        };
        all.extend(self.metadata.iter().map(|m| m.column()));
        all
    }
}

/// Config of the `kafka` source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaSourceConfig {
    /// `host:port[,host:port…]` of the brokers to bootstrap from.
    pub bootstrap_servers: String,
    /// The topics read (empty when `topic_pattern` names them instead).
    pub topics: Vec<String>,
    /// A regular expression the whole name of every topic read matches (Flink's `setTopicPattern`): topics
    /// created later are read too, once discovery finds them.
    pub topic_pattern: Option<String>,
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
    /// The metadata columns, after the format's.
    pub metadata: Vec<Metadata>,
    /// The column whose value is a record's event time (an `int64` of ms since the epoch or a `timestamp_ms`,
    /// not nullable); `None`: the record's Kafka timestamp.
    pub timestamp_field: Option<String>,
}

/// Fields a `kafka` source config may have.
pub const FIELDS: &[ConfigField] = &[
    field("bootstrap_servers", "host:port of at least one broker, comma-separated (required)"),
    field("topics", "the topics read, a list of names (this or topic_pattern)"),
    field("topic_pattern", "a regular expression: every topic matching it, also those created later"),
    field("start", "where a partition without a restored offset starts: earliest (default), latest, committed, { timestamp_ms } or { offsets }"),
    field("bounded", "true: stop at the end offsets the partitions had at the start (default false)"),
    field("format", "raw (key and value as bytes, the default), json or avro"),
    field("schema", "json: the columns read from each object, [{ name, type, nullable }]"),
    field("on_malformed", "fail (default) or dead-letter: what happens to a record that does not parse"),
    field("dead_letter_topic", "where on_malformed: dead-letter sends records that do not parse"),
    field("avro_schema", "avro: the writer's record schema (JSON)"),
    field("avro_wire", "avro: plain (default) or confluent (a schema id before each record)"),
    field("avro_schema_id", "avro, confluent: the schema id expected"),
    field("group_id", "the consumer group whose committed offsets start: committed reads (default: none)"),
    field("discovery_interval_ms", "how often new partitions and topics are looked for, ms (default 30000; 0: never)"),
    field("metadata", "record metadata added as columns, a list of: topic, partition, offset, timestamp, headers"),
    field("timestamp_field", "the column whose value is each row's event time (default: the record's timestamp)"),
];

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
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, FIELDS)?;
        let bootstrap_servers = super::broker::bootstrap_servers(&r)?;
        let (topics, topic_pattern) = match (r.has("topics"), r.string("topic_pattern")?) {
            (true, Some(_)) => return Err(field_err("topic_pattern", "name topics or a topic_pattern, not both")),
            (false, Some(p)) => {
                regex::Regex::new(&p)
                    .map_err(|e| field_err("topic_pattern", format!("not a regular expression: {e}")))?;
                (Vec::new(), Some(p))
            }
            (_, None) => (parse_topics(&r)?, None),
        };
        let start = parse_start(&r)?;
        let bounded = r.bool("bounded")?.unwrap_or(false);
        let format = parse_format(&r)?;
        let discovery_interval_ms = r.u64("discovery_interval_ms")?.unwrap_or(DEFAULT_DISCOVERY_MS);
        let group_id = r.string("group_id")?.map(|s| s.trim().to_string());
        if group_id.as_deref() == Some("") {
            return Err(field_err("group_id", "must not be empty"));
        }
        if let KafkaStart::Offsets(offsets) = &start {
            if let Some(t) = offsets.keys().find(|t| !topics.contains(t)) {
                return Err(field_err("start", format!("offsets name topic {t:?}, which `topics` does not list")));
            }
        }
        let metadata = parse_metadata(r.nested("metadata", "a list of names")?)?;
        let mut cfg = KafkaSourceConfig {
            bootstrap_servers,
            topics,
            topic_pattern,
            start,
            bounded,
            format,
            group_id,
            discovery_interval_ms,
            metadata,
            timestamp_field: None,
        };
        let columns = cfg.output_columns();
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = columns.iter().find(|c| !seen.insert(c.name.as_str())) {
            return Err(field_err("metadata", format!("column {:?} is also a column of the format", dup.name)));
        }
        if let Some(name) = r.string("timestamp_field")?.as_deref().map(str::trim) {
            match columns.iter().find(|c| c.name == name) {
                Some(c) if matches!(c.data_type.as_str(), "int64" | "timestamp_ms") && !c.nullable => {}
                Some(c) => {
                    return Err(field_err(
                        "timestamp_field",
                        format!(
                            "column {name:?} is {}{}: event time needs a non-nullable int64 (ms) or timestamp_ms",
                            if c.nullable { "nullable " } else { "" },
                            c.data_type
                        ),
                    ))
                }
                None => {
                    return Err(field_err(
                        "timestamp_field",
                        format!(
                            "no column {name:?} (the row has {})",
                            columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
                        ),
                    ))
                }
            }
            cfg.timestamp_field = Some(name.to_string());
        }
        Ok(cfg)
    }
}

/// `format` with `schema`, `on_malformed` and `dead_letter_topic`.
fn parse_format(r: &ConfigReader) -> Result<KafkaFormat, ConfigFieldError> {
    let format = r.string("format")?;
    let format = format.as_deref().map(str::trim).unwrap_or("raw");
    let only = |fields: &[&'static str], with: &str| match fields.iter().find(|f| r.has(f)) {
        Some(f) => Err(field_err(f, format!("only with {with}"))),
        None => Ok(()),
    };
    match format {
        "raw" => {
            only(&["on_malformed", "dead_letter_topic"], "format: json or avro")?;
            only(&["schema"], "format: json")?;
            only(&["avro_schema", "avro_wire", "avro_schema_id"], "format: avro")?;
            return Ok(KafkaFormat::Raw);
        }
        "json" => only(&["avro_schema", "avro_wire", "avro_schema_id"], "format: avro")?,
        "avro" => {
            only(&["schema"], "format: json (an Avro schema is avro_schema)")?;
            let Some(text) = r.json_text("avro_schema") else {
                return Err(field_err("avro_schema", "required with format: avro: the record schema (JSON)"));
            };
            let schema = AvroSchema::parse(&text).map_err(|e| field_err("avro_schema", e.to_string()))?;
            if schema.fields.iter().any(|f| f.name == "key") {
                return Err(field_err("avro_schema", "field \"key\" is the record's key: name the field otherwise"));
            }
            let wire = parse_wire(r.string("avro_wire")?.as_deref(), r.string("avro_schema_id")?.as_deref())
                .map_err(|(f, e)| field_err(f, e))?;
            return Ok(KafkaFormat::Avro { schema, wire, malformed: parse_malformed(r)? });
        }
        other => return Err(field_err("format", format!("unknown format {other:?} (known: raw, json, avro)"))),
    }
    let Some(columns) = r.nested::<Vec<Column>>("schema", "a list of { name, type, nullable }")? else {
        return Err(field_err("schema", "required with format: json: the columns, [{ name, type, nullable }]"));
    };
    if columns.is_empty() {
        return Err(field_err("schema", "must name at least one column"));
    }
    weir_common::job::schema::validate_columns(&columns).map_err(|e| field_err("schema", e.to_string()))?;
    for c in &columns {
        if c.name == "key" {
            return Err(field_err("schema", "column \"key\" is the record's key: name the field otherwise"));
        }
        if !JSON_TYPES.contains(&c.data_type.as_str()) {
            let known = JSON_TYPES.join(", ");
            return Err(field_err(
                "schema",
                format!("column {:?}: a JSON field cannot be read as {} (known: {known})", c.name, c.data_type),
            ));
        }
    }
    Ok(KafkaFormat::Json { columns, malformed: parse_malformed(r)? })
}

/// `metadata`: a list of the metadata columns wanted.
fn parse_metadata(names: Option<Vec<String>>) -> Result<Vec<Metadata>, ConfigFieldError> {
    let Some(names) = names else { return Ok(Vec::new()) };
    let mut out = Vec::with_capacity(names.len());
    for n in &names {
        match Metadata::ALL.iter().find(|(name, _)| name == n) {
            Some((_, m)) if !out.contains(m) => out.push(*m),
            Some(_) => return Err(field_err("metadata", format!("{n:?} is named twice"))),
            None => {
                let known: Vec<&str> = Metadata::ALL.iter().map(|(n, _)| *n).collect();
                return Err(field_err("metadata", format!("unknown metadata {n:?} (known: {})", known.join(", "))));
            }
        }
    }
    Ok(out)
}

/// `on_malformed` with `dead_letter_topic`.
fn parse_malformed(r: &ConfigReader) -> Result<Malformed, ConfigFieldError> {
    let malformed = match (r.string("on_malformed")?.as_deref().map(str::trim), r.string("dead_letter_topic")?) {
        (None | Some("fail"), None) => Malformed::Fail,
        (Some("dead-letter"), Some(t)) => {
            super::broker::check_topic("dead_letter_topic", t.trim())?;
            Malformed::DeadLetter(t.trim().to_string())
        }
        (Some("dead-letter"), None) => {
            return Err(field_err("dead_letter_topic", "required with on_malformed: dead-letter"))
        }
        (None | Some("fail"), Some(_)) => {
            return Err(field_err("dead_letter_topic", "only with on_malformed: dead-letter"))
        }
        (Some(other), _) => {
            return Err(field_err("on_malformed", format!("expected fail or dead-letter, got {other:?}")))
        }
    };
    Ok(malformed)
}

/// `topics`: a list of names, or one name.
fn parse_topics(r: &ConfigReader) -> Result<Vec<String>, ConfigFieldError> {
    let topics: Vec<String> = match r.value("topics") {
        None => return Err(field_err("topics", "required: the topics to read, a list of names (or a topic_pattern)")),
        // One name, as text: `[` opens a list written as JSON text.
        Some(ConfigValue::String(raw)) if !raw.trim_start().starts_with('[') => vec![raw.trim().to_string()],
        Some(_) => r.nested("topics", "a list of topic names")?.unwrap_or_default(),
    };
    if topics.is_empty() {
        return Err(field_err("topics", "must name at least one topic"));
    }
    for t in &topics {
        super::broker::check_topic("topics", t)?;
    }
    Ok(topics)
}

/// `start`: `earliest`, `latest`, `committed`, `{ timestamp_ms: N }` or `{ offsets: { topic: { partition:
/// offset } } }` — exactly one.
fn parse_start(r: &ConfigReader) -> Result<KafkaStart, ConfigFieldError> {
    if let Some(ConfigValue::String(raw)) = r.value("start") {
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
    }
    let Some(m) = r.nested::<StartMap>("start", "earliest, latest, committed, { timestamp_ms } or { offsets }")? else {
        return Ok(KafkaStart::Earliest);
    };
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

    fn m(pairs: &[(&str, &str)]) -> OperatorConfig {
        pairs.iter().map(|(k, v)| (k.to_string(), weir_common::job::kind::ConfigValue::from(*v))).collect()
    }

    fn base() -> Vec<(&'static str, &'static str)> {
        vec![("bootstrap_servers", "127.0.0.1:9092"), ("topics", r#"["events"]"#)]
    }

    fn with(extra: &[(&'static str, &'static str)]) -> OperatorConfig {
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
                topic_pattern: None,
                start: KafkaStart::Earliest,
                bounded: false,
                format: KafkaFormat::Raw,
                group_id: None,
                discovery_interval_ms: DEFAULT_DISCOVERY_MS,
                metadata: Vec::new(),
                timestamp_field: None,
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
        let j = KafkaSourceConfig::from_map(&with(&[
            ("format", "json"),
            ("schema", r#"[{"name": "user", "type": "utf8"}, {"name": "amount", "type": "int64", "nullable": true}]"#),
            ("on_malformed", "dead-letter"),
            ("dead_letter_topic", "events-dlq"),
        ]))
        .unwrap();
        let names: Vec<String> = j.output_columns().into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["key", "user", "amount"]);
        assert!(
            matches!(j.format, KafkaFormat::Json { malformed: Malformed::DeadLetter(ref t), .. } if t == "events-dlq")
        );
        let a = KafkaSourceConfig::from_map(&with(&[
            ("format", "avro"),
            ("avro_schema", AVRO),
            ("avro_wire", "confluent"),
            ("avro_schema_id", "7"),
            ("metadata", r#"["partition", "offset", "headers", "timestamp", "topic"]"#),
            ("timestamp_field", "at"),
        ]))
        .unwrap();
        let cols: Vec<(String, String)> = a.output_columns().into_iter().map(|c| (c.name, c.data_type)).collect();
        let want = [
            ("key", "binary"),
            ("user", "utf8"),
            ("at", "int64"),
            ("partition", "int32"),
            ("offset", "int64"),
            ("headers", "utf8"),
            ("timestamp", "timestamp_ms"),
            ("topic", "utf8"),
        ];
        assert_eq!(cols, want.map(|(n, t)| (n.to_string(), t.to_string())));
        assert!(matches!(a.format, KafkaFormat::Avro { wire: AvroWire::Confluent(Some(7)), .. }));
        assert_eq!(a.timestamp_field.as_deref(), Some("at"));
        let p =
            KafkaSourceConfig::from_map(&m(&[("bootstrap_servers", "b:1"), ("topic_pattern", "events-.*")])).unwrap();
        assert_eq!((p.topics.len(), p.topic_pattern.as_deref()), (0, Some("events-.*")));
    }

    const AVRO: &str = r#"{"type": "record", "name": "E", "fields": [{"name": "user", "type": "string"}, {"name": "at", "type": "long"}]}"#;

    #[test]
    fn bad_configs_name_the_field() {
        let err = |map: OperatorConfig| KafkaSourceConfig::from_map(&map).unwrap_err().to_string();
        let cases: Vec<(OperatorConfig, &str, &str)> = vec![
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
            (with(&[("format", "json")]), "schema", "required with format: json"),
            (with(&[("schema", r#"[{"name": "a", "type": "int64"}]"#)]), "schema", "only with format: json"),
            (
                with(&[("format", "json"), ("schema", r#"[{"name": "a", "type": "binary"}]"#)]),
                "schema",
                "cannot be read",
            ),
            (with(&[("format", "json"), ("schema", r#"[{"name": "key", "type": "utf8"}]"#)]), "schema", "record's key"),
            (with(&[("format", "json"), ("schema", r#"[{"name": "a"}]"#)]), "schema", "expected a list"),
            (
                with(&[
                    ("format", "json"),
                    ("schema", r#"[{"name": "a", "type": "utf8"}]"#),
                    ("on_malformed", "dead-letter"),
                ]),
                "dead_letter_topic",
                "required",
            ),
            (
                with(&[("format", "json"), ("schema", r#"[{"name": "a", "type": "utf8"}]"#), ("on_malformed", "skip")]),
                "on_malformed",
                "fail or dead-letter",
            ),
            (with(&[("format", "avro")]), "avro_schema", "required with format: avro"),
            (
                with(&[("format", "avro"), ("avro_schema", r#"{"type": "map", "values": "int"}"#)]),
                "avro_schema",
                "record",
            ),
            (with(&[("format", "avro"), ("avro_schema", AVRO), ("avro_wire", "registry")]), "avro_wire", "confluent"),
            (
                with(&[("format", "avro"), ("avro_schema", AVRO), ("avro_schema_id", "3")]),
                "avro_schema_id",
                "only with",
            ),
            (with(&[("avro_schema", AVRO)]), "avro_schema", "only with format: avro"),
            (with(&[("on_malformed", "fail")]), "on_malformed", "only with format: json or avro"),
            (with(&[("metadata", r#"["offset", "lag"]"#)]), "metadata", "unknown metadata \"lag\""),
            (with(&[("metadata", r#"["offset", "offset"]"#)]), "metadata", "twice"),
            (with(&[("metadata", "offset")]), "metadata", "a list"),
            (
                with(&[
                    ("format", "avro"),
                    ("avro_schema", AVRO.replace("user", "offset").leak()),
                    ("metadata", r#"["offset"]"#),
                ]),
                "metadata",
                "also a column",
            ),
            (with(&[("timestamp_field", "nope")]), "timestamp_field", "no column \"nope\""),
            (
                with(&[("format", "avro"), ("avro_schema", AVRO), ("timestamp_field", "user")]),
                "timestamp_field",
                "utf8",
            ),
            (
                with(&[("metadata", r#"["timestamp"]"#), ("timestamp_field", "timestamp")]),
                "timestamp_field",
                "nullable",
            ),
            (with(&[("group_id", " ")]), "group_id", "empty"),
            (with(&[("discovery_interval_ms", "-1")]), "discovery_interval_ms", "non-negative"),
            (with(&[("topic", "x")]), "topic", "unknown field"),
            (with(&[("topic_pattern", "e.*")]), "topic_pattern", "not both"),
            (m(&[("bootstrap_servers", "b:1"), ("topic_pattern", "(")]), "topic_pattern", "not a regular expression"),
        ];
        for (map, field, says) in cases {
            let e = err(map);
            assert!(e.contains(field) && e.contains(says), "expected {field:?} / {says:?} in {e:?}");
        }
    }
}
