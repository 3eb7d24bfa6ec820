//! Event time in the run loop: when a source's watermarks are emitted, and the clock its idleness is measured
//! on. The decisions are the `time` module's; this holds the schedule.

use crate::time::generator::{SourceWatermarks, WatermarkStrategy};
use crate::time::WatermarkOutput;
use std::time::{Duration, Instant};

/// A source task's watermark generation: its splits' generators, the periodic emit, and a clock that stands
/// still while the task is blocked handing records downstream, so a back-pressured split never looks idle
/// (Flink's pausable relative clock).
pub(super) struct SourceTime {
    watermarks: SourceWatermarks,
    interval: Duration,
    next_emit: Instant,
    started: Instant,
    blocked: Duration,
}

impl SourceTime {
    /// Generation for a source of `splits` splits that never emits at or below `floor` (its restored watermark).
    pub(super) fn new(strategy: &WatermarkStrategy, splits: usize, floor: i64) -> Self {
        let interval = Duration::from_millis(strategy.auto_watermark_interval_ms.max(1));
        let now = Instant::now();
        SourceTime {
            watermarks: SourceWatermarks::new(strategy, splits, floor),
            interval,
            next_emit: now + interval,
            started: now,
            blocked: Duration::ZERO,
        }
    }

    /// The generators, fed with every record's split and timestamp.
    pub(super) fn watermarks(&mut self) -> &mut SourceWatermarks {
        &mut self.watermarks
    }

    /// The task spent `d` pushing records downstream: the idleness clock does not count it.
    pub(super) fn blocked_for(&mut self, d: Duration) {
        self.blocked += d;
    }

    /// How long until the next periodic emit.
    pub(super) fn until_emit(&self) -> Duration {
        self.next_emit.saturating_duration_since(Instant::now())
    }

    /// At or after the emit time: what the source sends now, and the next emit is scheduled.
    pub(super) fn emit_if_due(&mut self) -> WatermarkOutput {
        let now = Instant::now();
        if now < self.next_emit {
            return WatermarkOutput::NONE;
        }
        self.next_emit = now + self.interval;
        let clock_ms = now.saturating_duration_since(self.started).saturating_sub(self.blocked).as_millis() as u64;
        self.watermarks.on_periodic_emit(clock_ms)
    }
}
