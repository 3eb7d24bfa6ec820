//! The job store: what the job manager persists about every job, read back when a job manager (restarted,
//! or a new HA leader) resumes the jobs.
//!
//! - Without HA, one JSON file per job under `<data_dir>/jobs/<job-id>.json`, replaced atomically (temporary
//!   file, fsync, rename) whenever something important changes ([`LocalJobStore`]).
//! - With etcd, one key per job under `/weir/<cluster-id>/jobs/` ([`EtcdJobStore`]): every write is a
//!   transaction conditioned on the writer still leading at its epoch and on the record's revision being the
//!   one it last wrote or read (compare-and-swap), so a deposed leader changes nothing, and the checkpoint id
//!   counter (`next_checkpoint_id`, persisted before a trigger uses it) is never handed out twice. A record
//!   holds the spec, the lifecycle state, the counter, the pointers to the retained checkpoints (their
//!   `_metadata` stays in the object store) and a bounded history; one that would exceed
//!   [`ETCD_RECORD_LIMIT`] is refused rather than sent (etcd refuses requests over 1.5 MiB).

use crate::coordinator::{CheckpointHistoryEntry, CheckpointStatus, RetainedCheckpoint, HISTORY_LIMIT};
use crate::lifecycle::{JobState, RestartHistory};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use weir_common::checkpoint::RestoreMode;
use weir_common::ids::{AttemptNumber, CheckpointId, JobId};
use weir_common::spec::ResolvedJob;
use weir_proto as pb;

/// Version of the job file format written by this build.
pub const JOB_FILE_VERSION: u32 = 1;

/// A job store failure.
#[derive(Debug, thiserror::Error)]
pub enum JobStoreError {
    /// A file or directory cannot be read or written.
    #[error("job store {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// This job manager no longer leads: the write was refused.
    #[error("job store: not written: this job manager is no longer the leader (epoch {epoch})")]
    Fenced {
        /// The epoch the writer led at.
        epoch: u64,
    },
    /// etcd cannot be reached or refused.
    #[error("job store: {0}")]
    Etcd(String),
    /// A record too large for etcd.
    #[error("job store: job {job}'s record is {bytes} bytes, more than etcd takes ({limit}); lower the job's retained checkpoints")]
    TooLarge {
        /// The job.
        job: JobId,
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A job file is not readable as a job.
    #[error("job store {path}: unreadable job file: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

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
            state: self.state.as_str().to_string(),
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
        }
    }
}

/// Largest job record written to etcd (its request limit is 1.5 MiB; the rest is headroom).
pub const ETCD_RECORD_LIMIT: usize = 1 << 20;

/// Where job records live.
#[derive(Clone)]
pub enum JobStore {
    /// Files in the data directory.
    Local(LocalJobStore),
    /// Keys in etcd, written by the leader only.
    Etcd(Box<EtcdJobStore>),
}

impl JobStore {
    /// Writes a job's record.
    pub async fn save(&self, record: &JobRecord) -> Result<(), JobStoreError> {
        match self {
            JobStore::Local(s) => {
                let (s, record) = (s.clone(), record.clone());
                tokio::task::spawn_blocking(move || s.save(&record))
                    .await
                    .map_err(|e| JobStoreError::Etcd(format!("job store writer panicked: {e}")))?
            }
            JobStore::Etcd(s) => s.save(record).await,
        }
    }

    /// Reads every record, oldest submission first; records that cannot be read are returned apart.
    pub async fn load_all(&self) -> Result<(Vec<JobRecord>, Vec<JobStoreError>), JobStoreError> {
        match self {
            JobStore::Local(s) => {
                let s = s.clone();
                tokio::task::spawn_blocking(move || s.load_all())
                    .await
                    .map_err(|e| JobStoreError::Etcd(format!("job store reader panicked: {e}")))?
            }
            JobStore::Etcd(s) => s.load_all().await,
        }
    }
}

/// The job records of an HA cluster in etcd, as one leader term writes them.
#[derive(Clone)]
pub struct EtcdJobStore {
    term: crate::ha::Term,
    /// The revision of each job's key as this leader last wrote or read it (0: absent).
    revisions: std::sync::Arc<parking_lot::Mutex<std::collections::HashMap<JobId, i64>>>,
}

impl EtcdJobStore {
    /// The store of one leader term.
    pub fn new(term: crate::ha::Term) -> EtcdJobStore {
        EtcdJobStore { term, revisions: Default::default() }
    }

    fn key(&self, id: &JobId) -> String {
        self.term.etcd().key(&format!("jobs/{id}"))
    }

    /// Writes a record if this term still leads and nobody else wrote it since.
    pub async fn save(&self, record: &JobRecord) -> Result<(), JobStoreError> {
        use etcd_client::{Compare, CompareOp, Txn, TxnOp};
        weir_common::fault::hit("job-store-save").await.map_err(|m| JobStoreError::Etcd(m.to_string()))?;
        if self.term.is_lost() {
            return Err(JobStoreError::Fenced { epoch: self.term.epoch });
        }
        let bytes = serde_json::to_vec(record)
            .map_err(|e| JobStoreError::Corrupt { path: PathBuf::from(self.key(&record.id)), reason: e.to_string() })?;
        if bytes.len() > ETCD_RECORD_LIMIT {
            return Err(JobStoreError::TooLarge {
                job: record.id.clone(),
                bytes: bytes.len(),
                limit: ETCD_RECORD_LIMIT,
            });
        }
        let key = self.key(&record.id);
        let expected = self.revisions.lock().get(&record.id).copied().unwrap_or(0);
        let txn = Txn::new()
            .when([self.term.fence(), Compare::mod_revision(key.clone(), CompareOp::Equal, expected)])
            .and_then([TxnOp::put(key.clone(), bytes, None)]);
        let etcd = self.term.etcd();
        let resp = etcd
            .call("writing a job record", |mut c| {
                let t = txn.clone();
                async move { c.txn(t).await }
            })
            .await
            .map_err(|e| JobStoreError::Etcd(e.to_string()))?;
        if !resp.succeeded() {
            return Err(JobStoreError::Fenced { epoch: self.term.epoch });
        }
        let revision = resp.header().map(|h| h.revision()).unwrap_or_default();
        self.revisions.lock().insert(record.id.clone(), revision);
        Ok(())
    }

    /// Reads every job record of the cluster.
    pub async fn load_all(&self) -> Result<(Vec<JobRecord>, Vec<JobStoreError>), JobStoreError> {
        let etcd = self.term.etcd();
        let prefix = etcd.key("jobs/");
        let resp = etcd
            .call("reading the job records", |mut c| {
                let p = prefix.clone();
                async move { c.get(p, Some(etcd_client::GetOptions::new().with_prefix())).await }
            })
            .await
            .map_err(|e| JobStoreError::Etcd(e.to_string()))?;
        let mut records = Vec::new();
        let mut errors = Vec::new();
        let mut revisions = self.revisions.lock();
        for kv in resp.kvs() {
            let path = PathBuf::from(String::from_utf8_lossy(kv.key()).to_string());
            match serde_json::from_slice::<JobRecord>(kv.value()) {
                Ok(r) if r.format_version == JOB_FILE_VERSION => {
                    revisions.insert(r.id.clone(), kv.mod_revision());
                    records.push(r);
                }
                Ok(r) => errors.push(JobStoreError::Corrupt {
                    path,
                    reason: format!("unsupported format version {}", r.format_version),
                }),
                Err(e) => errors.push(JobStoreError::Corrupt { path, reason: e.to_string() }),
            }
        }
        records.sort_by(|a, b| a.submit_time_ms.cmp(&b.submit_time_ms).then_with(|| a.id.cmp(&b.id)));
        Ok((records, errors))
    }
}

/// The directory of job files.
#[derive(Clone, Debug)]
pub struct LocalJobStore {
    dir: PathBuf,
}

impl LocalJobStore {
    /// Opens (creating it if needed) `<data_dir>/jobs`.
    pub fn open(data_dir: &Path) -> Result<LocalJobStore, JobStoreError> {
        let dir = data_dir.join("jobs");
        std::fs::create_dir_all(&dir).map_err(|source| JobStoreError::Io { path: dir.clone(), source })?;
        Ok(LocalJobStore { dir })
    }

    /// The file of a job.
    pub fn path_of(&self, id: &JobId) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Writes a job's file atomically: a reader sees the old or the new content, never a mix.
    pub fn save(&self, record: &JobRecord) -> Result<(), JobStoreError> {
        let path = self.path_of(&record.id);
        let tmp = self.dir.join(format!(".{}.json.tmp", record.id));
        let io = |source| JobStoreError::Io { path: path.clone(), source };
        weir_common::fault::hit_blocking("job-store-save").map_err(|m| io(std::io::Error::other(m)))?;
        let bytes = serde_json::to_vec_pretty(record)
            .map_err(|e| JobStoreError::Corrupt { path: path.clone(), reason: e.to_string() })?;
        {
            let mut f = std::fs::File::create(&tmp).map_err(io)?;
            f.write_all(&bytes).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, &path).map_err(io)?;
        // Make the rename itself durable; not every platform can open a directory, so this is best effort.
        if let Ok(d) = std::fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Reads one job file.
    pub fn load(&self, path: &Path) -> Result<JobRecord, JobStoreError> {
        let bytes = std::fs::read(path).map_err(|source| JobStoreError::Io { path: path.to_path_buf(), source })?;
        let record: JobRecord = serde_json::from_slice(&bytes)
            .map_err(|e| JobStoreError::Corrupt { path: path.to_path_buf(), reason: e.to_string() })?;
        if record.format_version != JOB_FILE_VERSION {
            return Err(JobStoreError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("unsupported format version {}", record.format_version),
            });
        }
        let expected = self.path_of(&record.id);
        if expected.file_name() != path.file_name() {
            return Err(JobStoreError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("the file holds job {}", record.id),
            });
        }
        Ok(record)
    }

    /// Reads every job file, oldest submission first; files that cannot be read are returned apart.
    pub fn load_all(&self) -> Result<(Vec<JobRecord>, Vec<JobStoreError>), JobStoreError> {
        let entries =
            std::fs::read_dir(&self.dir).map_err(|source| JobStoreError::Io { path: self.dir.clone(), source })?;
        let mut records = Vec::new();
        let mut errors = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| JobStoreError::Io { path: self.dir.clone(), source })?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            match self.load(&path) {
                Ok(r) => records.push(r),
                Err(e) => errors.push(e),
            }
        }
        records.sort_by(|a, b| a.submit_time_ms.cmp(&b.submit_time_ms).then_with(|| a.id.cmp(&b.id)));
        Ok((records, errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptors::tests::demo_job;

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalJobStore::open(dir.path()).unwrap();
        let mut r = JobRecord::new(JobId::random(), demo_job(), 42);
        r.state = JobState::Running;
        r.attempt = AttemptNumber(3);
        r.next_checkpoint_id = CheckpointId(8);
        r.retained.push(RetainedCheckpoint {
            id: CheckpointId(7),
            metadata_path: format!("{}/chk-7/_metadata", r.id),
            timestamp_ms: 5,
            full_size_bytes: 100,
            uploaded_bytes: 10,
            is_final: false,
        });
        for i in 0..(HISTORY_LIMIT as u64 + 5) {
            r.push_history(CheckpointHistoryEntry::in_progress(CheckpointId(i + 1), i, String::new(), false));
        }
        assert_eq!(r.history.len(), HISTORY_LIMIT);
        assert_eq!(r.history[0].id, CheckpointId(6), "oldest entries are dropped");
        store.save(&r).unwrap();
        r.restarts = 2;
        store.save(&r).unwrap();
        let mut other = JobRecord::new(JobId::random(), demo_job(), 1);
        other.state = JobState::Finished;
        store.save(&other).unwrap();
        std::fs::write(dir.path().join("jobs").join("broken.json"), b"{").unwrap();

        let (loaded, errors) = store.load_all().unwrap();
        assert_eq!(loaded, vec![other, r.clone()], "oldest submission first");
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().contains("broken.json"), "{}", errors[0]);
        let info = r.info();
        assert_eq!(info.state, "RUNNING");
        assert_eq!(info.last_completed_checkpoint, Some(7));
        assert_eq!(info.attempt, 3);
        assert_eq!(info.restarts, 2);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("jobs"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn records_without_restart_history_load() {
        let mut r = JobRecord::new(JobId::random(), demo_job(), 42);
        r.restarts = 3;
        let mut json = serde_json::to_value(&r).unwrap();
        json.as_object_mut().unwrap().remove("restart_history");
        let loaded: JobRecord = serde_json::from_value(json).unwrap();
        assert_eq!(loaded.restart_history, RestartHistory::default());
        assert_eq!(loaded, r);
    }
}
