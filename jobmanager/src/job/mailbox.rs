//! What the job manager and a job's coordinator say to each other: the coordinator's mailbox
//! ([`JobEvent`], with [`SavepointRequest`] and [`ReportedTask`]), and what the job manager keeps of each job
//! ([`JobHandle`], whose [`JobView`] clients read without waiting for the coordinator).

use crate::checkpoint::coordinator::{CheckpointHistoryEntry, TaskKey};
use crate::error::JobRequestError;
use crate::job::lifecycle::JobState;
use crate::job::record::JobRecord;
use parking_lot::Mutex;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use weir_common::checkpoint::{SavepointTarget, TaskSnapshot};
use weir_common::ids::{AttemptNumber, CheckpointId};
use weir_proto as pb;

/// Something that happened to a job.
#[derive(Debug)]
pub(crate) enum JobEvent {
    /// A task reported a state.
    TaskState { tm_id: String, attempt: AttemptNumber, task: TaskKey, state: pb::TaskState, error: TaskError },
    /// A heartbeat named the latest state of some of the job's tasks on a task manager.
    Reconcile { tm_id: String, tasks: Vec<ReportedTask> },
    /// A task acknowledged a checkpoint.
    Acknowledge { attempt: AttemptNumber, task: TaskKey, checkpoint_id: CheckpointId, snapshot: Box<TaskSnapshot> },
    /// A task declined a checkpoint.
    Decline { attempt: AttemptNumber, task: TaskKey, checkpoint_id: CheckpointId, reason: String },
    /// A task manager was lost.
    TaskManagerLost { tm_id: String, instance: u64, reason: String },
    /// A client asked to cancel the job.
    Cancel { reply: oneshot::Sender<Result<pb::JobInfo, JobRequestError>> },
    /// A client asked for a savepoint (and maybe to stop the job with it).
    Savepoint(SavepointRequest),
}

/// A client's request for a savepoint.
#[derive(Debug)]
pub(crate) struct SavepointRequest {
    /// Where and how; `target.stop` stops the job without draining.
    pub(crate) target: SavepointTarget,
    /// Stop with drain: end the input first, the final checkpoint is the savepoint.
    pub(crate) drain: bool,
    /// Answered once the savepoint completed or failed.
    pub(crate) reply: oneshot::Sender<Result<pb::SavepointResponse, JobRequestError>>,
}

/// What a task that failed said of its failure.
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskError {
    pub(crate) text: String,
    /// Its data connection broke: another task's failure, not its own, is the cause.
    pub(crate) caused_by_peer: bool,
    /// No restart can mend it: the job fails at once.
    pub(crate) fatal: bool,
}

/// A task's latest state as a heartbeat carries it.
#[derive(Debug)]
pub(crate) struct ReportedTask {
    pub(crate) attempt: AttemptNumber,
    pub(crate) task: TaskKey,
    pub(crate) state: pb::TaskState,
    pub(crate) error: TaskError,
    /// The task's event-time watermark, once it has one.
    pub(crate) watermark: Option<i64>,
}

/// What clients can read about a job without waiting for its coordinator.
#[derive(Clone, Debug)]
pub(crate) struct JobView {
    pub(crate) info: pb::JobInfo,
    pub(crate) state: JobState,
    pub(crate) history: Vec<CheckpointHistoryEntry>,
    /// The savepoint or checkpoint (its directory URL) the job still restores from, until its own first
    /// checkpoint (or, claimed, the checkpoints that subsume it) completes.
    pub(crate) restoring_from: Option<(String, weir_common::checkpoint::RestoreMode)>,
}

impl JobView {
    pub(crate) fn of(record: &JobRecord) -> Self {
        JobView {
            info: record.info(),
            state: record.state,
            history: record.history.clone(),
            restoring_from: record.initial.as_ref().filter(|i| i.active).map(|i| (i.url.clone(), i.mode)),
        }
    }
}

/// The handle the job manager keeps for each job.
pub(crate) struct JobHandle {
    pub(crate) tx: mpsc::UnboundedSender<JobEvent>,
    pub(crate) view: Arc<Mutex<JobView>>,
    pub(crate) task: Option<tokio::task::JoinHandle<()>>,
}
