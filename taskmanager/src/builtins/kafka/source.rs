//! The `kafka` source: each subtask reads the partitions it owns ([`owner`]) with a consumer that is assigned
//! them (never a group member: no rebalance decides who reads what), one split per partition, so each
//! partition's records drive a watermark of their own. Where each partition stands is union list state taken at
//! the barrier; a restore seeks to exactly the next record. A bounded source stops every partition at the end
//! it had when first read (kept in the state, so a restore stops at the same place).
//!
//! The partitions are those of the topics when the subtask starts; partitions added while it runs are not read
//! until the job restarts (discovery is not built yet). Offsets go back to the consumer group when a checkpoint
//! completes, for monitoring only.

use super::partitions::{decode_positions, encode_position, owned, owner, PartitionPosition};
use crate::api::batch::{key_value_schema, ValueType};
use crate::api::operator::{InitContext, OperatorError, SnapshotContext, Source, SourceOutput, SourceStatus};
use arrow_array::builder::{BinaryBuilder, TimestampMillisecondBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use std::sync::Arc;
use std::time::Duration;
use weir_common::ids::CheckpointId;
use weir_common::kafka::{KafkaSourceConfig, KafkaStart};

/// Name of the union list state of partition positions.
pub const STATE: &str = "offsets";

/// How long a metadata or offset request may take before the source gives up with an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an idle poll asks the task to wait.
const IDLE: Duration = Duration::from_millis(5);

/// One partition this subtask reads.
struct Part {
    position: PartitionPosition,
    done: bool,
}

/// The `kafka` source.
pub struct KafkaSource {
    cfg: KafkaSourceConfig,
    uid: String,
    consumer: Option<BaseConsumer>,
    parts: Vec<Part>,
    /// The poll's rows, kept between polls for their capacity.
    keys: BinaryBuilder,
    values: BinaryBuilder,
    times: TimestampMillisecondBuilder,
}

impl KafkaSource {
    /// A source with the given config.
    pub fn new(cfg: KafkaSourceConfig) -> Self {
        KafkaSource {
            cfg,
            uid: String::new(),
            consumer: None,
            parts: Vec::new(),
            keys: BinaryBuilder::new(),
            values: BinaryBuilder::new(),
            times: TimestampMillisecondBuilder::new(),
        }
    }

    fn err(&self, what: impl std::fmt::Display) -> OperatorError {
        OperatorError::Other(format!("kafka source {:?} ({}): {what}", self.uid, self.cfg.bootstrap_servers))
    }

    /// Where a partition no state names starts, and its end now (its high watermark).
    fn start_of(&self, consumer: &BaseConsumer, topic: &str, partition: i32) -> Result<(i64, i64), OperatorError> {
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, REQUEST_TIMEOUT)
            .map_err(|e| self.err(format!("offsets of {topic}/{partition}: {e}")))?;
        let at = |offset: Offset| match offset {
            Offset::Offset(n) if n >= 0 => Some(n),
            _ => None,
        };
        let next = match &self.cfg.start {
            KafkaStart::Earliest => low,
            KafkaStart::Latest => high,
            KafkaStart::Offsets(offsets) => {
                offsets.get(topic).and_then(|p| p.get(&partition)).copied().unwrap_or(low).clamp(low, high)
            }
            KafkaStart::Committed => {
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition(topic, partition);
                let committed = consumer
                    .committed_offsets(tpl, REQUEST_TIMEOUT)
                    .map_err(|e| self.err(format!("committed offset of {topic}/{partition}: {e}")))?;
                committed.find_partition(topic, partition).and_then(|e| at(e.offset())).unwrap_or(low)
            }
            KafkaStart::Timestamp(ts) => {
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition_offset(topic, partition, Offset::Offset(*ts))
                    .map_err(|e| self.err(format!("{topic}/{partition}: {e}")))?;
                let found = consumer
                    .offsets_for_times(tpl, REQUEST_TIMEOUT)
                    .map_err(|e| self.err(format!("offset of {topic}/{partition} at {ts}: {e}")))?;
                found.find_partition(topic, partition).and_then(|e| at(e.offset())).unwrap_or(high)
            }
        };
        Ok((next, high))
    }
}

impl Source for KafkaSource {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        self.uid = ctx.info.uid.clone();
        let (subtask, parallelism) = (ctx.info.subtask.0, ctx.info.parallelism);
        let list = ctx.operator_state.union_list_state(STATE)?;
        let restored = owned(decode_positions(list, &self.uid)?, subtask, parallelism);
        let group = self.cfg.group_id.clone().unwrap_or_else(|| format!("weir-{}", self.uid));
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.cfg.bootstrap_servers)
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .create()
            .map_err(|e| self.err(format!("a consumer: {e}")))?;
        let mut parts = Vec::new();
        for topic in &self.cfg.topics {
            let md = consumer
                .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
                .map_err(|e| self.err(format!("metadata of topic {topic:?}: {e}")))?;
            let partitions = match md.topics().iter().find(|t| t.name() == topic) {
                Some(t) if t.error().is_none() && !t.partitions().is_empty() => t.partitions().len() as i32,
                _ => return Err(self.err(format!("topic {topic:?} does not exist"))),
            };
            for partition in (0..partitions).filter(|&p| owner(topic, p, parallelism) == subtask) {
                let position = match restored.iter().find(|r| &r.topic == topic && r.partition == partition) {
                    Some(r) => r.clone(),
                    None => {
                        let (next, high) = self.start_of(&consumer, topic, partition)?;
                        let end = self.cfg.bounded.then_some(high.max(next));
                        PartitionPosition { topic: topic.clone(), partition, next, end }
                    }
                };
                let done = position.end.is_some_and(|end| position.next >= end);
                parts.push(Part { position, done });
            }
        }
        let mut tpl = TopicPartitionList::new();
        for p in parts.iter().filter(|p| !p.done) {
            tpl.add_partition_offset(&p.position.topic, p.position.partition, Offset::Offset(p.position.next))
                .map_err(|e| self.err(e))?;
        }
        consumer.assign(&tpl).map_err(|e| self.err(format!("assigning partitions: {e}")))?;
        self.consumer = Some(consumer);
        self.parts = parts;
        Ok(())
    }

    fn splits(&self) -> u32 {
        self.parts.len() as u32
    }

    fn poll(&mut self, out: &mut SourceOutput, max: usize) -> Result<SourceStatus, OperatorError> {
        let Some(consumer) = self.consumer.as_ref() else {
            return Err(OperatorError::Other("kafka source polled before initialize_state".into()));
        };
        let mut runs: Vec<(u32, u32)> = Vec::new();
        let mut finished = Vec::new();
        let mut rows = 0;
        while rows < max {
            let Some(message) = consumer.poll(Duration::ZERO) else { break };
            let m = message.map_err(|e| self.err(format!("reading: {e}")))?;
            // Records come in runs of one partition: the previous record's is checked first.
            let is = |p: &Part| p.position.partition == m.partition() && p.position.topic == m.topic();
            let split = match runs.last() {
                Some(&(s, _)) if is(&self.parts[s as usize]) => s as usize,
                _ => match self.parts.iter().position(is) {
                    Some(s) => s,
                    None => continue,
                },
            };
            let part = &mut self.parts[split];
            // After a seek the client may still hand over records it had fetched: they were read already.
            if part.done || m.offset() < part.position.next {
                continue;
            }
            if part.position.end.is_some_and(|end| m.offset() >= end) {
                part.done = true;
                finished.push(split as u32);
                continue;
            }
            self.keys.append_value(m.key().unwrap_or_default());
            match m.payload() {
                Some(v) => self.values.append_value(v),
                None => self.values.append_null(),
            }
            self.times.append_option(m.timestamp().to_millis());
            part.position.next = m.offset() + 1;
            if part.position.end.is_some_and(|end| part.position.next >= end) {
                part.done = true;
                finished.push(split as u32);
            }
            match runs.last_mut() {
                Some((s, n)) if *s == split as u32 => *n += 1,
                _ => runs.push((split as u32, 1)),
            }
            rows += 1;
        }
        if rows > 0 {
            let columns: Vec<ArrayRef> =
                vec![Arc::new(self.keys.finish()), Arc::new(self.values.finish()), Arc::new(self.times.finish())];
            let batch = RecordBatch::try_new(key_value_schema(ValueType::Bytes), columns)
                .map_err(|e| OperatorError::Other(format!("kafka source batch: {e}")))?;
            out.push_batch_of_splits(batch, runs)?;
        }
        for split in finished {
            out.finish_split(split);
        }
        if self.cfg.bounded && self.parts.iter().all(|p| p.done) {
            return Ok(SourceStatus::Finished);
        }
        Ok(if rows > 0 { SourceStatus::More } else { SourceStatus::Idle(IDLE) })
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        let list = ctx.operator_state.union_list_state(STATE)?;
        list.clear();
        list.extend(self.parts.iter().map(|p| encode_position(&p.position)));
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, _id: CheckpointId) -> Result<(), OperatorError> {
        // Monitoring only (lag in the consumer group's tools): the checkpoint, not the group, is the position.
        let Some(consumer) = self.consumer.as_ref() else { return Ok(()) };
        let mut tpl = TopicPartitionList::new();
        for p in &self.parts {
            if tpl
                .add_partition_offset(&p.position.topic, p.position.partition, Offset::Offset(p.position.next))
                .is_err()
            {
                return Ok(());
            }
        }
        if let Err(e) = consumer.commit(&tpl, CommitMode::Async) {
            tracing::debug!(uid = %self.uid, error = %e, "committing offsets to the consumer group failed");
        }
        Ok(())
    }
}
