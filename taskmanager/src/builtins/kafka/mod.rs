//! Kafka: the `kafka` source (`source.rs`) and the partitions it reads as its splits (`partitions.rs`: which
//! subtask reads which partition, and where each stands, kept in union list state); the `kafka-sink` (`sink.rs`)
//! and its transactional ids (`transactions.rs`: which to commit and which to fence after a restore).

mod avro;
mod json;
mod partitions;
mod sink;
mod source;
mod transactions;

pub use sink::{KafkaSink, SINK_STATE};
pub use source::{KafkaSource, STATE};
