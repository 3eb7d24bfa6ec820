//! `interval-join`: Flink's interval join. Two inputs keyed alike; a first row at `t` joins the second rows of its
//! key at `t + lower ..= t + upper`. Each row is stored in its input's list for its key and time bucket (namespace:
//! the input and the bucket, `upper − lower + 1` ms wide, so a row's matches lie in at most two buckets of the
//! other input), each element its event time and the row; a row joins the other input's rows in range as it
//! arrives, so each pair is emitted once, by whichever row came second. A timer per input and bucket clears the
//! bucket once the watermark is past the last time a row of the other input could match any row in it. `where`
//! and `select` apply as in `join` (`relational::joined`).

use super::declare::*;
use super::join::JoinConfig;
use super::relational::joined::{Pairs, Plan};
use super::relational::{input_lists, ready, times, Inputs, Relational};
use crate::api::batch::{key_groups, keys, set_current_key_of_row};
use crate::api::operator::{Collector, OperatorError, ProcessContext};
use crate::api::stored_rows::encode_row;
use arrow_array::{Array, RecordBatch};
use weir_state::{KeyedStateBackend, ListState};

/// Config of the `interval-join` kind (Flink's interval join): the inner join of two inputs keyed alike where
/// the second row's event time minus the first's is within `lower_ms` and `upper_ms`, both included (`b.t BETWEEN
/// a.t + lower AND a.t + upper`). Each row waits in keyed state until the watermark passes the last time a row of
/// the other input could match it; rows late on arrival (behind the watermark) are dropped, as Flink does. `where`
/// and `select` as for `join`; a joined row's event time is the later of the two.
#[derive(Clone, Debug, PartialEq)]
pub struct IntervalJoinConfig {
    /// The least the second row's time may exceed the first's, ms (negative: precede it).
    pub lower_ms: i64,
    /// The most, ms.
    pub upper_ms: i64,
    /// `where` and `select`.
    pub join: JoinConfig,
}

impl IntervalJoinConfig {
    /// The config fields it reads: what `weir kinds` lists and what any other field is refused against.
    pub const FIELDS: &'static [ConfigField] = &[
        field(
            "lower_ms",
            "the least the second row's event time may exceed the first's, ms; negative: precede it (required)",
        ),
        field("upper_ms", "the most it may exceed it, ms (required)"),
        field("select", "the output columns, as join's"),
        field("where", "a condition over the joined row, as join's"),
    ];

    /// Reads and checks an interval-join config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, Self::FIELDS)?;
        // Beyond a year either way a row would wait in state for ever, in effect (and bucket arithmetic nears overflow).
        const LIMIT: i64 = 86_400_000 * 365;
        let bound = |field: &str| -> Result<i64, ConfigFieldError> {
            let text = r.string(field)?.ok_or_else(|| field_err(field, "is required (ms, may be negative)"))?;
            match text.trim().replace('_', "").parse::<i64>() {
                Ok(v) if (-LIMIT..=LIMIT).contains(&v) => Ok(v),
                Ok(_) => Err(field_err(field, "must be within a year either way")),
                Err(_) => {
                    Err(field_err(field, format!("expected an integer (ms), got {}", weir_common::text::echo(&text))))
                }
            }
        };
        let (lower_ms, upper_ms) = (bound("lower_ms")?, bound("upper_ms")?);
        if lower_ms > upper_ms {
            return Err(field_err("upper_ms", format!("must not be below lower_ms ({lower_ms})")));
        }
        Ok(IntervalJoinConfig { lower_ms, upper_ms, join: JoinConfig::of_fields(map)? })
    }
}

const COLUMNS_STATE: &str = "interval-join-columns";
const STATES: [&str; 2] = ["interval-join-first", "interval-join-second"];

/// The bucket arithmetic of one config: pure, so it is tested on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Buckets {
    lower: i64,
    upper: i64,
    width: i64,
}

impl Buckets {
    fn new(lower: i64, upper: i64) -> Self {
        Buckets { lower, upper, width: (upper - lower + 1).max(1) }
    }

    fn of(&self, t: i64) -> i64 {
        t.div_euclid(self.width)
    }

    /// The times of input `s`'s rows that a row of the other input at `t` matches.
    fn matching(&self, s: usize, t: i64) -> std::ops::RangeInclusive<i64> {
        match s {
            // The other input is the second: its row at `t` matches first rows at `t − upper ..= t − lower`.
            0 => t.saturating_sub(self.upper)..=t.saturating_sub(self.lower),
            _ => t.saturating_add(self.lower)..=t.saturating_add(self.upper),
        }
    }

    /// When input `s`'s bucket `b` can go: once the watermark reaches it, every row still to come of the other
    /// input is later than the watermark, so past the last time that matches a row of the bucket.
    fn cleanup(&self, s: usize, b: i64) -> i64 {
        let last = b.saturating_mul(self.width).saturating_add(self.width - 1);
        match s {
            // A first row at `last` matches second rows up to `last + upper`.
            0 => last.saturating_add(self.upper).saturating_add(1),
            // A second row at `last` matches first rows up to `last − lower`.
            _ => last.saturating_sub(self.lower).saturating_add(1),
        }
    }
}

/// The namespace of input `s`'s bucket `b`.
fn namespace(s: usize, b: i64) -> [u8; 9] {
    let mut n = [0u8; 9];
    n[0] = s as u8;
    n[1..].copy_from_slice(&b.to_be_bytes());
    n
}

/// The interval-join operator.
pub struct IntervalJoin {
    cfg: IntervalJoinConfig,
    buckets: Buckets,
    inputs: Inputs<Plan>,
    /// Each input's rows per bucket, once registered.
    rows: Option<[ListState<Vec<u8>>; 2]>,
    pairs: Pairs,
    row: Vec<u8>,
}

impl IntervalJoin {
    /// An interval join with the given config.
    pub fn new(cfg: IntervalJoinConfig) -> Self {
        let buckets = Buckets::new(cfg.lower_ms, cfg.upper_ms);
        IntervalJoin {
            cfg,
            buckets,
            inputs: Inputs::two(Self::KIND, COLUMNS_STATE),
            rows: None,
            pairs: Pairs::default(),
            row: Vec::new(),
        }
    }
}

impl Relational for IntervalJoin {
    const KIND: &'static str = "interval-join";
    type Built = Plan;

    fn inputs(&mut self) -> &mut Inputs<Plan> {
        &mut self.inputs
    }

    fn register(&mut self, keyed: &mut dyn KeyedStateBackend) -> Result<(), OperatorError> {
        self.rows = Some(input_lists(keyed, STATES, true)?);
        Ok(())
    }

    fn process(
        &mut self,
        s: usize,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let own = self.inputs.read(s, batch)?;
        let times = times(batch, Self::KIND)?;
        let (keys, groups) = (keys(batch)?, key_groups(batch));
        let watermark = ctx.current_watermark();
        let buckets = self.buckets;
        let [first, second] = ready(&mut self.rows, Self::KIND)?;
        let (mine, theirs) = if s == 0 { (first, &*second) } else { (second, &*first) };
        let mut timers = ctx.timers()?;
        self.pairs.clear();
        for i in 0..batch.num_rows() {
            if !times.is_valid(i) || times.value(i) < watermark {
                // No time, no interval; behind the watermark it is late (its matches may be gone).
                continue;
            }
            let t = times.value(i);
            let backend = timers.keyed();
            set_current_key_of_row(backend, keys, groups, i);
            let b = buckets.of(t);
            backend.set_current_namespace(&namespace(s, b));
            self.row.clear();
            self.row.extend_from_slice(&t.to_le_bytes());
            encode_row(&own, i, &mut self.row);
            mine.add(backend, &self.row)?;
            timers.register_event_time_timer(buckets.cleanup(s, b))?;
            let range = buckets.matching(1 - s, t);
            let backend = timers.keyed();
            let pairs = &mut self.pairs;
            for ob in buckets.of(*range.start())..=buckets.of(*range.end()) {
                backend.set_current_namespace(&namespace(1 - s, ob));
                theirs.visit_encoded(backend, &mut |e| {
                    let ot = e.get(..8).and_then(|b| b.try_into().ok()).map(i64::from_le_bytes);
                    if ot.is_some_and(|ot| range.contains(&ot)) {
                        let other = pairs.store(&e[8..]);
                        pairs.push(i as u32, other);
                    }
                    Ok(())
                })?;
            }
        }
        self.pairs.emit(&mut self.inputs, self.cfg.join.shape(), s, keys, &own, out)
    }

    fn fire(
        &mut self,
        _timestamp: i64,
        ctx: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let backend = ctx.keyed()?;
        // The timer's namespace names the input and the bucket to clear.
        let s = match backend.current_key_and_namespace().1.first() {
            Some(0) => 0,
            Some(1) => 1,
            _ => return Err(OperatorError::Misuse("interval-join: a timer of an unknown bucket".into())),
        };
        ready(&mut self.rows, Self::KIND)?[s].clear(backend)?;
        Ok(())
    }
}

/// The `interval-join` kind: rows of two keyed inputs whose times lie within bounds of each other.
pub struct IntervalJoinKind;

impl Kind for IntervalJoinKind {
    type Config = IntervalJoinConfig;

    fn info(&self) -> KindInfo {
        builtin_info(
            "interval-join",
            Role::TwoInput,
            true,
            "Rows of two keyed inputs whose times lie within bounds of each other",
            IntervalJoinConfig::FIELDS,
        )
        .with_states(&[
            ("interval-join-first", StateClass::List, "rows of the first input per time bucket"),
            ("interval-join-second", StateClass::List, "rows of the second input per time bucket"),
            ("interval-join-columns", StateClass::Union, "each input's columns"),
        ])
        .with_input(vec![key_column()])
        .with_output(OutputSchema::FromConfig)
    }

    fn signature(&self) -> Option<StateSignature> {
        // Per input and time bucket (namespace: the input's byte and the bucket), each input's rows with their
        // times; the inputs' columns; a cleanup timer per input and bucket.
        Some(
            StateSignature::keyed::<Vec<u8>>()
                .list::<Vec<u8>>("interval-join-first")
                .in_namespace::<Vec<u8>>("interval-join-first")
                .list::<Vec<u8>>("interval-join-second")
                .in_namespace::<Vec<u8>>("interval-join-second")
                .union::<String>("interval-join-columns")
                .timers::<Vec<u8>>(),
        )
    }

    fn config(&self, config: &OperatorConfig) -> Result<IntervalJoinConfig, ConfigFieldError> {
        IntervalJoinConfig::from_map(config)
    }

    fn output(
        &self,
        config: &IntervalJoinConfig,
        inputs: &[Vec<Column>],
    ) -> Option<Result<Vec<Column>, ConfigFieldError>> {
        let (first, second) = super::join::two(inputs);
        Some(config.join.output(first, second))
    }

    fn build(&self, config: IntervalJoinConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Operator(Box::new(IntervalJoin::new(config))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brute force: every time of input `s` that some row of the other input at `t` matches is in `matching`,
    /// within the buckets probed, and no bucket is cleared while a row of the other input could still match.
    #[test]
    fn buckets_cover_every_match_and_clear_after_the_last() {
        for (lower, upper) in [(0, 0), (-3, 2), (1, 5), (-7, -2), (0, 10)] {
            let k = Buckets::new(lower, upper);
            for t in -30..30i64 {
                for u in -60..60i64 {
                    // A first row at `t`, a second at `u`.
                    let pair = (lower..=upper).contains(&(u - t));
                    assert_eq!(k.matching(1, t).contains(&u), pair, "{lower} {upper}: first {t}, second {u}");
                    assert_eq!(k.matching(0, u).contains(&t), pair, "{lower} {upper}: second {u}, first {t}");
                    if pair {
                        // The row that comes second, not late, finds the other one's bucket still there: the
                        // watermark is at most its own time.
                        assert!(k.cleanup(0, k.of(t)) > u, "first bucket of {t} cleared before {u} came");
                        assert!(k.cleanup(1, k.of(u)) > t, "second bucket of {u} cleared before {t} came");
                    }
                }
                let r = k.matching(1, t);
                assert!(k.of(*r.end()) - k.of(*r.start()) <= 1, "at most two buckets");
            }
            // Cleared no later than needed: past the bucket's last match plus one.
            let b = k.of(4);
            let last = b * k.width + k.width - 1;
            assert_eq!(k.cleanup(0, b), last + upper + 1);
            assert_eq!(k.cleanup(1, b), last - lower + 1);
        }
    }
}

/// The operator in the harness: what it emits for rows of both inputs, when it lets them go, and how its rows
/// restore at another parallelism.
#[cfg(test)]
mod harness_tests {
    use super::*;
    use crate::builtins::declare::config_map as m;
    use crate::builtins::text::lines_of;
    use crate::testing::{keyed_batch, partition, Harness, OperatorHarness};
    use arrow_array::Int64Array;
    use std::sync::Arc;
    use weir_common::job::spec::StateBackend;

    /// Rows of `keys` with integer column `column` and event times.
    fn rows(keys: &[u64], column: &str, values: &[i64], times: &[i64]) -> RecordBatch {
        let keys: Vec<[u8; 8]> = keys.iter().map(|k| k.to_be_bytes()).collect();
        keyed_batch(&keys, vec![(column, Arc::new(Int64Array::from(values.to_vec())))], times).unwrap()
    }

    fn open(h: Harness) -> OperatorHarness<IntervalJoin> {
        let cfg = IntervalJoinConfig::from_map(&m(&[("lower_ms", "-2"), ("upper_ms", "3")])).unwrap();
        h.open(IntervalJoin::new(cfg)).unwrap()
    }

    fn timers(h: &mut OperatorHarness<IntervalJoin>) -> u64 {
        h.keyed().unwrap().state_summaries().unwrap().iter().filter_map(|s| s.entries).sum()
    }

    #[test]
    fn rows_within_the_bounds_join_once_and_go_when_the_watermark_passes_their_last_match() {
        for backend in [StateBackend::Heap, StateBackend::Rocksdb] {
            let mut h = open(Harness::keyed(backend));
            h.process(&rows(&[1, 2, 1], "a", &[10, 20, 11], &[10, 10, 20])).unwrap();
            assert!(h.take_output().is_empty());
            // Second rows at 8 (10 − 2: in), 14 (10 + 4: out), 21 (20 + 1: in) for key 1, 13 (10 + 3: in) for key 2.
            h.process_second(&rows(&[1, 1, 2, 1], "b", &[100, 101, 102, 103], &[8, 14, 13, 21])).unwrap();
            assert_eq!(lines_of(&h.take_output()), ["1,10,100@10", "1,11,103@21", "2,20,102@13"], "{backend:?}");
            // A first row that comes later meets the stored second rows it matches.
            h.process(&rows(&[1], "a", &[12], &[12])).unwrap();
            assert_eq!(lines_of(&h.take_output()), ["1,12,101@14"]);
            h.watermark(30).unwrap();
            assert!(h.take_output().is_empty(), "the watermark emits nothing");
            // Behind the watermark: late, dropped, stored nowhere.
            h.process_second(&rows(&[1], "b", &[104], &[22])).unwrap();
            h.process(&rows(&[1], "a", &[13], &[29])).unwrap();
            assert!(h.take_output().is_empty());
            h.watermark(i64::MAX).unwrap();
            assert_eq!(timers(&mut h), 0, "every bucket's cleanup timer fired");
        }
    }

    /// First rows stored by one subtask, restored as two: the second rows that come after the restore meet
    /// them in the subtask of their key, and both emit what one would.
    #[test]
    fn rows_restored_at_another_parallelism_join_in_the_subtask_of_their_key() {
        let keys: Vec<u64> = (0..30).collect();
        let n = keys.len();
        let firsts = rows(&keys, "a", &keys.iter().map(|&k| k as i64).collect::<Vec<_>>(), &vec![10; n]);
        let seconds = rows(&keys, "b", &vec![7; n], &vec![12; n]);
        for backend in [StateBackend::Heap, StateBackend::Rocksdb] {
            let mut one = open(Harness::keyed(backend));
            one.process(&firsts).unwrap();
            one.watermark(5).unwrap();
            let snapshot = one.snapshot(1).unwrap();
            one.process_second(&seconds).unwrap();
            let expected = lines_of(&one.take_output());
            assert_eq!(expected.len(), n);
            let mut union = Vec::new();
            for (i, part) in partition(&seconds, 2, 128).unwrap().iter().enumerate() {
                let mut h = open(Harness::keyed(backend).subtask(i as u32, 2).restore(&snapshot));
                h.process_second(part).unwrap();
                let got = lines_of(&h.take_output());
                assert_eq!(got.len(), part.num_rows(), "subtask {i}");
                union.extend(got);
                h.watermark(i64::MAX).unwrap();
                assert_eq!(timers(&mut h), 0);
            }
            union.sort();
            assert_eq!(union, expected, "{backend:?}");
        }
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::builtins::declare::config_map as m;

    #[test]
    fn interval_join_bounds() {
        let c = IntervalJoinConfig::from_map(&m(&[("lower_ms", "-2_000"), ("upper_ms", "1000"), ("where", "a > 1")]))
            .unwrap();
        assert_eq!((c.lower_ms, c.upper_ms), (-2000, 1000));
        assert!(c.join.condition.is_some());
        for (pairs, field) in [
            (vec![("upper_ms", "1")], "lower_ms"),
            (vec![("lower_ms", "5"), ("upper_ms", "4")], "upper_ms"),
            (vec![("lower_ms", "x"), ("upper_ms", "4")], "lower_ms"),
            (vec![("lower_ms", "0"), ("upper_ms", "99999999999999")], "upper_ms"),
            (vec![("lower_ms", "0"), ("upper_ms", "1"), ("window", "{}")], "window"),
        ] {
            assert_eq!(IntervalJoinConfig::from_map(&m(&pairs)).unwrap_err().field, field, "{pairs:?}");
        }
    }
}
