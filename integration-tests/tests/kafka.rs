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
//! - Kafka to Kafka exactly once (a `read_committed` reading): every running count committed once through task
//!   manager kills, a job-manager failover, a broker outage and rescaling; read again two checkpoints later and
//!   after the job ended, nothing more. A crash between a checkpoint's completion and its commit leaves the
//!   checkpoint's transactions open with records no committed read sees, and the restore commits them.
//! - Event time: an idle partition and a subtask without partitions hold no window back; one subtask over two
//!   partitions 30 s apart holds its watermark at the slower one (none of its records late), and lets a partition
//!   that is idle go.
//!
//! Build the binaries first: `cargo build --release --workspace --bins`.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::time::Duration;
use weir_integration_tests::kafka::{Committed, CommittedReader, KafkaBroker, ToProduce};
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

/// Unbounded `kafka` (topic `events`) → `keyed-count` (running counts) → exactly-once `kafka-sink` (topic
/// `counts`), at `p`.
fn kafka_to_kafka_spec(name: &str, broker: &KafkaBroker, p: u32) -> String {
    format!(
        "name: {name}\n\
         parallelism: {p}\n\
         checkpointing: {{ interval_ms: 300 }}\n\
         restart: {{ strategy: fixed-delay, attempts: 20, delay_ms: 200 }}\n\
         operators:\n  \
           - {{ uid: events, kind: kafka, config: {{ bootstrap_servers: {bootstrap:?}, topics: [events] }} }}\n  \
           - {{ uid: counts, kind: keyed-count, input: events, config: {{ emit: updates }} }}\n  \
           - {{ uid: out, kind: kafka-sink, input: counts, config: {{ bootstrap_servers: {bootstrap:?}, \
                topic: counts, delivery: exactly-once, transactional_id_prefix: kc }} }}\n",
        bootstrap = broker.bootstrap(),
    )
}

/// Each key's running counts a `read_committed` reader sees in topic `counts` (values `key,count`), sorted; and
/// what it read.
fn committed_counts(broker: &KafkaBroker) -> Result<(std::collections::BTreeMap<u64, Vec<u64>>, Committed)> {
    let read = broker.read_committed("counts", 4)?;
    let mut by_key: std::collections::BTreeMap<u64, Vec<u64>> = std::collections::BTreeMap::new();
    for r in &read.records {
        let line = std::str::from_utf8(r.value.as_deref().unwrap_or_default())?;
        let (k, c) = line.split_once(',').with_context(|| format!("record value {line:?}"))?;
        // The record key is the row's key text: the line's first field.
        assert_eq!(r.key.as_deref(), Some(k.as_bytes()), "the key of {line:?}");
        by_key.entry(k.parse()?).or_default().push(c.parse()?);
    }
    by_key.values_mut().for_each(|c| c.sort_unstable());
    Ok((by_key, read))
}

/// Waits until `counts` holds `n` committed running counts, then checks that each key's are `1 ..= per_key`,
/// once each, and that no transaction is left open. It reads as soon as there are `n`: a duplicate committed
/// later would pass that, so once `two_more_checkpoints` has waited for two more completed checkpoints it reads
/// again and requires the same records. Returns the second reading.
fn expect_every_count_once(
    broker: &KafkaBroker,
    n: usize,
    per_key: u64,
    two_more_checkpoints: impl FnOnce() -> Result<()>,
) -> Result<Committed> {
    let (by_key, read) = wait_until("for every running count to be committed", Duration::from_secs(90), || {
        let (by_key, read) = committed_counts(broker)?;
        Ok((read.records.len() >= n).then_some((by_key, read)))
    })?;
    for (key, counts) in &by_key {
        assert_eq!(*counts, (1..=per_key).collect::<Vec<u64>>(), "key {key}: its running counts, each once");
    }
    assert_eq!(read.records.len(), n, "no record committed twice");
    assert_eq!(read.open, 0, "records of transactions left open: {:?}", read.open_transactions);
    two_more_checkpoints()?;
    let again = expect_no_change(broker, &read, "two checkpoints later")?;
    assert_eq!(again.open, 0, "records of transactions left open: {:?}", again.open_transactions);
    Ok(again)
}

/// Waits for two more checkpoints of job `id` to complete than have completed now.
fn two_more_checkpoints(cluster: &mut Cluster, id: &str) -> Result<()> {
    let done = cluster.job(id)?.checkpoints_completed;
    cluster.wait_for_checkpoints(id, done + 2, Duration::from_secs(30))?;
    Ok(())
}

/// Reads `counts` again and requires exactly the committed records of `before` (`when`: for the message).
fn expect_no_change(broker: &KafkaBroker, before: &Committed, when: &str) -> Result<Committed> {
    let (_, now) = committed_counts(broker)?;
    if now.records != before.records {
        let value = |r: &weir_integration_tests::kafka::KafkaRecord| {
            format!("{}@{}: {}", r.partition, r.offset, String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()))
        };
        let added: Vec<String> = now.records.iter().filter(|r| !before.records.contains(r)).map(value).collect();
        let gone: Vec<String> = before.records.iter().filter(|r| !now.records.contains(r)).map(value).collect();
        panic!(
            "the committed records changed {when}: {} then, {} now; committed since: {added:?}; gone: {gone:?}",
            before.records.len(),
            now.records.len()
        );
    }
    Ok(now)
}

/// Cancels job `id`, waits until it has ended, and requires the committed records of `before` in `counts`.
fn cancel_and_expect_no_change(
    cluster: &mut Cluster,
    id: &str,
    broker: &KafkaBroker,
    before: &Committed,
) -> Result<()> {
    cluster.cancel(id)?;
    cluster.wait_for_state(id, &[JobState::Canceled], Duration::from_secs(30))?;
    expect_no_change(broker, before, "after the job ended")?;
    Ok(())
}

#[test]
fn kafka_to_kafka_is_exactly_once_through_three_taskmanager_kills() -> Result<()> {
    use rand::SeedableRng;
    let broker = KafkaBroker::start()?;
    broker.create_topic("events", 4)?;
    broker.create_topic("counts", 4)?;
    let keys = keys(800);
    let records = records(&keys);
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    let id = cluster.submit(&kafka_to_kafka_spec("kafka-eo-kills", &broker, 2))?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut last = 0;
    for (i, chunk) in records.chunks(200).enumerate() {
        broker.produce("events", chunk)?;
        if i < 3 {
            // A kill after a checkpoint that holds some of the chunk, with transactions open and pending.
            last = cluster.wait_for_checkpoint_after(&id, last, Duration::from_secs(60))?.id;
            let victim = cluster.kill_random_busy_taskmanager(&mut rng)?;
            eprintln!("killed tm-{victim} after checkpoint {last}");
            cluster.start_taskmanager()?;
            cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
        }
    }
    let read = expect_every_count_once(&broker, 800, 20, || two_more_checkpoints(&mut cluster, &id))?;
    eprintln!("{} records committed, {} aborted", read.records.len(), read.aborted);
    let job = cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    assert!(job.restarts >= 3, "three kills, {} restarts", job.restarts);
    cancel_and_expect_no_change(&mut cluster, &id, &broker, &read)?;
    cluster.stop();
    Ok(())
}

#[test]
fn a_kill_between_checkpoint_completion_and_the_commit_is_committed_by_the_restore() -> Result<()> {
    let broker = KafkaBroker::start()?;
    broker.create_topic("events", 4)?;
    broker.create_topic("counts", 4)?;
    // Rounds of 40 records, one of each key (key k in partition k mod 4).
    let keys = keys(40);
    let round: Vec<ToProduce<'_>> = records(&keys);
    // The only task manager ends (as a SIGKILL would) at the fifth commit it makes (the third checkpoint's, its
    // two subtasks committing one each): that checkpoint completed, its transaction flushed and listed in it, and
    // not committed. Records flow, round after round, until then: every checkpoint's transactions hold some, the
    // interrupted one's too (a first checkpoint's may be empty: its barrier can pass before the source has read).
    let mut cluster = Cluster::start(ClusterOptions::new(0, 4))?;
    cluster.start_taskmanager_with_env(&[("WEIR_FAILPOINTS".into(), "sink-commit=4*off->return(exit)".into())])?;
    let id = cluster.submit(&kafka_to_kafka_spec("kafka-eo-commit", &broker, 2))?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    let mut rounds = 0u64;
    wait_until("for the task manager to end at a commit", Duration::from_secs(60), || {
        if cluster.live_taskmanagers().is_empty() {
            return Ok(Some(()));
        }
        // A round half produced would spoil the count: no retry.
        broker.produce("events", &round).map_err(|e| weir_integration_tests::Fatal(format!("{e:#}")))?;
        rounds += 1;
        Ok(None)
    })?;
    // The interrupted transactions are open and hold records, which neither a read_committed reading nor the
    // broker's own read_committed fetch sees.
    let mut reader = CommittedReader::new(&broker, "counts", 4)?;
    let visible = reader.poll()?;
    let open = reader.open_records();
    let at_crash = reader.summary(visible);
    assert!(at_crash.open > 0, "no records in open transactions at the crash: {at_crash:?}");
    let fetched = broker.fetch_read_committed("counts", 4)?;
    let seen: Vec<_> = open.iter().filter(|r| fetched.contains(&(r.partition, r.offset))).collect();
    assert!(seen.is_empty(), "the broker hands records of open transactions to read_committed: {seen:?}");
    eprintln!(
        "{} rounds produced; at the crash {} records committed, {} open in {:?}",
        rounds,
        at_crash.records.len(),
        at_crash.open,
        at_crash.open_transactions
    );

    cluster.start_taskmanager()?;
    for _ in 0..10 {
        broker.produce("events", &round)?;
    }
    let per_key = rounds + 10;
    let read =
        expect_every_count_once(&broker, 40 * per_key as usize, per_key, || two_more_checkpoints(&mut cluster, &id))?;
    // The restore committed the interrupted transactions: records open at the crash are visible now (those of the
    // transactions begun after the checkpoint were aborted).
    let committed: std::collections::BTreeSet<(i32, i64)> =
        read.records.iter().map(|r| (r.partition, r.offset)).collect();
    let now_visible = open.iter().filter(|r| committed.contains(&(r.partition, r.offset))).count();
    eprintln!("{now_visible} of the {} records open at the crash committed by the restore", open.len());
    assert!(now_visible > 0, "none of the {} records open at the crash was committed by the restore", open.len());
    let logs = cluster.all_logs();
    assert!(logs.contains("committed a transaction of the restored checkpoint"), "no commit on restore in the logs");
    cancel_and_expect_no_change(&mut cluster, &id, &broker, &read)?;
    cluster.stop();
    Ok(())
}

#[test]
fn transactions_a_failed_run_began_after_its_last_checkpoint_are_aborted_by_the_restore() -> Result<()> {
    let broker = KafkaBroker::start()?;
    broker.create_topic("events", 4)?;
    broker.create_topic("counts", 4)?;
    let keys = keys(800);
    let records = records(&keys);
    // At parallelism 1 a checkpoint uploads two tasks' snapshots (the source; the count and the sink, chained):
    // two checkpoints complete, then every upload fails. The sink still flushes a transaction at each barrier and
    // begins the next under a new id: the failed run leaves transactions with records open under ids past the
    // ones its last completed checkpoint knows.
    let mut cluster = Cluster::start(ClusterOptions::new(0, 4))?;
    cluster.start_taskmanager_with_env(&[("WEIR_FAILPOINTS".into(), "task-upload=4*off->return(error)".into())])?;
    let spec = kafka_to_kafka_spec("kafka-eo-fence", &broker, 1)
        .replace("interval_ms: 300 }", "interval_ms: 300, tolerable_failures: 1000 }");
    let id = cluster.submit(&spec)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    cluster.wait_for_checkpoints(&id, 2, Duration::from_secs(30))?;
    broker.produce("events", &records[..400])?;
    wait_until("for checkpoints to fail while records flow", Duration::from_secs(30), || {
        Ok((cluster.job(&id)?.checkpoints_failed >= 6).then_some(()))
    })?;
    let open = broker.read_committed("counts", 4)?.open_transactions.len();
    assert!(open >= 2, "the failed run left {open} transactions open");
    cluster.kill_taskmanager(0)?;
    cluster.start_taskmanager()?;
    // Restored from the second checkpoint: every record counted again, committed at the restored run's first
    // checkpoint, and nothing of the failed run left open then (a restored run that only reused the ids its
    // checkpoint knows would abort the failed run's transactions one checkpoint at a time).
    let read = expect_every_count_once(&broker, 400, 10, || two_more_checkpoints(&mut cluster, &id))?;
    eprintln!("{} records committed, {} aborted", read.records.len(), read.aborted);
    assert!(cluster.all_logs().contains("fenced the transactional ids"), "no fencing in the logs");
    cancel_and_expect_no_change(&mut cluster, &id, &broker, &read)?;
    cluster.stop();
    Ok(())
}

#[test]
fn kafka_to_kafka_rescaled_2_3_1_through_savepoints_is_exactly_once() -> Result<()> {
    let broker = KafkaBroker::start()?;
    broker.create_topic("events", 4)?;
    broker.create_topic("counts", 4)?;
    let keys = keys(800);
    let records = records(&keys);
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    let chunks = [&records[..300], &records[300..600], &records[600..]];
    let mut savepoint: Option<String> = None;
    let mut last = String::new();
    for (i, p) in [2u32, 3, 1].into_iter().enumerate() {
        let spec = kafka_to_kafka_spec(&format!("kafka-eo-rescale-{p}"), &broker, p);
        let id = match &savepoint {
            None => cluster.submit(&spec)?,
            Some(sp) => cluster.submit_from(&spec, sp, "no-claim", false)?,
        };
        cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
        broker.produce("events", chunks[i])?;
        // Some records committed by this job's own checkpoints before the stop commits the rest.
        let some: usize = chunks[..i].iter().map(|c| c.len()).sum::<usize>() + 100;
        wait_until("for this job to commit some records", Duration::from_secs(60), || {
            Ok((broker.read_committed("counts", 4)?.records.len() >= some).then_some(()))
        })?;
        if i < 2 {
            savepoint = Some(cluster.stop_with_savepoint(&id, false, "canonical")?);
        } else {
            last = id;
        }
    }
    // Every running count once over the three jobs, and no transaction of any of them left open (the 3 → 1
    // restore fenced the ids of old subtasks 1 and 2; a scale-up's new subtask started at ids never used).
    let read = expect_every_count_once(&broker, 800, 20, || two_more_checkpoints(&mut cluster, &last))?;
    eprintln!("{} records committed, {} aborted", read.records.len(), read.aborted);
    cancel_and_expect_no_change(&mut cluster, &last, &broker, &read)?;
    cluster.stop();
    Ok(())
}

#[test]
fn at_least_once_loses_nothing_through_a_taskmanager_kill() -> Result<()> {
    use rand::SeedableRng;
    let broker = KafkaBroker::start()?;
    broker.create_topic("events", 4)?;
    broker.create_topic("counts", 4)?;
    let keys = keys(800);
    let records = records(&keys);
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    let spec = kafka_to_kafka_spec("kafka-alo", &broker, 2)
        .replace("delivery: exactly-once, transactional_id_prefix: kc", "delivery: at-least-once");
    let id = cluster.submit(&spec)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    broker.produce("events", &records[..400])?;
    let done = cluster.wait_for_checkpoint_after(&id, 0, Duration::from_secs(30))?;
    cluster.wait_for_checkpoint_after(&id, done.id, Duration::from_secs(30))?;
    cluster.kill_random_busy_taskmanager(&mut rand::rngs::StdRng::seed_from_u64(5))?;
    cluster.start_taskmanager()?;
    broker.produce("events", &records[400..])?;
    // Every running count at least once (a replay writes some again), none in a transaction.
    let by_key = wait_until("for every running count to be written", Duration::from_secs(90), || {
        let (by_key, read) = committed_counts(&broker)?;
        let mut distinct = by_key.clone();
        distinct.values_mut().for_each(|c| c.dedup());
        let complete = distinct.len() == 40 && distinct.values().all(|c| *c == (1..=20).collect::<Vec<u64>>());
        Ok(complete.then_some((by_key, read)))
    })?;
    let (by_key, read) = by_key;
    assert_eq!((read.aborted, read.open), (0, 0), "an at-least-once sink writes no transaction");
    let written: usize = by_key.values().map(Vec::len).sum();
    eprintln!("{written} records written for 800 running counts");
    cluster.cancel(&id)?;
    cluster.stop();
    Ok(())
}

#[test]
fn a_sink_to_a_missing_topic_fails_and_an_exactly_once_sink_needs_a_prefix() -> Result<()> {
    let broker = KafkaBroker::start()?;
    broker.create_topic("events", 1)?;
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2))?;
    let spec = |sink: &str| {
        format!(
            "name: kafka-sink-bad\n\
             restart: {{ strategy: none }}\n\
             operators:\n  \
               - {{ uid: events, kind: kafka, config: {{ bootstrap_servers: {b:?}, topics: [events] }} }}\n  \
               - {{ uid: out, kind: kafka-sink, input: events, config: {{ bootstrap_servers: {b:?}, {sink} }} }}\n",
            b = broker.bootstrap()
        )
    };
    let id = cluster.submit(&spec("topic: absent"))?;
    let job = cluster.wait_for_state(&id, &[JobState::Failed], Duration::from_secs(60))?;
    assert!(
        job.failure.contains("kafka-sink \"out\"") && job.failure.contains("topic \"absent\" does not exist"),
        "{}",
        job.failure
    );
    let err = match cluster.submit(&spec("topic: counts, delivery: exactly-once")) {
        Ok(id) => bail!("job {id} was accepted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("out") && err.contains("transactional_id_prefix") && err.contains("required"), "{err}");
    cluster.stop();
    Ok(())
}

#[test]
fn kafka_to_kafka_is_exactly_once_through_a_jobmanager_failover() -> Result<()> {
    use weir_integration_tests::ha::{HaCluster, HaOptions};
    let broker = KafkaBroker::start()?;
    broker.create_topic("events", 4)?;
    broker.create_topic("counts", 4)?;
    let keys = keys(800);
    let records = records(&keys);
    let mut c = HaCluster::start(HaOptions { jobmanagers: 2, taskmanagers: 2, slots: 4, ..Default::default() })?;
    let id = c.submit_yaml("kafka-eo-ha", &kafka_to_kafka_spec("kafka-eo-ha", &broker, 2))?;
    c.wait_for_state(&id, "RUNNING", Duration::from_secs(60))?;
    broker.produce("events", &records[..400])?;
    let before = wait_until("for two checkpoints", Duration::from_secs(60), || {
        let j = c.job(&id)?;
        Ok((j["checkpoints_completed"].as_u64().unwrap_or(0) >= 2).then_some(j))
    })?;
    let leader = c.wait_for_leader(Duration::from_secs(30))?;
    c.kill_jobmanager(leader);
    let attempt = before["attempt"].as_u64().unwrap_or(0);
    wait_until("for the job to run again under a new leader", Duration::from_secs(60), || {
        let Ok(j) = c.job(&id) else { return Ok(None) };
        Ok((j["attempt"].as_u64().unwrap_or(0) > attempt && j["state"] == "RUNNING").then_some(()))
    })?;
    broker.produce("events", &records[400..])?;
    let two_more_checkpoints = || {
        let done = c.job(&id)?["checkpoints_completed"].as_u64().unwrap_or(0);
        wait_until("for two more checkpoints", Duration::from_secs(30), || {
            Ok((c.job(&id)?["checkpoints_completed"].as_u64().unwrap_or(0) >= done + 2).then_some(()))
        })
    };
    let read = expect_every_count_once(&broker, 800, 20, two_more_checkpoints)?;
    eprintln!("{} records committed, {} aborted", read.records.len(), read.aborted);
    let cancel = c.cli(&["job", "cancel", &id])?;
    anyhow::ensure!(cancel.code() == Some(0), "weir job cancel: {cancel}");
    c.wait_for_state(&id, "CANCELED", Duration::from_secs(30))?;
    expect_no_change(&broker, &read, "after the job ended")?;
    c.stop();
    Ok(())
}

#[test]
fn kafka_to_kafka_is_exactly_once_through_a_broker_outage() -> Result<()> {
    let broker = KafkaBroker::start_behind_proxy()?;
    broker.create_topic("events", 4)?;
    broker.create_topic("counts", 4)?;
    let keys = keys(800);
    let records = records(&keys);
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4))?;
    let id = cluster.submit(&kafka_to_kafka_spec("kafka-eo-outage", &broker, 2))?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    broker.produce("events", &records[..400])?;
    let done = cluster.wait_for_checkpoint_after(&id, 0, Duration::from_secs(30))?;
    cluster.wait_for_checkpoint_after(&id, done.id, Duration::from_secs(30))?;
    // The broker goes away (every connection reset, new ones refused) until the job has failed over at least
    // once, then comes back with everything it had.
    let proxy = broker.proxy().context("a broker behind a proxy")?;
    proxy.down();
    wait_until("for the outage to fail the job over", Duration::from_secs(60), || {
        Ok((cluster.job(&id)?.restarts >= 1).then_some(()))
    })?;
    std::thread::sleep(Duration::from_secs(2));
    proxy.up();
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
    broker.produce("events", &records[400..])?;
    let read = expect_every_count_once(&broker, 800, 20, || two_more_checkpoints(&mut cluster, &id))?;
    let job = cluster.job(&id)?;
    eprintln!("{} records committed, {} aborted, {} restarts", read.records.len(), read.aborted, job.restarts);
    cancel_and_expect_no_change(&mut cluster, &id, &broker, &read)?;
    cluster.stop();
    Ok(())
}

/// The lines of the files committed under `dir` (the hidden in-progress ones left out).
fn committed_lines(dir: &Path) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        lines.extend(std::fs::read_to_string(entry.path())?.lines().map(str::to_string));
    }
    lines.sort();
    Ok(lines)
}

#[test]
fn an_idle_partition_and_a_subtask_without_partitions_do_not_hold_back_a_window() -> Result<()> {
    let broker = KafkaBroker::start()?;
    broker.create_topic("clicks", 3)?;
    // Partitions 0 and 1 carry records 10 ms apart from t = 1000 to 2990, then one at t = 10 000 each, which moves
    // their watermarks past both windows; partition 2 never has a record. Four source subtasks for three
    // partitions: one owns none.
    let keys = keys(5);
    let mut records = Vec::new();
    let mut times = Vec::new();
    for partition in 0..2 {
        for i in 0..200usize {
            records.push((partition, Some(&keys[i % 5][..]), &b"1"[..]));
            times.push(1_000 + 10 * i as i64);
        }
        records.push((partition, Some(&keys[0][..]), &b"1"[..]));
        times.push(10_000);
    }
    let mut cluster = Cluster::start(ClusterOptions::new(1, 8))?;
    let out = cluster.output_dir("windows")?;
    let spec = format!(
        "name: kafka-idle\n\
         parallelism: 4\n\
         checkpointing: {{ interval_ms: 300 }}\n\
         operators:\n  \
           - uid: clicks\n    \
             kind: kafka\n    \
             config: {{ bootstrap_servers: {bootstrap:?}, topics: [clicks] }}\n    \
             watermarks: {{ max_out_of_orderness_ms: 0, idle_timeout_ms: 500, auto_watermark_interval_ms: 50 }}\n  \
           - {{ uid: windows, kind: window-aggregate, input: clicks, config: {{ window: {{ tumbling_ms: 1000 }} }} }}\n  \
           - {{ uid: out, kind: file-sink, input: windows, parallelism: 1, config: {{ path: {out:?} }} }}\n",
        bootstrap = broker.bootstrap(),
    );
    let id = cluster.submit(&spec)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    broker.produce_timed("clicks", &records, &times)?;
    // Each window holds 100 records of each of the two partitions: 40 of each key.
    let want: Vec<String> =
        (0..5).flat_map(|k| [format!("{k},1000,2000,40"), format!("{k},2000,3000,40")]).collect::<Vec<_>>();
    let mut want = want;
    want.sort();
    let got = wait_until("for both windows to fire", Duration::from_secs(60), || {
        let got = committed_lines(&out)?;
        Ok((got.len() >= want.len()).then_some(got))
    })?;
    assert_eq!(got, want);
    cluster.cancel(&id)?;
    cluster.stop();
    Ok(())
}

/// `kafka` (unbounded, topic `topic`, event time the Kafka timestamp, `watermarks`) → `window-aggregate` (1 s
/// tumbling counts) → `file-sink`, all at parallelism 1: one source subtask reads every partition.
fn window_spec(name: &str, broker: &KafkaBroker, topic: &str, watermarks: &str, out: &Path) -> String {
    format!(
        "name: {name}\n\
         parallelism: 1\n\
         checkpointing: {{ interval_ms: 300 }}\n\
         restart: {{ strategy: none }}\n\
         operators:\n  \
           - uid: events\n    \
             kind: kafka\n    \
             config: {{ bootstrap_servers: {bootstrap:?}, topics: [{topic}] }}\n    \
             watermarks: {watermarks}\n  \
           - {{ uid: windows, kind: window-aggregate, input: events, config: {{ window: {{ tumbling_ms: 1000 }} }} }}\n  \
           - {{ uid: out, kind: file-sink, input: windows, config: {{ path: {out:?} }} }}\n",
        bootstrap = broker.bootstrap(),
    )
}

/// Waits until the files committed under `dir` hold a line that starts with `last` (a window's row: the last to
/// fire), then returns their lines, sorted.
fn lines_once_committed(dir: &Path, last: &str) -> Result<Vec<String>> {
    wait_until(&format!("for a row {last}… to be committed"), Duration::from_secs(30), || {
        let got = committed_lines(dir)?;
        Ok(got.iter().any(|l| l.starts_with(last)).then_some(got))
    })
    .with_context(|| format!("committed: {:?}", committed_lines(dir).unwrap_or_default()))
}

#[test]
fn one_subtask_holds_its_watermark_at_its_slowest_partition_and_lets_an_idle_one_go() -> Result<()> {
    let broker = KafkaBroker::start()?;
    broker.create_topic("skewed", 2)?;
    broker.create_topic("half-idle", 2)?;
    let keys = keys(2);
    let mut cluster = Cluster::start(ClusterOptions::new(1, 8))?;
    // Two jobs side by side, each with one source subtask over two partitions.
    // Skewed: partition 1 runs 30 s ahead of partition 0, no idleness. Only a subtask watermark that is the
    // minimum over its partitions leaves partition 0's records on time; the maximum would make them late.
    let skewed_out = cluster.output_dir("skewed")?;
    let skewed = cluster.submit(&window_spec(
        "kafka-skewed",
        &broker,
        "skewed",
        "{ max_out_of_orderness_ms: 0, auto_watermark_interval_ms: 50 }",
        &skewed_out,
    ))?;
    // Half idle: partition 1 never has a record; with an idle timeout it stops holding the watermark back.
    let idle_out = cluster.output_dir("half-idle")?;
    let idle = cluster.submit(&window_spec(
        "kafka-half-idle",
        &broker,
        "half-idle",
        "{ max_out_of_orderness_ms: 0, idle_timeout_ms: 500, auto_watermark_interval_ms: 50 }",
        &idle_out,
    ))?;
    // Both sources read (their tasks run, their partitions are assigned) before records arrive, so that records
    // arrive a few at a time and the watermark is emitted between them.
    for id in [&skewed, &idle] {
        cluster.wait_for_checkpoints(id, 1, Duration::from_secs(30))?;
    }
    // Round r: partition 1 at 31 000 + 100·r, then partition 0 at 1000 + 100·r, key r mod 2; then one record each
    // (partition 0 at 100 000, partition 1 at 130 000) moves both partitions' watermarks past every window.
    let mut records: Vec<ToProduce<'_>> = Vec::new();
    let mut times = Vec::new();
    for r in 0..100usize {
        for (partition, start) in [(1, 31_000), (0, 1_000)] {
            records.push((partition, Some(&keys[r % 2][..]), &b"1"[..]));
            times.push(start + 100 * r as i64);
        }
    }
    records.extend([(0, Some(&keys[0][..]), &b"1"[..]), (1, Some(&keys[0][..]), &b"1"[..])]);
    times.extend([100_000, 130_000]);
    broker.produce_timed("skewed", &records, &times)?;
    // Partition 0 of "half-idle": 200 records 10 ms apart from t = 1000, then one at 10 000.
    let mut idle_records: Vec<ToProduce<'_>> = Vec::new();
    let mut idle_times = Vec::new();
    for i in 0..200usize {
        idle_records.push((0, Some(&keys[i % 2][..]), &b"1"[..]));
        idle_times.push(1_000 + 10 * i as i64);
    }
    idle_records.push((0, Some(&keys[0][..]), &b"1"[..]));
    idle_times.push(10_000);
    broker.produce_timed("half-idle", &idle_records, &idle_times)?;

    // Every window of both partitions complete: ten records, five of each key. (The watermark, 99 999, fires no
    // window of the last two records.)
    let mut want: Vec<String> = (0..10i64)
        .flat_map(|w| [1_000 + 1_000 * w, 31_000 + 1_000 * w])
        .flat_map(|start| (0..2).map(move |k| format!("{k},{start},{},5", start + 1_000)))
        .collect();
    want.sort();
    assert_eq!(lines_once_committed(&skewed_out, "1,40000,41000,")?, want, "the skewed topic's windows");
    // Both windows of partition 0 fire, 50 records of each key each, although partition 1 never had a record.
    let mut want: Vec<String> =
        [1_000, 2_000].iter().flat_map(|s| (0..2).map(move |k| format!("{k},{s},{},50", s + 1_000))).collect();
    want.sort();
    assert_eq!(lines_once_committed(&idle_out, "1,2000,3000,")?, want, "the half-idle topic's windows");
    cluster.cancel(&skewed)?;
    cluster.cancel(&idle)?;
    cluster.stop();
    Ok(())
}

// Partitions appear here as a new topic matching the pattern: Tansu 0.6.0 does not offer CreatePartitions (librdkafka's
// admin client answers "UnsupportedFeature", tried), so a topic grown in place is covered by the discovery rule's
// unit test (`kafka::partitions::unread`), which treats both alike.
#[test]
fn a_topic_created_while_running_is_discovered_and_read() -> Result<()> {
    let broker = KafkaBroker::start()?;
    broker.create_topic("events-a", 2)?;
    let keys = keys(400);
    let records: Vec<ToProduce<'_>> =
        keys.iter().enumerate().map(|(i, k)| ((i % 2) as i32, Some(&k[..]), &b"1"[..])).collect();
    let mut cluster = Cluster::start(ClusterOptions::new(1, 4))?;
    let out = cluster.output_dir("counts")?;
    let spec = updates_spec("kafka-discovery", &broker, 2, &out)
        .replace("topics: [events]", "topic_pattern: \"events-.*\", discovery_interval_ms: 500");
    let id = cluster.submit(&spec)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    broker.produce("events-a", &records[..200])?;
    broker.create_topic("events-b", 2)?;
    broker.produce("events-b", &records[200..])?;
    // Every key has 10 records, half in each topic: its running counts 1 … 10, each once.
    let by_key = wait_until("for the new topic's records to be counted", Duration::from_secs(60), || {
        let by_key = running_counts(&[&out])?;
        Ok((by_key.values().map(Vec::len).sum::<usize>() >= 400).then_some(by_key))
    })?;
    assert_eq!(by_key.len(), 40);
    for (key, counts) in &by_key {
        assert_eq!(*counts, (1..=10).collect::<Vec<u64>>(), "key {key}");
    }
    assert!(cluster.all_logs().contains("reading newly discovered partitions"));
    cluster.cancel(&id)?;
    cluster.stop();
    Ok(())
}

/// `kafka` (bounded, JSON orders) → `file-sink`, malformed records failing the job or sent to `orders-dlq`.
fn json_spec(name: &str, broker: &KafkaBroker, out: &Path, dead_letter: bool) -> String {
    let malformed = if dead_letter { ", on_malformed: dead-letter, dead_letter_topic: orders-dlq" } else { "" };
    format!(
        "name: {name}\n\
         parallelism: 2\n\
         checkpointing: {{ interval_ms: 300 }}\n\
         restart: {{ strategy: none }}\n\
         operators:\n  \
           - {{ uid: orders, kind: kafka, config: {{ bootstrap_servers: {b:?}, topics: [orders], bounded: true, \
                format: json, schema: [{{ name: user, type: utf8 }}, {{ name: amount, type: int64, nullable: true }}]\
                {malformed} }} }}\n  \
           - {{ uid: out, kind: file-sink, input: orders, config: {{ path: {out:?} }} }}\n",
        b = broker.bootstrap(),
    )
}

#[test]
fn malformed_json_records_go_to_the_dead_letter_topic_or_fail_the_job() -> Result<()> {
    let broker = KafkaBroker::start()?;
    broker.create_topic("orders", 2)?;
    broker.create_topic("orders-dlq", 1)?;
    // 60 orders, every tenth of them malformed in one of three ways.
    let mut values = Vec::new();
    for i in 0..60u64 {
        values.push(match i % 30 {
            9 => b"{not json".to_vec(),
            19 => br#"{"amount": 3}"#.to_vec(), // `user` is not nullable
            29 => format!(r#"{{"user": "u{i}", "amount": "lots"}}"#).into_bytes(),
            _ => format!(r#"{{"user": "u{i}", "amount": {i}, "note": "ignored"}}"#).into_bytes(),
        });
    }
    let keys = keys(60);
    let records: Vec<ToProduce<'_>> =
        values.iter().enumerate().map(|(i, v)| ((i % 2) as i32, Some(&keys[i][..]), v.as_slice())).collect();
    broker.produce("orders", &records)?;
    let mut cluster = Cluster::start(ClusterOptions::new(1, 4))?;

    let out = cluster.output_dir("dead-letter")?;
    let id = cluster.submit(&json_spec("kafka-json-dlq", &broker, &out, true))?;
    let job = cluster.wait_for_state(&id, &[JobState::Finished, JobState::Failed], Duration::from_secs(60))?;
    assert_eq!(weir_integration_tests::job_state(&job), Some(JobState::Finished), "{}", job.failure);
    // The 54 good orders as rows `key,user,amount`; the 6 malformed ones in the dead-letter topic, as they were.
    let mut want: Vec<String> =
        (0..60u64).filter(|i| ![9, 19, 29].contains(&(i % 30))).map(|i| format!("{},u{i},{i}", i % 40)).collect();
    want.sort();
    assert_eq!(committed_lines(&out)?, want);
    let dead: Vec<Vec<u8>> = broker.read_all("orders-dlq", 1)?.into_iter().filter_map(|r| r.value).collect();
    let mut want_dead: Vec<Vec<u8>> =
        (0..60usize).filter(|i| [9, 19, 29].contains(&(i % 30))).map(|i| values[i].clone()).collect();
    let mut dead_sorted = dead.clone();
    dead_sorted.sort();
    want_dead.sort();
    assert_eq!(dead_sorted, want_dead, "the malformed records, as they were");
    assert!(cluster.all_logs().contains("malformed records sent to the dead-letter topic"));

    let out = cluster.output_dir("fail")?;
    let id = cluster.submit(&json_spec("kafka-json-fail", &broker, &out, false))?;
    let job = cluster.wait_for_state(&id, &[JobState::Finished, JobState::Failed], Duration::from_secs(60))?;
    assert_eq!(weir_integration_tests::job_state(&job), Some(JobState::Failed));
    assert!(
        job.failure.contains("kafka source \"orders\"") && job.failure.contains("malformed record in orders/"),
        "{}",
        job.failure
    );
    // Nothing but good orders was committed before the failure.
    for line in committed_lines(&out)? {
        assert!(want.contains(&line), "committed {line:?}");
    }
    cluster.stop();
    Ok(())
}

const BID: &str = r#"{"type": "record", "name": "Bid", "fields": [{"name": "user", "type": "string"}, {"name": "amount", "type": ["null", "long"]}, {"name": "at", "type": "long"}]}"#;
const PLACED: &str = r#"{"type": "record", "name": "Placed", "fields": [{"name": "user", "type": "string"}, {"name": "amount", "type": ["null", "long"]}, {"name": "at", "type": "long"}, {"name": "partition", "type": "int"}, {"name": "offset", "type": "long"}]}"#;

/// Bid `i` as the Confluent wire format frames it under schema id `id`, written by `apache-avro`.
fn confluent_bid(i: i64, id: u32) -> Vec<u8> {
    use apache_avro::types::Value;
    let schema = apache_avro::Schema::parse_str(BID).expect("the schema");
    let amount = if i % 5 == 0 {
        Value::Union(0, Box::new(Value::Null))
    } else {
        Value::Union(1, Box::new(Value::Long(i * 10)))
    };
    let bid = Value::Record(vec![
        ("user".into(), Value::String(format!("u{}", i % 7))),
        ("amount".into(), amount),
        ("at".into(), Value::Long(1_700_000_000_000 + i * 1000)),
    ]);
    let mut framed = vec![0];
    framed.extend_from_slice(&id.to_be_bytes());
    framed.extend(apache_avro::to_avro_datum(&schema, bid).expect("encoding a bid"));
    framed
}

#[test]
fn avro_records_with_metadata_and_event_time_go_through_kafka_with_keys_and_headers() -> Result<()> {
    let broker = KafkaBroker::start()?;
    for (topic, partitions) in [("bids", 2), ("placed", 2), ("bids-dlq", 1)] {
        broker.create_topic(topic, partitions)?;
    }
    // 40 bids (Confluent-framed Avro, schema id 7) over two partitions; bid 13 is garbage and bid 27 was
    // written under another schema id: both go to the dead-letter topic.
    let values: Vec<Vec<u8>> = (0..40i64)
        .map(|i| match i {
            13 => b"\x00\x00\x00\x00\x07\xff\xff".to_vec(),
            27 => confluent_bid(i, 8),
            _ => confluent_bid(i, 7),
        })
        .collect();
    let records: Vec<ToProduce<'_>> =
        values.iter().enumerate().map(|(i, v)| ((i % 2) as i32, None, v.as_slice())).collect();
    broker.produce("bids", &records)?;
    let mut cluster = Cluster::start(ClusterOptions::new(1, 2))?;
    let b = broker.bootstrap();
    // Bids → placed: Avro in (with partition and offset, event time from `at`), Avro out (keyed by user, the
    // origin in headers), exactly once.
    let spec = format!(
        "name: avro-in-out\nparallelism: 2\ncheckpointing: {{ interval_ms: 300 }}\nrestart: {{ strategy: none }}\n\
         operators:\n  \
           - {{ uid: bids, kind: kafka, config: {{ bootstrap_servers: {b:?}, topics: [bids], bounded: true, \
                format: avro, avro_wire: confluent, avro_schema_id: 7, avro_schema: {BID:?}, \
                metadata: [partition, offset], timestamp_field: at, \
                on_malformed: dead-letter, dead_letter_topic: bids-dlq }} }}\n  \
           - {{ uid: out, kind: kafka-sink, input: bids, config: {{ bootstrap_servers: {b:?}, topic: placed, \
                format: avro, avro_schema: {PLACED:?}, key_field: user, headers: [partition, offset], \
                delivery: exactly-once, transactional_id_prefix: avro-test }} }}\n"
    );
    let id = cluster.submit(&spec)?;
    let job = cluster.wait_for_state(&id, &[JobState::Finished, JobState::Failed], Duration::from_secs(60))?;
    assert_eq!(weir_integration_tests::job_state(&job), Some(JobState::Finished), "{}", job.failure);

    let placed = broker.read_committed("placed", 2)?;
    assert_eq!((placed.open, placed.aborted), (0, 0));
    let schema = apache_avro::Schema::parse_str(PLACED)?;
    let mut seen = std::collections::BTreeMap::new();
    for r in &placed.records {
        let value = r.value.as_deref().context("a placed bid without value")?;
        let decoded = apache_avro::from_avro_datum(&schema, &mut &value[..], None)?;
        let apache_avro::types::Value::Record(fields) = decoded else { bail!("not a record: {decoded:?}") };
        let get = |n: &str| fields.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        use apache_avro::types::Value;
        let (Some(Value::String(user)), Some(Value::Long(at)), Some(Value::Int(p)), Some(Value::Long(o))) =
            (get("user"), get("at"), get("partition"), get("offset"))
        else {
            bail!("unexpected fields {fields:?}")
        };
        // The input's offset o in partition p was bid i = 2·o + p.
        let i = 2 * o + i64::from(p);
        assert_eq!(user, format!("u{}", i % 7));
        assert_eq!(at, 1_700_000_000_000 + i * 1000);
        let amount = match get("amount") {
            Some(Value::Union(_, v)) => match *v {
                Value::Long(a) => Some(a),
                _ => None,
            },
            other => bail!("amount {other:?}"),
        };
        assert_eq!(amount, (i % 5 != 0).then_some(i * 10), "bid {i}");
        assert_eq!(r.key.as_deref(), Some(user.as_bytes()), "keyed by user");
        let headers: Vec<(String, Option<Vec<u8>>)> = vec![
            ("partition".into(), Some(p.to_string().into_bytes())),
            ("offset".into(), Some(o.to_string().into_bytes())),
        ];
        assert_eq!(r.headers, headers);
        assert_eq!(r.timestamp, at, "event time (from `at`) is the record's timestamp");
        assert!(seen.insert(i, ()).is_none(), "bid {i} twice");
    }
    let want: Vec<i64> = (0..40).filter(|i| *i != 13 && *i != 27).collect();
    assert_eq!(seen.into_keys().collect::<Vec<_>>(), want, "every good bid once");
    let dead = broker.read_all("bids-dlq", 1)?;
    let mut dead_values: Vec<Vec<u8>> = dead.iter().filter_map(|r| r.value.clone()).collect();
    dead_values.sort();
    let mut want_dead = vec![values[13].clone(), values[27].clone()];
    want_dead.sort();
    assert_eq!(dead_values, want_dead);
    let errors: Vec<String> = dead
        .iter()
        .flat_map(|r| r.headers.iter().filter(|(k, _)| k == "weir.error"))
        .map(|(_, v)| String::from_utf8_lossy(v.as_deref().unwrap_or_default()).into_owned())
        .collect();
    assert!(errors.iter().any(|e| e.contains("schema id 8, not 7")), "{errors:?}");

    // Placed → file: the headers and the Kafka timestamp as metadata columns.
    let out = cluster.output_dir("placed")?;
    let spec = format!(
        "name: avro-read-back\nparallelism: 1\ncheckpointing: {{ interval_ms: 300 }}\nrestart: {{ strategy: none }}\n\
         operators:\n  \
           - {{ uid: placed, kind: kafka, config: {{ bootstrap_servers: {b:?}, topics: [placed], bounded: true, \
                format: avro, avro_schema: {PLACED:?}, metadata: [headers, timestamp, topic] }} }}\n  \
           - {{ uid: out, kind: file-sink, input: placed, config: {{ path: {out:?}, format: json }} }}\n"
    );
    let id = cluster.submit(&spec)?;
    let job = cluster.wait_for_state(&id, &[JobState::Finished, JobState::Failed], Duration::from_secs(60))?;
    assert_eq!(weir_integration_tests::job_state(&job), Some(JobState::Finished), "{}", job.failure);
    let lines = committed_lines(&out)?;
    assert_eq!(lines.len(), 38);
    for line in &lines {
        let row: serde_json::Value = serde_json::from_str(line)?;
        let headers: serde_json::Value = serde_json::from_str(row["headers"].as_str().context("headers text")?)?;
        assert_eq!(headers["partition"], row["partition"].to_string(), "{line}");
        assert_eq!(headers["offset"], row["offset"].to_string(), "{line}");
        assert_eq!(row["timestamp"], row["at"], "{line}");
        assert_eq!(row["topic"], "placed", "{line}");
    }
    cluster.stop();
    Ok(())
}
