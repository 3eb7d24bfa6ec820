use super::*;
use crate::api::batch::{batch_of, records, KvRows};
use crate::api::operator::{Collector, InitContext, ProcessContext, SnapshotContext, SourceOutput, SourceStatus};
use crate::api::record::{Record, Value};
use crate::api::timers::TimeDomain;
use crate::builtins::keyed_count::{KeyedCount, KeyedCountConfig, KeyedCountEmit};
use weir_state::ValueState;

/// Counts rows per key; sets an event-time timer at each row's time (firing emits `(key, count)` at it) and a
/// processing-time timer 10 ms on (firing emits `(key, time)` on side output `clock`). Keeps, as list state, one
/// element per batch it processed, and as union state its subtask's index.
#[derive(Default)]
struct Echo {
    count: Option<ValueState<u64>>,
    batches: Vec<Vec<u8>>,
    /// What `initialize_state` found: the list elements and the union elements.
    found: (Vec<Vec<u8>>, Vec<Vec<u8>>),
}

impl Operator for Echo {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        if let Some(keyed) = ctx.keyed.as_mut() {
            self.count = Some(ValueState::register(&mut **keyed, "n")?);
        }
        self.batches = ctx.operator_state.list_state("batches")?.clone();
        let union = ctx.operator_state.union_list_state("subtasks")?.clone();
        self.found = (self.batches.clone(), union);
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        self.batches.push(vec![batch.num_rows() as u8]);
        let Some(count) = self.count.as_mut() else { return Ok(()) };
        let rows = KvRows::new(batch)?;
        for i in 0..rows.len() {
            let backend = ctx.keyed()?;
            rows.set_current_key(backend, i);
            let n = count.value(backend)?.unwrap_or(0) + 1;
            count.update(backend, &n)?;
            let mut timers = ctx.timers()?;
            timers.register_event_time_timer(rows.timestamp(i).unwrap_or_default())?;
            let at = timers.current_processing_time() + 10;
            timers.register_processing_time_timer(at)?;
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        domain: TimeDomain,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let key = ctx.current_key().unwrap_or_default().to_vec();
        match domain {
            TimeDomain::EventTime => {
                let Some(count) = self.count.as_ref() else { return Ok(()) };
                let n = count.value(ctx.keyed()?)?.unwrap_or(0);
                out.emit(Record::new_i64(&key, n as i64).at(timestamp))
            }
            TimeDomain::ProcessingTime => {
                out.emit_side("clock", batch_of(&[Record::new_i64(&key, timestamp).at(timestamp)])?)
            }
        }
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        *ctx.operator_state.list_state("batches")? = self.batches.clone();
        // Written again by every subtask: a restore sees one per old subtask.
        *ctx.operator_state.union_list_state("subtasks")? = vec![vec![0]];
        Ok(())
    }
}

fn rows(pairs: &[(&str, i64)]) -> RecordBatch {
    let records: Vec<Record> = pairs.iter().map(|(k, t)| Record::new_i64(k.as_bytes(), 1).at(*t)).collect();
    batch_of(&records).unwrap()
}

/// `(key, value, time)` of key/value batches.
fn triples(batches: Vec<RecordBatch>) -> Vec<(String, i64, i64)> {
    let mut out = Vec::new();
    for b in batches {
        for r in records(&b).unwrap() {
            let Value::I64(v) = r.value else { panic!("{r:?}") };
            out.push((String::from_utf8(r.key.to_vec()).unwrap(), v, r.timestamp.unwrap_or(-1)));
        }
    }
    out
}

#[test]
fn timers_fire_in_order_as_the_watermark_and_the_clock_pass_them_and_survive_a_restore() {
    for backend in [StateBackend::Heap, StateBackend::Rocksdb] {
        let mut h = Harness::keyed(backend).processing_time(1_000).open(Echo::default()).unwrap();
        h.process(&rows(&[("a", 5), ("b", 3), ("a", 9)])).unwrap();
        h.watermark(4).unwrap();
        assert_eq!(triples(h.take_output()), [("b".into(), 1, 3)], "{backend:?}: b's timer at 3");
        assert_eq!(h.take_watermarks(), [4], "the watermark goes out after the timers");
        h.watermark(2).unwrap();
        assert!(h.take_watermarks().is_empty(), "a watermark never goes back");
        h.set_processing_time(1_009).unwrap();
        assert!(h.take_side_output("clock").is_empty(), "due at 1010");
        h.set_processing_time(1_010).unwrap();
        let mut clock = triples(h.take_side_output("clock"));
        clock.sort();
        assert_eq!(clock, [("a".into(), 1010, 1010), ("b".into(), 1010, 1010)], "{backend:?}");
        let snapshot = h.snapshot(1).unwrap();
        assert_eq!(snapshot.subtasks()[0].watermark, Some(4));
        h.end_input().unwrap();
        assert_eq!(triples(h.take_output()), [("a".into(), 2, 5), ("a".into(), 2, 9)]);
        assert_eq!(h.take_watermarks(), [i64::MAX]);

        // Restored: the timers still pending at the snapshot fire, at the watermark it restores at.
        let mut r = Harness::keyed(backend).restore(&snapshot).open(Echo::default()).unwrap();
        assert_eq!(r.current_watermark(), 4);
        r.watermark(6).unwrap();
        assert_eq!(triples(r.take_output()), [("a".into(), 2, 5)], "{backend:?}");
    }
}

#[test]
fn list_state_is_shared_out_and_union_state_given_whole_at_another_parallelism() {
    let mut one = Harness::stateless().open(Echo::default()).unwrap();
    for n in 1..=5 {
        let batch: Vec<(&str, i64)> = vec![("k", 0); n];
        one.process(&rows(&batch)).unwrap();
    }
    let snapshot = one.snapshot(1).unwrap();
    let mut lists = Vec::new();
    let mut halves = Vec::new();
    for i in 0..2 {
        let mut h = Harness::stateless().subtask(i, 2).restore(&snapshot).open(Echo::default()).unwrap();
        let (list, union) = h.operator().found.clone();
        assert_eq!(union, [vec![0]], "subtask {i}: the one old subtask's union element");
        lists.push(list);
        halves.push(h.snapshot(2).unwrap());
    }
    assert_eq!(lists, [vec![vec![1], vec![2], vec![3]], vec![vec![4], vec![5]]], "contiguous shares, the first larger");
    let whole = Harness::stateless().restore(&Snapshot::combine(&halves).unwrap()).open(Echo::default());
    let (list, union) = whole.unwrap().operator().found.clone();
    assert_eq!(list.len(), 5, "merged back: every element once");
    assert_eq!(union, [vec![0], vec![0]], "one union element per old subtask");
}

#[test]
fn a_canonical_snapshot_restores_into_the_other_backend() {
    let count = || KeyedCount::new(KeyedCountConfig { emit: KeyedCountEmit::End });
    let mut h = Harness::keyed(StateBackend::Rocksdb).open(count()).unwrap();
    h.process(&rows(&[("a", 0), ("b", 0), ("a", 0)])).unwrap();
    let snapshot = h.canonical_snapshot(1).unwrap();
    let mut heap = Harness::keyed(StateBackend::Heap).restore(&snapshot).open(count()).unwrap();
    heap.end_input().unwrap();
    let mut got = triples(heap.take_output());
    got.sort();
    assert_eq!(got, [("a".into(), 2, -1), ("b".into(), 1, -1)]);
}

#[test]
fn a_subtask_restored_after_its_end_of_input_takes_no_input_and_runs_no_hook() {
    let count = || KeyedCount::new(KeyedCountConfig { emit: KeyedCountEmit::End });
    let mut h = Harness::keyed(StateBackend::Heap).open(count()).unwrap();
    h.process(&rows(&[("a", 0)])).unwrap();
    h.end_input().unwrap();
    assert_eq!(h.take_output().len(), 1);
    let snapshot = h.snapshot(1).unwrap();
    assert!(snapshot.subtasks()[0].end_of_input);
    let mut r = Harness::keyed(StateBackend::Heap).restore(&snapshot).open(count()).unwrap();
    let e = r.process(&rows(&[("a", 0)])).unwrap_err();
    assert!(e.to_string().contains("after end of input"), "{e}");
    r.end_input().unwrap();
    assert!(r.take_output().is_empty(), "its counts went out before the snapshot");
}

/// Emits `(split, n)` for `n` in `0..3` of each of its splits (six splits, dealt round-robin), one record per
/// split and poll; each split's next `n` is list state.
#[derive(Default)]
struct Splits {
    next: Vec<(u8, u8)>,
}

impl Source for Splits {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let (restored, info) = (ctx.is_restored(), ctx.info);
        let list = ctx.operator_state.list_state("next")?;
        self.next = match restored {
            true => list.iter().map(|e| (e[0], e[1])).collect(),
            false => (0..6).filter(|s| s % info.parallelism == info.subtask.0).map(|s| (s as u8, 0)).collect(),
        };
        Ok(())
    }

    fn poll(&mut self, out: &mut SourceOutput, _max: usize) -> Result<SourceStatus, OperatorError> {
        let mut more = false;
        for (slot, (split, n)) in self.next.iter_mut().enumerate() {
            if *n < 3 {
                out.push(slot as u32, Record::new_i64(&[*split], *n as i64).at(0))?;
                *n += 1;
                more = true;
            }
        }
        Ok(if more { SourceStatus::More } else { SourceStatus::Finished })
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        *ctx.operator_state.list_state("next")? = self.next.iter().map(|(s, n)| vec![*s, *n]).collect();
        Ok(())
    }
}

#[test]
fn a_source_restored_at_another_parallelism_reads_on_where_its_splits_were() {
    let mut one = Harness::stateless().open_source(Splits::default()).unwrap();
    one.poll(10).unwrap();
    let snapshot = one.snapshot(1).unwrap();
    let mut seen: Vec<(u8, i64)> = Vec::new();
    for i in 0..3 {
        let mut h = Harness::stateless().subtask(i, 3).restore(&snapshot).open_source(Splits::default()).unwrap();
        assert_eq!(h.source().next.len(), 2, "subtask {i}: two of the six splits");
        while h.poll(10).unwrap() == SourceStatus::More {}
        for r in h.take_records().unwrap() {
            let Value::I64(n) = r.value else { panic!("{r:?}") };
            seen.push((r.key[0], n));
        }
    }
    seen.sort();
    let expected: Vec<(u8, i64)> = (0..6).flat_map(|s| [(s, 1), (s, 2)]).collect();
    assert_eq!(seen, expected, "each split goes on after its first record, once");
}

#[test]
fn partition_routes_each_row_to_the_subtask_of_its_key_group() {
    let batch = rows(&[("a", 1), ("b", 2), ("c", 3), ("d", 4), ("a", 5)]);
    let parts = partition(&batch, 3, 128).unwrap();
    assert_eq!(parts.iter().map(RecordBatch::num_rows).sum::<usize>(), 5);
    for (i, part) in parts.iter().enumerate() {
        let range = KeyGroupRange::for_subtask(SubtaskIndex(i as u32), 3, 128);
        for r in records(part).unwrap() {
            assert!(range.contains(key_group_for_key(&r.key, 128)), "{r:?} in subtask {i}");
        }
    }
}
