//! The built-in operator kinds (DESIGN §10) and their typed configs. Both the job manager (to validate a spec
//! before anything runs) and the task manager (to build the operators) read configs through these types.

pub use crate::kind::{field_err, ConfigFieldError, ConfigReader, KindInfo, KindSignature, Role};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Event timestamps of `datagen` (DESIGN §10): within a split, the record at position `q` whose global index is
/// `i` has timestamp `start_ms + q·step_ms − d(i)`, `d(i) = splitmix64(splitmix64(seed + i)) mod
/// (max_disorder_ms + 1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventTimeConfig {
    /// Timestamp of each split's first record (before disorder), ms since the epoch.
    #[serde(default)]
    pub start_ms: i64,
    /// Event time between consecutive records of a split, ms.
    #[serde(default = "one")]
    pub step_ms: u64,
    /// Most a record's timestamp is moved back, ms.
    #[serde(default)]
    pub max_disorder_ms: u64,
    /// Instead of the formula, the wall-clock time at which the record leaves the source (Flink's ingestion
    /// time): what the latency benchmark measures from. The other fields must then be left out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wall_clock: bool,
}

fn one() -> u64 {
    1
}

/// Most splits a numbered source (`datagen`, `nexmark`) is cut into: each split is a position its subtask keeps
/// in memory and writes into operator list state at every checkpoint (about 100 bytes in all), and 4,294,967,295
/// of them once grew a task manager past 19 GB for a job of 1,000 records. Ten million (about 1 GB over the
/// subtasks) still lets a test drive the job manager's operator-state guards with millions of list elements.
pub const MAX_SPLITS: u64 = 10_000_000;

fn check_splits(splits: u64) -> Result<u32, ConfigFieldError> {
    match splits {
        1..=MAX_SPLITS => Ok(splits as u32),
        _ => Err(field_err("splits", format!("must be between 1 and {MAX_SPLITS}, not {splits}"))),
    }
}

/// Longest event time between two records of a `datagen` split (a year: a longer step is a unit mistake).
const MAX_STEP_MS: u64 = 366 * 24 * 3600 * 1000;

/// Why `datagen`'s timestamps would leave the event-time range (`watermarks::check_event_time`), if they would:
/// the first record's less the largest disorder, and (for a bounded source) the last of the longest split.
fn check_event_time_range(t: &EventTimeConfig, count: Option<u64>, splits: u32) -> Result<(), String> {
    use crate::watermarks::{check_event_time, MIN_TIMESTAMP_MS};
    check_event_time(t.start_ms).map_err(|e| format!("start_ms: {e}"))?;
    if t.step_ms > MAX_STEP_MS {
        return Err(format!("step_ms of {} ms is over a year: a unit mistake?", t.step_ms));
    }
    let earliest = i128::from(t.start_ms) - i128::from(t.max_disorder_ms);
    if earliest < i128::from(MIN_TIMESTAMP_MS) {
        return Err(format!(
            "start_ms {} less max_disorder_ms {} is before {MIN_TIMESTAMP_MS} (0001-01-01)",
            t.start_ms, t.max_disorder_ms
        ));
    }
    if let Some(count) = count.filter(|c| *c > 0) {
        let longest = count.div_ceil(u64::from(splits));
        let last = i128::from(t.start_ms) + i128::from(longest - 1) * i128::from(t.step_ms);
        let last = i64::try_from(last).unwrap_or(i64::MAX);
        check_event_time(last).map_err(|e| {
            format!(
                "the last of {longest} records of a split, {} ms apart from start_ms {}: {e}",
                t.step_ms, t.start_ms
            )
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
    /// Reads and checks a datagen config.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, &["count", "keys", "seed", "rate_per_sec", "splits", "event_time"])?;
        let event_time: Option<EventTimeConfig> =
            r.nested("event_time", "a map { start_ms, step_ms, max_disorder_ms }")?;
        if let Some(t) = &event_time {
            if t.max_disorder_ms > crate::watermarks::MAX_OUT_OF_ORDERNESS_MS {
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
            check_event_time_range(t, count, splits).map_err(|e| field_err("event_time", e))?;
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

/// The columns of a `nexmark` event, Flink's Nexmark table flattened: `event_type` (0 person, 1 auction, 2 bid),
/// `date_time`, and the fields of each kind prefixed with it (`person_*`, `auction_*`, `bid_*`), null in the
/// events of the other kinds.
pub fn nexmark_columns() -> Vec<crate::schema::Column> {
    use crate::schema::Column;
    let mut c = vec![Column::new("event_type", "int32", false), Column::new("date_time", "timestamp_ms", false)];
    for (name, t) in NEXMARK_FIELDS {
        c.push(Column::new(name, t, true));
    }
    c
}

/// The nullable columns of a `nexmark` event, in order, with their types.
pub const NEXMARK_FIELDS: [(&str, &str); 22] = [
    ("person_id", "int64"),
    ("person_name", "utf8"),
    ("person_email_address", "utf8"),
    ("person_credit_card", "utf8"),
    ("person_city", "utf8"),
    ("person_state", "utf8"),
    ("person_extra", "utf8"),
    ("auction_id", "int64"),
    ("auction_item_name", "utf8"),
    ("auction_description", "utf8"),
    ("auction_initial_bid", "int64"),
    ("auction_reserve", "int64"),
    ("auction_expires", "timestamp_ms"),
    ("auction_seller", "int64"),
    ("auction_category", "int64"),
    ("auction_extra", "utf8"),
    ("bid_auction", "int64"),
    ("bid_bidder", "int64"),
    ("bid_price", "int64"),
    ("bid_channel", "utf8"),
    ("bid_url", "utf8"),
    ("bid_extra", "utf8"),
];

/// Config of the `nexmark` source (`../shared/flink-peer/nexmark/GENERATOR.md`): events `0 … events − 1` (or
/// unbounded), cut into `splits` contiguous ranges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NexmarkConfig {
    /// Number of events; `None` = unbounded.
    pub events: Option<u64>,
    /// Events per second of event time (timestamps and auction lengths).
    pub tps: u64,
    /// Events per second of wall-clock time for the whole source; 0 = as fast as possible.
    pub rate_per_sec: u64,
    /// Number of splits the event numbers are cut into.
    pub splits: u32,
    /// 0: split `j` holds a contiguous range of event numbers; `B`: it holds blocks `j, j+splits, …` of B numbers.
    pub block: u64,
    /// The event mix and hot ratios.
    pub params: crate::nexmark::Params,
}

/// Event numbers must convert to doubles exactly (the timeline is computed in double precision).
pub const NEXMARK_MAX_EVENTS: u64 = 1 << 53;

impl NexmarkConfig {
    /// Reads and checks a nexmark config.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(
            map,
            &[
                "events",
                "tps",
                "rate_per_sec",
                "splits",
                "block",
                "person_proportion",
                "auction_proportion",
                "bid_proportion",
                "hot_auction_ratio",
                "hot_bidder_ratio",
                "hot_seller_ratio",
            ],
        )?;
        let events = r.u64("events")?;
        if events.is_some_and(|e| e > NEXMARK_MAX_EVENTS) {
            return Err(field_err("events", "must be at most 2^53 (9007199254740992): event times are doubles"));
        }
        let tps = r.u64("tps")?.unwrap_or(crate::nexmark::DEFAULT_TPS);
        if tps == 0 {
            return Err(field_err("tps", "must be at least 1 event per second of event time"));
        }
        let splits = check_splits(r.u64("splits")?.unwrap_or(128))?;
        let d = crate::nexmark::Params::default();
        let ratio = |f: &str, default: u32| -> Result<u32, ConfigFieldError> {
            Ok(r.u64(f)?.map_or(default, |v| v.min(u32::MAX as u64) as u32))
        };
        let params = crate::nexmark::Params {
            person_proportion: r.u64("person_proportion")?.unwrap_or(d.person_proportion),
            auction_proportion: r.u64("auction_proportion")?.unwrap_or(d.auction_proportion),
            bid_proportion: r.u64("bid_proportion")?.unwrap_or(d.bid_proportion),
            hot_auction_ratio: ratio("hot_auction_ratio", d.hot_auction_ratio)?,
            hot_bidder_ratio: ratio("hot_bidder_ratio", d.hot_bidder_ratio)?,
            hot_seller_ratio: ratio("hot_seller_ratio", d.hot_seller_ratio)?,
        };
        params.check().map_err(|(field, message)| field_err(field, message))?;
        Ok(NexmarkConfig {
            events,
            tps,
            rate_per_sec: r.u64("rate_per_sec")?.unwrap_or(0),
            splits,
            block: r.u64("block")?.unwrap_or(0),
            params,
        })
    }
}

/// Config of the `file-sink`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSinkConfig {
    /// Directory the committed files appear in.
    pub path: String,
    /// How rows are written.
    pub format: FileFormat,
}

/// How `file-sink` writes rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FileFormat {
    /// `key,value` lines for key/value rows; other rows as their columns in schema order, comma-separated,
    /// RFC 4180 quoting where needed (DESIGN §10).
    #[default]
    Text,
    /// RFC 4180 CSV with a header line of column names in every file.
    Csv,
    /// A JSON object per line, by column name.
    Json,
    /// Apache Parquet, a file per checkpoint (snappy-compressed).
    Parquet,
}

impl FileSinkConfig {
    /// Reads and checks a file-sink config.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, &["path", "format"])?;
        let path = r.string("path").unwrap_or_default();
        if path.trim().is_empty() {
            return Err(field_err("path", "is required (the directory to write committed files to)"));
        }
        let format = match r.string("format").as_deref().map(str::trim) {
            None | Some("text") => FileFormat::Text,
            Some("csv") => FileFormat::Csv,
            Some("json") => FileFormat::Json,
            Some("parquet") => FileFormat::Parquet,
            Some(other) => {
                return Err(field_err(
                    "format",
                    format!("expected text, csv, json or parquet, got {}", crate::text::echo(other)),
                ))
            }
        };
        Ok(FileSinkConfig { path, format })
    }
}

/// When `keyed-count` emits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KeyedCountEmit {
    /// One `(key, count)` per key at end of input.
    #[default]
    End,
    /// `(key, new count)` after every record, nothing at end of input.
    Updates,
}

/// Config of `keyed-count`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyedCountConfig {
    /// When counts are emitted.
    pub emit: KeyedCountEmit,
}

impl KeyedCountConfig {
    /// Reads and checks a keyed-count config.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, &["emit"])?;
        let emit = match r.string("emit").as_deref().map(str::trim) {
            None | Some("end") => KeyedCountEmit::End,
            Some("updates") => KeyedCountEmit::Updates,
            Some(other) => {
                return Err(field_err("emit", format!("expected end or updates, got {}", crate::text::echo(other))))
            }
        };
        Ok(KeyedCountConfig { emit })
    }
}

/// The windows of `window-aggregate` (DESIGN §10): exactly one of the shapes, plus an offset from the epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowSpec {
    /// Tumbling windows of this many ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tumbling_ms: Option<u64>,
    /// Sliding windows of this many ms (with `slide_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_ms: Option<u64>,
    /// How far sliding windows move, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slide_ms: Option<u64>,
    /// Session windows closed by this many ms without a record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_gap_ms: Option<u64>,
    /// One window per key holding all its records (Flink's `GlobalWindows`): fired by a trigger only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub global: bool,
    /// Shift of tumbling and sliding windows from the epoch (time zones), ms.
    #[serde(default)]
    pub offset_ms: i64,
}

/// The shape a [`WindowSpec`] names, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowShape {
    /// Back-to-back windows.
    Tumbling {
        /// Length, ms.
        size_ms: u64,
    },
    /// Overlapping windows.
    Sliding {
        /// Length, ms.
        size_ms: u64,
        /// Distance between starts, ms.
        slide_ms: u64,
    },
    /// Windows per burst of records.
    Session {
        /// Inactivity that closes one, ms.
        gap_ms: u64,
    },
    /// One window per key over all time.
    Global,
}

/// Longest window or gap accepted: a year (a larger one is a unit mistake).
const MAX_WINDOW_MS: u64 = 366 * 24 * 3600 * 1000;

/// Most slices a sliding window is kept in (`sliding_ms / gcd(sliding_ms, slide_ms)`): a firing reads each of its
/// window's slices, so a slide that does not divide the size (a year sliding by a year less 1 ms: 3·10¹⁰ slices)
/// would make one firing run for hours. A day sliding by 10 s is 8,640.
pub const MAX_SLICES_PER_WINDOW: u64 = 10_000;

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl WindowSpec {
    /// The shape, or why the spec names none or several.
    pub fn shape(&self) -> Result<WindowShape, String> {
        let positive = |what: &str, v: u64| -> Result<u64, String> {
            match v {
                0 => Err(format!("{what} must be positive")),
                v if v > MAX_WINDOW_MS => Err(format!("{what} of {v} ms is over a year: a unit mistake?")),
                v => Ok(v),
            }
        };
        let shape = match (self.tumbling_ms, self.sliding_ms, self.slide_ms, self.session_gap_ms) {
            (None, None, None, None) if self.global => WindowShape::Global,
            _ if self.global => return Err("global: true takes no other window field".into()),
            (Some(t), None, None, None) => WindowShape::Tumbling { size_ms: positive("tumbling_ms", t)? },
            (None, Some(size), Some(slide), None) => {
                let (size_ms, slide_ms) = (positive("sliding_ms", size)?, positive("slide_ms", slide)?);
                if slide_ms > size_ms {
                    return Err(format!(
                        "slide_ms {slide_ms} is longer than sliding_ms {size_ms}: records would fall between windows"
                    ));
                }
                let slices = size_ms / gcd(size_ms, slide_ms);
                if slices > MAX_SLICES_PER_WINDOW {
                    return Err(format!(
                        "a window of sliding_ms {size_ms} that slides by slide_ms {slide_ms} is kept as {slices} \
                         slices of {} ms each (sliding_ms / gcd(sliding_ms, slide_ms)), and every firing combines \
                         them all: at most {MAX_SLICES_PER_WINDOW} slices per window (make slide_ms divide \
                         sliding_ms, or slide further)",
                        gcd(size_ms, slide_ms)
                    ));
                }
                WindowShape::Sliding { size_ms, slide_ms }
            }
            (None, Some(_), None, None) => return Err("sliding_ms needs slide_ms".into()),
            (None, None, None, Some(g)) => WindowShape::Session { gap_ms: positive("session_gap_ms", g)? },
            _ => {
                return Err("expected exactly one of { tumbling_ms }, { sliding_ms, slide_ms }, { session_gap_ms } or \
                     { global: true }"
                    .into())
            }
        };
        let period = match shape {
            WindowShape::Tumbling { size_ms } => Some(size_ms),
            WindowShape::Sliding { slide_ms, .. } => Some(slide_ms),
            WindowShape::Session { .. } | WindowShape::Global => None,
        };
        match period {
            None if self.offset_ms != 0 => Err("session and global windows take no offset_ms".into()),
            Some(p) if self.offset_ms.unsigned_abs() >= p => {
                Err(format!("offset_ms {} must be smaller than the window's period {p} ms", self.offset_ms))
            }
            _ => Ok(shape),
        }
    }
}

/// The aggregate `window-aggregate` computes over its field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WindowAggregate {
    /// Records in the window.
    #[default]
    Count,
    /// Sum of the field.
    Sum,
    /// Smallest value of the field.
    Min,
    /// Largest value of the field.
    Max,
    /// Mean of the field, as a float.
    Avg,
}

impl WindowAggregate {
    /// The aggregate's name in specs.
    pub fn name(self) -> &'static str {
        match self {
            WindowAggregate::Count => "count",
            WindowAggregate::Sum => "sum",
            WindowAggregate::Min => "min",
            WindowAggregate::Max => "max",
            WindowAggregate::Avg => "avg",
        }
    }
}

/// What `window-aggregate` does with a record too late for every window it belongs to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LateRecords {
    /// Dropped and counted (`weir_window_late_records_dropped_total`).
    #[default]
    Drop,
    /// Sent, as they arrived, to the operator's side output `late` (read by `input: <uid>.late`) and counted.
    SideOutput,
}

/// When `window-aggregate` fires a window (Flink's triggers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WindowTrigger {
    /// When the watermark passes the window's end (and again for each late record within the lateness).
    #[default]
    EventTime,
    /// When the task manager's clock passes the window's end.
    ProcessingTime,
    /// Every `n` records of the window (a global window is emptied each time, as Flink's `countWindow`).
    Count(u64),
    /// Every `interval` ms of event time while the window is open, and at its end.
    ContinuousEventTime(u64),
}

impl WindowTrigger {
    /// The trigger's name in specs and messages.
    pub fn name(self) -> &'static str {
        match self {
            WindowTrigger::EventTime => "event-time",
            WindowTrigger::ProcessingTime => "processing-time",
            WindowTrigger::Count(_) => "count",
            WindowTrigger::ContinuousEventTime(_) => "continuous-event-time",
        }
    }
}

/// `trigger: { count: N }` or `{ continuous_event_time_ms: I }`.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TriggerMap {
    #[serde(default)]
    count: Option<u64>,
    #[serde(default)]
    continuous_event_time_ms: Option<u64>,
}

/// Parses `trigger`: `event-time`, `processing-time`, `{ count: N }` or `{ continuous_event_time_ms: I }`.
fn parse_trigger(text: &str) -> Result<WindowTrigger, String> {
    let shape = "event-time, processing-time, { count: N } or { continuous_event_time_ms: I }";
    match text.trim() {
        "event-time" => Ok(WindowTrigger::EventTime),
        "processing-time" => Ok(WindowTrigger::ProcessingTime),
        t if t.starts_with('{') => {
            let m: TriggerMap = serde_json::from_str(t).map_err(|e| format!("expected {shape}: {e}"))?;
            match (m.count, m.continuous_event_time_ms) {
                (Some(0), None) => Err("count must be positive".into()),
                (Some(n), None) => Ok(WindowTrigger::Count(n)),
                (None, Some(0)) => Err("continuous_event_time_ms must be positive".into()),
                (None, Some(i)) if i > MAX_WINDOW_MS => {
                    Err(format!("continuous_event_time_ms of {i} ms is over a year: a unit mistake?"))
                }
                (None, Some(i)) => Ok(WindowTrigger::ContinuousEventTime(i)),
                _ => Err(format!("expected {shape}")),
            }
        }
        other => Err(format!("expected {shape}, got {}", crate::text::echo(other))),
    }
}

/// Config of `window-aggregate`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowAggregateConfig {
    /// The windows.
    pub window: WindowShape,
    /// Shift of tumbling and sliding windows from the epoch, ms.
    pub offset_ms: i64,
    /// What is computed.
    pub aggregate: WindowAggregate,
    /// The integer column aggregated (not read by `count`).
    pub field: String,
    /// How long after a window's end a late record still updates it (and fires it again), ms.
    pub allowed_lateness_ms: u64,
    /// Records later than that.
    pub late: LateRecords,
    /// When windows fire.
    pub trigger: WindowTrigger,
}

impl WindowAggregateConfig {
    /// Reads and checks a window-aggregate config.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, &["window", "aggregate", "field", "allowed_lateness_ms", "late", "trigger"])?;
        let shape = "a map { tumbling_ms } | { sliding_ms, slide_ms } | { session_gap_ms } | { global: true }";
        let spec: WindowSpec =
            r.nested("window", shape)?.ok_or_else(|| field_err("window", format!("required: {shape}")))?;
        let window = spec.shape().map_err(|e| field_err("window", e))?;
        let aggregate = match r.string("aggregate").as_deref().map(str::trim) {
            None | Some("count") => WindowAggregate::Count,
            Some("sum") => WindowAggregate::Sum,
            Some("min") => WindowAggregate::Min,
            Some("max") => WindowAggregate::Max,
            Some("avg") => WindowAggregate::Avg,
            Some(other) => {
                return Err(field_err(
                    "aggregate",
                    format!("expected count, sum, min, max or avg, got {}", crate::text::echo(other)),
                ))
            }
        };
        let late = match r.string("late").as_deref().map(str::trim) {
            None | Some("drop") => LateRecords::Drop,
            Some("side-output") => LateRecords::SideOutput,
            Some(other) => {
                return Err(field_err(
                    "late",
                    format!("expected drop or side-output, got {}", crate::text::echo(other)),
                ))
            }
        };
        let allowed_lateness_ms = r.u64("allowed_lateness_ms")?.unwrap_or(0);
        if allowed_lateness_ms > MAX_WINDOW_MS {
            return Err(field_err("allowed_lateness_ms", "over a year: a unit mistake?"));
        }
        let trigger = match r.string("trigger") {
            None => WindowTrigger::EventTime,
            Some(t) => parse_trigger(&t).map_err(|e| field_err("trigger", e))?,
        };
        match (window, trigger) {
            (WindowShape::Global, WindowTrigger::EventTime | WindowTrigger::ProcessingTime)
                if map.contains_key("trigger") =>
            {
                return Err(field_err(
                    "trigger",
                    format!(
                        "a global window never ends, so {} never fires it: use count or continuous_event_time_ms",
                        trigger.name()
                    ),
                ))
            }
            (WindowShape::Global, WindowTrigger::EventTime) => {
                return Err(field_err(
                    "trigger",
                    "required for global windows (they never end): { count: N } or { continuous_event_time_ms: I }",
                ))
            }
            _ => {}
        }
        Ok(WindowAggregateConfig {
            trigger,
            window,
            offset_ms: spec.offset_ms,
            aggregate,
            field: r.string("field").map(|f| f.trim().to_string()).unwrap_or_else(|| "value".into()),
            allowed_lateness_ms,
            late,
        })
    }
}

/// Config of the `filter` kind: `where`, a boolean expression over the input's columns (`crate::expr`); a row
/// passes where it is true (not where it is false or null, as in SQL).
#[derive(Clone, Debug, PartialEq)]
pub struct FilterConfig {
    /// The condition.
    pub condition: crate::expr::Expr,
}

impl FilterConfig {
    /// Reads and parses a filter config.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, &["where"])?;
        let text = r.string("where").ok_or_else(|| field_err("where", "is required: a condition over the columns"))?;
        let condition = crate::expr::parse_expr(&text).map_err(|e| field_err("where", e.to_string()))?;
        Ok(FilterConfig { condition })
    }
}

/// Config of the `project` kind (a SQL `SELECT … WHERE …` over one row at a time): `select`, the output columns
/// (`expr [AS name], …`, `*` for every input column); `where`, an optional condition applied first; `key`, an
/// optional list of expressions whose values become the rows' key (the `key` column a key-by edge routes on
/// and a keyed operator keys its state by).
#[derive(Clone, Debug, PartialEq)]
pub struct ProjectConfig {
    /// The output columns.
    pub select: Vec<crate::expr::SelectItem>,
    /// Rows where this is not true are dropped.
    pub condition: Option<crate::expr::Expr>,
    /// The key's parts.
    pub key: Option<Vec<crate::expr::Expr>>,
}

impl ProjectConfig {
    /// Reads and parses a project config.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, &["select", "where", "key"])?;
        let text = r.string("select").ok_or_else(|| field_err("select", "is required: `expr [AS name], …` or `*`"))?;
        let select = crate::expr::parse_select(&text).map_err(|e| field_err("select", e.to_string()))?;
        let condition = match r.string("where") {
            None => None,
            Some(t) => Some(crate::expr::parse_expr(&t).map_err(|e| field_err("where", e.to_string()))?),
        };
        let key = match r.string("key") {
            None => None,
            Some(t) => Some(crate::expr::parse_list(&t).map_err(|e| field_err("key", e.to_string()))?),
        };
        Ok(ProjectConfig { select, condition, key })
    }

    /// The columns it emits over input rows of `input` (the key first when it sets one), or the field at fault.
    pub fn output(&self, input: &[crate::schema::Column]) -> Result<Vec<crate::schema::Column>, ConfigFieldError> {
        use crate::expr::{type_of, Type};
        if let Some(c) = &self.condition {
            check_condition(c, input, "where")?;
        }
        let mut out = Vec::new();
        if let Some(parts) = &self.key {
            for p in parts {
                let (t, _) = type_of(p, input).map_err(|e| field_err("key", e.0))?;
                if matches!(t, Type::Null | Type::Float64) {
                    return Err(field_err("key", format!("a key cannot be {}", t.name())));
                }
            }
            out.push(crate::schema::key_column());
        }
        out.extend(select_output(&self.select, input, self.key.is_some())?);
        crate::schema::validate_columns(&out).map_err(|e| field_err("select", e))?;
        Ok(out)
    }
}

/// Config of the `join` kind: an inner join of two inputs keyed alike (each row's `key`), every row of each side
/// kept in keyed state for ever (Flink's regular join), each new row joined with the other side's rows of its
/// key. `where`: a condition over the joined row, whose columns are the key (`key`) and both sides' columns
/// (their names must differ); `select`: the output columns (default: `key`, then the first side's columns,
/// then the second's). A joined row's event time is the later of the two.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinConfig {
    /// The output columns (`None`: all).
    pub select: Option<Vec<crate::expr::SelectItem>>,
    /// Joined rows where this is not true are dropped.
    pub condition: Option<crate::expr::Expr>,
}

impl JoinConfig {
    /// Reads and parses a join config.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, &["select", "where"])?;
        let select = match r.string("select") {
            None => None,
            Some(t) => Some(crate::expr::parse_select(&t).map_err(|e| field_err("select", e.to_string()))?),
        };
        let condition = match r.string("where") {
            None => None,
            Some(t) => Some(crate::expr::parse_expr(&t).map_err(|e| field_err("where", e.to_string()))?),
        };
        Ok(JoinConfig { select, condition })
    }

    /// The `select` and `where` of a kind's config that has other fields too (checked by that kind).
    pub fn of_fields(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        let rest: BTreeMap<String, String> = map
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "select" | "where"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Self::from_map(&rest)
    }

    /// The columns of a joined row: the key, then each side's own columns (the runtime's `_` columns and the
    /// sides' `key` aside), or the field at fault when a name is on both sides.
    pub fn joined_columns(
        first: &[crate::schema::Column],
        second: &[crate::schema::Column],
    ) -> Result<Vec<crate::schema::Column>, ConfigFieldError> {
        let own = |c: &&crate::schema::Column| c.name != "key" && !c.name.starts_with('_');
        let mut out = vec![crate::schema::key_column()];
        for c in first.iter().filter(own) {
            if second.iter().any(|d| d.name == c.name) {
                return Err(field_err(
                    "inputs",
                    format!(
                        "both inputs have a column {:?}: rename it on one side (a project before the join)",
                        c.name
                    ),
                ));
            }
            out.push(c.clone());
        }
        out.extend(second.iter().filter(own).cloned());
        Ok(out)
    }

    /// The columns it emits over inputs of `first` and `second`, or the field at fault.
    pub fn output(
        &self,
        first: &[crate::schema::Column],
        second: &[crate::schema::Column],
    ) -> Result<Vec<crate::schema::Column>, ConfigFieldError> {
        self.output_with(first, second, &[])
    }

    /// [`JoinConfig::output`] with `extra` columns after both sides' (a window's start and end).
    pub fn output_with(
        &self,
        first: &[crate::schema::Column],
        second: &[crate::schema::Column],
        extra: &[crate::schema::Column],
    ) -> Result<Vec<crate::schema::Column>, ConfigFieldError> {
        let mut second = second.to_vec();
        second.extend(extra.iter().cloned());
        let joined = Self::joined_columns(first, &second)?;
        if let Some(c) = &self.condition {
            check_condition(c, &joined, "where")?;
        }
        let out = match &self.select {
            None => joined,
            Some(items) => select_output(items, &joined, false)?,
        };
        crate::schema::validate_columns(&out).map_err(|e| field_err("select", e))?;
        Ok(out)
    }
}

/// An aggregate function of the `aggregate` kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggregateFn {
    /// `COUNT(*)`: rows.
    Count,
    /// `SUM(x)`.
    Sum,
    /// `MIN(x)` (its input must not retract rows).
    Min,
    /// `MAX(x)` (its input must not retract rows).
    Max,
    /// `AVG(x)`: the sum divided by the count, an integer rounded toward zero (SQL's `AVG` of a `BIGINT`).
    Avg,
}

/// Config of the `aggregate` kind (SQL's `GROUP BY` on a stream, with updates): per key, `aggregates`
/// (`COUNT(*) AS n, MAX(price) AS final, …` over integer columns) kept in keyed state and, after every row
/// that changes them, emitted as a change — `+I` for a key's first result, then `-U` (the previous result) and
/// `+U` (the new one) — so that the committed changes add up to the current result. `carry`: columns that
/// are the same for every row of a key (a `GROUP BY a.id, a.category` keyed by id carries category), output
/// first. An input that is itself a changelog (an `_op` column) is aggregated with its retractions (`COUNT`,
/// `SUM`, `AVG`; `MIN` and `MAX` refuse retractions); a key whose rows are all retracted is deleted (`-D`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AggregateConfig {
    /// The aggregates: function, input column (none for `COUNT(*)`), output name.
    pub aggregates: Vec<(AggregateFn, Option<String>, String)>,
    /// Carried columns.
    pub carry: Vec<String>,
}

impl AggregateConfig {
    /// Reads and checks an aggregate config.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, &["aggregates", "carry"])?;
        let aggregates = parse_aggregates(r.string("aggregates"))?;
        let carry = r
            .string("carry")
            .map(|t| t.split(',').map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect())
            .unwrap_or_default();
        Ok(AggregateConfig { aggregates, carry })
    }

    /// The columns it emits over rows of `input`: the carried ones, then the aggregates (integers).
    pub fn output(&self, input: &[crate::schema::Column]) -> Result<Vec<crate::schema::Column>, ConfigFieldError> {
        let mut out = Vec::new();
        for c in &self.carry {
            let col = input
                .iter()
                .find(|i| &i.name == c)
                .ok_or_else(|| field_err("carry", format!("no column {c:?} in the input")))?;
            out.push(col.clone());
        }
        out.extend(aggregate_columns(&self.aggregates, input)?);
        crate::schema::validate_columns(&out).map_err(|e| field_err("aggregates", e))?;
        Ok(out)
    }
}

/// Integer column types.
const INTEGERS: &[&str] = &["int64", "int32"];
/// Column types a time can be read from (milliseconds).
const TIMES: &[&str] = &["timestamp_ms", "int64"];

/// Checks that `input` (`side` names it) has a column `name` of one of `types`, naming `field` when not.
fn check_column(
    input: &[crate::schema::Column],
    name: &str,
    types: &[&str],
    field: &str,
    side: &str,
) -> Result<(), ConfigFieldError> {
    let what = if types == TIMES { "a timestamp" } else { "an integer" };
    match input.iter().find(|c| c.name == name) {
        Some(c) if types.contains(&c.data_type.as_str()) => Ok(()),
        Some(c) => Err(field_err(field, format!("column {name:?} is {}, not {what}", c.data_type))),
        None => Err(field_err(field, format!("no column {name:?} in {side}"))),
    }
}

/// An input's own columns: all but the key and the runtime's (`_…`).
fn own_columns(input: &[crate::schema::Column]) -> Vec<crate::schema::Column> {
    input.iter().filter(|c| c.name != "key" && !c.name.starts_with('_')).cloned().collect()
}

/// Reads `aggregates` text: `COUNT(*) AS n, MAX(price) AS top, …`.
fn parse_aggregates(text: Option<String>) -> Result<Vec<(AggregateFn, Option<String>, String)>, ConfigFieldError> {
    let text = text.ok_or_else(|| field_err("aggregates", "is required: `COUNT(*) AS n, MAX(price) AS top, …`"))?;
    let mut aggregates = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || {
            field_err(
                "aggregates",
                format!("{part:?}: expected FUNCTION(column) AS name (COUNT(*), SUM, MIN, MAX, AVG)"),
            )
        };
        let (call, name) = part.rsplit_once(" AS ").or_else(|| part.rsplit_once(" as ")).ok_or_else(bad)?;
        let (f, arg) = call.trim().split_once('(').ok_or_else(bad)?;
        let arg = arg.strip_suffix(')').ok_or_else(bad)?.trim();
        let f = match f.trim().to_ascii_uppercase().as_str() {
            "COUNT" => AggregateFn::Count,
            "SUM" => AggregateFn::Sum,
            "MIN" => AggregateFn::Min,
            "MAX" => AggregateFn::Max,
            "AVG" => AggregateFn::Avg,
            _ => return Err(bad()),
        };
        let column = match (f, arg) {
            (AggregateFn::Count, "*") => None,
            (_, "*") | (_, "") => return Err(bad()),
            (_, c) => Some(c.to_string()),
        };
        aggregates.push((f, column, name.trim().to_string()));
    }
    if aggregates.is_empty() {
        return Err(field_err("aggregates", "needs at least one aggregate"));
    }
    Ok(aggregates)
}

/// The aggregate columns over rows of `input`: each aggregated column must be an integer; the results are
/// integers, null where every value was null (never for a count).
fn aggregate_columns(
    aggregates: &[(AggregateFn, Option<String>, String)],
    input: &[crate::schema::Column],
) -> Result<Vec<crate::schema::Column>, ConfigFieldError> {
    let mut out = Vec::new();
    for (f, column, name) in aggregates {
        if let Some(c) = column {
            check_column(input, c, INTEGERS, "aggregates", "the input")?;
        }
        out.push(crate::schema::Column::new(name, "int64", *f != AggregateFn::Count));
    }
    Ok(out)
}

/// Config of the `over` kind (Flink's `OVER` aggregation on event time, `ROWS BETWEEN n PRECEDING AND CURRENT
/// ROW`): every input row, once the watermark passes its event time, with `aggregates` (as `aggregate`'s) over
/// it and the `rows_preceding` rows of its key before it in event-time order (`unbounded`: all of them).
/// Rows of equal event time go in arrival order, as in Flink, or in the order of the integer column `ties_by`
/// (arrival order across parallel inputs is not repeatable). Rows late on arrival (at or behind the watermark)
/// are dropped, as Flink does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverConfig {
    /// The aggregates: function, input column (none for `COUNT(*)`), output name.
    pub aggregates: Vec<(AggregateFn, Option<String>, String)>,
    /// Rows before the current one in the frame (`None`: unbounded).
    pub rows_preceding: Option<u64>,
    /// The integer column that orders rows of equal event time.
    pub ties_by: Option<String>,
}

impl OverConfig {
    /// Reads and checks an over config.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, &["aggregates", "rows_preceding", "ties_by"])?;
        let aggregates = parse_aggregates(r.string("aggregates"))?;
        let rows_preceding = match r.string("rows_preceding").as_deref().map(str::trim) {
            None => {
                return Err(field_err("rows_preceding", "is required: the rows before the current one, or unbounded"))
            }
            Some(t) if t.eq_ignore_ascii_case("unbounded") => None,
            Some(_) => r.u64("rows_preceding")?,
        };
        Ok(OverConfig { aggregates, rows_preceding, ties_by: r.string("ties_by") })
    }

    /// The columns it emits over rows of `input`: the input's (but the key and the runtime's), then the
    /// aggregates.
    pub fn output(&self, input: &[crate::schema::Column]) -> Result<Vec<crate::schema::Column>, ConfigFieldError> {
        if let Some(t) = &self.ties_by {
            check_column(input, t, INTEGERS, "ties_by", "the input")?;
        }
        let mut out = own_columns(input);
        out.extend(aggregate_columns(&self.aggregates, input)?);
        crate::schema::validate_columns(&out).map_err(|e| field_err("aggregates", e))?;
        Ok(out)
    }
}

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
    /// Reads and checks an interval-join config.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, &["lower_ms", "upper_ms", "select", "where"])?;
        // Beyond a year either way a row would wait in state for ever, in effect (and bucket arithmetic nears overflow).
        const LIMIT: i64 = 86_400_000 * 365;
        let bound = |field: &str| -> Result<i64, ConfigFieldError> {
            let text = r.string(field).ok_or_else(|| field_err(field, "is required (ms, may be negative)"))?;
            match text.trim().replace('_', "").parse::<i64>() {
                Ok(v) if (-LIMIT..=LIMIT).contains(&v) => Ok(v),
                Ok(_) => Err(field_err(field, "must be within a year either way")),
                Err(_) => Err(field_err(field, format!("expected an integer (ms), got {}", crate::text::echo(&text)))),
            }
        };
        let (lower_ms, upper_ms) = (bound("lower_ms")?, bound("upper_ms")?);
        if lower_ms > upper_ms {
            return Err(field_err("upper_ms", format!("must not be below lower_ms ({lower_ms})")));
        }
        Ok(IntervalJoinConfig { lower_ms, upper_ms, join: JoinConfig::of_fields(map)? })
    }
}

/// Config of the `winning-bids` kind (Nexmark's winning bids, q6's first step): two inputs keyed alike,
/// auctions first and bids second. A bid counts for its key's auction when its event time is within the
/// auction's own event time and the auction's `closes` (a timestamp column of the first input), both ends
/// included; when the watermark passes `closes`, the auction is emitted with its highest bid by `by` (an
/// integer column of the second input; of equal bids the earliest, then the first to arrive), at event time
/// `closes`: the key, the auction's columns, the bid's. An auction without a bid emits nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WinningBidsConfig {
    /// The first input's column of the time its rows close.
    pub closes: String,
    /// The second input's column that ranks its rows.
    pub by: String,
}

impl WinningBidsConfig {
    /// Reads and checks a winning-bids config.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, &["closes", "by"])?;
        let closes =
            r.string("closes").ok_or_else(|| field_err("closes", "is required: the auction's closing time"))?;
        let by = r.string("by").ok_or_else(|| field_err("by", "is required: the bid's column to rank by"))?;
        Ok(WinningBidsConfig { closes, by })
    }

    /// The columns it emits over inputs of `first` and `second`: the key, the first's, the second's.
    pub fn output(
        &self,
        first: &[crate::schema::Column],
        second: &[crate::schema::Column],
    ) -> Result<Vec<crate::schema::Column>, ConfigFieldError> {
        check_column(first, &self.closes, TIMES, "closes", "the first input")?;
        check_column(second, &self.by, INTEGERS, "by", "the second input")?;
        JoinConfig::joined_columns(first, second)
    }
}

/// Config of the `window-join` kind (Flink's window join): the inner join of two inputs keyed alike within each
/// tumbling window (`window: { tumbling_ms }` over the rows' event time): when the watermark passes a window's
/// end, every row of the first input in that window and key is joined with every row of the second; the joined
/// row also has the window's `window_start` and `window_end`, and event time `window_end - 1`; `where` and
/// `select` as for `join`; `distinct: true` emits each distinct output row once per window (a `GROUP BY` of
/// the selected columns). Rows late for their window are dropped.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowJoinConfig {
    /// Window length, ms.
    pub size_ms: u64,
    /// `where` and `select`.
    pub join: JoinConfig,
    /// Each distinct output row once per window.
    pub distinct: bool,
}

impl WindowJoinConfig {
    /// Reads and checks a window-join config.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, &["window", "select", "where", "distinct"])?;
        let window: WindowSpec =
            r.nested("window", "a window, { tumbling_ms: N }")?.ok_or_else(|| field_err("window", "is required"))?;
        let size_ms = match window.shape().map_err(|e| field_err("window", e))? {
            WindowShape::Tumbling { size_ms } if window.offset_ms == 0 => size_ms,
            _ => {
                return Err(field_err(
                    "window",
                    "window-join takes a tumbling window without offset: { tumbling_ms: N }",
                ))
            }
        };
        let distinct = match r.string("distinct").as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(field_err("distinct", format!("expected true or false, got {}", crate::text::echo(other))))
            }
        };
        Ok(WindowJoinConfig { size_ms, join: JoinConfig::of_fields(map)?, distinct })
    }

    /// The window columns a joined row has after both inputs' columns.
    pub fn window_columns() -> Vec<crate::schema::Column> {
        use crate::schema::Column;
        vec![Column::new("window_start", "timestamp_ms", false), Column::new("window_end", "timestamp_ms", false)]
    }
}

/// Config of the `window-top` kind (Flink's window Top-N with `RANK() <= top`): per key and tumbling window
/// (`window: { tumbling_ms }` over the rows' event time), the rows whose `by` column (an integer) ranks within the
/// `top` largest, ties sharing a rank; emitted when the watermark passes the window's end, each with the
/// window's `window_start` and `window_end`, at event time `window_end - 1`. Rows late for their window are
/// dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowTopConfig {
    /// Window length, ms.
    pub size_ms: u64,
    /// The column ranked by.
    pub by: String,
    /// Ranks kept.
    pub top: u64,
}

impl WindowTopConfig {
    /// Reads and checks a window-top config.
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, &["window", "by", "top"])?;
        let window: WindowSpec =
            r.nested("window", "a window, { tumbling_ms: N }")?.ok_or_else(|| field_err("window", "is required"))?;
        let size_ms = match window.shape().map_err(|e| field_err("window", e))? {
            WindowShape::Tumbling { size_ms } if window.offset_ms == 0 => size_ms,
            _ => {
                return Err(field_err(
                    "window",
                    "window-top takes a tumbling window without offset: { tumbling_ms: N }",
                ))
            }
        };
        let by = r.string("by").ok_or_else(|| field_err("by", "is required: the integer column to rank rows by"))?;
        let top = r.u64("top")?.unwrap_or(1);
        if top == 0 {
            return Err(field_err("top", "must be at least 1"));
        }
        Ok(WindowTopConfig { size_ms, by, top })
    }

    /// The columns it emits over rows of `input`: the input's (but the key and the runtime's), then
    /// `window_start` and `window_end`.
    pub fn output(&self, input: &[crate::schema::Column]) -> Result<Vec<crate::schema::Column>, ConfigFieldError> {
        use crate::schema::Column;
        check_column(input, &self.by, INTEGERS, "by", "the input")?;
        let mut out = own_columns(input);
        out.push(Column::new("window_start", "timestamp_ms", false));
        out.push(Column::new("window_end", "timestamp_ms", false));
        crate::schema::validate_columns(&out)
            .map_err(|e| field_err("window", format!("{e}: rename the input's column (a project before)")))?;
        Ok(out)
    }
}

/// The columns a select list makes over rows of `input` (`*`: every column but the runtime's, and but `key`
/// when `drop_key`).
fn select_output(
    items: &[crate::expr::SelectItem],
    input: &[crate::schema::Column],
    drop_key: bool,
) -> Result<Vec<crate::schema::Column>, ConfigFieldError> {
    use crate::expr::{type_of, SelectItem};
    let mut out = Vec::new();
    for item in items {
        match item {
            SelectItem::Star => out
                .extend(input.iter().filter(|c| !(c.name.starts_with('_') || (drop_key && c.name == "key"))).cloned()),
            SelectItem::Expr { expr, name } => {
                let (t, nullable) =
                    type_of(expr, input).map_err(|e| field_err("select", format!("{name}: {}", e.0)))?;
                out.push(crate::schema::Column::new(name, &t.column_type(), nullable));
            }
        }
    }
    Ok(out)
}

/// Checks that `c` is a condition (boolean) over `input`.
pub fn check_condition(
    c: &crate::expr::Expr,
    input: &[crate::schema::Column],
    field: &str,
) -> Result<(), ConfigFieldError> {
    match crate::expr::type_of(c, input).map_err(|e| field_err(field, e.0))? {
        (crate::expr::Type::Bool | crate::expr::Type::Null, _) => Ok(()),
        (t, _) => Err(field_err(field, format!("must be a condition (true or false), not {}", t.name()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn nexmark_defaults_and_errors() {
        let c = NexmarkConfig::from_map(&m(&[("events", "2_000_000")])).unwrap();
        assert_eq!((c.events, c.tps, c.rate_per_sec, c.splits), (Some(2_000_000), 100_000, 0, 128));
        assert_eq!(c.params, crate::nexmark::Params::default());
        let field = |pairs: &[(&str, &str)]| NexmarkConfig::from_map(&m(pairs)).unwrap_err().field;
        assert_eq!(field(&[("tps", "0")]), "tps");
        assert_eq!(field(&[("tps", "-5")]), "tps");
        assert_eq!(field(&[("rate_per_sec", "-1")]), "rate_per_sec");
        assert_eq!(field(&[("events", "9007199254740993")]), "events");
        assert!(NexmarkConfig::from_map(&m(&[("events", "9007199254740992")])).is_ok());
        assert_eq!(
            field(&[("person_proportion", "0"), ("auction_proportion", "0"), ("bid_proportion", "0")]),
            "person_proportion"
        );
        assert_eq!(field(&[("person_proportion", "0")]), "person_proportion");
        assert_eq!(field(&[("auction_proportion", "0")]), "auction_proportion");
        assert_eq!(field(&[("hot_bidder_ratio", "0")]), "hot_bidder_ratio");
        assert_eq!(field(&[("splits", "0")]), "splits");
        assert_eq!(field(&[("tsp", "10")]), "tsp");
        // Persons only, or persons and auctions, are streams too.
        assert!(NexmarkConfig::from_map(&m(&[("auction_proportion", "0"), ("bid_proportion", "0")])).is_ok());
        assert!(NexmarkConfig::from_map(&m(&[("tps", "0")])).is_err());
    }

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
    fn window_aggregate_configs_and_their_errors() {
        let c = WindowAggregateConfig::from_map(&m(&[("window", r#"{"tumbling_ms": 1000}"#)])).unwrap();
        assert_eq!(c.window, WindowShape::Tumbling { size_ms: 1000 });
        assert_eq!(
            (c.aggregate, c.late, c.allowed_lateness_ms, c.field.as_str()),
            (WindowAggregate::Count, LateRecords::Drop, 0, "value")
        );
        let c = WindowAggregateConfig::from_map(&m(&[
            ("window", r#"{"sliding_ms": 60000, "slide_ms": 100, "offset_ms": 50}"#),
            ("aggregate", "avg"),
            ("allowed_lateness_ms", "500"),
            ("late", "drop"),
        ]))
        .unwrap();
        assert_eq!(c.window, WindowShape::Sliding { size_ms: 60000, slide_ms: 100 });
        // A day sliding by 10 s (8,640 slices) and 10,000 slices exactly are sane.
        for window in [r#"{"sliding_ms": 86400000, "slide_ms": 10000}"#, r#"{"sliding_ms": 10000, "slide_ms": 1}"#] {
            WindowAggregateConfig::from_map(&m(&[("window", window)])).unwrap();
        }
        assert_eq!(
            (c.offset_ms, c.aggregate, c.late, c.allowed_lateness_ms),
            (50, WindowAggregate::Avg, LateRecords::Drop, 500)
        );
        let c = WindowAggregateConfig::from_map(&m(&[("window", r#"{"session_gap_ms": 30}"#), ("aggregate", "max")]))
            .unwrap();
        assert_eq!(c.window, WindowShape::Session { gap_ms: 30 });
        assert_eq!(c.trigger, WindowTrigger::EventTime);
        let c = WindowAggregateConfig::from_map(&m(&[("window", r#"{"tumbling_ms": 10}"#), ("late", "side-output")]))
            .unwrap();
        assert_eq!(c.late, LateRecords::SideOutput);
        let c =
            WindowAggregateConfig::from_map(&m(&[("window", r#"{"global": true}"#), ("trigger", r#"{"count": 3}"#)]))
                .unwrap();
        assert_eq!((c.window, c.trigger), (WindowShape::Global, WindowTrigger::Count(3)));
        for (text, trigger) in [
            ("processing-time", WindowTrigger::ProcessingTime),
            (" event-time ", WindowTrigger::EventTime),
            (r#"{"continuous_event_time_ms": 250}"#, WindowTrigger::ContinuousEventTime(250)),
        ] {
            let c = WindowAggregateConfig::from_map(&m(&[("window", r#"{"tumbling_ms": 1000}"#), ("trigger", text)]))
                .unwrap();
            assert_eq!(c.trigger, trigger, "{text}");
        }
        for (pairs, field, says) in [
            (vec![], "window", "required"),
            (vec![("window", r#"{"tumbling_ms": 10, "session_gap_ms": 5}"#)], "window", "exactly one"),
            (vec![("window", r#"{"sliding_ms": 10}"#)], "window", "needs slide_ms"),
            (vec![("window", r#"{"sliding_ms": 10, "slide_ms": 20}"#)], "window", "longer than"),
            // The probe's runaway: a year sliding by a year less 1 ms is 3·10¹⁰ slices of 1 ms.
            (
                vec![("window", r#"{"sliding_ms": 31536000000, "slide_ms": 31535999999}"#)],
                "window",
                "31536000000 slices of 1 ms each",
            ),
            (vec![("window", r#"{"sliding_ms": 10001, "slide_ms": 1}"#)], "window", "at most 10000 slices"),
            (vec![("window", r#"{"tumbling_ms": 0}"#)], "window", "positive"),
            (vec![("window", r#"{"tumbling_ms": 10, "offset_ms": 10}"#)], "window", "smaller than"),
            (vec![("window", r#"{"session_gap_ms": 10, "offset_ms": 1}"#)], "window", "no offset"),
            (vec![("window", r#"{"tumbling": 10}"#)], "window", "unknown field"),
            (vec![("window", r#"{"tumbling_ms": 10}"#), ("aggregate", "median")], "aggregate", "median"),
            (vec![("window", r#"{"tumbling_ms": 10}"#), ("late", "keep")], "late", "expected drop"),
            (vec![("window", r#"{"tumbling_ms": 10}"#), ("size", "1")], "size", "unknown field"),
            (vec![("window", r#"{"global": true}"#)], "trigger", "required for global windows"),
            (vec![("window", r#"{"global": true}"#), ("trigger", "event-time")], "trigger", "never fires"),
            (vec![("window", r#"{"global": true, "tumbling_ms": 5}"#)], "window", "no other window field"),
            (
                vec![("window", r#"{"global": true, "offset_ms": 5}"#), ("trigger", r#"{"count": 2}"#)],
                "window",
                "no offset",
            ),
            (vec![("window", r#"{"tumbling_ms": 10}"#), ("trigger", "sometimes")], "trigger", "sometimes"),
            (vec![("window", r#"{"tumbling_ms": 10}"#), ("trigger", r#"{"count": 0}"#)], "trigger", "positive"),
            (
                vec![
                    ("window", r#"{"tumbling_ms": 10}"#),
                    ("trigger", r#"{"count": 2, "continuous_event_time_ms": 5}"#),
                ],
                "trigger",
                "expected",
            ),
            (vec![("window", r#"{"tumbling_ms": 10}"#), ("trigger", r#"{"every": 2}"#)], "trigger", "unknown field"),
        ] {
            let e = WindowAggregateConfig::from_map(&m(&pairs)).unwrap_err();
            assert_eq!(e.field, field, "{pairs:?}: {e}");
            assert!(e.message.contains(says), "{pairs:?}: {e}");
        }
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

    #[test]
    fn keyed_count_emit() {
        assert_eq!(KeyedCountConfig::from_map(&m(&[])).unwrap().emit, KeyedCountEmit::End);
        assert_eq!(KeyedCountConfig::from_map(&m(&[("emit", "end")])).unwrap().emit, KeyedCountEmit::End);
        assert_eq!(KeyedCountConfig::from_map(&m(&[("emit", "updates")])).unwrap().emit, KeyedCountEmit::Updates);
        let e = KeyedCountConfig::from_map(&m(&[("emit", "always")])).unwrap_err();
        assert_eq!(e.field, "emit");
        assert!(e.message.contains("end or updates") && e.message.contains("always"), "{e}");
        assert_eq!(KeyedCountConfig::from_map(&m(&[("emitt", "end")])).unwrap_err().field, "emitt");
        assert_eq!(KeyedCountConfig::from_map(&m(&[("emit", "x")])).unwrap_err().field, "emit");
    }

    #[test]
    fn file_sink_needs_path() {
        assert_eq!(FileSinkConfig::from_map(&m(&[])).unwrap_err().field, "path");
        let c = FileSinkConfig::from_map(&m(&[("path", "/o"), ("format", "json")])).unwrap();
        assert_eq!(c.format, FileFormat::Json);
        let e = FileSinkConfig::from_map(&m(&[("path", "/o"), ("format", "xml")])).unwrap_err();
        assert!(e.field == "format" && e.message.contains("text, csv, json or parquet"), "{e:?}");
    }

    #[test]
    fn over_and_winning_bids_configs_name_the_field_at_fault() {
        use crate::schema::Column;
        let input = vec![
            Column::new("key", "binary", false),
            Column::new("auction", "int64", true),
            Column::new("price", "int64", true),
            Column::new("name", "utf8", true),
        ];
        let c = OverConfig::from_map(&m(&[
            ("aggregates", "AVG(price) AS avg_price, COUNT(*) AS n"),
            ("rows_preceding", "9"),
            ("ties_by", "auction"),
        ]))
        .unwrap();
        assert_eq!((c.rows_preceding, c.ties_by.as_deref()), (Some(9), Some("auction")));
        let names: Vec<String> = c.output(&input).unwrap().into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["auction", "price", "name", "avg_price", "n"]);
        let unbounded = m(&[("aggregates", "SUM(price) AS s"), ("rows_preceding", "UNBOUNDED")]);
        assert_eq!(OverConfig::from_map(&unbounded).unwrap().rows_preceding, None);
        for (pairs, field) in [
            (vec![("aggregates", "SUM(price) AS s")], "rows_preceding"),
            (vec![("aggregates", "SUM(price) AS s"), ("rows_preceding", "-1")], "rows_preceding"),
            (vec![("rows_preceding", "3")], "aggregates"),
            (vec![("aggregates", "MEDIAN(price) AS s"), ("rows_preceding", "3")], "aggregates"),
        ] {
            assert_eq!(OverConfig::from_map(&m(&pairs)).unwrap_err().field, field, "{pairs:?}");
        }
        let bad_ties = OverConfig::from_map(&m(&[
            ("aggregates", "SUM(price) AS s"),
            ("rows_preceding", "1"),
            ("ties_by", "name"),
        ]));
        assert_eq!(bad_ties.unwrap().output(&input).unwrap_err().field, "ties_by");
        let not_int = OverConfig::from_map(&m(&[("aggregates", "SUM(name) AS s"), ("rows_preceding", "1")]));
        assert_eq!(not_int.unwrap().output(&input).unwrap_err().field, "aggregates");

        let auctions = vec![Column::new("seller", "int64", true), Column::new("expires", "timestamp_ms", true)];
        let bids = vec![Column::new("price", "int64", true), Column::new("bidder", "int64", true)];
        let w = WinningBidsConfig::from_map(&m(&[("closes", "expires"), ("by", "price")])).unwrap();
        let names: Vec<String> = w.output(&auctions, &bids).unwrap().into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["key", "seller", "expires", "price", "bidder"]);
        assert_eq!(WinningBidsConfig::from_map(&m(&[("by", "price")])).unwrap_err().field, "closes");
        let e = WinningBidsConfig::from_map(&m(&[("closes", "seller"), ("by", "expires")])).unwrap();
        assert_eq!(e.output(&auctions, &bids).unwrap_err().field, "by");
        let e = WinningBidsConfig::from_map(&m(&[("closes", "price"), ("by", "price")])).unwrap();
        assert_eq!(e.output(&auctions, &bids).unwrap_err().field, "closes");
        assert_eq!(OverConfig::from_map(&m(&[("aggregates", "SUM(x) AS s")])).unwrap_err().field, "rows_preceding");
    }

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
