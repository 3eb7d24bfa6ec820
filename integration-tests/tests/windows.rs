//! Event-time windows on real processes: `datagen` with out-of-order timestamps → `window-aggregate`
//! (tumbling, sliding and session windows) → exactly-once `file-sink`s. The expected rows are computed by the
//! harness (`weir_integration_tests::windows`) from the datagen formula and window arithmetic written out
//! afresh (not the operator's code): every key's windows, each exactly once with its count.
//!
//! - A task manager is SIGKILLed mid-run, on RocksDB and on heap: the job restarts (`restarts >= 1`) from its
//!   last checkpoint, which held open windows (`savepoint inspect` counts their event-time timers in it), so
//!   window accumulators and their timers are restored from a crash, and the committed rows are still exactly
//!   the expected ones.
//! - A windowed job is stopped with a savepoint at parallelism 2, restored at 3, stopped again, restored at 1
//!   to the end: windows open at each stop fire exactly once after the restore (their timers moved with their
//!   key groups), on RocksDB and on heap. The task managers' logs say how each subtask's state came back
//!   (`restore_path`): on RocksDB, merging native snapshots imports their SST files, but for states an earlier
//!   rescale cut with range deletes, whose rows are copied.
//! - Late records and allowed lateness through a task manager kill: one tumbling window without lateness and one
//!   with `allowed_lateness_ms`, both sending what is too late to their side output. The late records' event
//!   times are written too, so each window is checked on its own: its first firing and one re-firing per record
//!   within the lateness (consecutive counts, each committed once), plus its records on the side output, are
//!   exactly the records the datagen formula puts in it.
//! - Processing-time timers on a manual clock (`WEIR_CLOCK_FILE`): a `trigger: processing-time` window fires
//!   exactly when the clock passes its end.
//!
//! Build the binaries first: `cargo build --release --workspace --bins`.

use anyhow::{bail, ensure, Context};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use weir_integration_tests::windows::{
    check_rows, committed_rows, expected, firing_runs, records, records_with_disorder, spec, Shape, SEED, SPLITS,
    START_MS,
};
use weir_integration_tests::{Cluster, ClusterOptions, JobState};

/// Runs tumbling, sliding and session windows on `backend`, SIGKILLs a busy task manager mid-run and checks
/// that the job restarted from a checkpoint holding open windows' timers and that every window is exact.
fn windows_through_a_kill(backend: &str) -> anyhow::Result<()> {
    let (count, keys, rate) = (40_000u64, 300u64, 8_000u64);
    let mut cluster = Cluster::start(ClusterOptions::new(2, 8))?;
    let shapes = [Shape::Tumbling(100), Shape::Sliding(200, 50), Shape::Session(60)];
    let dirs: Vec<_> = (0..shapes.len()).map(|i| cluster.output_dir(&format!("out{i}"))).collect::<Result<_, _>>()?;
    let sinks: Vec<(Shape, &Path)> = shapes.iter().copied().zip(dirs.iter().map(|d| d.as_path())).collect();
    // Checkpoints are kept, so that the one the job restores from can be inspected afterwards.
    let yaml = spec(&format!("windows-kill-{backend}"), backend, 2, count, keys, rate, &sinks)
        .replace("checkpointing: { interval_ms: 300 }", "checkpointing: { interval_ms: 300, retained: 100 }");
    ensure!(yaml.contains("retained: 100"), "{yaml}");
    let id = cluster.submit(&yaml)?;
    cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
    cluster.wait_for_checkpoints(&id, 3, Duration::from_secs(60))?;
    let busy = cluster.busy_taskmanagers()?;
    let victim = *busy.first().context("no busy task manager")?;
    cluster.kill_taskmanager(victim)?;
    eprintln!("{backend}: killed task manager {victim} mid-run");
    cluster.start_taskmanager()?;
    let done = cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180))?;
    ensure!(done.restarts >= 1, "the kill did not restart the job: {done:?}");
    // The checkpoint the job restored from held windows still open: their firing timers were pending.
    let restored = restored_checkpoint(&done.restored_from).with_context(|| format!("{done:?}"))?;
    let store = cluster.checkpoint_dir().context("a local checkpoint store")?;
    let url = format!("file://{}", store.join(&id).join(format!("chk-{restored}")).display());
    let inspect = cluster.cli_json(&["savepoint", "inspect", &url])?;
    for i in 0..shapes.len() {
        let uid = format!("win{i}");
        let timers = event_timers(&inspect, &uid);
        eprintln!("{backend}: restored from checkpoint {restored}, where {uid} holds {timers:?} event-time timers");
        if timers.unwrap_or(0) == 0 {
            bail!("checkpoint {restored} shows no event-time timers of {uid}: {inspect}");
        }
    }
    let recs = records(count, keys);
    for (shape, dir) in &sinks {
        let want = expected(*shape, &recs);
        check_rows(&format!("{backend} {shape:?}"), dir, &want)?;
        eprintln!("{backend} {shape:?}: {} windows exact", want.len());
    }
    cluster.stop();
    Ok(())
}

/// The checkpoint id of a job's `restored_from` (`checkpoint N`, possibly followed by a note on a fallback).
fn restored_checkpoint(restored_from: &str) -> anyhow::Result<u64> {
    let rest = restored_from.strip_prefix("checkpoint ").context("not restored from one of its own checkpoints")?;
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().with_context(|| format!("no checkpoint id in {restored_from:?}"))
}

#[test]
fn tumbling_sliding_and_session_windows_are_exact_through_a_taskmanager_kill() -> anyhow::Result<()> {
    windows_through_a_kill("rocksdb")
}

/// The heap backend's timers restored from a crash (its own checkpoint, not a canonical savepoint).
#[test]
fn tumbling_sliding_and_session_windows_are_exact_through_a_taskmanager_kill_on_heap() -> anyhow::Result<()> {
    windows_through_a_kill("heap")
}

/// Stops at parallelism 2, restores at 3, stops, restores at 1 to the end: every window exactly once.
fn savepoint_chain(backend: &str) -> anyhow::Result<()> {
    let (count, keys, rate) = (30_000u64, 200u64, 6_000u64);
    let mut cluster = Cluster::start(ClusterOptions::new(2, 8))?;
    let shapes = [Shape::Tumbling(100), Shape::Session(50)];
    let dirs: Vec<_> = (0..shapes.len()).map(|i| cluster.output_dir(&format!("out{i}"))).collect::<Result<_, _>>()?;
    let sinks: Vec<(Shape, &Path)> = shapes.iter().copied().zip(dirs.iter().map(|d| d.as_path())).collect();
    let mut savepoint: Option<String> = None;
    let mut restored = Vec::new();
    for (step, p) in [2u32, 3, 1].into_iter().enumerate() {
        let yaml = spec(&format!("windows-rescale-{backend}"), backend, p, count, keys, rate, &sinks);
        let id = match &savepoint {
            None => cluster.submit(&yaml)?,
            Some(url) => cluster.submit_from(&yaml, url, "", false)?,
        };
        if step > 0 {
            restored.push((step, p, id.clone()));
        }
        cluster.wait_for_state(&id, &[JobState::Running], Duration::from_secs(30))?;
        if step == 2 {
            cluster.wait_for_state(&id, &[JobState::Finished], Duration::from_secs(180))?;
            break;
        }
        std::thread::sleep(Duration::from_millis(1500));
        // RocksDB's native savepoints restore at another parallelism by importing the snapshots' SST files
        // (timers included) where nothing cut them, checked below.
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
    // How each restored subtask's state came back, as its task manager logged it.
    for (step, p, id) in &restored {
        for uid in ["win0", "win1"] {
            let paths = cluster.restore_paths(id, uid);
            eprintln!("step {step}: {uid} at parallelism {p} restored by {paths:?}");
            ensure!(paths.len() == *p as usize, "step {step}: {uid}: {} restore lines for {p} subtasks", paths.len());
            let (allowed, needed) = expected_restore_paths(backend, *step);
            ensure!(
                paths.iter().all(|path| allowed.contains(&path.as_str()))
                    && paths.iter().any(|path| needed.contains(&path.as_str())),
                "step {step}: {uid} restored by {paths:?}; expected only {allowed:?}, one at least of {needed:?}"
            );
        }
    }
    cluster.stop();
    Ok(())
}

/// The restore paths (`restore_path` in the task managers' logs) the subtasks of a step of [`savepoint_chain`]
/// may take, and those one of them at least must take. Heap state is loaded. On RocksDB, from 2 to 3 subtasks
/// the middle one's key groups were two old subtasks', whose native snapshots it imports (SST files whole: the
/// first step started afresh, so nothing in them was cut); the others' were one old subtask's, whose snapshot
/// they open (and cut to their range with range deletes). From 3 to 1 the one subtask merges three snapshots
/// that such cuts left range deletions in: those states' rows are copied, the others' files imported (how many
/// of each depends on what compactions dropped meanwhile).
fn expected_restore_paths(backend: &str, step: usize) -> (&'static [&'static str], &'static [&'static str]) {
    match (backend, step) {
        ("heap", _) => (&["load"], &["load"]),
        (_, 1) => (&["open", "import"], &["import"]),
        _ => (&["import", "import+copy", "copy"], &["import", "import+copy", "copy"]),
    }
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

/// Disorder of the late-records job: timestamps up to 150 ms behind, with the watermark 2 ms behind the
/// newest, so that many records are late for their 100 ms window, and many even past [`LATENESS_MS`].
const LATE_DISORDER_MS: u64 = 150;
/// Allowed lateness of the second window operator of the late-records job.
const LATENESS_MS: u64 = 60;

/// The late-records job: `win0` (tumbling 100 ms, no lateness) and `win1` (the same with [`LATENESS_MS`]), each
/// with `late: side-output`. Each side output goes to a sink as it is (`key,1` per record) and to a
/// `window-aggregate` of 1 ms windows with an hour of lateness, which writes every late record's event time: its
/// rows of `(key, ts, ts + 1)` count up, one row per record of that key and timestamp, to how many there were.
fn late_spec(count: u64, keys: u64, rate: u64, dir: &Path) -> String {
    let mut s = format!(
        "name: windows-late\nparallelism: 2\nstate_backend: rocksdb\n\
         checkpointing: {{ interval_ms: 300 }}\n\
         restart: {{ strategy: fixed-delay, attempts: 1000000, delay_ms: 200 }}\n\
         operators:\n  \
         - uid: events\n    kind: datagen\n    \
           config: {{ count: {count}, keys: {keys}, seed: {SEED}, splits: {SPLITS}, rate_per_sec: {rate}, \
                      event_time: {{ start_ms: {START_MS}, step_ms: 1, max_disorder_ms: {LATE_DISORDER_MS} }} }}\n    \
           watermarks: {{ max_out_of_orderness_ms: 2, auto_watermark_interval_ms: 50 }}\n"
    );
    let sink = |uid: &str, input: &str| {
        format!(
            "  - {{ uid: {uid}, kind: file-sink, input: {input}, parallelism: 1, config: {{ path: {:?} }} }}\n",
            dir.join(uid)
        )
    };
    for (i, lateness) in [0, LATENESS_MS].into_iter().enumerate() {
        s += &format!(
            "  - {{ uid: win{i}, kind: window-aggregate, input: events, config: {{ window: {{ tumbling_ms: 100 }}, \
                    allowed_lateness_ms: {lateness}, late: side-output }} }}\n  \
               - {{ uid: when{i}, kind: window-aggregate, input: win{i}.late, \
                    config: {{ window: {{ tumbling_ms: 1 }}, allowed_lateness_ms: 3600000 }} }}\n"
        );
        s += &sink(&format!("out{i}"), &format!("win{i}"));
        s += &sink(&format!("late{i}"), &format!("win{i}.late"));
        s += &sink(&format!("whenout{i}"), &format!("when{i}"));
    }
    s
}

/// The `key,value` lines a sink committed under `dir`, counted per key.
fn lines_per_key(dir: &Path) -> anyhow::Result<BTreeMap<u64, u64>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        for line in std::fs::read_to_string(entry.path())?.lines().filter(|l| !l.is_empty()) {
            let key = line.split(',').next().unwrap_or_default();
            *out.entry(key.parse().with_context(|| format!("late line {line:?}"))?).or_default() += 1;
        }
    }
    Ok(out)
}

/// What one window operator of the late-records job committed, checked window by window against the records the
/// formula puts in each: `(windows fired, re-firings, late records)`.
///
/// - The late records, per key and timestamp, from the 1 ms windows (`when`): each a run of counts `1..=n` or
///   from a first firing up to `n`, each committed once; `n` records of that key at that timestamp exist; per
///   key they are as many as the side output's own lines (`late`).
/// - Per window: its committed counts are its first firing and one re-firing per record within the lateness
///   (none without lateness), and the last count plus its late records is every record the window holds. A
///   window with no row has all its records on the side output; no row or late record is outside the model.
fn check_late_operator(dir: &Path, i: usize, lateness: u64, recs: &[(u64, i64)]) -> anyhow::Result<(usize, u64, u64)> {
    let full = expected(Shape::Tumbling(100), recs);
    let mut at: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    for &(k, ts) in recs {
        *at.entry((k, ts)).or_default() += 1;
    }
    // The late records, by key and timestamp, then by key and window.
    let when = firing_runs(&committed_rows(&dir.join(format!("whenout{i}")))?).context("late timestamps")?;
    let mut late: BTreeMap<(u64, i64, i64), u64> = BTreeMap::new();
    let mut late_per_key: BTreeMap<u64, u64> = BTreeMap::new();
    for (&(k, ts, end), &(_, n)) in &when {
        ensure!(end == ts + 1, "win{i}: late timestamps: a 1 ms window ({k}, {ts}, {end})");
        let exist = at.get(&(k, ts)).copied().unwrap_or(0);
        ensure!(n <= exist, "win{i}: {n} late records of key {k} at {ts}, where the formula has {exist}");
        let start = ts - ts.rem_euclid(100);
        *late.entry((k, start, start + 100)).or_default() += n;
        *late_per_key.entry(k).or_default() += n;
    }
    let raw = lines_per_key(&dir.join(format!("late{i}")))?;
    ensure!(raw == late_per_key, "win{i}: the side output's lines per key differ from its timestamps per key");

    let runs = firing_runs(&committed_rows(&dir.join(format!("out{i}")))?).with_context(|| format!("win{i}"))?;
    if let Some(w) = runs.keys().chain(late.keys()).find(|w| !full.contains_key(*w)) {
        bail!("win{i}: window {w:?} holds no record of the formula");
    }
    let mut refirings = 0;
    for (w, &all) in &full {
        let (first, last) = runs.get(w).copied().unwrap_or((0, 0));
        let l = late.get(w).copied().unwrap_or(0);
        if lateness == 0 && first != last {
            bail!("win{i}: window {w:?} fired with {first} and again up to {last}, without allowed lateness");
        }
        if last + l != all {
            bail!(
                "win{i}: window {w:?} holds {all} records, but its firings counted {first}..={last} and {l} went \
                 to the side output"
            );
        }
        refirings += last - first;
    }
    Ok((runs.len(), refirings, late.values().sum()))
}

/// Late records and allowed lateness through a task manager kill. The watermark trails the source's disorder
/// (2 ms behind, for up to 150 ms of disorder), so many records come after their 100 ms window fired: `win0`
/// (no lateness) sends them all to its side output; `win1` (60 ms of lateness) fires the window again, updated,
/// for each one within the lateness, and sends only those beyond it to its side output. Which records are late
/// depends on when watermarks went out, so the check is, window by window against the formula's records, that
/// every record is counted exactly once: in the window's first firing, as one re-firing, or as one late record
/// at its own timestamp ([`check_late_operator`]).
#[test]
fn late_records_and_allowed_lateness_are_exact_per_window_through_a_taskmanager_kill() -> anyhow::Result<()> {
    let (count, keys, rate) = (40_000u64, 300u64, 8_000u64);
    let mut cluster = Cluster::start(ClusterOptions::new(2, 10))?;
    let dir = cluster.output_dir("late")?;
    for uid in ["out0", "late0", "whenout0", "out1", "late1", "whenout1"] {
        cluster.output_dir(&format!("late/{uid}"))?;
    }
    let id = cluster.submit(&late_spec(count, keys, rate, &dir))?;
    cluster.finish_through_a_kill(&id, 3)?;

    let recs = records_with_disorder(count, keys, LATE_DISORDER_MS);
    let (fired, refired, late) = check_late_operator(&dir, 0, 0, &recs)?;
    eprintln!("win0 (no lateness): {fired} windows fired, {late} late records of {count}");
    ensure!(fired > 0 && late > 0, "expected both window rows and late records: {fired} windows, {late} late");
    ensure!(refired == 0, "win0 re-fired {refired} times without allowed lateness");
    let (fired, refired, late) = check_late_operator(&dir, 1, LATENESS_MS, &recs)?;
    eprintln!(
        "win1 ({LATENESS_MS} ms of lateness): {fired} windows fired, {refired} re-firings, {late} records beyond"
    );
    ensure!(
        fired > 0 && refired > 0 && late > 0,
        "expected first firings, re-firings and records beyond the lateness: {fired}, {refired}, {late}"
    );
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
    use weir_common::job::datagen::EventTimeConfig;
    use weir_common::job::datagen::{key_of, split_range, timestamp_of};
    use weir_integration_tests::windows::DISORDER_MS;
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
