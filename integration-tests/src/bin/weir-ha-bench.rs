//! Benchmarks of high availability and security, on real processes with a real etcd:
//!
//! - `failover`: three HA job managers and a running job; the leader is SIGKILLed `--kills` times, and each
//!   time the wait from the kill until the job runs again (a new attempt, `RUNNING`) under the new leader is
//!   measured, as seen by a client polling `weir job status`. The killed job manager is started again before
//!   the next kill. Prints each time, the median and the maximum.
//! - `tls`: the keyed count (`datagen` → `keyed-count` → `blackhole`, parallelism 2) on two task managers
//!   with one slot each, so records cross the data plane between them, once in plaintext and once with TLS on
//!   every connection, alternating (`--pairs` pairs, plaintext first in even pairs and TLS first in odd ones);
//!   throughput is records over the time from `RUNNING` to `FINISHED`. Prints every run, the medians and the
//!   loss with TLS.

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::time::{Duration, Instant};
use weir_integration_tests::ha::{HaCluster, HaOptions};
use weir_integration_tests::{wait_until, CountJob};

#[derive(Parser)]
#[command(name = "weir-ha-bench")]
struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Time from SIGKILL of the leader to the job running again.
    Failover {
        /// Kills.
        #[arg(long, default_value_t = 10)]
        kills: usize,
        /// Lease TTL of the leader.
        #[arg(long, default_value_t = 5000)]
        lease_ttl_ms: u64,
    },
    /// Keyed count with and without TLS on the data plane.
    Tls {
        /// Records per run.
        #[arg(long, default_value_t = 20_000_000)]
        records: u64,
        /// Distinct keys.
        #[arg(long, default_value_t = 1_000_000)]
        keys: u64,
        /// A/B pairs.
        #[arg(long, default_value_t = 3)]
        pairs: usize,
    },
}

fn main() {
    let result = match Args::parse().what {
        What::Failover { kills, lease_ttl_ms } => failover(kills, lease_ttl_ms),
        What::Tls { records, keys, pairs } => tls(records, keys, pairs),
    };
    if let Err(e) = result {
        eprintln!("bench failed: {e:#}");
        std::process::exit(1);
    }
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        return f64::NAN;
    }
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn failover(kills: usize, lease_ttl_ms: u64) -> Result<()> {
    let mut c = HaCluster::start(HaOptions { lease_ttl_ms, ..Default::default() })?;
    let job = CountJob::unbounded("failover-bench", 50_000, 1).rate(20_000).checkpoint_every_ms(1000).into_blackhole();
    let id = c.submit(&job)?;
    c.wait_for_state(&id, "RUNNING", Duration::from_secs(60))?;
    let mut times = Vec::new();
    for k in 0..kills {
        // A checkpoint or two first, so every failover restores real state.
        let done = c.job(&id)?["checkpoints_completed"].as_u64().unwrap_or(0);
        wait_until("for a checkpoint", Duration::from_secs(60), || {
            Ok((c.job(&id)?["checkpoints_completed"].as_u64().unwrap_or(0) > done).then_some(()))
        })?;
        let attempt = c.job(&id)?["attempt"].as_u64().unwrap_or(0);
        let leader = c.wait_for_leader(Duration::from_secs(30))?;
        c.kill_jobmanager(leader);
        let killed = Instant::now();
        wait_until("for the job to run again", Duration::from_secs(120), || {
            let Ok(j) = c.job(&id) else { return Ok(None) };
            Ok((j["attempt"].as_u64().unwrap_or(0) > attempt && j["state"] == "RUNNING").then_some(()))
        })?;
        let t = killed.elapsed().as_secs_f64();
        println!("kill {}: job manager {leader} killed, job running again after {t:.2} s", k + 1);
        times.push(t);
        c.start_jobmanager(leader)?;
    }
    let max = times.iter().cloned().fold(0.0, f64::max);
    println!(
        "failover (lease TTL {lease_ttl_ms} ms, {} kills): median {:.2} s, max {max:.2} s",
        times.len(),
        median(&times)
    );
    c.stop();
    Ok(())
}

/// One run of the count on a fresh cluster; returns records per second.
fn count_once(records: u64, keys: u64, tls: bool) -> Result<f64> {
    let files = tempfile::tempdir()?;
    let mut options = HaOptions { jobmanagers: 1, taskmanagers: 2, slots: 1, ..Default::default() };
    if tls {
        let m = weir_integration_tests::pki::member(files.path(), "bench")?;
        options.jm_args = m.flags();
        options.tm_args = m.flags();
        options.cli_args = vec!["--tls-ca".into(), m.ca.display().to_string()];
    }
    let c = HaCluster::start(options)?;
    let job = CountJob::bounded("tls-bench", records, keys, 1).checkpoint_every_ms(5000).into_blackhole();
    let id = c.submit(&job)?;
    c.wait_for_state(&id, "RUNNING", Duration::from_secs(60))?;
    let running = Instant::now();
    c.wait_for_state(&id, "FINISHED", Duration::from_secs(1800))?;
    let rate = records as f64 / running.elapsed().as_secs_f64();
    c.stop();
    Ok(rate)
}

fn tls(records: u64, keys: u64, pairs: usize) -> Result<()> {
    let (mut plain, mut secure) = (Vec::new(), Vec::new());
    for p in 0..pairs {
        let order = if p % 2 == 0 { [false, true] } else { [true, false] };
        for tls in order {
            let rate = count_once(records, keys, tls)?;
            println!("pair {}: {}: {:.2} M records/s", p + 1, if tls { "TLS" } else { "plaintext" }, rate / 1e6);
            if tls {
                secure.push(rate);
            } else {
                plain.push(rate);
            }
        }
    }
    let (a, b) = (median(&plain), median(&secure));
    println!(
        "keyed count, 2 task managers x 1 slot, {records} records: plaintext median {:.2} M/s, TLS median {:.2} M/s, loss {:.1} %",
        a / 1e6,
        b / 1e6,
        (1.0 - b / a) * 100.0
    );
    Ok(())
}
