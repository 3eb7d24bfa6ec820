//! `datagen`: record `i` has key `splitmix64(seed + i) mod keys` (8 big-endian bytes) and value 1. The
//! sequence is cut into `splits` contiguous ranges, assigned to subtasks round-robin; each split's next index
//! is kept in operator list state, so the source resumes exactly where the checkpoint left it.
//!
//! With `event_time`, records carry the timestamps of DESIGN §10 and the subtask reads its splits in turn, a
//! few records from each, so that every split moves through event time together and the per-split watermark
//! (the minimum over splits) advances as the source does. Without it, splits are read one after the other.

use super::declare::*;
use crate::api::batch::{event_time_field, key_value_schema, ValueType};
use crate::api::operator::{InitContext, OperatorError, SnapshotContext, Source, SourceOutput, SourceStatus};
use crate::api::splits::check_splits;
use crate::api::splits::{NumberedSplits, SplitLayout};
use arrow_array::{new_null_array, ArrayRef, BinaryArray, Int64Array, RecordBatch, TimestampMillisecondArray};
use arrow_buffer::{Buffer, OffsetBuffer};
use std::sync::Arc;
use weir_common::job::datagen::EventTimeConfig;
use weir_common::job::watermarks::{check_event_time, EventTimeOutOfRange, MIN_TIMESTAMP_MS};

use weir_common::job::datagen::{key_of, timestamp_of};

/// Longest event time between two records of a `datagen` split (a year: a longer step is a unit mistake).
const MAX_STEP_MS: u64 = 366 * 24 * 3600 * 1000;

/// `datagen` timestamps that would leave the event-time range (`watermarks::check_event_time`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DatagenTimeError {
    /// The first record's time is out of range.
    #[error("start_ms: {0}")]
    Start(#[source] EventTimeOutOfRange),
    /// A step longer than a year.
    #[error("step_ms of {0} ms is over a year: a unit mistake?")]
    StepTooLong(u64),
    /// The first record, moved back by the largest disorder, is before [`MIN_TIMESTAMP_MS`].
    #[error("start_ms {start_ms} less max_disorder_ms {max_disorder_ms} is before {MIN_TIMESTAMP_MS} (0001-01-01)")]
    DisorderBeforeMin {
        /// The first record's time, ms.
        start_ms: i64,
        /// The largest disorder, ms.
        max_disorder_ms: u64,
    },
    /// The last record of the longest split is out of range.
    #[error("the last of {records} records of a split, {step_ms} ms apart from start_ms {start_ms}: {source}")]
    Last {
        /// Records in the longest split.
        records: u64,
        /// Time between them, ms.
        step_ms: u64,
        /// The first record's time, ms.
        start_ms: i64,
        /// Why the last one's time is out of range.
        #[source]
        source: EventTimeOutOfRange,
    },
}

/// Why `datagen`'s timestamps would leave the event-time range (`watermarks::check_event_time`), if they would:
/// the first record's less the largest disorder, and (for a bounded source) the last of the longest split.
fn check_event_time_range(t: &EventTimeConfig, count: Option<u64>, splits: u32) -> Result<(), DatagenTimeError> {
    check_event_time(t.start_ms).map_err(DatagenTimeError::Start)?;
    if t.step_ms > MAX_STEP_MS {
        return Err(DatagenTimeError::StepTooLong(t.step_ms));
    }
    let earliest = i128::from(t.start_ms) - i128::from(t.max_disorder_ms);
    if earliest < i128::from(MIN_TIMESTAMP_MS) {
        return Err(DatagenTimeError::DisorderBeforeMin { start_ms: t.start_ms, max_disorder_ms: t.max_disorder_ms });
    }
    if let Some(count) = count.filter(|c| *c > 0) {
        let longest = count.div_ceil(u64::from(splits));
        let last = i128::from(t.start_ms) + i128::from(longest - 1) * i128::from(t.step_ms);
        let last = i64::try_from(last).unwrap_or(i64::MAX);
        check_event_time(last).map_err(|source| DatagenTimeError::Last {
            records: longest,
            step_ms: t.step_ms,
            start_ms: t.start_ms,
            source,
        })?;
    }
    Ok(())
}

/// Config of the `datagen` source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatagenConfig {
    /// Number of records; `None` = unbounded.
    pub count: Option<u64>,
    /// Number of distinct keys (at least 1).
    pub keys: u64,
    /// Seed of the key formula.
    pub seed: u64,
    /// Records per second for the whole source; 0 = as fast as possible.
    pub rate_per_sec: u64,
    /// Number of splits the sequence is cut into.
    pub splits: u32,
    /// Event timestamps; `None`: records carry none.
    pub event_time: Option<EventTimeConfig>,
}

impl DatagenConfig {
    /// The config fields it reads: what `weir kinds` lists and what any other field is refused against.
    pub const FIELDS: &'static [ConfigField] = &[
        field("count", "records to emit, then end (absent: unbounded)"),
        field("keys", "distinct keys, at least 1 (default 1000)"),
        field("seed", "seed of the key formula (default 0)"),
        field("rate_per_sec", "records per second for the whole source (default 0: as fast as possible)"),
        field("splits", "splits the sequence is cut into, 1 to 10,000,000 (default 128)"),
        field(
            "event_time",
            "event timestamps: { start_ms, step_ms, max_disorder_ms } or { wall_clock: true } (absent: none)",
        ),
    ];

    /// Reads and checks a datagen config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, Self::FIELDS)?;
        let event_time: Option<EventTimeConfig> =
            r.nested("event_time", "a map { start_ms, step_ms, max_disorder_ms }")?;
        if let Some(t) = &event_time {
            if t.max_disorder_ms > weir_common::job::watermarks::MAX_OUT_OF_ORDERNESS_MS {
                return Err(field_err("event_time", "max_disorder_ms is over 7 days: a unit mistake?"));
            }
            if t.wall_clock && (t.start_ms, t.step_ms, t.max_disorder_ms) != (0, 1, 0) {
                return Err(field_err(
                    "event_time",
                    "wall_clock takes the time of emission: no start_ms, step_ms or max_disorder_ms",
                ));
            }
        }
        let keys = r.u64("keys")?.unwrap_or(1000);
        if keys == 0 {
            return Err(field_err("keys", "must be at least 1"));
        }
        let splits = check_splits(r.u64("splits")?.unwrap_or(128))?;
        let count = r.u64("count")?;
        if let Some(t) = &event_time {
            check_event_time_range(t, count, splits).map_err(|e| field_err("event_time", e.to_string()))?;
        }
        Ok(DatagenConfig {
            count,
            keys,
            seed: r.u64("seed")?.unwrap_or(0),
            rate_per_sec: r.u64("rate_per_sec")?.unwrap_or(0),
            splits,
            event_time,
        })
    }
}

const STATE: &str = "splits";

/// The datagen source.
pub struct Datagen {
    cfg: DatagenConfig,
    splits: NumberedSplits,
}

impl Datagen {
    /// A source with the given config.
    pub fn new(cfg: DatagenConfig) -> Self {
        Datagen { cfg, splits: NumberedSplits::default() }
    }
}

impl Source for Datagen {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let c = &self.cfg;
        self.splits.initialize(ctx, STATE, "datagen", c.splits, SplitLayout::Contiguous, c.count, c.rate_per_sec)
    }

    fn splits(&self) -> u32 {
        self.splits.len() as u32
    }

    fn poll(&mut self, out: &mut SourceOutput, max: usize) -> Result<SourceStatus, OperatorError> {
        let budget = match self.splits.budget(max) {
            Ok(b) => b,
            Err(wait) => return Ok(SourceStatus::Idle(wait)),
        };
        // One reading of the clock per poll: records of one poll leave together.
        let wall_ms = self.cfg.event_time.filter(|t| t.wall_clock).map(|_| weir_common::now_ms() as i64);
        // The poll's rows as columns, filled a split run at a time.
        let mut keys: Vec<u8> = Vec::with_capacity(budget.min(SOURCE_CHUNK) * 8);
        let mut times: Vec<i64> = Vec::new();
        let (seed, key_count, event_time) = (self.cfg.seed, self.cfg.keys, self.cfg.event_time);
        // Without event time a split is read to its end before the next.
        let (runs, left) = self.splits.take(out, budget, event_time.is_some(), |split, range| {
            keys.extend(range.clone().flat_map(|i| key_of(seed, i, key_count).to_be_bytes()));
            match (&event_time, wall_ms) {
                (None, _) => {}
                (Some(_), Some(wall)) => times.extend(std::iter::repeat_n(wall, (range.end - range.start) as usize)),
                (Some(t), None) => times.extend(range.map(|i| timestamp_of(t, seed, i, i - split.start))),
            }
        });
        let rows = keys.len() / 8;
        if rows > 0 {
            out.push_batch_of_splits(key_value_columns(keys, rows, times)?, runs)?;
        }
        if left > 0 && out.is_empty() {
            return Ok(SourceStatus::Finished);
        }
        Ok(SourceStatus::More)
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        self.splits.snapshot(ctx, STATE)
    }
}

/// Rows per batch a poll fills at most (the task asks for this many).
const SOURCE_CHUNK: usize = 1024;

/// A key/value batch of `rows` 8-byte keys (concatenated in `keys`), each of value 1, with `times` as event
/// times (empty: none). Built from whole buffers: no per-row builder work.
fn key_value_columns(keys: Vec<u8>, rows: usize, times: Vec<i64>) -> Result<RecordBatch, OperatorError> {
    let offsets = OffsetBuffer::from_lengths(std::iter::repeat_n(8, rows));
    let keys = BinaryArray::try_new(offsets, Buffer::from_vec(keys), None)
        .map_err(|e| OperatorError::Records(format!("datagen keys: {e}")))?;
    let times: ArrayRef = match times.is_empty() {
        true => new_null_array(event_time_field().data_type(), rows),
        false => Arc::new(TimestampMillisecondArray::from(times)),
    };
    let columns: Vec<ArrayRef> = vec![Arc::new(keys), Arc::new(Int64Array::from_value(1, rows)), times];
    RecordBatch::try_new(key_value_schema(ValueType::I64), columns)
        .map_err(|e| OperatorError::Records(format!("datagen batch: {e}")))
}

/// The `datagen` kind (DESIGN §10): a deterministic keyed source, cut into splits that rescale.
pub struct DatagenKind;

impl Kind for DatagenKind {
    type Config = DatagenConfig;

    fn info(&self) -> KindInfo {
        builtin_info(
            "datagen",
            Role::Source,
            false,
            "A deterministic keyed source, cut into splits that rescale",
            DatagenConfig::FIELDS,
        )
        .with_states(&[("splits", StateClass::OperatorList, "(u32, u64)")])
        .with_output(OutputSchema::Columns(key_value("int64")))
    }

    fn signature(&self) -> Option<StateSignature> {
        // A split's id and next index.
        Some(StateSignature::unkeyed().operator_list::<(u32, u64)>(STATE))
    }

    fn config(&self, config: &OperatorConfig) -> Result<DatagenConfig, ConfigFieldError> {
        DatagenConfig::from_map(config)
    }

    fn lacks_timestamps(&self, config: &DatagenConfig) -> Option<String> {
        config.event_time.is_none().then(|| "datagen without config.event_time".into())
    }

    fn build(&self, config: DatagenConfig) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Source(Box::new(Datagen::new(config))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::batch::records;
    use crate::api::operator::{init_source, snapshot_source, RuntimeInfo, SourceChunk};
    use crate::api::record::Record;
    use weir_state::OperatorStateStore;

    fn info(subtask: u32, p: u32) -> RuntimeInfo {
        RuntimeInfo::for_test(subtask, p)
    }

    fn drain(src: &mut Datagen, limit: usize) -> Result<Vec<Record>, OperatorError> {
        let mut all = Vec::new();
        while all.len() < limit {
            let mut out = SourceOutput::default();
            if src.poll(&mut out, 7.min(limit - all.len()))? == SourceStatus::Finished {
                break;
            }
            all.extend(out.take().0.iter().flat_map(|c| records(&c.batch).unwrap()));
        }
        Ok(all)
    }

    #[test]
    fn subtasks_cover_the_sequence_and_resume_from_state() -> Result<(), OperatorError> {
        let cfg = DatagenConfig { count: Some(1000), keys: 10, seed: 3, rate_per_sec: 0, splits: 16, event_time: None };
        let mut counts = vec![0u64; 10];
        for sub in 0..3 {
            let mut store = OperatorStateStore::new();
            let mut src = Datagen::new(cfg.clone());
            let i = info(sub, 3);
            init_source(&mut src, &i, &mut store, false)?;
            let first = drain(&mut src, 50)?;
            snapshot_source(&mut src, &mut store)?;
            let mut again = Datagen::new(cfg.clone());
            init_source(&mut again, &i, &mut store, true)?;
            for r in first.iter().chain(drain(&mut again, usize::MAX)?.iter()) {
                counts[u64::from_be_bytes(r.key.as_slice().try_into().unwrap()) as usize] += 1;
            }
        }
        assert_eq!(counts, weir_common::job::datagen::expected_counts(3, 1000, 10));
        Ok(())
    }

    #[test]
    fn with_event_time_splits_are_read_in_turn_with_the_formulas_timestamps() -> Result<(), OperatorError> {
        use weir_common::job::datagen::EventTimeConfig;
        let t = EventTimeConfig { start_ms: 1_000, step_ms: 10, max_disorder_ms: 0, wall_clock: false };
        let cfg = DatagenConfig { count: Some(100), keys: 7, seed: 5, rate_per_sec: 0, splits: 4, event_time: Some(t) };
        let mut store = OperatorStateStore::new();
        let mut src = Datagen::new(cfg.clone());
        let i = info(0, 1);
        init_source(&mut src, &i, &mut store, false)?;
        assert_eq!(src.splits(), 4);
        let mut out = SourceOutput::default();
        src.poll(&mut out, 8)?;
        let (chunks, finished) = out.take();
        assert_eq!(finished.count(), 0);
        let [SourceChunk { batch, runs }] = &chunks[..] else { panic!("one batch") };
        assert_eq!(runs, &vec![(0, 2), (1, 2), (2, 2), (3, 2)], "two records from each split");
        let records: Vec<Record> = records(batch)?;
        let stamps: Vec<i64> = records.iter().map(|r| r.timestamp.unwrap()).collect();
        assert_eq!(stamps, vec![1_000, 1_010, 1_000, 1_010, 1_000, 1_010, 1_000, 1_010]);
        // Every split runs through the same event time; each split reports its end once it has none left.
        let mut all = records;
        let mut ended = std::collections::BTreeSet::new();
        loop {
            let status = src.poll(&mut out, 64)?;
            let (chunks, finished) = out.take();
            ended.extend(finished);
            all.extend(chunks.iter().flat_map(|c| super::tests::records(&c.batch).unwrap()));
            if status == SourceStatus::Finished {
                break;
            }
        }
        assert_eq!(ended, (0..4).collect());
        let mut stamps: Vec<i64> = all.iter().map(|r| r.timestamp.unwrap()).collect();
        stamps.sort();
        let mut expected: Vec<i64> = (0..4).flat_map(|_| (0..25).map(|q| 1_000 + q * 10)).collect();
        expected.sort();
        assert_eq!(stamps, expected);
        // Disorder moves a timestamp back by at most max_disorder_ms, as the formula says.
        let d = EventTimeConfig { max_disorder_ms: 30, ..t };
        for (idx, q) in [(0u64, 0u64), (26, 1), (99, 24)] {
            let ts = timestamp_of(&d, 5, idx, q);
            assert!((1_000 + q as i64 * 10 - 30..=1_000 + q as i64 * 10).contains(&ts), "{ts}");
        }
        Ok(())
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::builtins::declare::config_map as m;

    #[test]
    fn datagen_event_time_stays_inside_the_years_1_to_9999() {
        let cfg = |et: &str, count: &str| DatagenConfig::from_map(&m(&[("event_time", et), ("count", count)]));
        // The probe's inputs: the ends of i64 as a start, and a step of 2^64 - 1.
        for (et, says) in [
            (r#"{"start_ms": 9223372036854775807}"#, "start_ms"),
            (r#"{"start_ms": -9223372036854775808}"#, "start_ms"),
            (r#"{"step_ms": 18446744073709551615}"#, "over a year"),
            (r#"{"start_ms": -62135596800000, "max_disorder_ms": 1}"#, "0001-01-01"),
            (r#"{"start_ms": 253402300799000, "step_ms": 1000}"#, "last of 8 records"),
        ] {
            let e = cfg(et, "1000").unwrap_err();
            assert_eq!(e.field, "event_time", "{et}: {e}");
            assert!(e.message.contains(says), "{et}: {e}");
        }
        cfg(r#"{"start_ms": 253402300799000, "step_ms": 142}"#, "1000").unwrap();
        // Unbounded: the source itself refuses a timestamp past the range when it gets there.
        DatagenConfig::from_map(&m(&[("event_time", r#"{"start_ms": 253402300799000, "step_ms": 1000}"#)])).unwrap();
    }

    #[test]
    fn datagen_defaults_and_errors() {
        let c = DatagenConfig::from_map(&m(&[("count", "10"), ("keys", "5")])).unwrap();
        assert_eq!(c.count, Some(10));
        assert_eq!(c.splits, 128);
        let e = DatagenConfig::from_map(&m(&[("keys", "0")])).unwrap_err();
        assert_eq!(e.field, "keys");
        let e = DatagenConfig::from_map(&m(&[("kyes", "3")])).unwrap_err();
        assert_eq!(e.field, "kyes");
        let e = DatagenConfig::from_map(&m(&[("count", "-3")])).unwrap_err();
        assert!(e.message.contains("non-negative"));
    }

    #[test]
    fn datagen_event_time_is_a_nested_map() {
        let c = DatagenConfig::from_map(&m(&[("event_time", r#"{"start_ms": 1000, "max_disorder_ms": 50}"#)])).unwrap();
        assert_eq!(
            c.event_time,
            Some(EventTimeConfig { start_ms: 1000, step_ms: 1, max_disorder_ms: 50, wall_clock: false })
        );
        let wall = DatagenConfig::from_map(&m(&[("event_time", r#"{"wall_clock": true}"#)])).unwrap();
        assert!(wall.event_time.is_some_and(|t| t.wall_clock));
        let e = DatagenConfig::from_map(&m(&[("event_time", r#"{"wall_clock": true, "step_ms": 5}"#)])).unwrap_err();
        assert!(e.message.contains("wall_clock"), "{e}");
        assert_eq!(DatagenConfig::from_map(&m(&[])).unwrap().event_time, None);
        for bad in [r#"{"start": 1}"#, "true", r#"{"step_ms": -1}"#, r#"{"max_disorder_ms": 604800001}"#] {
            let e = DatagenConfig::from_map(&m(&[("event_time", bad)])).unwrap_err();
            assert_eq!(e.field, "event_time", "{bad}: {e}");
        }
        assert!(DatagenConfig::from_map(&m(&[])).unwrap().event_time.is_none());
        assert!(DatagenConfig::from_map(&m(&[("event_time", "{}")])).unwrap().event_time.is_some());
    }
}
