//! The container benchmark (`scripts/bench-containers.sh`): what running Weir in containers costs.
//!
//! - The image's size (`scripts/image.sh` builds it first).
//! - Cold start: `scripts/cluster-up.sh` on built images (etcd ×3, two HA job managers, three task managers,
//!   S3, mutual TLS) until a job manager leads three task managers, then until a first job is accepted.
//! - The keyed count (`datagen` → `keyed-count` on RocksDB → `blackhole`, parallelism 2, a checkpoint every
//!   10 s) in the compose cluster and on the host (an HA cluster of the same shape: two job managers, three task
//!   managers of two slots, etcd, mutual TLS; checkpoints on local disk instead of S3), alternating
//!   (`--pairs` pairs, the host first in even pairs); throughput is records over the time from `RUNNING` to
//!   `FINISHED` as a client polling every 100 ms sees it. Prints every run, the medians and the ratio.

use anyhow::Result;
use clap::Parser;
use std::time::{Duration, Instant};
use weir_integration_tests::containers::{build_images, ComposeCluster};
use weir_integration_tests::ha::{HaCluster, HaOptions};
use weir_integration_tests::CountJob;

#[derive(Parser)]
#[command(name = "weir-container-bench")]
struct Args {
    /// Records per run.
    #[arg(long, default_value_t = 10_000_000)]
    records: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// A/B pairs (host, containers).
    #[arg(long, default_value_t = 3)]
    pairs: usize,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return 0.0;
    }
    s[s.len() / 2]
}

fn job(n: usize, records: u64, keys: u64) -> CountJob {
    CountJob::bounded(&format!("count-{n}"), records, keys, 1)
        .parallelism(2)
        .checkpoint_every_ms(10_000)
        .into_blackhole()
}

fn in_containers(c: &ComposeCluster, job: &CountJob, records: u64) -> Result<f64> {
    let id = c.submit(&job.yaml(), None)?;
    c.wait_job(&id, Duration::from_secs(120), "RUNNING", |j| j["state"] == "RUNNING")?;
    let running = Instant::now();
    loop {
        if c.job(&id)?["state"] == "FINISHED" {
            return Ok(records as f64 / running.elapsed().as_secs_f64());
        }
        if running.elapsed() > Duration::from_secs(1800) {
            anyhow::bail!("the job did not finish in 30 min");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn on_host(c: &HaCluster, job: &CountJob, records: u64) -> Result<f64> {
    let id = c.submit(job)?;
    c.wait_for_state(&id, "RUNNING", Duration::from_secs(120))?;
    let running = Instant::now();
    c.wait_for_state(&id, "FINISHED", Duration::from_secs(1800))?;
    Ok(records as f64 / running.elapsed().as_secs_f64())
}

fn run(args: Args) -> Result<()> {
    let size = build_images()?;
    println!("image: {size}");
    let start = Instant::now();
    let containers = ComposeCluster::up("weirbench")?;
    let ready = start.elapsed();
    let first = job(0, 1000, 10);
    containers.submit(&first.yaml(), None)?;
    println!(
        "cold start: cluster ready in {:.1} s, first job accepted at {:.1} s",
        ready.as_secs_f64(),
        start.elapsed().as_secs_f64()
    );
    let files = tempfile::tempdir()?;
    let m = weir_integration_tests::pki::member(files.path(), "bench")?;
    let mut options = HaOptions { jobmanagers: 2, taskmanagers: 3, slots: 2, ..Default::default() };
    options.jm_args = m.flags();
    options.tm_args = m.flags();
    options.cli_args = vec!["--tls-ca".into(), m.ca.display().to_string()];
    let host = HaCluster::start(options)?;
    let (mut h, mut c) = (Vec::new(), Vec::new());
    for p in 0..args.pairs {
        let order = if p % 2 == 0 { [true, false] } else { [false, true] };
        for on_the_host in order {
            let j = job(p * 2 + usize::from(on_the_host) + 1, args.records, args.keys);
            let rate = if on_the_host {
                on_host(&host, &j, args.records)?
            } else {
                in_containers(&containers, &j, args.records)?
            };
            println!(
                "pair {}: {}: {:.2} M records/s",
                p + 1,
                if on_the_host { "host" } else { "containers" },
                rate / 1e6
            );
            if on_the_host {
                h.push(rate)
            } else {
                c.push(rate)
            }
        }
    }
    let (a, b) = (median(&h), median(&c));
    println!(
        "keyed count, {} records, {} keys: host median {:.2} M/s, containers median {:.2} M/s, containers at {:.0} % of the host",
        args.records,
        args.keys,
        a / 1e6,
        b / 1e6,
        b / a * 100.0
    );
    host.stop();
    containers.down()
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("bench failed: {e:#}");
        std::process::exit(1);
    }
}
