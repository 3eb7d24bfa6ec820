//! Runs the Nexmark queries of `bench/nexmark/` on a local cluster and prints what Nexmark reports: events/s,
//! CPU seconds, events per CPU-second (throughput per core), peak memory, the rows out and the checkpoints.
//!
//! Setup: one job manager and one task manager with as many slots as the parallelism, RocksDB with incremental
//! checkpoints (every 10 s by default), the query's sink a `blackhole` (or, with `--csv DIR`, an exactly-once
//! `file-sink` writing `DIR/qN`, checked against Flink's result when the stream is the one of
//! `bench/nexmark/expected/`; q6's, which Flink refuses, against one computed from the generator). Time runs from RUNNING to FINISHED — the final checkpoint included — and CPU is
//! the job manager's and the task manager's over the same interval.

use anyhow::{Context, Result};
use clap::Parser;
use std::time::{Duration, Instant};
use weir_integration_tests::nexmark::{check_result, QueryRun, EXPECTED_STREAM, QUERIES, SQL_QUERIES};
use weir_integration_tests::probe::{cpu_seconds, free_metrics_addr, samples, scrape};
use weir_integration_tests::{Cluster, ClusterOptions, JobState};

/// Runs Nexmark queries on a local cluster.
#[derive(Parser)]
#[command(name = "weir-nexmark")]
struct Args {
    /// The query (`q0`, `q1`, …) or `all`.
    query: String,
    /// Events the source generates (`50M`, `200k` or a number).
    #[arg(long, default_value = "10M", value_parser = count)]
    events: u64,
    /// Parallelism of every operator; the source has one split per subtask.
    #[arg(short = 'p', long, default_value_t = 2)]
    parallelism: u32,
    /// Events per second of event time.
    #[arg(long, default_value_t = 100_000)]
    tps: u64,
    /// Source layout: 0 a contiguous range of event numbers per split, B blocks of B events dealt in turn.
    #[arg(long, default_value_t = 0)]
    block: u64,
    /// Checkpoint interval, ms.
    #[arg(long, default_value_t = 10_000)]
    checkpoint_ms: u64,
    /// Runs of each query, each on a fresh cluster.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Write each query's result to `DIR/qN` with an exactly-once file-sink (and check it against Flink's, or
    /// for q6 the generator's reference, where the stream is the expected results' one) instead of a blackhole.
    #[arg(long)]
    csv: Option<std::path::PathBuf>,
    /// Give up on a run after this many seconds.
    #[arg(long, default_value_t = 1800)]
    timeout_s: u64,
    /// Run the query's Flink SQL text (`bench/nexmark/sql/`, planned as `weir job submit FILE.sql` plans it)
    /// instead of its YAML spec; for the queries Weir's SQL runs so far.
    #[arg(long)]
    sql: bool,
}

/// `50M`, `200k`, `1_000` or a plain number.
fn count(s: &str) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    let (digits, scale) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1_000),
        Some('m' | 'M') => (&t[..t.len() - 1], 1_000_000),
        Some('g' | 'G' | 'b' | 'B') => (&t[..t.len() - 1], 1_000_000_000),
        _ => (t.as_str(), 1),
    };
    digits.parse::<u64>().map(|n| n * scale).map_err(|_| format!("{s:?} is not a count (like 50M, 200k or 1000)"))
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("weir-nexmark failed: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<()> {
    let known = if args.sql { SQL_QUERIES } else { QUERIES };
    let queries: Vec<&str> = match args.query.as_str() {
        "all" => known.to_vec(),
        q => vec![known
            .iter()
            .find(|k| **k == q)
            .copied()
            .with_context(|| format!("no query {q:?} in bench/nexmark (there are {})", known.join(", ")))?],
    };
    for q in queries {
        for _ in 0..args.runs {
            run_query(&args, q)?;
        }
    }
    Ok(())
}

fn run_query(args: &Args, query: &str) -> Result<()> {
    let mut run = QueryRun::new(query);
    (run.events, run.tps, run.parallelism, run.block, run.checkpoint_ms) =
        (args.events, args.tps, args.parallelism, args.block, args.checkpoint_ms);
    if let Some(dir) = &args.csv {
        let out = dir.join(query);
        std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
        run.output = Some(out);
    }
    let mut cluster = Cluster::start(ClusterOptions::new(0, args.parallelism))?;
    let metrics = free_metrics_addr()?;
    let tm = cluster.start_taskmanager_with_env(&[("WEIR_METRICS_BIND".into(), metrics.clone())])?;
    let pids = [cluster.jobmanager_pid(), cluster.taskmanager_pid(tm)];
    let cpu = || -> Result<f64> { pids.iter().flatten().map(|p| cpu_seconds(*p)).sum() };
    let spec = if args.sql {
        let options = weir_sql::script::PlanOptions { name: format!("nexmark-{query}-sql"), parallelism: None };
        let planned = weir_sql::script::plan_script(&run.sql()?, &options)?;
        weir_common::job::spec::file_to_proto(planned.spec)?
    } else {
        run.spec()?
    };
    let id = cluster.submit_spec(spec)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
    let (started, cpu0) = (Instant::now(), cpu()?);
    let done = cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(args.timeout_s))?;
    let (wall, cpu_s) = (started.elapsed().as_secs_f64(), cpu()? - cpu0);
    let label = format!("job_id=\"{id}\"");
    let out_rows = samples(&scrape(&metrics)?, "weir_blackhole_records_total", &[&label]).iter().sum::<f64>() as u64;
    let checkpoints = cluster.checkpoints(&id)?;
    let completed: Vec<_> =
        checkpoints.iter().filter(|c| c.status() == weir_proto::CheckpointStatus::Completed).collect();
    let max_ms = completed.iter().map(|c| c.duration_ms).max().unwrap_or(0);
    let max_full = completed.iter().map(|c| c.full_size_bytes).max().unwrap_or(0);
    let rss_mb: Vec<(String, u64)> =
        cluster.peak_rss().into_iter().map(|(name, kib)| (name, kib.unwrap_or(0) / 1024)).collect();
    let checked = match &run.output {
        Some(out) if (run.events, run.tps, run.parallelism) == EXPECTED_STREAM && run.block == 0 => {
            check_result(query, out)?;
            // Flink refuses q6: its expected result is computed from the generator.
            if query == "q6" {
                "equal to the generator's reference"
            } else {
                "equal to Flink's"
            }
        }
        Some(_) => "written (no expected result for this stream)",
        None => "blackhole",
    };
    cluster.stop();
    let summary = serde_json::json!({
        "query": query,
        "form": if args.sql { "sql" } else { "yaml" },
        "events": run.events,
        "p": run.parallelism,
        "tps": run.tps,
        "block": run.block,
        "checkpoint_ms": run.checkpoint_ms,
        "wall_s": wall,
        "events_per_s": run.events as f64 / wall,
        "cpu_s": cpu_s,
        "events_per_cpu_s": run.events as f64 / cpu_s.max(1e-9),
        "out_rows": out_rows,
        "restarts": done.restarts,
        "checkpoints": completed.len(),
        "checkpoint_max_ms": max_ms,
        "checkpoint_max_full_bytes": max_full,
        "peak_rss_mb": rss_mb.iter().map(|(n, m)| (n.clone(), serde_json::json!(m))).collect::<serde_json::Map<_, _>>(),
        "result": checked,
    });
    eprintln!(
        "{query}: {:.0} events/s, {:.0} events/CPU-s ({} events in {wall:.2} s, CPU {cpu_s:.2} s), {out_rows} rows \
         out, {} checkpoints (longest {max_ms} ms, largest {max_full} B), peak RSS {rss_mb:?}, {checked}",
        run.events as f64 / wall,
        run.events as f64 / cpu_s.max(1e-9),
        run.events,
        completed.len()
    );
    println!("{summary}");
    Ok(())
}
