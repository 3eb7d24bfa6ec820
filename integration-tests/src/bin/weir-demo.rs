//! The demo: a local cluster counts 4 million records by key, loses a task manager halfway, recovers on the
//! one left, and proves its output exactly-once.

use anyhow::Result;
use clap::Parser;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use weir_integration_tests::{
    describe_job, job_state, read_sink_output, verify_counts, Cluster, ClusterOptions, CountJob, JobState,
};

/// Runs a job on a local Weir cluster, kills a task manager halfway and verifies the output.
#[derive(Parser)]
#[command(name = "weir-demo")]
struct Args {
    /// Keep the cluster's directory (logs, checkpoints, output) here instead of a temporary one.
    #[arg(long)]
    keep: Option<PathBuf>,
    /// Records the source generates.
    #[arg(long, default_value_t = 4_000_000)]
    records: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Source rate limit in records per second (0 = unlimited); keeps the job running long enough to watch.
    #[arg(long, default_value_t = 400_000)]
    rate: u64,
}

const SEED: u64 = 42;

fn main() {
    match run(Args::parse()) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("demo failed: {e:#}");
            std::process::exit(1);
        }
    }
}

fn run(args: Args) -> Result<bool> {
    println!("starting a local cluster: 1 job manager, 2 task managers x 2 slots, checkpoints on local disk");
    let mut options = ClusterOptions::new(2, 2);
    if let Some(dir) = &args.keep {
        options = options.in_dir(dir);
    }
    let mut cluster = Cluster::start(options)?;
    println!("  job manager at {} (ready in {:.1?})", cluster.jobmanager_url(), cluster.startup_time());
    println!("  directory {}", cluster.dir().display());

    let out = cluster.output_dir("counts")?;
    let job = CountJob::bounded("demo", args.records, args.keys, SEED)
        .rate(args.rate)
        .parallelism(2)
        .checkpoint_every_ms(1000)
        .into_files(&out);
    println!(
        "submitting datagen({} records, {} keys, seed {SEED}{}) -> keyed-count -> file-sink, parallelism 2, \
         checkpoint every 1 s",
        args.records,
        args.keys,
        if args.rate > 0 { format!(", {} records/s", args.rate) } else { String::new() }
    );
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(60))?;
    let started = Instant::now();
    println!("job {id} is running");

    let half = Duration::from_secs_f64(job.nominal_seconds().unwrap_or(0.0) / 2.0);
    let mut killed = false;
    let mut last_print = Instant::now() - Duration::from_secs(1);
    let done = loop {
        let info = cluster.job(&id)?;
        let state = job_state(&info);
        if last_print.elapsed() >= Duration::from_secs(1) || state.is_some_and(|s| s.is_terminal()) {
            println!(
                "[{:>5.1}s] {:<10} checkpoints {:>3}  last {:>4}  restarts {}",
                started.elapsed().as_secs_f64(),
                info.state(),
                info.checkpoints_completed,
                info.last_completed_checkpoint.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
                info.restarts
            );
            last_print = Instant::now();
        }
        match state {
            Some(JobState::Finished) => break info,
            Some(s) if s.is_terminal() => {
                println!("the job ended as {s}: {}", describe_job(&info));
                drop(cluster);
                return Ok(false);
            }
            _ => {}
        }
        if !killed && state == Some(JobState::Running) && started.elapsed() >= half && info.checkpoints_completed >= 2 {
            let victim = cluster.kill_random_busy_taskmanager(&mut rand::rng())?;
            println!(
                "[{:>5.1}s] killed task manager tm-{victim} with SIGKILL; the job recovers on the one left \
                 from checkpoint {}",
                started.elapsed().as_secs_f64(),
                info.last_completed_checkpoint.map(|c| c.to_string()).unwrap_or_else(|| "-".into())
            );
            killed = true;
        }
        if started.elapsed() > Duration::from_secs(600) {
            anyhow::bail!("the job did not finish within 10 minutes: {}", describe_job(&info));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let elapsed = started.elapsed();

    let output = read_sink_output(&out)?;
    let verdict = verify_counts(&output, SEED, args.records, args.keys);
    println!();
    println!("records              {}", args.records);
    println!("keys in output       {}", output.len());
    println!("checkpoints          {}", done.checkpoints_completed);
    println!("restarts             {}", done.restarts);
    println!("time                 {:.1} s", elapsed.as_secs_f64());
    println!("records/s            {:.0} (including recovery)", args.records as f64 / elapsed.as_secs_f64());
    match verdict {
        Ok(()) => {
            println!("output verified: exactly-once");
            cluster.stop();
            Ok(true)
        }
        Err(diff) => {
            println!("output NOT exactly-once: {diff}");
            drop(cluster);
            Ok(false)
        }
    }
}
