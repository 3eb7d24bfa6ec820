//! What incremental checkpoints may reuse, shared by the task thread (a restore fills it, a completion
//! promotes) and its uploads (which read it and record what they uploaded).

use std::collections::BTreeMap;
use weir_common::checkpoint::FileHandle;
use weir_common::ids::CheckpointId;

/// Shareable snapshot files (by local name) per operator uid.
pub(super) type SharedFiles = BTreeMap<String, std::collections::HashMap<String, FileHandle>>;

/// What incremental checkpoints may reuse: the shareable files of the last completed checkpoint, and those
/// of snapshots uploaded but not yet known to be complete (promoted on the completion notification).
#[derive(Default)]
pub(super) struct Incremental {
    pub(super) confirmed: SharedFiles,
    pub(super) uploaded: BTreeMap<CheckpointId, SharedFiles>,
}

impl Incremental {
    /// Checkpoint `id` completed: its files become the ones to reuse; older unconfirmed uploads never will.
    pub(super) fn completed(&mut self, id: CheckpointId) {
        if let Some(files) = self.uploaded.remove(&id) {
            self.confirmed = files;
        }
        self.uploaded.retain(|&k, _| k > id);
    }
}
