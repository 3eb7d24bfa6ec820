//! Event time: how sources generate watermarks per split ([`generator`]) and how a task combines the
//! watermarks and idleness of its inputs into its own ([`valve`]), with Flink's semantics
//! (`BoundedOutOfOrdernessWatermarks`, `WatermarksWithIdleness`, `StatusWatermarkValve`). Both are pure state
//! machines: the task loop feeds them events, the time and channel messages, and sends what they answer.

pub mod clock;
pub mod generator;
pub mod valve;

/// The lowest watermark: nothing is known yet.
pub const MIN_WATERMARK: i64 = i64::MIN;
/// The watermark of an input that has ended: every event time has passed.
pub const MAX_WATERMARK: i64 = i64::MAX;

/// Whether an input (a split, a channel, a task) currently holds the watermark back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatermarkStatus {
    /// It has records or may have them soon: its watermark counts.
    Active,
    /// It had no records for longer than its idle timeout: its watermark is ignored until it resumes.
    Idle,
}

/// What a generator or a valve tells its downstream after an input: a larger watermark, a change of status,
/// both, or nothing. Sent in the order [`WatermarkOutput::in_order`] gives: a downstream valve ignores the
/// watermarks of an input it believes idle, so "active" goes before the watermark and "idle" after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatermarkOutput {
    /// A watermark larger than every one emitted before.
    pub watermark: Option<i64>,
    /// The new status, when it changed.
    pub status: Option<WatermarkStatus>,
}

impl WatermarkOutput {
    /// Nothing to emit.
    pub const NONE: WatermarkOutput = WatermarkOutput { watermark: None, status: None };

    /// Whether there is nothing to emit.
    pub fn is_empty(&self) -> bool {
        self.watermark.is_none() && self.status.is_none()
    }

    /// The events to send, in the order a downstream valve needs them.
    pub fn in_order(&self) -> impl Iterator<Item = WatermarkEvent> {
        let status = self.status.map(WatermarkEvent::Status);
        let watermark = self.watermark.map(WatermarkEvent::Watermark);
        let (first, second) = match self.status {
            Some(WatermarkStatus::Active) => (status, watermark),
            _ => (watermark, status),
        };
        first.into_iter().chain(second)
    }
}

/// One event of a [`WatermarkOutput`], as it travels downstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatermarkEvent {
    /// Event time up to this watermark (ms, inclusive) has passed.
    Watermark(i64),
    /// The sender became active or idle.
    Status(WatermarkStatus),
}
