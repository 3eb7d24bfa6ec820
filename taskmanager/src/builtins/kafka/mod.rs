//! Kafka: the partitions a `kafka` source reads as its splits (`partitions.rs`: which subtask reads which
//! partition, and where each stands, kept in union list state).

mod partitions;

pub use partitions::{decode_positions, encode_positions, owned, owner, PartitionPosition};
