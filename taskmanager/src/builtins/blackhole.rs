//! `blackhole`: discards records, counting them.

use crate::operator::{Collector, Operator, OperatorError, ProcessContext};
use crate::record::Record;

/// A sink that discards everything.
#[derive(Default)]
pub struct Blackhole {
    /// Records discarded so far.
    pub records: u64,
}

impl Operator for Blackhole {
    fn process_batch(
        &mut self,
        records: &[Record],
        _: &mut ProcessContext<'_>,
        _: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        self.records += records.len() as u64;
        Ok(())
    }
}
