//! Event time from user code: the `event-clock` source, whose splits run at different speeds (and some not at
//! all), and the `watermark-log` operator, which turns every watermark it sees into a record. Together with an
//! exactly-once `file-sink` they let the event-time tests read, after the fact, every watermark that reached the
//! end of a job, across failures and rescales.
//!
//! `event-clock`'s split `j` emits its record `n` (key: `j` as 8 big-endian bytes, value: `n`) at `n / rates[j]`
//! seconds after the source started, with event time `start_ms + n · step_ms`: a faster split moves through
//! event time faster. Splits `rates.len()..rates.len() + idle_splits` never emit. Splits are assigned to subtasks
//! round-robin; each one's next record is operator list state, so the source rescales.

use arrow_array::RecordBatch;
use std::time::{Duration, Instant};
use weir_common::job::kind::{
    field, field_err, ConfigField, ConfigFieldError, ConfigReader, KindInfo, OperatorConfig, Role, StateClass,
};
use weir_taskmanager::api::operator::{
    Collector, InitContext, Operator, OperatorError, ProcessContext, SnapshotContext, Source, SourceOutput,
    SourceStatus,
};
use weir_taskmanager::api::record::{Key, Record, Value};
use weir_taskmanager::api::splits::{read_positions, write_positions, SplitPosition};

/// The source's kind name.
pub const KIND: &str = "event-clock";
/// The watermark logger's kind name.
pub const LOG_KIND: &str = "watermark-log";
const STATE: &str = "positions";

/// The source's description for the registry.
pub fn kind_info() -> KindInfo {
    KindInfo::new(KIND, Role::Source, false, env!("CARGO_PKG_VERSION"))
        .with_fields(FIELDS)
        .with_states(&[(STATE, StateClass::OperatorList, "(u32, u64)")])
        .with_output(weir_common::job::schema::OutputSchema::Columns(weir_common::job::schema::key_value("int64")))
}

/// The watermark logger's description for the registry.
pub fn log_kind_info() -> KindInfo {
    KindInfo { kind: LOG_KIND.into(), role: Role::Operator, states: vec![], fields: vec![], ..kind_info() }
}

/// The config fields of `event-clock`.
pub const FIELDS: &[ConfigField] = &[
    field("rates", "records per second of each emitting split, a list (required)"),
    field("idle_splits", "splits that never emit (default 0)"),
    field("start_ms", "event time of each split's first record, ms (default 0)"),
    field("step_ms", "event time between a split's consecutive records, ms (default 10)"),
    field("count", "records per emitting split (default: unbounded)"),
];

/// Config of `event-clock`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventClockConfig {
    /// Records per second of each emitting split (a list in the spec: `rates: [50, 100, 200]`).
    pub rates: Vec<u64>,
    /// Splits that never emit.
    pub idle_splits: u32,
    /// Event time of each split's first record, ms.
    pub start_ms: i64,
    /// Event time between a split's consecutive records, ms.
    pub step_ms: u64,
    /// Records per emitting split; `None`: unbounded.
    pub count: Option<u64>,
}

impl EventClockConfig {
    /// Reads and checks the config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, FIELDS)?;
        let Some(rates) = r.nested::<Vec<u64>>("rates", "a list of records per second")? else {
            return Err(field_err("rates", "is required (records per second of each split)"));
        };
        if rates.is_empty() || rates.contains(&0) {
            return Err(field_err("rates", "needs at least one split, each with a rate of at least 1"));
        }
        let idle_splits =
            u32::try_from(r.u64("idle_splits")?.unwrap_or(0)).map_err(|_| field_err("idle_splits", "too large"))?;
        let start_ms = r.i64("start_ms")?.unwrap_or(0);
        let (step_ms, count) = (r.u64("step_ms")?.unwrap_or(10), r.u64("count")?);
        Ok(EventClockConfig { rates, idle_splits, start_ms, step_ms, count })
    }
}

#[derive(Clone, Copy, Debug)]
struct Split {
    id: u32,
    next: u64,
    /// `next` when this subtask started: the rate counts from there.
    base: u64,
}

/// The `event-clock` source.
pub struct EventClock {
    cfg: EventClockConfig,
    splits: Vec<Split>,
    started: Option<Instant>,
}

impl EventClock {
    /// A source with the given config.
    pub fn new(cfg: EventClockConfig) -> Self {
        EventClock { cfg, splits: Vec::new(), started: None }
    }

    fn total_splits(&self) -> u32 {
        self.cfg.rates.len() as u32 + self.cfg.idle_splits
    }
}

impl Source for EventClock {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let list = ctx.operator_state.list_state(STATE)?;
        if ctx.restored {
            for SplitPosition { id, next } in read_positions(list, KIND)? {
                self.splits.push(Split { id, next, base: next });
            }
            self.splits.sort_by_key(|s| s.id);
        } else {
            let p = ctx.info.parallelism;
            for id in (ctx.info.subtask.0..self.total_splits()).step_by(p as usize) {
                self.splits.push(Split { id, next: 0, base: 0 });
            }
        }
        Ok(())
    }

    fn splits(&self) -> u32 {
        self.splits.len() as u32
    }

    fn poll(&mut self, out: &mut SourceOutput, max: usize) -> Result<SourceStatus, OperatorError> {
        let elapsed = self.started.get_or_insert_with(Instant::now).elapsed().as_secs_f64();
        let mut budget = max;
        let mut all_done = true;
        for (slot, split) in self.splits.iter_mut().enumerate() {
            let Some(&rate) = self.cfg.rates.get(split.id as usize) else {
                // An idle split: it never ends, and never emits.
                all_done = false;
                continue;
            };
            let end = self.cfg.count.unwrap_or(u64::MAX);
            if split.next >= end {
                out.finish_split(slot as u32);
                continue;
            }
            all_done = false;
            let due = (split.base + (elapsed * rate as f64) as u64 + 1).min(end);
            while split.next < due && budget > 0 {
                let n = split.next;
                let ts = self.cfg.start_ms.saturating_add((n.saturating_mul(self.cfg.step_ms)) as i64);
                let record =
                    Record::new(Key::from_slice(&(split.id as u64).to_be_bytes()), Value::I64(n as i64)).at(ts);
                out.push(slot as u32, record)?;
                split.next += 1;
                budget -= 1;
            }
        }
        Ok(if all_done && out.is_empty() {
            SourceStatus::Finished
        } else if out.is_empty() {
            SourceStatus::Idle(Duration::from_millis(5))
        } else {
            SourceStatus::More
        })
    }

    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        let positions = self.splits.iter().map(|s| SplitPosition { id: s.id, next: s.next });
        write_positions(ctx.operator_state.list_state(STATE)?, positions);
        Ok(())
    }
}

/// The `watermark-log` operator: drops records; emits `("wm", watermark)` for every watermark it sees.
#[derive(Default)]
pub struct WatermarkLog;

impl Operator for WatermarkLog {
    fn process_batch(
        &mut self,
        _batch: &RecordBatch,
        _ctx: &mut ProcessContext<'_>,
        _out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        Ok(())
    }

    fn on_watermark(
        &mut self,
        watermark: i64,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        if ctx.current_watermark() != watermark {
            return Err(OperatorError::Records(format!(
                "on_watermark({watermark}) with the context at {}",
                ctx.current_watermark()
            )));
        }
        out.emit(Record::new(Key::from_slice(b"wm"), Value::I64(watermark)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_taskmanager::testing::Harness;

    fn config(pairs: &[(&str, &str)]) -> Result<EventClockConfig, String> {
        EventClockConfig::from_map(&pairs.iter().map(|(k, v)| (k.to_string(), (*v).into())).collect())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn config_takes_a_list_of_rates() {
        let c = config(&[("rates", "[50, 100]"), ("idle_splits", "1"), ("count", "7")]).unwrap();
        assert_eq!((c.rates, c.idle_splits, c.step_ms, c.count), (vec![50, 100], 1, 10, Some(7)));
        for bad in [vec![], vec![("rates", "[]")], vec![("rates", "[0]")], vec![("rates", "fast")]] {
            assert!(config(&bad).unwrap_err().contains("rates"), "{bad:?}");
        }
        assert!(config(&[("rates", "[1]"), ("speed", "1")]).unwrap_err().contains("speed"));
    }

    #[test]
    fn a_bounded_clock_emits_its_splits_timestamps_and_ends() -> Result<(), OperatorError> {
        let cfg = config(&[("rates", "[100000, 100000]"), ("idle_splits", "0"), ("count", "5")]).unwrap();
        let mut h = Harness::stateless().uid("clock").open_source(EventClock::new(cfg))?;
        assert_eq!(h.source().splits(), 2);
        let mut stamps = Vec::new();
        for _ in 0..1000 {
            if h.poll(64)? == SourceStatus::Finished {
                break;
            }
            stamps.extend(h.take_records()?.iter().map(|r| r.timestamp.unwrap_or(-1)));
            std::thread::sleep(Duration::from_millis(1));
        }
        stamps.sort();
        assert_eq!(stamps, vec![0, 0, 10, 10, 20, 20, 30, 30, 40, 40]);
        Ok(())
    }
}
