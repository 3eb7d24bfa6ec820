//! The configs of the source kind `kafka` and the sink kind `kafka-sink` (DESIGN §6), checked at submission
//! naming the field: the source's (`source.rs`), the sink's (`sink.rs`) and the Avro record schemas both read
//! (`avro.rs`), and the checks of topic names and broker lists both make (`broker.rs`).

pub mod avro;
mod broker;
mod sink;
mod source;

pub use sink::{Delivery, KafkaSinkConfig, Partitioning, SinkFormat, FIELDS as SINK_FIELDS};
pub use source::{KafkaFormat, KafkaSourceConfig, KafkaStart, Malformed, Metadata, FIELDS as SOURCE_FIELDS};
