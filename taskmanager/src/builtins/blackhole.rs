//! `blackhole`: discards records, counting them (`weir_blackhole_records_total`). For records with event
//! timestamps it also measures how far each one arrives behind the wall clock (processing time − event time, in
//! ms) and publishes the median, 99th percentile and maximum of that lag as `weir_blackhole_lag_ms` (label
//! `quantile`: `0.5`, `0.99`, `1`) once a second and at end of input, where it also logs them. With a source
//! that stamps records with the time they leave it (`datagen`'s `event_time: { wall_clock: true }`), the lag is
//! the source-to-sink latency.

use super::declare::*;
use crate::api::batch::event_times;
use crate::api::operator::{Collector, InitContext, Operator, OperatorError, ProcessContext};
use arrow_array::{Array, RecordBatch};
use std::time::{Duration, Instant};

/// Lags below this many ms are counted per millisecond; longer ones only in the overflow and the maximum.
const LAG_BUCKETS: usize = 4096;
/// How often the lag quantiles are published.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// Lags in 1-ms buckets, with the count of longer ones and the maximum.
#[derive(Clone, Debug)]
pub struct LagHistogram {
    buckets: Box<[u64; LAG_BUCKETS]>,
    overflow: u64,
    count: u64,
    max: i64,
}

impl Default for LagHistogram {
    fn default() -> Self {
        LagHistogram { buckets: Box::new([0; LAG_BUCKETS]), overflow: 0, count: 0, max: 0 }
    }
}

impl LagHistogram {
    /// Counts one lag (a negative one, from clocks that disagree, as 0).
    pub fn record(&mut self, lag_ms: i64) {
        let lag = lag_ms.max(0);
        match self.buckets.get_mut(lag as usize) {
            Some(b) => *b += 1,
            None => self.overflow += 1,
        }
        self.count += 1;
        self.max = self.max.max(lag);
    }

    /// How many lags were counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The smallest lag at or below which a fraction `q` of the counted ones are (the maximum for `q` = 1;
    /// `None` before any). A quantile that falls among the overflow is the maximum.
    pub fn quantile(&self, q: f64) -> Option<i64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (ms, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(ms as i64);
            }
        }
        Some(self.max)
    }
}

/// A sink that discards everything.
#[derive(Default)]
pub struct Blackhole {
    /// Records discarded so far.
    pub records: u64,
    counter: Option<metrics::Counter>,
    /// Lag of the records that carried a timestamp.
    pub lag: LagHistogram,
    lag_gauges: Option<[metrics::Gauge; 3]>,
    last_publish: Option<Instant>,
}

impl Blackhole {
    fn publish_lag(&mut self) {
        self.last_publish = Some(Instant::now());
        let Some(gauges) = &self.lag_gauges else { return };
        for (gauge, q) in gauges.iter().zip([0.5, 0.99, 1.0]) {
            if let Some(v) = self.lag.quantile(q) {
                gauge.set(v as f64);
            }
        }
    }
}

impl Operator for Blackhole {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let labels = [
            ("job_id", ctx.info.job_id.clone()),
            ("operator", ctx.info.uid.clone()),
            ("subtask", ctx.info.subtask.0.to_string()),
        ];
        self.counter = Some(metrics::counter!("weir_blackhole_records_total", &labels));
        let gauge = |q: &str| {
            let mut l = labels.to_vec();
            l.push(("quantile", q.to_string()));
            metrics::gauge!("weir_blackhole_lag_ms", &l)
        };
        self.lag_gauges = Some([gauge("0.5"), gauge("0.99"), gauge("1")]);
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        _: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        let rows = batch.num_rows() as u64;
        self.records += rows;
        if let Some(c) = &self.counter {
            c.increment(rows);
        }
        if let Some(times) = event_times(batch).filter(|t| t.null_count() < t.len()) {
            let now = weir_common::now_ms() as i64;
            for ts in times.iter().flatten() {
                self.lag.record(now.saturating_sub(ts));
            }
            if self.last_publish.is_none_or(|t| t.elapsed() >= PUBLISH_EVERY) {
                self.publish_lag();
            }
        }
        Ok(())
    }

    fn end_of_input(&mut self, ctx: &mut ProcessContext<'_>, _: &mut Collector<'_>) -> Result<(), OperatorError> {
        if self.lag.count() > 0 {
            self.publish_lag();
            tracing::info!(operator = %ctx.info.uid, records = self.lag.count(), p50_ms = self.lag.quantile(0.5),
                p99_ms = self.lag.quantile(0.99), max_ms = self.lag.quantile(1.0), "lag behind the wall clock at the sink");
        }
        Ok(())
    }
}

/// The `blackhole` kind: a sink that discards what it gets, for benchmarks.
pub struct BlackholeKind;

impl Kind for BlackholeKind {
    type Config = ();

    fn info(&self) -> KindInfo {
        builtin_info("blackhole", Role::Sink, false, "A sink that discards what it gets, for benchmarks", &[])
    }

    fn config(&self, config: &OperatorConfig) -> Result<(), ConfigFieldError> {
        weir_common::job::kind::ConfigReader::new(config, &[]).map(|_| ())
    }

    fn build(&self, (): ()) -> Result<Instance, InvalidConfig> {
        Ok(Instance::Operator(Box::new(Blackhole::default())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_quantiles() {
        let mut h = LagHistogram::default();
        assert_eq!(h.quantile(0.5), None);
        for lag in 1..=100 {
            h.record(lag);
        }
        assert_eq!((h.quantile(0.5), h.quantile(0.99), h.quantile(1.0)), (Some(50), Some(99), Some(100)));
        h.record(-3);
        assert_eq!(h.quantile(0.0), Some(0), "a negative lag counts as none");
        h.record(1_000_000);
        assert_eq!(h.quantile(1.0), Some(1_000_000), "beyond the buckets: the maximum");
        assert_eq!(h.count(), 102);
    }
}
