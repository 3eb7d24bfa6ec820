//! What a task is, apart from what it does: the events it is told, what it needs from its task manager, the
//! `Task` itself (whose methods `mod.rs`, `setup.rs` and `upload.rs` implement by concern) and the small
//! helpers they share. A room below them, so none of them imports the folder's `mod.rs`.

use super::align::{BarrierAligner, Deferred};
use super::error::TaskError;
use super::event_time::SourceTime;
use super::incremental::Incremental;
use super::output::{ChainOp, OutputEdge};
use crate::api::registry::Registry;
use crate::net::{BatchDecoder, ChannelEvent, DataServer, Frame, InputChannels};
use crate::report::Reporter;
use crate::time::valve::WatermarkValve;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use weir_common::checkpoint::{CheckpointOutcome, SavepointTarget};
use weir_common::deploy::descriptor::TaskDescriptor;
use weir_common::ids::CheckpointId;
use weir_common::service::store::{Store, StoreOptions};
use weir_proto as pb;

/// What a task may be told by the task manager.
#[derive(Debug)]
pub enum TaskEvent {
    /// A frame or close from an input channel.
    Channel(ChannelEvent),
    /// Sources only: take checkpoint `id` and emit its barrier.
    Trigger {
        /// Checkpoint id.
        id: CheckpointId,
        /// Trigger time.
        timestamp_ms: u64,
        /// Set when the checkpoint is a savepoint.
        savepoint: Option<SavepointTarget>,
    },
    /// Checkpoint `id` completed or was aborted.
    Notify {
        /// Checkpoint id.
        id: CheckpointId,
        /// What became of it.
        outcome: CheckpointOutcome,
    },
    /// Sources only: end the input now (stop with savepoint and drain).
    EndInput,
    /// Stop now.
    Cancel,
}

/// What a task needs from its task manager.
pub struct TaskEnv {
    /// Runtime for network I/O and uploads.
    pub runtime: tokio::runtime::Handle,
    /// Accepts input connections.
    pub data_server: Arc<DataServer>,
    /// Operator kinds.
    pub registry: Arc<Registry>,
    /// The task manager's data directory.
    pub data_dir: PathBuf,
    /// Reports to the job manager.
    pub reporter: Reporter,
    /// Object-store settings.
    pub store_options: StoreOptions,
    /// How long a task waits for its channels to connect.
    pub connect_timeout: Duration,
    /// Tuning of RocksDB keyed backends.
    pub rocks: weir_state::rocks::RocksOptions,
}

/// Runs a setup step on the runtime, giving up as soon as the task is canceled.
pub(super) fn unless_canceled<T, E: Into<TaskError>>(
    rt: &tokio::runtime::Handle,
    cancel: &mut watch::Receiver<bool>,
    step: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, TaskError> {
    rt.block_on(async {
        tokio::select! {
            r = step => r.map_err(Into::into),
            _ = cancel.wait_for(|c| *c) => Err(TaskError::Canceled),
        }
    })
}

/// Metric labels of a task.
pub(super) fn labels(desc: &TaskDescriptor) -> [(&'static str, String); 3] {
    [("job_id", desc.job_id.0.clone()), ("vertex", desc.vertex.0.to_string()), ("subtask", desc.subtask.0.to_string())]
}

/// The task as the job manager names it.
pub(super) fn task_ref(desc: &TaskDescriptor) -> pb::TaskRef {
    pb::TaskRef {
        job_id: desc.job_id.0.clone(),
        attempt: desc.attempt.0,
        vertex: desc.vertex.0,
        subtask: desc.subtask.0,
    }
}

/// A running task: its chain, channels, alignment, event time and checkpoint bookkeeping. Its methods live
/// by concern: running in `mod.rs`, setting up in `setup.rs`, snapshots and uploads in `upload.rs`.
pub(super) struct Task {
    pub(super) desc: TaskDescriptor,
    pub(super) env: Arc<TaskEnv>,
    pub(super) store: Store,
    pub(super) rx: mpsc::Receiver<TaskEvent>,
    pub(super) ops: Vec<ChainOp>,
    pub(super) outputs: Vec<OutputEdge>,
    pub(super) inputs: Option<InputChannels>,
    /// The first input channel of a two-input head's second input (the channel count otherwise).
    pub(super) second_input_from: usize,
    pub(super) aligner: BarrierAligner,
    /// The watermarks and statuses of the input channels, combined into the task's.
    pub(super) valve: WatermarkValve,
    /// Sources with a watermark strategy: per-split generation and its schedule.
    pub(super) source_time: Option<SourceTime>,
    /// The task's current watermark, as a metric.
    pub(super) watermark_gauge: metrics::Gauge,
    /// How far the task's watermark is behind the wall clock, as a metric (refreshed with the state metrics).
    pub(super) watermark_lag_gauge: metrics::Gauge,
    /// Input frames held back by alignment, per channel in arrival order.
    pub(super) deferred: Deferred<Frame>,
    /// Each input channel's Arrow IPC stream.
    pub(super) decoders: Vec<BatchDecoder>,
    /// All input consumed and end-of-input work done.
    pub(super) input_ended: bool,
    /// Restored from a snapshot taken at end of input: end-of-input work was done before.
    pub(super) restored_at_end: bool,
    pub(super) work_dir: PathBuf,
    /// Longest a partly filled batch waits before it is sent (the job's `linger_ms`).
    pub(super) linger: Duration,
    pub(super) last_flush: Instant,
    pub(super) records_in: metrics::Counter,
    pub(super) sync_seconds: metrics::Histogram,
    pub(super) incremental: Arc<parking_lot::Mutex<Incremental>>,
    pub(super) last_state_metrics: Instant,
    /// Names this task's folder in the job's shared directory (unique per deployment of a backend).
    pub(super) instance: String,
    /// The savepoint target each barrier being aligned carried (by checkpoint id).
    pub(super) savepoint_barriers: BTreeMap<CheckpointId, SavepointTarget>,
    /// Sources: a stop-with-savepoint barrier went out; nothing more is emitted unless it is aborted.
    pub(super) suspended_by: Option<CheckpointId>,
    /// Sources: asked to end the input (stop with drain).
    pub(super) end_input_requested: bool,
}
