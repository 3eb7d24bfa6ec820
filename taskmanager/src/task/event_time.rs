//! Event time in the run loop: when a source's watermarks are emitted, and the clock its idleness is measured
//! on. The decisions are the `time` module's; this holds the schedule.

use crate::api::batch::event_times;
use crate::api::operator::SourceChunk;
use crate::time::generator::{SourceWatermarks, WatermarkStrategy};
use crate::time::WatermarkOutput;
use arrow_array::Array;
use std::time::{Duration, Instant};
use weir_common::job::watermarks::EventTimeOutOfRange;

/// A source's poll whose runs of splits do not match its records or its declared splits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SplitRunsError {
    /// Records of a split beyond the declared ones.
    #[error("the source emitted records of split {split}, but declared {splits} splits")]
    Undeclared {
        /// The split the records came from.
        split: usize,
        /// How many splits the source declared.
        splits: usize,
    },
    /// Runs covering more rows than the chunk has.
    #[error("the source's runs of splits overrun its records")]
    Overrun,
}

/// Why a batch a source emitted carries an event time outside `weir_common::job::watermarks::check_event_time`'s range,
/// if one does: every derived time (window bounds, timers, watermarks) stays far from `i64`'s ends after this.
pub(super) fn check_event_times(batch: &arrow_array::RecordBatch) -> Result<(), EventTimeOutOfRange> {
    let Some(times) = event_times(batch) else { return Ok(()) };
    for t in [arrow_arith::aggregate::min(times), arrow_arith::aggregate::max(times)].into_iter().flatten() {
        weir_common::job::watermarks::check_event_time(t)?;
    }
    Ok(())
}

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

    /// Feeds the generators what one poll emitted: each row's timestamp to the generator of its split (each
    /// chunk's runs of consecutive rows of one split), and the splits that finished. A split beyond the ones
    /// the source declared is an error.
    pub(super) fn observe(
        &mut self,
        chunks: &[SourceChunk],
        finished: impl IntoIterator<Item = u32>,
    ) -> Result<(), SplitRunsError> {
        let splits = self.watermarks.splits();
        for chunk in chunks {
            let times = event_times(&chunk.batch);
            let mut at = 0;
            for &(split, n) in &chunk.runs {
                let (split, n) = (split as usize, n as usize);
                if split >= splits {
                    return Err(SplitRunsError::Undeclared { split, splits });
                }
                if at + n > chunk.batch.num_rows() {
                    return Err(SplitRunsError::Overrun);
                }
                if let Some(times) = times {
                    for i in (at..at + n).filter(|i| times.is_valid(*i)) {
                        self.watermarks.on_event(split, times.value(i));
                    }
                }
                at += n;
            }
        }
        for split in finished {
            if (split as usize) < splits {
                self.watermarks.finish_split(split as usize);
            }
        }
        Ok(())
    }

    /// The source now reads `splits` splits: those beyond the ones it had get generators of their own.
    pub(super) fn grow_to(&mut self, splits: usize) {
        if splits > self.watermarks.splits() {
            self.watermarks.add_splits(splits);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{MAX_WATERMARK, MIN_WATERMARK};

    fn chunk(times: &[Option<i64>], runs: &[(u32, u32)]) -> SourceChunk {
        let records: Vec<_> = times
            .iter()
            .map(|t| {
                let r = crate::api::record::Record::new_i64(b"k", 1);
                match t {
                    Some(t) => r.at(*t),
                    None => r,
                }
            })
            .collect();
        SourceChunk { batch: crate::api::batch::batch_of(&records).unwrap(), runs: runs.to_vec() }
    }

    #[test]
    fn each_record_feeds_the_generator_of_its_split() {
        let strategy = WatermarkStrategy { max_out_of_orderness_ms: 10, ..Default::default() };
        let mut time = SourceTime::new(&strategy, 2, MIN_WATERMARK);
        let records = [Some(100), Some(300), Some(200), None];
        time.observe(&[chunk(&records, &[(0, 1), (1, 3)])], []).unwrap();
        // Split 0 at 100, split 1 at 300: the source is held at split 0's 100 − 10 − 1.
        assert_eq!(time.watermarks.on_periodic_emit(0).watermark, Some(89));
        time.observe(&[], [0]).unwrap();
        assert_eq!(time.watermarks.on_periodic_emit(1).watermark, Some(289), "a finished split lets go");
        time.observe(&[], [1]).unwrap();
        assert_eq!(time.watermarks.on_periodic_emit(2).watermark, Some(MAX_WATERMARK));
        let e = time.observe(&[chunk(&records[..1], &[(2, 1)])], []).unwrap_err().to_string();
        assert!(e.contains("split 2") && e.contains("2 splits"), "{e}");
        assert!(time.observe(&[chunk(&records[..1], &[(0, 2)])], []).is_err(), "runs longer than the records");
    }

    #[test]
    fn event_times_past_year_9999_or_before_year_1_are_refused_naming_the_time() {
        use weir_common::job::watermarks::{MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS};
        let ok = chunk(&[Some(MIN_TIMESTAMP_MS), None, Some(MAX_TIMESTAMP_MS)], &[(0, 3)]);
        check_event_times(&ok.batch).unwrap();
        for t in [i64::MIN, MIN_TIMESTAMP_MS - 1, MAX_TIMESTAMP_MS + 1, i64::MAX] {
            let bad = chunk(&[Some(0), Some(t)], &[(0, 2)]);
            let e = check_event_times(&bad.batch).unwrap_err().to_string();
            assert!(e.contains(&t.to_string()) && e.contains("9999-12-31"), "{e}");
        }
    }
}
