//! Windowed jobs of the tests: `datagen` with out-of-order timestamps → `window-aggregate` → `file-sink`, and the
//! rows such a job must commit, computed from the datagen formula and window arithmetic written out afresh
//! (not the operator's code): every key's windows, each exactly once with its count.

use anyhow::{bail, Context};
use std::collections::BTreeMap;
use std::path::Path;
use weir_common::job::datagen::EventTimeConfig;
use weir_common::job::datagen::{key_of, split_range, timestamp_of};

/// The datagen seed of window jobs.
pub const SEED: u64 = 11;
/// Splits of the source.
pub const SPLITS: u32 = 4;
/// Timestamps of a split move 1 ms per record and are moved back by up to this much.
pub const DISORDER_MS: u64 = 40;
/// Event time of each split's first record.
pub const START_MS: i64 = 1_000_000;

/// A window job's shape: the `window:` map of the spec, and the windows of a timestamp.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// Tumbling windows of this many ms.
    Tumbling(i64),
    /// Sliding windows: size and slide, ms.
    Sliding(i64, i64),
    /// Sessions with this gap, ms.
    Session(i64),
}

impl Shape {
    /// The spec's `window:` map.
    pub fn yaml(self) -> String {
        match self {
            Shape::Tumbling(s) => format!("{{ tumbling_ms: {s} }}"),
            Shape::Sliding(s, l) => format!("{{ sliding_ms: {s}, slide_ms: {l} }}"),
            Shape::Session(g) => format!("{{ session_gap_ms: {g} }}"),
        }
    }
}

/// The records of a bounded datagen as `(key, timestamp)`.
pub fn records(count: u64, keys: u64) -> Vec<(u64, i64)> {
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
pub fn expected(shape: Shape, recs: &[(u64, i64)]) -> BTreeMap<(u64, i64, i64), u64> {
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
pub fn committed_rows(dir: &Path) -> anyhow::Result<Vec<(u64, i64, i64, u64)>> {
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
pub fn check_rows(what: &str, dir: &Path, want: &BTreeMap<(u64, i64, i64), u64>) -> anyhow::Result<()> {
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
pub fn spec(name: &str, backend: &str, p: u32, count: u64, keys: u64, rate: u64, sinks: &[(Shape, &Path)]) -> String {
    let mut s = format!(
        "name: {name}\nparallelism: {p}\nstate_backend: {backend}\n\
         checkpointing: {{ interval_ms: 300 }}\n\
         restart: {{ strategy: fixed-delay, attempts: 1000000, delay_ms: 200 }}\n\
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

/// [`records`] of a datagen whose timestamps are moved back by up to `max_disorder_ms` (instead of
/// [`DISORDER_MS`]), as `(key, timestamp)`.
pub fn records_with_disorder(count: u64, keys: u64, max_disorder_ms: u64) -> Vec<(u64, i64)> {
    let t = EventTimeConfig { start_ms: START_MS, step_ms: 1, max_disorder_ms, wall_clock: false };
    let mut out = Vec::with_capacity(count as usize);
    for j in 0..SPLITS {
        let (start, end) = split_range(j, SPLITS, Some(count));
        for i in start..end {
            out.push((key_of(SEED, i, keys), timestamp_of(&t, SEED, i, i - start)));
        }
    }
    out
}

/// A window of a key: `(key, window_start, window_end)`.
pub type KeyWindow = (u64, i64, i64);

/// The committed values of each window, `(key, start, end) → (first, last)`, when every window's rows are a
/// count's first firing and its late re-firings (`allowed_lateness_ms`): consecutive counts `first, first + 1, …,
/// last`, each committed once. A count committed twice, or one missing between two committed ones (a re-firing
/// lost, or one record counted without its own re-firing), is an error naming the window.
pub fn firing_runs(rows: &[(u64, i64, i64, u64)]) -> anyhow::Result<BTreeMap<KeyWindow, (u64, u64)>> {
    let mut values: BTreeMap<KeyWindow, Vec<u64>> = BTreeMap::new();
    for &(k, s, e, v) in rows {
        values.entry((k, s, e)).or_default().push(v);
    }
    let mut runs = BTreeMap::new();
    for (w, mut v) in values {
        v.sort_unstable();
        if v[0] == 0 {
            bail!("window {w:?} fired with a count of 0");
        }
        if let Some(pair) = v.windows(2).find(|p| p[1] != p[0] + 1) {
            let (a, b) = (pair[0], pair[1]);
            bail!("window {w:?}: committed counts {v:?} are not a first firing and a re-firing per record ({a}, {b})");
        }
        runs.insert(w, (v[0], v[v.len() - 1]));
    }
    Ok(runs)
}
