//! Kafka: the configs of the source kind `kafka` and the sink kind `kafka-sink` (DESIGN §6), checked at
//! submission naming the field, and a small blocking client of the Kafka wire protocol (`wire`) for the requests
//! librdkafka does not expose.

pub mod avro;
mod sink;
mod source;
pub mod wire;

pub use sink::{Delivery, KafkaSinkConfig, Partitioning, SinkFormat};
pub use source::{KafkaFormat, KafkaSourceConfig, KafkaStart, Malformed, Metadata};

use crate::builtin::{field_err, ConfigFieldError};

/// Checks a topic name by Kafka's own rule; `field` names the config field in the error.
fn check_topic(field: &str, t: &str) -> Result<(), ConfigFieldError> {
    let legal = !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if legal {
        Ok(())
    } else {
        Err(field_err(field, format!("{t:?} is not a legal topic name (1–249 of a-z, A-Z, 0-9, '.', '_', '-')")))
    }
}

/// `bootstrap_servers`: required, not empty.
fn bootstrap_servers(map: &std::collections::BTreeMap<String, String>) -> Result<String, ConfigFieldError> {
    match map.get("bootstrap_servers").map(|s| s.trim()) {
        Some(s) if !s.is_empty() => Ok(s.to_string()),
        _ => Err(field_err("bootstrap_servers", "required: host:port of at least one broker")),
    }
}

/// Java's `String.hashCode` (over UTF-16 code units, wrapping), which Flink's assignment starts from.
fn java_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The subtask of `parallelism` that reads `topic`'s `partition`: Flink's `KafkaSourceEnumerator` rule, a
/// topic's partitions dealt round-robin from a subtask that depends on the topic, so partitions of several
/// topics spread evenly and a partition added later has an owner without asking anyone.
pub fn partition_owner(topic: &str, partition: i32, parallelism: u32) -> u32 {
    let p = i64::from(parallelism.max(1));
    let start = (i64::from(java_hash(topic).wrapping_mul(31)) & 0x7FFF_FFFF) % p;
    ((start + i64::from(partition)) % p) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_rule_hashes_topics_as_java_does() {
        assert_eq!(java_hash("events"), -1291329255);
        assert_eq!(java_hash("é"), 0xE9);
        assert_eq!((0..6).map(|p| partition_owner("events", p, 4)).collect::<Vec<_>>(), vec![3, 0, 1, 2, 3, 0]);
    }
}
