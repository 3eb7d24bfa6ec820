//! The checkpoint coordinator's decisions, as plain data and functions tested without network or disk:
//! may we trigger now, is a checkpoint complete, which acknowledgements are stale, which checkpoints are
//! subsumed and which of their files may be deleted, is the failure count over the tolerance, does operator
//! state stay under its limit. The object-store work those decisions lead to is in [`crate::checkpoint::store`].

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use weir_common::checkpoint::{
    CheckpointMetadata, MetadataError, OperatorCheckpoint, SavepointTarget, StateMetaInfo, TaskSnapshot,
    METADATA_FORMAT_VERSION,
};
use weir_common::deploy::descriptor::ExecutionGraph;
use weir_common::ids::{AttemptNumber, CheckpointId, JobId, SubtaskIndex, VertexId};
use weir_common::job::spec::{CheckpointSettings, ResolvedJob};
use weir_proto as pb;

/// One deployed subtask: its vertex and index.
pub type TaskKey = (VertexId, SubtaskIndex);

/// How many checkpoints the history keeps (newest last).
pub const HISTORY_LIMIT: usize = 200;

/// After a failed checkpoint, the final checkpoint is retried no sooner than this.
pub const FINAL_RETRY_DELAY_MS: u64 = 500;

/// Status of a checkpoint in the history: the protocol's enum.
pub use weir_proto::CheckpointStatus;

/// A checkpoint's status in the stored history, by name (`"COMPLETED"`), as records have always been written.
mod status_by_name {
    use super::CheckpointStatus;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(status: &CheckpointStatus, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(status.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<CheckpointStatus, D::Error> {
        let name = String::deserialize(d)?;
        CheckpointStatus::from_name(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown checkpoint status {name:?}")))
    }
}

/// One checkpoint in a job's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointHistoryEntry {
    /// Checkpoint id.
    pub id: CheckpointId,
    /// Current status.
    #[serde(with = "status_by_name")]
    pub status: CheckpointStatus,
    /// When it was triggered.
    pub trigger_time_ms: u64,
    /// Trigger to completion or failure.
    pub duration_ms: u64,
    /// Bytes of state the checkpoint references.
    pub full_size_bytes: u64,
    /// Bytes uploaded for this checkpoint.
    pub uploaded_bytes: u64,
    /// Why it failed.
    pub failure_reason: String,
    /// URL of its `_metadata`.
    pub path: String,
    /// Taken when every task was at end of input.
    pub is_final: bool,
    /// A savepoint (owned by the user, not retained by the job).
    #[serde(default)]
    pub is_savepoint: bool,
}

impl CheckpointHistoryEntry {
    /// A freshly triggered checkpoint.
    pub fn in_progress(id: CheckpointId, trigger_time_ms: u64, path: String, is_final: bool) -> Self {
        CheckpointHistoryEntry {
            id,
            status: CheckpointStatus::InProgress,
            trigger_time_ms,
            duration_ms: 0,
            full_size_bytes: 0,
            uploaded_bytes: 0,
            failure_reason: String::new(),
            path,
            is_final,
            is_savepoint: false,
        }
    }

    /// The entry as the client API shows it (`now_ms` gives in-progress checkpoints their running time).
    pub fn to_proto(&self, now_ms: u64) -> pb::CheckpointInfo {
        let duration_ms = match self.status {
            CheckpointStatus::InProgress => now_ms.saturating_sub(self.trigger_time_ms),
            _ => self.duration_ms,
        };
        pb::CheckpointInfo {
            id: self.id.0,
            status: self.status as i32,
            trigger_time_ms: self.trigger_time_ms,
            duration_ms,
            full_size_bytes: self.full_size_bytes,
            uploaded_bytes: self.uploaded_bytes,
            failure_reason: self.failure_reason.clone(),
            path: self.path.clone(),
            is_final: self.is_final,
            is_savepoint: self.is_savepoint,
        }
    }
}

/// A completed checkpoint the job keeps (the last `retained`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetainedCheckpoint {
    /// Checkpoint id.
    pub id: CheckpointId,
    /// Path of its `_metadata`, relative to the checkpoint root.
    pub metadata_path: String,
    /// When it was triggered.
    pub timestamp_ms: u64,
    /// Bytes of state it references.
    pub full_size_bytes: u64,
    /// Bytes uploaded for it.
    pub uploaded_bytes: u64,
    /// Taken when every task was at end of input.
    pub is_final: bool,
}

/// What the coordinator needs to know about the deployment's tasks to decide on a trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskReadiness {
    /// The job is `RUNNING` and every task reported `RUNNING` or `END_OF_INPUT`.
    pub all_running: bool,
    /// Every task reported `END_OF_INPUT`.
    pub all_end_of_input: bool,
}

/// Whether to trigger a checkpoint now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerDecision {
    /// Not now.
    Wait,
    /// A periodic checkpoint.
    Periodic,
    /// The final checkpoint: every task is at end of input.
    Final,
}

/// The outcome of an acknowledgement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AckOutcome {
    /// Stale or unexpected; dropped.
    Dropped(&'static str),
    /// Recorded; more acknowledgements are due.
    Pending {
        /// Acknowledgements still missing.
        remaining: usize,
    },
    /// Recorded; every task has acknowledged.
    Complete,
}

/// A checkpoint in flight.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingCheckpoint {
    /// Checkpoint id.
    pub id: CheckpointId,
    /// Attempt that was triggered.
    pub attempt: AttemptNumber,
    /// When it was triggered.
    pub trigger_time_ms: u64,
    /// Every task was at end of input when it was triggered.
    pub is_final: bool,
    /// Set for a savepoint: where and how it is written.
    pub savepoint: Option<SavepointTarget>,
    /// Tasks that must acknowledge.
    pub expected: BTreeSet<TaskKey>,
    /// Acknowledgements received.
    pub acks: BTreeMap<TaskKey, TaskSnapshot>,
}

impl PendingCheckpoint {
    /// Bytes uploaded by every acknowledged task.
    pub fn uploaded_bytes(&self) -> u64 {
        self.acks.values().map(|s| s.uploaded_bytes).sum()
    }
}

/// Whether `consecutive` failures exceed the tolerance (`None` = unlimited).
pub fn over_tolerance(consecutive: u32, tolerable: Option<u32>) -> bool {
    tolerable.is_some_and(|t| consecutive > t)
}

/// The checkpoint coordinator of one deployment (one attempt) of a job.
#[derive(Clone, Debug)]
pub struct CheckpointCoordinator {
    settings: CheckpointSettings,
    attempt: AttemptNumber,
    last_trigger_ms: u64,
    last_completion_ms: Option<u64>,
    last_failure_ms: Option<u64>,
    pending: Option<PendingCheckpoint>,
    consecutive_failures: u32,
    final_completed: Option<CheckpointId>,
}

impl CheckpointCoordinator {
    /// A coordinator for a deployment that started at `now_ms`: the first periodic checkpoint comes one
    /// interval later.
    pub fn new(settings: CheckpointSettings, attempt: AttemptNumber, now_ms: u64) -> Self {
        CheckpointCoordinator {
            settings,
            attempt,
            last_trigger_ms: now_ms,
            last_completion_ms: None,
            last_failure_ms: None,
            pending: None,
            consecutive_failures: 0,
            final_completed: None,
        }
    }

    /// The attempt this coordinator serves.
    pub fn attempt(&self) -> AttemptNumber {
        self.attempt
    }

    /// The checkpoint in flight.
    pub fn pending(&self) -> Option<&PendingCheckpoint> {
        self.pending.as_ref()
    }

    /// Consecutive failed checkpoints since the last completed one.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// The final checkpoint, once it completed.
    pub fn final_completed(&self) -> Option<CheckpointId> {
        self.final_completed
    }

    /// May a checkpoint be triggered now? Periodic: every task running, none in flight, `interval_ms`
    /// since the last trigger and `min_pause_ms` since the last completion. Final: every task at end of
    /// input, none in flight, no final checkpoint completed yet — at once, whatever the interval.
    pub fn decide_trigger(&self, now_ms: u64, tasks: TaskReadiness) -> TriggerDecision {
        if self.pending.is_some() || !tasks.all_running || self.final_completed.is_some() {
            return TriggerDecision::Wait;
        }
        if tasks.all_end_of_input {
            let retry_ok = self.last_failure_ms.is_none_or(|f| now_ms >= f.saturating_add(FINAL_RETRY_DELAY_MS));
            return if retry_ok { TriggerDecision::Final } else { TriggerDecision::Wait };
        }
        let Some(interval) = self.settings.interval_ms else { return TriggerDecision::Wait };
        let interval_ok = now_ms >= self.last_trigger_ms.saturating_add(interval);
        let pause_ok = self.last_completion_ms.is_none_or(|c| now_ms >= c.saturating_add(self.settings.min_pause_ms));
        if interval_ok && pause_ok {
            TriggerDecision::Periodic
        } else {
            TriggerDecision::Wait
        }
    }

    /// May a requested savepoint be triggered now: every task running, nothing in flight, the job not done.
    /// Savepoints do not wait for the interval or the minimum pause.
    pub fn may_trigger_savepoint(&self, tasks: TaskReadiness) -> bool {
        self.pending.is_none() && tasks.all_running && self.final_completed.is_none()
    }

    /// Starts checkpoint `id` (a savepoint if `savepoint` is set), which every task in `expected` must
    /// acknowledge.
    pub fn begin(
        &mut self,
        id: CheckpointId,
        now_ms: u64,
        expected: BTreeSet<TaskKey>,
        is_final: bool,
        savepoint: Option<SavepointTarget>,
    ) {
        self.last_trigger_ms = now_ms;
        self.pending = Some(PendingCheckpoint {
            id,
            attempt: self.attempt,
            trigger_time_ms: now_ms,
            is_final,
            savepoint,
            expected,
            acks: BTreeMap::new(),
        });
    }

    /// Records an acknowledgement; acknowledgements of another attempt, of a checkpoint not in flight, of
    /// a task not expected, or repeated ones are dropped.
    pub fn acknowledge(
        &mut self,
        attempt: AttemptNumber,
        id: CheckpointId,
        task: TaskKey,
        snapshot: TaskSnapshot,
    ) -> AckOutcome {
        if attempt != self.attempt {
            return AckOutcome::Dropped("acknowledgement of another attempt");
        }
        let Some(p) = self.pending.as_mut() else { return AckOutcome::Dropped("no checkpoint in flight") };
        if p.id != id {
            return AckOutcome::Dropped("acknowledgement of a checkpoint not in flight");
        }
        if !p.expected.contains(&task) {
            return AckOutcome::Dropped("acknowledgement from a task that is not part of the deployment");
        }
        if p.acks.contains_key(&task) {
            return AckOutcome::Dropped("repeated acknowledgement");
        }
        p.acks.insert(task, snapshot);
        let remaining = p.expected.len() - p.acks.len();
        if remaining == 0 {
            AckOutcome::Complete
        } else {
            AckOutcome::Pending { remaining }
        }
    }

    /// Whether a decline concerns the checkpoint in flight of this attempt.
    pub fn is_pending(&self, attempt: AttemptNumber, id: CheckpointId) -> bool {
        attempt == self.attempt && self.pending.as_ref().is_some_and(|p| p.id == id)
    }

    /// The checkpoint in flight if it has been running for `timeout_ms` or longer.
    pub fn expired(&self, now_ms: u64) -> Option<CheckpointId> {
        self.pending
            .as_ref()
            .filter(|p| now_ms >= p.trigger_time_ms.saturating_add(self.settings.timeout_ms))
            .map(|p| p.id)
    }

    /// Removes the checkpoint in flight (to complete or fail it).
    pub fn take_pending(&mut self) -> Option<PendingCheckpoint> {
        self.pending.take()
    }

    /// Records a completion: resets the failure count and, for a final checkpoint, stops triggering.
    pub fn record_completion(&mut self, id: CheckpointId, now_ms: u64, is_final: bool) {
        self.last_completion_ms = Some(now_ms);
        self.consecutive_failures = 0;
        if is_final {
            self.final_completed = Some(id);
        }
    }

    /// Records a failure; `counts` is false for aborts caused by failover or cancel. Returns whether the
    /// consecutive failures are now over the tolerance (the job must fail over).
    pub fn record_failure(&mut self, now_ms: u64, counts: bool) -> bool {
        self.last_failure_ms = Some(now_ms);
        if counts {
            self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        }
        counts && over_tolerance(self.consecutive_failures, self.settings.tolerable_failures)
    }
}

/// Acknowledgements that do not make a checkpoint's `_metadata`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AckedStateError {
    /// A task of a vertex the graph does not have.
    #[error("unknown vertex {0}")]
    UnknownVertex(VertexId),
    /// State of an operator the task does not run.
    #[error("task {vertex}/{subtask} acknowledged state for operator {uid:?}, which it does not run")]
    NotRun {
        /// The task's vertex.
        vertex: VertexId,
        /// Its subtask.
        subtask: SubtaskIndex,
        /// The operator named.
        uid: String,
    },
    /// An operator whose subtasks did not all acknowledge state.
    #[error("operator {uid:?}: state of {acknowledged} of its {parallelism} subtasks was acknowledged")]
    Incomplete {
        /// The operator.
        uid: String,
        /// Subtasks whose state arrived.
        acknowledged: usize,
        /// Its parallelism.
        parallelism: u32,
    },
    /// A path in the state that the metadata may not hold.
    #[error(transparent)]
    Path(#[from] MetadataError),
}

/// Assembles the `_metadata` of a fully acknowledged checkpoint: per operator uid, the state of each
/// subtask, which must be complete (subtasks `0..parallelism`) and reference only safe paths.
pub fn build_metadata(
    job_id: &JobId,
    job: &ResolvedJob,
    graph: &ExecutionGraph,
    pending: &PendingCheckpoint,
) -> Result<CheckpointMetadata, AckedStateError> {
    let mut operators: BTreeMap<String, OperatorCheckpoint> = BTreeMap::new();
    for (&(vertex, subtask), snap) in &pending.acks {
        let v = graph.vertices.get(vertex.0 as usize).ok_or(AckedStateError::UnknownVertex(vertex))?;
        for (uid, state) in &snap.operators {
            let idx = v
                .operators
                .iter()
                .copied()
                .find(|&i| job.operators[i].uid == *uid)
                .ok_or_else(|| AckedStateError::NotRun { vertex, subtask, uid: uid.clone() })?;
            let entry = operators.entry(uid.clone()).or_insert_with(|| OperatorCheckpoint {
                kind: job.operators[idx].kind.clone(),
                parallelism: job.operators[idx].parallelism,
                subtasks: vec![],
                signature: job.operators[idx].signature.clone(),
                state_config: job.operators[idx].state_config.clone(),
            });
            let mut state = state.clone();
            state.subtask = subtask;
            entry.subtasks.push(state);
        }
    }
    for (uid, op) in operators.iter_mut() {
        op.subtasks.sort_by_key(|s| s.subtask);
        let complete = op.subtasks.len() == op.parallelism as usize
            && op.subtasks.iter().enumerate().all(|(i, s)| s.subtask.0 as usize == i);
        if !complete {
            return Err(AckedStateError::Incomplete {
                uid: uid.clone(),
                acknowledged: op.subtasks.len(),
                parallelism: op.parallelism,
            });
        }
    }
    let meta = CheckpointMetadata {
        format_version: METADATA_FORMAT_VERSION,
        job_id: job_id.clone(),
        checkpoint_id: pending.id,
        timestamp_ms: pending.trigger_time_ms,
        max_parallelism: job.max_parallelism,
        is_final: pending.is_final,
        operators,
        savepoint: pending.savepoint.as_ref().map(|t| t.format),
    };
    meta.validate_paths()?;
    Ok(meta)
}

/// One operator state summed over the subtasks of a checkpoint: `(uid, state) -> (elements, bytes)`.
fn operator_state_totals<'a>(
    subtasks: impl IntoIterator<Item = (&'a str, &'a StateMetaInfo)>,
) -> BTreeMap<(String, String), (u64, u64)> {
    let mut totals: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for (uid, meta) in subtasks {
        let t = totals.entry((uid.to_string(), meta.name.clone())).or_default();
        t.0 += meta.elements;
        t.1 += meta.bytes;
    }
    totals
}

/// The guard on operator state: the first operator state whose bytes summed over the acknowledged subtasks are
/// above `limit`, described for the checkpoint's failure reason (job, operator, state, elements, bytes).
pub fn operator_state_over_limit(job_id: &JobId, pending: &PendingCheckpoint, limit: u64) -> Option<String> {
    let metas = pending.acks.values().flat_map(|snap| {
        snap.operators.iter().flat_map(|(uid, st)| {
            st.operator_state.iter().flat_map(move |h| h.states.iter().map(move |m| (uid.as_str(), m)))
        })
    });
    let ((uid, state), (elements, bytes)) = operator_state_totals(metas).into_iter().find(|(_, (_, b))| *b > limit)?;
    Some(format!(
        "job {job_id}: operator state {state:?} of operator {uid:?} holds {elements} elements, {bytes} bytes over all \
         subtasks, above the limit of {limit} bytes (--operator-state-limit); checkpoint declined, the job keeps running"
    ))
}

/// The retained checkpoints subsumed when keeping the last `keep`: never the newest one, whatever `keep`.
pub fn subsumed(retained: &[CheckpointId], keep: u32) -> Vec<CheckpointId> {
    let mut ids: Vec<CheckpointId> = retained.to_vec();
    ids.sort();
    ids.dedup();
    let keep = (keep as usize).max(1);
    let drop = ids.len().saturating_sub(keep);
    ids.truncate(drop);
    ids
}

/// Every file the given checkpoints reference (relative paths).
pub fn referenced_files<'a>(metas: impl IntoIterator<Item = &'a CheckpointMetadata>) -> HashSet<String> {
    let mut out = HashSet::new();
    for m in metas {
        out.extend(m.files().map(|f| f.path.clone()));
    }
    out
}

/// Every file one task's snapshot references (relative paths).
pub fn snapshot_files(s: &TaskSnapshot) -> Vec<String> {
    let mut out = Vec::new();
    for st in s.operators.values() {
        out.extend(st.files().map(|f| f.path.clone()));
    }
    out
}

/// The shared (incremental) files among `candidates` that no retained checkpoint references any more: files of
/// subsumed checkpoints and of failed ones. Files outside `shared_dir` go with their checkpoint's directory.
pub fn unreferenced_shared_files(
    candidates: impl IntoIterator<Item = String>,
    referenced: &HashSet<String>,
    shared_dir: &str,
) -> Vec<String> {
    let prefix = format!("{shared_dir}/");
    let mut out: Vec<String> =
        candidates.into_iter().filter(|p| p.starts_with(&prefix) && !referenced.contains(p)).collect();
    out.sort();
    out.dedup();
    out
}

/// The candidates of a sweep of a job's shared directory: every listed file (path, last modified in ms), or
/// with `min_age_ms` only those modified at least that long before `now_ms`. A file that old cannot belong to a
/// checkpoint still in flight (it would have expired), so if no retained checkpoint references it, it is left
/// over from a failed checkpoint whose task died before acknowledging it.
pub fn sweep_candidates(listing: Vec<(String, u64)>, now_ms: u64, min_age_ms: Option<u64>) -> Vec<String> {
    listing
        .into_iter()
        .filter(|(_, modified)| min_age_ms.is_none_or(|age| modified.saturating_add(age) <= now_ms))
        .map(|(path, _)| path)
        .collect()
}

/// The checkpoint directories (`<job>/chk-<n>`) among `paths` of checkpoints that are not retained: left over
/// when deleting a failed or subsumed checkpoint failed (the store was down), or when the job manager died
/// between writing a checkpoint's `_metadata` and recording it.
pub fn stale_checkpoint_dirs(job_id: &JobId, paths: &[String], retained: &[RetainedCheckpoint]) -> Vec<CheckpointId> {
    let prefix = format!("{job_id}/chk-");
    let mut ids: Vec<CheckpointId> = paths
        .iter()
        .filter_map(|p| p.strip_prefix(&prefix)?.split('/').next()?.parse().ok().map(CheckpointId))
        .filter(|id| !retained.iter().any(|r| r.id == *id))
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// How to delete a checkpoint's directory without touching files a retained checkpoint still uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirCleanup {
    /// Nothing in the directory is referenced: delete it whole.
    WholeDir(String),
    /// Delete these files only (the others are referenced).
    Files(Vec<String>),
}

/// Decides how to clean up the directory `dir`, given its listing (needed only when something in it is
/// referenced) and the files retained checkpoints reference.
pub fn plan_dir_cleanup(dir: &str, referenced: &HashSet<String>, listing: Option<&[String]>) -> Option<DirCleanup> {
    let prefix = format!("{dir}/");
    if !referenced.iter().any(|p| p.starts_with(&prefix)) {
        return Some(DirCleanup::WholeDir(dir.to_string()));
    }
    let files = listing?.iter().filter(|p| p.starts_with(&prefix) && !referenced.contains(*p)).cloned().collect();
    Some(DirCleanup::Files(files))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_take_only_files_old_enough_to_be_out_of_any_checkpoint_in_flight() {
        let listing = vec![("j/shared/a/0/i/1.sst".to_string(), 1_000), ("j/shared/a/0/i/2.sst".to_string(), 9_500)];
        assert_eq!(sweep_candidates(listing.clone(), 10_000, Some(1_000)), ["j/shared/a/0/i/1.sst"]);
        assert_eq!(sweep_candidates(listing.clone(), 10_000, Some(500)).len(), 2);
        assert_eq!(sweep_candidates(listing, 10_000, None).len(), 2);
    }

    #[test]
    fn stale_checkpoint_directories_are_those_not_retained() {
        let job = JobId("j".into());
        let listed: Vec<String> =
            ["j/chk-3/_metadata", "j/chk-3/a/0/opstate", "j/chk-5/_metadata", "j/chk-12/x", "j/shared/a/1.sst"]
                .map(String::from)
                .to_vec();
        let retained = [RetainedCheckpoint {
            id: CheckpointId(5),
            metadata_path: "j/chk-5/_metadata".into(),
            timestamp_ms: 0,
            full_size_bytes: 0,
            uploaded_bytes: 0,
            is_final: false,
        }];
        assert_eq!(stale_checkpoint_dirs(&job, &listed, &retained), vec![CheckpointId(3), CheckpointId(12)]);
    }

    #[test]
    fn only_unreferenced_shared_files_are_deleted() {
        let referenced: HashSet<String> = ["j/shared/a/0/x/1.sst".to_string()].into_iter().collect();
        let candidates = vec![
            "j/shared/a/0/x/1.sst".to_string(), // still used by a retained checkpoint
            "j/shared/a/0/x/2.sst".to_string(), // only the subsumed or failed checkpoint used it
            "j/shared/a/0/x/2.sst".to_string(),
            "j/chk-3/a/0/keyed/MANIFEST-5".to_string(), // goes with its checkpoint's directory
            "j/sharedfoo/3.sst".to_string(),
        ];
        assert_eq!(unreferenced_shared_files(candidates, &referenced, "j/shared"), vec!["j/shared/a/0/x/2.sst"]);
    }
    use crate::job::descriptors::tests::demo_job;
    use weir_common::checkpoint::{
        DistributionMode, FileHandle, OperatorStateHandle, OperatorSubtaskState, StateMetaInfo,
    };

    fn settings(interval: Option<u64>, min_pause: u64, tolerable: Option<u32>) -> CheckpointSettings {
        CheckpointSettings {
            interval_ms: interval,
            timeout_ms: 1000,
            min_pause_ms: min_pause,
            max_concurrent: 1,
            retained: 2,
            incremental: true,
            tolerable_failures: tolerable,
        }
    }

    const RUNNING: TaskReadiness = TaskReadiness { all_running: true, all_end_of_input: false };
    const AT_END: TaskReadiness = TaskReadiness { all_running: true, all_end_of_input: true };
    const A1: AttemptNumber = AttemptNumber(1);

    fn key(v: u32, s: u32) -> TaskKey {
        (VertexId(v), SubtaskIndex(s))
    }

    fn snap(job: &JobId, id: u64, v: u32, s: u32, uid: &str) -> TaskSnapshot {
        let mut operators = BTreeMap::new();
        operators.insert(
            uid.to_string(),
            OperatorSubtaskState {
                subtask: SubtaskIndex(s),
                keyed: None,
                operator_state: Some(OperatorStateHandle {
                    file: FileHandle { path: format!("{job}/chk-{id}/{uid}/{s}/opstate"), size: 10 },
                    states: vec![],
                }),
                end_of_input: false,
                watermark: None,
            },
        );
        TaskSnapshot { vertex: VertexId(v), subtask: SubtaskIndex(s), operators, uploaded_bytes: 4 }
    }

    #[test]
    fn one_operator_state_over_the_limit_summed_over_subtasks_declines() {
        let job = JobId("j".into());
        let mut c = CheckpointCoordinator::new(settings(Some(100), 0, None), A1, 0);
        c.begin(CheckpointId(1), 1, BTreeSet::from([key(0, 0), key(0, 1)]), false, None);
        for s in 0..2 {
            let mut snapshot = snap(&job, 1, 0, s, "src");
            let h = snapshot.operators.get_mut("src").unwrap().operator_state.as_mut().unwrap();
            h.states.push(StateMetaInfo::inline("splits", DistributionMode::SplitDistribute, vec![0, 1, 2], 600));
            h.states.push(StateMetaInfo::inline("small", DistributionMode::SplitDistribute, vec![0], 10));
            c.acknowledge(A1, CheckpointId(1), key(0, s), snapshot);
        }
        let pending = c.take_pending().unwrap();
        assert_eq!(operator_state_over_limit(&job, &pending, 1200), None, "at the limit is allowed");
        let reason = operator_state_over_limit(&job, &pending, 1199).unwrap();
        assert!(
            reason.contains("job j: operator state \"splits\" of operator \"src\" holds 6 elements, 1200 bytes"),
            "{reason}"
        );
    }

    #[test]
    fn trigger_timing_with_interval_and_min_pause() {
        let mut c = CheckpointCoordinator::new(settings(Some(100), 250, None), A1, 1000);
        assert_eq!(c.decide_trigger(1050, RUNNING), TriggerDecision::Wait, "interval since deployment not over");
        assert_eq!(
            c.decide_trigger(1100, TaskReadiness { all_running: false, all_end_of_input: false }),
            TriggerDecision::Wait
        );
        assert_eq!(c.decide_trigger(1100, RUNNING), TriggerDecision::Periodic);
        c.begin(CheckpointId(1), 1100, BTreeSet::from([key(0, 0)]), false, None);
        assert_eq!(c.decide_trigger(1300, RUNNING), TriggerDecision::Wait, "one in flight at most");
        c.take_pending();
        c.record_completion(CheckpointId(1), 1300, false);
        assert_eq!(c.decide_trigger(1400, RUNNING), TriggerDecision::Wait, "min pause after completion");
        assert_eq!(c.decide_trigger(1550, RUNNING), TriggerDecision::Periodic);
        // No interval: only the final checkpoint is ever triggered, at once.
        let c = CheckpointCoordinator::new(settings(None, 0, None), A1, 0);
        assert_eq!(c.decide_trigger(1_000_000, RUNNING), TriggerDecision::Wait);
        assert_eq!(c.decide_trigger(1, AT_END), TriggerDecision::Final);
    }

    #[test]
    fn final_checkpoint_rules() {
        let mut c = CheckpointCoordinator::new(settings(Some(10_000), 5000, None), A1, 0);
        c.begin(CheckpointId(1), 1, BTreeSet::from([key(0, 0)]), false, None);
        assert_eq!(c.decide_trigger(2, AT_END), TriggerDecision::Wait, "after the one in flight");
        c.take_pending();
        assert!(!c.record_failure(3, true));
        assert_eq!(c.decide_trigger(4, AT_END), TriggerDecision::Wait, "short pause before retrying");
        assert_eq!(c.decide_trigger(3 + FINAL_RETRY_DELAY_MS, AT_END), TriggerDecision::Final);
        c.begin(CheckpointId(2), 600, BTreeSet::from([key(0, 0)]), true, None);
        c.take_pending();
        c.record_completion(CheckpointId(2), 700, true);
        assert_eq!(c.final_completed(), Some(CheckpointId(2)));
        assert_eq!(c.decide_trigger(100_000, AT_END), TriggerDecision::Wait, "nothing after the final checkpoint");
    }

    #[test]
    fn completion_only_when_all_acks_arrived_and_stale_acks_dropped() {
        let job = JobId("j".into());
        let mut c = CheckpointCoordinator::new(settings(Some(1), 0, None), AttemptNumber(2), 0);
        assert_eq!(
            c.acknowledge(AttemptNumber(2), CheckpointId(1), key(0, 0), snap(&job, 1, 0, 0, "a")),
            AckOutcome::Dropped("no checkpoint in flight")
        );
        c.begin(CheckpointId(5), 10, BTreeSet::from([key(0, 0), key(0, 1), key(1, 0)]), false, None);
        assert!(matches!(
            c.acknowledge(AttemptNumber(1), CheckpointId(5), key(0, 0), snap(&job, 5, 0, 0, "a")),
            AckOutcome::Dropped(_)
        ));
        assert!(matches!(
            c.acknowledge(AttemptNumber(2), CheckpointId(4), key(0, 0), snap(&job, 4, 0, 0, "a")),
            AckOutcome::Dropped(_)
        ));
        assert!(matches!(
            c.acknowledge(AttemptNumber(2), CheckpointId(5), key(7, 0), snap(&job, 5, 7, 0, "a")),
            AckOutcome::Dropped(_)
        ));
        assert_eq!(
            c.acknowledge(AttemptNumber(2), CheckpointId(5), key(0, 0), snap(&job, 5, 0, 0, "a")),
            AckOutcome::Pending { remaining: 2 }
        );
        assert!(matches!(
            c.acknowledge(AttemptNumber(2), CheckpointId(5), key(0, 0), snap(&job, 5, 0, 0, "a")),
            AckOutcome::Dropped("repeated acknowledgement")
        ));
        assert_eq!(
            c.acknowledge(AttemptNumber(2), CheckpointId(5), key(1, 0), snap(&job, 5, 1, 0, "b")),
            AckOutcome::Pending { remaining: 1 }
        );
        assert!(c.is_pending(AttemptNumber(2), CheckpointId(5)));
        assert!(!c.is_pending(AttemptNumber(1), CheckpointId(5)));
        assert_eq!(
            c.acknowledge(AttemptNumber(2), CheckpointId(5), key(0, 1), snap(&job, 5, 0, 1, "a")),
            AckOutcome::Complete
        );
        let p = c.take_pending().unwrap();
        assert_eq!(p.uploaded_bytes(), 12);
        assert_eq!(c.expired(100_000), None);
    }

    #[test]
    fn expiry_and_tolerable_failures() {
        let mut c = CheckpointCoordinator::new(settings(Some(1), 0, Some(1)), A1, 0);
        c.begin(CheckpointId(1), 100, BTreeSet::new(), false, None);
        assert_eq!(c.expired(1099), None);
        assert_eq!(c.expired(1100), Some(CheckpointId(1)));
        c.take_pending();
        assert!(!c.record_failure(1100, true), "one failure is tolerated");
        assert!(!c.record_failure(1200, false), "aborts do not count");
        assert!(c.record_failure(1300, true), "the second consecutive failure is one too many");
        c.record_completion(CheckpointId(3), 1400, false);
        assert_eq!(c.consecutive_failures(), 0);
        assert!(!over_tolerance(1000, None), "unlimited by default");
        assert!(over_tolerance(1, Some(0)));
    }

    #[test]
    fn metadata_from_acks() {
        let job = demo_job();
        let graph = ExecutionGraph::build(&job);
        let id = JobId("j".into());
        let mut c = CheckpointCoordinator::new(job.checkpointing.clone(), A1, 0);
        let all: BTreeSet<TaskKey> = [key(0, 0), key(0, 1), key(1, 0), key(1, 1), key(2, 0)].into();
        c.begin(CheckpointId(3), 5, all, true, None);
        for (v, s, uid) in [(0, 0, "events"), (0, 1, "events"), (1, 0, "counts"), (1, 1, "counts"), (2, 0, "out")] {
            c.acknowledge(A1, CheckpointId(3), key(v, s), snap(&id, 3, v, s, uid));
        }
        let p = c.take_pending().unwrap();
        let m = build_metadata(&id, &job, &graph, &p).unwrap();
        assert!(m.is_final);
        assert_eq!(m.operators["counts"].parallelism, 2);
        assert_eq!(m.operators["out"].subtasks.len(), 1);
        assert_eq!(m.full_size(), 50);
        assert_eq!(m.timestamp_ms, 5);

        // A task claiming an operator it does not run, or a missing subtask, fails the checkpoint.
        let mut bad = p.clone();
        bad.acks.insert(key(2, 0), snap(&id, 3, 2, 0, "counts"));
        assert!(build_metadata(&id, &job, &graph, &bad).unwrap_err().to_string().contains("does not run"));
        let mut missing = p.clone();
        missing.acks.remove(&key(1, 1));
        assert!(build_metadata(&id, &job, &graph, &missing).unwrap_err().to_string().contains("1 of its 2 subtasks"));
        let mut unsafe_path = p;
        unsafe_path.acks.insert(key(2, 0), snap(&JobId("other".into()), 3, 2, 0, "out"));
        assert!(build_metadata(&id, &job, &graph, &unsafe_path).is_err());
    }

    #[test]
    fn subsumption_keeps_last_n_and_never_the_latest() {
        let ids: Vec<CheckpointId> = [3, 1, 2, 5].into_iter().map(CheckpointId).collect();
        assert_eq!(subsumed(&ids, 2), vec![CheckpointId(1), CheckpointId(2)]);
        assert_eq!(subsumed(&ids, 1), vec![CheckpointId(1), CheckpointId(2), CheckpointId(3)]);
        assert_eq!(subsumed(&ids, 0), vec![CheckpointId(1), CheckpointId(2), CheckpointId(3)], "the latest stays");
        assert!(subsumed(&ids, 10).is_empty());
        assert!(subsumed(&[], 1).is_empty());
    }

    #[test]
    fn cleanup_spares_referenced_files() {
        let referenced: HashSet<String> = ["j/chk-2/a/0/sst1".to_string(), "j/shared/x".to_string()].into();
        assert_eq!(plan_dir_cleanup("j/chk-1", &referenced, None), Some(DirCleanup::WholeDir("j/chk-1".into())));
        assert_eq!(plan_dir_cleanup("j/chk-2", &referenced, None), None, "needs a listing");
        let listing =
            vec!["j/chk-2/_metadata".to_string(), "j/chk-2/a/0/sst1".to_string(), "j/chk-2/a/0/sst2".to_string()];
        assert_eq!(
            plan_dir_cleanup("j/chk-2", &referenced, Some(&listing)),
            Some(DirCleanup::Files(vec!["j/chk-2/_metadata".into(), "j/chk-2/a/0/sst2".into()]))
        );
        assert!(plan_dir_cleanup("j/chk-1", &referenced, None).is_some(), "chk-1 is not a prefix of chk-12");
        let r12: HashSet<String> = ["j/chk-12/f".to_string()].into();
        assert_eq!(plan_dir_cleanup("j/chk-1", &r12, None), Some(DirCleanup::WholeDir("j/chk-1".into())));
    }
}
