//! One test suite run against both keyed backends: every scenario takes a backend factory and is called for
//! RocksDB (with a tiny write-back cache, so flushes happen mid-test) and for the heap.

use crate::error::StateError;
use crate::keyed::meta::{StateDescriptor, StateKind, StateOptions};
use crate::keyed::ttl::ManualClock;
use crate::keyed::KeyedStateBackend;
use crate::restore::rescale::open_keyed_backend;
use crate::rocks::RocksOptions;
use crate::typed::handles::{
    set_namespace, AggregateFunction, AggregatingState, ListState, MapState, ReducingState, ValueState,
};
use std::path::Path;
use std::sync::Arc;
use weir_common::job::spec::StateBackend;
use weir_common::state::keygroup::{key_group_for_key, KeyGroupRange};

const MAX_PARALLELISM: u32 = 128;
const RANGE: KeyGroupRange = KeyGroupRange { start: 0, end: 127 };

/// Opens a backend in `work_dir`, restoring from `restore` if given.
type Factory = fn(&Path, Option<&Path>) -> Box<dyn KeyedStateBackend>;

fn rocks(work_dir: &Path, restore: Option<&Path>) -> Box<dyn KeyedStateBackend> {
    // TTL scenarios start their manual clocks at T0: the compaction filters of a restored database must not
    // judge rows by the system clock before the scenario sets its own.
    let opts = RocksOptions { cache_bytes: 2048, clock: Some(Arc::new(ManualClock::new(T0))), ..Default::default() };
    open_keyed_backend(StateBackend::Rocksdb, work_dir, MAX_PARALLELISM, RANGE, restore, &opts).unwrap()
}

fn heap(work_dir: &Path, restore: Option<&Path>) -> Box<dyn KeyedStateBackend> {
    open_keyed_backend(StateBackend::Heap, work_dir, MAX_PARALLELISM, RANGE, restore, &Default::default()).unwrap()
}

/// Runs `scenario` against both backends, naming the backend in a failure.
fn both(scenario: fn(Factory, &Path)) {
    for (name, factory) in [("rocksdb", rocks as Factory), ("heap", heap as Factory)] {
        let tmp = tempfile::tempdir().unwrap();
        let result = std::panic::catch_unwind(|| scenario(factory, tmp.path()));
        if let Err(e) = result {
            eprintln!("scenario failed on the {name} backend");
            std::panic::resume_unwind(e);
        }
    }
}

/// Snapshots `b` into `dir/snap-<tag>` and opens a new backend from it in `dir/restored-<tag>`.
fn snapshot_and_restore(
    factory: Factory,
    b: &mut dyn KeyedStateBackend,
    dir: &Path,
    tag: &str,
) -> Box<dyn KeyedStateBackend> {
    let mut snap = b.snapshot_sync(&dir.join(format!("snap-{tag}"))).unwrap();
    snap.ready_blocking().unwrap();
    factory(&dir.join(format!("restored-{tag}")), Some(&snap.dir))
}

fn key(i: u64) -> [u8; 8] {
    i.to_be_bytes()
}

fn declaration_message(e: StateError) -> String {
    match e {
        StateError::Declaration { name, message } => format!("{name}: {message}"),
        other => panic!("expected a declaration error, got {other:?}"),
    }
}

struct Avg;

impl AggregateFunction<u32, Vec<u8>, f64> for Avg {
    fn create_accumulator(&self) -> Vec<u8> {
        [0u64.to_be_bytes(), 0u64.to_be_bytes()].concat()
    }
    fn add(&self, value: u32, acc: Vec<u8>) -> Vec<u8> {
        let sum = u64::from_be_bytes(acc[..8].try_into().unwrap()) + value as u64;
        let n = u64::from_be_bytes(acc[8..].try_into().unwrap()) + 1;
        [sum.to_be_bytes(), n.to_be_bytes()].concat()
    }
    fn get_result(&self, acc: &Vec<u8>) -> f64 {
        let sum = u64::from_be_bytes(acc[..8].try_into().unwrap());
        let n = u64::from_be_bytes(acc[8..].try_into().unwrap());
        sum as f64 / n as f64
    }
}

fn value_and_reducing_and_aggregating(factory: Factory, dir: &Path) {
    let mut b = factory(&dir.join("w"), None);
    let b = b.as_mut();
    let mut v = ValueState::<u64>::register(b, "v").unwrap();
    let mut r = ReducingState::<u64>::register(b, "r", |a, x| a + x).unwrap();
    let mut a = AggregatingState::register(b, "a", Avg).unwrap();
    for i in 0..200u64 {
        b.set_current_key(&key(i % 20));
        assert_eq!(v.value(b).unwrap().is_some(), i >= 20);
        v.update(b, &i).unwrap();
        r.add(b, i).unwrap();
        a.add(b, (i % 20) as u32 * 2).unwrap();
    }
    b.set_current_key(&key(3));
    assert_eq!(v.value(b).unwrap(), Some(183));
    assert_eq!(r.get(b).unwrap(), Some((0..10).map(|j| 3 + 20 * j).sum()));
    assert_eq!(a.get(b).unwrap(), Some(6.0));
    r.clear(b).unwrap();
    a.clear(b).unwrap();
    v.clear(b).unwrap();
    assert_eq!(r.get(b).unwrap(), None);
    assert_eq!(a.get(b).unwrap(), None);
    assert_eq!(v.value(b).unwrap(), None);
    b.set_current_key(&key(4));
    assert_eq!(a.get(b).unwrap(), Some(8.0));

    let mut restored = snapshot_and_restore(factory, b, dir, "1");
    // Writes after the snapshot must not show up in it.
    b.set_current_key(&key(4));
    r.add(b, 1000).unwrap();
    let b = restored.as_mut();
    let v = ValueState::<u64>::register(b, "v").unwrap();
    let r = ReducingState::<u64>::register(b, "r", |a, x| a + x).unwrap();
    let a = AggregatingState::register(b, "a", Avg).unwrap();
    b.set_current_key(&key(3));
    assert_eq!((v.value(b).unwrap(), r.get(b).unwrap(), a.get(b).unwrap()), (None, None, None));
    b.set_current_key(&key(4));
    assert_eq!(v.value(b).unwrap(), Some(184));
    assert_eq!(r.get(b).unwrap(), Some((0..10).map(|j| 4 + 20 * j).sum()));
    assert_eq!(a.get(b).unwrap(), Some(8.0));
    let mut n = 0;
    v.for_each(b, |_, _| {
        n += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 19);
}

fn list_state(factory: Factory, dir: &Path) {
    let mut b = factory(&dir.join("w"), None);
    let b = b.as_mut();
    let mut l = ListState::<String>::register(b, "l").unwrap();
    b.set_current_key(b"k1");
    assert!(l.get(b).unwrap().is_empty());
    l.add(b, &"a".to_string()).unwrap();
    l.add(b, &String::new()).unwrap();
    l.add_all(b, &["b".to_string(), "cc".to_string()]).unwrap();
    l.add_all(b, &[]).unwrap();
    assert_eq!(l.get(b).unwrap(), ["a", "", "b", "cc"]);
    b.set_current_key(b"k2");
    assert!(l.get(b).unwrap().is_empty());
    l.update(b, &["x".to_string()]).unwrap();
    l.add(b, &"y".to_string()).unwrap();
    assert_eq!(l.get(b).unwrap(), ["x", "y"]);
    l.update(b, &["z".to_string()]).unwrap();
    assert_eq!(l.get(b).unwrap(), ["z"]);
    l.update(b, &[]).unwrap();
    assert!(l.get(b).unwrap().is_empty());
    l.add(b, &"after-empty-update".to_string()).unwrap();
    assert_eq!(l.get(b).unwrap(), ["after-empty-update"]);
    l.clear(b).unwrap();
    assert!(l.get(b).unwrap().is_empty());
    // Many keys and appends, through cache flushes.
    let mut nums = ListState::<u64>::register(b, "nums").unwrap();
    for i in 0..600u64 {
        b.set_current_key(&key(i % 30));
        nums.add(b, &i).unwrap();
    }
    b.set_current_key(&key(7));
    let want: Vec<u64> = (0..20).map(|j| 7 + 30 * j).collect();
    assert_eq!(nums.get(b).unwrap(), want);
    b.set_current_key(b"k1");
    assert_eq!(l.get(b).unwrap(), ["a", "", "b", "cc"]);

    let mut restored = snapshot_and_restore(factory, b, dir, "1");
    b.set_current_key(b"k1");
    l.add(b, &"late".to_string()).unwrap();
    let b = restored.as_mut();
    let mut l = ListState::<String>::register(b, "l").unwrap();
    let nums = ListState::<u64>::register(b, "nums").unwrap();
    b.set_current_key(b"k1");
    assert_eq!(l.get(b).unwrap(), ["a", "", "b", "cc"]);
    l.add(b, &"d".to_string()).unwrap();
    assert_eq!(l.get(b).unwrap(), ["a", "", "b", "cc", "d"]);
    b.set_current_key(b"k2");
    assert!(l.get(b).unwrap().is_empty());
    b.set_current_key(&key(7));
    assert_eq!(nums.get(b).unwrap(), want);
}

/// Two keys in the same key group, the second extending the first (`k` and `k…`).
fn nested_keys_in_one_key_group() -> (Vec<u8>, Vec<u8>) {
    let short = b"k".to_vec();
    let kg = key_group_for_key(&short, MAX_PARALLELISM);
    for i in 0u32.. {
        let long = format!("k{i}").into_bytes();
        if key_group_for_key(&long, MAX_PARALLELISM) == kg {
            return (short, long);
        }
    }
    unreachable!()
}

fn map_state(factory: Factory, dir: &Path) {
    let mut b = factory(&dir.join("w"), None);
    let b = b.as_mut();
    let mut m = MapState::<String, u64>::register(b, "m").unwrap();
    let (short, long) = nested_keys_in_one_key_group();
    b.set_current_key(&short);
    assert!(m.is_empty(b).unwrap());
    assert_eq!(m.get(b, &"x".into()).unwrap(), None);
    m.put(b, &"b".into(), &2).unwrap();
    m.put(b, &"a".into(), &1).unwrap();
    m.put(b, &"".into(), &0).unwrap();
    m.put(b, &"0".into(), &9).unwrap();
    m.put(b, &"a".into(), &11).unwrap();
    b.set_current_key(&long);
    // `long` = `short` + "0…": without the length prefix these rows would look like `short`'s user key "0…".
    assert!(m.is_empty(b).unwrap());
    m.put(b, &"z".into(), &26).unwrap();
    assert_eq!(m.entries(b).unwrap(), [("z".to_string(), 26)]);
    b.set_current_key(&short);
    assert!(!m.is_empty(b).unwrap());
    assert_eq!(m.get(b, &"a".into()).unwrap(), Some(11));
    assert!(m.contains(b, &"b".into()).unwrap());
    assert!(!m.contains(b, &"z".into()).unwrap());
    let want = [("".to_string(), 0), ("0".into(), 9), ("a".into(), 11), ("b".into(), 2)];
    assert_eq!(m.entries(b).unwrap(), want);
    assert_eq!(m.keys(b).unwrap(), ["", "0", "a", "b"]);
    let mut sum = 0;
    m.for_each(b, |_, v| {
        sum += v;
        Ok(())
    })
    .unwrap();
    assert_eq!(sum, 22);
    m.remove(b, &"0".into()).unwrap();
    m.remove(b, &"nope".into()).unwrap();
    assert!(!m.contains(b, &"0".into()).unwrap());
    let want = [("".to_string(), 0), ("a".into(), 11), ("b".into(), 2)];
    assert_eq!(m.entries(b).unwrap(), want);

    let mut restored = snapshot_and_restore(factory, b, dir, "1");
    m.put(b, &"late".into(), &1).unwrap();
    let r = restored.as_mut();
    let mut m2 = MapState::<String, u64>::register(r, "m").unwrap();
    r.set_current_key(&short);
    assert_eq!(m2.entries(r).unwrap(), want);
    r.set_current_key(&long);
    assert_eq!(m2.get(r, &"z".into()).unwrap(), Some(26));

    // Clearing one key's map leaves the other key's alone.
    b.set_current_key(&short);
    m.clear(b).unwrap();
    assert!(m.is_empty(b).unwrap());
    assert!(m.entries(b).unwrap().is_empty());
    b.set_current_key(&long);
    assert_eq!(m.entries(b).unwrap(), [("z".to_string(), 26)]);
    m.remove(b, &"z".into()).unwrap();
    assert!(m.is_empty(b).unwrap());
}

fn kind_conflicts(factory: Factory, dir: &Path) {
    let mut b = factory(&dir.join("w"), None);
    let b = b.as_mut();
    let s = b.register_state("s", StateKind::List).unwrap();
    assert_eq!(b.register_state("s", StateKind::List).unwrap(), s);
    let v = b.register_state("v", StateKind::Value).unwrap();
    assert_eq!(b.register_state("v", StateKind::Value).unwrap(), v);
    let msg = declaration_message(ValueState::<u64>::register(b, "s").err().unwrap());
    assert!(msg.contains("s:") && msg.contains("value") && msg.contains("list"), "{msg}");
    let msg = declaration_message(ReducingState::<u64>::register(b, "v", |a, _| a).err().unwrap());
    assert!(msg.contains("reducing") && msg.contains("value"), "{msg}");
    let msg = declaration_message(MapState::<u64, u64>::register(b, "s").err().unwrap());
    assert!(msg.contains("map") && msg.contains("list"), "{msg}");
    b.register_state("r", StateKind::Reducing).unwrap();
    let msg = declaration_message(b.register_state("r", StateKind::Aggregating).err().unwrap());
    assert!(msg.contains("aggregating") && msg.contains("reducing"), "{msg}");
    b.register_state("m", StateKind::Map).unwrap();
    // Byte-level access of the wrong kind is refused too.
    b.set_current_key(b"k");
    assert!(b.put_value(s, b"x").is_err());
    assert!(b.append_list(v, &[0, 0, 0, 0]).is_err());
    assert!(b.map_get(v, b"x").is_err());

    // The kinds survive a snapshot.
    let mut restored = snapshot_and_restore(factory, b, dir, "1");
    let r = restored.as_mut();
    for (name, kind) in [("s", StateKind::Map), ("v", StateKind::List), ("r", StateKind::Value), ("m", StateKind::List)]
    {
        let msg = declaration_message(r.register_state(name, kind).err().unwrap());
        assert!(msg.contains(kind.name()), "{msg}");
    }
    r.register_state("s", StateKind::List).unwrap();
    r.register_state("m", StateKind::Map).unwrap();
    r.register_state("r", StateKind::Reducing).unwrap();
    r.register_state("v", StateKind::Value).unwrap();
}

fn clear_all(factory: Factory, dir: &Path) {
    let mut b = factory(&dir.join("w"), None);
    let b = b.as_mut();
    let mut v = ValueState::<u64>::register(b, "v").unwrap();
    let mut keep = ValueState::<u64>::register(b, "keep").unwrap();
    let mut l = ListState::<u64>::register(b, "l").unwrap();
    let mut m = MapState::<u64, u64>::register(b, "m").unwrap();
    let mut r = ReducingState::<u64>::register(b, "r", |a, x| a.max(x)).unwrap();
    let mut a = AggregatingState::register(b, "a", Avg).unwrap();
    let keys = 300u64;
    for i in 0..keys {
        b.set_current_key(&key(i));
        v.update(b, &i).unwrap();
        keep.update(b, &i).unwrap();
        l.add(b, &i).unwrap();
        m.put(b, &i, &i).unwrap();
        r.add(b, i).unwrap();
        a.add(b, i as u32).unwrap();
    }
    // Some rows reach RocksDB through a snapshot, the latest stay dirty in the cache.
    b.snapshot_sync(&dir.join("mid")).unwrap().ready_blocking().unwrap();
    for i in 0..10 {
        b.set_current_key(&key(i));
        v.update(b, &(i + 1000)).unwrap();
        l.add(b, &i).unwrap();
    }
    v.clear_all(b).unwrap();
    l.clear_all(b).unwrap();
    m.clear_all(b).unwrap();
    r.clear_all(b).unwrap();
    a.clear_all(b).unwrap();
    let check = |b: &mut dyn KeyedStateBackend| {
        let v = ValueState::<u64>::register(b, "v").unwrap();
        let keep = ValueState::<u64>::register(b, "keep").unwrap();
        let l = ListState::<u64>::register(b, "l").unwrap();
        let mut m = MapState::<u64, u64>::register(b, "m").unwrap();
        let r = ReducingState::<u64>::register(b, "r", |a, x| a.max(x)).unwrap();
        let a = AggregatingState::register(b, "a", Avg).unwrap();
        for i in 0..keys {
            b.set_current_key(&key(i));
            assert_eq!(v.value(b).unwrap(), None);
            assert_eq!(keep.value(b).unwrap(), Some(i));
            assert!(l.get(b).unwrap().is_empty());
            assert!(m.is_empty(b).unwrap());
            assert_eq!(m.get(b, &i).unwrap(), None);
            assert_eq!(r.get(b).unwrap(), None);
            assert_eq!(a.get(b).unwrap(), None);
        }
        let mut n = 0;
        v.for_each(b, |_, _| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 0);
    };
    check(b);
    let mut restored = snapshot_and_restore(factory, b, dir, "1");
    check(restored.as_mut());
    // The states are usable after clear_all.
    b.set_current_key(&key(5));
    v.update(b, &55).unwrap();
    l.add(b, &5).unwrap();
    m.put(b, &5, &5).unwrap();
    assert_eq!(v.value(b).unwrap(), Some(55));
    assert_eq!(l.get(b).unwrap(), [5]);
    assert_eq!(m.entries(b).unwrap(), [(5, 5)]);
}

fn size_limit(factory: Factory, dir: &Path) {
    let mut b = factory(&dir.join("w"), None);
    let b = b.as_mut();
    b.set_max_value_bytes(100);
    let mut v = ValueState::<Vec<u8>>::register(b, "big-value").unwrap();
    let mut l = ListState::<Vec<u8>>::register(b, "big-list").unwrap();
    let mut m = MapState::<u64, Vec<u8>>::register(b, "big-map").unwrap();
    let mut r = ReducingState::<Vec<u8>>::register(b, "big-reduce", |a, x| [a, x].concat()).unwrap();
    b.set_current_key(b"k");
    let check_err = |e: StateError, name: &str, size: usize| {
        let msg = declaration_message(e);
        assert!(msg.contains(name) && msg.contains(&size.to_string()) && msg.contains("MapState"), "{msg}");
    };

    v.update(b, &vec![1; 100]).unwrap();
    check_err(v.update(b, &vec![2; 101]).unwrap_err(), "big-value", 101);
    assert_eq!(v.value(b).unwrap(), Some(vec![1; 100]));

    // Elements are 4-byte length + bytes: 3 elements of 26 bytes = 90 bytes.
    l.add_all(b, &[vec![1; 26], vec![2; 26], vec![3; 26]]).unwrap();
    check_err(l.add(b, &vec![4; 7]).unwrap_err(), "big-list", 101);
    l.add(b, &vec![4; 6]).unwrap();
    check_err(l.add(b, &vec![]).unwrap_err(), "big-list", 104);
    assert_eq!(l.get(b).unwrap(), [vec![1; 26], vec![2; 26], vec![3; 26], vec![4; 6]]);
    check_err(l.update(b, &[vec![0; 97]]).unwrap_err(), "big-list", 101);
    assert_eq!(l.get(b).unwrap().len(), 4);
    l.update(b, &[vec![0; 96]]).unwrap();
    assert_eq!(l.get(b).unwrap(), [vec![0; 96]]);

    check_err(m.put(b, &1, &vec![0; 101]).unwrap_err(), "big-map", 101);
    assert!(m.is_empty(b).unwrap());
    for i in 0..10 {
        m.put(b, &i, &vec![0; 100]).unwrap();
    }
    assert_eq!(m.keys(b).unwrap().len(), 10);

    r.add(b, vec![0; 60]).unwrap();
    check_err(r.add(b, vec![0; 60]).unwrap_err(), "big-reduce", 120);
    assert_eq!(r.get(b).unwrap(), Some(vec![0; 60]));

    // After a restore (RocksDB: an empty list-length cache) the list total is still enforced.
    let mut restored = snapshot_and_restore(factory, b, dir, "1");
    let b = restored.as_mut();
    b.set_max_value_bytes(100);
    let mut l = ListState::<Vec<u8>>::register(b, "big-list").unwrap();
    b.set_current_key(b"k");
    check_err(l.add(b, &vec![]).unwrap_err(), "big-list", 104);
    assert_eq!(l.get(b).unwrap(), [vec![0; 96]]);
}

/// Window and timer state: namespaced states keep one value (list, map) per key *and* namespace; plain states
/// ignore the namespace; iteration visits the current namespace; clear and restore keep namespaces apart.
fn namespaces(factory: Factory, dir: &Path) {
    let mut b = factory(&dir.join("w"), None);
    let b = b.as_mut();
    let ns = StateOptions::default().namespaced();
    let mut v = ValueState::<u64>::register(b, StateDescriptor::new("v").with_options(ns)).unwrap();
    let mut l = ListState::<u64>::register(b, StateDescriptor::new("l").with_options(ns)).unwrap();
    let mut m = MapState::<u64, u64>::register(b, StateDescriptor::new("m").with_options(ns)).unwrap();
    let mut r = ReducingState::<u64>::register(b, StateDescriptor::new("r").with_options(ns), |a, x| a + x).unwrap();
    let mut plain = ValueState::<u64>::register(b, "plain").unwrap();
    for i in 0..50u64 {
        b.set_current_key(&key(i));
        for w in [1u64, 2] {
            set_namespace(b, &w);
            v.update(b, &(i * 10 + w)).unwrap();
            l.add(b, &w).unwrap();
            l.add(b, &i).unwrap();
            m.put(b, &w, &i).unwrap();
            r.add(b, w).unwrap();
            r.add(b, w).unwrap();
            plain.update(b, &(i + w)).unwrap();
        }
    }
    fn check(
        b: &mut dyn KeyedStateBackend,
        v: &ValueState<u64>,
        l: &mut ListState<u64>,
        m: &mut MapState<u64, u64>,
        r: &ReducingState<u64>,
        plain: &ValueState<u64>,
        cleared: Option<u64>,
    ) {
        for i in 0..50u64 {
            b.set_current_key(&key(i));
            for w in [1u64, 2] {
                set_namespace(b, &w);
                if cleared == Some(i) && w == 1 {
                    assert_eq!(v.value(b).unwrap(), None, "cleared key {i} namespace {w}");
                    assert!(l.get(b).unwrap().is_empty() && m.is_empty(b).unwrap());
                    continue;
                }
                assert_eq!(v.value(b).unwrap(), Some(i * 10 + w), "key {i} namespace {w}");
                assert_eq!(l.get(b).unwrap(), [w, i]);
                assert_eq!(m.entries(b).unwrap(), [(w, i)]);
                assert_eq!(r.get(b).unwrap(), Some(2 * w));
                assert_eq!(plain.value(b).unwrap(), Some(i + 2), "plain state: one value whatever the namespace");
            }
            set_namespace(b, &3u64);
            assert_eq!(v.value(b).unwrap(), None);
            assert!(l.get(b).unwrap().is_empty() && m.is_empty(b).unwrap());
        }
        set_namespace(b, &2u64);
        let mut seen = Vec::new();
        v.for_each(b, |k, x| {
            seen.push((u64::from_be_bytes(k.try_into().unwrap()), x));
            Ok(())
        })
        .unwrap();
        seen.sort();
        assert_eq!(seen, (0..50u64).map(|i| (i, i * 10 + 2)).collect::<Vec<_>>(), "namespace 2 only");
    }
    check(b, &v, &mut l, &mut m, &r, &plain, None);
    // clear() takes the current key in the current namespace only.
    b.set_current_key(&key(7));
    set_namespace(b, &1u64);
    v.clear(b).unwrap();
    l.clear(b).unwrap();
    m.clear(b).unwrap();
    check(b, &v, &mut l, &mut m, &r, &plain, Some(7));

    // A key and a namespace never run into another key: `ab` in namespace `c` is not `abc` in no namespace.
    b.set_current_key(b"ab");
    b.set_current_namespace(b"c");
    v.update(b, &1).unwrap();
    b.set_current_key(b"abc");
    b.set_current_namespace(b"");
    v.update(b, &2).unwrap();
    b.set_current_key(b"ab");
    b.set_current_namespace(b"c");
    assert_eq!(v.value(b).unwrap(), Some(1));
    b.set_current_key(b"abc");
    b.set_current_namespace(b"");
    assert_eq!(v.value(b).unwrap(), Some(2));
    v.clear(b).unwrap();
    b.set_current_key(b"ab");
    b.set_current_namespace(b"c");
    v.clear(b).unwrap();

    let mut restored = snapshot_and_restore(factory, b, dir, "ns");
    let b = restored.as_mut();
    // Whether a state has namespaces is part of its declaration, also after a restore.
    let e = declaration_message(ValueState::<u64>::register(b, "v").err().unwrap());
    assert!(e.contains("without namespaces") && e.contains("with namespaces"), "{e}");
    let e = declaration_message(
        ValueState::<u64>::register(b, StateDescriptor::new("plain").with_options(ns)).err().unwrap(),
    );
    assert!(e.contains("with namespaces"), "{e}");
    let v = ValueState::<u64>::register(b, StateDescriptor::new("v").with_options(ns)).unwrap();
    let mut l = ListState::<u64>::register(b, StateDescriptor::new("l").with_options(ns)).unwrap();
    let mut m = MapState::<u64, u64>::register(b, StateDescriptor::new("m").with_options(ns)).unwrap();
    let r = ReducingState::<u64>::register(b, StateDescriptor::new("r").with_options(ns), |a, x| a + x).unwrap();
    let plain = ValueState::<u64>::register(b, "plain").unwrap();
    check(b, &v, &mut l, &mut m, &r, &plain, Some(7));
    // clear_all empties every namespace.
    v.clear_all(b).unwrap();
    m.clear_all(b).unwrap();
    for w in [1u64, 2] {
        set_namespace(b, &w);
        b.set_current_key(&key(3));
        assert_eq!(v.value(b).unwrap(), None);
        assert!(m.is_empty(b).unwrap());
        assert_eq!(l.get(b).unwrap(), [w, 3]);
    }
}

#[test]
fn namespaced_states() {
    both(namespaces);
}

#[test]
fn value_reducing_and_aggregating_states() {
    both(value_and_reducing_and_aggregating);
}

#[test]
fn list_states() {
    both(list_state);
}

#[test]
fn map_states() {
    both(map_state);
}

#[test]
fn kind_conflicts_are_refused() {
    both(kind_conflicts);
}

#[test]
fn clear_all_empties_every_key() {
    both(clear_all);
}

#[test]
fn oversized_values_are_refused() {
    both(size_limit);
}

// ---- State TTL -------------------------------------------------------------------------------------------------

use crate::keyed::ttl::{StateTtlConfig, TtlUpdateType, TtlVisibility};
use std::time::Duration;

const T0: u64 = 1_000_000;

fn ttl(ms: u64) -> StateTtlConfig {
    StateTtlConfig::new(Duration::from_millis(ms))
}

fn manual_clock(b: &mut dyn KeyedStateBackend) -> Arc<ManualClock> {
    let clock = Arc::new(ManualClock::new(T0));
    b.set_clock(clock.clone());
    clock
}

fn ttl_value_kinds(factory: Factory, dir: &Path) {
    let mut b = factory(&dir.join("w"), None);
    let b = b.as_mut();
    let clock = manual_clock(b);
    let mut v = ValueState::<u64>::register(b, StateDescriptor::new("v").with_ttl(ttl(100))).unwrap();
    let mut r = ReducingState::<u64>::register(b, StateDescriptor::new("r").with_ttl(ttl(100)), |a, x| a + x).unwrap();
    let mut a = AggregatingState::register(b, StateDescriptor::new("a").with_ttl(ttl(100)), Avg).unwrap();
    b.set_current_key(&key(1));
    v.update(b, &5).unwrap();
    r.add(b, 3).unwrap();
    a.add(b, 4).unwrap();
    clock.set(T0 + 99);
    // OnCreateAndWrite: these reads do not extend the lifetime.
    assert_eq!((v.value(b).unwrap(), r.get(b).unwrap(), a.get(b).unwrap()), (Some(5), Some(3), Some(4.0)));
    r.add(b, 1).unwrap(); // a write: re-stamped at T0 + 99
    clock.set(T0 + 100);
    assert_eq!((v.value(b).unwrap(), r.get(b).unwrap(), a.get(b).unwrap()), (None, Some(4), None));
    clock.set(T0 + 199);
    // An expired reducing value is not folded into.
    r.add(b, 7).unwrap();
    a.add(b, 2).unwrap();
    assert_eq!((r.get(b).unwrap(), a.get(b).unwrap()), (Some(7), Some(2.0)));

    // OnReadAndWrite: a read extends the lifetime.
    let rw = ttl(100).with_update_type(TtlUpdateType::OnReadAndWrite);
    let mut vr = ValueState::<u64>::register(b, StateDescriptor::new("vr").with_ttl(rw)).unwrap();
    let mut rr = ReducingState::<u64>::register(b, StateDescriptor::new("rr").with_ttl(rw), |a, x| a + x).unwrap();
    let mut ar = AggregatingState::register(b, StateDescriptor::new("ar").with_ttl(rw), Avg).unwrap();
    clock.set(T0);
    vr.update(b, &1).unwrap();
    rr.add(b, 2).unwrap();
    ar.add(b, 3).unwrap();
    for t in [60, 150, 240] {
        clock.set(T0 + t);
        assert_eq!((vr.value(b).unwrap(), rr.get(b).unwrap(), ar.get(b).unwrap()), (Some(1), Some(2), Some(3.0)));
    }
    clock.set(T0 + 340);
    assert_eq!((vr.value(b).unwrap(), rr.get(b).unwrap(), ar.get(b).unwrap()), (None, None, None));

    // ReturnExpiredIfNotCleanedUp: the read that finds the expired value returns it and cleans it up.
    let rx = ttl(100).with_visibility(TtlVisibility::ReturnExpiredIfNotCleanedUp);
    let mut vx = ValueState::<u64>::register(b, StateDescriptor::new("vx").with_ttl(rx)).unwrap();
    let mut ax = AggregatingState::register(b, StateDescriptor::new("ax").with_ttl(rx), Avg).unwrap();
    let mut rx_ = ReducingState::<u64>::register(b, StateDescriptor::new("rx").with_ttl(rx), |a, x| a + x).unwrap();
    b.set_current_key(&key(2));
    clock.set(T0);
    vx.update(b, &9).unwrap();
    ax.add(b, 6).unwrap();
    rx_.add(b, 4).unwrap();
    clock.set(T0 + 500);
    assert_eq!((vx.value(b).unwrap(), ax.get(b).unwrap(), rx_.get(b).unwrap()), (Some(9), Some(6.0), Some(4)));
    assert_eq!((vx.value(b).unwrap(), ax.get(b).unwrap(), rx_.get(b).unwrap()), (None, None, None));
    // `add` never folds into an expired value, whatever the visibility.
    clock.set(T0);
    rx_.add(b, 4).unwrap();
    clock.set(T0 + 500);
    rx_.add(b, 1).unwrap();
    assert_eq!(rx_.get(b).unwrap(), Some(1));

    // for_each skips expired values.
    for i in 0..20u64 {
        clock.set(if i < 10 { T0 } else { T0 + 50 });
        b.set_current_key(&key(100 + i));
        v.update(b, &i).unwrap();
    }
    clock.set(T0 + 100);
    let mut seen = Vec::new();
    v.for_each(b, |_, x| {
        seen.push(x);
        Ok(())
    })
    .unwrap();
    seen.sort();
    assert_eq!(seen, (10..20).collect::<Vec<_>>());

    // The TTL config is part of the declaration.
    let e = ValueState::<u64>::register(b, "v").err().unwrap();
    assert!(declaration_message(e).contains("TTL"));
    assert!(ValueState::<u64>::register(b, StateDescriptor::new("v").with_ttl(ttl(200))).is_err());
    assert!(ValueState::<u64>::register(b, StateDescriptor::new("v").with_ttl(ttl(100))).is_ok());
}

fn ttl_lists(factory: Factory, dir: &Path) {
    let mut b = factory(&dir.join("w"), None);
    let b = b.as_mut();
    let clock = manual_clock(b);
    let mut l = ListState::<u64>::register(b, StateDescriptor::new("l").with_ttl(ttl(100))).unwrap();
    b.set_current_key(&key(1));
    l.add(b, &1).unwrap();
    clock.set(T0 + 50);
    l.add_all(b, [2, 3].iter()).unwrap();
    clock.set(T0 + 99);
    assert_eq!(l.get(b).unwrap(), [1, 2, 3]);
    clock.set(T0 + 100);
    assert_eq!(l.get(b).unwrap(), [2, 3]);
    l.add(b, &4).unwrap();
    clock.set(T0 + 150);
    assert_eq!(l.get(b).unwrap(), [4]);
    l.update(b, &[5, 6]).unwrap();
    clock.set(T0 + 249);
    assert_eq!(l.get(b).unwrap(), [5, 6]);
    clock.set(T0 + 250);
    assert_eq!(l.get(b).unwrap(), Vec::<u64>::new());

    let rw = ttl(100).with_update_type(TtlUpdateType::OnReadAndWrite);
    let mut lr = ListState::<u64>::register(b, StateDescriptor::new("lr").with_ttl(rw)).unwrap();
    clock.set(T0);
    lr.add(b, &7).unwrap();
    for t in [60, 150, 240] {
        clock.set(T0 + t);
        assert_eq!(lr.get(b).unwrap(), [7], "t={t}");
    }
    clock.set(T0 + 340);
    assert_eq!(lr.get(b).unwrap(), Vec::<u64>::new());

    let rx = ttl(100).with_visibility(TtlVisibility::ReturnExpiredIfNotCleanedUp);
    let mut lx = ListState::<u64>::register(b, StateDescriptor::new("lx").with_ttl(rx)).unwrap();
    b.set_current_key(&key(2));
    clock.set(T0);
    lx.add(b, &8).unwrap();
    clock.set(T0 + 50);
    lx.add(b, &9).unwrap();
    clock.set(T0 + 100);
    assert_eq!(lx.get(b).unwrap(), [8, 9]);
    assert_eq!(lx.get(b).unwrap(), [9]);
}

fn ttl_maps(factory: Factory, dir: &Path) {
    let mut b = factory(&dir.join("w"), None);
    let b = b.as_mut();
    let clock = manual_clock(b);
    let mut m = MapState::<u64, u64>::register(b, StateDescriptor::new("m").with_ttl(ttl(100))).unwrap();
    b.set_current_key(&key(1));
    m.put(b, &1, &10).unwrap();
    clock.set(T0 + 50);
    m.put(b, &2, &20).unwrap();
    clock.set(T0 + 99);
    assert_eq!(m.entries(b).unwrap(), [(1, 10), (2, 20)]);
    clock.set(T0 + 100);
    assert_eq!(m.get(b, &1).unwrap(), None);
    assert!(!m.contains(b, &1).unwrap());
    assert!(m.contains(b, &2).unwrap());
    assert_eq!(m.entries(b).unwrap(), [(2, 20)]);
    assert_eq!(m.keys(b).unwrap(), [2]);
    assert!(!m.is_empty(b).unwrap());
    clock.set(T0 + 150);
    assert!(m.is_empty(b).unwrap());
    assert_eq!(m.get(b, &2).unwrap(), None);

    let rw = ttl(100).with_update_type(TtlUpdateType::OnReadAndWrite);
    let mut mr = MapState::<u64, u64>::register(b, StateDescriptor::new("mr").with_ttl(rw)).unwrap();
    clock.set(T0);
    mr.put(b, &1, &1).unwrap();
    mr.put(b, &2, &2).unwrap();
    clock.set(T0 + 60);
    assert_eq!(mr.get(b, &1).unwrap(), Some(1));
    clock.set(T0 + 150);
    // Key 1 was read at +60; key 2 expired at +100.
    assert_eq!(mr.entries(b).unwrap(), [(1, 1)]);
    clock.set(T0 + 249);
    assert_eq!(mr.keys(b).unwrap(), [1]);
    clock.set(T0 + 349);
    assert!(mr.is_empty(b).unwrap());

    let rx = ttl(100).with_visibility(TtlVisibility::ReturnExpiredIfNotCleanedUp);
    let mut mx = MapState::<u64, u64>::register(b, StateDescriptor::new("mx").with_ttl(rx)).unwrap();
    b.set_current_key(&key(2));
    clock.set(T0);
    mx.put(b, &1, &1).unwrap();
    mx.put(b, &2, &2).unwrap();
    clock.set(T0 + 100);
    assert_eq!(mx.get(b, &1).unwrap(), Some(1));
    assert_eq!(mx.get(b, &1).unwrap(), None);
    assert_eq!(mx.entries(b).unwrap(), [(2, 2)]);
    assert!(mx.is_empty(b).unwrap());
}

fn ttl_snapshot_restore(factory: Factory, dir: &Path) {
    let mut b = factory(&dir.join("w"), None);
    let b = b.as_mut();
    let clock = manual_clock(b);
    let mut v = ValueState::<u64>::register(b, StateDescriptor::new("v").with_ttl(ttl(100))).unwrap();
    let mut r = ReducingState::<u64>::register(b, StateDescriptor::new("r").with_ttl(ttl(100)), |a, x| a + x).unwrap();
    let mut a = AggregatingState::register(b, StateDescriptor::new("a").with_ttl(ttl(100)), Avg).unwrap();
    let mut l = ListState::<u64>::register(b, StateDescriptor::new("l").with_ttl(ttl(100))).unwrap();
    let mut m = MapState::<u64, u64>::register(b, StateDescriptor::new("m").with_ttl(ttl(100))).unwrap();
    let mut plain = ValueState::<u64>::register(b, "plain").unwrap();
    for i in 0..20u64 {
        clock.set(if i < 10 { T0 } else { T0 + 50 });
        b.set_current_key(&key(i));
        v.update(b, &i).unwrap();
        r.add(b, i).unwrap();
        a.add(b, i as u32).unwrap();
        l.add(b, &i).unwrap();
        m.put(b, &i, &i).unwrap();
        plain.update(b, &i).unwrap();
    }
    // One list with an expired and an unexpired element.
    b.set_current_key(&key(15));
    clock.set(T0);
    l.add(b, &99).unwrap();
    clock.set(T0 + 100);
    let mut restored = snapshot_and_restore(factory, b, dir, "ttl");
    let b = restored.as_mut();
    let clock = manual_clock(b);
    clock.set(T0 + 100);
    // Its parameters may change across a restore (turning it on or off migrates: `ttl_turned_on_or_off_…`).
    let plain = ValueState::<u64>::register(b, "plain").unwrap();
    let v = ValueState::<u64>::register(b, StateDescriptor::new("v").with_ttl(ttl(100))).unwrap();
    let r = ReducingState::<u64>::register(b, StateDescriptor::new("r").with_ttl(ttl(100)), |a, x| a + x).unwrap();
    let a = AggregatingState::register(b, StateDescriptor::new("a").with_ttl(ttl(100)), Avg).unwrap();
    let l = ListState::<u64>::register(b, StateDescriptor::new("l").with_ttl(ttl(100))).unwrap();
    let mut m = MapState::<u64, u64>::register(b, StateDescriptor::new("m").with_ttl(ttl(100))).unwrap();
    for i in 0..20u64 {
        b.set_current_key(&key(i));
        let want = (i >= 10).then_some(i);
        assert_eq!(v.value(b).unwrap(), want, "key {i}");
        assert_eq!(r.get(b).unwrap(), want);
        assert_eq!(a.get(b).unwrap(), want.map(|x| x as f64));
        assert_eq!(l.get(b).unwrap(), want.into_iter().collect::<Vec<_>>());
        assert_eq!(m.get(b, &i).unwrap(), want);
        assert_eq!(plain.value(b).unwrap(), Some(i));
    }
    clock.set(T0 + 150);
    for i in 10..20u64 {
        b.set_current_key(&key(i));
        assert_eq!((v.value(b).unwrap(), l.get(b).unwrap(), m.entries(b).unwrap()), (None, vec![], vec![]));
    }
    // A longer TTL after a restore applies to the stored timestamps.
    let mut restored = snapshot_and_restore(factory, b, dir, "ttl2");
    let b = restored.as_mut();
    let clock = manual_clock(b);
    clock.set(T0 + 150);
    let v = ValueState::<u64>::register(b, StateDescriptor::new("v").with_ttl(ttl(1000))).unwrap();
    let mut n = 0;
    v.for_each(b, |_, _| {
        n += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(n, 0, "expired values were cleaned up on read before the second snapshot");
}

#[test]
fn ttl_value_reducing_and_aggregating_states() {
    both(ttl_value_kinds);
}

#[test]
fn ttl_list_states() {
    both(ttl_lists);
}

#[test]
fn ttl_map_states() {
    both(ttl_maps);
}

#[test]
fn ttl_survives_snapshot_and_restore() {
    both(ttl_snapshot_restore);
}

/// A value written as one type and read, after a snapshot and restore, as another fails naming the state and
/// what to do, on both backends (the state's type changed without its kind's signature saying so).
fn a_value_of_another_type(factory: Factory, dir: &Path) {
    let mut b = factory(&dir.join("w"), None);
    let mut st = ValueState::<u32>::register(b.as_mut(), "total").unwrap();
    b.set_current_key(&key(1));
    st.update(b.as_mut(), &7).unwrap();
    let mut b = snapshot_and_restore(factory, b.as_mut(), dir, "types");
    let wider = ValueState::<u64>::register(b.as_mut(), "total").unwrap();
    b.set_current_key(&key(1));
    let err = wider.value(b.as_mut()).unwrap_err().to_string();
    assert!(
        err.starts_with("state \"total\": a stored value does not decode as u64 (")
            && err.contains("the state's type changed since it was written")
            && err.contains("drop_state_on_change: true"),
        "{err}"
    );
}

#[test]
fn a_value_of_another_type_is_reported_with_its_state() {
    both(a_value_of_another_type);
}

/// Turning TTL on for a restored state stamps every value (list element, map value) with the restore's time;
/// turning it off strips the stamps. Values stay exact either way.
fn ttl_on_and_off_migrate(factory: Factory, dir: &Path) {
    let mut b = factory(&dir.join("w"), None);
    let b = b.as_mut();
    let clock = manual_clock(b);
    let mut plain = ValueState::<u64>::register(b, "plain").unwrap();
    let mut plain_list = ListState::<u64>::register(b, "plain-list").unwrap();
    let mut stamped = ValueState::<u64>::register(b, StateDescriptor::new("stamped").with_ttl(ttl(100))).unwrap();
    let mut stamped_map =
        MapState::<u64, u64>::register(b, StateDescriptor::new("stamped-map").with_ttl(ttl(100))).unwrap();
    for i in 0..50u64 {
        b.set_current_key(&key(i));
        plain.update(b, &i).unwrap();
        plain_list.add_all(b, &[i, i + 1]).unwrap();
        stamped.update(b, &(i * 2)).unwrap();
        stamped_map.put(b, &i, &(i * 3)).unwrap();
    }
    clock.set(T0 + 50);
    let mut restored = snapshot_and_restore(factory, b, dir, "ttl-migrate");
    let b = restored.as_mut();
    let clock = manual_clock(b);
    clock.set(T0 + 50);
    let plain = ValueState::<u64>::register(b, StateDescriptor::new("plain").with_ttl(ttl(100))).unwrap();
    let plain_list = ListState::<u64>::register(b, StateDescriptor::new("plain-list").with_ttl(ttl(100))).unwrap();
    let stamped = ValueState::<u64>::register(b, "stamped").unwrap();
    let mut stamped_map = MapState::<u64, u64>::register(b, "stamped-map").unwrap();
    clock.set(T0 + 100);
    for i in 0..50u64 {
        b.set_current_key(&key(i));
        assert_eq!(plain.value(b).unwrap(), Some(i), "key {i}");
        assert_eq!(plain_list.get(b).unwrap(), vec![i, i + 1]);
        assert_eq!(stamped.value(b).unwrap(), Some(i * 2));
        assert_eq!(stamped_map.get(b, &i).unwrap(), Some(i * 3));
    }
    // The new stamps are the restore's time (T0 + 50), so TTL counts from there; without TTL, nothing expires.
    clock.set(T0 + 151);
    b.set_current_key(&key(7));
    assert_eq!(plain.value(b).unwrap(), None);
    assert_eq!(plain_list.get(b).unwrap(), Vec::<u64>::new());
    assert_eq!(stamped.value(b).unwrap(), Some(14));
    assert_eq!(stamped_map.get(b, &7).unwrap(), Some(21));
    // And the migration survives the next snapshot.
    let mut again = snapshot_and_restore(factory, b, dir, "ttl-migrate-2");
    let b = again.as_mut();
    let clock = manual_clock(b);
    clock.set(T0 + 100_000);
    let stamped = ValueState::<u64>::register(b, "stamped").unwrap();
    b.set_current_key(&key(9));
    assert_eq!(stamped.value(b).unwrap(), Some(18));
}

#[test]
fn ttl_turned_on_or_off_across_a_restore_migrates() {
    both(ttl_on_and_off_migrate);
}

/// `migrate_state` rewrites every value of a restored state of each kind (through a migration that appends a
/// byte), TTL timestamps kept, other states untouched; a registered or unknown state is refused.
fn values_migrate(factory: Factory, dir: &Path) {
    let mut b = factory(&dir.join("w"), None);
    let b = b.as_mut();
    manual_clock(b);
    let mut v = ValueState::<Vec<u8>>::register(b, "v").unwrap();
    let mut l = ListState::<Vec<u8>>::register(b, StateDescriptor::new("l").with_ttl(ttl(1_000_000))).unwrap();
    let mut m = MapState::<u64, Vec<u8>>::register(b, "m").unwrap();
    let mut other = ValueState::<Vec<u8>>::register(b, "other").unwrap();
    for i in 0..300u64 {
        b.set_current_key(&key(i));
        v.update(b, &vec![i as u8]).unwrap();
        l.add_all(b, &[vec![1], vec![2, 3]]).unwrap();
        m.put(b, &i, &vec![5]).unwrap();
        m.put(b, &(i + 1000), &vec![6]).unwrap();
        other.update(b, &vec![9]).unwrap();
    }
    let mut restored = snapshot_and_restore(factory, b, dir, "migrate");
    let b = restored.as_mut();
    manual_clock(b);
    let mut append = |old: &[u8], out: &mut Vec<u8>| {
        out.extend_from_slice(old);
        out.push(0xee);
        Ok(())
    };
    assert_eq!(b.migrate_state("v", &mut append).unwrap(), 300);
    assert_eq!(b.migrate_state("l", &mut append).unwrap(), 600);
    assert_eq!(b.migrate_state("m", &mut append).unwrap(), 600);
    assert!(b.migrate_state("nope", &mut append).is_err());
    let v = ValueState::<Vec<u8>>::register(b, "v").unwrap();
    let l = ListState::<Vec<u8>>::register(b, StateDescriptor::new("l").with_ttl(ttl(1_000_000))).unwrap();
    let mut m = MapState::<u64, Vec<u8>>::register(b, "m").unwrap();
    let other = ValueState::<Vec<u8>>::register(b, "other").unwrap();
    assert!(b.migrate_state("v", &mut append).is_err(), "a registered state is not migrated");
    for i in 0..300u64 {
        b.set_current_key(&key(i));
        assert_eq!(v.value(b).unwrap(), Some(vec![i as u8, 0xee]));
        assert_eq!(l.get(b).unwrap(), vec![vec![1, 0xee], vec![2, 3, 0xee]]);
        assert_eq!(m.get(b, &i).unwrap(), Some(vec![5, 0xee]));
        assert_eq!(m.get(b, &(i + 1000)).unwrap(), Some(vec![6, 0xee]));
        assert_eq!(other.value(b).unwrap(), Some(vec![9]));
    }
    // A value the migration cannot read fails the migration with its error.
    let mut again = snapshot_and_restore(factory, b, dir, "migrate-2");
    let b = again.as_mut();
    let mut refuse = |_: &[u8], _: &mut Vec<u8>| Err(StateError::Corrupt("unreadable".into()));
    assert!(b.migrate_state("v", &mut refuse).unwrap_err().to_string().contains("unreadable"));
}

#[test]
fn restored_values_migrate_on_both_backends() {
    both(values_migrate);
}
