//! The `kafka-sink`: rows as records of one topic, at least once or exactly once.
//!
//! At least once, every record is flushed to the brokers at each checkpoint barrier (an idempotent producer: a
//! retry inside the client writes nothing twice; a restore replays what followed the checkpoint).
//!
//! Exactly once, each subtask writes in a transaction per checkpoint, under its own transactional ids
//! (`<prefix>-<subtask>-<n>`, see [`super::transactions`]). At the barrier the transaction is flushed
//! (pre-committed), its producer id and epoch go into the snapshot, and the next transaction begins under the
//! next id; when the checkpoint completes the transaction is committed. Because that notification is best effort,
//! a restored subtask first commits every transaction its state lists (with the protocol's `EndTxn`, by id,
//! producer id and epoch: no producer of ours holds them any more), then fences the ids the failed run may have
//! left a transaction open under (an `InitProducerId` aborts it). Consumers that read `read_committed` see each
//! record once, one checkpoint interval after it was written.
//!
//! A row becomes a record as DESIGN §6 says: `format: text` (the line `file-sink` writes, without its newline),
//! `json` (a JSON object), `raw` (the value column's bytes) or `avro` (an Avro record of the given schema, see
//! `avro.rs`); the key column, if the rows have one, is the record's key (its text, or its bytes for `raw`),
//! unless `key_field` names another column (its bytes or text). The `headers` columns go along as headers, and
//! a row's event time is its record's timestamp (the broker's append time where it has none).

use super::avro::AvroWriter;
use super::transactions::{plan_recovery, transactional_id, PendingTxn, TxnEntry};
use crate::api::batch::{EVENT_TIME, KEY, VALUE};
use crate::api::operator::{Collector, InitContext, Operator, OperatorError, ProcessContext, SnapshotContext};
use crate::api::record::write_key_text;
use crate::builtins::kafka::config::{Delivery, KafkaSinkConfig, Partitioning, SinkFormat};
use crate::builtins::kafka::wire::{self, Connection, WireError};
use crate::builtins::text::FileFormat;
use crate::builtins::text::{write_cell, LineWriter};
use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMillisecondType;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, SchemaRef};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_common::ids::CheckpointId;

/// Name of the union list state of transactions and id positions.
pub const SINK_STATE: &str = "kafka-sink-transactions";

/// How long a metadata request, a flush, a transaction's start or commit may take before the sink fails.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a transaction may stay open before the broker aborts it: Kafka's largest default
/// (`transaction.max.timeout.ms`), so that a job down for minutes still commits what its last checkpoint holds.
const TRANSACTION_TIMEOUT_MS: i32 = 900_000;

/// How often a transactional producer reports its statistics (where its producer id and epoch are read from).
const STATS_INTERVAL_MS: &str = "100";

/// What the client tells a producer's owner from its own threads: the producer id and epoch, and the first
/// failed delivery (the sink's producers, and the source's dead-letter producer).
#[derive(Default)]
pub(super) struct SinkContext {
    producer: Mutex<Option<(i64, i16)>>,
    failed: Mutex<Option<String>>,
}

/// The part of the client's statistics the sink reads.
#[derive(serde::Deserialize)]
struct Stats {
    eos: Option<Eos>,
}

#[derive(serde::Deserialize)]
struct Eos {
    producer_id: i64,
    producer_epoch: i16,
}

impl SinkContext {
    /// The first failed delivery since the last call, if any.
    pub(super) fn take_failure(&self) -> Option<String> {
        self.failed.lock().ok().and_then(|mut f| f.take())
    }
}

impl ClientContext for SinkContext {
    fn stats_raw(&self, statistics: &[u8]) {
        if let Ok(Stats { eos: Some(e) }) = serde_json::from_slice::<Stats>(statistics) {
            if e.producer_id >= 0 && e.producer_epoch >= 0 {
                if let Ok(mut p) = self.producer.lock() {
                    *p = Some((e.producer_id, e.producer_epoch));
                }
            }
        }
    }
}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = ();

    // Only failed deliveries are reported (`delivery.report.only.error`).
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            if let Ok(mut f) = self.failed.lock() {
                f.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

type KafkaProducer = BaseProducer<SinkContext>;

/// A transaction flushed at a barrier, waiting for its checkpoint to complete.
struct Pending {
    txn: PendingTxn,
    producer: KafkaProducer,
}

/// The `kafka-sink`.
pub struct KafkaSink {
    cfg: KafkaSinkConfig,
    who: String,
    subtask: u32,
    producer: Option<KafkaProducer>,
    /// Exactly once: the id number of the open transaction.
    current: u64,
    pending: Vec<Pending>,
    /// The next id numbers of the old subtasks this one answers for after a scale-down (kept in its snapshots).
    carried: Vec<(u32, u64)>,
    partitions: i32,
    next_partition: i32,
    lines: Option<LineWriter>,
    line: String,
    key: String,
    /// `format: avro`: the writer for rows of one schema, and a record's value (kept for its capacity).
    avro: Option<(SchemaRef, AvroWriter)>,
    value: Vec<u8>,
    /// The text of each header column's value in a row (kept for their capacity).
    header_text: Vec<String>,
}

/// A record the sink could not hand to its producer.
#[derive(Debug, thiserror::Error)]
enum SendError {
    /// A record before the producer exists.
    #[error("a record before initialize_state")]
    NotInitialized,
    /// The producer refused the record.
    #[error("producing to {topic:?}: {source}")]
    Produce {
        /// The topic.
        topic: String,
        /// The producer's error.
        #[source]
        source: KafkaError,
    },
}

/// A record about to be sent.
struct Outgoing<'a> {
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: Option<OwnedHeaders>,
    timestamp: Option<i64>,
}

/// Where a row's key and headers come from in a batch.
struct KeyAndHeaders {
    /// The key's column, and whether it is `key_field` (bytes as they are, anything else as its text) rather
    /// than the key column (as key text, or bytes for `raw`).
    key: Option<(usize, bool)>,
    headers: Vec<usize>,
}

impl KafkaSink {
    /// A sink with the given config.
    pub fn new(cfg: KafkaSinkConfig) -> Self {
        KafkaSink {
            cfg,
            who: String::new(),
            subtask: 0,
            producer: None,
            current: 0,
            pending: Vec::new(),
            carried: Vec::new(),
            partitions: 0,
            next_partition: 0,
            lines: None,
            line: String::new(),
            key: String::new(),
            avro: None,
            value: Vec::new(),
            header_text: Vec::new(),
        }
    }

    /// Finds the key and header columns in `batch`'s schema, or says which is missing.
    fn key_and_headers(&self, batch: &RecordBatch) -> Result<KeyAndHeaders, OperatorError> {
        let schema = batch.schema();
        let names = || schema.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ");
        let key = match &self.cfg.key_field {
            Some(f) => match schema.index_of(f) {
                Ok(i) => Some((i, true)),
                Err(_) => return Err(self.err(format!("key_field {f:?}: no such column (the rows have {})", names()))),
            },
            None => schema.index_of(KEY).ok().map(|i| (i, false)),
        };
        let mut headers = Vec::with_capacity(self.cfg.headers.len());
        for h in &self.cfg.headers {
            match schema.index_of(h) {
                Ok(i) => headers.push(i),
                Err(_) => return Err(self.err(format!("headers: no column {h:?} (the rows have {})", names()))),
            }
        }
        Ok(KeyAndHeaders { key, headers })
    }

    /// Row `row`'s key into `key` (text) or as bytes of the batch, and whether it has one.
    fn key_of<'b>(
        batch: &'b RecordBatch,
        at: &KeyAndHeaders,
        raw: bool,
        row: usize,
        key: &'b mut String,
    ) -> Option<&'b [u8]> {
        let (i, field) = at.key?;
        let col = batch.column(i);
        if !col.is_valid(row) {
            return None;
        }
        let bytes_like =
            matches!(col.data_type(), DataType::Binary | DataType::Utf8 | DataType::LargeBinary | DataType::LargeUtf8);
        if bytes_like && (raw || field) {
            return Some(bytes_at(col.as_ref(), row));
        }
        key.clear();
        if field {
            write_cell(col.as_ref(), row, false, key);
        } else {
            write_key_text(bytes_at(col.as_ref(), row), key);
        }
        Some(key.as_bytes())
    }

    /// Row `row`'s headers (`None` when none are configured: a record without headers allocates nothing).
    fn headers_of(&mut self, batch: &RecordBatch, at: &KeyAndHeaders, row: usize) -> Option<OwnedHeaders> {
        if at.headers.is_empty() {
            return None;
        }
        self.header_text.resize(at.headers.len(), String::new());
        let mut headers = OwnedHeaders::new_with_capacity(at.headers.len());
        for (n, &i) in at.headers.iter().enumerate() {
            let col = batch.column(i);
            let text = &mut self.header_text[n];
            text.clear();
            let value = col.is_valid(row).then(|| {
                write_cell(col.as_ref(), row, false, text);
                text.as_str()
            });
            headers = headers.insert(Header { key: &self.cfg.headers[n], value });
        }
        Some(headers)
    }

    fn err(&self, what: impl std::fmt::Display) -> OperatorError {
        OperatorError::External(format!("{} ({}): {what}", self.who, self.cfg.bootstrap_servers))
    }

    fn exactly_once(&self) -> bool {
        self.cfg.delivery == Delivery::ExactlyOnce
    }

    fn prefix(&self) -> &str {
        self.cfg.transactional_id_prefix.as_deref().unwrap_or_default()
    }

    /// A producer: idempotent; transactional under `id` if given (its transactions initialised).
    fn producer(&self, id: Option<&str>) -> Result<KafkaProducer, OperatorError> {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.cfg.bootstrap_servers)
            .set("enable.idempotence", "true")
            .set("delivery.report.only.error", "true")
            // The Java client's hash of keys, so that a key lands where Flink's sink would put it.
            .set("partitioner", "murmur2_random")
            .set("linger.ms", "5")
            // A misspelt topic is an error, not a new topic (the broker may create topics on first use).
            .set("allow.auto.create.topics", "false")
            .set("message.timeout.ms", "60000");
        if let Some(id) = id {
            c.set("transactional.id", id)
                .set("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS.to_string())
                .set("statistics.interval.ms", STATS_INTERVAL_MS);
        }
        let producer: KafkaProducer =
            c.create_with_context(SinkContext::default()).map_err(|e| self.err(format!("a producer: {e}")))?;
        if let Some(id) = id {
            producer
                .init_transactions(REQUEST_TIMEOUT)
                .map_err(|e| self.err(format!("initialising transactional id {id:?}: {e}")))?;
            producer.begin_transaction().map_err(|e| self.err(format!("beginning a transaction of {id:?}: {e}")))?;
        }
        Ok(producer)
    }

    /// The transaction coordinator of `id`, connected.
    fn coordinator(&self, id: &str) -> Result<Connection, WireError> {
        let mut boot = Connection::bootstrap(&self.cfg.bootstrap_servers, REQUEST_TIMEOUT)?;
        let addr = wire::transaction_coordinator(&mut boot, id)?;
        if addr == boot.addr() {
            return Ok(boot);
        }
        Connection::connect(&addr, REQUEST_TIMEOUT)
    }

    /// Runs `call` against `id`'s coordinator, again while it fails in a way that may pass, for at most
    /// [`REQUEST_TIMEOUT`].
    fn at_coordinator<T>(
        &self,
        id: &str,
        mut call: impl FnMut(&mut Connection) -> Result<T, WireError>,
    ) -> Result<T, WireError> {
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        loop {
            let result = self.coordinator(id).and_then(|mut c| call(&mut c));
            match result {
                Err(e) if e.is_retriable() && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                other => return other,
            }
        }
    }

    /// Commits a transaction a restored state lists. An answer that it cannot be (fenced: its id was used again
    /// since, which happens only after a fallback to an older checkpoint; or no longer open) is logged and the
    /// restore goes on, as Flink's committer does: nothing would make it commit later.
    fn commit_restored(&self, p: &PendingTxn) -> Result<(), OperatorError> {
        let id = transactional_id(self.prefix(), p.subtask, p.n);
        weir_common::service::fault::hit_blocking("sink-commit").map_err(|f| OperatorError::External(f.to_string()))?;
        match self.at_coordinator(&id, |c| wire::end_txn(c, &id, p.producer_id, p.epoch, true)) {
            Ok(()) => {
                tracing::info!(sink = %self.who, transactional_id = %id, checkpoint_id = %p.checkpoint,
                    "committed a transaction of the restored checkpoint");
                Ok(())
            }
            Err(e @ WireError::Broker { .. }) if !e.is_retriable() => {
                tracing::warn!(sink = %self.who, transactional_id = %id, checkpoint_id = %p.checkpoint, error = %e,
                    "a transaction of the restored checkpoint could not be committed: completed before");
                Ok(())
            }
            Err(e) => Err(self.err(format!("committing transaction {id:?} of checkpoint {}: {e}", p.checkpoint))),
        }
    }

    /// Fences subtask `subtask`'s ids from `from` on, aborting any transaction open under them, until an id the
    /// broker had never seen; returns that id's number (the next to use).
    fn fence_from(&self, subtask: u32, from: u64) -> Result<u64, OperatorError> {
        let mut n = from;
        loop {
            let id = transactional_id(self.prefix(), subtask, n);
            let (_, epoch) = self
                .at_coordinator(&id, |c| wire::init_producer_id(c, &id, TRANSACTION_TIMEOUT_MS))
                .map_err(|e| self.err(format!("fencing transactional id {id:?}: {e}")))?;
            if epoch == 0 {
                if n > from {
                    tracing::info!(sink = %self.who, subtask, from, to = n,
                        "fenced the transactional ids a failed run may have left open");
                }
                return Ok(n);
            }
            n += 1;
        }
    }

    /// The producer id and epoch of the current transaction, from the client's statistics (waited for, bounded).
    fn producer_identity(&self, producer: &KafkaProducer) -> Result<(i64, i16), OperatorError> {
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        loop {
            if let Some(p) = producer.context().producer.lock().ok().and_then(|p| *p) {
                return Ok(p);
            }
            if Instant::now() > deadline {
                return Err(self.err("the producer reported no producer id"));
            }
            producer.poll(Duration::from_millis(10));
        }
    }

    /// Fails if any delivery failed.
    fn check_deliveries(&self, producer: &KafkaProducer) -> Result<(), OperatorError> {
        match producer.context().take_failure() {
            Some(e) => Err(self.err(format!("a record was not delivered to {:?}: {e}", self.cfg.topic))),
            None => Ok(()),
        }
    }

    fn send(
        producer: Option<&KafkaProducer>,
        cfg: &KafkaSinkConfig,
        next_partition: &mut i32,
        partitions: i32,
        out: Outgoing<'_>,
    ) -> Result<(), SendError> {
        let Some(producer) = producer else {
            return Err(SendError::NotInitialized);
        };
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&cfg.topic);
        record.key = out.key;
        record.payload = out.value;
        record.headers = out.headers;
        record.timestamp = out.timestamp;
        if cfg.partitioning == Partitioning::RoundRobin {
            record = record.partition(*next_partition);
            *next_partition = (*next_partition + 1) % partitions.max(1);
        }
        loop {
            match producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(5));
                }
                Err((source, _)) => return Err(SendError::Produce { topic: cfg.topic.clone(), source }),
            }
        }
    }
}

impl Operator for KafkaSink {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        self.who = format!("kafka-sink {:?}", ctx.info.uid);
        self.subtask = ctx.info.subtask.0;
        let probe = self.producer(None)?;
        let md = probe
            .client()
            .fetch_metadata(Some(&self.cfg.topic), REQUEST_TIMEOUT)
            .map_err(|e| self.err(format!("metadata of topic {:?}: {e}", self.cfg.topic)))?;
        self.partitions = match md.topics().iter().find(|t| t.name() == self.cfg.topic) {
            Some(t) if t.error().is_none() && !t.partitions().is_empty() => t.partitions().len() as i32,
            _ => return Err(self.err(format!("topic {:?} does not exist", self.cfg.topic))),
        };
        self.next_partition = (self.subtask as i32) % self.partitions;
        if !self.exactly_once() {
            self.producer = Some(probe);
            return Ok(());
        }
        drop(probe);
        let restored = ctx.operator_state.union_list_state(SINK_STATE)?;
        let entries = if ctx.restored {
            Some(restored.iter().map(|e| TxnEntry::decode(e, &self.who)).collect::<Result<Vec<_>, _>>()?)
        } else {
            None
        };
        let plan = plan_recovery(entries.as_deref(), self.subtask, ctx.info.parallelism);
        for p in &plan.commit {
            self.commit_restored(p)?;
        }
        for &(subtask, from) in &plan.fence_from {
            let next = self.fence_from(subtask, from)?;
            if subtask == self.subtask {
                self.current = next;
            } else {
                self.carried.push((subtask, next));
            }
        }
        if plan.look_beyond {
            // No state: a run at a higher parallelism may have left transactions open under subtasks beyond ours.
            let p = ctx.info.parallelism.max(1);
            let mut subtask = self.subtask + p;
            loop {
                let next = self.fence_from(subtask, 0)?;
                if next == 0 {
                    break;
                }
                self.carried.push((subtask, next));
                subtask += p;
            }
        }
        let id = transactional_id(self.prefix(), self.subtask, self.current);
        self.producer = Some(self.producer(Some(&id))?);
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        _: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let at = self.key_and_headers(batch)?;
        let raw = self.cfg.format == SinkFormat::Raw;
        let value_col = if raw {
            let schema = batch.schema();
            match schema.index_of(VALUE).ok().map(|i| batch.column(i)) {
                Some(v) if matches!(v.data_type(), DataType::Binary | DataType::Utf8) => Some(v.clone()),
                _ => return Err(self.err("format: raw writes rows with a binary or string `value` column")),
            }
        } else {
            None
        };
        // A row's event time is its record's timestamp, as Flink's sink writes it.
        let times = batch.schema().index_of(EVENT_TIME).ok().map(|i| batch.column(i).clone());
        let times = times.as_ref().and_then(|t| t.as_primitive_opt::<TimestampMillisecondType>());
        let mut lines = None;
        let mut avro = None;
        match &self.cfg.format {
            SinkFormat::Raw => {}
            SinkFormat::Avro { schema, wire } => {
                avro = match self.avro.take() {
                    Some((s, w)) if Arc::ptr_eq(&s, &batch.schema()) || *s == *batch.schema() => Some((s, w)),
                    _ => Some((batch.schema(), AvroWriter::new(schema, *wire, batch).map_err(|e| self.err(e))?)),
                };
            }
            SinkFormat::Text | SinkFormat::Json => {
                lines = Some(match self.lines.take() {
                    Some(l) if l.writes(batch) => l,
                    _ => LineWriter::new(
                        batch,
                        if self.cfg.format == SinkFormat::Json { FileFormat::Json } else { FileFormat::Text },
                    )?,
                });
            }
        }
        let mut line = std::mem::take(&mut self.line);
        let mut key = std::mem::take(&mut self.key);
        let mut value = std::mem::take(&mut self.value);
        let mut result = Ok(());
        for row in 0..batch.num_rows() {
            let v: Option<&[u8]> = if let Some(col) = &value_col {
                col.is_valid(row).then(|| bytes_at(col.as_ref(), row))
            } else if let Some((_, w)) = &avro {
                value.clear();
                if let Err(e) = w.write_row(batch, row, &mut value) {
                    result = Err(self.err(e));
                    break;
                }
                Some(&value)
            } else if let Some(l) = lines.as_mut() {
                line.clear();
                l.write_row(batch, row, &mut line);
                if line.ends_with('\n') {
                    line.pop();
                }
                Some(line.as_bytes())
            } else {
                None
            };
            let headers = self.headers_of(batch, &at, row);
            let k = Self::key_of(batch, &at, raw, row, &mut key);
            result = Self::send(
                self.producer.as_ref(),
                &self.cfg,
                &mut self.next_partition,
                self.partitions,
                Outgoing {
                    key: k,
                    value: v,
                    headers,
                    timestamp: times.filter(|t| t.is_valid(row)).map(|t| t.value(row)),
                },
            )
            .map_err(|e| self.err(e));
            if result.is_err() {
                break;
            }
        }
        self.lines = lines.or(self.lines.take());
        self.avro = avro.or(self.avro.take());
        self.line = line;
        self.key = key;
        self.value = value;
        result?;
        if let Some(p) = self.producer.as_ref() {
            p.poll(Duration::ZERO);
        }
        Ok(())
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        let Some(producer) = self.producer.take() else {
            return Err(OperatorError::Misuse(format!("{}: snapshot before initialize_state", self.who)));
        };
        // Pre-commit: every record of the checkpoint is at the brokers before the barrier is acknowledged.
        let flushed = producer.flush(REQUEST_TIMEOUT);
        producer.poll(Duration::ZERO);
        self.check_deliveries(&producer)?;
        flushed.map_err(|e| self.err(format!("flushing to {:?}: {e}", self.cfg.topic)))?;
        if !self.exactly_once() {
            self.producer = Some(producer);
            return Ok(());
        }
        let (producer_id, epoch) = self.producer_identity(&producer)?;
        let txn =
            PendingTxn { checkpoint: ctx.checkpoint_id, subtask: self.subtask, n: self.current, producer_id, epoch };
        self.pending.push(Pending { txn, producer });
        self.current += 1;
        let id = transactional_id(self.prefix(), self.subtask, self.current);
        self.producer = Some(self.producer(Some(&id))?);
        let state = ctx.operator_state.union_list_state(SINK_STATE)?;
        state.clear();
        state.push(TxnEntry::Next { subtask: self.subtask, next: self.current }.encode());
        state.extend(self.carried.iter().map(|&(subtask, next)| TxnEntry::Next { subtask, next }.encode()));
        state.extend(self.pending.iter().map(|p| TxnEntry::Pending(p.txn.clone()).encode()));
        Ok(())
    }

    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), OperatorError> {
        // A transaction leaves the pending list only once committed: after a failure the restore commits it.
        while let Some(i) = self.pending.iter().position(|p| p.txn.checkpoint <= id) {
            weir_common::service::fault::hit_blocking("sink-commit")
                .map_err(|f| OperatorError::External(f.to_string()))?;
            let p = &self.pending[i];
            let tid = transactional_id(self.prefix(), p.txn.subtask, p.txn.n);
            p.producer
                .commit_transaction(REQUEST_TIMEOUT)
                .map_err(|e| self.err(format!("committing transaction {tid:?}: {e}")))?;
            tracing::debug!(sink = %self.who, transactional_id = %tid, checkpoint_id = %p.txn.checkpoint,
                "committed a transaction");
            self.pending.remove(i);
        }
        Ok(())
    }
}

/// The bytes of row `row` of a binary or string column.
fn bytes_at(col: &dyn Array, row: usize) -> &[u8] {
    match col.data_type() {
        DataType::Utf8 => col.as_string::<i32>().value(row).as_bytes(),
        DataType::LargeUtf8 => col.as_string::<i64>().value(row).as_bytes(),
        DataType::LargeBinary => col.as_binary::<i64>().value(row),
        _ => col.as_binary::<i32>().value(row),
    }
}
