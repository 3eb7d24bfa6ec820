//! Checkpoint cost with large RocksDB state: 10M keys of ~100-byte values (~1 GB), then rounds in which 1% of
//! the keys change before an incremental checkpoint. Prints, per round, the synchronous pause (what stops the
//! task: freezing the dirty cache rows + the RocksDB checkpoint), the asynchronous part (the frozen rows'
//! SST, written and ingested in the background, + the upload), and the bytes uploaded against the full size. Run: `cargo bench -p weir-state --bench checkpoint_cost` (`WEIR_BENCH_KEYS` to change the size).

use std::collections::HashMap;
use std::time::{Duration, Instant};
use weir_common::job::spec::StateBackend;
use weir_common::service::store::{Store, StoreOptions};
use weir_common::state::keygroup::KeyGroupRange;
use weir_state::snapshot::{shareable_files, upload_keyed_incremental};
use weir_state::{open_keyed_backend, ValueState};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let keys: u64 = std::env::var("WEIR_BENCH_KEYS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000_000);
    let rounds = 5;
    let tmp = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let store =
        Store::open(&format!("file://{}/store", tmp.path().display()), &StoreOptions::default()).expect("store");
    let range = KeyGroupRange { start: 0, end: 127 };
    let mut b =
        open_keyed_backend(StateBackend::Rocksdb, &tmp.path().join("db"), 128, range, None, &Default::default())
            .expect("backend");
    let mut st = ValueState::<Vec<u8>>::register(b.as_mut(), "v").expect("register");
    // Incompressible values, so that the state on disk really is ~1 GB.
    let value = |k: u64, round: u64| {
        let mut v = Vec::with_capacity(104);
        for i in 0..13u64 {
            v.extend_from_slice(&weir_common::job::datagen::splitmix64(k ^ (round << 40) ^ (i << 56)).to_le_bytes());
        }
        v.truncate(100);
        v
    };

    let load = Instant::now();
    for k in 0..keys {
        b.set_current_key(&k.to_be_bytes());
        st.update(b.as_mut(), &value(k, 0)).expect("update");
    }
    println!("loaded {keys} keys of 100-byte values in {:.1} s", load.elapsed().as_secs_f64());

    let mut confirmed = HashMap::new();
    let (mut syncs, mut uploads) = (Vec::new(), Vec::new());
    println!("{:>5} {:>10} {:>10} {:>12} {:>12}", "round", "sync ms", "async ms", "uploaded", "full size");
    for round in 0..=rounds {
        if round > 0 {
            // 1% of the keys change, spread over the key space.
            for k in (0..keys).step_by(100) {
                let k = (k + round * 7) % keys;
                b.set_current_key(&k.to_be_bytes());
                st.update(b.as_mut(), &value(k, round)).expect("update");
            }
        }
        let t = Instant::now();
        let mut snap = b.snapshot_sync(&tmp.path().join(format!("snap-{round}"))).expect("snapshot");
        let sync = t.elapsed();
        let t = Instant::now();
        let (handle, uploaded) = rt
            .block_on(upload_keyed_incremental(
                &store,
                &mut snap,
                &format!("job/chk-{round}/op/0/keyed"),
                Some("job/shared/op/0/bench"),
                &confirmed,
            ))
            .expect("upload");
        let upload = t.elapsed();
        let _ = std::fs::remove_dir_all(&snap.dir);
        confirmed = shareable_files(&handle);
        let full: u64 = handle.files.iter().map(|f| f.size).sum();
        println!(
            "{:>5} {:>10} {:>10} {:>10.1}MB {:>10.1}MB{}",
            round,
            sync.as_millis(),
            upload.as_millis(),
            uploaded as f64 / 1e6,
            full as f64 / 1e6,
            if round == 0 { "  (first: full upload)" } else { "" }
        );
        if round == 0 {
            // The load left RocksDB compacting for a while; the rounds measure the steady state after it.
            let t = Instant::now();
            let mut quiet = 0;
            while quiet < 10 && t.elapsed() < Duration::from_secs(300) {
                let busy = b.properties().iter().any(|(_, p, v)| {
                    (*p == "rocksdb.num-running-compactions" || *p == "rocksdb.compaction-pending") && *v > 0
                });
                quiet = if busy { 0 } else { quiet + 1 };
                std::thread::sleep(Duration::from_millis(100));
            }
            println!("        (waited {:.1} s for compactions after the load)", t.elapsed().as_secs_f64());
        }
        if round > 0 {
            syncs.push(sync);
            uploads.push(upload);
        }
    }
    println!(
        "median over {rounds} rounds with 1% updated: sync pause {} ms, async part {} ms",
        median(syncs).as_millis(),
        median(uploads).as_millis()
    );
}
