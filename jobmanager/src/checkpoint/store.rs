//! The job manager's object-store work for a job's checkpoints, driven by the decisions of
//! [`crate::checkpoint::coordinator`]: picking the checkpoint to restore from (falling back past unreadable ones), deleting
//! the directories and shared files of checkpoints no longer needed, and sweeping what failed ones left.

use crate::checkpoint::coordinator::{
    plan_dir_cleanup, referenced_files, stale_checkpoint_dirs, sweep_candidates, unreferenced_shared_files, DirCleanup,
    RetainedCheckpoint,
};
use std::collections::BTreeMap;
use weir_common::checkpoint::{paths, CheckpointMetadata};
use weir_common::ids::{CheckpointId, JobId};
use weir_common::service::store::{Store, StoreError};

/// Deletes what a job's checkpoints left behind that no retained checkpoint references: shared files, and the
/// directories of checkpoints that are not retained, among those [`sweep_candidates`] picks from a listing of
/// the job's directory (with `min_age_ms`, only files old enough to be out of any checkpoint in flight).
pub async fn sweep_job_files(
    store: &Store,
    job_id: &JobId,
    retained: &[RetainedCheckpoint],
    known: &BTreeMap<CheckpointId, std::sync::Arc<CheckpointMetadata>>,
    min_age_ms: Option<u64>,
) {
    let listing = match store.list_with_modified(&job_id.to_string()).await {
        Ok(l) => l,
        Err(error) => {
            tracing::warn!(job_id = %job_id, %error, "cannot list the job's checkpoint files to sweep");
            return;
        }
    };
    let candidates = sweep_candidates(listing, weir_common::now_ms(), min_age_ms);
    let stale = stale_checkpoint_dirs(job_id, &candidates, retained);
    let shared_prefix = format!("{}/", paths::shared_dir(job_id));
    let shared: Vec<String> = candidates.into_iter().filter(|p| p.starts_with(&shared_prefix)).collect();
    tracing::debug!(job_id = %job_id, shared = shared.len(), stale_checkpoints = stale.len(), "sweeping");
    delete_checkpoint_dirs(store, job_id, retained, known, &stale, shared).await;
}

/// The checkpoint a deployment restores from.
#[derive(Clone, Debug, PartialEq)]
pub struct RestorePoint {
    /// The retained checkpoint.
    pub checkpoint: RetainedCheckpoint,
    /// Its `_metadata`.
    pub metadata: CheckpointMetadata,
    /// Newer retained checkpoints that were skipped, with the reason.
    pub skipped: Vec<(CheckpointId, String)>,
}

/// Why no checkpoint could be restored.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// Every retained checkpoint's `_metadata` is missing or corrupt.
    #[error("no retained checkpoint can be restored: {}", describe(.0))]
    NoneReadable(Vec<(CheckpointId, String)>),
    /// The object store could not be read; try again later.
    #[error("cannot read checkpoint {checkpoint}: {source}")]
    Unavailable {
        /// The checkpoint being read.
        checkpoint: CheckpointId,
        /// The store error.
        #[source]
        source: StoreError,
    },
}

fn describe(tried: &[(CheckpointId, String)]) -> String {
    tried.iter().map(|(id, why)| format!("checkpoint {id}: {why}")).collect::<Vec<_>>().join("; ")
}

/// Picks the newest retained checkpoint whose `_metadata` is readable and belongs to this job, falling back
/// to older ones when it is missing or corrupt (each skip is logged as a warning). `Ok(None)` when nothing
/// is retained (deploy from scratch).
pub async fn load_restore_point(
    store: &Store,
    job_id: &JobId,
    retained: &[RetainedCheckpoint],
) -> Result<Option<RestorePoint>, RestoreError> {
    let mut candidates: Vec<&RetainedCheckpoint> = retained.iter().collect();
    candidates.sort_by_key(|c| std::cmp::Reverse(c.id));
    let mut skipped = Vec::new();
    for c in candidates {
        let path = if c.metadata_path.is_empty() { paths::metadata(job_id, c.id) } else { c.metadata_path.clone() };
        let why = match store.get(&path).await {
            Ok(bytes) => match CheckpointMetadata::from_bytes(&bytes) {
                Ok(m) if m.job_id != *job_id || m.checkpoint_id != c.id => {
                    format!("{path} describes checkpoint {} of job {}", m.checkpoint_id, m.job_id)
                }
                Ok(metadata) => return Ok(Some(RestorePoint { checkpoint: c.clone(), metadata, skipped })),
                Err(e) => format!("{path}: {e}"),
            },
            Err(StoreError::NotFound(p)) => format!("{p} is missing"),
            Err(source) => return Err(RestoreError::Unavailable { checkpoint: c.id, source }),
        };
        tracing::warn!(job_id = %job_id, checkpoint_id = c.id.0, reason = %why, "cannot restore from checkpoint, falling back to the previous one");
        skipped.push((c.id, why));
    }
    if skipped.is_empty() {
        Ok(None)
    } else {
        Err(RestoreError::NoneReadable(skipped))
    }
}

/// Deletes the directories of checkpoints that are no longer needed (subsumed or failed) without touching a
/// retained checkpoint or any file a retained checkpoint references. `known` holds the metadata of retained
/// checkpoints already in memory; the others are read from the store. Errors are logged, never returned:
/// a leftover file is harmless, a deleted one that is still needed is not.
pub async fn delete_checkpoint_dirs(
    store: &Store,
    job_id: &JobId,
    retained: &[RetainedCheckpoint],
    known: &BTreeMap<CheckpointId, std::sync::Arc<CheckpointMetadata>>,
    ids: &[CheckpointId],
    candidates: Vec<String>,
) {
    let mut metas = Vec::new();
    let mut complete = true;
    for r in retained {
        if let Some(m) = known.get(&r.id) {
            metas.push(m.clone());
            continue;
        }
        match store
            .get(&r.metadata_path)
            .await
            .map_err(|e| e.to_string())
            .and_then(|b| CheckpointMetadata::from_bytes(&b).map_err(|e| e.to_string()))
        {
            Ok(m) => metas.push(std::sync::Arc::new(m)),
            Err(error) => {
                tracing::warn!(job_id = %job_id, checkpoint_id = r.id.0, %error, "cannot read a retained checkpoint's metadata; keeping the files of older checkpoints");
                complete = false;
            }
        }
    }
    let referenced = referenced_files(metas.iter().map(|m| m.as_ref()));
    // The checkpoints being deleted name their shared files in their own `_metadata` (if they completed);
    // read it before the directory goes, so that nothing leaks even after a job-manager restart.
    let mut candidates = candidates;
    for &id in ids {
        if retained.iter().any(|r| r.id == id) {
            continue;
        }
        if let Ok(m) = store
            .get(&paths::metadata(job_id, id))
            .await
            .map_err(|e| e.to_string())
            .and_then(|b| CheckpointMetadata::from_bytes(&b).map_err(|e| e.to_string()))
        {
            candidates.extend(referenced_files([&m]));
        }
    }
    if complete {
        for path in unreferenced_shared_files(candidates, &referenced, &paths::shared_dir(job_id)) {
            match store.delete(&path).await {
                Ok(()) => tracing::debug!(job_id = %job_id, path = %path, "deleted shared file"),
                Err(error) => tracing::warn!(job_id = %job_id, path = %path, %error, "cannot delete shared file"),
            }
        }
    }
    for &id in ids {
        if retained.iter().any(|r| r.id == id) {
            continue;
        }
        let dir = paths::checkpoint_dir(job_id, id);
        let result = if !complete {
            store.delete(&paths::metadata(job_id, id)).await
        } else {
            let plan = match plan_dir_cleanup(&dir, &referenced, None) {
                Some(plan) => Ok(plan),
                None => store.list(&dir).await.map(|listing| {
                    plan_dir_cleanup(&dir, &referenced, Some(&listing)).unwrap_or(DirCleanup::Files(Vec::new()))
                }),
            };
            match plan {
                Ok(DirCleanup::WholeDir(d)) => store.delete_dir(&d).await,
                Ok(DirCleanup::Files(files)) => {
                    let mut r = Ok(());
                    for f in files {
                        if let Err(e) = store.delete(&f).await {
                            r = Err(e);
                        }
                    }
                    r
                }
                Err(e) => Err(e),
            }
        };
        match result {
            Ok(()) => tracing::debug!(job_id = %job_id, checkpoint_id = id.0, "deleted checkpoint directory"),
            Err(error) => {
                tracing::warn!(job_id = %job_id, checkpoint_id = id.0, %error, "cannot delete checkpoint directory")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use weir_common::checkpoint::{
        FileHandle, OperatorCheckpoint, OperatorStateHandle, OperatorSubtaskState, METADATA_FORMAT_VERSION,
    };
    use weir_common::ids::SubtaskIndex;
    use weir_common::service::store::StoreOptions;

    fn meta(job: &JobId, id: u64) -> CheckpointMetadata {
        CheckpointMetadata {
            format_version: METADATA_FORMAT_VERSION,
            job_id: job.clone(),
            checkpoint_id: CheckpointId(id),
            timestamp_ms: id,
            max_parallelism: 128,
            is_final: false,
            operators: BTreeMap::new(),
            savepoint: None,
        }
    }

    fn retained(job: &JobId, id: u64) -> RetainedCheckpoint {
        RetainedCheckpoint {
            id: CheckpointId(id),
            metadata_path: paths::metadata(job, CheckpointId(id)),
            timestamp_ms: id,
            full_size_bytes: 0,
            uploaded_bytes: 0,
            is_final: false,
        }
    }

    #[tokio::test]
    async fn restore_falls_back_when_newest_metadata_is_corrupt_or_missing() {
        let store = Store::open("memory:///", &StoreOptions::default()).unwrap();
        let job = JobId("j1".into());
        assert!(load_restore_point(&store, &job, &[]).await.unwrap().is_none());

        let r = vec![retained(&job, 1), retained(&job, 2), retained(&job, 3)];
        store
            .put_new(&paths::metadata(&job, CheckpointId(1)), Bytes::from(meta(&job, 1).to_bytes().unwrap()))
            .await
            .unwrap();
        store.put_new(&paths::metadata(&job, CheckpointId(2)), Bytes::from_static(b"{ corrupt")).await.unwrap();
        // Checkpoint 3's _metadata is missing.
        let p = load_restore_point(&store, &job, &r).await.unwrap().unwrap();
        assert_eq!(p.checkpoint.id, CheckpointId(1));
        assert_eq!(p.metadata, meta(&job, 1));
        assert_eq!(p.skipped.iter().map(|s| s.0).collect::<Vec<_>>(), vec![CheckpointId(3), CheckpointId(2)]);

        // The newest readable one wins.
        store
            .put_new(&paths::metadata(&job, CheckpointId(3)), Bytes::from(meta(&job, 3).to_bytes().unwrap()))
            .await
            .unwrap();
        let p = load_restore_point(&store, &job, &r).await.unwrap().unwrap();
        assert_eq!(p.checkpoint.id, CheckpointId(3));
        assert!(p.skipped.is_empty());

        // Metadata of another checkpoint under this name is not trusted; nothing readable is an error.
        let other = JobId("j2".into());
        store
            .put_new(&paths::metadata(&other, CheckpointId(1)), Bytes::from(meta(&job, 1).to_bytes().unwrap()))
            .await
            .unwrap();
        let err = load_restore_point(&store, &other, &[retained(&other, 1)]).await.unwrap_err();
        assert!(matches!(err, RestoreError::NoneReadable(ref v) if v.len() == 1), "{err}");
        assert!(err.to_string().contains("checkpoint 1"), "{err}");
    }

    #[tokio::test]
    async fn deleting_dirs_spares_retained_files() {
        let store = Store::open("memory:///", &StoreOptions::default()).unwrap();
        let job = JobId("j".into());
        for p in ["j/chk-1/_metadata", "j/chk-1/a/0/x", "j/chk-2/a/0/shared-sst", "j/chk-2/a/0/y", "j/chk-2/_metadata"]
        {
            store.put(p, Bytes::from_static(b"1")).await.unwrap();
        }
        let mut m3 = meta(&job, 3);
        m3.operators.insert(
            "a".into(),
            OperatorCheckpoint {
                signature: None,
                state_config: Default::default(),
                kind: String::new(),
                parallelism: 1,
                subtasks: vec![OperatorSubtaskState {
                    subtask: SubtaskIndex(0),
                    keyed: None,
                    operator_state: Some(OperatorStateHandle {
                        file: FileHandle { path: "j/chk-2/a/0/shared-sst".into(), size: 1 },
                        states: vec![],
                    }),
                    end_of_input: false,
                    watermark: None,
                }],
            },
        );
        store.put("j/chk-3/_metadata", Bytes::from(m3.to_bytes().unwrap())).await.unwrap();
        let retained = vec![retained(&job, 3)];
        // Checkpoint 3 is retained: asking to delete it does nothing.
        let ids = [CheckpointId(1), CheckpointId(2), CheckpointId(3)];
        delete_checkpoint_dirs(&store, &job, &retained, &BTreeMap::new(), &ids, Vec::new()).await;
        let mut left = store.list("j").await.unwrap();
        left.sort();
        assert_eq!(left, vec!["j/chk-2/a/0/shared-sst".to_string(), "j/chk-3/_metadata".to_string()]);
    }
}
