//! The harnesses a test drives: an operator's and a source's.

use super::slot::{error, Emitted, Slot};
use super::Snapshot;
use crate::api::error::OperatorError;
use crate::api::operator::{Operator, RuntimeInfo, Source, SourceOutput, SourceStatus};
use crate::api::record::Record;
use crate::api::timers::TimeDomain;
use crate::task::fire_due;
use crate::time::MAX_WATERMARK;
use arrow_array::RecordBatch;
use weir_common::ids::CheckpointId;
use weir_state::{Clock, KeyedStateBackend, OperatorStateStore};

/// One operator running as a subtask: see the [module docs](super).
pub struct OperatorHarness<O: Operator + ?Sized = dyn Operator> {
    pub(super) op: Box<O>,
    pub(super) slot: Slot,
    pub(super) out: Emitted,
}

impl<O: Operator + ?Sized> OperatorHarness<O> {
    /// Processes a batch of the (first) input.
    pub fn process(&mut self, batch: &RecordBatch) -> Result<(), OperatorError> {
        self.push(0, batch)
    }

    /// Processes a batch of a two-input operator's second input.
    pub fn process_second(&mut self, batch: &RecordBatch) -> Result<(), OperatorError> {
        self.push(1, batch)
    }

    fn push(&mut self, input: usize, batch: &RecordBatch) -> Result<(), OperatorError> {
        self.slot.check_input(batch)?;
        let OperatorHarness { op, slot, out } = self;
        out.collect(|out| {
            let mut ctx = slot.context();
            match input {
                0 => op.process_batch(batch, &mut ctx, out),
                _ => op.process_second_batch(batch, &mut ctx, out),
            }
        })
    }

    /// Moves event time to `watermark`, as a task does: if it is ahead of the operator's, its due event-time
    /// timers fire in order, then `on_watermark` runs, then the watermark goes out ([`Self::take_watermarks`]).
    pub fn watermark(&mut self, watermark: i64) -> Result<(), OperatorError> {
        if watermark <= self.slot.watermark {
            return Ok(());
        }
        self.slot.watermark = watermark;
        if !self.slot.restored_at_end {
            let OperatorHarness { op, slot, out } = self;
            out.collect(|out| {
                let mut ctx = slot.context();
                fire_due(&mut **op, &mut ctx, TimeDomain::EventTime, watermark, out, &|| false).map_err(error)?;
                op.on_watermark(watermark, &mut ctx, out)
            })?;
        }
        self.out.watermarks.push(watermark);
        Ok(())
    }

    /// Sets the processing-time clock to `now_ms` (the TTL clock too) and fires the processing-time timers due.
    pub fn set_processing_time(&mut self, now_ms: u64) -> Result<(), OperatorError> {
        self.slot.clock.set(now_ms);
        let OperatorHarness { op, slot, out } = self;
        out.collect(|out| {
            let mut ctx = slot.context();
            let time = i64::try_from(now_ms).unwrap_or(i64::MAX);
            fire_due(&mut **op, &mut ctx, TimeDomain::ProcessingTime, time, out, &|| false).map_err(error)?;
            Ok(())
        })
    }

    /// Ends the input, as a task does: event time moves to the end (everything waiting for the watermark fires),
    /// then `end_of_input` runs. Unlike a task, it may be called again (the hook runs again).
    pub fn end_input(&mut self) -> Result<(), OperatorError> {
        if self.slot.watermark < MAX_WATERMARK {
            self.watermark(MAX_WATERMARK)?;
        }
        if !self.slot.restored_at_end {
            let OperatorHarness { op, slot, out } = self;
            out.collect(|out| op.end_of_input(&mut slot.context(), out))?;
        }
        self.slot.input_ended = true;
        Ok(())
    }

    /// Takes checkpoint `id`: the operator's `snapshot_state`, then its keyed and operator state, uploaded as a
    /// task uploads a checkpoint (keyed state in its backend's native format).
    pub fn snapshot(&mut self, id: u64) -> Result<Snapshot, OperatorError> {
        let op = &mut self.op;
        self.slot.snapshot(id, false, |ctx| op.snapshot_state(ctx))
    }

    /// [`Self::snapshot`] with the keyed state in the canonical format (a canonical savepoint): restorable into
    /// either backend.
    pub fn canonical_snapshot(&mut self, id: u64) -> Result<Snapshot, OperatorError> {
        let op = &mut self.op;
        self.slot.snapshot(id, true, |ctx| op.snapshot_state(ctx))
    }

    /// Tells the operator checkpoint `id` completed.
    pub fn notify_checkpoint_complete(&mut self, id: u64) -> Result<(), OperatorError> {
        self.op.notify_checkpoint_complete(CheckpointId(id))
    }

    /// Tells the operator checkpoint `id` was aborted.
    pub fn notify_checkpoint_aborted(&mut self, id: u64) -> Result<(), OperatorError> {
        self.op.notify_checkpoint_aborted(CheckpointId(id))
    }

    /// The main output's batches emitted since the last call.
    pub fn take_output(&mut self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.out.main)
    }

    /// The main output since the last call as key/value records (the shape of [`crate::api::batch`]).
    pub fn take_records(&mut self) -> Result<Vec<Record>, OperatorError> {
        self.out.take_records()
    }

    /// Side output `tag`'s batches emitted since the last call.
    pub fn take_side_output(&mut self, tag: &str) -> Vec<RecordBatch> {
        self.out.side.remove(tag).unwrap_or_default()
    }

    /// Every side output's batches emitted since the last call, by tag.
    pub fn take_side_outputs(&mut self) -> std::collections::BTreeMap<String, Vec<RecordBatch>> {
        std::mem::take(&mut self.out.side)
    }

    /// The watermarks that went out since the last call.
    pub fn take_watermarks(&mut self) -> Vec<i64> {
        std::mem::take(&mut self.out.watermarks)
    }

    /// The operator.
    pub fn operator(&mut self) -> &mut O {
        &mut self.op
    }

    /// The operator's keyed state, or an error for a harness without it.
    pub fn keyed(&mut self) -> Result<&mut dyn KeyedStateBackend, OperatorError> {
        self.slot.keyed()
    }

    /// The operator's operator state.
    pub fn operator_state(&mut self) -> &mut OperatorStateStore {
        &mut self.slot.op_state
    }

    /// Where the operator runs.
    pub fn info(&self) -> &RuntimeInfo {
        &self.slot.info
    }

    /// The operator's event-time watermark.
    pub fn current_watermark(&self) -> i64 {
        self.slot.watermark
    }

    /// The processing-time clock (ms).
    pub fn processing_time(&self) -> u64 {
        self.slot.clock.now_ms()
    }

    /// Whether the operator's state was restored (what its `initialize_state` was told).
    pub fn is_restored(&self) -> bool {
        self.slot.restored
    }
}

impl<O: Operator + ?Sized> std::fmt::Debug for OperatorHarness<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.slot.describe("OperatorHarness", f)
    }
}

/// One source running as a subtask: polled by hand, snapshotted and restored as an operator is.
pub struct SourceHarness<S: Source + ?Sized = dyn Source> {
    pub(super) src: Box<S>,
    pub(super) slot: Slot,
    pub(super) out: Emitted,
}

impl<S: Source + ?Sized> SourceHarness<S> {
    /// Polls the source for at most `max` records; what it emits goes to the output ([`Self::take_output`]).
    pub fn poll(&mut self, max: usize) -> Result<SourceStatus, OperatorError> {
        let mut polled = SourceOutput::with_capacity(max);
        let status = self.src.poll(&mut polled, max)?;
        let (chunks, _) = polled.take();
        self.out.main.extend(chunks.into_iter().map(|c| c.batch));
        Ok(status)
    }

    /// Takes checkpoint `id` of the source's operator state.
    pub fn snapshot(&mut self, id: u64) -> Result<Snapshot, OperatorError> {
        let src = &mut self.src;
        self.slot.snapshot(id, false, |ctx| src.snapshot_state(ctx))
    }

    /// Tells the source checkpoint `id` completed.
    pub fn notify_checkpoint_complete(&mut self, id: u64) -> Result<(), OperatorError> {
        self.src.notify_checkpoint_complete(CheckpointId(id))
    }

    /// The batches emitted since the last call.
    pub fn take_output(&mut self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.out.main)
    }

    /// The output since the last call as key/value records.
    pub fn take_records(&mut self) -> Result<Vec<Record>, OperatorError> {
        self.out.take_records()
    }

    /// The source.
    pub fn source(&mut self) -> &mut S {
        &mut self.src
    }

    /// Where the source runs.
    pub fn info(&self) -> &RuntimeInfo {
        &self.slot.info
    }
}

impl<S: Source + ?Sized> std::fmt::Debug for SourceHarness<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.slot.describe("SourceHarness", f)
    }
}
