//! Timer cost at scale, on RocksDB and heap: registering `WEIR_BENCH_TIMERS` (default 10M) event-time timers
//! (1M keys, 10 timers each, timestamps spread over an hour), the synchronous pause of a checkpoint with all of
//! them live (RocksDB: the checkpoint of the files, incremental; heap: the whole snapshot, which is synchronous),
//! then firing them all in timestamp order. Prints timers per second for registration and firing and the pause.
//! Run: `cargo bench -p weir-state --bench timers`.

use std::time::Instant;
use weir_common::datagen::splitmix64;
use weir_common::keygroup::KeyGroupRange;
use weir_common::spec::StateBackend;
use weir_state::{open_keyed_backend, TimeDomain, TimerService};

fn main() {
    let timers: u64 = std::env::var("WEIR_BENCH_TIMERS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000_000);
    let keys = (timers / 10).max(1);
    let range = KeyGroupRange { start: 0, end: 127 };
    println!("{timers} timers over {keys} keys");
    println!("{:>8} {:>16} {:>14} {:>14} {:>16}", "backend", "register/s", "sync pause ms", "snapshot ms", "fire/s");
    for backend in [StateBackend::Rocksdb, StateBackend::Heap] {
        let tmp = tempfile::tempdir().expect("temp dir");
        let mut b =
            open_keyed_backend(backend, &tmp.path().join("w"), 128, range, None, &Default::default()).expect("backend");
        let mut service = TimerService::open(b.as_mut(), range).expect("timer service");
        let started = Instant::now();
        for i in 0..timers {
            b.set_current_key(&(i % keys).to_be_bytes());
            // Within the hour, in no particular order.
            let ts = (splitmix64(i) % 3_600_000) as i64;
            service.register(b.as_mut(), TimeDomain::EventTime, ts).expect("register");
        }
        let register = timers as f64 / started.elapsed().as_secs_f64();
        let live = service.count(b.as_mut(), TimeDomain::EventTime).expect("count");
        let t = Instant::now();
        let mut snap = b.snapshot_sync(&tmp.path().join("snap")).expect("snapshot");
        let pause = t.elapsed();
        snap.ready_blocking().expect("snapshot files");
        let whole = t.elapsed();
        let t = Instant::now();
        let mut fired = 0u64;
        let mut last = i64::MIN;
        while let Some(ts) = service.pop_due(b.as_mut(), TimeDomain::EventTime, i64::MAX).expect("fire") {
            assert!(ts >= last, "timers fire in timestamp order");
            last = ts;
            fired += 1;
        }
        assert_eq!(fired, live, "every live timer fires once");
        let fire = fired as f64 / t.elapsed().as_secs_f64();
        println!(
            "{:>8} {register:>16.0} {:>14.1} {:>14.1} {fire:>16.0}   ({live} live timers)",
            b.kind(),
            pause.as_secs_f64() * 1e3,
            whole.as_secs_f64() * 1e3
        );
    }
}
