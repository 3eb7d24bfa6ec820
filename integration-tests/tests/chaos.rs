//! The chaos run: one `emit: updates` job (`datagen` → `keyed-count` → `file-sink`, checkpoints on S3 behind a
//! proxy) while a seeded schedule mixes every fault the harness can make — task managers SIGKILLed and
//! replaced, the job manager SIGKILLed and restarted, the object store refusing or swallowing connections,
//! and failpoints (errors and delays on control RPCs in both directions, store calls on both sides, job-store
//! writes, uploads, sink commits, and a job manager that dies between writing `_metadata` and recording the
//! checkpoint). The sink writes all the time, so its commit protocol is crashed mid-run. At the end the
//! committed output must be exact (every `key,i` for `i` in `1..=n` once) and no shared file orphaned.
//! A windowed job (tumbling and session windows over out-of-order event time, their state and timers in
//! RocksDB) runs through the same faults, and its committed rows must be exactly the formula's windows.
//!
//! `WEIR_CHAOS_SECONDS` sets how long faults are injected (default 60); `WEIR_TEST_SEED` repeats a schedule
//! (the seed is printed). `scripts/chaos.sh --minutes N --seed S` runs it for longer.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::time::{Duration, Instant};
use weir_integration_tests::windows::{self, Shape};
use weir_integration_tests::{
    describe_job, job_state, scenario_seed, wait_for_no_orphaned_shared_files_in, Cluster, ClusterOptions, CountJob,
    JobState, S3Server, TcpProxy,
};

/// Records per second of the source: the job must outlast the faults.
const RATE: u64 = 8_000;
const KEYS: u64 = 5_000;

/// Failpoints of a job manager, each firing a few times after a random number of calls, then off for good.
const JM_POINTS: &[&str] = &[
    "rpc-acknowledge",
    "rpc-task-state",
    "rpc-decline",
    "rpc-heartbeat",
    "job-store-save",
    "checkpoint-after-metadata",
    "store-put",
    "store-get",
    "store-list",
    "store-delete",
];
/// Failpoints of a task manager.
const TM_POINTS: &[&str] =
    &["rpc-deploy", "rpc-trigger", "rpc-notify", "rpc-cancel", "task-upload", "sink-commit", "store-put", "store-get"];

/// A `WEIR_FAILPOINTS` value: a few of `points`, each a finite chain of faults after some quiet calls.
fn failpoints(rng: &mut StdRng, points: &[&str], jm: bool) -> String {
    let mut entries = Vec::new();
    for &p in points {
        if !rng.random_bool(0.4) {
            continue;
        }
        let mut chain = Vec::new();
        for _ in 0..rng.random_range(1..=3) {
            chain.push(format!("{}*off", rng.random_range(2..40)));
            let fault = if jm && p == "checkpoint-after-metadata" && rng.random_bool(0.3) {
                // The job manager dies between writing `_metadata` and recording the checkpoint.
                "1*return(exit)".to_string()
            } else if rng.random_bool(0.5) {
                format!("{}*return(error:chaos)", rng.random_range(1..=3))
            } else {
                // Heartbeats delayed past the task-manager timeout would be a lost task manager: keep them short.
                let max = if p == "rpc-heartbeat" { 800 } else { 4000 };
                format!("1*return(delay:{})", rng.random_range(100..max))
            };
            chain.push(fault);
        }
        chain.push("off".to_string());
        entries.push(format!("{p}={}", chain.join("->")));
    }
    entries.join(";")
}

fn env_of(spec: String) -> Vec<(String, String)> {
    if spec.is_empty() {
        Vec::new()
    } else {
        vec![("WEIR_FAILPOINTS".to_string(), spec)]
    }
}

#[derive(Default, Debug)]
struct Tally {
    tm_kills: u32,
    jm_kills: u32,
    jm_exits: u32,
    outages: u32,
    failpoint_sets: u32,
    /// Failpoints that fired, as the processes logged them.
    failpoints_fired: usize,
}

impl Tally {
    /// Which kinds of fault never happened: a run that injected nothing of a kind tested nothing of it.
    fn missing(&self) -> Vec<&'static str> {
        let mut missing = Vec::new();
        for (kind, n) in [
            ("task manager SIGKILLs", self.tm_kills as usize),
            ("job manager SIGKILLs", self.jm_kills as usize),
            ("object-store outages", self.outages as usize),
            ("failpoints armed", self.failpoint_sets as usize),
            ("failpoints fired", self.failpoints_fired),
        ] {
            if n == 0 {
                missing.push(kind);
            }
        }
        missing
    }
}

/// The kinds of fault the schedule draws from.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    KillTaskManager,
    KillJobManager,
    StoreOutage,
    Nothing,
}

/// The fault of step `step`: the first three steps are the three kinds in a seeded order, so that every run
/// has each at least once, then a random mix.
fn fault_at(step: usize, first: &[Fault; 3], rng: &mut StdRng) -> Fault {
    if let Some(f) = first.get(step) {
        return *f;
    }
    match rng.random_range(0..100) {
        0..30 => Fault::KillTaskManager,
        30..45 => Fault::KillJobManager,
        45..65 => Fault::StoreOutage,
        _ => Fault::Nothing,
    }
}

#[test]
fn chaos_keeps_the_committed_output_exact() -> anyhow::Result<()> {
    let seed = scenario_seed();
    // Whatever fails, the message names the seed that repeats this schedule.
    run(seed).map_err(|e| e.context(format!("chaos seed {seed} (repeat with WEIR_TEST_SEED={seed})")))
}

fn run(seed: u64) -> anyhow::Result<()> {
    let fault_secs: u64 = std::env::var("WEIR_CHAOS_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let mut rng = StdRng::seed_from_u64(seed);
    let s3 = S3Server::start()?;
    let proxy = TcpProxy::start(s3.addr())?;
    let endpoint = s3.endpoint_via(proxy.addr(), "checkpoints");
    let mut cluster = Cluster::start(ClusterOptions::new(3, 4).with_s3(endpoint.clone()))?;
    let out = cluster.output_dir("chaos")?;
    // Input for the fault period and a little beyond, so that faults land while the sink writes.
    let records = RATE * (fault_secs + 10);
    // Every fault may cost a restart (a long run makes hundreds): restarts are not what is being tested.
    let mut job = CountJob::bounded("chaos", records, KEYS, seed % 1_000_000)
        .rate(RATE)
        .emit_updates()
        .checkpoint_every_ms(400)
        .checkpoint_timeout_ms(8_000)
        .retain_checkpoints(2)
        .restart_delay_ms(300)
        .sink_parallelism(3)
        .into_files(&out);
    job.restart_attempts = 1_000_000;
    let id = cluster.submit(&job.yaml())?;
    cluster.wait_for_checkpoints(&id, 1, Duration::from_secs(60))?;
    // The windowed job: as long as the other, at a tenth of its rate.
    let window_dirs = [cluster.output_dir("chaos-tumbling")?, cluster.output_dir("chaos-sessions")?];
    let window_shapes = [Shape::Tumbling(100), Shape::Session(50)];
    let window_records = records / 10;
    let sinks: Vec<(Shape, &std::path::Path)> =
        window_shapes.iter().copied().zip(window_dirs.iter().map(|d| d.as_path())).collect();
    let windows_id =
        cluster.submit(&windows::spec("chaos-windows", "rocksdb", 2, window_records, 300, RATE / 10, &sinks))?;
    cluster.wait_for_checkpoints(&windows_id, 1, Duration::from_secs(60))?;
    eprintln!("chaos: seed {seed}, {fault_secs} s of faults, {records} records, job {id}");

    let mut tally = Tally::default();
    let mut first = [Fault::KillTaskManager, Fault::KillJobManager, Fault::StoreOutage];
    first.shuffle(&mut rng);
    let mut step = 0;
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(fault_secs) {
        std::thread::sleep(Duration::from_millis(rng.random_range(1500..4000)));
        if !cluster.jobmanager_is_running() {
            // A failpoint ended it (`exit`): bring it back, as a supervisor would.
            tally.jm_exits += 1;
            eprintln!(
                "chaos {:>5.1}s: the job manager exited at a failpoint; restarting it",
                began.elapsed().as_secs_f64()
            );
            cluster.set_jobmanager_env(Vec::new());
            cluster.restart_jobmanager()?;
            continue;
        }
        let t = began.elapsed().as_secs_f64();
        let fault = fault_at(step, &first, &mut rng);
        step += 1;
        match fault {
            Fault::KillTaskManager => {
                let spec = failpoints(&mut rng, TM_POINTS, false);
                match cluster.kill_random_busy_taskmanager(&mut rng) {
                    Ok(victim) => {
                        tally.tm_kills += 1;
                        eprintln!("chaos {t:>5.1}s: SIGKILL tm-{victim}; new task manager with [{spec}]");
                    }
                    Err(e) => eprintln!("chaos {t:>5.1}s: no busy task manager to kill ({e}); adding one [{spec}]"),
                }
                tally.failpoint_sets += u32::from(!spec.is_empty());
                cluster.start_taskmanager_with_env(&env_of(spec))?;
            }
            Fault::KillJobManager => {
                let spec = failpoints(&mut rng, JM_POINTS, true);
                tally.jm_kills += 1;
                tally.failpoint_sets += u32::from(!spec.is_empty());
                eprintln!("chaos {t:>5.1}s: SIGKILL the job manager; restart with [{spec}]");
                cluster.kill_jobmanager();
                cluster.set_jobmanager_env(env_of(spec));
                cluster.restart_jobmanager()?;
            }
            Fault::StoreOutage => {
                let stall = rng.random_bool(0.5);
                let ms = rng.random_range(1000..4000);
                tally.outages += 1;
                eprintln!("chaos {t:>5.1}s: object store {} for {ms} ms", if stall { "hangs" } else { "refuses" });
                if stall {
                    proxy.stall();
                } else {
                    proxy.down();
                }
                std::thread::sleep(Duration::from_millis(ms));
                proxy.up();
            }
            Fault::Nothing => {}
        }
    }

    // Calm: a job manager without failpoints, and enough task managers without them.
    eprintln!("chaos: faults over after {:.1}s ({tally:?}); letting the job finish", began.elapsed().as_secs_f64());
    proxy.up();
    cluster.kill_jobmanager();
    cluster.set_jobmanager_env(Vec::new());
    cluster.restart_jobmanager()?;
    cluster.start_taskmanager()?;
    let done = cluster.wait_for_state(
        &id,
        &[JobState::Finished, JobState::Failed, JobState::Canceled],
        // The source's rate is per attempt, so every restart puts the job behind the clock: a long run needs
        // longer to drain what is left.
        Duration::from_secs(240 + fault_secs),
    )?;
    // First that faults of every kind happened: a run that injected nothing of a kind proves nothing of it.
    tally.failpoints_fired = cluster.all_logs().matches("failpoint fired").count();
    let missing = tally.missing();
    assert!(missing.is_empty(), "seed {seed}: the run injected no {}: {tally:?}", missing.join(", no "));
    assert_eq!(job_state(&done), Some(JobState::Finished), "seed {seed}: {}", describe_job(&done));
    weir_integration_tests::verify_job_output(&job, &out)
        .map_err(|e| e.context(format!("seed {seed}: the committed output is not exact")))?;
    let windows_done = cluster.wait_for_state(
        &windows_id,
        &[JobState::Finished, JobState::Failed, JobState::Canceled],
        Duration::from_secs(240 + fault_secs),
    )?;
    assert_eq!(job_state(&windows_done), Some(JobState::Finished), "seed {seed}: {}", describe_job(&windows_done));
    let recs = windows::records(window_records, 300);
    for (shape, dir) in &sinks {
        windows::check_rows(&format!("seed {seed}: windows {shape:?}"), dir, &windows::expected(*shape, &recs))?;
    }
    // Every task manager killed (at least one, checked above) ran tasks of one job or the other, so the two
    // restarted at least once between them.
    assert!(
        done.restarts + windows_done.restarts >= 1,
        "seed {seed}: {} task managers killed but no restart: {}; {}",
        tally.tm_kills,
        describe_job(&done),
        describe_job(&windows_done)
    );
    wait_for_no_orphaned_shared_files_in(&endpoint.store()?, &id, Duration::from_secs(30))
        .map_err(|e| e.context(format!("seed {seed}")))?;
    eprintln!("chaos: seed {seed}: output exact after {} restarts; {tally:?}", done.restarts);
    cluster.stop();
    Ok(())
}
