//! `blackhole`: discards records, counting them (`weir_blackhole_records_total`).

use crate::api::operator::{Collector, InitContext, Operator, OperatorError, ProcessContext};
use crate::api::record::Record;

/// A sink that discards everything.
#[derive(Default)]
pub struct Blackhole {
    /// Records discarded so far.
    pub records: u64,
    counter: Option<metrics::Counter>,
}

impl Operator for Blackhole {
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        let labels = [
            ("job_id", ctx.info.job_id.clone()),
            ("operator", ctx.info.uid.clone()),
            ("subtask", ctx.info.subtask.0.to_string()),
        ];
        self.counter = Some(metrics::counter!("weir_blackhole_records_total", &labels));
        Ok(())
    }

    fn process_batch(
        &mut self,
        records: &[Record],
        _: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        self.records += records.len() as u64;
        if let Some(c) = &self.counter {
            c.increment(records.len() as u64);
        }
        Ok(())
    }
}
