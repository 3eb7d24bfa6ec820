//! The benchmark: how fast a local cluster counts records by key on RocksDB, what its checkpoints cost,
//! how much memory each process peaks at, and how long the cluster takes to start.
//!
//! Setup: 1 job manager and 1 task manager with 2 slots (one machine's worth of parallelism without
//! loopback traffic between task managers; pass `--taskmanagers 2 --slots 1` to include the data plane's
//! network path). Job: `datagen` (1,000,000 keys, unthrottled) → `keyed-count` → `blackhole`, parallelism 2,
//! RocksDB state, a checkpoint every 5 s.
//!
//! Throughput is measured from the outside: a bounded count of records divided by the time from RUNNING to
//! FINISHED (which includes the final checkpoint). Without `--records`, a short calibration run on a
//! throwaway cluster picks a count that takes about `--seconds`; the measured run uses a fresh cluster, so
//! start-up time and peak memory are its own.

use anyhow::Result;
use clap::Parser;
use std::time::{Duration, Instant};
use weir_integration_tests::probe::{cpu_seconds, samples, scrape};
use weir_integration_tests::{
    describe_job, job_state, CheckpointInfo, Cluster, ClusterOptions, CountJob, JobInfo, JobState,
};

/// Measures a keyed count on a local cluster.
#[derive(Parser)]
#[command(name = "weir-bench")]
struct Args {
    /// About how long the measured run lasts (it is cancelled after twice this, reporting a lower bound).
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Records the source generates [default: what takes about --seconds, from a calibration run].
    #[arg(long)]
    records: Option<u64>,
    /// Distinct keys.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Parallelism of source and counter.
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Task managers.
    #[arg(long, default_value_t = 1)]
    taskmanagers: usize,
    /// Slots per task manager.
    #[arg(long, default_value_t = 2)]
    slots: u32,
    /// Checkpoint interval in milliseconds.
    #[arg(long, default_value_t = 5000)]
    checkpoint_ms: u64,
    /// State backend: rocksdb or heap.
    #[arg(long, default_value = "rocksdb")]
    backend: String,
    /// Instead of the throughput run: count about `--keys` records over `--keys` keys (`--keys`/10 records/s
    /// for 10 s), then, in a job restored from that with an all but idle source, take this many native and this
    /// many canonical savepoints, alternating, 2 s apart, and time each `weir savepoint trigger` call.
    #[arg(long)]
    savepoints: Option<usize>,
    /// Instead of the throughput run: time `weir savepoint check` (5 calls, median) of a savepoint with this
    /// many operators (a synthetic `_metadata`: datagen, then a chain of keyed-counts at parallelism 2, each
    /// subtask with a state file) against the matching spec.
    #[arg(long)]
    check_operators: Option<usize>,
    /// Instead of the throughput run: this many records/s for `--seconds` through `datagen`, stamped with the
    /// wall clock as they leave it, → `blackhole` on two task managers (a rebalance, so records cross between
    /// them), and the sinks' lag behind the wall clock: the source-to-sink latency.
    #[arg(long)]
    latency: Option<u64>,
    /// Instead of the keyed count: a stateless pipeline, `datagen` → `key-filter` (keeps half the keys) →
    /// `value-map`, chained, then a rebalance to `blackhole`, parallelism 2 on two task managers of one slot
    /// (the example task manager, which has the two user kinds): `--records` (default 100M) through it.
    #[arg(long)]
    stateless: bool,
    /// The job's `linger_ms` in the latency run [default: the job spec's default].
    #[arg(long)]
    linger_ms: Option<u64>,
    /// Instead of the keyed count: event-time windows, `datagen` (1 record per ms of event time over all
    /// splits, up to 1 s out of order, the watermark 1 s behind) → `window-aggregate` count → `blackhole`, on
    /// one task manager of `--slots` slots: `tumble` (`--size-ms`) or `slide` (`--size-ms`, `--slide-ms`),
    /// `--records` through it. Prints records/s, the task manager's CPU seconds, records per CPU-second,
    /// windows fired and peak memory, and checks the windows fired against the formula.
    #[arg(long)]
    window: Option<String>,
    /// Window length of `--window`, ms.
    #[arg(long, default_value_t = 60_000)]
    size_ms: u64,
    /// Slide of `--window slide`, ms.
    #[arg(long, default_value_t = 10_000)]
    slide_ms: u64,
}

/// Records in the calibration run.
const CALIBRATION_RECORDS: u64 = 5_000_000;

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("bench failed: {e:#}");
        std::process::exit(1);
    }
}

/// One run of the job on a fresh cluster.
struct Run {
    startup: Duration,
    finished: bool,
    elapsed: Duration,
    job: JobInfo,
    checkpoints: Vec<CheckpointInfo>,
    peak_rss: Vec<(String, Option<u64>)>,
}

fn run_once(args: &Args, records: u64, limit: Duration) -> Result<Run> {
    let mut cluster = Cluster::start(ClusterOptions::new(args.taskmanagers, args.slots))?;
    let startup = cluster.startup_time();
    let mut job = CountJob::bounded("bench", records, args.keys, 1)
        .parallelism(args.parallelism)
        .checkpoint_every_ms(args.checkpoint_ms)
        .into_blackhole();
    job.state_backend = args.backend.clone();
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
    let running = Instant::now();
    let (finished, info) = loop {
        let info = cluster.job(&id)?;
        match job_state(&info) {
            Some(JobState::Finished) => break (true, info),
            Some(s) if s.is_terminal() => anyhow::bail!("the job ended as {s}: {}", describe_job(&info)),
            _ => {}
        }
        if running.elapsed() >= limit {
            break (false, info);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = running.elapsed();
    let peak_rss = cluster.peak_rss();
    let checkpoints = cluster.checkpoints(&id)?;
    if !finished {
        cluster.cancel(&id)?;
    }
    cluster.stop();
    Ok(Run { startup, finished, elapsed, job: info, checkpoints, peak_rss })
}

fn mib(kib: Option<u64>) -> String {
    kib.map(|k| format!("{:.1} MiB", k as f64 / 1024.0)).unwrap_or_else(|| "?".into())
}

fn bytes(b: u64) -> String {
    if b >= 1 << 20 {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.1} KiB", b as f64 / 1024.0)
    }
}

/// Times native against canonical savepoints of a running job holding the counts of about `args.keys`
/// records over `args.keys` keys (as Flink's `SavepointBench`, `n = k`, `mode=hold`): a first job counts them and is
/// stopped with a savepoint; a second one restores the counts, with a source of its own (a new uid) that
/// emits one record per second, so that the job is all but idle while the savepoints are taken.
fn savepoints(args: &Args, count: usize) -> Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(args.taskmanagers, args.slots))?;
    // About `keys` records: a rate every backend sustains, for 10 s.
    let rate = (args.keys / 10).max(1000);
    let mut fill = CountJob::unbounded("fill", args.keys, 1)
        .rate(rate)
        .parallelism(args.parallelism)
        .checkpoint_every_ms(args.checkpoint_ms)
        .into_blackhole();
    fill.state_backend = args.backend.clone();
    let id = cluster.submit(&fill.yaml())?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
    eprintln!("filling: {rate} records/s for 10 s over {} keys", args.keys);
    std::thread::sleep(Duration::from_secs(10));
    let filled = cluster.stop_with_savepoint(&id, false, "native")?;
    let mut hold = CountJob::unbounded("hold", args.keys, 2)
        .rate(1)
        .parallelism(args.parallelism)
        .checkpoint_every_ms(args.checkpoint_ms)
        .into_blackhole();
    hold.state_backend = args.backend.clone();
    let spec = hold.yaml().replace("uid: events", "uid: idle").replace("input: events", "input: idle");
    let id = cluster.submit_from(&spec, &filled, "no-claim", true)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(120))?;
    let dir = tempfile::tempdir()?;
    let mut times: std::collections::BTreeMap<&str, Vec<u128>> = Default::default();
    for i in 0..count {
        for format in ["native", "canonical"] {
            std::thread::sleep(Duration::from_secs(2));
            let target = dir.path().join(format!("{i}-{format}"));
            let target_str = format!("file://{}", target.display());
            let t = Instant::now();
            let out = cluster.cli_json(&["savepoint", "trigger", &id, &target_str, "--format", format])?;
            let ms = t.elapsed().as_millis();
            let url = out["savepoint"].as_str().unwrap_or("?");
            let size = dir_size(&target);
            println!("savepoint {format} run {i}: {ms} ms ({}) {url}", bytes(size));
            times.entry(format).or_default().push(ms);
        }
    }
    let info = cluster.job(&id)?;
    for (format, mut ms) in times {
        ms.sort();
        println!(
            "savepoint {format} {} keys (p={}, {}): median {} ms of {}",
            args.keys,
            args.parallelism,
            args.backend,
            ms[ms.len() / 2],
            ms.len()
        );
    }
    println!("{:<28} {}", "restarts", info.restarts);
    for c in cluster.checkpoints(&id)? {
        println!(
            "  checkpoint {} {} {} ms (job manager's trigger -> complete), {}",
            c.id,
            c.status,
            c.duration_ms,
            bytes(c.full_size_bytes)
        );
    }
    cluster.cancel(&id)?;
    cluster.stop();
    Ok(())
}

/// Bytes of every file under `dir`.
fn dir_size(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_size(&e.path()),
            _ => e.metadata().map(|m| m.len()).unwrap_or(0),
        })
        .sum()
}

/// Times `weir savepoint check` of a savepoint holding `n` operators.
fn check_savepoint(args: &Args, n: usize) -> Result<()> {
    use std::collections::BTreeMap;
    use weir_common::checkpoint::{
        CheckpointMetadata, FileHandle, KeyedStateHandle, KeyedStateInfo, OperatorCheckpoint, OperatorStateHandle,
        OperatorSubtaskState, SavepointFormat, METADATA_FORMAT_VERSION,
    };
    use weir_common::ids::{CheckpointId, JobId, SubtaskIndex};
    use weir_common::state::keygroup::KeyGroupRange;
    let cluster = Cluster::start(ClusterOptions::new(1, 2))?;
    let dir = tempfile::tempdir()?;
    let sp = dir.path().join("savepoint");
    let uids: Vec<String> = (0..n).map(|i| if i == 0 { "events".into() } else { format!("count-{i}") }).collect();
    let mut operators = BTreeMap::new();
    for (i, uid) in uids.iter().enumerate() {
        let mut subtasks = Vec::new();
        for s in 0..2u32 {
            let path = format!("{uid}/{s}/state");
            std::fs::create_dir_all(sp.join(format!("{uid}/{s}")))?;
            std::fs::write(sp.join(&path), b"x")?;
            let file = FileHandle { path, size: 1 };
            let (keyed, operator_state) = if i == 0 {
                (None, Some(OperatorStateHandle { file, states: vec![] }))
            } else {
                let range = KeyGroupRange::for_subtask(SubtaskIndex(s), 2, 128);
                let states = vec![KeyedStateInfo {
                    name: "count".into(),
                    kind: "value".into(),
                    ttl_ms: None,
                    bytes: 1,
                    entries: None,
                }];
                (
                    Some(KeyedStateHandle {
                        backend: weir_common::checkpoint::SnapshotFormat::Rocksdb,
                        key_group_range: range,
                        files: vec![file],
                        states,
                    }),
                    None,
                )
            };
            subtasks.push(OperatorSubtaskState {
                subtask: SubtaskIndex(s),
                keyed,
                operator_state,
                end_of_input: false,
                watermark: None,
            });
        }
        let kind = if i == 0 { "datagen" } else { "keyed-count" };
        operators.insert(
            uid.clone(),
            OperatorCheckpoint {
                kind: kind.into(),
                parallelism: 2,
                subtasks,
                signature: None,
                state_config: Default::default(),
            },
        );
    }
    let meta = CheckpointMetadata {
        format_version: METADATA_FORMAT_VERSION,
        job_id: JobId("bench".into()),
        checkpoint_id: CheckpointId(1),
        timestamp_ms: 1,
        max_parallelism: 128,
        is_final: false,
        operators,
        savepoint: Some(SavepointFormat::Native),
    };
    std::fs::write(sp.join("_metadata"), meta.to_bytes().map_err(anyhow::Error::msg)?)?;
    let mut spec = format!("name: check\nparallelism: 2\nstate_backend: {}\noperators:\n", args.backend);
    for (i, uid) in uids.iter().enumerate() {
        match i {
            0 => spec.push_str("  - { uid: events, kind: datagen, config: { keys: 10 } }\n"),
            _ => spec.push_str(&format!("  - {{ uid: {uid}, kind: keyed-count, input: {} }}\n", uids[i - 1])),
        }
    }
    spec.push_str(&format!("  - {{ uid: out, kind: blackhole, input: {} }}\n", uids[n - 1]));
    let spec_file = dir.path().join("spec.yaml");
    std::fs::write(&spec_file, spec)?;
    let url = format!("file://{}", sp.display());
    let spec_path = spec_file.display().to_string();
    let mut ms = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let out = cluster.cli_json(&["savepoint", "check", &url, &spec_path])?;
        ms.push(t.elapsed().as_millis());
        let operators = out["operators"].as_array().map_or(0, |o| o.len());
        anyhow::ensure!(out["ok"] == true && operators == n + 1, "unexpected report: {out}");
    }
    ms.sort();
    println!("savepoint check {n} operators: median {} ms of 5 (each the whole `weir savepoint check` call)", ms[2]);
    cluster.stop();
    Ok(())
}

/// A cluster of two task managers of one slot each, serving metrics: the cluster and their metrics addresses.
fn two_taskmanagers_with_metrics(options: ClusterOptions) -> Result<(Cluster, Vec<String>)> {
    let mut cluster = Cluster::start(options)?;
    let mut metrics = Vec::new();
    for _ in 0..2 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = format!("127.0.0.1:{port}");
        cluster.start_taskmanager_with_env(&[("WEIR_METRICS_BIND".into(), addr.clone())])?;
        metrics.push(addr);
    }
    Ok((cluster, metrics))
}

/// Source-to-sink latency at `rate` records/s: see [`Args::latency`].
fn latency(args: &Args, rate: u64) -> Result<()> {
    let (mut cluster, metrics) = two_taskmanagers_with_metrics(ClusterOptions::new(0, 1))?;
    let records = rate * args.seconds;
    let linger = args.linger_ms.map(|ms| format!("linger_ms: {ms}\n")).unwrap_or_default();
    let spec = format!(
        "name: latency\nparallelism: 2\n{linger}checkpointing: {{ interval_ms: {} }}\noperators:\n  \
         - {{ uid: events, kind: datagen, config: {{ count: {records}, keys: 1000, seed: 1, rate_per_sec: {rate}, \
              splits: 2, event_time: {{ wall_clock: true }} }} }}\n  \
         - {{ uid: sink, kind: blackhole, input: events, partitioning: rebalance }}\n",
        args.checkpoint_ms
    );
    let id = cluster.submit(&spec)?;
    cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(args.seconds * 2 + 60))?;
    let label = format!("job_id=\"{id}\"");
    let pages: Vec<String> = metrics.iter().map(|a| scrape(a)).collect::<Result<_>>()?;
    let mut by_quantile = Vec::new();
    for q in ["0.5", "0.99", "1"] {
        let quantile = format!("quantile=\"{q}\"");
        let worst =
            pages.iter().flat_map(|p| samples(p, "weir_blackhole_lag_ms", &[&label, &quantile])).reduce(f64::max);
        by_quantile.push(worst.ok_or_else(|| anyhow::anyhow!("no lag samples of job {id} on the task managers"))?);
    }
    println!(
        "latency at {rate} records/s for {} s ({records} records, linger {}): p50 {} ms, p99 {} ms, max {} ms \
         (per sink subtask, the worst of the two; datagen → rebalance → blackhole over 2 task managers)",
        args.seconds,
        args.linger_ms.map(|ms| format!("{ms} ms")).unwrap_or_else(|| "default".into()),
        by_quantile[0],
        by_quantile[1],
        by_quantile[2]
    );
    cluster.stop();
    Ok(())
}

/// Throughput of the stateless pipeline: see [`Args::stateless`].
fn stateless(args: &Args) -> Result<()> {
    let records = args.records.unwrap_or(100_000_000);
    let options = ClusterOptions::new(0, 1).with_taskmanager_binary("weir-example-taskmanager");
    let (mut cluster, metrics) = two_taskmanagers_with_metrics(options)?;
    let spec = format!(
        "name: stateless\nparallelism: 2\ncheckpointing: {{ interval_ms: {} }}\noperators:\n  \
         - {{ uid: events, kind: datagen, config: {{ count: {records}, keys: {}, seed: 1 }} }}\n  \
         - {{ uid: half, kind: key-filter, input: events, config: {{ modulo: 2, keep: 0 }} }}\n  \
         - {{ uid: doubled, kind: value-map, input: half, config: {{ multiply: 2 }} }}\n  \
         - {{ uid: sink, kind: blackhole, input: doubled, partitioning: rebalance }}\n",
        args.checkpoint_ms, args.keys
    );
    let id = cluster.submit(&spec)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
    let running = Instant::now();
    let done = cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(args.seconds * 4 + 60))?;
    let elapsed = running.elapsed();
    // The sinks must have seen every record the filter kept: datagen's keys 0, 2, 4, ….
    let label = format!("job_id=\"{id}\"");
    let mut sunk = 0.0;
    for addr in &metrics {
        sunk += samples(&scrape(addr)?, "weir_blackhole_records_total", &[&label]).iter().sum::<f64>();
    }
    let kept = weir_common::job::datagen::expected_counts(1, records, args.keys).iter().step_by(2).sum::<u64>();
    if sunk as u64 != kept {
        anyhow::bail!("the sinks counted {sunk} records, the filter keeps {kept}");
    }
    println!(
        "{:<28} {:.0} records/s ({records} records in {:.2} s, RUNNING -> FINISHED, {} restarts; datagen → \
         key-filter → value-map → rebalance → blackhole, 2 TMs x 1 slot)",
        "stateless throughput",
        records as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64(),
        done.restarts
    );
    cluster.stop();
    Ok(())
}

/// Event-time windows: see [`Args::window`].
fn windows(args: &Args, kind: &str) -> Result<()> {
    let records = args.records.unwrap_or(2_000_000);
    let (size, slide) = match kind {
        "tumble" => (args.size_ms, args.size_ms),
        "slide" => (args.size_ms, args.slide_ms),
        other => anyhow::bail!("--window takes tumble or slide, not {other:?}"),
    };
    let window = if kind == "tumble" {
        format!("{{ tumbling_ms: {size} }}")
    } else {
        format!("{{ sliding_ms: {size}, slide_ms: {slide} }}")
    };
    let p = args.parallelism;
    let mut cluster = Cluster::start(ClusterOptions::new(0, args.slots))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let metrics = format!("127.0.0.1:{port}");
    let tm = cluster.start_taskmanager_with_env(&[("WEIR_METRICS_BIND".into(), metrics.clone())])?;
    let pid = cluster.taskmanager_pid(tm).ok_or_else(|| anyhow::anyhow!("no task manager process"))?;
    // `p` splits each `p` ms apart: together one record per ms of event time, as the Flink peer's source.
    let spec = format!(
        "name: windows\nparallelism: {p}\nstate_backend: {}\n\
         checkpointing: {{ interval_ms: {}, incremental: true }}\noperators:\n  \
         - uid: events\n    kind: datagen\n    \
           config: {{ count: {records}, keys: {}, seed: 0, splits: {p}, \
                      event_time: {{ start_ms: 0, step_ms: {p}, max_disorder_ms: 1000 }} }}\n    \
           watermarks: {{ max_out_of_orderness_ms: 1000 }}\n  \
         - {{ uid: windows, kind: window-aggregate, input: events, config: {{ window: {window} }} }}\n  \
         - {{ uid: sink, kind: blackhole, input: windows }}\n",
        args.backend, args.checkpoint_ms, args.keys
    );
    let id = cluster.submit(&spec)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
    let (started, cpu0) = (Instant::now(), cpu_seconds(pid)?);
    let done = cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(args.seconds * 20 + 60))?;
    let (elapsed, cpu) = (started.elapsed(), cpu_seconds(pid)? - cpu0);
    let label = format!("job_id=\"{id}\"");
    let fired = samples(&scrape(&metrics)?, "weir_blackhole_records_total", &[&label]).iter().sum::<f64>() as u64;
    // Windows per key from the formula: a record in slide b (ts div slide) is in the windows ending at slides
    // b + 1 … b + size/slide; a key's windows are the union of those intervals.
    anyhow::ensure!(size % slide == 0, "--size-ms must be a multiple of --slide-ms");
    let t = weir_common::job::datagen::EventTimeConfig {
        start_ms: 0,
        step_ms: p as u64,
        max_disorder_ms: 1000,
        wall_clock: false,
    };
    let mut slides: Vec<Vec<i64>> = vec![Vec::new(); args.keys as usize];
    for j in 0..p {
        let (start, end) = weir_common::job::datagen::split_range(j, p, Some(records));
        for i in start..end {
            let ts = weir_common::job::datagen::timestamp_of(&t, 0, i, i - start);
            slides[weir_common::job::datagen::key_of(0, i, args.keys) as usize].push(ts.div_euclid(slide as i64));
        }
    }
    let per_window = (size / slide) as i64;
    let mut expected_windows = 0i64;
    for mut b in slides {
        b.sort_unstable();
        b.dedup();
        let mut covered_to = i64::MIN;
        for x in b {
            let (lo, hi) = ((x + 1).max(covered_to + 1), x + per_window);
            expected_windows += (hi - lo + 1).max(0);
            covered_to = covered_to.max(hi);
        }
    }
    let rss = cluster.peak_rss();
    println!(
        "{:<28} {:.0} records/s ({records} records, {} keys, {kind} {size} ms / {slide} ms, in {:.2} s RUNNING -> \
         FINISHED, {} restarts); task manager CPU {cpu:.1} s = {:.0} records/CPU-s; {fired} windows fired \
         (formula: {}); peak RSS {rss:?}",
        format!("windows {kind}"),
        records as f64 / elapsed.as_secs_f64(),
        args.keys,
        elapsed.as_secs_f64(),
        done.restarts,
        records as f64 / cpu.max(1e-9),
        expected_windows
    );
    if fired != expected_windows as u64 {
        anyhow::bail!("{fired} windows fired, the formula gives {expected_windows}");
    }
    cluster.stop();
    Ok(())
}

fn run(args: Args) -> Result<()> {
    if let Some(kind) = &args.window {
        return windows(&args, kind);
    }
    if args.stateless {
        return stateless(&args);
    }
    if let Some(rate) = args.latency {
        return latency(&args, rate.max(1));
    }
    if let Some(n) = args.check_operators {
        return check_savepoint(&args, n.max(2));
    }
    if let Some(count) = args.savepoints {
        return savepoints(&args, count);
    }
    let records = match args.records {
        Some(n) => n,
        None => {
            eprintln!("calibrating: {CALIBRATION_RECORDS} records on a throwaway cluster");
            let probe = run_once(&args, CALIBRATION_RECORDS, Duration::from_secs(120))?;
            if !probe.finished {
                anyhow::bail!("the calibration run did not finish within 120 s");
            }
            let rate = CALIBRATION_RECORDS as f64 / probe.elapsed.as_secs_f64();
            // Whole millions, at least the calibration's count.
            let n = ((rate * args.seconds as f64 / 1e6).round() as u64).max(1) * 1_000_000;
            n.max(CALIBRATION_RECORDS)
        }
    };
    eprintln!(
        "measuring: {records} records, {} keys, parallelism {}, {} backend, {} TM x {} slots, checkpoint every {} ms",
        args.keys, args.parallelism, args.backend, args.taskmanagers, args.slots, args.checkpoint_ms
    );
    let r = run_once(&args, records, Duration::from_secs(args.seconds * 2))?;

    println!(
        "{:<28} {:.0} ms (spawn -> all task managers registered)",
        "cluster start-up",
        r.startup.as_secs_f64() * 1e3
    );
    let rate = records as f64 / r.elapsed.as_secs_f64();
    if r.finished {
        println!(
            "{:<28} {rate:.0} records/s ({records} records in {:.2} s, RUNNING -> FINISHED)",
            "throughput",
            r.elapsed.as_secs_f64()
        );
    } else {
        println!(
            "{:<28} < {rate:.0} records/s (not finished within {:.0} s; cancelled) {}",
            "throughput",
            r.elapsed.as_secs_f64(),
            describe_job(&r.job)
        );
    }
    println!("{:<28} {}", "restarts", r.job.restarts);
    for (name, kib) in &r.peak_rss {
        println!("{:<28} {}", format!("peak RSS {name}"), mib(*kib));
    }
    println!();
    println!("{:>5}  {:<10} {:>9} {:>12} {:>12}  final", "chk", "status", "duration", "full size", "uploaded");
    for c in &r.checkpoints {
        println!(
            "{:>5}  {:<10} {:>6} ms {:>12} {:>12}  {}",
            c.id,
            c.status,
            c.duration_ms,
            bytes(c.full_size_bytes),
            bytes(c.uploaded_bytes),
            if c.is_final { "yes" } else { "" }
        );
    }
    Ok(())
}
