//! Timer cost at scale, on RocksDB and heap: registering `WEIR_BENCH_TIMERS` (default 10M) event-time timers
//! (1M keys, 10 timers each, timestamps spread over an hour), the synchronous pause of a checkpoint with all of
//! them live (RocksDB: the checkpoint of the files, incremental; heap: the synchronous part of its snapshot),
//! then firing them all in timestamp order. Prints timers per second for registration and firing and the pause.
//! Run: `cargo bench -p weir-state --bench timers`.
//!
//! Knobs: `WEIR_BENCH_WINDOWS=N` puts the timers at N window ends shared by every key (each key one timer per
//! window, as tumbling windows set them) instead of spread; `WEIR_BENCH_STEP=MS` fires as a watermark advancing
//! by MS at a time would, not all at once; `WEIR_BENCH_BACKENDS=rocksdb,heap` picks the backends.

use std::time::Instant;
use weir_common::job::datagen::splitmix64;
use weir_common::job::spec::{parse_state_backend, StateBackend};
use weir_common::state::keygroup::KeyGroupRange;
use weir_state::{open_keyed_backend, TimeDomain, TimerService};

const HOUR_MS: i64 = 3_600_000;

fn knob(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn main() {
    let timers = knob("WEIR_BENCH_TIMERS").unwrap_or(10_000_000);
    let windows = knob("WEIR_BENCH_WINDOWS").filter(|w| *w > 0);
    let step = knob("WEIR_BENCH_STEP").filter(|s| *s > 0).map(|s| s as i64);
    let backends: Vec<StateBackend> = match std::env::var("WEIR_BENCH_BACKENDS") {
        Ok(list) => list.split(',').map(|b| parse_state_backend(b.trim()).expect("backend name")).collect(),
        Err(_) => vec![StateBackend::Rocksdb, StateBackend::Heap],
    };
    let keys = (timers / windows.unwrap_or(10)).max(1);
    let range = KeyGroupRange { start: 0, end: 127 };
    let spread = match windows {
        Some(w) => format!("at {w} window ends shared by all keys"),
        None => "spread over an hour".to_string(),
    };
    let firing = match step {
        Some(s) => format!("fired by a watermark advancing {s} ms at a time"),
        None => "fired all at once".to_string(),
    };
    println!("{timers} timers over {keys} keys, {spread}, {firing}");
    println!("{:>8} {:>16} {:>14} {:>14} {:>16}", "backend", "register/s", "sync pause ms", "snapshot ms", "fire/s");
    for backend in backends {
        let tmp = tempfile::tempdir().expect("temp dir");
        let mut b =
            open_keyed_backend(backend, &tmp.path().join("w"), 128, range, None, &Default::default()).expect("backend");
        let mut service = TimerService::open(b.as_mut(), range).expect("timer service");
        let started = Instant::now();
        for i in 0..timers {
            b.set_current_key(&(i % keys).to_be_bytes());
            let ts = match windows {
                // Window `i / keys` of every key: its end, shared by all keys.
                Some(w) => ((i / keys) % w + 1) as i64 * (HOUR_MS / w as i64) - 1,
                // Within the hour, in no particular order.
                None => (splitmix64(i) % HOUR_MS as u64) as i64,
            };
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
        let mut watermark = match step {
            Some(s) => s - 1,
            None => i64::MAX,
        };
        loop {
            while let Some(ts) = service.pop_due(b.as_mut(), TimeDomain::EventTime, watermark).expect("fire") {
                assert!(ts >= last && ts <= watermark, "timers fire in timestamp order, once due");
                last = ts;
                fired += 1;
            }
            match step {
                Some(s) if watermark < HOUR_MS => watermark += s,
                _ => break,
            }
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
