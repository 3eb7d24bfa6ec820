//! One running subtask: a chain of operators on its own thread, fed by input channels (or a source), writing
//! to output channels, taking checkpoints at barriers.
//!
//! The record loop is the hot path: no blocking I/O but the data-plane hand-off, no per-record allocation
//! beyond the records themselves, no logging per record. Uploads run on the tokio runtime while processing
//! continues.

pub mod align;
mod base;
mod error;
mod event_time;
mod incremental;
mod output;
pub mod restore;
mod setup;
mod upload;

use self::base::{task_ref, Task};
pub use self::base::{TaskEnv, TaskEvent};
use error::in_operator;
pub(crate) use error::TaskError;
use output::{advance_watermark, chain_out, deliver, push_chain_from, Head};
pub(crate) use output::{fire_due, keyed_mut, op_context};
use output::{fire_processing_timers, until_processing_timer};
pub(crate) use setup::{init_context, open_state, plan_setup, KeyedSite, RestoreSource, RunIo};
pub(crate) use upload::{snapshot_part, upload_part, PartDirs, PartUpload};

use crate::api::operator::{Collector, ErrorClass, SourceOutput, SourceStatus};
use crate::net::{ChannelEvent, ChannelKey, Frame};
use crate::report::Cause;
use crate::task::align::{Alignment, BarrierOutcome};
use crate::time::{WatermarkEvent, WatermarkOutput, MAX_WATERMARK};
use arrow_array::RecordBatch;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use weir_common::checkpoint::{CheckpointOutcome, SavepointTarget};
use weir_common::deploy::descriptor::TaskDescriptor;
use weir_common::ids::CheckpointId;
use weir_proto as pb;

/// How often a task publishes its state engine's properties.
const STATE_METRICS_INTERVAL: Duration = Duration::from_secs(2);
/// Records a source emits per poll.
const SOURCE_BATCH: usize = 1024;

/// The task manager's handle on a running task.
pub struct TaskHandle {
    /// Attempt the task belongs to.
    pub attempt: u32,
    /// Sends events to the task.
    pub events: mpsc::Sender<TaskEvent>,
    /// Becomes `true` when the task's thread has ended.
    pub done: watch::Receiver<bool>,
    /// Set to `true` to cancel the task, also while it is still setting up (the event queue is read only
    /// once it runs).
    pub cancel: watch::Sender<bool>,
}

/// How a task's run ended without error.
enum Exit {
    Finished,
    Canceled,
}

/// The stack of a task thread. Operators recurse over expressions as deep as the parser allows
/// (`weir_sql::expr::MAX_EXPR_OPERATORS`), which a unit test of `weir_sql` plans and evaluates on an eighth
/// of this; a stack
/// overflow aborts the whole task manager, so this is set, not left to the platform's default (2 MiB for a
/// Rust thread). Only the pages a task touches are ever committed.
pub const TASK_STACK_BYTES: usize = 8 << 20;

/// A task whose thread could not be started.
#[derive(Debug, thiserror::Error)]
#[error("cannot start task thread: {0}")]
pub struct SpawnError(#[from] std::io::Error);

/// Starts a task on its own thread.
pub fn spawn(desc: TaskDescriptor, env: Arc<TaskEnv>) -> Result<TaskHandle, SpawnError> {
    let (tx, rx) = mpsc::channel(256);
    let (done_tx, done_rx) = watch::channel(false);
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let attempt = desc.attempt.0;
    let name = format!("task-{}-{}", desc.vertex.0, desc.subtask.0);
    let events = tx.clone();
    std::thread::Builder::new().name(name).stack_size(TASK_STACK_BYTES).spawn(move || {
        run(desc, env, rx, events, cancel_rx);
        let _ = done_tx.send(true);
    })?;
    Ok(TaskHandle { attempt, events: tx, done: done_rx, cancel: cancel_tx })
}

/// What a task that ended reports: its state, its error, and whether a peer's failure caused it (its data
/// connection broke or timed out). An error while canceled is the cancel's doing (an interrupted send, say):
/// the task was canceled.
fn ending(result: &Result<Exit, TaskError>, canceled: bool) -> (pb::TaskState, String, Cause) {
    let none = Cause::default();
    match result {
        Ok(Exit::Finished) => (pb::TaskState::Finished, String::new(), none),
        Ok(Exit::Canceled) | Err(TaskError::Canceled) => (pb::TaskState::Canceled, String::new(), none),
        Err(e) if canceled => (pb::TaskState::Canceled, e.to_string(), none),
        Err(e) => {
            let cause = Cause {
                by_peer: matches!(e, TaskError::Net(n) if n.is_peer_failure()),
                fatal: e.class() == ErrorClass::Fatal,
            };
            (pb::TaskState::Failed, e.to_string(), cause)
        }
    }
}

fn run(
    desc: TaskDescriptor,
    env: Arc<TaskEnv>,
    rx: mpsc::Receiver<TaskEvent>,
    events: mpsc::Sender<TaskEvent>,
    cancel: watch::Receiver<bool>,
) {
    let tref = task_ref(&desc);
    let key = ChannelKey {
        job_id: desc.job_id.0.clone(),
        attempt: desc.attempt.0,
        vertex: desc.vertex.0,
        subtask: desc.subtask.0,
    };
    let work_dir = env
        .data_dir
        .join("tasks")
        .join(format!("{}-a{}-v{}-s{}", desc.job_id, desc.attempt.0, desc.vertex.0, desc.subtask.0));
    // An error while canceled is the cancel's doing (an interrupted send, say): the task was canceled.
    let cancel_seen = cancel.clone();
    let span = tracing::info_span!("task", job_id = %desc.job_id, attempt = desc.attempt.0, vertex = desc.vertex.0, subtask = desc.subtask.0);
    let _guard = span.enter();
    let report_state = |state: pb::TaskState, error: String| env.reporter.state(&tref, state, error);
    // How the task ended is reported while it still holds its channels: neighbours whose connections break when
    // it lets go fail too, and the job manager should hear this task's own error first.
    let report_end = |result: &Result<Exit, TaskError>| {
        let (state, error, cause) = ending(result, *cancel_seen.borrow());
        match state {
            pb::TaskState::Failed => {
                tracing::warn!(error = %error, caused_by_peer = cause.by_peer, fatal = cause.fatal, "task failed")
            }
            pb::TaskState::Finished => tracing::info!("task finished"),
            _ => tracing::info!(error = %error, "task canceled"),
        }
        env.reporter.state_caused(&tref, state, error, cause);
    };
    let mut reported = false;
    // A panic in an operator (user code included) fails the task like an error, so the job fails over.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Task::setup(desc, env.clone(), rx, events, work_dir.clone(), &key, cancel).and_then(|mut t| {
            report_state(pb::TaskState::Running, String::new());
            let result = t.run();
            report_end(&result);
            reported = true;
            result
        })
    }))
    .unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        Err(TaskError::Other(format!("task panicked: {msg}")))
    });
    env.data_server.unregister(&key);
    if !reported {
        report_end(&result);
    }
    let _ = std::fs::remove_dir_all(&work_dir);
}

impl Task {
    fn run(&mut self) -> Result<Exit, TaskError> {
        if matches!(self.ops.first().map(|o| &o.head), Some(Head::Source(_))) {
            self.run_source()
        } else {
            self.run_consumer()
        }
    }

    /// Waits for the next event, at most `timeout`.
    fn next_event(&mut self, timeout: Duration) -> Option<TaskEvent> {
        match self.rx.try_recv() {
            Ok(ev) => Some(ev),
            Err(mpsc::error::TryRecvError::Disconnected) => Some(TaskEvent::Cancel),
            Err(mpsc::error::TryRecvError::Empty) => {
                let rx = &mut self.rx;
                // The timer must be created inside the runtime's context, hence the async block.
                match self.env.runtime.block_on(async { tokio::time::timeout(timeout, rx.recv()).await }) {
                    Ok(Some(ev)) => Some(ev),
                    Ok(None) => Some(TaskEvent::Cancel),
                    Err(_) => None,
                }
            }
        }
    }

    fn run_source(&mut self) -> Result<Exit, TaskError> {
        let mut source_done = false;
        if self.restored_at_end {
            self.end_of_input(1)?;
            source_done = true;
        }
        let mut batch = SourceOutput::with_capacity(SOURCE_BATCH);
        loop {
            fire_processing_timers(&mut self.ops, &mut self.outputs)?;
            // Control events first, between batches.
            while let Ok(ev) = self.rx.try_recv() {
                if let Some(exit) = self.on_control(ev)? {
                    return Ok(exit);
                }
            }
            if self.end_input_requested && !source_done {
                tracing::info!("ending the input on request (stop with drain)");
                self.end_of_input(1)?;
                source_done = true;
            }
            if source_done || self.suspended_by.is_some() {
                let wait = self.wait_at_most(Duration::from_millis(500));
                if let Some(ev) = self.next_event(wait) {
                    if let Some(exit) = self.on_control(ev)? {
                        return Ok(exit);
                    }
                }
                continue;
            }
            let status = match &mut self.ops[0].head {
                Head::Source(s) => s.poll(&mut batch, SOURCE_BATCH)?,
                Head::Operator(_) => return Err(TaskError::Other("chain head is not a source".into())),
            };
            let (chunks, finished) = batch.take();
            for chunk in &chunks {
                event_time::check_event_times(&chunk.batch)
                    .map_err(|source| TaskError::EventTime { uid: self.ops[0].info.uid.clone(), source })?;
            }
            if let (Some(time), Head::Source(s)) = (&mut self.source_time, &self.ops[0].head) {
                time.grow_to(s.splits() as usize);
                time.observe(&chunks, finished)?;
            } else {
                drop(finished);
            }
            if !chunks.is_empty() {
                let pushing = self.source_time.is_some().then(Instant::now);
                for chunk in chunks {
                    self.push_from_source(chunk.batch)?;
                }
                if let (Some(time), Some(pushing)) = (&mut self.source_time, pushing) {
                    time.blocked_for(pushing.elapsed());
                }
            }
            if let Some(time) = &mut self.source_time {
                let out = time.emit_if_due();
                self.emit_watermarks(out)?;
            }
            match status {
                SourceStatus::More => self.maybe_flush()?,
                SourceStatus::Idle(d) => {
                    self.flush_outputs()?;
                    // Wake for the next periodic watermark too: a quiet source still reports its idleness.
                    let d = self.source_time.as_ref().map_or(d, |t| d.min(t.until_emit()));
                    let d = self.wait_at_most(d);
                    if let Some(ev) = self.next_event(d) {
                        if let Some(exit) = self.on_control(ev)? {
                            return Ok(exit);
                        }
                    }
                }
                SourceStatus::Finished => {
                    self.end_of_input(1)?;
                    source_done = true;
                }
            }
        }
    }

    fn run_consumer(&mut self) -> Result<Exit, TaskError> {
        loop {
            fire_processing_timers(&mut self.ops, &mut self.outputs)?;
            // Frames held back for an alignment that completed or was aborted go first, in order.
            if let Some((c, frame)) = self.deferred.next_released(&self.aligner) {
                self.on_frame(c, frame)?;
                self.maybe_flush()?;
                continue;
            }
            let ev = match self.rx.try_recv() {
                Ok(ev) => ev,
                Err(mpsc::error::TryRecvError::Disconnected) => return Ok(Exit::Canceled),
                Err(mpsc::error::TryRecvError::Empty) => {
                    // Idle: send partly filled batches before blocking.
                    self.flush_outputs()?;
                    let wait = self.wait_at_most(Duration::from_millis(500));
                    match self.next_event(wait) {
                        Some(ev) => ev,
                        None => continue,
                    }
                }
            };
            match ev {
                TaskEvent::Channel(ChannelEvent::Frame(c, frame)) => {
                    if self.deferred.must_hold(&self.aligner, c) {
                        self.deferred.hold(c, frame);
                    } else {
                        self.on_frame(c, frame)?;
                        self.maybe_flush()?;
                    }
                }
                TaskEvent::Channel(ChannelEvent::Closed(c, err)) => {
                    if let Some(err) = err {
                        return Err(TaskError::Other(format!("input channel {c}: {err}")));
                    }
                }
                other => {
                    if let Some(exit) = self.on_control(other)? {
                        return Ok(exit);
                    }
                }
            }
        }
    }

    /// `d`, or less if a processing-time timer is due sooner.
    fn wait_at_most(&mut self, d: Duration) -> Duration {
        until_processing_timer(&mut self.ops).map_or(d, |t| t.min(d))
    }

    fn release(&self, c: usize) {
        if let Some(inputs) = &self.inputs {
            inputs.release(c);
        }
    }

    fn on_frame(&mut self, c: usize, frame: Frame) -> Result<(), TaskError> {
        match frame {
            Frame::Batch { count, body } => {
                let decoder = self.decoders.get_mut(c).ok_or_else(|| TaskError::Other(format!("no channel {c}")))?;
                let decoded = decoder.decode(body).map_err(|e| TaskError::Other(format!("input channel {c}: {e}")))?;
                self.release(c);
                let Some(batch) = decoded else { return Ok(()) };
                if batch.num_rows() != count as usize {
                    return Err(TaskError::Other(format!(
                        "input channel {c}: a batch frame claimed {count} rows but held {}",
                        batch.num_rows()
                    )));
                }
                self.records_in.increment(count as u64);
                if self.restored_at_end {
                    return Err(TaskError::Other("records arrived after end of input".into()));
                }
                self.push_input(c, batch)?;
            }
            Frame::Barrier { id, timestamp_ms, savepoint } => {
                self.release(c);
                if let Some(t) = savepoint {
                    self.savepoint_barriers.insert(id, *t);
                }
                let BarrierOutcome { aborted, alignment } = self.aligner.on_barrier(c, id);
                if let Some(old) = aborted {
                    self.decline_superseded(old, id, c);
                }
                self.on_alignment(alignment, timestamp_ms)?;
            }
            Frame::Watermark(w) => {
                self.release(c);
                let out = self.valve.on_watermark(c, w);
                self.emit_watermarks(out)?;
            }
            Frame::WatermarkStatus(status) => {
                self.release(c);
                let out = self.valve.on_status(c, status);
                self.emit_watermarks(out)?;
            }
            Frame::EndOfInput => {
                self.release(c);
                // An ended channel holds nothing back (its producer sent the maximum watermark before, unless it
                // was restored after its end).
                let out = self.valve.on_watermark(c, MAX_WATERMARK);
                self.emit_watermarks(out)?;
                let a = self.aligner.on_end_of_input(c);
                self.on_alignment(a, crate::now_ms())?;
                if self.aligner.all_ended() && !self.input_ended {
                    self.end_of_input(0)?;
                }
            }
            Frame::Credit(_) => return Err(TaskError::Other("unexpected credit frame on an input channel".into())),
        }
        Ok(())
    }

    /// Snapshots once a checkpoint aligned; the channels it blocked are then released (their held frames
    /// go first, see [`Task::run_consumer`]).
    fn on_alignment(&mut self, a: Alignment, timestamp_ms: u64) -> Result<(), TaskError> {
        if let Alignment::Aligned(id) = a {
            let savepoint = self.savepoint_barriers.remove(&id);
            self.savepoint_barriers.retain(|&k, _| k > id);
            self.checkpoint(id, timestamp_ms, savepoint)?;
        }
        Ok(())
    }

    /// Barrier `newer` on channel `c` superseded checkpoint `old` while it was aligning: this task cannot
    /// take `old` any more (a producer skipped it), so it declines it, as Flink does, and the job goes on.
    fn decline_superseded(&self, old: CheckpointId, newer: CheckpointId, c: usize) {
        tracing::info!(checkpoint_id = %old, %newer, channel = c, "checkpoint superseded during alignment, declining it");
        let reason = format!(
            "checkpoint {old} superseded by checkpoint {newer} at vertex {} subtask {}: barrier {newer} arrived \
             on input channel {c} before alignment of {old} completed",
            self.desc.vertex.0, self.desc.subtask.0
        );
        self.env.reporter.decline(&task_ref(&self.desc), old, reason);
    }

    /// Handles a non-data event; returns how the task ends, if it does.
    fn on_control(&mut self, ev: TaskEvent) -> Result<Option<Exit>, TaskError> {
        match ev {
            TaskEvent::Trigger { id, timestamp_ms, savepoint } => {
                if matches!(self.ops.first().map(|o| &o.head), Some(Head::Source(_))) {
                    let stop = savepoint.as_ref().is_some_and(|t| t.stop);
                    self.checkpoint(id, timestamp_ms, savepoint)?;
                    if stop {
                        // Stop with savepoint: nothing after its barrier, so nothing the savepoint misses.
                        self.flush_outputs()?;
                        self.suspended_by = Some(id);
                        tracing::info!(checkpoint_id = %id, "source stopped at the savepoint's barrier");
                    }
                }
            }
            TaskEvent::EndInput => {
                if matches!(self.ops.first().map(|o| &o.head), Some(Head::Source(_))) {
                    self.end_input_requested = true;
                }
            }
            TaskEvent::Notify { id, outcome } => {
                let completed = matches!(
                    outcome,
                    CheckpointOutcome::Completed | CheckpointOutcome::Final | CheckpointOutcome::Stop
                );
                for op in &mut self.ops {
                    match (&mut op.head, completed) {
                        (Head::Source(s), true) => s.notify_checkpoint_complete(id)?,
                        (Head::Source(s), false) => s.notify_checkpoint_aborted(id)?,
                        (Head::Operator(o), true) => o.notify_checkpoint_complete(id)?,
                        (Head::Operator(o), false) => o.notify_checkpoint_aborted(id)?,
                    }
                }
                if completed {
                    self.incremental.lock().completed(id);
                }
                if outcome == CheckpointOutcome::Final && self.input_ended {
                    self.flush_outputs()?;
                    return Ok(Some(Exit::Finished));
                }
                if outcome == CheckpointOutcome::Stop {
                    tracing::info!(checkpoint_id = %id, "stop-with-savepoint completed; finishing");
                    self.flush_outputs()?;
                    return Ok(Some(Exit::Finished));
                }
                if !completed && self.suspended_by == Some(id) {
                    tracing::info!(checkpoint_id = %id, "the stop-with-savepoint was aborted; the source resumes");
                    self.suspended_by = None;
                }
            }
            TaskEvent::Cancel => return Ok(Some(Exit::Canceled)),
            TaskEvent::Channel(ChannelEvent::Closed(c, Some(err))) => {
                return Err(TaskError::Other(format!("input channel {c}: {err}")))
            }
            TaskEvent::Channel(_) => {}
        }
        Ok(None)
    }

    /// Sends what a source's generators or the input valve produced through the chain and downstream, in order:
    /// a new watermark reaches every operator (`on_watermark`) and then the outputs; a status change goes to
    /// the outputs.
    fn emit_watermarks(&mut self, out: WatermarkOutput) -> Result<(), TaskError> {
        for ev in out.in_order() {
            match ev {
                WatermarkEvent::Watermark(w) => self.advance_watermark(w)?,
                WatermarkEvent::Status(status) => {
                    for edge in &mut self.outputs {
                        edge.broadcast(&Frame::WatermarkStatus(status))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Advances the whole chain to watermark `w` (operators that are already there are skipped).
    fn advance_watermark(&mut self, w: i64) -> Result<(), TaskError> {
        advance_watermark(&mut self.ops, &mut self.outputs, w, !self.restored_at_end)?;
        self.watermark_gauge.set(w as f64);
        self.env.reporter.watermark(&task_ref(&self.desc), w);
        Ok(())
    }

    /// Hands a batch the source (the chain's head) emitted to what it feeds.
    fn push_from_source(&mut self, batch: RecordBatch) -> Result<(), TaskError> {
        let (head, rest) = self.ops.split_at_mut(1);
        deliver(&head[0].feeds, &head[0].edges, rest, 1, &mut self.outputs, batch)
    }

    /// Runs a batch that arrived on input channel `c` through the whole chain: the head's first input, or its
    /// second for the channels of a second input.
    fn push_input(&mut self, c: usize, batch: RecordBatch) -> Result<(), TaskError> {
        let input = usize::from(c >= self.second_input_from);
        push_chain_from(&mut self.ops, &mut self.outputs, input, batch)
    }

    fn maybe_flush(&mut self) -> Result<(), TaskError> {
        if self.last_flush.elapsed() >= self.linger {
            self.flush_outputs()?;
        }
        Ok(())
    }

    fn flush_outputs(&mut self) -> Result<(), TaskError> {
        for edge in &mut self.outputs {
            edge.flush_all()?;
        }
        self.last_flush = Instant::now();
        if self.last_state_metrics.elapsed() >= STATE_METRICS_INTERVAL {
            self.publish_state_metrics();
        }
        Ok(())
    }

    /// Publishes the state engine's properties (RocksDB's `rocksdb.*`) as gauges, labelled by operator and
    /// state. Runs on the task thread, which owns the backends, every few seconds.
    fn publish_state_metrics(&mut self) {
        self.last_state_metrics = Instant::now();
        if let Some(lag) =
            self.ops.last().and_then(|o| weir_common::job::watermarks::lag_ms(crate::now_ms() as i64, o.watermark))
        {
            self.watermark_lag_gauge.set(lag as f64);
        }
        for op in &self.ops {
            let Some(k) = &op.keyed else { continue };
            for (state, property, value) in k.properties() {
                let labels = [
                    ("job_id", self.desc.job_id.0.clone()),
                    ("operator", op.info.uid.clone()),
                    ("subtask", self.desc.subtask.0.to_string()),
                    ("state", state),
                    ("property", property.to_string()),
                ];
                metrics::gauge!("weir_rocksdb_property", &labels).set(value as f64);
            }
        }
    }

    /// All input consumed: runs end-of-input hooks from operator `start` (unless they already ran before the
    /// snapshot we restored from), forwards end of input and reports it.
    fn end_of_input(&mut self, start: usize) -> Result<(), TaskError> {
        // Event time ends before the input does (Flink emits the maximum watermark at the end of a source):
        // everything waiting for the watermark fires, then the end-of-input hooks run.
        if self.ops.last().is_some_and(|o| o.watermark < MAX_WATERMARK) {
            self.advance_watermark(MAX_WATERMARK)?;
        }
        if !self.restored_at_end {
            for i in start..self.ops.len() {
                let (left, rest) = self.ops.split_at_mut(i + 1);
                let op = &mut left[i];
                let outputs = &mut self.outputs;
                if let Head::Operator(o) = &mut op.head {
                    let mut ctx = op_context(&op.info, &mut op.keyed, &mut op.timers, op.watermark);
                    let mut downstream = chain_out(&op.info.uid, &op.feeds, &op.edges, rest, i + 1, outputs);
                    let mut out = Collector::routed(&mut downstream);
                    o.end_of_input(&mut ctx, &mut out).map_err(|e| in_operator(&op.info.uid, e))?;
                    out.flush()?;
                }
            }
        }
        for edge in &mut self.outputs {
            edge.broadcast(&Frame::EndOfInput)?;
        }
        self.input_ended = true;
        tracing::info!("end of input");
        self.env.reporter.state(&task_ref(&self.desc), pb::TaskState::EndOfInput, String::new());
        Ok(())
    }

    /// Takes checkpoint `id`: the synchronous part here, the upload on the runtime; then forwards the barrier.
    fn checkpoint(
        &mut self,
        id: CheckpointId,
        timestamp_ms: u64,
        savepoint: Option<SavepointTarget>,
    ) -> Result<(), TaskError> {
        let started = Instant::now();
        match self.snapshot_sync(id, timestamp_ms) {
            Ok(parts) => {
                self.sync_seconds.record(started.elapsed().as_secs_f64());
                let sync_ms = started.elapsed().as_millis() as u64;
                self.spawn_upload(id, parts, sync_ms, savepoint.clone());
            }
            Err(e) => {
                tracing::warn!(checkpoint_id = %id, error = %e, "snapshot failed");
                let reason = format!("snapshot of vertex {} subtask {}: {e}", self.desc.vertex.0, self.desc.subtask.0);
                self.env.reporter.decline(&task_ref(&self.desc), id, reason);
            }
        }
        let barrier = Frame::Barrier { id, timestamp_ms, savepoint: savepoint.map(Box::new) };
        for edge in &mut self.outputs {
            edge.broadcast(&barrier)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::DataServer;
    use crate::report::Reporter;
    use weir_common::deploy::descriptor::{InputDescriptor, OperatorDescriptor};
    use weir_common::ids::SubtaskIndex;
    use weir_common::ids::{AttemptNumber, JobId, VertexId};
    use weir_common::job::spec::Partitioning;
    use weir_common::job::spec::StateBackend;
    use weir_common::service::store::StoreOptions;
    use weir_common::state::keygroup::KeyGroupRange;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_waiting_for_its_inputs_stops_when_canceled() {
        let tmp = tempfile::tempdir().unwrap();
        let jm = weir_common::service::cluster::JmLink::new(
            vec!["http://127.0.0.1:9".into()],
            Default::default(),
            Duration::from_secs(1),
        )
        .unwrap();
        let env = Arc::new(TaskEnv {
            runtime: tokio::runtime::Handle::current(),
            data_server: Arc::new(DataServer::default()),
            registry: Arc::new(crate::builtins::registry()),
            data_dir: tmp.path().to_path_buf(),
            reporter: Reporter::start(jm, "tm".into()),
            store_options: StoreOptions::default(),
            connect_timeout: Duration::from_secs(600),
            rocks: Default::default(),
        });
        let desc = TaskDescriptor {
            job_id: JobId("j".into()),
            job_name: "j".into(),
            attempt: AttemptNumber(1),
            vertex: VertexId(1),
            subtask: SubtaskIndex(0),
            parallelism: 1,
            max_parallelism: 128,
            key_group_range: KeyGroupRange { start: 0, end: 127 },
            operators: vec![OperatorDescriptor {
                uid: "bh".into(),
                kind: "blackhole".into(),
                config: Default::default(),
                watermarks: None,
                chained_to: None,
            }],
            state_backend: StateBackend::Heap,
            checkpoint_root: format!("file://{}/ckpt", tmp.path().display()),
            incremental: false,
            operator_state_inline_limit: 64 << 10,
            // A producer that never connects: setup waits for it.
            input: Some(InputDescriptor {
                from_vertex: VertexId(0),
                from_parallelism: 1,
                partitioning: Partitioning::Forward,
                channels: vec![SubtaskIndex(0)],
            }),
            second_input: None,
            outputs: vec![],
            linger_ms: 5,
            restore: None,
        };
        let mut handle = spawn(desc, env).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!*handle.done.borrow(), "the task is still waiting for its input");
        handle.cancel.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), handle.done.wait_for(|d| *d))
            .await
            .expect("a canceled task ends within seconds, not after the 600 s connect timeout")
            .unwrap();
    }
}

#[cfg(test)]
mod error_tests {
    use super::*;

    use crate::api::operator::OperatorError;

    #[test]
    fn operator_errors_name_the_operator_once() {
        let state = weir_state::StateError::Declaration {
            name: "count".into(),
            message: "a value of 300 MiB is over the limit of 256 MiB; keep large collections in MapState".into(),
        };
        let e = in_operator("counts", OperatorError::State(state));
        assert_eq!(
            e.to_string(),
            "operator \"counts\": state \"count\": a value of 300 MiB is over the limit of 256 MiB; keep large collections in MapState"
        );
        // An error from further down the chain (it reaches the head through its collector) keeps the name of
        // the operator that raised it.
        let TaskError::Operator(downstream) = e else { panic!("an operator error") };
        let nested = in_operator("head", downstream);
        assert!(nested.to_string().starts_with("operator \"counts\": "), "{nested}");
    }

    #[test]
    fn a_task_reports_whether_its_failure_is_fatal() {
        let failed = |e: OperatorError| ending(&Err(in_operator("op", e)), false);
        let (state, error, cause) = failed(OperatorError::UnreadableState("a stored row is corrupt".into()));
        assert_eq!((state, cause), (pb::TaskState::Failed, Cause { by_peer: false, fatal: true }), "{error}");
        assert!(failed(OperatorError::Misuse("no keyed state".into())).2.fatal);
        assert!(!failed(OperatorError::External("broker down".into())).2.fatal);
        assert!(!failed(OperatorError::Records("no column x".into())).2.fatal);
        let (state, _, cause) = ending(&Err(TaskError::Other("lost".into())), false);
        assert_eq!((state, cause.fatal), (pb::TaskState::Failed, false));
        // A fatal error while canceled is the cancel's: nothing to fail.
        let (state, _, cause) = ending(&Err(in_operator("op", OperatorError::Fatal("x".into()))), true);
        assert_eq!((state, cause.fatal), (pb::TaskState::Canceled, false));
    }
}

/// The task's side of the data plane: alignment aborts and cancel while back-pressured, against a job manager
/// that records what it is told.
#[cfg(test)]
mod data_plane_tests {
    use super::*;
    use crate::net::{begin_frame, encode_frame, finish_frame};
    use crate::net::{DataServer, Handshake};
    use crate::report::Reporter;
    use tokio::io::AsyncWriteExt;
    use weir_common::deploy::descriptor::{InputDescriptor, OperatorDescriptor, OutputDescriptor};
    use weir_common::ids::SubtaskIndex;
    use weir_common::ids::{AttemptNumber, JobId, VertexId};
    use weir_common::job::spec::Partitioning;
    use weir_common::job::spec::StateBackend;
    use weir_common::service::store::StoreOptions;
    use weir_common::state::keygroup::KeyGroupRange;
    use weir_proto::job_manager_internal_server::{JobManagerInternal, JobManagerInternalServer};

    /// A job manager that only records the reports it gets, one line each.
    #[derive(Clone, Default)]
    struct RecordingJm(Arc<parking_lot::Mutex<Vec<String>>>);

    type Reply<T> = Result<tonic::Response<T>, tonic::Status>;

    #[tonic::async_trait]
    impl JobManagerInternal for RecordingJm {
        async fn register_task_manager(
            &self,
            _: tonic::Request<pb::RegisterTaskManagerRequest>,
        ) -> Reply<pb::RegisterTaskManagerResponse> {
            Err(tonic::Status::unimplemented("not in this test"))
        }
        async fn heartbeat(&self, _: tonic::Request<pb::HeartbeatRequest>) -> Reply<pb::HeartbeatResponse> {
            Err(tonic::Status::unimplemented("not in this test"))
        }
        async fn update_task_state(
            &self,
            r: tonic::Request<pb::UpdateTaskStateRequest>,
        ) -> Reply<pb::UpdateTaskStateResponse> {
            let r = r.into_inner();
            let state = pb::TaskState::try_from(r.state).map(|s| s.as_str_name()).unwrap_or("?");
            let state = state.trim_start_matches("TASK_STATE_");
            self.0.lock().push(format!("state {state} {}", r.error));
            Ok(tonic::Response::new(pb::UpdateTaskStateResponse {}))
        }
        async fn acknowledge_checkpoint(
            &self,
            r: tonic::Request<pb::AcknowledgeCheckpointRequest>,
        ) -> Reply<pb::AcknowledgeCheckpointResponse> {
            self.0.lock().push(format!("ack {}", r.into_inner().checkpoint_id));
            Ok(tonic::Response::new(pb::AcknowledgeCheckpointResponse {}))
        }
        async fn decline_checkpoint(
            &self,
            r: tonic::Request<pb::DeclineCheckpointRequest>,
        ) -> Reply<pb::DeclineCheckpointResponse> {
            let r = r.into_inner();
            self.0.lock().push(format!("decline {} {}", r.checkpoint_id, r.reason));
            Ok(tonic::Response::new(pb::DeclineCheckpointResponse {}))
        }
    }

    impl RecordingJm {
        fn reports(&self) -> Vec<String> {
            self.0.lock().clone()
        }

        /// Waits (bounded) until a report starting with `prefix` arrived; returns it.
        async fn wait_for(&self, prefix: &str) -> String {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(r) = self.reports().into_iter().find(|r| r.starts_with(prefix)) {
                    return r;
                }
                assert!(tokio::time::Instant::now() < deadline, "no report {prefix:?} in {:?}", self.reports());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    struct Harness {
        jm: RecordingJm,
        env: Arc<TaskEnv>,
        data_addr: String,
        _tmp: tempfile::TempDir,
    }

    async fn harness() -> Harness {
        let jm = RecordingJm::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let jm_addr = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(JobManagerInternalServer::new(jm.clone()))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let data_server = Arc::new(DataServer::default());
        let data_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let data_addr = data_listener.local_addr().unwrap().to_string();
        tokio::spawn(data_server.clone().run(data_listener));
        let tmp = tempfile::tempdir().unwrap();
        let channel =
            weir_common::service::cluster::JmLink::new(vec![jm_addr], Default::default(), Duration::from_secs(30))
                .unwrap();
        let env = Arc::new(TaskEnv {
            runtime: tokio::runtime::Handle::current(),
            data_server,
            registry: Arc::new(crate::builtins::registry()),
            data_dir: tmp.path().to_path_buf(),
            reporter: Reporter::start(channel, "tm".into()),
            store_options: StoreOptions::default(),
            connect_timeout: Duration::from_secs(10),
            rocks: Default::default(),
        });
        Harness { jm, env, data_addr, _tmp: tmp }
    }

    fn descriptor(h: &Harness, vertex: u32, op: OperatorDescriptor) -> TaskDescriptor {
        TaskDescriptor {
            job_id: JobId("j".into()),
            job_name: "j".into(),
            attempt: AttemptNumber(1),
            vertex: VertexId(vertex),
            subtask: SubtaskIndex(0),
            parallelism: 1,
            max_parallelism: 128,
            key_group_range: KeyGroupRange { start: 0, end: 127 },
            operators: vec![op],
            state_backend: StateBackend::Heap,
            checkpoint_root: format!("file://{}/ckpt", h._tmp.path().display()),
            incremental: false,
            operator_state_inline_limit: 64 << 10,
            input: None,
            second_input: None,
            outputs: vec![],
            linger_ms: 5,
            restore: None,
        }
    }

    async fn wait_done(handle: &mut TaskHandle, within: Duration) -> bool {
        tokio::time::timeout(within, handle.done.wait_for(|d| *d)).await.is_ok()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_newer_barrier_during_alignment_declines_the_older_checkpoint_and_aligns_the_newer_one() {
        let h = harness().await;
        let mut desc = descriptor(
            &h,
            1,
            OperatorDescriptor {
                uid: "bh".into(),
                kind: "blackhole".into(),
                config: Default::default(),
                watermarks: None,
                chained_to: None,
            },
        );
        desc.input = Some(InputDescriptor {
            from_vertex: VertexId(0),
            from_parallelism: 2,
            partitioning: Partitioning::Rebalance,
            channels: vec![SubtaskIndex(0), SubtaskIndex(1)],
        });
        let mut handle = spawn(desc, h.env.clone()).unwrap();
        // Raw producers, so that the test sees the credit the task returns for each frame it processed.
        let mut producers = Vec::new();
        for from_subtask in 0..2 {
            let hs = Handshake {
                to: ChannelKey { job_id: "j".into(), attempt: 1, vertex: 1, subtask: 0 },
                from_vertex: 0,
                from_subtask,
                to_input: 0,
            };
            let mut frame = Vec::new();
            begin_frame(&mut frame, 0);
            prost::Message::encode(&weir_proto::DataHandshake::from(&hs), &mut frame).unwrap();
            finish_frame(&mut frame);
            let mut s = tokio::net::TcpStream::connect(&h.data_addr).await.unwrap();
            s.write_all(&frame).await.unwrap();
            producers.push(s);
        }
        for p in &mut producers {
            assert_eq!(next_credit(p).await, crate::net::INITIAL_CREDIT);
        }
        h.jm.wait_for("state RUNNING").await;
        let rows = crate::api::batch::batch_of(&[crate::api::record::Record::new_i64(b"k", 1)]).unwrap();
        let (mut encoder, schema) = crate::net::BatchEncoder::new(&rows.schema()).unwrap();
        let mut batch = schema;
        batch.extend(encoder.encode_frames(&rows).unwrap().concat());
        let barrier = |id| encode_frame(&Frame::Barrier { id: CheckpointId(id), timestamp_ms: 1, savepoint: None });
        // Channel 0 delivers 5 (processed: its credit comes back), then more that waits behind the block.
        producers[0].write_all(&barrier(5)).await.unwrap();
        assert_eq!(next_credit(&mut producers[0]).await, 1);
        producers[0].write_all(&batch).await.unwrap();
        producers[0].write_all(&barrier(6)).await.unwrap();
        // Channel 1 skipped 5 (its producer never took it): its 6 supersedes 5.
        producers[1].write_all(&batch).await.unwrap();
        producers[1].write_all(&barrier(6)).await.unwrap();
        let decline = h.jm.wait_for("decline 5").await;
        assert!(decline.contains("superseded") && decline.contains("barrier 6"), "{decline}");
        h.jm.wait_for("ack 6").await;
        assert!(!h.jm.reports().iter().any(|r| r.starts_with("state FAILED")), "{:?}", h.jm.reports());
        assert!(!*handle.done.borrow(), "the task goes on");
        handle.cancel.send(true).unwrap();
        let _ = handle.events.send(TaskEvent::Cancel).await;
        assert!(wait_done(&mut handle, Duration::from_secs(5)).await);
    }

    /// The next non-zero credit the consumer returns on `s` (zeros are heartbeats).
    async fn next_credit(s: &mut tokio::net::TcpStream) -> u32 {
        loop {
            let f = tokio::time::timeout(Duration::from_secs(10), crate::net::read_frame(s, "test")).await;
            match f.expect("a credit within seconds").unwrap() {
                Some(Frame::Credit(0)) => continue,
                Some(Frame::Credit(n)) => return n,
                other => panic!("expected a credit, got {other:?}"),
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_blocked_on_backpressure_ends_when_canceled() {
        let h = harness().await;
        // A consumer that accepts the connection and never grants credit.
        let consumer = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let consumer_addr = consumer.local_addr().unwrap().to_string();
        let (conn_tx, conn_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (s, _) = consumer.accept().await.unwrap();
            let _ = conn_tx.send(s);
        });
        let mut desc = descriptor(
            &h,
            0,
            OperatorDescriptor {
                uid: "gen".into(),
                kind: "datagen".into(),
                config: [("keys".to_string(), serde_json::json!(10))].into_iter().collect(),
                watermarks: None,
                chained_to: None,
            },
        );
        desc.outputs = vec![OutputDescriptor {
            to_vertex: VertexId(1),
            partitioning: Partitioning::Forward,
            targets: vec![(SubtaskIndex(0), consumer_addr)],
            to_parallelism: 1,
            side: None,
            from: None,
            to_input: 0,
        }];
        let mut handle = spawn(desc, h.env.clone()).unwrap();
        let _conn = tokio::time::timeout(Duration::from_secs(5), conn_rx).await.unwrap().unwrap();
        h.jm.wait_for("state RUNNING").await;
        // An unbounded source with no credit fills its channel within milliseconds and blocks on it.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!*handle.done.borrow());
        // The cancel signal alone: the event queue is not read while the task thread is blocked.
        handle.cancel.send(true).unwrap();
        assert!(wait_done(&mut handle, Duration::from_secs(5)).await, "a task blocked on a send ends when canceled");
        h.jm.wait_for("state CANCELED").await;
        assert!(!h.jm.reports().iter().any(|r| r.starts_with("state FAILED")), "{:?}", h.jm.reports());
    }
}
