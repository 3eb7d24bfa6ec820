//! Completing a checkpoint or a savepoint, one path for both: the figures a completion records
//! ([`Completion::of`]) and writing its `_metadata` where it belongs ([`write_metadata`]) — the job's checkpoint
//! directory, or the savepoint's own. The job actor then records the completion in the job store before it
//! notifies anyone.

use crate::checkpoint::coordinator::PendingCheckpoint;
use bytes::Bytes;
use weir_common::checkpoint::{paths, CheckpointMetadata, CheckpointOutcome, MetadataError};
use weir_common::ids::{CheckpointId, JobId};
use weir_common::service::store::{Store, StoreError, StoreOptions};

/// What a completed checkpoint records of itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Its id.
    pub id: CheckpointId,
    /// When it completed, ms since the epoch.
    pub now_ms: u64,
    /// Bytes of state it covers, reused files included.
    pub full_size_bytes: u64,
    /// Bytes its tasks uploaded for it.
    pub uploaded_bytes: u64,
    /// From trigger to completion, ms.
    pub duration_ms: u64,
}

impl Completion {
    /// The figures of `pending`, whose `_metadata` is `meta`, completing at `now_ms`.
    pub fn of(pending: &PendingCheckpoint, meta: &CheckpointMetadata, now_ms: u64) -> Completion {
        Completion {
            id: pending.id,
            now_ms,
            full_size_bytes: meta.full_size(),
            uploaded_bytes: pending.uploaded_bytes(),
            duration_ms: now_ms.saturating_sub(pending.trigger_time_ms),
        }
    }
}

/// What the tasks are told of a completed checkpoint: a stop-with-savepoint finishes them (also when it is the
/// final checkpoint), the final checkpoint finishes those that consumed all their input.
pub fn completed_outcome(is_final: bool, stop: bool) -> CheckpointOutcome {
    match (is_final, stop) {
        (_, true) => CheckpointOutcome::Stop,
        (true, false) => CheckpointOutcome::Final,
        (false, false) => CheckpointOutcome::Completed,
    }
}

/// Where a completed checkpoint's `_metadata` is written.
#[derive(Clone, Copy, Debug)]
pub enum MetadataTarget<'a> {
    /// A checkpoint of the job: its directory under the job's checkpoint root.
    Checkpoint {
        /// The checkpoint root.
        store: &'a Store,
        /// The job.
        job_id: &'a JobId,
    },
    /// A savepoint: the directory the user named (or the default one), a store of its own.
    Savepoint {
        /// The savepoint's directory.
        url: &'a str,
        /// How to open it.
        options: &'a StoreOptions,
    },
}

impl MetadataTarget<'_> {
    /// What the target is called in errors.
    fn name(&self) -> &'static str {
        match self {
            MetadataTarget::Checkpoint { .. } => "_metadata",
            MetadataTarget::Savepoint { .. } => "the savepoint's _metadata",
        }
    }
}

/// A `_metadata` that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum MetadataWriteError {
    /// The metadata does not encode.
    #[error(transparent)]
    Encode(#[from] MetadataError),
    /// The store could not be opened or refused the file.
    #[error("cannot write {target}: {source}")]
    Store {
        /// What was written, as [`MetadataTarget`] names it.
        target: &'static str,
        /// Why not.
        #[source]
        source: StoreError,
    },
}

/// Writes `meta` as the `_metadata` of checkpoint `id` at `target`, never over an existing file; returns its path
/// (relative to the checkpoint root for a checkpoint, to the savepoint's directory for a savepoint), or why not.
pub async fn write_metadata(
    target: MetadataTarget<'_>,
    id: CheckpointId,
    meta: &CheckpointMetadata,
) -> Result<String, MetadataWriteError> {
    let bytes = Bytes::from(meta.to_bytes()?);
    let name = target.name();
    let failed = |source| MetadataWriteError::Store { target: name, source };
    let written = match target {
        MetadataTarget::Checkpoint { store, job_id } => {
            let path = paths::metadata(job_id, id);
            store.put_new(&path, bytes).await.map(|_| path)
        }
        MetadataTarget::Savepoint { url, options } => {
            let store = Store::open(url, options).map_err(failed)?;
            store.put_new(paths::METADATA_FILE, bytes).await.map(|_| paths::METADATA_FILE.to_string())
        }
    };
    written.map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_finishes_the_tasks_whether_or_not_it_is_final() {
        assert_eq!(completed_outcome(false, false), CheckpointOutcome::Completed);
        assert_eq!(completed_outcome(true, false), CheckpointOutcome::Final);
        assert_eq!(completed_outcome(false, true), CheckpointOutcome::Stop);
        assert_eq!(completed_outcome(true, true), CheckpointOutcome::Stop);
    }
}
