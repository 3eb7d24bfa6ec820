//! The job record: everything the job manager persists about one job (spec, lifecycle state, attempt, the
//! checkpoint id counter, the retained checkpoints, a bounded history, the savepoint it started from), and the
//! job as the client API shows it. `job::store` writes and reads it.

use crate::checkpoint::coordinator::{CheckpointHistoryEntry, CheckpointStatus, RetainedCheckpoint, HISTORY_LIMIT};
use crate::job::lifecycle::{JobState, RestartHistory};
use serde::{Deserialize, Serialize};
use weir_common::checkpoint::RestoreMode;
use weir_common::ids::{AttemptNumber, CheckpointId, JobId};
use weir_common::job::spec::ResolvedJob;
use weir_proto as pb;

/// Version of the job file format written by this build.
pub const JOB_FILE_VERSION: u32 = 1;

/// Everything the job manager persists about one job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Format version of the file.
    pub format_version: u32,
    /// The job's id.
    pub id: JobId,
    /// The validated spec.
    pub job: ResolvedJob,
    /// Lifecycle state.
    #[serde(with = "crate::job::lifecycle::state_by_name")]
    pub state: JobState,
    /// The last attempt deployed (0 = never deployed); the next deployment uses `attempt + 1`.
    pub attempt: AttemptNumber,
    /// Restarts after failures so far.
    pub restarts: u32,
    /// What the restart strategy remembers of past failures (absent in records of older versions).
    #[serde(default)]
    pub restart_history: RestartHistory,
    /// When the job was submitted.
    pub submit_time_ms: u64,
    /// When it reached a terminal state (0 while it runs).
    pub end_time_ms: u64,
    /// The last failure's cause.
    pub failure: String,
    /// The id the next checkpoint gets; persisted before a trigger uses it, never goes backwards.
    pub next_checkpoint_id: CheckpointId,
    /// Completed checkpoints kept, oldest first.
    pub retained: Vec<RetainedCheckpoint>,
    /// The last [`HISTORY_LIMIT`] checkpoints, newest last.
    pub history: Vec<CheckpointHistoryEntry>,
    /// Checkpoints completed over the job's life.
    pub checkpoints_completed: u64,
    /// Checkpoints failed over the job's life.
    pub checkpoints_failed: u64,
    /// The checkpoint the current attempt restored from (empty: none).
    #[serde(default)]
    pub restored_from: String,
    /// The last time a restore had to skip unreadable newer checkpoints, and why (empty: never).
    #[serde(default)]
    pub fallback: String,
    /// What the job waits on that it cannot fix itself (empty: nothing).
    #[serde(default)]
    pub waiting: String,
    /// The savepoint (or retained checkpoint) the job was submitted to start from; restored from until the
    /// job's own first checkpoint completes, and, if claimed, deleted once the job's checkpoints subsume it.
    #[serde(default)]
    pub initial: Option<InitialRestore>,
    /// Operator uids whose state in the initial savepoint no operator of the job took.
    #[serde(default)]
    pub dropped_state: Vec<String>,
    /// The same, state by state, with why each was dropped.
    #[serde(default)]
    pub dropped_states: Vec<crate::checkpoint::savepoint::DroppedState>,
}

/// The savepoint a job starts from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InitialRestore {
    /// URL of the savepoint's (or checkpoint's) directory.
    pub url: String,
    /// URL its paths are relative to.
    pub root: String,
    /// Its checkpoint id.
    pub checkpoint_id: CheckpointId,
    /// Claim or no-claim.
    pub mode: RestoreMode,
    /// Still the restore point: no checkpoint of the job has completed yet.
    pub active: bool,
}

impl JobRecord {
    /// A freshly submitted job.
    pub fn new(id: JobId, job: ResolvedJob, now_ms: u64) -> Self {
        JobRecord {
            format_version: JOB_FILE_VERSION,
            id,
            job,
            state: JobState::Created,
            attempt: AttemptNumber(0),
            restarts: 0,
            restart_history: RestartHistory::default(),
            submit_time_ms: now_ms,
            end_time_ms: 0,
            failure: String::new(),
            next_checkpoint_id: CheckpointId(1),
            retained: Vec::new(),
            history: Vec::new(),
            checkpoints_completed: 0,
            checkpoints_failed: 0,
            restored_from: String::new(),
            fallback: String::new(),
            waiting: String::new(),
            initial: None,
            dropped_state: Vec::new(),
            dropped_states: Vec::new(),
        }
    }

    /// The newest retained checkpoint.
    pub fn latest_completed(&self) -> Option<&RetainedCheckpoint> {
        self.retained.iter().max_by_key(|r| r.id)
    }

    /// Appends to the history, dropping the oldest entries beyond [`HISTORY_LIMIT`].
    pub fn push_history(&mut self, entry: CheckpointHistoryEntry) {
        self.history.push(entry);
        if self.history.len() > HISTORY_LIMIT {
            let excess = self.history.len() - HISTORY_LIMIT;
            self.history.drain(..excess);
        }
    }

    /// The history entry of a checkpoint.
    pub fn history_mut(&mut self, id: CheckpointId) -> Option<&mut CheckpointHistoryEntry> {
        self.history.iter_mut().rev().find(|e| e.id == id)
    }

    /// The history entry of checkpoint (or savepoint) `id` if it records it as failed.
    pub fn failed_checkpoint(&self, id: CheckpointId) -> Option<&CheckpointHistoryEntry> {
        self.history.iter().rev().find(|e| e.id == id && e.status == CheckpointStatus::Failed)
    }

    /// Checkpoint or savepoint `id` completed: counted, its history entry completed, nothing waits any more.
    pub fn mark_completed(&mut self, id: CheckpointId, duration_ms: u64, full_size_bytes: u64, uploaded_bytes: u64) {
        self.checkpoints_completed += 1;
        self.waiting.clear();
        if let Some(e) = self.history_mut(id) {
            e.status = CheckpointStatus::Completed;
            e.duration_ms = duration_ms;
            e.full_size_bytes = full_size_bytes;
            e.uploaded_bytes = uploaded_bytes;
        }
    }

    /// One of the job's own checkpoints completed (and `retained` holds it): it is now the restore point
    /// instead of the savepoint the job started from. Returns that savepoint's URL when it was claimed and the
    /// job's checkpoints would now have subsumed it (it is to be deleted); an unclaimed one is never touched.
    pub fn release_initial(&mut self) -> Option<String> {
        let keep = self.job.checkpointing.retained.max(1);
        let subsumed = self.retained.len() as u32 >= keep;
        let initial = self.initial.as_mut().filter(|i| i.active)?;
        if initial.mode == RestoreMode::Claim && !subsumed {
            return None;
        }
        initial.active = false;
        (initial.mode == RestoreMode::Claim).then(|| initial.url.clone())
    }

    /// The job as the client API shows it.
    pub fn info(&self) -> pb::JobInfo {
        pb::JobInfo {
            id: self.id.to_string(),
            name: self.job.name.clone(),
            state: self.state as i32,
            last_completed_checkpoint: self.latest_completed().map(|r| r.id.0),
            restarts: self.restarts,
            attempt: self.attempt.0,
            submit_time_ms: self.submit_time_ms,
            end_time_ms: self.end_time_ms,
            failure: self.failure.clone(),
            parallelism: self.job.parallelism,
            max_parallelism: self.job.max_parallelism,
            checkpoints_completed: self.checkpoints_completed,
            checkpoints_failed: self.checkpoints_failed,
            restored_from: match (self.restored_from.is_empty(), self.fallback.is_empty()) {
                (_, true) => self.restored_from.clone(),
                (true, false) => self.fallback.clone(),
                (false, false) => format!("{}; {}", self.restored_from, self.fallback),
            },
            waiting: self.waiting.clone(),
            dropped_state: self.dropped_state.clone(),
            dropped_states: self.dropped_states.iter().map(pb::DroppedState::from).collect(),
            // Watermarks live with the running deployment, not the record: the actor adds them.
            watermarks: Vec::new(),
            lowest_watermark: None,
        }
    }
}
