//! Timers for keyed operators ([`Timers`], from `ProcessContext::timers`): event-time timers fire when the
//! watermark passes them, processing-time timers when the clock does, each through `Operator::on_timer` with
//! its key and namespace current. They are keyed state (`weir_state::timers`): checkpointed, restored and
//! rescaled with the rest of it.

use crate::api::error::OperatorError;
use weir_common::state::keygroup::KeyGroupRange;
pub use weir_state::timers::TimeDomain;
use weir_state::{KeyedStateBackend, TimerService};

/// An operator's timer service slot: opened on first use, or at start when the restored state holds timers.
#[derive(Debug, Default)]
pub struct TimerSlot(Option<TimerService>);

impl TimerSlot {
    /// The service, opened on `backend` (key groups `range`) if it is not yet.
    pub fn open(
        &mut self,
        backend: &mut dyn KeyedStateBackend,
        range: KeyGroupRange,
    ) -> Result<&mut TimerService, OperatorError> {
        match &mut self.0 {
            Some(s) => Ok(s),
            slot => Ok(slot.insert(TimerService::open(backend, range)?)),
        }
    }

    /// The service, if it is open.
    pub fn get(&mut self) -> Option<&mut TimerService> {
        self.0.as_mut()
    }
}

/// The timers of the current key (and namespace), as an operator registers and deletes them.
pub struct Timers<'a> {
    pub(crate) backend: &'a mut dyn KeyedStateBackend,
    pub(crate) service: &'a mut TimerService,
    pub(crate) watermark: i64,
}

impl Timers<'_> {
    /// Fires `on_timer` once the watermark reaches `timestamp` (ms), for the current key and namespace. Again
    /// for the same key, namespace and time: one timer.
    pub fn register_event_time_timer(&mut self, timestamp: i64) -> Result<(), OperatorError> {
        self.service.register(self.backend, TimeDomain::EventTime, timestamp)?;
        Ok(())
    }

    /// Fires `on_timer` once the processing-time clock reaches `timestamp` (ms since the epoch).
    pub fn register_processing_time_timer(&mut self, timestamp: i64) -> Result<(), OperatorError> {
        self.service.register(self.backend, TimeDomain::ProcessingTime, timestamp)?;
        Ok(())
    }

    /// Deletes the current key and namespace's event-time timer at `timestamp`, if it is set.
    pub fn delete_event_time_timer(&mut self, timestamp: i64) -> Result<(), OperatorError> {
        self.service.delete(self.backend, TimeDomain::EventTime, timestamp)?;
        Ok(())
    }

    /// Deletes the current key and namespace's processing-time timer at `timestamp`, if it is set.
    pub fn delete_processing_time_timer(&mut self, timestamp: i64) -> Result<(), OperatorError> {
        self.service.delete(self.backend, TimeDomain::ProcessingTime, timestamp)?;
        Ok(())
    }

    /// The keyed state, whose current key and namespace the timers are set for.
    pub fn keyed(&mut self) -> &mut dyn KeyedStateBackend {
        &mut *self.backend
    }

    /// The operator's event-time watermark (ms).
    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }

    /// The processing-time clock (ms since the epoch; the task manager's clock, a manual one in tests).
    pub fn current_processing_time(&self) -> i64 {
        self.backend.now_ms() as i64
    }
}
