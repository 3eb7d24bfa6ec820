//! The benchmark: how fast a local cluster counts records by key on RocksDB, what its checkpoints cost,
//! how much memory each process peaks at, and how long the cluster takes to start.
//!
//! Setup: 1 job manager and 1 task manager with 2 slots (one machine's worth of parallelism without
//! loopback traffic between task managers; pass `--taskmanagers 2 --slots 1` to include the data plane's
//! network path). Job: `datagen` (1,000,000 keys, unthrottled) → `keyed-count` → `blackhole`, parallelism 2,
//! RocksDB state, a checkpoint every 5 s. Throughput is measured honestly from the outside: a bounded count
//! of records divided by the time from RUNNING to FINISHED (which includes the final checkpoint).

use anyhow::Result;
use clap::Parser;
use std::time::{Duration, Instant};
use weir_integration_tests::{describe_job, Cluster, ClusterOptions, CountJob, JobState};

/// Measures a keyed count on a local cluster.
#[derive(Parser)]
#[command(name = "weir-bench")]
struct Args {
    /// Time limit of the run; a job not finished by then is cancelled and only a lower bound is reported.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Records the source generates.
    #[arg(long, default_value_t = 30_000_000)]
    records: u64,
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
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("bench failed: {e:#}");
        std::process::exit(1);
    }
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

fn run(args: Args) -> Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(args.taskmanagers, args.slots))?;
    let startup = cluster.startup_time();
    let mut job = CountJob::bounded("bench", args.records, args.keys, 1)
        .parallelism(args.parallelism)
        .checkpoint_every_ms(args.checkpoint_ms)
        .into_blackhole();
    job.state_backend = args.backend.clone();
    eprintln!(
        "bench: {} records, {} keys, parallelism {}, {} backend, {} TM x {} slots, limit {} s",
        args.records, args.keys, args.parallelism, args.backend, args.taskmanagers, args.slots, args.seconds
    );
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
    let running = Instant::now();
    let limit = Duration::from_secs(args.seconds);
    let (finished, info) = loop {
        let info = cluster.job(&id)?;
        match JobState::of(&info) {
            Some(JobState::Finished) => break (true, info),
            Some(s) if s.is_terminal() => anyhow::bail!("the job ended as {s}: {}", describe_job(&info)),
            _ => {}
        }
        if running.elapsed() >= limit {
            break (false, info);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let elapsed = running.elapsed();
    let rss = cluster.peak_rss();
    let checkpoints = cluster.checkpoints(&id)?;
    if !finished {
        cluster.cancel(&id)?;
    }

    println!("{:<28} {:.0} ms", "cluster start-up", startup.as_secs_f64() * 1000.0);
    if finished {
        println!(
            "{:<28} {:.0} records/s ({} records in {:.2} s, RUNNING -> FINISHED)",
            "throughput",
            args.records as f64 / elapsed.as_secs_f64(),
            args.records,
            elapsed.as_secs_f64()
        );
    } else {
        println!(
            "{:<28} < {:.0} records/s (not finished within {} s; cancelled) {}",
            "throughput",
            args.records as f64 / elapsed.as_secs_f64(),
            args.seconds,
            describe_job(&info)
        );
    }
    println!("{:<28} {}", "restarts", info.restarts);
    for (name, kib) in &rss {
        println!("{:<28} {}", format!("peak RSS {name}"), mib(*kib));
    }
    println!();
    println!("{:>5}  {:<10} {:>9} {:>12} {:>12}  final", "chk", "status", "duration", "full size", "uploaded");
    for c in &checkpoints {
        println!(
            "{:>5}  {:<10} {:>7} ms {:>12} {:>12}  {}",
            c.id,
            c.status,
            c.duration_ms,
            bytes(c.full_size_bytes),
            bytes(c.uploaded_bytes),
            if c.is_final { "yes" } else { "" }
        );
    }
    cluster.stop();
    Ok(())
}
