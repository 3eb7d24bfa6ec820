//! A Kafka-compatible broker for tests: Tansu (the prebuilt binary `scripts/setup.sh` installs into
//! `$WEIR_TOOLS/bin/tansu`, memory storage) on a free loopback port, and a client of it for what a test
//! produces and reads (librdkafka, through the `rdkafka` crate).
//!
//! Tansu 0.6.0 keeps topics in memory: a restarted broker has none. Prefer assigning partitions to subscribing
//! (a consumer-group join takes about 24 s on Tansu). Its high watermark is the last batch's first offset + 1,
//! short by n − 1 after a batch of n records (measured here: 13 single records, then a batch of 3, answered
//! 14), so the test producer sends every record as a batch of its own, and [`KafkaBroker::read_all`] reads on
//! until the partitions go quiet. The
//! broker runs `--silent` (it traces every request); `WEIR_TANSU_LOG=1` keeps its log.

use crate::process::{free_port, Process};
use crate::proxy::TcpProxy;
use crate::s3::tools_dir;
use anyhow::{anyhow, bail, Context, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// One record as a test reads it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaRecord {
    /// Its partition.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// Its key (`None`: no key).
    pub key: Option<Vec<u8>>,
    /// Its value (`None`: a tombstone).
    pub value: Option<Vec<u8>>,
    /// Its headers, in order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Its timestamp, ms since the epoch.
    pub timestamp: i64,
}

/// A record for [`KafkaBroker::produce`]: its partition, key and value.
pub type ToProduce<'a> = (i32, Option<&'a [u8]>, &'a [u8]);

/// A Tansu broker on a free loopback port, killed when dropped.
pub struct KafkaBroker {
    process: Process,
    /// Where clients connect: the broker, or the proxy in front of it.
    addr: SocketAddr,
    proxy: Option<TcpProxy>,
    _logs: tempfile::TempDir,
}

/// The Tansu binary `scripts/setup.sh` installs.
pub fn tansu_bin() -> PathBuf {
    tools_dir().join("bin/tansu")
}

impl KafkaBroker {
    /// Starts Tansu and waits until it answers a metadata request.
    pub fn start() -> Result<KafkaBroker> {
        KafkaBroker::start_with(false)
    }

    /// Starts Tansu behind a [`TcpProxy`] that it advertises as its address, so that every client connects
    /// through the proxy: taking the proxy down is a broker outage that loses nothing (a restarted Tansu with
    /// memory storage would have lost its topics).
    pub fn start_behind_proxy() -> Result<KafkaBroker> {
        KafkaBroker::start_with(true)
    }

    fn start_with(proxied: bool) -> Result<KafkaBroker> {
        let bin = tansu_bin();
        if !bin.is_file() {
            bail!("{} not found: run scripts/setup.sh first (it installs tansu)", bin.display());
        }
        // A free port can be taken by someone else between probing and binding: try a few.
        let mut last_err = None;
        for _ in 0..3 {
            let logs = tempfile::Builder::new().prefix("weir-tansu-").tempdir()?;
            let port = free_port()?;
            let listen: SocketAddr = format!("127.0.0.1:{port}").parse()?;
            let proxy = if proxied { Some(TcpProxy::start(listen)?) } else { None };
            let addr = proxy.as_ref().map_or(listen, TcpProxy::addr);
            let url = format!("tcp://{listen}");
            let advertised = format!("tcp://{addr}");
            let mut cmd = Command::new(&bin);
            cmd.arg("broker");
            // Tansu traces every request (60 000 lines for this module's test): silent unless asked for.
            if std::env::var_os("WEIR_TANSU_LOG").is_none() {
                cmd.arg("--silent");
            }
            cmd.args(["--listener-url", &url, "--advertised-listener-url", &advertised])
                .args(["--storage-engine", "memory://tansu/"]);
            let process = Process::spawn("tansu", cmd, &logs.path().join("tansu.log"))?;
            let mut broker = KafkaBroker { process, addr, proxy, _logs: logs };
            match broker.wait_ready(Duration::from_secs(30)) {
                Ok(()) => return Ok(broker),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow!("no attempt made")).context("tansu did not start"))
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let producer = self.producer()?;
        loop {
            if producer.client().fetch_metadata(None, Duration::from_secs(2)).is_ok() {
                return Ok(());
            }
            if !self.process.is_running() {
                bail!("tansu exited\n{}", self.process.tail(20));
            }
            if Instant::now() >= deadline {
                bail!("tansu did not answer on {} within {timeout:?}\n{}", self.addr, self.process.tail(20));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `host:port` for `bootstrap_servers`.
    pub fn bootstrap(&self) -> String {
        self.addr.to_string()
    }

    /// The broker's address (the proxy's, for a broker behind one).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The proxy every client reaches the broker through, if it was started behind one.
    pub fn proxy(&self) -> Option<&TcpProxy> {
        self.proxy.as_ref()
    }

    /// The last lines of the broker's log.
    pub fn tail(&self, lines: usize) -> String {
        self.process.tail(lines)
    }

    /// Creates a topic of `partitions` partitions (Tansu's own CLI: a test's setup, not what it tests).
    pub fn create_topic(&self, name: &str, partitions: u32) -> Result<()> {
        let mut cmd = Command::new(tansu_bin());
        cmd.args(["topic", "create", "--broker", &format!("tcp://{}", self.addr)]).args([
            "--partitions",
            &partitions.to_string(),
            name,
        ]);
        let out = crate::process::run_with_timeout(cmd, Duration::from_secs(30))?;
        if out.code() != Some(0) {
            bail!("creating topic {name}: {out}");
        }
        // The CLI prints nothing when it succeeds (and an error on stdout when not): ask the broker.
        let found = self.partitions(name)?;
        if found != partitions as usize {
            bail!("topic {name} has {found} partitions after creating it with {partitions}: {out}");
        }
        Ok(())
    }

    /// How many partitions `topic` has, from the broker's metadata (0: no such topic).
    pub fn partitions(&self, topic: &str) -> Result<usize> {
        let producer = self.producer()?;
        let md = producer
            .client()
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .with_context(|| format!("metadata of {topic}"))?;
        Ok(md.topics().iter().find(|t| t.name() == topic && t.error().is_none()).map_or(0, |t| t.partitions().len()))
    }

    fn producer(&self) -> Result<BaseProducer> {
        ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .set("message.timeout.ms", "30000")
            // One record per batch: Tansu's high watermark is right only for those (module docs).
            .set("batch.num.messages", "1")
            .create()
            .context("a producer")
    }

    /// Produces `(partition, key, value)` records, in order per partition, and waits until all are acknowledged.
    pub fn produce(&self, topic: &str, records: &[ToProduce<'_>]) -> Result<()> {
        self.produce_at(topic, records, None)
    }

    /// [`KafkaBroker::produce`] with record `i`'s timestamp `timestamps[i]` (ms since the epoch) instead of now.
    pub fn produce_timed(&self, topic: &str, records: &[ToProduce<'_>], timestamps: &[i64]) -> Result<()> {
        if timestamps.len() != records.len() {
            bail!("{} records, {} timestamps", records.len(), timestamps.len());
        }
        self.produce_at(topic, records, Some(timestamps))
    }

    fn produce_at(&self, topic: &str, records: &[ToProduce<'_>], timestamps: Option<&[i64]>) -> Result<()> {
        let producer = self.producer()?;
        for (i, (partition, key, value)) in records.iter().enumerate() {
            let mut r = BaseRecord::<[u8], [u8]>::to(topic).partition(*partition).payload(*value);
            if let Some(k) = key {
                r = r.key(*k);
            }
            if let Some(ts) = timestamps {
                r = r.timestamp(ts[i]);
            }
            let mut pending = r;
            // A full local queue drains as deliveries are polled.
            loop {
                match producer.send(pending) {
                    Ok(()) => break,
                    Err((e, back)) if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) => {
                        producer.poll(Duration::from_millis(50));
                        pending = back;
                    }
                    Err((e, _)) => return Err(anyhow!("producing to {topic}: {e}")),
                }
            }
        }
        producer.flush(Duration::from_secs(30)).with_context(|| format!("flushing records to {topic}"))?;
        Ok(())
    }

    /// Every record of `topic`'s partitions `0..partitions`, read from the beginning until each partition has
    /// reached its high watermark at the time of the call and then nothing arrived for [`QUIET`] (Tansu's high
    /// watermark can be short of the end), ordered by partition and offset; no transaction markers are
    /// interpreted.
    pub fn read_all(&self, topic: &str, partitions: i32) -> Result<Vec<KafkaRecord>> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", self.bootstrap())
            .set("group.id", "weir-test-reader")
            .set("enable.auto.commit", "false")
            .create()
            .context("a consumer")?;
        let mut ends = Vec::new();
        let mut list = TopicPartitionList::new();
        for p in 0..partitions {
            let (_, high) = consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .with_context(|| format!("offsets of {topic}/{p}"))?;
            ends.push(high);
            list.add_partition_offset(topic, p, Offset::Beginning)?;
        }
        consumer.assign(&list)?;
        let mut out = Vec::new();
        let mut next = vec![0i64; partitions as usize];
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last_record = Instant::now();
        loop {
            let reached = (0..partitions as usize).all(|p| next[p] >= ends[p]);
            if reached && last_record.elapsed() >= QUIET {
                break;
            }
            if Instant::now() >= deadline {
                bail!("reading {topic}: at {next:?} of {ends:?} after 60 s");
            }
            let Some(m) = consumer.poll(Duration::from_millis(100)) else { continue };
            let m = m.with_context(|| format!("reading {topic}"))?;
            last_record = Instant::now();
            next[m.partition() as usize] = m.offset() + 1;
            out.push(KafkaRecord {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
                headers: m
                    .headers()
                    .map(|hs| hs.iter().map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec))).collect())
                    .unwrap_or_default(),
                timestamp: m.timestamp().to_millis().unwrap_or(-1),
            });
        }
        out.sort_by_key(|r| (r.partition, r.offset));
        Ok(out)
    }
}

/// What a `read_committed` consumer sees of a topic (see [`KafkaBroker::read_committed`]).
#[derive(Debug, Default)]
pub struct Committed {
    /// The records of committed transactions and those written outside any transaction, by partition and offset.
    pub records: Vec<KafkaRecord>,
    /// Records of transactions that were aborted.
    pub aborted: usize,
    /// Records of transactions with no marker yet (open: invisible until they end).
    pub open: usize,
    /// Transactions (producer id, epoch) still open, by partition.
    pub open_transactions: Vec<(i32, i64, i16)>,
}

impl KafkaBroker {
    /// The records of `topic`'s partitions `0..partitions` a `read_committed` consumer would see (see
    /// [`CommittedReader`]), read from the start.
    pub fn read_committed(&self, topic: &str, partitions: i32) -> Result<Committed> {
        let mut reader = CommittedReader::new(self, topic, partitions)?;
        let records = reader.poll()?;
        Ok(reader.summary(records))
    }
}

/// Per producer (id, epoch), the records of its open transaction on one partition.
type OpenTransactions = std::collections::HashMap<(i64, i16), Vec<KafkaRecord>>;

/// A `read_committed` reading of a topic, decided by the test itself from the log's control batches: Tansu
/// 0.6.0 hides open transactions from `read_committed` fetches but does not list aborted ones, so a Kafka client
/// would see aborted records. Each partition is fetched raw (`read_uncommitted`, with the control batches) from
/// where the last poll stopped until a fetch returns nothing; a transactional record belongs to its producer's
/// open transaction on that partition until a COMMIT marker (visible) or an ABORT marker (dropped) of that
/// producer ends it.
pub struct CommittedReader {
    conn: weir_taskmanager::builtins::kafka::wire::Connection,
    topic: String,
    /// Per partition: the next offset to fetch, and per producer the records of its open transaction.
    partitions: Vec<(i64, OpenTransactions)>,
    aborted: usize,
}

impl CommittedReader {
    /// A reader of `topic`'s partitions `0..partitions` from their start.
    pub fn new(broker: &KafkaBroker, topic: &str, partitions: i32) -> Result<CommittedReader> {
        let conn =
            weir_taskmanager::builtins::kafka::wire::Connection::connect(&broker.bootstrap(), Duration::from_secs(10))?;
        let partitions = (0..partitions).map(|_| (0, Default::default())).collect();
        Ok(CommittedReader { conn, topic: topic.to_string(), partitions, aborted: 0 })
    }

    /// The records that became visible since the last poll, by partition and offset.
    pub fn poll(&mut self) -> Result<Vec<KafkaRecord>> {
        use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
        use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
        use kafka_protocol::protocol::StrBytes;
        use kafka_protocol::records::RecordBatchDecoder;
        let topic = self.topic.clone();
        let mut out = Vec::new();
        for (partition, (offset, open)) in self.partitions.iter_mut().enumerate() {
            let partition = partition as i32;
            loop {
                let req = FetchRequest::default()
                    .with_replica_id(BrokerId(-1))
                    // Tansu answers nothing at all to a fetch that may not wait.
                    .with_max_wait_ms(50)
                    .with_min_bytes(0)
                    .with_max_bytes(64 << 20)
                    .with_isolation_level(0)
                    .with_topics(vec![FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                        .with_partitions(vec![FetchPartition::default()
                            .with_partition(partition)
                            .with_fetch_offset(*offset)
                            .with_partition_max_bytes(64 << 20)])]);
                let resp = self.conn.send("Fetch", 11, &req)?;
                let data = resp
                    .responses
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .find(|p| p.partition_index == partition)
                    .ok_or_else(|| anyhow!("fetch of {topic}/{partition}: no answer for the partition"))?;
                weir_taskmanager::builtins::kafka::wire::check("Fetch", data.error_code)?;
                let Some(mut bytes) = data.records.clone().filter(|b| !b.is_empty()) else { break };
                let sets = RecordBatchDecoder::decode_all(&mut bytes)
                    .map_err(|e| anyhow!("decoding {topic}/{partition} at {offset}: {e}"))?;
                let mut last = *offset - 1;
                for r in sets.into_iter().flat_map(|s| s.records) {
                    last = last.max(r.offset);
                    if r.offset < *offset {
                        continue;
                    }
                    let producer = (r.producer_id, r.producer_epoch);
                    if r.control {
                        // A control record's key: version (i16), then type (i16): 0 abort, 1 commit.
                        let kind = r.key.as_ref().filter(|k| k.len() >= 4).map(|k| i16::from_be_bytes([k[2], k[3]]));
                        let records = open.remove(&producer).unwrap_or_default();
                        match kind {
                            Some(1) => out.extend(records),
                            Some(0) => self.aborted += records.len(),
                            other => bail!("{topic}/{partition} offset {}: control record of type {other:?}", r.offset),
                        }
                        continue;
                    }
                    let record = KafkaRecord {
                        partition,
                        offset: r.offset,
                        key: r.key.map(|k| k.to_vec()),
                        value: r.value.map(|v| v.to_vec()),
                        headers: r
                            .headers
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.as_ref().map(|v| v.to_vec())))
                            .collect(),
                        timestamp: r.timestamp,
                    };
                    if r.transactional {
                        open.entry(producer).or_default().push(record);
                    } else {
                        out.push(record);
                    }
                }
                if last < *offset {
                    break;
                }
                *offset = last + 1;
            }
        }
        out.sort_by_key(|r| (r.partition, r.offset));
        Ok(out)
    }

    /// `records` with what is aborted and still open so far.
    pub fn summary(&self, records: Vec<KafkaRecord>) -> Committed {
        let mut c = Committed { records, aborted: self.aborted, ..Default::default() };
        for (partition, (_, open)) in self.partitions.iter().enumerate() {
            for ((producer, epoch), records) in open {
                c.open += records.len();
                c.open_transactions.push((partition as i32, *producer, *epoch));
            }
        }
        c
    }
}

impl CommittedReader {
    /// The records of the transactions still open after the last poll (written, neither committed nor aborted
    /// yet), by partition and offset.
    pub fn open_records(&self) -> Vec<KafkaRecord> {
        let mut out: Vec<KafkaRecord> =
            self.partitions.iter().flat_map(|(_, open)| open.values().flatten().cloned()).collect();
        out.sort_by_key(|r| (r.partition, r.offset));
        out
    }
}

impl KafkaBroker {
    /// The (partition, offset) of every record the broker itself returns to a `read_committed` fetch (isolation
    /// level 1) of `topic`'s partitions `0..partitions`, from the start until a fetch returns nothing new;
    /// control records left out. The broker's own rule, next to [`CommittedReader`]'s: it stops before the first
    /// record of an open transaction (Tansu 0.6.0 does not leave out aborted records).
    pub fn fetch_read_committed(&self, topic: &str, partitions: i32) -> Result<Vec<(i32, i64)>> {
        use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
        use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
        use kafka_protocol::protocol::StrBytes;
        use kafka_protocol::records::RecordBatchDecoder;
        let mut conn =
            weir_taskmanager::builtins::kafka::wire::Connection::connect(&self.bootstrap(), Duration::from_secs(10))?;
        let mut out = Vec::new();
        for partition in 0..partitions {
            let mut offset = 0i64;
            loop {
                let req = FetchRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_max_wait_ms(50)
                    .with_min_bytes(0)
                    .with_max_bytes(64 << 20)
                    .with_isolation_level(1)
                    .with_topics(vec![FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partitions(vec![FetchPartition::default()
                            .with_partition(partition)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(64 << 20)])]);
                let resp = conn.send("Fetch", 11, &req)?;
                let data = resp
                    .responses
                    .iter()
                    .flat_map(|t| &t.partitions)
                    .find(|p| p.partition_index == partition)
                    .ok_or_else(|| anyhow!("fetch of {topic}/{partition}: no answer for the partition"))?;
                weir_taskmanager::builtins::kafka::wire::check("Fetch", data.error_code)?;
                let Some(mut bytes) = data.records.clone().filter(|b| !b.is_empty()) else { break };
                let sets = RecordBatchDecoder::decode_all(&mut bytes)
                    .map_err(|e| anyhow!("decoding {topic}/{partition} at {offset}: {e}"))?;
                let mut last = offset - 1;
                for r in sets.into_iter().flat_map(|s| s.records) {
                    last = last.max(r.offset);
                    if r.offset >= offset && !r.control {
                        out.push((partition, r.offset));
                    }
                }
                if last < offset {
                    break;
                }
                offset = last + 1;
            }
        }
        Ok(out)
    }
}

/// How long [`KafkaBroker::read_all`] waits for more records once the high watermarks are reached.
pub const QUIET: Duration = Duration::from_millis(500);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tansu_stores_what_is_produced_per_partition_in_order() {
        let broker = KafkaBroker::start().unwrap();
        broker.create_topic("t", 3).unwrap();
        let values: Vec<Vec<u8>> = (0..30).map(|i: u32| format!("v{i}").into_bytes()).collect();
        let records: Vec<ToProduce<'_>> =
            values.iter().enumerate().map(|(i, v)| ((i % 3) as i32, Some(&b"k"[..]), v.as_slice())).collect();
        broker.produce("t", &records).unwrap();
        let got = broker.read_all("t", 3).unwrap();
        assert_eq!(got.len(), 30, "{got:?}\n{}", broker.tail(3));
        for p in 0..3 {
            let mine: Vec<_> = got.iter().filter(|r| r.partition == p).collect();
            let want: Vec<_> = (0..30).filter(|i| i % 3 == p as usize).map(|i| values[i].clone()).collect();
            assert_eq!(mine.iter().map(|r| r.value.clone().unwrap()).collect::<Vec<_>>(), want);
            assert!(mine.windows(2).all(|w| w[0].offset < w[1].offset));
        }
        // Records batched as a producer batches them (Weir's sink will): Tansu's high watermark falls short of
        // them, and reading on until the partition is quiet still finds every one.
        let batching: BaseProducer =
            ClientConfig::new().set("bootstrap.servers", broker.bootstrap()).set("linger.ms", "50").create().unwrap();
        for i in 0..5 {
            let v = format!("b{i}");
            batching.send(BaseRecord::<[u8], [u8]>::to("t").partition(0).payload(v.as_bytes())).unwrap();
        }
        batching.flush(Duration::from_secs(30)).unwrap();
        let got = broker.read_all("t", 3).unwrap();
        let tail: Vec<_> = got.iter().filter(|r| r.partition == 0).skip(10).map(|r| r.value.clone().unwrap()).collect();
        assert_eq!(tail, (0..5).map(|i| format!("b{i}").into_bytes()).collect::<Vec<_>>());
    }

    #[test]
    fn the_read_committed_check_sees_committed_and_plain_records_only() {
        let broker = KafkaBroker::start().unwrap();
        broker.create_topic("t", 2).unwrap();
        broker.produce("t", &[(0, None, &b"plain"[..])]).unwrap();
        let txn = |id: &str| -> BaseProducer {
            let p: BaseProducer = ClientConfig::new()
                .set("bootstrap.servers", broker.bootstrap())
                .set("transactional.id", id)
                .create()
                .unwrap();
            p.init_transactions(Duration::from_secs(10)).unwrap();
            p.begin_transaction().unwrap();
            p
        };
        let send = |p: &BaseProducer, part: i32, v: &str| {
            p.send(BaseRecord::<[u8], [u8]>::to("t").partition(part).key(b"k").payload(v.as_bytes())).unwrap()
        };
        let committed = txn("c");
        let aborted = txn("a");
        let open = txn("o");
        send(&committed, 0, "c1");
        send(&aborted, 0, "a1");
        send(&committed, 1, "c2");
        send(&aborted, 1, "a2");
        send(&open, 1, "o1");
        open.flush(Duration::from_secs(10)).unwrap();
        aborted.flush(Duration::from_secs(10)).unwrap();
        aborted.abort_transaction(Duration::from_secs(10)).unwrap();
        committed.commit_transaction(Duration::from_secs(10)).unwrap();
        let read = broker.read_committed("t", 2).unwrap();
        let values: Vec<_> =
            read.records.iter().map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap()).collect();
        assert_eq!(values, ["plain", "c1", "c2"], "{read:?}");
        assert_eq!((read.aborted, read.open, read.open_transactions.len()), (2, 1, 1), "{read:?}");
    }
}
