//! Restoring RocksDB keyed state on rescaling: ~1M keys of a value state (8-byte keys, `u64` values) in `p_old`
//! native snapshots, restored at `p_new` with `open_keyed_backend_from`, each new subtask given exactly the
//! snapshots that overlap its key groups. `2->2` restores each snapshot as it is (a rename), `2->4` is a
//! scale-out (one source per subtask, clipped with range deletes), `4->2` a scale-in (a base and one snapshot
//! merged by SST ingestion). Prints, per case, the time to restore every new subtask one after the other and
//! the slowest subtask's restore (what a job waits for when subtasks restore in parallel, and what Flink's
//! `maxRestoreStateDurationMs` reports), medians of 3 runs, as
//! `rescale <case> <keys> keys: <ms> ms (slowest subtask <ms> ms)`.
//! Then the cost of a canonical savepoint against a native one for the same keys in one subtask (the native
//! snapshot, the conversion with `write_canonical`, and restores from either) as `canonical <what> <keys> keys:
//! <ms> ms` lines. Run: `cargo bench -p weir-state --bench rescale` (`WEIR_BENCH_KEYS` to change the size,
//! `WEIR_BENCH_ONLY=rescale` or `canonical` for one half).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weir_common::ids::SubtaskIndex;
use weir_common::job::spec::StateBackend;
use weir_common::state::keygroup::{key_group_for_key, KeyGroupRange};
use weir_state::keyed::LocalSnapshot;
use weir_state::rocks::RocksOptions;
use weir_state::{
    open_keyed_backend, open_keyed_backend_from, write_canonical, RestoreSource, SnapshotFormat, ValueState,
};

const MAX_PARALLELISM: u32 = 128;
const RUNS: usize = 3;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy");
    for entry in std::fs::read_dir(from).expect("list snapshot") {
        let entry = entry.expect("list snapshot");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy snapshot file");
    }
}

/// Native snapshots of `p` subtasks holding keys `0..keys` (each the keys of its key groups).
fn old_snapshots(dir: &Path, keys: u64, p: u32) -> Vec<(PathBuf, KeyGroupRange)> {
    let opts = RocksOptions::default();
    (0..p)
        .map(|i| {
            let range = KeyGroupRange::for_subtask(SubtaskIndex(i), p, MAX_PARALLELISM);
            let mut b = open_keyed_backend(
                StateBackend::Rocksdb,
                &dir.join(format!("w{i}")),
                MAX_PARALLELISM,
                range,
                None,
                &opts,
            )
            .expect("backend");
            let mut st = ValueState::<u64>::register(b.as_mut(), "v").expect("register");
            for k in 0..keys {
                let key = k.to_be_bytes();
                if range.contains(key_group_for_key(&key, MAX_PARALLELISM)) {
                    b.set_current_key(&key);
                    st.update(b.as_mut(), &k).expect("update");
                }
            }
            let mut snap = b.snapshot_sync(&dir.join(format!("snap{i}"))).expect("snapshot");
            snap.ready_blocking().expect("snapshot files");
            (snap.dir, range)
        })
        .collect()
}

/// Restores `p_new` subtasks from copies of `old`; returns the time the restores took in all, the slowest
/// subtask's, and the keys they hold.
fn restore_all(dir: &Path, old: &[(PathBuf, KeyGroupRange)], p_new: u32, count: bool) -> (Duration, Duration, u64) {
    let _ = std::fs::remove_dir_all(dir);
    // Restores consume their sources: every run gets fresh copies, made before the clock starts.
    let mut per_subtask = Vec::new();
    for j in 0..p_new {
        let range = KeyGroupRange::for_subtask(SubtaskIndex(j), p_new, MAX_PARALLELISM);
        let sources: Vec<RestoreSource> = old
            .iter()
            .enumerate()
            .filter(|(_, (_, r))| r.intersection(&range).is_some())
            .map(|(i, (src, r))| {
                let copy = dir.join(format!("src-{j}-{i}"));
                copy_dir(src, &copy);
                RestoreSource { dir: copy, format: SnapshotFormat::Rocksdb, key_group_range: *r }
            })
            .collect();
        per_subtask.push((range, sources));
    }
    let opts = RocksOptions::default();
    let t = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut backends = Vec::new();
    for (j, (range, sources)) in per_subtask.into_iter().enumerate() {
        let one = Instant::now();
        let b = open_keyed_backend_from(
            StateBackend::Rocksdb,
            &dir.join(format!("w{j}")),
            MAX_PARALLELISM,
            range,
            sources,
            &opts,
        )
        .expect("restore");
        slowest = slowest.max(one.elapsed());
        backends.push(b);
    }
    let took = t.elapsed();
    let mut keys = 0;
    if count {
        for b in &mut backends {
            let st = ValueState::<u64>::register(b.as_mut(), "v").expect("register");
            st.for_each(b.as_mut(), |k, v| {
                assert_eq!(u64::from_be_bytes(k.try_into().expect("8-byte key")), v);
                keys += 1;
                Ok(())
            })
            .expect("iterate");
        }
    }
    (took, slowest, keys)
}

/// The median of `RUNS` runs of `f` (given the run's number).
fn median_ms(mut f: impl FnMut(usize) -> Duration) -> u128 {
    let mut times: Vec<Duration> = (0..RUNS).map(&mut f).collect();
    times.sort();
    times[RUNS / 2].as_millis()
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).expect("list").map(|e| e.expect("entry").metadata().expect("stat").len()).sum()
}

/// Native against canonical savepoints of `keys` keys in one subtask of `kind`.
fn canonical_costs(dir: &Path, kind: StateBackend, keys: u64) {
    let name = SnapshotFormat::native(kind).name();
    let all = KeyGroupRange { start: 0, end: MAX_PARALLELISM - 1 };
    let opts = RocksOptions::default();
    let mut b = open_keyed_backend(kind, &dir.join("live"), MAX_PARALLELISM, all, None, &opts).expect("backend");
    let mut st = ValueState::<u64>::register(b.as_mut(), "v").expect("register");
    for k in 0..keys {
        b.set_current_key(&k.to_be_bytes());
        st.update(b.as_mut(), &k).expect("update");
    }
    // One snapshot: the first one freezes every cached row, later ones would find nothing to write.
    let t = Instant::now();
    let mut native = b.snapshot_sync(&dir.join("native")).expect("snapshot");
    native.ready_blocking().expect("snapshot files");
    let ms = t.elapsed().as_millis();
    println!("canonical native-{name}-snapshot {keys} keys: {ms} ms ({} MB)", dir_bytes(&native.dir) / 1_000_000);
    let mut canonical = None;
    let ms = median_ms(|run| {
        // The conversion consumes a RocksDB snapshot: each run converts a copy.
        let copy = dir.join(format!("copy{run}"));
        copy_dir(&native.dir, &copy);
        let local = LocalSnapshot { dir: copy, files: native.files.clone(), pending: None, ..native };
        let t = Instant::now();
        let c = write_canonical(
            local,
            &dir.join(format!("cw{run}")),
            &dir.join(format!("canonical{run}")),
            MAX_PARALLELISM,
            &opts,
        )
        .expect("canonical");
        let took = t.elapsed();
        canonical = Some(c);
        took
    });
    let canonical = canonical.expect("a canonical snapshot");
    println!("canonical {name}-to-canonical {keys} keys: {ms} ms ({} MB)", dir_bytes(&canonical.dir) / 1_000_000);
    for (what, src, format) in [
        ("native", &native.dir, SnapshotFormat::native(kind)),
        ("canonical", &canonical.dir, SnapshotFormat::Canonical),
    ] {
        for target in [StateBackend::Rocksdb, StateBackend::Heap] {
            if format == SnapshotFormat::Rocksdb && target == StateBackend::Heap {
                continue;
            }
            let ms = median_ms(|run| {
                let copy = dir.join(format!("restore-src{run}"));
                let _ = std::fs::remove_dir_all(&copy);
                copy_dir(src, &copy);
                let source = RestoreSource { dir: copy, format, key_group_range: all };
                let t = Instant::now();
                let r = open_keyed_backend_from(
                    target,
                    &dir.join(format!("restore{run}")),
                    MAX_PARALLELISM,
                    all,
                    vec![source],
                    &opts,
                )
                .expect("restore");
                let took = t.elapsed();
                drop(r);
                took
            });
            println!(
                "canonical restore-{what}-{name}-into-{} {keys} keys: {ms} ms",
                SnapshotFormat::native(target).name()
            );
        }
    }
}

fn main() {
    let keys: u64 = std::env::var("WEIR_BENCH_KEYS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let tmp = tempfile::tempdir().expect("temp dir");
    // The old snapshots of each old parallelism, made once.
    let mut olds = std::collections::BTreeMap::new();
    // `WEIR_BENCH_ONLY=canonical` (or `rescale`) runs one half.
    let only = std::env::var("WEIR_BENCH_ONLY").unwrap_or_default();
    let cases: &[(u32, u32)] = if only == "canonical" { &[] } else { &[(2, 2), (2, 4), (4, 2)] };
    for &(p_old, p_new) in cases {
        let case = format!("{p_old}->{p_new}");
        let old =
            olds.entry(p_old).or_insert_with(|| old_snapshots(&tmp.path().join(format!("old{p_old}")), keys, p_old));
        let (mut all, mut slowest) = (Vec::new(), Vec::new());
        for run in 0..RUNS {
            let (took, slow, restored) = restore_all(&tmp.path().join(format!("new{p_new}")), old, p_new, run == 0);
            if run == 0 {
                assert_eq!(restored, keys, "{case}: every key restored once");
            }
            all.push(took);
            slowest.push(slow);
        }
        all.sort();
        slowest.sort();
        let runs: Vec<_> = all.iter().map(|t| t.as_millis().to_string()).collect();
        println!(
            "rescale {case} {keys} keys: {} ms (slowest subtask {} ms)",
            all[RUNS / 2].as_millis(),
            slowest[RUNS / 2].as_millis()
        );
        println!("  ({case} runs, sorted: {} ms)", runs.join(", "));
    }
    let kinds: &[StateBackend] = if only == "rescale" { &[] } else { &[StateBackend::Rocksdb, StateBackend::Heap] };
    for &kind in kinds {
        canonical_costs(&tmp.path().join(format!("canonical-{}", SnapshotFormat::native(kind))), kind, keys);
    }
}
