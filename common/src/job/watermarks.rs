//! A source's watermark strategy (an operator entry's `watermarks:`), its protobuf form and its validation.
//! The task manager's `time` module generates watermarks from it; the job manager checks it at submission.

use serde::{Deserialize, Serialize};
use weir_proto as pb;

/// The longest out-of-orderness bound a spec may declare (7 days): far beyond any real disorder, so a larger
/// value is a unit mistake.
pub const MAX_OUT_OF_ORDERNESS_MS: u64 = 7 * 24 * 3600 * 1000;
/// How often a source emits its watermark when the spec does not say (Flink's `pipeline.auto-watermark-interval`).
pub const DEFAULT_AUTO_WATERMARK_INTERVAL_MS: u64 = 200;
/// The longest idle timeout or emit interval a spec may declare (1 day).
pub const MAX_WATERMARK_DURATION_MS: u64 = 24 * 3600 * 1000;

/// The earliest event time a record may carry, 0001-01-01T00:00:00Z (SQL's `TIMESTAMP` range): windows, timers
/// and watermarks add sizes, gaps and bounds of up to a year or so to event times, which cannot overflow inside
/// this range. A source refuses a record outside it instead of letting arithmetic wrap.
pub const MIN_TIMESTAMP_MS: i64 = -62_135_596_800_000;
/// The latest event time a record may carry, 9999-12-31T23:59:59.999Z.
pub const MAX_TIMESTAMP_MS: i64 = 253_402_300_799_999;

/// An event time outside [`MIN_TIMESTAMP_MS`]..=[`MAX_TIMESTAMP_MS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "event time {ms} ms is outside the range windows and timers handle: {MIN_TIMESTAMP_MS} (0001-01-01) to \
     {MAX_TIMESTAMP_MS} (9999-12-31)"
)]
pub struct EventTimeOutOfRange {
    /// The event time, ms.
    pub ms: i64,
}

/// Why an event time is outside what Weir handles, if it is.
pub fn check_event_time(ms: i64) -> Result<(), EventTimeOutOfRange> {
    if (MIN_TIMESTAMP_MS..=MAX_TIMESTAMP_MS).contains(&ms) {
        return Ok(());
    }
    Err(EventTimeOutOfRange { ms })
}

/// How far event time is behind processing time: `now_ms − watermark`, or none before the first watermark
/// (`i64::MIN`) and after the last (`i64::MAX`, the input ended).
pub fn lag_ms(now_ms: i64, watermark: i64) -> Option<i64> {
    (watermark != i64::MIN && watermark != i64::MAX).then(|| now_ms.saturating_sub(watermark))
}

/// How a source generates watermarks: bounded out-of-orderness per split (0 = Flink's monotonous strategy),
/// optionally with idleness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatermarkStrategy {
    /// How far behind the largest timestamp seen a record may still arrive, in ms (0 = monotonous timestamps).
    pub max_out_of_orderness_ms: u64,
    /// After how long without records a split stops holding the watermark back (`None`: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<u64>,
    /// How often the source emits its watermark, in ms.
    pub auto_watermark_interval_ms: u64,
}

impl Default for WatermarkStrategy {
    fn default() -> Self {
        WatermarkStrategy {
            max_out_of_orderness_ms: 0,
            idle_timeout_ms: None,
            auto_watermark_interval_ms: DEFAULT_AUTO_WATERMARK_INTERVAL_MS,
        }
    }
}

/// A field of a `watermarks:` entry that is out of range: the field (below `watermarks.`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field {field:?}: {message}")]
pub struct WatermarkFieldError {
    /// The field, e.g. `max_out_of_orderness_ms`.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

fn in_range(field: &'static str, v: i64, min: u64, max: u64) -> Result<u64, WatermarkFieldError> {
    let err = |message: String| WatermarkFieldError { field, message };
    if v < 0 {
        return Err(err(format!("must not be negative, got {v}")));
    }
    let v = v as u64;
    if v < min {
        return Err(err(format!("must be at least {min} ms, got {v}")));
    }
    if v > max {
        return Err(err(format!("{v} ms is over the limit of {max} ms ({} days): a unit mistake?", max / 86_400_000)));
    }
    Ok(v)
}

impl WatermarkStrategy {
    /// Checks a strategy as it comes over the wire.
    pub fn from_proto(spec: &pb::WatermarkSpec) -> Result<Self, WatermarkFieldError> {
        let max_out_of_orderness_ms =
            in_range("max_out_of_orderness_ms", spec.max_out_of_orderness_ms, 0, MAX_OUT_OF_ORDERNESS_MS)?;
        let idle_timeout_ms =
            spec.idle_timeout_ms.map(|v| in_range("idle_timeout_ms", v, 1, MAX_WATERMARK_DURATION_MS)).transpose()?;
        let auto_watermark_interval_ms = match spec.auto_watermark_interval_ms {
            None => DEFAULT_AUTO_WATERMARK_INTERVAL_MS,
            Some(v) => in_range("auto_watermark_interval_ms", v, 1, MAX_WATERMARK_DURATION_MS)?,
        };
        Ok(WatermarkStrategy { max_out_of_orderness_ms, idle_timeout_ms, auto_watermark_interval_ms })
    }

    /// The wire form.
    pub fn to_proto(&self) -> pb::WatermarkSpec {
        pb::WatermarkSpec {
            max_out_of_orderness_ms: self.max_out_of_orderness_ms as i64,
            idle_timeout_ms: self.idle_timeout_ms.map(|v| v as i64),
            auto_watermark_interval_ms: Some(self.auto_watermark_interval_ms as i64),
        }
    }
}

/// The `watermarks:` entry as written in a spec file: `strategy` is `bounded-out-of-orderness` (the default) or
/// `monotonous` (no out-of-orderness).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WatermarksFile {
    #[allow(missing_docs)]
    #[serde(default)]
    pub strategy: Option<String>,
    #[allow(missing_docs)]
    #[serde(default)]
    pub max_out_of_orderness_ms: Option<i64>,
    #[allow(missing_docs)]
    #[serde(default)]
    pub idle_timeout_ms: Option<i64>,
    #[allow(missing_docs)]
    #[serde(default)]
    pub auto_watermark_interval_ms: Option<i64>,
}

impl WatermarksFile {
    /// The wire form, checked as the job manager will check it.
    pub fn to_proto(&self) -> Result<pb::WatermarkSpec, WatermarkFieldError> {
        let bound = match self.strategy.as_deref().map(str::trim) {
            None | Some("bounded-out-of-orderness") => self.max_out_of_orderness_ms.unwrap_or(0),
            Some("monotonous") => match self.max_out_of_orderness_ms {
                None | Some(0) => 0,
                Some(v) => {
                    return Err(WatermarkFieldError {
                        field: "max_out_of_orderness_ms",
                        message: format!("a monotonous strategy has no out-of-orderness, got {v}"),
                    })
                }
            },
            Some(other) => {
                return Err(WatermarkFieldError {
                    field: "strategy",
                    message: format!(
                        "expected bounded-out-of-orderness or monotonous, got {}",
                        crate::text::echo(other)
                    ),
                })
            }
        };
        let spec = pb::WatermarkSpec {
            max_out_of_orderness_ms: bound,
            idle_timeout_ms: self.idle_timeout_ms,
            auto_watermark_interval_ms: self.auto_watermark_interval_ms,
        };
        WatermarkStrategy::from_proto(&spec)?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(yaml: &str) -> Result<pb::WatermarkSpec, WatermarkFieldError> {
        serde_yaml::from_str::<WatermarksFile>(yaml).unwrap().to_proto()
    }

    #[test]
    fn defaults_and_round_trip() {
        let s = WatermarkStrategy::from_proto(&file("{ max_out_of_orderness_ms: 500 }").unwrap()).unwrap();
        assert_eq!(
            s,
            WatermarkStrategy { max_out_of_orderness_ms: 500, idle_timeout_ms: None, auto_watermark_interval_ms: 200 }
        );
        assert_eq!(WatermarkStrategy::from_proto(&s.to_proto()).unwrap(), s);
        let m =
            WatermarkStrategy::from_proto(&file("{ strategy: monotonous, idle_timeout_ms: 3000 }").unwrap()).unwrap();
        assert_eq!((m.max_out_of_orderness_ms, m.idle_timeout_ms), (0, Some(3000)));
        assert_eq!(WatermarkStrategy::from_proto(&pb::WatermarkSpec::default()).unwrap(), WatermarkStrategy::default());
    }

    #[test]
    fn lag_is_none_without_a_watermark_or_after_the_last() {
        assert_eq!(lag_ms(10_000, 9_250), Some(750));
        assert_eq!(lag_ms(10_000, i64::MIN), None);
        assert_eq!(lag_ms(10_000, i64::MAX), None);
        assert_eq!(lag_ms(10_000, 12_000), Some(-2_000), "a watermark ahead of the clock");
    }

    #[test]
    fn out_of_range_fields_are_named() {
        let e = file("{ max_out_of_orderness_ms: -1 }").unwrap_err();
        assert_eq!(e.field, "max_out_of_orderness_ms");
        assert!(e.message.contains("negative"), "{e}");
        let e = file(&format!("{{ max_out_of_orderness_ms: {} }}", MAX_OUT_OF_ORDERNESS_MS + 1)).unwrap_err();
        assert_eq!(e.field, "max_out_of_orderness_ms");
        assert!(e.message.contains("7 days"), "{e}");
        assert!(file(&format!("{{ max_out_of_orderness_ms: {MAX_OUT_OF_ORDERNESS_MS} }}")).is_ok());
        assert_eq!(file("{ idle_timeout_ms: 0 }").unwrap_err().field, "idle_timeout_ms");
        assert_eq!(file("{ auto_watermark_interval_ms: -5 }").unwrap_err().field, "auto_watermark_interval_ms");
        assert_eq!(file("{ strategy: punctuated }").unwrap_err().field, "strategy");
        assert_eq!(
            file("{ strategy: monotonous, max_out_of_orderness_ms: 5 }").unwrap_err().field,
            "max_out_of_orderness_ms"
        );
        assert!(serde_yaml::from_str::<WatermarksFile>("{ max_out_of_order: 5 }").is_err());
    }
}
