//! Event-time windows on real processes: `datagen` with out-of-order timestamps → `window-aggregate`
//! (tumbling, sliding and session windows) → exactly-once `file-sink`s. The expected rows are computed here,
//! from the datagen formula and window arithmetic written out afresh (not the operator's code): every key's
//! windows, each exactly once with its count.
//!
//! - A task manager is SIGKILLed mid-run: the job restarts from its last checkpoint (window accumulators and
//!   their timers restored) and the committed rows are still exactly the expected ones.
//! - A windowed job is stopped with a savepoint at parallelism 2, restored at 3, stopped again, restored at 1
//!   to the end: windows open at each stop fire exactly once after the restore (their timers moved with their
//!   key groups), on RocksDB and on heap.
//!
//! Build the binaries first: `cargo build --release --workspace --bins`.

use anyhow::{bail, Context};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use weir_common::builtin::EventTimeConfig;
use weir_common::datagen::{key_of, split_range, timestamp_of};
use weir_integration_tests::{Cluster, ClusterOptions, JobState};

const SEED: u64 = 11;
const SPLITS: u32 = 4;
/// Timestamps of a split move 1 ms per record and are moved back by up to this much.
const DISORDER_MS: u64 = 40;
const START_MS: i64 = 1_000_000;

/// A window job's shape: the `window:` map of the spec, and the windows of a timestamp.
#[derive(Clone, Copy, Debug)]
enum Shape {
    Tumbling(i64),
    Sliding(i64, i64),
    Session(i64),
}

impl Shape {
    fn yaml(self) -> String {
        match self {
            Shape::Tumbling(s) => format!("{{ tumbling_ms: {s} }}"),
            Shape::Sliding(s, l) => format!("{{ sliding_ms: {s}, slide_ms: {l} }}"),
            Shape::Session(g) => format!("{{ session_gap_ms: {g} }}"),
        }
    }
}

/// The records of a bounded datagen as `(key, timestamp)`.
fn records(count: u64, keys: u64) -> Vec<(u64, i64)> {
    let t = EventTimeConfig { start_ms: START_MS, step_ms: 1, max_disorder_ms: DISORDER_MS, wall_clock: false };
    let mut out = Vec::with_capacity(count as usize);
    for j in 0..SPLITS {
        let (start, end) = split_range(j, SPLITS, Some(count));
        for i in start..end {
            out.push((key_of(SEED, i, keys), timestamp_of(&t, SEED, i, i - start)));
        }
    }
    out
}

/// Rows `(key, window_start, window_end) → count` the job must commit, each once.
fn expected(shape: Shape, recs: &[(u64, i64)]) -> BTreeMap<(u64, i64, i64), u64> {
    let mut out = BTreeMap::new();
    match shape {
        Shape::Tumbling(size) => {
            for &(k, ts) in recs {
                let start = ts - ts.rem_euclid(size);
                *out.entry((k, start, start + size)).or_default() += 1;
            }
        }
        Shape::Sliding(size, slide) => {
            for &(k, ts) in recs {
                // Every window [s, s + size) with s a multiple of the slide that holds ts.
                let mut s = ts - ts.rem_euclid(slide);
                while s + size > ts {
                    *out.entry((k, s, s + size)).or_default() += 1;
                    s -= slide;
                }
            }
        }
        Shape::Session(gap) => {
            let mut by_key: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
            for &(k, ts) in recs {
                by_key.entry(k).or_default().push(ts);
            }
            for (k, mut times) in by_key {
                times.sort();
                let (mut start, mut end, mut n) = (times[0], times[0] + gap, 0u64);
                for ts in times {
                    // Windows that touch merge: [start, end) and [ts, ts + gap) when ts <= end.
                    if ts > end {
                        out.insert((k, start, end), n);
                        (start, n) = (ts, 0);
                    }
                    end = end.max(ts + gap);
                    n += 1;
                }
                out.insert((k, start, end), n);
            }
        }
    }
    out
}

/// The committed `key,window_start,window_end,count` rows under `dir`.
fn committed_rows(dir: &Path) -> anyhow::Result<Vec<(u64, i64, i64, u64)>> {
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        for line in std::fs::read_to_string(entry.path())?.lines().filter(|l| !l.is_empty()) {
            let f: Vec<&str> = line.split(',').collect();
            let [k, s, e, v] = f[..] else { bail!("{}: not a window row: {line:?}", entry.path().display()) };
            rows.push((k.parse()?, s.parse()?, e.parse()?, v.parse()?));
        }
    }
    Ok(rows)
}

/// Fails unless the committed rows are exactly `want`, each once; says what is missing, extra or repeated.
fn check_rows(what: &str, dir: &Path, want: &BTreeMap<(u64, i64, i64), u64>) -> anyhow::Result<()> {
    let rows = committed_rows(dir)?;
    let mut got = BTreeMap::new();
    let mut repeated = Vec::new();
    for (k, s, e, v) in rows {
        if got.insert((k, s, e), v).is_some() {
            repeated.push((k, s, e));
        }
    }
    let missing: Vec<_> = want.iter().filter(|(w, _)| !got.contains_key(*w)).take(5).collect();
    let extra: Vec<_> = got.keys().filter(|w| !want.contains_key(*w)).take(5).collect();
    let wrong: Vec<_> =
        want.iter().filter_map(|(w, n)| got.get(w).filter(|g| *g != n).map(|g| (w, *n, *g))).take(5).collect();
    if !repeated.is_empty() || !missing.is_empty() || !extra.is_empty() || !wrong.is_empty() {
        bail!(
            "{what}: {} rows committed, {} expected; repeated {:?}; missing {missing:?}; extra {extra:?}; \
             wrong counts (window, want, got) {wrong:?}",
            got.len(),
            want.len(),
            &repeated[..repeated.len().min(5)]
        );
    }
    Ok(())
}

/// `datagen` (`count` records over `keys`, `rate` per second) → one `window-aggregate` and `file-sink` per shape.
fn spec(name: &str, backend: &str, p: u32, count: u64, keys: u64, rate: u64, sinks: &[(Shape, &Path)]) -> String {
    let mut s = format!(
        "name: {name}\nparallelism: {p}\nstate_backend: {backend}\n\
         checkpointing: {{ interval_ms: 300 }}\n\
         restart: {{ strategy: fixed-delay, attempts: 100, delay_ms: 200 }}\n\
         operators:\n  \
         - uid: events\n    kind: datagen\n    \
           config: {{ count: {count}, keys: {keys}, seed: {SEED}, splits: {SPLITS}, rate_per_sec: {rate}, \
                      event_time: {{ start_ms: {START_MS}, step_ms: 1, max_disorder_ms: {DISORDER_MS} }} }}\n    \
           watermarks: {{ max_out_of_orderness_ms: {DISORDER_MS}, auto_watermark_interval_ms: 50 }}\n"
    );
    for (i, (shape, out)) in sinks.iter().enumerate() {
        s += &format!(
            "  - {{ uid: win{i}, kind: window-aggregate, input: events, config: {{ window: {} }} }}\n  \
               - {{ uid: out{i}, kind: file-sink, input: win{i}, parallelism: 1, config: {{ path: {:?} }} }}\n",
            shape.yaml(),
            out
        );
    }
    s
}

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
