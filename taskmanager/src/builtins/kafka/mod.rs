//! Kafka: the `kafka` source (`source.rs`) and the partitions it reads as its splits (`partitions.rs`: which
//! subtask reads which partition, and where each stands, kept in union list state); the `kafka-sink` (`sink.rs`)
//! and its transactional ids (`transactions.rs`: which to commit and which to fence after a restore).

mod avro;
pub mod config;
mod json;
mod partitions;
mod sink;
mod source;
mod transactions;
pub mod wire;

pub use partitions::owner as partition_owner;
pub use sink::{KafkaSink, SINK_STATE};
pub use source::{KafkaSource, STATE};

use super::declare::*;
use config::{KafkaSinkConfig, KafkaSourceConfig, SinkFormat};

/// The `kafka` kind: a Kafka topic's partitions as splits, read exactly once.
pub struct KafkaKind;

impl Kind for KafkaKind {
    type Config = KafkaSourceConfig;

    fn info(&self) -> KindInfo {
        builtin_info(
            "kafka",
            Role::Source,
            false,
            "A Kafka topic's partitions as splits, read exactly once",
            config::SOURCE_FIELDS,
        )
        .with_states(&[("offsets", StateClass::Union, "(String, i32, i64, i64)")])
        .with_output(OutputSchema::FromConfig)
    }

    fn signature(&self) -> Option<StateSignature> {
        // Every partition's topic, number, next offset and end (−1: none), given whole to every subtask.
        Some(StateSignature::unkeyed().union::<(String, i32, i64, i64)>(STATE))
    }

    fn config(&self, config: &OperatorConfig) -> Result<KafkaSourceConfig, ConfigFieldError> {
        KafkaSourceConfig::from_map(config)
    }

    fn output(&self, config: &KafkaSourceConfig, _: &[Vec<Column>]) -> Option<Result<Vec<Column>, ConfigFieldError>> {
        Some(Ok(config.output_columns()))
    }

    fn build(&self, config: KafkaSourceConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Source(Box::new(KafkaSource::new(config))))
    }
}

/// The `kafka-sink` kind: rows to a Kafka topic, at least or exactly once.
pub struct KafkaSinkKind;

impl Kind for KafkaSinkKind {
    type Config = KafkaSinkConfig;

    fn info(&self) -> KindInfo {
        builtin_info(
            "kafka-sink",
            Role::Sink,
            false,
            "Rows to a Kafka topic, at least or exactly once",
            config::SINK_FIELDS,
        )
        .with_states(&[("kafka-sink-transactions", StateClass::Union, "String")])
    }

    fn signature(&self) -> Option<StateSignature> {
        Some(StateSignature::unkeyed().union::<String>(SINK_STATE))
    }

    fn config(&self, config: &OperatorConfig) -> Result<KafkaSinkConfig, ConfigFieldError> {
        KafkaSinkConfig::from_map(config)
    }

    fn check_input(&self, config: &KafkaSinkConfig, input: &[Column]) -> Result<(), ConfigFieldError> {
        use weir_common::job::kind::{field_err, input_column};
        if let Some(k) = &config.key_field {
            input_column(input, "key_field", k, &[])?;
        }
        for h in &config.headers {
            input_column(input, "headers", h, &[])?;
        }
        if let SinkFormat::Avro { schema, .. } = &config.format {
            for f in &schema.fields {
                input_column(input, "avro_schema", &f.name, &[f.kind.column_type()])
                    .map_err(|e| field_err("avro_schema", format!("field {:?}: {}", f.name, e.message)))?;
            }
        }
        Ok(())
    }

    fn build(&self, config: KafkaSinkConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Operator(Box::new(KafkaSink::new(config))))
    }
}
