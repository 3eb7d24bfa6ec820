//! The window config of `window-aggregate` (DESIGN §10), which the window joins and top-n share: the windows
//! (shape, offset), the aggregate, what happens to late records, and the trigger; checked naming the field.

use serde::{Deserialize, Serialize};
use weir_common::job::kind::{
    field, field_err, state_field, ConfigField, ConfigFieldError, ConfigReader, OperatorConfig,
};

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

/// A [`WindowSpec`] that names no shape, several, or one out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowSpecError {
    /// A size, slide or gap of 0.
    #[error("{field} must be positive")]
    NotPositive {
        /// The field.
        field: &'static str,
    },
    /// A size, slide or gap over a year.
    #[error("{field} of {ms} ms is over a year: a unit mistake?")]
    OverAYear {
        /// The field.
        field: &'static str,
        /// Its value.
        ms: u64,
    },
    /// `global: true` beside another shape's field.
    #[error("global: true takes no other window field")]
    GlobalWithOthers,
    /// Sliding windows that would leave gaps.
    #[error("slide_ms {slide_ms} is longer than sliding_ms {size_ms}: records would fall between windows")]
    SlideLongerThanSize {
        /// The window's length.
        size_ms: u64,
        /// Its slide.
        slide_ms: u64,
    },
    /// Sliding windows kept in more than [`MAX_SLICES_PER_WINDOW`] slices.
    #[error(
        "a window of sliding_ms {size_ms} that slides by slide_ms {slide_ms} is kept as {slices} \
         slices of {slice_ms} ms each (sliding_ms / gcd(sliding_ms, slide_ms)), and every firing combines \
         them all: at most {MAX_SLICES_PER_WINDOW} slices per window (make slide_ms divide \
         sliding_ms, or slide further)"
    )]
    TooManySlices {
        /// The window's length.
        size_ms: u64,
        /// Its slide.
        slide_ms: u64,
        /// Slices per window.
        slices: u64,
        /// A slice's length (the gcd of size and slide).
        slice_ms: u64,
    },
    /// `sliding_ms` alone.
    #[error("sliding_ms needs slide_ms")]
    SlidingWithoutSlide,
    /// No shape, or fields of several.
    #[error(
        "expected exactly one of {{ tumbling_ms }}, {{ sliding_ms, slide_ms }}, {{ session_gap_ms }} or \
         {{ global: true }}"
    )]
    NotExactlyOne,
    /// An offset for windows that have no period.
    #[error("session and global windows take no offset_ms")]
    OffsetWithoutPeriod,
    /// An offset of a period or more.
    #[error("offset_ms {offset_ms} must be smaller than the window's period {period_ms} ms")]
    OffsetTooLarge {
        /// The offset.
        offset_ms: i64,
        /// The windows' period (size of tumbling windows, slide of sliding ones).
        period_ms: u64,
    },
}

impl WindowSpec {
    /// The shape, or why the spec names none or several.
    pub fn shape(&self) -> Result<WindowShape, WindowSpecError> {
        let positive = |field: &'static str, v: u64| -> Result<u64, WindowSpecError> {
            match v {
                0 => Err(WindowSpecError::NotPositive { field }),
                v if v > MAX_WINDOW_MS => Err(WindowSpecError::OverAYear { field, ms: v }),
                v => Ok(v),
            }
        };
        let shape = match (self.tumbling_ms, self.sliding_ms, self.slide_ms, self.session_gap_ms) {
            (None, None, None, None) if self.global => WindowShape::Global,
            _ if self.global => return Err(WindowSpecError::GlobalWithOthers),
            (Some(t), None, None, None) => WindowShape::Tumbling { size_ms: positive("tumbling_ms", t)? },
            (None, Some(size), Some(slide), None) => {
                let (size_ms, slide_ms) = (positive("sliding_ms", size)?, positive("slide_ms", slide)?);
                if slide_ms > size_ms {
                    return Err(WindowSpecError::SlideLongerThanSize { size_ms, slide_ms });
                }
                let slice_ms = gcd(size_ms, slide_ms);
                let slices = size_ms / slice_ms;
                if slices > MAX_SLICES_PER_WINDOW {
                    return Err(WindowSpecError::TooManySlices { size_ms, slide_ms, slices, slice_ms });
                }
                WindowShape::Sliding { size_ms, slide_ms }
            }
            (None, Some(_), None, None) => return Err(WindowSpecError::SlidingWithoutSlide),
            (None, None, None, Some(g)) => WindowShape::Session { gap_ms: positive("session_gap_ms", g)? },
            _ => return Err(WindowSpecError::NotExactlyOne),
        };
        let period = match shape {
            WindowShape::Tumbling { size_ms } => Some(size_ms),
            WindowShape::Sliding { slide_ms, .. } => Some(slide_ms),
            WindowShape::Session { .. } | WindowShape::Global => None,
        };
        match period {
            None if self.offset_ms != 0 => Err(WindowSpecError::OffsetWithoutPeriod),
            Some(p) if self.offset_ms.unsigned_abs() >= p => {
                Err(WindowSpecError::OffsetTooLarge { offset_ms: self.offset_ms, period_ms: p })
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

/// The shapes `trigger` may take, as messages list them.
const TRIGGER_SHAPES: &str = "event-time, processing-time, { count: N } or { continuous_event_time_ms: I }";

/// A `trigger` that is none of [`TRIGGER_SHAPES`], or one out of range.
#[derive(Debug, thiserror::Error)]
enum TriggerError {
    /// A map that is not one of the trigger maps.
    #[error("expected {TRIGGER_SHAPES}: {0}")]
    NotATriggerMap(#[source] serde_json::Error),
    /// `{ count: 0 }`.
    #[error("count must be positive")]
    CountNotPositive,
    /// `{ continuous_event_time_ms: 0 }`.
    #[error("continuous_event_time_ms must be positive")]
    IntervalNotPositive,
    /// An interval over a year.
    #[error("continuous_event_time_ms of {0} ms is over a year: a unit mistake?")]
    IntervalOverAYear(u64),
    /// A map with neither field or both.
    #[error("expected {TRIGGER_SHAPES}")]
    NeitherOrBoth,
    /// Text that names no trigger (as written).
    #[error("expected {TRIGGER_SHAPES}, got {}", weir_common::text::echo(.0))]
    Unknown(String),
}

/// Parses `trigger`: `event-time`, `processing-time`, `{ count: N }` or `{ continuous_event_time_ms: I }`.
fn parse_trigger(text: &str) -> Result<WindowTrigger, TriggerError> {
    match text.trim() {
        "event-time" => Ok(WindowTrigger::EventTime),
        "processing-time" => Ok(WindowTrigger::ProcessingTime),
        t if t.starts_with('{') => {
            let m: TriggerMap = serde_json::from_str(t).map_err(TriggerError::NotATriggerMap)?;
            match (m.count, m.continuous_event_time_ms) {
                (Some(0), None) => Err(TriggerError::CountNotPositive),
                (Some(n), None) => Ok(WindowTrigger::Count(n)),
                (None, Some(0)) => Err(TriggerError::IntervalNotPositive),
                (None, Some(i)) if i > MAX_WINDOW_MS => Err(TriggerError::IntervalOverAYear(i)),
                (None, Some(i)) => Ok(WindowTrigger::ContinuousEventTime(i)),
                _ => Err(TriggerError::NeitherOrBoth),
            }
        }
        other => Err(TriggerError::Unknown(other.to_string())),
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
    /// The config fields it reads: what `weir kinds` lists and what any other field is refused against.
    pub const FIELDS: &'static [ConfigField] = &[
        state_field("window",
            "the windows: { tumbling_ms }, { sliding_ms, slide_ms }, { session_gap_ms } or { global: true }; offset_ms shifts them",
        ),
        state_field("aggregate", "count (default), sum, min, max or avg"),
        state_field("field", "the integer column sum, min, max and avg read (default value)"),
        field("allowed_lateness_ms", "how long after its end a window still takes late records and fires again (default 0)"),
        field("late", "drop (default) or side-output: records too late for every window go to the side output `late`"),
        state_field("trigger", "when windows fire: event-time (default), processing-time, { count: N } or { continuous_event_time_ms: I }"),
    ];

    /// Reads and checks a window-aggregate config.
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let r = ConfigReader::new(map, Self::FIELDS)?;
        let shape = "a map { tumbling_ms } | { sliding_ms, slide_ms } | { session_gap_ms } | { global: true }";
        let spec: WindowSpec =
            r.nested("window", shape)?.ok_or_else(|| field_err("window", format!("required: {shape}")))?;
        let window = spec.shape().map_err(|e| field_err("window", e.to_string()))?;
        let aggregate = match r.string("aggregate")?.as_deref().map(str::trim) {
            None | Some("count") => WindowAggregate::Count,
            Some("sum") => WindowAggregate::Sum,
            Some("min") => WindowAggregate::Min,
            Some("max") => WindowAggregate::Max,
            Some("avg") => WindowAggregate::Avg,
            Some(other) => {
                return Err(field_err(
                    "aggregate",
                    format!("expected count, sum, min, max or avg, got {}", weir_common::text::echo(other)),
                ))
            }
        };
        let late = match r.string("late")?.as_deref().map(str::trim) {
            None | Some("drop") => LateRecords::Drop,
            Some("side-output") => LateRecords::SideOutput,
            Some(other) => {
                return Err(field_err(
                    "late",
                    format!("expected drop or side-output, got {}", weir_common::text::echo(other)),
                ))
            }
        };
        let allowed_lateness_ms = r.u64("allowed_lateness_ms")?.unwrap_or(0);
        if allowed_lateness_ms > MAX_WINDOW_MS {
            return Err(field_err("allowed_lateness_ms", "over a year: a unit mistake?"));
        }
        let trigger = match r.string("trigger")? {
            None => WindowTrigger::EventTime,
            Some(t) => parse_trigger(&t).map_err(|e| field_err("trigger", e.to_string()))?,
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
            field: r.string("field")?.map(|f| f.trim().to_string()).unwrap_or_else(|| "value".into()),
            allowed_lateness_ms,
            late,
        })
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::builtins::declare::config_map as m;

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
}
