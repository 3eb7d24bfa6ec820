//! The Kafka benchmark: how fast a Weir job reads a topic, against the physical limit of this machine and
//! broker — plain consumers of the same client library (librdkafka) reading the same topic — and what
//! exactly-once output costs.
//!
//! A Tansu broker (memory storage) gets `--records` records in a topic of `--partitions` partitions, produced in
//! batches, then one record alone per partition (Tansu's high watermark is exact only after a batch of one: the
//! bounded readers below stop at it). Then `--rounds` rounds, each in turn:
//!
//! - `consumer`: `--parallelism` threads, each a `BaseConsumer` assigned the partitions the Kafka source's
//!   owner rule gives that subtask, reading from the start to the high watermark: the limit of a reading job.
//! - `pipe`: the same, each thread also writing every record to another topic with an idempotent producer
//!   (flushed at the end): the limit of a job that reads and writes Kafka.
//! - `blackhole`: the job `kafka` (bounded) → `blackhole` at `--parallelism`, RUNNING → FINISHED.
//! - `count-eo`: `kafka` (bounded) → `keyed-count` (`emit: updates`: one output record per input record) →
//!   exactly-once `kafka-sink`, a checkpoint every `--checkpoint-ms`; RUNNING → FINISHED (the final checkpoint
//!   commits the last transactions), and the output checked complete with the `read_committed` check.
//!
//! Each prints records/s; the summary gives medians and the jobs' rates as a share of the consumers'.
//!
//! `--visibility` instead measures the delay exactly-once adds to output: records produced at `--rate` per
//! second for `--seconds` into an unbounded `kafka` → `keyed-count` → exactly-once `kafka-sink` job, a
//! `read_committed` reader polling the output; for each input record, the time from its produce to its count
//! being visible. Prints the median, 90th percentile and maximum.

use anyhow::{bail, Context, Result};
use clap::Parser;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use weir_integration_tests::kafka::{CommittedReader, KafkaBroker};
use weir_integration_tests::{describe_job, job_state, Cluster, ClusterOptions, JobState};

/// Measures Weir's Kafka source and sink against plain consumers.
#[derive(Parser)]
#[command(name = "weir-kafka-bench")]
struct Args {
    /// Records in the input topic.
    #[arg(long, default_value_t = 2_000_000)]
    records: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Partitions of the input and output topics.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Parallelism of the jobs, and consumer threads of the baseline.
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Rounds (each runs every measurement once, in turn).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Checkpoint interval of the jobs, ms.
    #[arg(long, default_value_t = 10_000)]
    checkpoint_ms: u64,
    /// Which measurements: consumer, blackhole, pipe, count-eo (comma-separated).
    #[arg(long, default_value = "consumer,blackhole,pipe,count-eo")]
    only: String,
    /// Instead: the visibility delay of exactly-once output (see the module docs).
    #[arg(long)]
    visibility: bool,
    /// Input records per second of `--visibility`.
    #[arg(long, default_value_t = 2_000)]
    rate: u64,
    /// Seconds of `--visibility`.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.visibility {
        return visibility(&args);
    }
    let broker = KafkaBroker::start()?;
    broker.create_topic("in", args.partitions as u32)?;
    let began = Instant::now();
    fill(&broker, "in", args.records, args.keys, args.partitions)?;
    let took = began.elapsed().as_secs_f64();
    println!(
        "filled: {} records in {took:.1} s ({:.0} records/s into Tansu)",
        args.records,
        args.records as f64 / took
    );
    let only: Vec<&str> = args.only.split(',').map(str::trim).collect();
    let mut rates: HashMap<&str, Vec<f64>> = HashMap::new();
    for round in 1..=args.rounds {
        for &what in &only {
            let rate = match what {
                "consumer" => consumers(&broker, &args, None)?,
                "pipe" => {
                    let to = format!("pipe-{round}");
                    broker.create_topic(&to, args.partitions as u32)?;
                    consumers(&broker, &args, Some(&to))?
                }
                "blackhole" => job(&broker, &args, round, false)?,
                "count-eo" => job(&broker, &args, round, true)?,
                other => bail!("unknown measurement {other:?}"),
            };
            println!("round {round} {what}: {rate:.0} records/s");
            rates.entry(what).or_default().push(rate);
        }
    }
    println!("--- medians of {} rounds, {} records, parallelism {}", args.rounds, args.records, args.parallelism);
    for &what in &only {
        println!("{what}: {:.0} records/s", median(&rates[what]));
    }
    // Each job against its limit in the same round (the machine's speed drifts between rounds).
    for (job, limit) in [("blackhole", "consumer"), ("count-eo", "pipe")] {
        if let (Some(j), Some(l)) = (rates.get(job), rates.get(limit)) {
            let ratios: Vec<f64> = j.iter().zip(l).map(|(j, l)| 100.0 * j / l).collect();
            println!("{job} / {limit}, per round: {ratios:.0?} %, median {:.0} %", median(&ratios));
        }
    }
    Ok(())
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Key of record `i`: `i mod keys`, 8 bytes big-endian.
fn key(i: u64, keys: u64) -> [u8; 8] {
    (i % keys).to_be_bytes()
}

/// Produces `n` records round-robin over the partitions in the client's batches, then one record alone per
/// partition (which makes Tansu's high watermark exact).
fn fill(broker: &KafkaBroker, topic: &str, n: u64, keys: u64, partitions: i32) -> Result<()> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap())
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .create()?;
    let send = |i: u64, partition: i32| -> Result<()> {
        let k = key(i, keys);
        let mut r = BaseRecord::<[u8], [u8]>::to(topic).partition(partition).key(&k[..]).payload(&b"1"[..]);
        loop {
            match producer.send(r) {
                Ok(()) => return Ok(()),
                Err((e, back)) if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) => {
                    producer.poll(Duration::from_millis(10));
                    r = back;
                }
                Err((e, _)) => bail!("producing: {e}"),
            }
        }
    };
    let batched = n.saturating_sub(partitions as u64);
    for i in 0..batched {
        send(i, (i % partitions as u64) as i32)?;
    }
    producer.flush(Duration::from_secs(600)).context("flushing the input")?;
    for p in 0..partitions {
        send(batched + p as u64, p)?;
        producer.flush(Duration::from_secs(60)).context("flushing a partition's last record")?;
    }
    Ok(())
}

/// `--parallelism` plain consumers, each reading the partitions the source's owner rule gives its subtask to
/// their high watermarks (and writing each record to topic `pipe`, if given), at once: records/s over all.
fn consumers(broker: &KafkaBroker, args: &Args, pipe: Option<&str>) -> Result<f64> {
    let bootstrap = broker.bootstrap();
    let bootstrap = bootstrap.as_str();
    let began = Instant::now();
    let total: u64 = std::thread::scope(|s| -> Result<u64> {
        let handles: Vec<_> = (0..args.parallelism)
            .map(|subtask| {
                s.spawn(move || -> Result<u64> {
                    let mine: Vec<i32> = (0..args.partitions)
                        .filter(|&p| {
                            weir_taskmanager::builtins::kafka::partition_owner("in", p, args.parallelism) == subtask
                        })
                        .collect();
                    read_to_end(bootstrap, "in", &mine, pipe)
                })
            })
            .collect();
        let mut total = 0;
        for h in handles {
            total += h.join().map_err(|_| anyhow::anyhow!("a consumer thread panicked"))??;
        }
        Ok(total)
    })?;
    let secs = began.elapsed().as_secs_f64();
    if total != args.records {
        bail!("the consumers read {total} records of {}", args.records);
    }
    Ok(total as f64 / secs)
}

/// Reads `partitions` of `topic` from their start to their high watermarks; the number of records.
fn read_to_end(bootstrap: &str, topic: &str, partitions: &[i32], pipe: Option<&str>) -> Result<u64> {
    let producer: Option<BaseProducer> = match pipe {
        Some(_) => Some(
            ClientConfig::new()
                .set("bootstrap.servers", bootstrap)
                .set("enable.idempotence", "true")
                .set("linger.ms", "5")
                .create()?,
        ),
        None => None,
    };
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "weir-bench-baseline")
        .set("enable.auto.commit", "false")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    let mut ends = HashMap::new();
    for &p in partitions {
        let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(10))?;
        ends.insert(p, high);
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let mut n = 0u64;
    let mut open: Vec<i32> = partitions.iter().copied().filter(|p| ends[p] > 0).collect();
    let deadline = Instant::now() + Duration::from_secs(600);
    while !open.is_empty() {
        if Instant::now() > deadline {
            bail!("reading {topic}: partitions {open:?} not at their end after 600 s");
        }
        let Some(m) = consumer.poll(Duration::from_millis(100)) else { continue };
        let m = m?;
        n += 1;
        if let (Some(producer), Some(to)) = (&producer, pipe) {
            let mut r = BaseRecord::<[u8], [u8]>::to(to);
            r.key = rdkafka::Message::key(&m);
            r.payload = rdkafka::Message::payload(&m);
            loop {
                match producer.send(r) {
                    Ok(()) => break,
                    Err((e, back)) if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::QueueFull) => {
                        producer.poll(Duration::from_millis(5));
                        r = back;
                    }
                    Err((e, _)) => bail!("producing: {e}"),
                }
            }
            producer.poll(Duration::ZERO);
        }
        if rdkafka::Message::offset(&m) + 1 >= ends[&rdkafka::Message::partition(&m)] {
            let p = rdkafka::Message::partition(&m);
            open.retain(|&q| q != p);
        }
    }
    if let Some(producer) = &producer {
        producer.flush(Duration::from_secs(600)).context("flushing the pipe")?;
    }
    Ok(n)
}

/// One bounded job over the topic: → `blackhole`, or → `keyed-count` → exactly-once `kafka-sink`; records/s from
/// RUNNING to FINISHED.
fn job(broker: &KafkaBroker, args: &Args, round: usize, count: bool) -> Result<f64> {
    let out = format!("out-{round}");
    let tail = if count {
        broker.create_topic(&out, args.partitions as u32)?;
        format!(
            "  - {{ uid: counts, kind: keyed-count, input: events, config: {{ emit: updates }} }}\n  \
               - {{ uid: out, kind: kafka-sink, input: counts, config: {{ bootstrap_servers: {b:?}, topic: {out}, \
                    delivery: exactly-once, transactional_id_prefix: bench-{round} }} }}\n",
            b = broker.bootstrap()
        )
    } else {
        "  - { uid: out, kind: blackhole, input: events }\n".to_string()
    };
    let spec = format!(
        "name: kafka-bench\n\
         parallelism: {p}\n\
         checkpointing: {{ interval_ms: {c} }}\n\
         operators:\n  \
           - {{ uid: events, kind: kafka, config: {{ bootstrap_servers: {b:?}, topics: [in], bounded: true }} }}\n\
         {tail}",
        p = args.parallelism,
        c = args.checkpoint_ms,
        b = broker.bootstrap(),
    );
    let mut cluster = Cluster::start(ClusterOptions::new(1, args.parallelism.max(2)))?;
    let id = cluster.submit(&spec)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
    let running = Instant::now();
    let job = cluster.wait_for_state(&id, &[JobState::Finished, JobState::Failed], Duration::from_secs(1800))?;
    let secs = running.elapsed().as_secs_f64();
    if job_state(&job) != Some(JobState::Finished) {
        bail!("the job did not finish: {}", describe_job(&job));
    }
    cluster.stop();
    if count {
        let read = broker.read_committed(&out, args.partitions)?;
        if read.records.len() as u64 != args.records || read.open > 0 {
            bail!("{} records committed of {}, {} left open", read.records.len(), args.records, read.open);
        }
    }
    Ok(args.records as f64 / secs)
}

/// The visibility delay of exactly-once output (see the module docs).
fn visibility(args: &Args) -> Result<()> {
    let broker = KafkaBroker::start()?;
    broker.create_topic("in", args.partitions as u32)?;
    broker.create_topic("out", args.partitions as u32)?;
    let spec = format!(
        "name: kafka-visibility\n\
         parallelism: {p}\n\
         checkpointing: {{ interval_ms: {c} }}\n\
         operators:\n  \
           - {{ uid: events, kind: kafka, config: {{ bootstrap_servers: {b:?}, topics: [in] }} }}\n  \
           - {{ uid: counts, kind: keyed-count, input: events, config: {{ emit: updates }} }}\n  \
           - {{ uid: out, kind: kafka-sink, input: counts, config: {{ bootstrap_servers: {b:?}, topic: out, \
                delivery: exactly-once, transactional_id_prefix: visibility }} }}\n",
        p = args.parallelism,
        c = args.checkpoint_ms,
        b = broker.bootstrap(),
    );
    let mut cluster = Cluster::start(ClusterOptions::new(1, args.parallelism.max(2)))?;
    let id = cluster.submit(&spec)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
    // Record i has key i (each key once): its count `i,1` in the output stands for it alone.
    let producer: BaseProducer =
        ClientConfig::new().set("bootstrap.servers", broker.bootstrap()).set("linger.ms", "1").create()?;
    let total = args.rate * args.seconds;
    let mut produced_at: Vec<Option<Instant>> = vec![None; total as usize];
    let mut seen_at: Vec<Option<Instant>> = vec![None; total as usize];
    let mut reader = CommittedReader::new(&broker, "out", args.partitions)?;
    let start = Instant::now();
    let mut next = 0u64;
    let mut last_read = Instant::now();
    while next < total || seen_at.iter().any(Option::is_none) {
        let due = ((start.elapsed().as_secs_f64() * args.rate as f64) as u64).min(total);
        while next < due {
            let k = next.to_be_bytes();
            let r = BaseRecord::<[u8], [u8]>::to("in")
                .partition((next % args.partitions as u64) as i32)
                .key(&k[..])
                .payload(&b"1"[..]);
            producer.send(r).map_err(|(e, _)| e)?;
            produced_at[next as usize] = Some(Instant::now());
            next += 1;
        }
        producer.poll(Duration::ZERO);
        if last_read.elapsed() >= Duration::from_millis(50) {
            last_read = Instant::now();
            let now = Instant::now();
            for r in reader.poll()? {
                let line = String::from_utf8(r.value.unwrap_or_default())?;
                let Some((k, _)) = line.split_once(',') else { continue };
                let i: usize = k.parse()?;
                if i < seen_at.len() && seen_at[i].is_none() {
                    seen_at[i] = Some(now);
                }
            }
        }
        if start.elapsed() > Duration::from_secs(args.seconds * 3 + 120) {
            bail!("not every record became visible");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut delays: Vec<f64> = produced_at
        .iter()
        .zip(&seen_at)
        .filter_map(|(p, s)| Some(s.as_ref()?.duration_since(*p.as_ref()?).as_secs_f64() * 1000.0))
        .collect();
    delays.sort_by(f64::total_cmp);
    let at = |q: f64| delays[((delays.len() - 1) as f64 * q) as usize];
    println!(
        "visibility of exactly-once output, checkpoint every {} ms, {} records at {}/s: median {:.0} ms, p90 {:.0} ms, \
         max {:.0} ms (the reader polls every 50 ms)",
        args.checkpoint_ms, total, args.rate, at(0.5), at(0.9), at(1.0)
    );
    cluster.cancel(&id)?;
    cluster.stop();
    Ok(())
}
