//! Config of the Kafka sink kind `kafka-sink` (DESIGN §6): where rows go, with which guarantee, and how a row
//! becomes a record. Checked at submission, naming the field.

use super::avro::{parse_wire, AvroSchema, AvroWire};
use weir_common::job::kind::{field, field_err, ConfigField, ConfigFieldError, ConfigReader, OperatorConfig};

/// What the sink guarantees (Flink's `DeliveryGuarantee`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Every record is flushed to the brokers at each checkpoint barrier: none lost, some written twice after a
    /// failure.
    AtLeastOnce,
    /// A transaction per subtask per checkpoint, committed when the checkpoint completes: `read_committed`
    /// readers see every record once.
    ExactlyOnce,
}

/// How a row becomes a record's value (and key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkFormat {
    /// The line `file-sink` writes (without its newline); the key column's text as the key.
    Text,
    /// The row as a JSON object, as `file-sink`'s `json` lines; the key column's text as the key.
    Json,
    /// Key/value rows of bytes as they are: the `value` column as the value, the `key` column as the key (a
    /// Kafka-to-Kafka job passes records through unchanged).
    Raw,
    /// The row's columns named by the schema's fields, as an Avro record of it (a column's type must be the
    /// one the field is read as, `AvroKind::column_type`; null only in a union with null).
    Avro {
        /// The record schema, from the config's `avro_schema`.
        schema: AvroSchema,
        /// How the body is framed.
        wire: AvroWire,
    },
}

/// Which partition a record goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partitioning {
    /// By a hash of the record's key (murmur2, as the Java client: a key always lands in the same partition);
    /// records without a key are spread at random.
    KeyHash,
    /// Each subtask deals its records over the partitions in turn, whatever their keys.
    RoundRobin,
}

/// Config of the `kafka-sink`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaSinkConfig {
    /// `host:port[,host:port…]` of the brokers to bootstrap from.
    pub bootstrap_servers: String,
    /// The topic written.
    pub topic: String,
    /// At least once or exactly once.
    pub delivery: Delivery,
    /// The prefix of the transactional ids (exactly once): unique to the job, and the same across its restarts,
    /// so that a restored job can commit and abort what the one before it left open.
    pub transactional_id_prefix: Option<String>,
    /// How a row becomes a record.
    pub format: SinkFormat,
    /// Which partition a record goes to.
    pub partitioning: Partitioning,
    /// The column whose text is the record's key (Flink SQL's `key.fields`), instead of the `key` column: with
    /// key-hash partitioning, records are partitioned by this field.
    pub key_field: Option<String>,
    /// Columns written as headers too, each under its own name, its value's text (null: a header without value).
    pub headers: Vec<String>,
}

/// Fields a `kafka-sink` config may have.
pub const FIELDS: &[ConfigField] = &[
    field("bootstrap_servers", "host:port of at least one broker, comma-separated (required)"),
    field("topic", "the topic written (required)"),
    field("delivery", "at-least-once (default) or exactly-once (transactions committed with checkpoints)"),
    field(
        "transactional_id_prefix",
        "exactly-once: the prefix of the sink's transactional ids, unique to the job (required with it)",
    ),
    field("format", "text (the default), json, raw (key and value columns as bytes) or avro"),
    field("partitioning", "key-hash (default) or round-robin"),
    field("avro_schema", "avro: the record schema rows are written in (JSON)"),
    field("avro_wire", "avro: plain (default) or confluent (a schema id before each record)"),
    field("avro_schema_id", "avro, confluent: the schema id written"),
    field("key_field", "the column whose text is each record's key (default: the key column)"),
    field("headers", "columns also written as record headers, a list of names"),
];

impl KafkaSinkConfig {
    /// Reads and checks a `kafka-sink` config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, FIELDS)?;
        let bootstrap_servers = super::broker::bootstrap_servers(&r)?;
        let topic = match r.string("topic")?.as_deref().map(str::trim) {
            Some(t) => t.to_string(),
            None => return Err(field_err("topic", "required: the topic written")),
        };
        super::broker::check_topic("topic", &topic)?;
        let delivery = match r.string("delivery")?.as_deref().map(str::trim) {
            None | Some("at-least-once") => Delivery::AtLeastOnce,
            Some("exactly-once") => Delivery::ExactlyOnce,
            Some(other) => {
                return Err(field_err("delivery", format!("expected exactly-once or at-least-once, got {other:?}")))
            }
        };
        let transactional_id_prefix = r.string("transactional_id_prefix")?.map(|s| s.trim().to_string());
        match (&transactional_id_prefix, delivery) {
            (None, Delivery::ExactlyOnce) => {
                return Err(field_err(
                    "transactional_id_prefix",
                    "required with delivery: exactly-once: a prefix unique to this job and the same across its \
                     restarts (Flink's transactionalIdPrefix)",
                ))
            }
            (Some(p), _) if p.is_empty() || p.len() > 200 || p.chars().any(|c| c.is_control()) => {
                return Err(field_err("transactional_id_prefix", "must be 1–200 printable characters"))
            }
            _ => {}
        }
        let format = match r.string("format")?.as_deref().map(str::trim) {
            None | Some("text") => SinkFormat::Text,
            Some("json") => SinkFormat::Json,
            Some("raw") => SinkFormat::Raw,
            Some("avro") => {
                let Some(text) = r.json_text("avro_schema") else {
                    return Err(field_err("avro_schema", "required with format: avro: the record schema (JSON)"));
                };
                let schema = AvroSchema::parse(&text).map_err(|e| field_err("avro_schema", e.to_string()))?;
                let wire = parse_wire(r.string("avro_wire")?.as_deref(), r.string("avro_schema_id")?.as_deref())
                    .map_err(|(f, e)| field_err(f, e))?;
                SinkFormat::Avro { schema, wire }
            }
            Some(other) => {
                return Err(field_err("format", format!("unknown format {other:?} (known: text, json, raw, avro)")))
            }
        };
        if !matches!(format, SinkFormat::Avro { .. }) {
            if let Some(f) = ["avro_schema", "avro_wire", "avro_schema_id"].into_iter().find(|f| map.contains_key(*f)) {
                return Err(field_err(f, "only with format: avro"));
            }
        }
        let key_field = r.string("key_field")?.map(|s| s.trim().to_string());
        if key_field.as_deref() == Some("") {
            return Err(field_err("key_field", "must name a column"));
        }
        let headers: Vec<String> = r.nested("headers", "a list of column names")?.unwrap_or_default();
        let mut seen = std::collections::BTreeSet::new();
        if let Some(h) = headers.iter().find(|h| h.trim().is_empty() || !seen.insert(h.as_str())) {
            return Err(field_err("headers", format!("{h:?} is empty or named twice")));
        }
        let partitioning = match r.string("partitioning")?.as_deref().map(str::trim) {
            None | Some("key-hash") => Partitioning::KeyHash,
            Some("round-robin") => Partitioning::RoundRobin,
            Some(other) => {
                return Err(field_err("partitioning", format!("expected key-hash or round-robin, got {other:?}")))
            }
        };
        Ok(KafkaSinkConfig {
            bootstrap_servers,
            topic,
            delivery,
            transactional_id_prefix,
            format,
            partitioning,
            key_field,
            headers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, &str)]) -> OperatorConfig {
        pairs.iter().map(|(k, v)| (k.to_string(), weir_common::job::kind::ConfigValue::from(*v))).collect()
    }

    fn with(extra: &[(&'static str, &'static str)]) -> OperatorConfig {
        let mut v = vec![("bootstrap_servers", "127.0.0.1:9092"), ("topic", "out")];
        v.extend_from_slice(extra);
        m(&v)
    }

    #[test]
    fn defaults_and_exactly_once() {
        let c = KafkaSinkConfig::from_map(&with(&[])).unwrap();
        assert_eq!(
            c,
            KafkaSinkConfig {
                bootstrap_servers: "127.0.0.1:9092".into(),
                topic: "out".into(),
                delivery: Delivery::AtLeastOnce,
                transactional_id_prefix: None,
                format: SinkFormat::Text,
                partitioning: Partitioning::KeyHash,
                key_field: None,
                headers: Vec::new(),
            }
        );
        let c = KafkaSinkConfig::from_map(&with(&[
            ("delivery", "exactly-once"),
            ("transactional_id_prefix", "fraud-v1"),
            ("format", "json"),
            ("partitioning", "round-robin"),
        ]))
        .unwrap();
        assert_eq!(c.delivery, Delivery::ExactlyOnce);
        assert_eq!(c.transactional_id_prefix.as_deref(), Some("fraud-v1"));
        assert_eq!((c.format, c.partitioning), (SinkFormat::Json, Partitioning::RoundRobin));
        let c = KafkaSinkConfig::from_map(&with(&[
            ("format", "avro"),
            ("avro_schema", AVRO),
            ("avro_wire", "confluent"),
            ("key_field", "user"),
            ("headers", r#"["user", "n"]"#),
        ]))
        .unwrap();
        assert!(
            matches!(c.format, SinkFormat::Avro { wire: AvroWire::Confluent(None), ref schema } if schema.fields.len() == 1)
        );
        assert_eq!((c.key_field.as_deref(), c.headers.len()), (Some("user"), 2));
    }

    const AVRO: &str = r#"{"type": "record", "name": "E", "fields": [{"name": "user", "type": "string"}]}"#;

    #[test]
    fn bad_configs_name_the_field() {
        let cases: Vec<(OperatorConfig, &str, &str)> = vec![
            (m(&[("topic", "t")]), "bootstrap_servers", "required"),
            (m(&[("bootstrap_servers", "b:1")]), "topic", "required"),
            (with(&[("topic", "a/b")]), "topic", "not a legal topic name"),
            (with(&[("delivery", "exactly_once")]), "delivery", "exactly-once or at-least-once"),
            (with(&[("delivery", "exactly-once")]), "transactional_id_prefix", "required with delivery"),
            (with(&[("transactional_id_prefix", " ")]), "transactional_id_prefix", "printable"),
            (with(&[("format", "xml")]), "format", "unknown format"),
            (with(&[("format", "avro")]), "avro_schema", "required"),
            (with(&[("format", "avro"), ("avro_schema", "[]")]), "avro_schema", "record"),
            (with(&[("avro_schema", AVRO)]), "avro_schema", "only with format: avro"),
            (with(&[("format", "avro"), ("avro_schema", AVRO), ("avro_wire", "x")]), "avro_wire", "plain or confluent"),
            (with(&[("key_field", "")]), "key_field", "must name"),
            (with(&[("headers", "user")]), "headers", "a list"),
            (with(&[("headers", r#"["a", "a"]"#)]), "headers", "twice"),
            (with(&[("partitioning", "random")]), "partitioning", "key-hash or round-robin"),
            (with(&[("topics", "[out]")]), "topics", "unknown field"),
        ];
        for (map, field, says) in cases {
            let e = KafkaSinkConfig::from_map(&map).unwrap_err();
            assert!(e.field == field && e.message.contains(says), "expected {field:?} / {says:?} in {e:?}");
        }
    }
}
