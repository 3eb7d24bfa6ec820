//! Event-time windows on real processes: `datagen` with out-of-order timestamps → `window-aggregate`
//! (tumbling, sliding and session windows) → exactly-once `file-sink`s. The expected rows are computed by the
//! harness (`weir_integration_tests::windows`) from the datagen formula and window arithmetic written out
//! afresh (not the operator's code): every key's windows, each exactly once with its count.
//!
//! - A task manager is SIGKILLed mid-run: the job restarts from its last checkpoint (window accumulators and
//!   their timers restored) and the committed rows are still exactly the expected ones.
//! - A windowed job is stopped with a savepoint at parallelism 2, restored at 3, stopped again, restored at 1
//!   to the end: windows open at each stop fire exactly once after the restore (their timers moved with their
//!   key groups), on RocksDB and on heap.
//!
//! Build the binaries first: `cargo build --release --workspace --bins`.

use anyhow::{bail, Context};
use std::path::Path;
use std::time::Duration;
use weir_integration_tests::windows::{check_rows, expected, records, spec, Shape};
use weir_integration_tests::{Cluster, ClusterOptions, JobState};

#[test]
fn tumbling_sliding_and_session_windows_are_exact_through_a_taskmanager_kill() -> anyhow::Result<()> {
    let (count, keys, rate) = (40_000u64, 300u64, 8_000u64);
    let mut cluster = Cluster::start(ClusterOptions::new(2, 8))?;
    let shapes = [Shape::Tumbling(100), Shape::Sliding(200, 50), Shape::Session(60)];
    let dirs: Vec<_> = (0..shapes.len()).map(|i| cluster.output_dir(&format!("out{i}"))).collect::<Result<_, _>>()?;
    let sinks: Vec<(Shape, &Path)> = shapes.iter().copied().zip(dirs.iter().map(|d| d.as_path())).collect();
    let id = cluster.submit(&spec("windows-kill", "rocksdb", 2, count, keys, rate, &sinks))?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    cluster.wait_for_checkpoints(&id, 3, Duration::from_secs(60))?;
    let busy = cluster.busy_taskmanagers()?;
    let victim = *busy.first().context("no busy task manager")?;
    cluster.kill_taskmanager(victim)?;
    eprintln!("killed task manager {victim} mid-run");
    cluster.start_taskmanager()?;
    cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180))?;
    let recs = records(count, keys);
    for (shape, dir) in &sinks {
        let want = expected(*shape, &recs);
        check_rows(&format!("{shape:?}"), dir, &want)?;
        eprintln!("{shape:?}: {} windows exact", want.len());
    }
    cluster.stop();
    Ok(())
}

/// Stops at parallelism 2, restores at 3, stops, restores at 1 to the end: every window exactly once.
fn savepoint_chain(backend: &str) -> anyhow::Result<()> {
    let (count, keys, rate) = (30_000u64, 200u64, 6_000u64);
    let mut cluster = Cluster::start(ClusterOptions::new(2, 8))?;
    let shapes = [Shape::Tumbling(100), Shape::Session(50)];
    let dirs: Vec<_> = (0..shapes.len()).map(|i| cluster.output_dir(&format!("out{i}"))).collect::<Result<_, _>>()?;
    let sinks: Vec<(Shape, &Path)> = shapes.iter().copied().zip(dirs.iter().map(|d| d.as_path())).collect();
    let mut savepoint: Option<String> = None;
    for (step, p) in [2u32, 3, 1].into_iter().enumerate() {
        let yaml = spec(&format!("windows-rescale-{backend}"), backend, p, count, keys, rate, &sinks);
        let id = match &savepoint {
            None => cluster.submit(&yaml)?,
            Some(url) => cluster.submit_from(&yaml, url, "", false)?,
        };
        cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
        if step == 2 {
            cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180))?;
            break;
        }
        std::thread::sleep(Duration::from_millis(1500));
        // RocksDB's native savepoints restore at another parallelism by importing SST files (timers included).
        let format = if backend == "rocksdb" { "native" } else { "canonical" };
        let url = cluster.stop_with_savepoint(&id, false, format)?;
        // The savepoint holds open windows: `savepoint inspect` counts their timers, per operator and domain.
        let inspect = cluster.cli_json(&["savepoint", "inspect", &url])?;
        for uid in ["win0", "win1"] {
            let timers = event_timers(&inspect, uid);
            eprintln!("step {step}: {uid} holds {timers:?} event-time timers in {url}");
            if timers.unwrap_or(0) == 0 {
                bail!("savepoint inspect shows no event-time timers of {uid}: {inspect}");
            }
        }
        savepoint = Some(url);
    }
    let recs = records(count, keys);
    for (shape, dir) in &sinks {
        check_rows(&format!("{backend} {shape:?}"), dir, &expected(*shape, &recs))?;
    }
    cluster.stop();
    Ok(())
}

/// The timers `savepoint inspect` (JSON) counts in operator `uid`'s event-time timer state.
fn event_timers(inspect: &serde_json::Value, uid: &str) -> Option<u64> {
    let op = inspect["operators"].as_array()?.iter().find(|o| o["uid"] == uid)?;
    let st = op["states"].as_array()?.iter().find(|s| s["name"] == "_timers.event")?;
    (st["kind"] == "timers").then(|| st["elements"].as_u64()).flatten()
}

#[test]
fn windows_open_at_a_savepoint_fire_once_after_rescaling_on_rocksdb() -> anyhow::Result<()> {
    savepoint_chain("rocksdb")
}

#[test]
fn windows_open_at_a_savepoint_fire_once_after_rescaling_on_heap() -> anyhow::Result<()> {
    savepoint_chain("heap")
}
