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
//! - Late records (the watermark trailing the disorder) go to the side output `win0.late`, each record counted
//!   in one window or one late line, through a task manager kill.
//! - Processing-time timers on a manual clock (`WEIR_CLOCK_FILE`): a `trigger: processing-time` window fires
//!   exactly when the clock passes its end.
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

/// Late records on the side output, exactly once through a task manager kill: the watermark trails the
/// source's disorder (2 ms behind, for up to 40 ms of disorder), so many records are too late for their window;
/// `window-aggregate` with `late: side-output` sends them to `win0.late`, read by a sink of its own. Which
/// records are late depends on when watermarks went out, so the check is the invariant: every record is either
/// counted in exactly one committed window row or is one committed late line — per key, the window counts plus
/// the late lines are the key's records, no window row is repeated, and none counts more than its window holds.
#[test]
fn late_records_reach_the_side_output_exactly_once_through_a_taskmanager_kill() -> anyhow::Result<()> {
    use std::collections::BTreeMap;
    let (count, keys, rate) = (40_000u64, 300u64, 8_000u64);
    let mut cluster = Cluster::start(ClusterOptions::new(2, 8))?;
    let (win_dir, late_dir) = (cluster.output_dir("windows")?, cluster.output_dir("late")?);
    let shape = Shape::Tumbling(100);
    let yaml = spec("windows-late", "rocksdb", 2, count, keys, rate, &[(shape, win_dir.as_path())])
        .replace("max_out_of_orderness_ms: 40", "max_out_of_orderness_ms: 2")
        .replace(
            "config: { window: { tumbling_ms: 100 } }",
            "config: { window: { tumbling_ms: 100 }, late: side-output }",
        )
        + &format!(
            "  - {{ uid: late, kind: file-sink, input: win0.late, parallelism: 1, config: {{ path: {:?} }} }}\n",
            late_dir
        );
    assert!(yaml.contains("late: side-output") && yaml.contains("max_out_of_orderness_ms: 2"), "{yaml}");
    let id = cluster.submit(&yaml)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    cluster.wait_for_checkpoints(&id, 3, Duration::from_secs(60))?;
    let victim = *cluster.busy_taskmanagers()?.first().context("no busy task manager")?;
    cluster.kill_taskmanager(victim)?;
    cluster.start_taskmanager()?;
    cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180))?;

    let recs = records(count, keys);
    let full = expected(shape, &recs);
    let mut per_key: BTreeMap<u64, u64> = BTreeMap::new();
    for (k, _) in &recs {
        *per_key.entry(*k).or_default() += 1;
    }
    let mut seen = BTreeMap::new();
    let mut counted: BTreeMap<u64, u64> = BTreeMap::new();
    for (k, s, e, n) in weir_integration_tests::windows::committed_rows(&win_dir)? {
        if seen.insert((k, s, e), n).is_some() {
            bail!("window ({k}, {s}, {e}) committed twice");
        }
        match full.get(&(k, s, e)) {
            Some(&all) if n <= all => {}
            other => bail!("window ({k}, {s}, {e}) counts {n}, but holds {other:?} records"),
        }
        *counted.entry(k).or_default() += n;
    }
    let mut late: BTreeMap<u64, u64> = BTreeMap::new();
    let mut late_lines = 0u64;
    for entry in std::fs::read_dir(&late_dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        for line in std::fs::read_to_string(entry.path())?.lines().filter(|l| !l.is_empty()) {
            let key = line.split(',').next().unwrap_or_default();
            *late.entry(key.parse().with_context(|| format!("late line {line:?}"))?).or_default() += 1;
            late_lines += 1;
        }
    }
    eprintln!("{} window rows, {late_lines} late records of {count}", seen.len());
    if late_lines == 0 || seen.is_empty() {
        bail!("expected both window rows and late records: {} rows, {late_lines} late", seen.len());
    }
    for (k, n) in &per_key {
        let (c, l) = (counted.get(k).copied().unwrap_or(0), late.get(k).copied().unwrap_or(0));
        if c + l != *n {
            bail!("key {k}: {c} counted in windows + {l} late != its {n} records");
        }
    }
    cluster.stop();
    Ok(())
}

/// Processing-time timers on a manual clock, with real processes: the task manager reads processing time from
/// a file (`WEIR_CLOCK_FILE`), and `window-aggregate` with `trigger: processing-time` fires a window when that
/// clock passes its end (its state kept by a long allowed lateness while the watermark moves on). With the
/// clock at 0 nothing fires however far event time goes; moving the clock past some window ends fires exactly
/// those windows, each once, with every record it holds — the unbounded source runs on, so the rows are what
/// the clock decided, not the end of input.
#[test]
fn processing_time_timers_fire_when_the_manual_clock_passes_them() -> anyhow::Result<()> {
    use std::collections::BTreeMap;
    use weir_common::builtin::EventTimeConfig;
    use weir_common::datagen::{key_of, split_range, timestamp_of};
    use weir_integration_tests::windows::{committed_rows, DISORDER_MS, SEED, SPLITS, START_MS};
    let clock_dir = tempfile::tempdir()?;
    let clock = clock_dir.path().join("clock");
    std::fs::write(&clock, "0")?;
    let mut options = ClusterOptions::new(1, 4);
    options.env.push(("WEIR_CLOCK_FILE".into(), clock.display().to_string()));
    let mut cluster = Cluster::start(options)?;
    let out = cluster.output_dir("windows")?;
    let keys = 50u64;
    let yaml = format!(
        "name: pt-windows\nparallelism: 2\nstate_backend: rocksdb\ncheckpointing: {{ interval_ms: 200 }}\n\
         operators:\n  \
         - uid: events\n    kind: datagen\n    \
           config: {{ keys: {keys}, seed: {SEED}, splits: {SPLITS}, rate_per_sec: 4000, \
                      event_time: {{ start_ms: {START_MS}, step_ms: 1, max_disorder_ms: {DISORDER_MS} }} }}\n    \
           watermarks: {{ max_out_of_orderness_ms: {DISORDER_MS} }}\n  \
         - {{ uid: win, kind: window-aggregate, input: events, config: {{ window: {{ tumbling_ms: 100 }}, \
              trigger: processing-time, allowed_lateness_ms: 3600000 }} }}\n  \
         - {{ uid: out, kind: file-sink, input: win, parallelism: 1, config: {{ path: {out:?} }} }}\n"
    );
    let id = cluster.submit(&yaml)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    // Event time runs 1 s per second per split: well past the first windows, which must not fire.
    cluster.wait_for_checkpoints(&id, 8, Duration::from_secs(60))?;
    let early = committed_rows(&out)?;
    if !early.is_empty() {
        bail!("windows fired before the clock moved: {:?}", &early[..early.len().min(5)]);
    }

    // The windows ending at or before `upto` hold these counts (every record of them was read long ago).
    let upto = START_MS + 500;
    let t = EventTimeConfig { start_ms: START_MS, step_ms: 1, max_disorder_ms: DISORDER_MS, wall_clock: false };
    let mut want: BTreeMap<(u64, i64, i64), u64> = BTreeMap::new();
    for j in 0..SPLITS {
        let (start, _) = split_range(j, SPLITS, None);
        for q in 0..(upto - START_MS) as u64 + DISORDER_MS + 1 {
            let i = start + q;
            let ts = timestamp_of(&t, SEED, i, q);
            let w = ts - ts.rem_euclid(100);
            if w + 100 <= upto {
                *want.entry((key_of(SEED, i, keys), w, w + 100)).or_default() += 1;
            }
        }
    }
    // The clock passes the last millisecond of those windows, not the next ones'.
    std::fs::write(&clock, (upto - 1).to_string())?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let rows = committed_rows(&out)?;
        let got: BTreeMap<(u64, i64, i64), u64> = rows.iter().map(|(k, s, e, n)| ((*k, *s, *e), *n)).collect();
        if got.len() >= want.len() || std::time::Instant::now() > deadline {
            if rows.len() != got.len() {
                bail!("a window fired twice: {} rows, {} windows", rows.len(), got.len());
            }
            if got != want {
                let extra: Vec<_> = got.iter().filter(|(w, _)| !want.contains_key(*w)).take(5).collect();
                let wrong: Vec<_> = want.iter().filter(|(w, n)| got.get(*w) != Some(*n)).take(5).collect();
                bail!(
                    "{} windows fired, {} expected; extra {extra:?}; missing or wrong {wrong:?}",
                    got.len(),
                    want.len()
                );
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // A few more checkpoints: still exactly those windows (nothing fires until the clock moves again).
    let done = cluster.checkpoints(&id)?.len() as u64;
    cluster.wait_for_checkpoints(&id, done + 3, Duration::from_secs(60))?;
    let rows = committed_rows(&out)?;
    if rows.len() != want.len() {
        bail!("{} rows after the clock stopped, {} expected", rows.len(), want.len());
    }
    eprintln!("{} windows fired by the manual clock, each once", want.len());
    cluster.cancel(&id)?;
    cluster.stop();
    Ok(())
}
