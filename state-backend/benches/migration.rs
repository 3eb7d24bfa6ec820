//! State migration throughput: a value state of Avro records (`{count: long, label: string}`, 8-byte keys)
//! snapshotted, restored, and migrated to a schema with the label removed and a field added with a default
//! (`KeyedStateBackend::migrate_state` with `weir_state::Migrator`), in one thread. Prints, per
//! backend and size, the median of 3 runs as `migrate <backend> <values> values: <ms> ms (<values/s> values/s)`,
//! and the part of it spent in the Avro rewrite of the values alone (`avro rewrite <values> values: ...`).
//! Run: `cargo bench -p weir-state --bench migration` (`WEIR_BENCH_VALUES=1000000,10000000` for the sizes,
//! `WEIR_BENCH_BACKENDS=rocksdb,heap`).

use apache_avro::AvroSchema;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::{Duration, Instant};
use weir_common::job::spec::StateBackend;
use weir_common::state::keygroup::KeyGroupRange;
use weir_state::rocks::RocksOptions;
use weir_state::signature::serializer_of;
use weir_state::Migrator;
use weir_state::{open_keyed_backend, Avro, StateCodec, StateError, ValueState};

const MAX_PARALLELISM: u32 = 128;
const RANGE: KeyGroupRange = KeyGroupRange { start: 0, end: 127 };
const RUNS: usize = 3;

#[derive(Serialize, Deserialize, AvroSchema, Default)]
struct ProfileV1 {
    count: i64,
    label: String,
}

#[derive(Serialize, Deserialize, AvroSchema, Default)]
#[avro(name = "ProfileV1")]
struct ProfileV2 {
    count: i64,
    #[avro(default = "1")]
    weight: i64,
}

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name).unwrap_or_else(|_| default.into()).split(',').map(|s| s.trim().to_string()).collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// A snapshot of `values` profiles in a backend of `kind`; returns its directory.
fn snapshot(kind: StateBackend, dir: &Path, values: u64) -> std::path::PathBuf {
    let opts = RocksOptions::default();
    let mut b = open_keyed_backend(kind, &dir.join("w"), MAX_PARALLELISM, RANGE, None, &opts).expect("backend");
    let mut st = ValueState::<Avro<ProfileV1>>::register(b.as_mut(), "profiles").expect("register");
    for k in 0..values {
        b.set_current_key(&k.to_be_bytes());
        st.update(b.as_mut(), &Avro(ProfileV1 { count: k as i64, label: "seen".into() })).expect("update");
    }
    let mut snap = b.snapshot_sync(&dir.join("snap")).expect("snapshot");
    snap.ready_blocking().expect("snapshot files");
    snap.dir
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create copy");
    for entry in std::fs::read_dir(from).expect("list snapshot") {
        let entry = entry.expect("list snapshot");
        std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy snapshot file");
    }
}

fn main() {
    let migrator = Migrator::between(&serializer_of::<Avro<ProfileV1>>(), &serializer_of::<Avro<ProfileV2>>())
        .expect("resolves")
        .expect("needs a migration");
    for values in env_list("WEIR_BENCH_VALUES", "1000000,10000000") {
        let values: u64 = values.parse().expect("WEIR_BENCH_VALUES: numbers");
        // The Avro rewrite alone, on one value over and over.
        let mut one = Vec::new();
        Avro(ProfileV1 { count: 7, label: "seen".into() }).encode(&mut one);
        let mut out = Vec::new();
        let started = Instant::now();
        for _ in 0..values.min(2_000_000) {
            out.clear();
            migrator.migrate(&one, &mut out).expect("migrates");
        }
        let per = started.elapsed().as_secs_f64() / values.min(2_000_000) as f64;
        println!("avro rewrite {values} values: {:.0} ms ({:.0} values/s)", per * values as f64 * 1e3, 1.0 / per);
        for backend in env_list("WEIR_BENCH_BACKENDS", "rocksdb,heap") {
            let kind = match backend.as_str() {
                "rocksdb" => StateBackend::Rocksdb,
                "heap" => StateBackend::Heap,
                other => panic!("unknown backend {other}"),
            };
            let tmp = tempfile::tempdir().expect("tempdir");
            let snap = snapshot(kind, tmp.path(), values);
            let mut runs = Vec::new();
            for run in 0..RUNS {
                let copy = tmp.path().join(format!("copy-{run}"));
                copy_dir(&snap, &copy);
                let mut b = open_keyed_backend(
                    kind,
                    &tmp.path().join(format!("r{run}")),
                    MAX_PARALLELISM,
                    RANGE,
                    Some(&copy),
                    &RocksOptions::default(),
                )
                .expect("restore");
                let started = Instant::now();
                let mut rewrite = |old: &[u8], out: &mut Vec<u8>| {
                    migrator.migrate(old, out).map_err(|e| StateError::Corrupt(e.to_string()))
                };
                let n = b.migrate_state("profiles", &mut rewrite).expect("migrate");
                runs.push(started.elapsed());
                assert_eq!(n, values);
                let st = ValueState::<Avro<ProfileV2>>::register(b.as_mut(), "profiles").expect("register");
                b.set_current_key(&(values / 2).to_be_bytes());
                let v = st.value(b.as_mut()).expect("read").expect("present");
                assert_eq!((v.count, v.weight), ((values / 2) as i64, 1));
            }
            let m = median(runs);
            println!(
                "migrate {backend} {values} values: {} ms ({:.0} values/s)",
                m.as_millis(),
                values as f64 / m.as_secs_f64()
            );
        }
    }
}
