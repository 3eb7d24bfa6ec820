//! Operations per second of every keyed state kind on RocksDB and on the heap, through the public API.
//! Run: `cargo bench -p weir-state --bench state_kinds` (prints a table; numbers are medians of 3 runs).

use std::time::Instant;
use weir_common::job::spec::StateBackend;
use weir_common::state::keygroup::KeyGroupRange;
use weir_state::AggregateFunction;
use weir_state::{
    open_keyed_backend, AggregatingState, KeyedStateBackend, ListState, MapState, ReducingState, ValueState,
};

const KEYS: u64 = 100_000;
const OPS: u64 = 1_000_000;

struct Mean;

impl AggregateFunction<u64, u64, u64> for Mean {
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, value: u64, acc: u64) -> u64 {
        acc + value
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
}

fn key(i: u64) -> [u8; 8] {
    // Spread the keys the way datagen does, so accesses are not sequential.
    weir_common::job::datagen::key_of(7, i, KEYS).to_be_bytes()
}

fn backend(kind: StateBackend, dir: &std::path::Path) -> Box<dyn KeyedStateBackend> {
    open_keyed_backend(kind, dir, 128, KeyGroupRange { start: 0, end: 127 }, None, &Default::default())
        .expect("open backend")
}

/// Runs `f` for `OPS` operations and returns operations per second.
fn timed(mut f: impl FnMut(u64)) -> f64 {
    let start = Instant::now();
    for i in 0..OPS {
        f(i);
    }
    OPS as f64 / start.elapsed().as_secs_f64()
}

fn run(kind: StateBackend, name: &str) -> f64 {
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut b = backend(kind, tmp.path());
    let b = b.as_mut();
    match name {
        "value get+update" => {
            let mut s = ValueState::<u64>::register(b, "v").expect("register");
            timed(|i| {
                b.set_current_key(&key(i));
                let n = s.value(b).expect("get").unwrap_or(0);
                s.update(b, &(n + 1)).expect("update");
            })
        }
        "list add" => {
            let mut s = ListState::<u64>::register(b, "l").expect("register");
            timed(|i| {
                b.set_current_key(&key(i));
                s.add(b, &i).expect("add");
            })
        }
        "list get (10 elements)" => {
            let mut s = ListState::<u64>::register(b, "l").expect("register");
            for i in 0..KEYS * 10 {
                b.set_current_key(&key(i));
                s.add(b, &i).expect("add");
            }
            timed(|i| {
                b.set_current_key(&key(i));
                std::hint::black_box(s.get(b).expect("get"));
            })
        }
        "map put" => {
            let mut s = MapState::<u64, u64>::register(b, "m").expect("register");
            timed(|i| {
                b.set_current_key(&key(i % 1000));
                s.put(b, &i, &i).expect("put");
            })
        }
        "map get" => {
            let mut s = MapState::<u64, u64>::register(b, "m").expect("register");
            for i in 0..OPS {
                b.set_current_key(&key(i % 1000));
                s.put(b, &i, &i).expect("put");
            }
            timed(|i| {
                b.set_current_key(&key(i % 1000));
                std::hint::black_box(s.get(b, &i).expect("get"));
            })
        }
        "reducing add" => {
            let mut s = ReducingState::<u64>::register(b, "r", |a, b| a + b).expect("register");
            timed(|i| {
                b.set_current_key(&key(i));
                s.add(b, 1).expect("add");
            })
        }
        "aggregating add" => {
            let mut s = AggregatingState::<u64, u64, u64>::register(b, "a", Mean).expect("register");
            timed(|i| {
                b.set_current_key(&key(i));
                s.add(b, i).expect("add");
            })
        }
        other => panic!("unknown benchmark {other}"),
    }
}

fn main() {
    let benches = [
        "value get+update",
        "list add",
        "list get (10 elements)",
        "map put",
        "map get",
        "reducing add",
        "aggregating add",
    ];
    println!("{KEYS} keys, {OPS} operations per run, median of 3 runs");
    println!("{:<24} {:>16} {:>16}", "operation", "rocksdb ops/s", "heap ops/s");
    for name in benches {
        let mut cells = Vec::new();
        for kind in [StateBackend::Rocksdb, StateBackend::Heap] {
            let mut runs: Vec<f64> = (0..3).map(|_| run(kind, name)).collect();
            runs.sort_by(|a, b| a.total_cmp(b));
            cells.push(runs[1]);
        }
        println!("{:<24} {:>16.0} {:>16.0}", name, cells[0], cells[1]);
    }
}
