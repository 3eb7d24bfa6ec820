//! Event time through a whole job, on real processes: three source subtasks whose splits move through event
//! time at different speeds (500, 1000 and 2000 ms of event time per second), one of them also reading a split
//! that never emits, with per-split watermarks and an idle timeout. A `watermark-log` turns every watermark
//! that reaches it into a record, which an exactly-once `file-sink` commits, so the test reads after the fact
//! every watermark the end of the job saw.
//!
//! - The downstream watermark is the minimum over the active sources: it only appears once the silent split is
//!   marked idle, and it never runs ahead of the slowest split's event time. The job's reported lowest
//!   watermark is the downstream task's, in `weir job status` as over gRPC.
//! - Across a task manager's SIGKILL and across a rescale from a savepoint, the watermarks committed downstream
//!   only ever go up, with a `datagen` whose timestamps are out of order (so a restored split, regenerating its
//!   watermark from the records it replays, would start lower than it was).
//!
//! Build the binaries first: `cargo build --release --workspace --bins`.

use anyhow::{bail, Context};
use std::path::Path;
use std::time::{Duration, Instant};
use weir_integration_tests::{wait_until, Cluster, ClusterOptions, JobState};

const TASKMANAGER: &str = "weir-example-taskmanager";
/// Event time of the slowest split per second of wall time: 50 records/s, 10 ms apart.
const SLOWEST_EVENT_MS_PER_S: u64 = 500;

/// `event-clock` (`sources` subtasks over splits at 50, 100 and 200 records/s plus one silent split) →
/// `watermark-log` → `file-sink`.
fn spec(name: &str, sources: u32, out: &Path) -> String {
    format!(
        "{}\
           - uid: clock\n    \
             kind: event-clock\n    \
             parallelism: {sources}\n    \
             config: {{ rates: [50, 100, 200], idle_splits: 1, step_ms: 10 }}\n    \
             watermarks: {{ max_out_of_orderness_ms: 0, idle_timeout_ms: 1000, auto_watermark_interval_ms: 50 }}\n\
         {}",
        header(name),
        logged("clock", out)
    )
}

/// A job's settings, up to its first operator: checkpoints every 300 ms, restarts without end.
fn header(name: &str) -> String {
    format!(
        "name: {name}\n\
         parallelism: 1\n\
         checkpointing: {{ interval_ms: 300 }}\n\
         restart: {{ strategy: fixed-delay, attempts: 100, delay_ms: 200 }}\n\
         operators:\n  "
    )
}

/// `watermark-log` after `input`, then a `file-sink` into `out`.
fn logged(input: &str, out: &Path) -> String {
    format!(
        "  - {{ uid: log, kind: watermark-log, input: {input} }}\n  \
           - {{ uid: out, kind: file-sink, input: log, config: {{ path: {out:?} }} }}\n"
    )
}

/// `datagen` (`sources` subtasks, timestamps 1 ms apart per split, moved back by up to a second) → `watermark-log`
/// → `file-sink`. The disorder is what a restore could trip over: the records a split replays after a restore can
/// all be older than the newest one it had read before, so a watermark generated afresh from them would be lower.
fn disorderly_spec(name: &str, sources: u32, out: &Path) -> String {
    format!(
        "{}\
           - uid: events\n    \
             kind: datagen\n    \
             parallelism: {sources}\n    \
             config: {{ keys: 100, seed: 7, splits: 6, rate_per_sec: 600, \
                        event_time: {{ start_ms: 1000000, step_ms: 1, max_disorder_ms: 1000 }} }}\n    \
             watermarks: {{ max_out_of_orderness_ms: 1000, auto_watermark_interval_ms: 50 }}\n\
         {}",
        header(name),
        logged("events", out)
    )
}

/// The watermarks committed under `dir`, in the order they were seen: files `part-<job>-<subtask>-<attempt>-<seq>`
/// of the one sink subtask, by attempt and sequence number, each holding `wm,<watermark>` lines.
fn committed_watermarks(dir: &Path) -> anyhow::Result<Vec<i64>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let fields: Vec<&str> = name.rsplitn(3, '-').collect();
        let (Some(seq), Some(attempt)) = (fields.first(), fields.get(1)) else { bail!("unexpected file {name}") };
        files.push((attempt.parse::<u64>()?, seq.parse::<u64>()?, name));
    }
    files.sort();
    let mut marks = Vec::new();
    for (_, _, name) in files {
        let text = std::fs::read_to_string(dir.join(&name))?;
        for line in text.lines().filter(|l| !l.is_empty()) {
            let value = line.strip_prefix("wm,").with_context(|| format!("{name}: not a watermark line: {line:?}"))?;
            marks.push(value.parse::<i64>().with_context(|| format!("{name}: {line:?}"))?);
        }
    }
    Ok(marks)
}

/// Fails unless every watermark is above the one before it.
fn assert_rising(marks: &[i64], what: &str) -> anyhow::Result<()> {
    if let Some(i) = marks.windows(2).position(|w| w[1] <= w[0]) {
        bail!("{what}: watermark {} after {} (position {}): {marks:?}", marks[i + 1], marks[i], i + 1);
    }
    Ok(())
}

/// Waits until at least `n` more watermarks than `before` are committed under `dir`.
fn wait_for_watermarks(dir: &Path, before: usize, n: usize) -> anyhow::Result<Vec<i64>> {
    wait_until(&format!("{n} more committed watermarks"), Duration::from_secs(60), || {
        let marks = committed_watermarks(dir)?;
        Ok((marks.len() >= before + n).then_some(marks))
    })
}

#[test]
fn the_downstream_watermark_is_the_minimum_of_the_active_sources() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(2, 4).with_taskmanager_binary(TASKMANAGER))?;
    let out = cluster.output_dir("out")?;
    let submitted = Instant::now();
    let id = cluster.submit(&spec("event-time-min", 3, &out))?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;

    // Nothing reaches the end of the job while the silent split holds its source back: the first watermark
    // comes only after its idle timeout (1 s), and from then on, every committed one is higher.
    let marks = wait_for_watermarks(&out, 0, 20)?;
    let elapsed_ms = submitted.elapsed().as_millis() as u64;
    assert_rising(&marks, "committed")?;
    // The slowest split's records reach event time 500 ms per second since it started, at most: a minimum that
    // missed it (or the silent split's absence) would run ahead, at 1000 or 2000 ms per second.
    let last = *marks.last().unwrap_or(&i64::MIN);
    let bound = (elapsed_ms * SLOWEST_EVENT_MS_PER_S / 1000) as i64;
    if last > bound {
        bail!("downstream watermark {last} is ahead of the slowest split's event time (at most {bound})");
    }

    // The job reports each task's watermark and the lowest: the downstream task's, which reaches what the
    // sink committed.
    let committed = last;
    let job = wait_until("the reported lowest watermark to reach the committed one", Duration::from_secs(30), || {
        let job = cluster.job(&id)?;
        Ok(job.lowest_watermark.is_some_and(|w| w >= committed).then_some(job))
    })?;
    let downstream = job.watermarks.iter().find(|t| t.operators == "log->out").context("no log->out task")?;
    let sources: Vec<_> = job.watermarks.iter().filter(|t| t.operators == "clock").collect();
    assert_eq!(sources.len(), 3, "{:?}", job.watermarks);
    assert!(job.lowest_watermark <= downstream.watermark, "{job:?}");
    let json = cluster.cli_json(&["job", "status", &id])?;
    let lowest = json["lowest_watermark"].as_i64().context("no lowest_watermark in `weir job status`")?;
    assert!(lowest >= committed, "{json}");
    assert_eq!(json["watermarks"].as_array().map(Vec::len), Some(4), "{json}");
    assert!(json["watermark_lag_ms"].as_i64().is_some(), "{json}");
    cluster.cancel(&id)?;
    cluster.stop();
    Ok(())
}

#[test]
fn watermarks_never_go_back_across_a_crash_and_a_rescale() -> anyhow::Result<()> {
    let mut cluster = Cluster::start(ClusterOptions::new(3, 4).with_taskmanager_binary(TASKMANAGER))?;
    let first = cluster.output_dir("first")?;
    let id = cluster.submit(&disorderly_spec("event-time-crash", 2, &first))?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    let before = wait_for_watermarks(&first, 0, 10)?;

    // A task manager dies: the job restores from its last checkpoint, and the sources replay from there.
    let busy = cluster.busy_taskmanagers()?;
    let victim = *busy.first().context("no busy task manager")?;
    cluster.kill_taskmanager(victim)?;
    cluster.start_taskmanager()?;
    wait_until("the job to restart", Duration::from_secs(60), || {
        let job = cluster.job(&id)?;
        Ok((job.restarts >= 1 && job_state_is(&job, JobState::Running)).then_some(()))
    })?;
    let after_crash = wait_for_watermarks(&first, before.len(), 10)?;
    assert_rising(&after_crash, "across the crash")?;

    // Stop with a savepoint and restore with three source subtasks instead of two: the splits move, the
    // watermark does not go back.
    let savepoint = cluster.stop_with_savepoint(&id, false, "canonical")?;
    let stopped = committed_watermarks(&first)?;
    let second = cluster.output_dir("second")?;
    let id2 =
        cluster.submit_from(&disorderly_spec("event-time-rescaled", 3, &second), &savepoint, "no-claim", false)?;
    cluster.wait_for_state(&id2, &[JobState::Running], Duration::from_secs(30))?;
    let rescaled = wait_for_watermarks(&second, 0, 10)?;
    let all: Vec<i64> = stopped.iter().chain(&rescaled).copied().collect();
    assert_rising(&all, "across the rescale")?;
    cluster.cancel(&id2)?;
    cluster.stop();
    Ok(())
}

fn job_state_is(job: &weir_proto::JobInfo, state: JobState) -> bool {
    weir_integration_tests::job_state(job) == Some(state)
}
