//! Checkpoint metadata (the `_metadata` file and what tasks acknowledge) and the one place that builds
//! object-store paths for checkpoints. Paths inside metadata are relative to the checkpoint root and are
//! checked on the way back in: no `..`, no absolute paths.

use crate::ids::{CheckpointId, JobId, SubtaskIndex, VertexId};
use crate::keygroup::KeyGroupRange;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the `_metadata` format written by this build.
pub const METADATA_FORMAT_VERSION: u32 = 1;

/// One file of a state snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileHandle {
    /// Path relative to the checkpoint root.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
}

/// The keyed state of one operator subtask: the files of a RocksDB checkpoint or a heap snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedStateHandle {
    /// `rocksdb` or `heap`.
    pub backend: String,
    /// Key groups the snapshot holds.
    pub key_group_range: KeyGroupRange,
    /// Every file of the snapshot; a file's name inside the snapshot is the last component of its path.
    pub files: Vec<FileHandle>,
}

/// How operator list state is given back on restore (Flink's `OperatorStateHandle.Mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum DistributionMode {
    /// Elements are split among subtasks (round-robin on rescale).
    SplitDistribute,
    /// Every subtask gets every element.
    Union,
    /// Every subtask holds the same copy.
    Broadcast,
}

/// Where each element of one operator state lies inside the operator-state blob.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateMetaInfo {
    /// State name.
    pub name: String,
    /// Redistribution mode.
    pub mode: DistributionMode,
    /// Byte offset of each element inside the blob.
    pub offsets: Vec<u64>,
}

/// The operator (non-keyed) state of one subtask: one blob plus per-state element offsets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorStateHandle {
    /// The blob.
    pub file: FileHandle,
    /// Per state, where its elements are.
    pub states: Vec<StateMetaInfo>,
}

/// Everything one subtask of one operator stored in a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorSubtaskState {
    /// Index of the subtask.
    pub subtask: SubtaskIndex,
    /// Keyed state, if the operator is keyed.
    pub keyed: Option<KeyedStateHandle>,
    /// Operator state, if the operator has any.
    pub operator_state: Option<OperatorStateHandle>,
    /// The subtask had consumed all of its input before this checkpoint (it must not redo end-of-input work).
    pub end_of_input: bool,
}

impl OperatorSubtaskState {
    /// Bytes of state this subtask references.
    pub fn size(&self) -> u64 {
        let keyed: u64 = self.keyed.iter().flat_map(|k| k.files.iter()).map(|f| f.size).sum();
        keyed + self.operator_state.as_ref().map(|o| o.file.size).unwrap_or(0)
    }
}

/// What one task (a chain of operators) acknowledges for a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSnapshot {
    /// Vertex of the task.
    pub vertex: VertexId,
    /// Subtask index.
    pub subtask: SubtaskIndex,
    /// Per operator uid in the chain, its state.
    pub operators: BTreeMap<String, OperatorSubtaskState>,
    /// Bytes uploaded for this snapshot.
    pub uploaded_bytes: u64,
}

/// The state of one operator across its subtasks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorCheckpoint {
    /// Parallelism the operator ran with.
    pub parallelism: u32,
    /// One entry per subtask, ordered by index.
    pub subtasks: Vec<OperatorSubtaskState>,
}

/// The content of a checkpoint's `_metadata` file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    /// Format version.
    pub format_version: u32,
    /// Job the checkpoint belongs to.
    pub job_id: JobId,
    /// Checkpoint id.
    pub checkpoint_id: CheckpointId,
    /// When the checkpoint was triggered.
    pub timestamp_ms: u64,
    /// The job's number of key groups.
    pub max_parallelism: u32,
    /// Every task had consumed all input: the job is done once this checkpoint is committed.
    pub is_final: bool,
    /// Per operator uid.
    pub operators: BTreeMap<String, OperatorCheckpoint>,
}

impl CheckpointMetadata {
    /// Bytes of state the checkpoint references.
    pub fn full_size(&self) -> u64 {
        self.operators.values().flat_map(|o| o.subtasks.iter()).map(|s| s.size()).sum()
    }

    /// Checks that every path the metadata references is a safe relative path under `job`'s directory.
    pub fn validate_paths(&self) -> Result<(), String> {
        let job_prefix = format!("{}/", self.job_id);
        for op in self.operators.values() {
            for st in &op.subtasks {
                let keyed = st.keyed.iter().flat_map(|k| k.files.iter());
                let opst = st.operator_state.iter().map(|o| &o.file);
                for f in keyed.chain(opst) {
                    check_relative_path(&f.path)?;
                    if !f.path.starts_with(&job_prefix) {
                        return Err(format!("path {:?} lies outside the job's directory", f.path));
                    }
                }
            }
        }
        Ok(())
    }

    /// Encodes the metadata as the bytes of a `_metadata` file.
    pub fn to_bytes(&self) -> Result<Vec<u8>, String> {
        // Never an empty file: a `_metadata` that exists is one that can be read back.
        match serde_json::to_vec_pretty(self) {
            Ok(b) if !b.is_empty() => Ok(b),
            Ok(_) => Err("encoding produced no bytes".to_string()),
            Err(e) => Err(format!("cannot encode _metadata: {e}")),
        }
    }

    /// Decodes and checks a `_metadata` file.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let m: CheckpointMetadata = serde_json::from_slice(bytes).map_err(|e| format!("unreadable _metadata: {e}"))?;
        if m.format_version != METADATA_FORMAT_VERSION {
            return Err(format!("unsupported _metadata format version {}", m.format_version));
        }
        m.validate_paths()?;
        Ok(m)
    }
}

/// Rejects empty, absolute and `..`-containing relative paths.
pub fn check_relative_path(p: &str) -> Result<(), String> {
    if p.is_empty()
        || p.starts_with('/')
        || p.contains('\\')
        || p.split('/').any(|c| c.is_empty() || c == ".." || c == ".")
    {
        return Err(format!("unsafe path {p:?} in checkpoint metadata"));
    }
    Ok(())
}

/// Builds every object-store path of checkpoints, relative to the checkpoint root.
pub mod paths {
    use super::*;

    /// `<job>/chk-<n>`: the directory of one checkpoint's exclusive files.
    pub fn checkpoint_dir(job: &JobId, id: CheckpointId) -> String {
        format!("{job}/chk-{}", id.0)
    }

    /// `<job>/chk-<n>/_metadata`.
    pub fn metadata(job: &JobId, id: CheckpointId) -> String {
        format!("{}/_metadata", checkpoint_dir(job, id))
    }

    /// `<job>/chk-<n>/<uid>/<subtask>`: where one operator subtask writes its state for checkpoint `n`.
    pub fn subtask_dir(job: &JobId, id: CheckpointId, uid: &str, subtask: SubtaskIndex) -> String {
        format!("{}/{uid}/{}", checkpoint_dir(job, id), subtask.0)
    }

    /// `<job>/shared`: files shared between incremental checkpoints.
    pub fn shared_dir(job: &JobId) -> String {
        format!("{job}/shared")
    }

    /// `<job>/taskowned`: files owned by tasks.
    pub fn taskowned_dir(job: &JobId) -> String {
        format!("{job}/taskowned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(path: &str) -> CheckpointMetadata {
        let mut operators = BTreeMap::new();
        operators.insert(
            "op".to_string(),
            OperatorCheckpoint {
                parallelism: 1,
                subtasks: vec![OperatorSubtaskState {
                    subtask: SubtaskIndex(0),
                    keyed: None,
                    operator_state: Some(OperatorStateHandle {
                        file: FileHandle { path: path.to_string(), size: 3 },
                        states: vec![],
                    }),
                    end_of_input: false,
                }],
            },
        );
        CheckpointMetadata {
            format_version: METADATA_FORMAT_VERSION,
            job_id: JobId("j1".into()),
            checkpoint_id: CheckpointId(4),
            timestamp_ms: 1,
            max_parallelism: 128,
            is_final: false,
            operators,
        }
    }

    #[test]
    fn metadata_round_trips_and_rejects_unsafe_paths() {
        let m = meta("j1/chk-4/op/0/opstate");
        assert_eq!(CheckpointMetadata::from_bytes(&m.to_bytes().unwrap()).unwrap(), m);
        assert_eq!(m.full_size(), 3);
        for bad in ["../etc/passwd", "/abs", "j1/../x", "j2/chk-4/x", "j1//x"] {
            assert!(CheckpointMetadata::from_bytes(&meta(bad).to_bytes().unwrap()).is_err(), "{bad}");
        }
        assert!(CheckpointMetadata::from_bytes(b"{ not json").is_err());
    }

    #[test]
    fn paths_are_built_in_one_place() {
        let j = JobId("abc".into());
        assert_eq!(paths::metadata(&j, CheckpointId(7)), "abc/chk-7/_metadata");
        assert_eq!(paths::subtask_dir(&j, CheckpointId(7), "counts", SubtaskIndex(1)), "abc/chk-7/counts/1");
    }
}
