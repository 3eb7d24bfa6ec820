//! Kafka on real processes: a Tansu broker (`scripts/setup.sh` installs it) on a loopback port, and Weir jobs
//! that read its topics with the `kafka` source.
//!
//! - A bounded 4-partition topic counted by key at parallelism 2: every record counted once.
//! - An unbounded one, half its records produced before a task manager is SIGKILLed after a checkpoint and half
//!   after: every running count `key,i` committed exactly once (the source resumes at the checkpoint's offsets).
//! - Rescaled 2 → 3 → 1 through stop-with-savepoint, records produced in between: every running count
//!   committed exactly once over the three jobs' outputs (the partitions' offsets move with the union state).
//! - A broker that is not there, and a topic that does not exist: the job fails (no restarts) within a bounded
//!   wait, with an error naming the source, the brokers and what was missing.
//! - A spec naming two starting points is refused at submission, naming the operator and the field.
//!
//! Build the binaries first: `cargo build --release --workspace --bins`.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::time::Duration;
use weir_integration_tests::kafka::{KafkaBroker, ToProduce};
use weir_integration_tests::{read_sink_lines, read_sink_output, wait_until, Cluster, ClusterOptions, JobState};

/// The keys of `n` records: record i has key i mod 40 (8 bytes, big-endian: the sink writes it as that number).
fn keys(n: u64) -> Vec<[u8; 8]> {
    (0..n).map(|i| (i % 40).to_be_bytes()).collect()
}

/// Records with these keys and value `1`, record i in partition i mod 4 (of topic `events`).
fn records(keys: &[[u8; 8]]) -> Vec<ToProduce<'_>> {
    keys.iter().enumerate().map(|(i, k)| ((i % 4) as i32, Some(&k[..]), &b"1"[..])).collect()
}

/// `kafka` (bounded, from the earliest offsets) → `keyed-count` → `file-sink`.
fn count_spec(name: &str, broker: &KafkaBroker, topic: &str, out: &Path, start: &str) -> String {
    format!(
        "name: {name}\n\
         parallelism: 2\n\
         checkpointing: {{ interval_ms: 300 }}\n\
         operators:\n  \
           - {{ uid: events, kind: kafka, config: {{ bootstrap_servers: {bootstrap:?}, topics: [{topic}], \
                bounded: true, start: {start} }} }}\n  \
           - {{ uid: counts, kind: keyed-count, input: events }}\n  \
           - {{ uid: out, kind: file-sink, input: counts, config: {{ path: {out:?} }} }}\n",
        bootstrap = broker.bootstrap(),
    )
}

#[test]
fn a_bounded_topic_is_counted_exactly() -> Result<()> {
    let broker = KafkaBroker::start()?;
    broker.create_topic("events", 4)?;
    // Record i has key i mod 40 (8 bytes, big-endian: the sink writes it as that number) and goes to partition
    // i mod 4, so each partition holds ten keys 20 times. (Tansu takes about 4 ms a record sent alone.)
    let keys = keys(800);
    let records = records(&keys);
    broker.produce("events", &records)?;

    let mut cluster = Cluster::start(ClusterOptions::new(1, 2))?;
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let id = cluster.submit(&count_spec("kafka-count", &broker, "events", &out, "earliest"))?;
    let job = cluster.wait_for_state(&id, &[JobState::Finished, JobState::Failed], Duration::from_secs(60))?;
    if weir_integration_tests::job_state(&job) != Some(JobState::Finished) {
        bail!("the job did not finish: {job:?}\n{}", broker.tail(20));
    }
    let counts = read_sink_output(&out).context("reading the counts")?;
    let want: std::collections::HashMap<u64, u64> = (0..40).map(|k| (k, 20)).collect();
    assert_eq!(counts, want, "every record counted once");
    cluster.stop();
    Ok(())
}

#[test]
fn an_unbounded_topic_is_counted_exactly_once_through_a_taskmanager_kill() -> Result<()> {
    use rand::SeedableRng;
    let broker = KafkaBroker::start()?;
    broker.create_topic("events", 4)?;
    let keys = keys(800);
    let records = records(&keys);
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    let out = cluster.output_dir("counts")?;
    let spec = format!(
        "name: kafka-kill\n\
         parallelism: 2\n\
         checkpointing: {{ interval_ms: 300 }}\n\
         restart: {{ strategy: fixed-delay, attempts: 20, delay_ms: 200 }}\n\
         operators:\n  \
           - {{ uid: events, kind: kafka, config: {{ bootstrap_servers: {bootstrap:?}, topics: [events] }} }}\n  \
           - {{ uid: counts, kind: keyed-count, input: events, config: {{ emit: updates }} }}\n  \
           - {{ uid: out, kind: file-sink, input: counts, config: {{ path: {out:?} }} }}\n",
        bootstrap = broker.bootstrap(),
    );
    let id = cluster.submit(&spec)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    broker.produce("events", &records[..400])?;
    let before = cluster.wait_for_checkpoint_after(&id, 0, Duration::from_secs(30))?;
    let before = cluster.wait_for_checkpoint_after(&id, before.id, Duration::from_secs(30))?;
    let victim = cluster.kill_random_busy_taskmanager(&mut rand::rngs::StdRng::seed_from_u64(7))?;
    eprintln!("killed tm-{victim} after checkpoint {}", before.id);
    cluster.start_taskmanager()?;
    broker.produce("events", &records[400..])?;
    // Every key has 20 records: its running counts 1 … 20, each committed once.
    let by_key = wait_until("for every running count to be committed", Duration::from_secs(90), || {
        let by_key = running_counts(&[&out])?;
        Ok((by_key.values().map(Vec::len).sum::<usize>() >= 800).then_some(by_key))
    })?;
    for (key, counts) in &by_key {
        assert_eq!(*counts, (1..=20).collect::<Vec<u64>>(), "key {key}: its running counts, each once");
    }
    assert_eq!(by_key.len(), 40);
    let job = cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    assert!(job.restarts >= 1, "the kill forced no restart: {job:?}");
    cluster.stop();
    Ok(())
}

/// Unbounded `kafka` → `keyed-count` (running counts) → `file-sink`, at `p`.
fn updates_spec(name: &str, broker: &KafkaBroker, p: u32, out: &Path) -> String {
    format!(
        "name: {name}\n\
         parallelism: {p}\n\
         checkpointing: {{ interval_ms: 300 }}\n\
         restart: {{ strategy: fixed-delay, attempts: 20, delay_ms: 200 }}\n\
         operators:\n  \
           - {{ uid: events, kind: kafka, config: {{ bootstrap_servers: {bootstrap:?}, topics: [events] }} }}\n  \
           - {{ uid: counts, kind: keyed-count, input: events, config: {{ emit: updates }} }}\n  \
           - {{ uid: out, kind: file-sink, input: counts, parallelism: 1, config: {{ path: {out:?} }} }}\n",
        bootstrap = broker.bootstrap(),
    )
}

/// Each key's running counts committed under `dirs`, sorted.
fn running_counts(dirs: &[&Path]) -> Result<std::collections::BTreeMap<u64, Vec<u64>>> {
    let mut by_key: std::collections::BTreeMap<u64, Vec<u64>> = std::collections::BTreeMap::new();
    for dir in dirs {
        for (key, count, _, _) in read_sink_lines(dir)?.lines {
            by_key.entry(key).or_default().push(count);
        }
    }
    by_key.values_mut().for_each(|c| c.sort_unstable());
    Ok(by_key)
}

#[test]
fn rescaling_2_3_1_through_savepoints_counts_every_record_once() -> Result<()> {
    let broker = KafkaBroker::start()?;
    broker.create_topic("events", 4)?;
    let keys = keys(800);
    let records = records(&keys);
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    let outs: Vec<_> = ["p2", "p3", "p1"].iter().map(|n| cluster.output_dir(n)).collect::<Result<_>>()?;
    let chunks = [&records[..300], &records[300..600], &records[600..]];
    let mut savepoint: Option<String> = None;
    let mut last = String::new();
    for (i, p) in [2u32, 3, 1].into_iter().enumerate() {
        let spec = updates_spec(&format!("kafka-rescale-{p}"), &broker, p, &outs[i]);
        let id = match &savepoint {
            None => cluster.submit(&spec)?,
            Some(sp) => cluster.submit_from(&spec, sp, "no-claim", false)?,
        };
        cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
        broker.produce("events", chunks[i])?;
        // Everything produced so far is committed before the next stop (a stop would commit it too; waiting
        // makes each job read some of the records).
        let want: usize = chunks[..=i].iter().map(|c| c.len()).sum();
        let dirs: Vec<&Path> = outs[..=i].iter().map(|d| d.as_path()).collect();
        wait_until("for the records so far to be counted", Duration::from_secs(60), || {
            let n: usize = running_counts(&dirs)?.values().map(Vec::len).sum();
            Ok((n >= want).then_some(()))
        })?;
        if i < 2 {
            savepoint = Some(cluster.stop_with_savepoint(&id, false, "canonical")?);
        } else {
            last = id;
        }
    }
    let dirs: Vec<&Path> = outs.iter().map(|d| d.as_path()).collect();
    let by_key = running_counts(&dirs)?;
    assert_eq!(by_key.len(), 40);
    for (key, counts) in &by_key {
        assert_eq!(*counts, (1..=20).collect::<Vec<u64>>(), "key {key}: its running counts, each once");
    }
    cluster.cancel(&last)?;
    cluster.stop();
    Ok(())
}

/// Submits a one-source job reading `topic` from `bootstrap` without restarts, and returns its failure.
fn failure_of(cluster: &mut Cluster, name: &str, bootstrap: &str, topic: &str) -> Result<String> {
    let spec = format!(
        "name: {name}\n\
         restart: {{ strategy: none }}\n\
         operators:\n  \
           - {{ uid: events, kind: kafka, config: {{ bootstrap_servers: {bootstrap:?}, topics: [{topic}] }} }}\n  \
           - {{ uid: out, kind: blackhole, input: events }}\n"
    );
    let id = cluster.submit(&spec)?;
    let job = cluster.wait_for_state(&id, &[JobState::Failed], Duration::from_secs(60))?;
    Ok(job.failure)
}

#[test]
fn a_missing_broker_or_topic_fails_the_job_with_a_clear_error() -> Result<()> {
    let broker = KafkaBroker::start()?;
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2))?;
    let nowhere = format!("127.0.0.1:{}", weir_integration_tests::process::free_port()?);
    let err = failure_of(&mut cluster, "kafka-no-broker", &nowhere, "events")?;
    assert!(err.contains("kafka source \"events\"") && err.contains(&nowhere) && err.contains("metadata"), "{err}");
    let err = failure_of(&mut cluster, "kafka-no-topic", &broker.bootstrap(), "absent")?;
    assert!(err.contains("topic \"absent\" does not exist") && err.contains(&broker.bootstrap()), "{err}");
    cluster.stop();
    Ok(())
}

#[test]
fn a_spec_naming_two_starting_points_is_refused() -> Result<()> {
    let broker = KafkaBroker::start()?;
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2))?;
    let dir = tempfile::tempdir()?;
    let start = "{ latest: true, offsets: { events: { 0: 5 } } }";
    let err = match cluster.submit(&count_spec("kafka-bad", &broker, "events", &dir.path().join("out"), start)) {
        Ok(id) => bail!("job {id} was accepted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("events") && err.contains("start") && err.contains("exactly one"), "{err}");
    cluster.stop();
    Ok(())
}
