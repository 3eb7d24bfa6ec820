//! The `kafka` source: each subtask reads the partitions it owns ([`owner`]) with a consumer that is assigned
//! them (never a group member: no rebalance decides who reads what), one split per partition, so each
//! partition's records drive a watermark of their own. Where each partition stands is union list state taken at
//! the barrier; a restore seeks to exactly the next record. A bounded source stops every partition at the end
//! it had when first read (kept in the state, so a restore stops at the same place).
//!
//! Topics are named, or matched by a pattern. An unbounded source looks for new partitions (and, with a pattern,
//! new topics) every `discovery_interval_ms`: those it owns become new splits, read from their earliest record,
//! as Flink's enumerator does. Offsets go back to the consumer group when a checkpoint completes, for monitoring
//! only.
//!
//! `format: raw` gives each record's key and value as bytes; `format: json` reads the value as a JSON object of
//! the declared columns (`json.rs`), `format: avro` as an Avro record of the given schema (`avro.rs`), and a
//! record that is neither fails the job or goes to a dead-letter topic (written at least once: flushed at every
//! checkpoint), counted in `weir_kafka_malformed_records_total`. The metadata columns asked for (topic,
//! partition, offset, timestamp, headers) follow the format's; event time is the Kafka timestamp, or the
//! `timestamp_field` column's value.

use super::avro::AvroRows;
use super::json::{arrow_type, Decoded, JsonRows};
use super::partitions::{decode_positions, encode_position, owned, unread, PartitionPosition};
use super::sink::SinkContext;
use crate::api::batch::{event_time_field, KEY, VALUE};
use crate::api::operator::{InitContext, OperatorError, SnapshotContext, Source, SourceOutput, SourceStatus};
use crate::builtins::kafka::config::{KafkaFormat, KafkaSourceConfig, KafkaStart, Malformed, Metadata};
use crate::builtins::text::push_json_string;
use arrow_array::builder::{BinaryBuilder, Int32Builder, Int64Builder, StringBuilder, TimestampMillisecondBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, RecordBatch, TimestampMillisecondArray, UInt32Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use std::sync::Arc;
use std::time::{Duration, Instant};
use weir_common::ids::CheckpointId;

/// Name of the union list state of partition positions.
pub const STATE: &str = "offsets";

/// How long a metadata or offset request may take before the source gives up with an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an idle poll asks the task to wait.
const IDLE: Duration = Duration::from_millis(5);

/// The decoder of a format's values.
enum Values {
    Json(JsonRows),
    Avro(AvroRows),
}

impl Values {
    fn push(&mut self, value: Option<&[u8]>) {
        match self {
            Values::Json(j) => j.push(value),
            Values::Avro(a) => a.push(value),
        }
    }

    fn value(&self, i: usize) -> Option<&[u8]> {
        match self {
            Values::Json(j) => j.value(i),
            Values::Avro(a) => a.value(i),
        }
    }

    fn decode(&mut self) -> Decoded {
        match self {
            Values::Json(j) => j.decode(),
            Values::Avro(a) => a.decode(),
        }
    }

    fn clear(&mut self) {
        match self {
            Values::Json(j) => j.clear(),
            Values::Avro(a) => a.clear(),
        }
    }

    fn fields(&self) -> &arrow_schema::Fields {
        match self {
            Values::Json(j) => j.fields(),
            Values::Avro(a) => a.fields(),
        }
    }
}

/// A metadata column being built.
enum MetaColumn {
    Topic(StringBuilder),
    Partition(Int32Builder),
    Offset(Int64Builder),
    Timestamp(TimestampMillisecondBuilder),
    /// The headers' JSON object, and the text of one value (kept for its capacity).
    Headers(StringBuilder, String),
}

impl MetaColumn {
    fn new(m: Metadata) -> MetaColumn {
        match m {
            Metadata::Topic => MetaColumn::Topic(StringBuilder::new()),
            Metadata::Partition => MetaColumn::Partition(Int32Builder::new()),
            Metadata::Offset => MetaColumn::Offset(Int64Builder::new()),
            Metadata::Timestamp => MetaColumn::Timestamp(TimestampMillisecondBuilder::new()),
            Metadata::Headers => MetaColumn::Headers(StringBuilder::new(), String::new()),
        }
    }

    /// The Arrow field of its column (the config's [`Metadata::column`], whose types JSON columns use too).
    fn field(m: Metadata) -> Field {
        let c = m.column();
        Field::new(c.name, arrow_type(&c.data_type).unwrap_or(DataType::Null), c.nullable)
    }

    fn append<M: Message>(&mut self, m: &M) {
        match self {
            MetaColumn::Topic(b) => b.append_value(m.topic()),
            MetaColumn::Partition(b) => b.append_value(m.partition()),
            MetaColumn::Offset(b) => b.append_value(m.offset()),
            MetaColumn::Timestamp(b) => b.append_option(m.timestamp().to_millis()),
            MetaColumn::Headers(b, text) => {
                use rdkafka::message::Headers;
                text.clear();
                text.push('{');
                if let Some(headers) = m.headers() {
                    for (i, h) in headers.iter().enumerate() {
                        if i > 0 {
                            text.push(',');
                        }
                        push_json_string(h.key, text);
                        text.push(':');
                        match h.value {
                            Some(v) => push_json_string(&String::from_utf8_lossy(v), text),
                            None => text.push_str("null"),
                        }
                    }
                }
                text.push('}');
                b.append_value(text.as_str());
            }
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            MetaColumn::Topic(b) => Arc::new(b.finish()),
            MetaColumn::Partition(b) => Arc::new(b.finish()),
            MetaColumn::Offset(b) => Arc::new(b.finish()),
            MetaColumn::Timestamp(b) => Arc::new(b.finish()),
            MetaColumn::Headers(b, _) => Arc::new(b.finish()),
        }
    }
}

/// One partition this subtask reads.
struct Part {
    position: PartitionPosition,
    done: bool,
}

/// The `kafka` source.
pub struct KafkaSource {
    cfg: KafkaSourceConfig,
    uid: String,
    subtask: u32,
    parallelism: u32,
    pattern: Option<regex::Regex>,
    consumer: Option<BaseConsumer>,
    parts: Vec<Part>,
    /// When partitions are next looked for (`None`: never, a bounded source or an interval of 0).
    next_discovery: Option<Instant>,
    /// `format: json` or `avro`: the values' decoder, and each gathered record's split and offset.
    decoder: Option<Values>,
    origins: Vec<(u32, i64)>,
    /// The rows' schema: the key, the format's columns, the metadata columns and event time.
    schema: Option<SchemaRef>,
    /// The metadata columns being built.
    meta: Vec<MetaColumn>,
    /// Which column (of the key's, the format's and the metadata ones) is event time; `None`: the Kafka
    /// timestamp.
    time_column: Option<usize>,
    /// Where malformed records go (`on_malformed: dead-letter`), and how many there were.
    dead_letter: Option<(String, BaseProducer<SinkContext>)>,
    malformed: Option<metrics::Counter>,
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
            subtask: 0,
            parallelism: 1,
            pattern: None,
            consumer: None,
            parts: Vec::new(),
            next_discovery: None,
            decoder: None,
            origins: Vec::new(),
            schema: None,
            meta: Vec::new(),
            time_column: None,
            dead_letter: None,
            malformed: None,
            keys: BinaryBuilder::new(),
            values: BinaryBuilder::new(),
            times: TimestampMillisecondBuilder::new(),
        }
    }

    fn err(&self, what: impl std::fmt::Display) -> OperatorError {
        OperatorError::External(format!("kafka source {:?} ({}): {what}", self.uid, self.cfg.bootstrap_servers))
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

    /// The topics this source reads and their partition counts, from the broker's metadata. `strict`: a named topic
    /// that does not exist is an error (at start; discovery waits for it instead); a pattern that matches nothing
    /// is not.
    fn topic_sizes(&self, consumer: &BaseConsumer, strict: bool) -> Result<Vec<(String, usize)>, OperatorError> {
        let mut found = Vec::new();
        match &self.pattern {
            Some(pattern) => {
                let md = consumer
                    .fetch_metadata(None, REQUEST_TIMEOUT)
                    .map_err(|e| self.err(format!("metadata of the topics: {e}")))?;
                for t in md.topics().iter().filter(|t| t.error().is_none() && pattern.is_match(t.name())) {
                    found.push((t.name().to_string(), t.partitions().len()));
                }
            }
            None => {
                for topic in &self.cfg.topics {
                    let md = consumer
                        .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
                        .map_err(|e| self.err(format!("metadata of topic {topic:?}: {e}")))?;
                    match md.topics().iter().find(|t| t.name() == topic) {
                        Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
                            found.push((topic.clone(), t.partitions().len()))
                        }
                        _ if strict => return Err(self.err(format!("topic {topic:?} does not exist"))),
                        _ => {}
                    }
                }
            }
        }
        Ok(found)
    }

    /// Pushes a poll's rows: for JSON and Avro, the values decoded and the malformed records failing the job or
    /// sent to the dead-letter topic and left out.
    fn push_rows(&mut self, out: &mut SourceOutput, runs: Vec<(u32, u32)>) -> Result<(), OperatorError> {
        let Some(schema) = self.schema.clone() else { return Ok(()) };
        let mut keys: ArrayRef = Arc::new(self.keys.finish());
        let mut meta: Vec<ArrayRef> = self.meta.iter_mut().map(MetaColumn::finish).collect();
        let mut times: ArrayRef = Arc::new(self.times.finish());
        let mut runs = runs;
        let values = match self.decoder.take() {
            None => vec![Arc::new(self.values.finish()) as ArrayRef],
            Some(mut decoder) => {
                let decoded = decoder.decode();
                let result =
                    if decoded.bad.is_empty() { Ok(()) } else { self.malformed_records(&decoded.bad, &keys, &decoder) };
                decoder.clear();
                self.decoder = Some(decoder);
                result?;
                if !decoded.bad.is_empty() {
                    // Only bad input comes this way: the good rows' keys, metadata, times and runs picked out.
                    let mut good = vec![true; self.origins.len()];
                    decoded.bad.iter().for_each(|(i, _)| good[*i] = false);
                    let keep = UInt32Array::from_iter_values((0..good.len() as u32).filter(|i| good[*i as usize]));
                    let take = |a: &ArrayRef| arrow_select::take::take(a.as_ref(), &keep, None);
                    keys = take(&keys).map_err(|e| self.err(e))?;
                    times = take(&times).map_err(|e| self.err(e))?;
                    meta = meta.iter().map(take).collect::<Result<_, _>>().map_err(|e| self.err(e))?;
                    runs.clear();
                    for (&(split, _), _) in self.origins.iter().zip(&good).filter(|(_, g)| **g) {
                        match runs.last_mut() {
                            Some((s, n)) if *s == split => *n += 1,
                            _ => runs.push((split, 1)),
                        }
                    }
                }
                self.origins.clear();
                decoded.columns
            }
        };
        if keys.is_empty() {
            return Ok(());
        }
        let mut columns = vec![keys];
        columns.extend(values);
        columns.extend(meta);
        if let Some(c) = self.time_column {
            times = event_times(&columns[c]);
        }
        columns.push(times);
        let batch = RecordBatch::try_new(schema, columns).map_err(|e| self.err(format!("a batch: {e}")))?;
        out.push_batch_of_splits(batch, runs)
    }

    /// Records `bad` of the poll (index, why) are malformed: the job fails, or they go to the dead-letter topic.
    fn malformed_records(
        &self,
        bad: &[(usize, String)],
        keys: &ArrayRef,
        decoder: &Values,
    ) -> Result<(), OperatorError> {
        let at = |i: usize| {
            let (split, offset) = self.origins[i];
            let p = &self.parts[split as usize].position;
            (p.topic.as_str(), p.partition, offset)
        };
        let Some((topic, producer)) = &self.dead_letter else {
            let (i, why) = &bad[0];
            let (t, p, offset) = at(*i);
            return Err(self.err(format!("malformed record in {t}/{p} at offset {offset}: {why}")));
        };
        let keys = keys.as_binary::<i32>();
        for (i, why) in bad {
            let (t, p, offset) = at(*i);
            let (partition, offset) = (p.to_string(), offset.to_string());
            let headers = OwnedHeaders::new()
                .insert(Header { key: "weir.source.topic", value: Some(t) })
                .insert(Header { key: "weir.source.partition", value: Some(&partition) })
                .insert(Header { key: "weir.source.offset", value: Some(&offset) })
                .insert(Header { key: "weir.error", value: Some(why) });
            let mut record = BaseRecord::<[u8], [u8]>::to(topic).headers(headers);
            record.key = Some(keys.value(*i));
            record.payload = decoder.value(*i);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                        record = r;
                        producer.poll(Duration::from_millis(5));
                    }
                    Err((e, _)) => return Err(self.err(format!("sending a dead letter to {topic:?}: {e}"))),
                }
            }
        }
        producer.poll(Duration::ZERO);
        if let Some(c) = &self.malformed {
            c.increment(bad.len() as u64);
        }
        tracing::warn!(uid = %self.uid, records = bad.len(), topic = %topic, first_error = %bad[0].1,
            "malformed records sent to the dead-letter topic");
        Ok(())
    }

    /// Marks done the bounded partitions the consumer's position has reached the end of (with no record there to
    /// say so: the last offsets were transaction markers).
    fn ended_by_position(&mut self, finished: &mut Vec<u32>) -> Result<(), OperatorError> {
        let Some(consumer) = self.consumer.as_ref() else { return Ok(()) };
        if self.parts.iter().all(|p| p.done) {
            return Ok(());
        }
        let positions = consumer.position().map_err(|e| self.err(format!("the consumer's positions: {e}")))?;
        for (split, part) in self.parts.iter_mut().enumerate().filter(|(_, p)| !p.done) {
            let Some(end) = part.position.end else { continue };
            let at = positions.find_partition(&part.position.topic, part.position.partition).map(|e| e.offset());
            if let Some(Offset::Offset(at)) = at {
                if at >= end {
                    part.position.next = part.position.next.max(end);
                    part.done = true;
                    finished.push(split as u32);
                }
            }
        }
        Ok(())
    }

    /// Looks for partitions this subtask owns and does not read yet; each becomes a new split, read from its
    /// earliest record. A failed look is logged and tried again at the next interval.
    fn discover(&mut self) -> Result<(), OperatorError> {
        let Some(consumer) = self.consumer.as_ref() else { return Ok(()) };
        let sizes = match self.topic_sizes(consumer, false) {
            Ok(sizes) => sizes,
            Err(e) => {
                tracing::warn!(uid = %self.uid, error = %e, "partition discovery failed; trying again later");
                return Ok(());
            }
        };
        let reading: Vec<&PartitionPosition> = self.parts.iter().map(|p| &p.position).collect();
        let new = unread(&sizes, &reading, self.subtask, self.parallelism);
        let mut tpl = TopicPartitionList::new();
        let mut added = Vec::new();
        for (topic, partition) in new {
            let (low, _) = consumer
                .fetch_watermarks(&topic, partition, REQUEST_TIMEOUT)
                .map_err(|e| self.err(format!("offsets of {topic}/{partition}: {e}")))?;
            tpl.add_partition_offset(&topic, partition, Offset::Offset(low)).map_err(|e| self.err(e))?;
            added.push(Part { position: PartitionPosition { topic, partition, next: low, end: None }, done: false });
        }
        if added.is_empty() {
            return Ok(());
        }
        consumer.incremental_assign(&tpl).map_err(|e| self.err(format!("assigning new partitions: {e}")))?;
        let names: Vec<String> =
            added.iter().map(|p| format!("{}/{}", p.position.topic, p.position.partition)).collect();
        tracing::info!(uid = %self.uid, partitions = ?names, "reading newly discovered partitions");
        self.parts.extend(added);
        Ok(())
    }
}

impl Source for KafkaSource {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        self.uid = ctx.info.uid.clone();
        (self.subtask, self.parallelism) = (ctx.info.subtask.0, ctx.info.parallelism);
        if let Some(p) = &self.cfg.topic_pattern {
            // The whole name matches, as Java's `Pattern.matcher(topic).matches()`.
            let anchored =
                regex::Regex::new(&format!("^(?:{p})$")).map_err(|e| self.err(format!("topic_pattern: {e}")))?;
            self.pattern = Some(anchored);
        }
        let decoder = match &self.cfg.format {
            KafkaFormat::Raw => None,
            KafkaFormat::Json { columns, .. } => {
                Some(Values::Json(JsonRows::new(columns).map_err(|e| self.err(format!("schema: {e}")))?))
            }
            KafkaFormat::Avro { schema, wire, .. } => Some(Values::Avro(AvroRows::new(schema, *wire))),
        };
        let mut fields: Vec<Field> = vec![Field::new(KEY, DataType::Binary, false)];
        match &decoder {
            Some(d) => fields.extend(d.fields().iter().map(|f| f.as_ref().clone())),
            None => fields.push(Field::new(VALUE, DataType::Binary, true)),
        }
        fields.extend(self.cfg.metadata.iter().map(|m| MetaColumn::field(*m)));
        self.meta = self.cfg.metadata.iter().map(|m| MetaColumn::new(*m)).collect();
        if let Some(name) = &self.cfg.timestamp_field {
            // The config was checked at submission: a non-nullable int64 or timestamp_ms column.
            self.time_column = fields.iter().position(|f| f.name() == name);
            if self.time_column.is_none() {
                return Err(self.err(format!("timestamp_field {name:?}: no such column")));
            }
        }
        fields.push(event_time_field());
        self.schema = Some(Arc::new(Schema::new(fields)));
        self.decoder = decoder;
        if let Some(malformed) = self.cfg.format.malformed() {
            if let Malformed::DeadLetter(topic) = malformed {
                let producer: BaseProducer<SinkContext> = ClientConfig::new()
                    .set("bootstrap.servers", &self.cfg.bootstrap_servers)
                    .set("enable.idempotence", "true")
                    .set("delivery.report.only.error", "true")
                    .set("allow.auto.create.topics", "false")
                    .create_with_context(SinkContext::default())
                    .map_err(|e| self.err(format!("a dead-letter producer: {e}")))?;
                self.dead_letter = Some((topic.clone(), producer));
            }
            let labels = [
                ("job_id", ctx.info.job_id.clone()),
                ("operator", ctx.info.uid.clone()),
                ("subtask", ctx.info.subtask.0.to_string()),
            ];
            self.malformed = Some(metrics::counter!("weir_kafka_malformed_records_total", &labels));
        }
        let list = ctx.operator_state.union_list_state(STATE)?;
        let restored = owned(decode_positions(list, &self.uid)?, self.subtask, self.parallelism);
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
        for (topic, partition) in unread(&self.topic_sizes(&consumer, true)?, &[], self.subtask, self.parallelism) {
            let position = match restored.iter().find(|r| r.topic == topic && r.partition == partition) {
                Some(r) => r.clone(),
                None => {
                    let (next, high) = self.start_of(&consumer, &topic, partition)?;
                    let end = self.cfg.bounded.then_some(high.max(next));
                    PartitionPosition { topic, partition, next, end }
                }
            };
            let done = position.end.is_some_and(|end| position.next >= end);
            parts.push(Part { position, done });
        }
        let mut tpl = TopicPartitionList::new();
        for p in parts.iter().filter(|p| !p.done) {
            tpl.add_partition_offset(&p.position.topic, p.position.partition, Offset::Offset(p.position.next))
                .map_err(|e| self.err(e))?;
        }
        consumer.assign(&tpl).map_err(|e| self.err(format!("assigning partitions: {e}")))?;
        self.consumer = Some(consumer);
        self.parts = parts;
        if !self.cfg.bounded && self.cfg.discovery_interval_ms > 0 {
            self.next_discovery = Some(Instant::now() + Duration::from_millis(self.cfg.discovery_interval_ms));
        }
        Ok(())
    }

    fn splits(&self) -> u32 {
        self.parts.len() as u32
    }

    fn poll(&mut self, out: &mut SourceOutput, max: usize) -> Result<SourceStatus, OperatorError> {
        if self.next_discovery.is_some_and(|at| Instant::now() >= at) {
            self.discover()?;
            self.next_discovery = Some(Instant::now() + Duration::from_millis(self.cfg.discovery_interval_ms));
        }
        let Some(consumer) = self.consumer.as_ref() else {
            return Err(OperatorError::Misuse("kafka source polled before initialize_state".into()));
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
            for c in &mut self.meta {
                c.append(&m);
            }
            match (&mut self.decoder, m.payload()) {
                (Some(decoder), value) => {
                    decoder.push(value);
                    self.origins.push((split as u32, m.offset()));
                }
                (None, Some(v)) => self.values.append_value(v),
                (None, None) => self.values.append_null(),
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
            self.push_rows(out, runs)?;
        } else if self.cfg.bounded {
            // A transaction's marker takes the offset before the end without ever being a record: the consumer's
            // position, past such markers, tells when a partition is read to its end.
            self.ended_by_position(&mut finished)?;
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
        if let Some((topic, producer)) = &self.dead_letter {
            // The dead letters of the records this checkpoint covers are at the broker before it counts.
            producer
                .flush(REQUEST_TIMEOUT)
                .map_err(|e| self.err(format!("flushing dead letters to {topic:?}: {e}")))?;
            if let Some(e) = producer.context().take_failure() {
                return Err(self.err(format!("a dead letter was not delivered to {topic:?}: {e}")));
            }
        }
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

/// A column of int64 milliseconds or `timestamp_ms` as event times (the same values, no copy).
fn event_times(c: &ArrayRef) -> ArrayRef {
    match c.data_type() {
        DataType::Int64 => {
            let ints = c.as_primitive::<Int64Type>();
            Arc::new(TimestampMillisecondArray::new(ints.values().clone(), ints.nulls().cloned()))
        }
        _ => Arc::new(c.as_primitive::<TimestampMillisecondType>().clone()),
    }
}
