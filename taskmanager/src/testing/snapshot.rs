//! A snapshot of one operator, as the harness takes and restores it.

use crate::api::error::OperatorError;
use weir_common::checkpoint::{OperatorCheckpoint, OperatorSubtaskState};
use weir_common::ids::CheckpointId;
use weir_common::service::store::Store;

/// A checkpoint of one operator: what each of its subtasks stored, in an object store of the harness. Restore
/// it with [`super::Harness::restore`], at its parallelism or another.
#[derive(Clone)]
pub struct Snapshot {
    pub(super) id: CheckpointId,
    pub(super) store: Store,
    pub(super) max_parallelism: u32,
    pub(super) checkpoint: OperatorCheckpoint,
}

impl Snapshot {
    /// The checkpoint id it was taken at.
    pub fn id(&self) -> CheckpointId {
        self.id
    }

    /// The parallelism of the subtasks it was taken from.
    pub fn parallelism(&self) -> u32 {
        self.checkpoint.parallelism
    }

    /// What each subtask stored (key-group ranges, watermarks, operator-state elements, end of input).
    pub fn subtasks(&self) -> &[OperatorSubtaskState] {
        &self.checkpoint.subtasks
    }

    /// One snapshot of the subtasks of `parts` (each taken by a harness running one subtask of the same
    /// parallelism, as the job manager puts a checkpoint together from its tasks' acknowledgements).
    pub fn combine(parts: &[Snapshot]) -> Result<Snapshot, OperatorError> {
        let Some(first) = parts.first() else {
            return Err(OperatorError::Records("no snapshot to combine".into()));
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| OperatorError::io("starting a runtime", e))?;
        let mut combined = Snapshot {
            checkpoint: OperatorCheckpoint { subtasks: Vec::new(), ..first.checkpoint.clone() },
            ..first.clone()
        };
        for part in parts {
            if (part.max_parallelism, part.checkpoint.parallelism) != (first.max_parallelism, first.parallelism()) {
                return Err(OperatorError::Records("snapshots of different parallelisms or key groups".into()));
            }
            for state in &part.checkpoint.subtasks {
                if combined.checkpoint.subtasks.iter().any(|s| s.subtask == state.subtask) {
                    return Err(OperatorError::Records(format!("subtask {} is in two snapshots", state.subtask.0)));
                }
                if part.store.url() != first.store.url() {
                    // Each harness writes under its own paths, so the files can go into one store as they are.
                    for f in state.files() {
                        let copy = async {
                            let bytes = part.store.get(&f.path).await?;
                            first.store.put(&f.path, bytes).await
                        };
                        rt.block_on(copy).map_err(|e| OperatorError::Records(e.to_string()))?;
                    }
                }
                combined.checkpoint.subtasks.push(state.clone());
            }
        }
        combined.checkpoint.subtasks.sort_by_key(|s| s.subtask);
        Ok(combined)
    }
}
