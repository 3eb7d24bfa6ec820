//! Kafka: the `kafka` source (`source.rs`), and the partitions it reads as its splits (`partitions.rs`: which
//! subtask reads which partition, and where each stands, kept in union list state).

mod partitions;
mod source;

pub use source::{KafkaSource, STATE};
