//! The operator API: what users implement to add their own kinds (and what the built-in kinds use).
//!
//! A [`Source`] emits records and keeps its position in operator state; an [`Operator`] processes Arrow record
//! batches (a sink is an operator that emits nothing). Lifecycle hooks follow Flink's
//! `CheckpointedFunction` and `CheckpointListener`:
//!
//! - `initialize_state` runs once before any record, with [`InitContext::is_restored`] telling whether
//!   state was restored from a checkpoint;
//! - `snapshot_state` runs at each checkpoint barrier, before the state is copied;
//! - `notify_checkpoint_complete` / `notify_checkpoint_aborted` are **best effort**: a notification may
//!   arrive late, more than once for the same id, or never (e.g. when a task manager dies right after the
//!   checkpoint completed). Logic that commits side effects must be idempotent and must also commit what
//!   its restored state says is pending (see the `file-sink`).

pub use crate::api::error::{ErrorClass, OperatorError};

use crate::api::batch::{event_times, RecordsBuilder, EVENT_TIME};
use crate::api::record::Record;
use crate::api::timers::{TimeDomain, TimerSlot, Timers};
use arrow_array::RecordBatch;
use weir_common::ids::{CheckpointId, SubtaskIndex};
use weir_common::state::keygroup::KeyGroupRange;
use weir_state::{KeyedStateBackend, OperatorStateStore};

/// Where an operator runs.
#[derive(Debug, Clone)]
pub struct RuntimeInfo {
    /// The operator's uid.
    pub uid: String,
    /// Job id.
    pub job_id: String,
    /// Attempt number of this deployment.
    pub attempt: u32,
    /// Subtask index.
    pub subtask: SubtaskIndex,
    /// Parallelism.
    pub parallelism: u32,
    /// Number of key groups.
    pub max_parallelism: u32,
    /// Key groups this subtask owns.
    pub key_group_range: KeyGroupRange,
}

impl RuntimeInfo {
    /// Subtask `subtask` of `p` of operator `src` in job `j` (unit tests of sources).
    #[cfg(test)]
    pub(crate) fn for_test(subtask: u32, p: u32) -> RuntimeInfo {
        RuntimeInfo {
            uid: "src".into(),
            job_id: "j".into(),
            attempt: 1,
            subtask: weir_common::ids::SubtaskIndex(subtask),
            parallelism: p,
            max_parallelism: 128,
            key_group_range: weir_common::state::keygroup::KeyGroupRange { start: 0, end: 127 },
        }
    }
}

/// Initializes `src` as subtask `info` over `store` (unit tests of sources).
#[cfg(test)]
pub(crate) fn init_source(
    src: &mut dyn Source,
    info: &RuntimeInfo,
    store: &mut OperatorStateStore,
    restored: bool,
) -> Result<(), OperatorError> {
    src.initialize_state(&mut InitContext { info, restored, operator_state: store, keyed: None })
}

/// Takes `src`'s snapshot (checkpoint 1) into `store` (unit tests of sources).
#[cfg(test)]
pub(crate) fn snapshot_source(src: &mut dyn Source, store: &mut OperatorStateStore) -> Result<(), OperatorError> {
    src.snapshot_state(&mut SnapshotContext {
        checkpoint_id: weir_common::ids::CheckpointId(1),
        timestamp_ms: 0,
        operator_state: store,
    })
}

/// Given to `initialize_state`.
pub struct InitContext<'a> {
    /// Where the operator runs.
    pub info: &'a RuntimeInfo,
    /// Whether this operator's state was restored from a checkpoint or savepoint: false for an operator whose uid
    /// it does not hold (new in the job), even when the rest of the job restores.
    pub restored: bool,
    /// The operator's (non-keyed) state.
    pub operator_state: &'a mut OperatorStateStore,
    /// The keyed state, for keyed kinds.
    pub keyed: Option<&'a mut dyn KeyedStateBackend>,
}

impl InitContext<'_> {
    /// Whether state was restored from a checkpoint (Flink's `isRestored()`).
    pub fn is_restored(&self) -> bool {
        self.restored
    }
}

/// Given to `process_batch`, `on_watermark`, `on_timer` and `end_of_input`.
pub struct ProcessContext<'a> {
    /// Where the operator runs.
    pub info: &'a RuntimeInfo,
    /// The keyed state, for keyed kinds.
    pub keyed: Option<&'a mut dyn KeyedStateBackend>,
    timers: Option<&'a mut TimerSlot>,
    watermark: i64,
}

impl<'a> ProcessContext<'a> {
    /// A context before any watermark.
    pub fn new(info: &'a RuntimeInfo, keyed: Option<&'a mut dyn KeyedStateBackend>) -> Self {
        ProcessContext { info, keyed, timers: None, watermark: crate::time::MIN_WATERMARK }
    }

    /// The same context with the operator's timer service (keyed operators).
    pub fn with_timers(mut self, timers: &'a mut TimerSlot) -> Self {
        self.timers = Some(timers);
        self
    }

    /// The same context at watermark `watermark`.
    pub fn at_watermark(mut self, watermark: i64) -> Self {
        self.watermark = watermark;
        self
    }

    /// The operator's current event-time watermark (ms): every record with a timestamp at or below it is late.
    /// `i64::MIN` until the first watermark arrives, `i64::MAX` once the input has ended.
    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }

    /// The timers of the current key and namespace (keyed operators): set them here, handle them in
    /// [`Operator::on_timer`].
    pub fn timers(&mut self) -> Result<Timers<'_>, OperatorError> {
        let uid = &self.info.uid;
        let (Some(backend), Some(slot)) = (self.keyed.as_mut(), self.timers.as_mut()) else {
            return Err(OperatorError::Misuse(format!("operator {uid:?} is not keyed: it has no timers")));
        };
        let service = slot.open(&mut **backend, self.info.key_group_range)?;
        Ok(Timers { backend: &mut **backend, service, watermark: self.watermark })
    }

    /// The current key's serialized bytes (keyed operators; in `on_timer`, the timer's key).
    pub fn current_key(&self) -> Option<&[u8]> {
        self.keyed.as_ref().map(|k| k.current_key_and_namespace().0)
    }

    /// The next of the operator's timers of `domain` due at `time` (ms), taken out of the timer service with its
    /// key and namespace made current; `None` when none is due, or the operator has no timers.
    pub(crate) fn pop_due_timer(&mut self, domain: TimeDomain, time: i64) -> Result<Option<i64>, OperatorError> {
        match (self.keyed.as_mut(), self.timers.as_mut().and_then(|slot| slot.get())) {
            (Some(backend), Some(service)) => Ok(service.pop_due(&mut **backend, domain, time)?),
            _ => Ok(None),
        }
    }

    /// The keyed backend, or an error for a kind that did not declare itself keyed.
    pub fn keyed(&mut self) -> Result<&mut dyn KeyedStateBackend, OperatorError> {
        match self.keyed.as_mut() {
            Some(k) => Ok(&mut **k),
            None => Err(OperatorError::Misuse(format!("operator {:?} is not keyed", self.info.uid))),
        }
    }
}

/// Given to `snapshot_state`.
pub struct SnapshotContext<'a> {
    /// Checkpoint id.
    pub checkpoint_id: CheckpointId,
    /// Trigger timestamp (ms since the epoch).
    pub timestamp_ms: u64,
    /// The operator's (non-keyed) state, to be written now.
    pub operator_state: &'a mut OperatorStateStore,
}

/// Rows an operator's emitted records are gathered into before they go downstream as one batch.
pub const COLLECTOR_CHUNK: usize = 1024;

/// Where an operator puts its output: whole batches ([`Collector::emit_batch`]), typed rows
/// ([`Collector::emit_rows`]) or key/value records one by one ([`Collector::emit`], gathered into batches of
/// [`COLLECTOR_CHUNK`] rows). Output is handed downstream as it is emitted, so an operator may emit any amount
/// (e.g. all its state at end of input) in bounded memory; it reaches downstream in the order emitted.
pub struct Collector<'a> {
    rows: Option<RecordsBuilder>,
    downstream: Downstream<'a>,
}

/// Takes a batch for the main output (`None`) or a side output (`Some(tag)`).
pub type Route<'a> = dyn FnMut(Option<&str>, RecordBatch) -> Result<(), OperatorError> + 'a;

/// Where a collector's batches go: the main output only, or the main output and side outputs by tag.
enum Downstream<'a> {
    Main(&'a mut dyn FnMut(RecordBatch) -> Result<(), OperatorError>),
    Routed(&'a mut Route<'a>),
}

impl Downstream<'_> {
    fn send(&mut self, batch: RecordBatch) -> Result<(), OperatorError> {
        match self {
            Downstream::Main(f) => f(batch),
            Downstream::Routed(f) => f(None, batch),
        }
    }
}

impl<'a> Collector<'a> {
    /// A collector that hands batches to `downstream` (side outputs go nowhere).
    pub fn new(downstream: &'a mut dyn FnMut(RecordBatch) -> Result<(), OperatorError>) -> Self {
        Collector { rows: None, downstream: Downstream::Main(downstream) }
    }

    /// A collector that hands batches to `route`: `None` for the main output, `Some(tag)` for side output `tag`.
    pub fn routed(route: &'a mut Route<'a>) -> Self {
        Collector { rows: None, downstream: Downstream::Routed(route) }
    }

    /// Emits a batch on side output `tag` (Flink's `ctx.output(tag, …)`), read by operators whose input is
    /// `<uid>.<tag>`; dropped when none reads it. It must have an [`EVENT_TIME`] column.
    pub fn emit_side(&mut self, tag: &str, batch: RecordBatch) -> Result<(), OperatorError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        match &mut self.downstream {
            Downstream::Main(_) => Ok(()),
            Downstream::Routed(f) => f(Some(tag), batch),
        }
    }

    fn rows(&mut self) -> &mut RecordsBuilder {
        self.rows.get_or_insert_with(|| RecordsBuilder::with_capacity(COLLECTOR_CHUNK))
    }

    /// Emits one key/value record.
    pub fn emit(&mut self, r: Record) -> Result<(), OperatorError> {
        let rows = self.rows();
        rows.push(&r)?;
        if rows.len() >= COLLECTOR_CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    /// Emits a key/value row with an integer value, without building a [`Record`].
    #[inline]
    pub fn emit_i64(&mut self, key: &[u8], value: i64, timestamp: Option<i64>) -> Result<(), OperatorError> {
        let rows = self.rows();
        rows.push_i64(key, value, timestamp)?;
        if rows.len() >= COLLECTOR_CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    /// Emits a whole batch (after the records emitted before it). It must have an [`EVENT_TIME`] column.
    pub fn emit_batch(&mut self, batch: RecordBatch) -> Result<(), OperatorError> {
        if event_times(&batch).is_none() {
            return Err(OperatorError::Records(format!(
                "an emitted batch has no {EVENT_TIME:?} column of Timestamp(ms) (schema {})",
                batch.schema()
            )));
        }
        self.flush()?;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.downstream.send(batch)
    }

    /// Hands the records emitted so far downstream.
    pub fn flush(&mut self) -> Result<(), OperatorError> {
        match self.rows.as_mut().and_then(RecordsBuilder::finish) {
            Some(batch) => self.downstream.send(batch),
            None => Ok(()),
        }
    }
}

/// A batch a source's poll produced, and which split each of its rows came from as runs of `(split, rows)`.
#[derive(Debug)]
pub struct SourceChunk {
    /// The rows.
    pub batch: RecordBatch,
    /// Consecutive rows of one split, in order, covering the batch.
    pub runs: Vec<(u32, u32)>,
}

/// What a source's `poll` fills: records or batches, and which of the source's splits each came from, so the
/// runtime generates watermarks per split (Flink's per-split watermarks).
pub struct SourceOutput {
    rows: RecordsBuilder,
    row_runs: Vec<(u32, u32)>,
    chunks: Vec<SourceChunk>,
    finished: Vec<u32>,
    len: usize,
}

impl Default for SourceOutput {
    fn default() -> Self {
        Self::with_capacity(COLLECTOR_CHUNK)
    }
}

impl SourceOutput {
    /// An empty output with room for `capacity` records.
    pub fn with_capacity(capacity: usize) -> Self {
        SourceOutput {
            rows: RecordsBuilder::with_capacity(capacity),
            row_runs: Vec::new(),
            chunks: Vec::new(),
            finished: Vec::new(),
            len: 0,
        }
    }

    fn count_row(&mut self, split: u32) {
        self.len += 1;
        match self.row_runs.last_mut() {
            Some((s, n)) if *s == split => *n += 1,
            _ => self.row_runs.push((split, 1)),
        }
    }

    /// Emits a key/value record read from split `split` (an index below the source's [`Source::splits`]).
    pub fn push(&mut self, split: u32, r: Record) -> Result<(), OperatorError> {
        self.rows.push(&r)?;
        self.count_row(split);
        Ok(())
    }

    /// Emits a whole batch read from split `split`. It must have an [`EVENT_TIME`] column.
    pub fn push_batch(&mut self, split: u32, batch: RecordBatch) -> Result<(), OperatorError> {
        let rows = batch.num_rows() as u32;
        self.push_batch_of_splits(batch, vec![(split, rows)])
    }

    /// Emits a whole batch whose rows come from several splits: `runs` are its consecutive rows of one split,
    /// as `(split, rows)`, in order, covering the batch. It must have an [`EVENT_TIME`] column.
    pub fn push_batch_of_splits(&mut self, batch: RecordBatch, runs: Vec<(u32, u32)>) -> Result<(), OperatorError> {
        if event_times(&batch).is_none() {
            return Err(OperatorError::Records(format!(
                "a source batch has no {EVENT_TIME:?} column of Timestamp(ms) (schema {})",
                batch.schema()
            )));
        }
        let covered: u64 = runs.iter().map(|(_, n)| *n as u64).sum();
        if covered != batch.num_rows() as u64 {
            return Err(OperatorError::Records(format!(
                "a source batch of {} rows came with runs of splits covering {covered}",
                batch.num_rows()
            )));
        }
        self.seal();
        self.len += batch.num_rows();
        if batch.num_rows() > 0 {
            self.chunks.push(SourceChunk { batch, runs });
        }
        Ok(())
    }

    fn seal(&mut self) {
        if let Some(batch) = self.rows.finish() {
            self.chunks.push(SourceChunk { batch, runs: std::mem::take(&mut self.row_runs) });
        }
    }

    /// Split `split` has no more records: it no longer holds the watermark back.
    pub fn finish_split(&mut self, split: u32) {
        self.finished.push(split);
    }

    /// Number of records emitted so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no record was emitted.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What was emitted, as batches with the split of each row, and the splits that finished; leaves the output
    /// empty.
    pub fn take(&mut self) -> (Vec<SourceChunk>, std::vec::Drain<'_, u32>) {
        self.seal();
        self.len = 0;
        (std::mem::take(&mut self.chunks), self.finished.drain(..))
    }
}

/// What a source's `poll` produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceStatus {
    /// More records may follow at once.
    More,
    /// Nothing now; poll again after this long (e.g. rate limiting).
    Idle(std::time::Duration),
    /// The source is exhausted.
    Finished,
}

/// A source of records.
pub trait Source: Send {
    /// Restores or initializes the source's position.
    fn initialize_state(&mut self, ctx: &mut InitContext<'_>) -> Result<(), OperatorError>;
    /// How many splits this subtask reads, once its state is initialized: each holds the watermark back until
    /// it has records, is idle or has finished. It may grow while the source runs (splits discovered later: the
    /// Kafka source's new partitions), never shrink; a subtask with none is idle.
    fn splits(&self) -> u32 {
        1
    }
    /// Emits up to `max` records into `out`.
    fn poll(&mut self, out: &mut SourceOutput, max: usize) -> Result<SourceStatus, OperatorError>;
    /// Writes the source's position into operator state.
    fn snapshot_state(&mut self, ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError>;
    /// A checkpoint completed (best effort, see the module docs).
    fn notify_checkpoint_complete(&mut self, _id: CheckpointId) -> Result<(), OperatorError> {
        Ok(())
    }
    /// A checkpoint was aborted (best effort).
    fn notify_checkpoint_aborted(&mut self, _id: CheckpointId) -> Result<(), OperatorError> {
        Ok(())
    }
}

/// An operator (or sink) that processes records in batches.
pub trait Operator: Send {
    /// Restores or initializes state.
    fn initialize_state(&mut self, _ctx: &mut InitContext<'_>) -> Result<(), OperatorError> {
        Ok(())
    }
    /// Processes a batch of rows (an Arrow record batch of the input edge's schema), emitting any output to
    /// `out`.
    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError>;
    /// Processes a batch of a two-input operator's second input (a kind whose role is `TwoInput`; its first
    /// input's batches go to [`Operator::process_batch`]). Barriers are aligned and watermarks combined over both
    /// inputs before the operator sees them.
    fn process_second_batch(
        &mut self,
        _batch: &RecordBatch,
        _ctx: &mut ProcessContext<'_>,
        _out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        Err(OperatorError::Misuse("a batch of a second input reached an operator that reads one".into()))
    }
    /// The event-time watermark advanced to `watermark` (`ctx.current_watermark()` is already it). Runs before
    /// the watermark goes on downstream, so what is emitted here precedes it (as Flink's `processWatermark`).
    fn on_watermark(
        &mut self,
        _watermark: i64,
        _ctx: &mut ProcessContext<'_>,
        _out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        Ok(())
    }
    /// A timer this operator registered fired: `timestamp` in `domain`, with the timer's key and namespace
    /// current in `ctx`'s keyed state (`ctx.current_key()`). Event-time timers fire in timestamp order when the
    /// watermark reaches them, before `on_watermark` and before the watermark goes downstream.
    fn on_timer(
        &mut self,
        timestamp: i64,
        domain: TimeDomain,
        _ctx: &mut ProcessContext<'_>,
        _out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        Err(OperatorError::Records(format!(
            "a {} timer at {timestamp} fired, but the operator does not implement on_timer",
            domain.name()
        )))
    }
    /// All input has been consumed (a real end of input, not a stop with savepoint).
    fn end_of_input(&mut self, _ctx: &mut ProcessContext<'_>, _out: &mut Collector<'_>) -> Result<(), OperatorError> {
        Ok(())
    }
    /// Writes operator state for a checkpoint (keyed state is snapshotted by the runtime).
    fn snapshot_state(&mut self, _ctx: &mut SnapshotContext<'_>) -> Result<(), OperatorError> {
        Ok(())
    }
    /// A checkpoint completed (best effort, see the module docs).
    fn notify_checkpoint_complete(&mut self, _id: CheckpointId) -> Result<(), OperatorError> {
        Ok(())
    }
    /// A checkpoint was aborted (best effort).
    fn notify_checkpoint_aborted(&mut self, _id: CheckpointId) -> Result<(), OperatorError> {
        Ok(())
    }
}
