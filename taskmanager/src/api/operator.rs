//! The operator API: what users implement to add their own kinds (and what the built-in kinds use).
//!
//! A [`Source`] emits records and keeps its position in operator state; an [`Operator`] processes records
//! in batches (a sink is an operator that emits nothing). Lifecycle hooks follow Flink's
//! `CheckpointedFunction` and `CheckpointListener`:
//!
//! - `initialize_state` runs once before any record, with [`InitContext::is_restored`] telling whether
//!   state was restored from a checkpoint;
//! - `snapshot_state` runs at each checkpoint barrier, before the state is copied;
//! - `notify_checkpoint_complete` / `notify_checkpoint_aborted` are **best effort**: a notification may
//!   arrive late, more than once for the same id, or never (e.g. when a task manager dies right after the
//!   checkpoint completed). Logic that commits side effects must be idempotent and must also commit what
//!   its restored state says is pending (see the `file-sink`).

use crate::api::record::Record;
use weir_common::ids::{CheckpointId, SubtaskIndex};
use weir_common::keygroup::KeyGroupRange;
use weir_state::{KeyedStateBackend, OperatorStateStore};

/// An error raised by an operator; it fails the task (and the job fails over).
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// A state access failed.
    #[error(transparent)]
    State(#[from] weir_state::StateError),
    /// A local I/O operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Anything else, described.
    #[error("{0}")]
    Other(String),
    /// An error of the named operator (set by the runtime, so a user sees which operator of a chain failed).
    #[error("operator {uid:?}: {source}")]
    InOperator {
        /// The operator's uid.
        uid: String,
        /// What went wrong.
        #[source]
        source: Box<OperatorError>,
    },
}

impl OperatorError {
    /// Wraps an I/O error with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        OperatorError::Io { context: context.into(), source }
    }
}

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

/// Given to `process_batch`, `on_watermark` and `end_of_input`.
pub struct ProcessContext<'a> {
    /// Where the operator runs.
    pub info: &'a RuntimeInfo,
    /// The keyed state, for keyed kinds.
    pub keyed: Option<&'a mut dyn KeyedStateBackend>,
    watermark: i64,
}

impl<'a> ProcessContext<'a> {
    /// A context before any watermark.
    pub fn new(info: &'a RuntimeInfo, keyed: Option<&'a mut dyn KeyedStateBackend>) -> Self {
        ProcessContext { info, keyed, watermark: crate::time::MIN_WATERMARK }
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

    /// The keyed backend, or an error for a kind that did not declare itself keyed.
    pub fn keyed(&mut self) -> Result<&mut dyn KeyedStateBackend, OperatorError> {
        match self.keyed.as_mut() {
            Some(k) => Ok(&mut **k),
            None => Err(OperatorError::Other(format!("operator {:?} is not keyed", self.info.uid))),
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

/// Records an operator passes on per chunk.
pub const COLLECTOR_CHUNK: usize = 1024;

/// Where an operator puts its output. Records are handed downstream in chunks as they are emitted, so an
/// operator may emit any number of records (e.g. all its state at end of input) in bounded memory.
pub struct Collector<'a> {
    buf: Vec<Record>,
    downstream: &'a mut dyn FnMut(Vec<Record>) -> Result<(), OperatorError>,
}

impl<'a> Collector<'a> {
    /// A collector that hands chunks to `downstream`.
    pub fn new(downstream: &'a mut dyn FnMut(Vec<Record>) -> Result<(), OperatorError>) -> Self {
        Collector { buf: Vec::new(), downstream }
    }

    /// Emits one record.
    pub fn emit(&mut self, r: Record) -> Result<(), OperatorError> {
        if self.buf.capacity() == 0 {
            self.buf.reserve_exact(COLLECTOR_CHUNK);
        }
        self.buf.push(r);
        if self.buf.len() >= COLLECTOR_CHUNK {
            self.flush()?;
        }
        Ok(())
    }

    /// Hands what was emitted so far downstream.
    pub fn flush(&mut self) -> Result<(), OperatorError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::take(&mut self.buf);
        (self.downstream)(chunk)
    }
}

/// What a source's `poll` fills: the records, and which of the source's splits each came from, so the runtime
/// generates watermarks per split (Flink's per-split watermarks).
#[derive(Debug, Default)]
pub struct SourceOutput {
    records: Vec<Record>,
    /// Runs of consecutive records from one split: (split, records).
    runs: Vec<(u32, u32)>,
    finished: Vec<u32>,
}

impl SourceOutput {
    /// An empty output with room for `capacity` records.
    pub fn with_capacity(capacity: usize) -> Self {
        SourceOutput { records: Vec::with_capacity(capacity), runs: Vec::new(), finished: Vec::new() }
    }

    /// Emits a record read from split `split` (an index below the source's [`Source::splits`]).
    pub fn push(&mut self, split: u32, r: Record) {
        self.records.push(r);
        match self.runs.last_mut() {
            Some((s, n)) if *s == split => *n += 1,
            _ => self.runs.push((split, 1)),
        }
    }

    /// Split `split` has no more records: it no longer holds the watermark back.
    pub fn finish_split(&mut self, split: u32) {
        self.finished.push(split);
    }

    /// Records emitted so far.
    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// Number of records emitted so far.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no record was emitted.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The records with the split of each, as runs, and the splits that finished; leaves the output empty.
    pub(crate) fn take(&mut self) -> (Vec<Record>, std::vec::Drain<'_, (u32, u32)>, std::vec::Drain<'_, u32>) {
        let capacity = self.records.capacity();
        let records = std::mem::replace(&mut self.records, Vec::with_capacity(capacity));
        (records, self.runs.drain(..), self.finished.drain(..))
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
    /// it has records, is idle or has finished.
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
    /// Processes a batch, emitting any output to `out`.
    fn process_batch(
        &mut self,
        records: &[Record],
        ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError>;
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
