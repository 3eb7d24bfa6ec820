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
use crate::s3::tools_dir;
use anyhow::{anyhow, bail, Context, Result};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
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
}

/// A record for [`KafkaBroker::produce`]: its partition, key and value.
pub type ToProduce<'a> = (i32, Option<&'a [u8]>, &'a [u8]);

/// A Tansu broker on a free loopback port, killed when dropped.
pub struct KafkaBroker {
    process: Process,
    addr: SocketAddr,
    _logs: tempfile::TempDir,
}

/// The Tansu binary `scripts/setup.sh` installs.
pub fn tansu_bin() -> PathBuf {
    tools_dir().join("bin/tansu")
}

impl KafkaBroker {
    /// Starts Tansu and waits until it answers a metadata request.
    pub fn start() -> Result<KafkaBroker> {
        let bin = tansu_bin();
        if !bin.is_file() {
            bail!("{} not found: run scripts/setup.sh first (it installs tansu)", bin.display());
        }
        // A free port can be taken by someone else between probing and binding: try a few.
        let mut last_err = None;
        for _ in 0..3 {
            let logs = tempfile::Builder::new().prefix("weir-tansu-").tempdir()?;
            let port = free_port()?;
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
            let url = format!("tcp://{addr}");
            let mut cmd = Command::new(&bin);
            cmd.arg("broker");
            // Tansu traces every request (60 000 lines for this module's test): silent unless asked for.
            if std::env::var_os("WEIR_TANSU_LOG").is_none() {
                cmd.arg("--silent");
            }
            cmd.args(["--listener-url", &url, "--advertised-listener-url", &url])
                .args(["--storage-engine", "memory://tansu/"]);
            let process = Process::spawn("tansu", cmd, &logs.path().join("tansu.log"))?;
            let mut broker = KafkaBroker { process, addr, _logs: logs };
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

    /// The broker's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
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
        let producer = self.producer()?;
        for (partition, key, value) in records {
            let mut r = BaseRecord::<[u8], [u8]>::to(topic).partition(*partition).payload(*value);
            if let Some(k) = key {
                r = r.key(*k);
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
            });
        }
        out.sort_by_key(|r| (r.partition, r.offset));
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
}
