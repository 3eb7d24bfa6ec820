//! Checkpoint metadata (the `_metadata` file and what tasks acknowledge) and the one place that builds
//! object-store paths for checkpoints. Paths inside metadata are relative to the checkpoint root and are
//! checked on the way back in: no `..`, no absolute paths.

use crate::ids::{CheckpointId, JobId, SubtaskIndex, VertexId};
use crate::state::keygroup::KeyGroupRange;
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
    /// The snapshot's format: `rocksdb` or `heap` (native), or `canonical`; never unspecified.
    pub backend: SnapshotFormat,
    /// Key groups the snapshot holds.
    pub key_group_range: KeyGroupRange,
    /// Every file of the snapshot; a file's name inside the snapshot is the last component of its path.
    pub files: Vec<FileHandle>,
    /// The states it holds (what `weir savepoint inspect` lists).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<KeyedStateInfo>,
}

/// One keyed state of a snapshot, as the task described it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedStateInfo {
    /// State name.
    pub name: String,
    /// Its kind: `value`, `list`, `map`, `reducing`, `aggregating` or `timers`.
    pub kind: String,
    /// Its time-to-live in milliseconds, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Bytes of its rows (for RocksDB an estimate).
    pub bytes: u64,
    /// Timer states (kind `timers`): how many timers it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<u64>,
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

/// Where the byte offsets of one operator state's elements inside the blob are kept.
///
/// Small states carry them inline (in the acknowledgement and `_metadata`); beyond the job manager's inline
/// limit the task manager writes them to a file next to the blob (one little-endian `u64` per element) and
/// only that file's handle travels, so the job manager's memory does not grow with the number of elements.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Offsets {
    /// The offsets themselves.
    Inline(Vec<u64>),
    /// A file of `elements` little-endian `u64` offsets.
    File(FileHandle),
}

/// Bytes one offset takes in an offsets file (and what an inline offset is counted as).
pub const OFFSET_BYTES: u64 = 8;

/// Where each element of one operator state lies inside the operator-state blob.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateMetaInfo {
    /// State name.
    pub name: String,
    /// Redistribution mode.
    pub mode: DistributionMode,
    /// Number of elements.
    pub elements: u64,
    /// Bytes the elements take in the blob (length prefixes included).
    pub bytes: u64,
    /// Byte offset of each element inside the blob.
    pub offsets: Offsets,
}

impl StateMetaInfo {
    /// Meta info with inline offsets.
    pub fn inline(name: impl Into<String>, mode: DistributionMode, offsets: Vec<u64>, bytes: u64) -> Self {
        StateMetaInfo {
            name: name.into(),
            mode,
            elements: offsets.len() as u64,
            bytes,
            offsets: Offsets::Inline(offsets),
        }
    }
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
    /// The operator's event-time watermark at the checkpoint, if it had one: a restore never goes below it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<i64>,
}

impl OperatorStateHandle {
    /// The blob and every offsets file.
    pub fn files(&self) -> impl Iterator<Item = &FileHandle> {
        std::iter::once(&self.file).chain(self.states.iter().filter_map(|s| match &s.offsets {
            Offsets::File(f) => Some(f),
            Offsets::Inline(_) => None,
        }))
    }
}

impl OperatorSubtaskState {
    /// Every file this subtask's state references.
    pub fn files(&self) -> impl Iterator<Item = &FileHandle> {
        let keyed = self.keyed.iter().flat_map(|k| k.files.iter());
        keyed.chain(self.operator_state.iter().flat_map(|o| o.files()))
    }

    /// Bytes of state this subtask references.
    pub fn size(&self) -> u64 {
        self.files().map(|f| f.size).sum()
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
    /// The operator's kind (registry name) when the snapshot was taken.
    #[serde(default)]
    pub kind: String,
    /// Parallelism the operator ran with.
    pub parallelism: u32,
    /// One entry per subtask, ordered by index.
    pub subtasks: Vec<OperatorSubtaskState>,
    /// The kind's state signature when the snapshot was taken (absent for kinds without one, and in
    /// checkpoints of earlier versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<crate::job::kind::KindSignature>,
    /// What of the operator's config its state was written under ([`ResolvedOperator::state_config`]).
    ///
    /// [`ResolvedOperator::state_config`]: crate::job::spec::ResolvedOperator::state_config
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub state_config: BTreeMap<String, String>,
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
    /// Set for a savepoint: its format. A savepoint's paths are relative to its own directory (it is
    /// self-contained and relocatable); a checkpoint's are relative to the checkpoint root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savepoint: Option<SavepointFormat>,
}

/// How a savepoint stores keyed state: native (the backend's own files, as they are: fast, restorable into the
/// same backend) or canonical (backend-independent rows ordered by key group: restorable into either backend).
/// A savepoint is never `Unspecified` (native on the wire) nor `Checkpoint` (what inspect reports for a
/// retained checkpoint).
pub use weir_proto::SavepointFormat;

/// Who owns the files of the savepoint a job was started from (Flink 2.x's restore modes): no-claim (the user:
/// never changed or deleted, and the first checkpoint after the restore is full; `Unspecified` on the wire) or
/// claim (the job deletes it once its own checkpoints subsume it).
pub use weir_proto::RestoreMode;

/// What became of a checkpoint, as the job manager's notification tells the tasks: aborted, completed, the
/// completed final checkpoint (tasks that consumed all input finish), or a completed stop-with-savepoint (tasks
/// finish). `Unspecified` is refused.
pub use weir_proto::CheckpointOutcome;

/// A checkpoint's or savepoint's metadata, or a request's choice about one, that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// A savepoint format other than native or canonical (as written, quoted).
    #[error("unknown savepoint format {0}: use native or canonical")]
    UnknownFormat(String),
    /// A restore mode other than claim or no-claim (as written, quoted).
    #[error("unknown restore mode {0}: use claim or no-claim")]
    UnknownRestoreMode(String),
    /// A path that is empty, absolute or climbs out (`..`).
    #[error("unsafe path {0:?} in checkpoint metadata")]
    UnsafePath(String),
    /// A checkpoint's path outside its job's directory.
    #[error("path {0:?} lies outside the job's directory")]
    OutsideJob(String),
    /// The metadata could not be encoded.
    #[error("cannot encode _metadata: {0}")]
    Encode(String),
    /// A `_metadata` file that does not decode.
    #[error("unreadable _metadata: {0}")]
    Unreadable(String),
    /// A `_metadata` file of another format version.
    #[error("unsupported _metadata format version {0}")]
    Version(u32),
}

/// How a keyed snapshot lays out its files: RocksDB or heap (native), or canonical. Stored by name in
/// `_metadata` (`"backend": "rocksdb"`).
pub use weir_proto::SnapshotFormat;

/// Parses a savepoint format a user wrote: `native` (or empty, the default) or `canonical`.
pub fn parse_savepoint_format(s: &str) -> Result<SavepointFormat, MetadataError> {
    match s {
        "" | "native" => Ok(SavepointFormat::Native),
        "canonical" => Ok(SavepointFormat::Canonical),
        other => Err(MetadataError::UnknownFormat(crate::text::echo(other))),
    }
}

/// The savepoint format a request carries: unspecified is native; only native and canonical are formats a
/// savepoint can be written in.
pub fn savepoint_format_of(value: i32) -> Result<SavepointFormat, MetadataError> {
    match SavepointFormat::try_from(value) {
        Ok(SavepointFormat::Unspecified | SavepointFormat::Native) => Ok(SavepointFormat::Native),
        Ok(SavepointFormat::Canonical) => Ok(SavepointFormat::Canonical),
        _ => Err(MetadataError::UnknownFormat(value.to_string())),
    }
}

/// Parses a restore mode a user wrote: `claim` or `no-claim` (empty: the default, no-claim).
pub fn parse_restore_mode(s: &str) -> Result<RestoreMode, MetadataError> {
    match s {
        "" | "no-claim" | "no_claim" => Ok(RestoreMode::NoClaim),
        "claim" => Ok(RestoreMode::Claim),
        other => Err(MetadataError::UnknownRestoreMode(crate::text::echo(other))),
    }
}

/// The restore mode a request carries: unspecified is no-claim.
pub fn restore_mode_of(value: i32) -> Result<RestoreMode, MetadataError> {
    match RestoreMode::try_from(value) {
        Ok(RestoreMode::Unspecified | RestoreMode::NoClaim) => Ok(RestoreMode::NoClaim),
        Ok(RestoreMode::Claim) => Ok(RestoreMode::Claim),
        Err(_) => Err(MetadataError::UnknownRestoreMode(value.to_string())),
    }
}

impl CheckpointMetadata {
    /// Bytes of state the checkpoint references.
    pub fn full_size(&self) -> u64 {
        self.operators.values().flat_map(|o| o.subtasks.iter()).map(|s| s.size()).sum()
    }

    /// Checks that every path the metadata references is a safe relative path: under the job's directory for a
    /// checkpoint, under the savepoint's own directory for a savepoint.
    pub fn validate_paths(&self) -> Result<(), MetadataError> {
        let job_prefix = format!("{}/", self.job_id);
        for op in self.operators.values() {
            for st in &op.subtasks {
                for f in st.files() {
                    check_relative_path(&f.path)?;
                    if self.savepoint.is_none() && !f.path.starts_with(&job_prefix) {
                        return Err(MetadataError::OutsideJob(f.path.clone()));
                    }
                }
            }
        }
        Ok(())
    }

    /// Every file the metadata references.
    pub fn files(&self) -> impl Iterator<Item = &FileHandle> {
        self.operators.values().flat_map(|o| o.subtasks.iter()).flat_map(|s| s.files())
    }

    /// Encodes the metadata as the bytes of a `_metadata` file.
    pub fn to_bytes(&self) -> Result<Vec<u8>, MetadataError> {
        // Never an empty file: a `_metadata` that exists is one that can be read back.
        match serde_json::to_vec_pretty(self) {
            Ok(b) if !b.is_empty() => Ok(b),
            Ok(_) => Err(MetadataError::Encode("encoding produced no bytes".to_string())),
            Err(e) => Err(MetadataError::Encode(e.to_string())),
        }
    }

    /// Decodes and checks a `_metadata` file.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, MetadataError> {
        let m: CheckpointMetadata =
            serde_json::from_slice(bytes).map_err(|e| MetadataError::Unreadable(e.to_string()))?;
        if m.format_version != METADATA_FORMAT_VERSION {
            return Err(MetadataError::Version(m.format_version));
        }
        m.validate_paths()?;
        Ok(m)
    }
}

/// Where and how a savepoint is written, as the barrier of its checkpoint carries it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavepointTarget {
    /// URL of the savepoint's directory.
    pub url: String,
    /// Its format.
    pub format: SavepointFormat,
    /// Stop with savepoint: sources emit nothing after this barrier and tasks finish once it completes.
    pub stop: bool,
}

impl From<&SavepointTarget> for weir_proto::SavepointTarget {
    fn from(t: &SavepointTarget) -> Self {
        weir_proto::SavepointTarget { url: t.url.clone(), format: t.format as i32, stop: t.stop }
    }
}

impl TryFrom<weir_proto::SavepointTarget> for SavepointTarget {
    type Error = MetadataError;

    fn try_from(t: weir_proto::SavepointTarget) -> Result<Self, MetadataError> {
        Ok(SavepointTarget { format: savepoint_format_of(t.format)?, url: t.url, stop: t.stop })
    }
}

/// Splits the URL of a checkpoint or savepoint directory into the root its paths are relative to and the
/// `_metadata` path under that root: a savepoint's paths are relative to its own directory, a retained
/// checkpoint's (`…/<job>/chk-<n>`) to the checkpoint root two levels up.
pub fn restore_root(dir_url: &str, meta: &CheckpointMetadata) -> String {
    let dir = dir_url.trim_end_matches('/');
    if meta.savepoint.is_some() {
        return dir.to_string();
    }
    let mut parts = dir.rsplitn(3, '/');
    let (_chk, _job) = (parts.next(), parts.next());
    parts.next().unwrap_or(dir).to_string()
}

/// Rejects empty, absolute and `..`-containing relative paths.
pub fn check_relative_path(p: &str) -> Result<(), MetadataError> {
    if p.is_empty()
        || p.starts_with('/')
        || p.contains('\\')
        || p.split('/').any(|c| c.is_empty() || c == ".." || c == ".")
    {
        return Err(MetadataError::UnsafePath(p.to_string()));
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
        format!("{}/{METADATA_FILE}", checkpoint_dir(job, id))
    }

    /// `<job>/chk-<n>/<uid>/<subtask>`: where one operator subtask writes its state for checkpoint `n`.
    pub fn subtask_dir(job: &JobId, id: CheckpointId, uid: &str, subtask: SubtaskIndex) -> String {
        format!("{}/{uid}/{}", checkpoint_dir(job, id), subtask.0)
    }

    /// `<job>/shared`: files shared between incremental checkpoints.
    pub fn shared_dir(job: &JobId) -> String {
        format!("{job}/shared")
    }

    /// `<job>/shared/<uid>/<subtask>/<instance>/<n>`: where checkpoint `n` of one backend instance (one
    /// deployment of a subtask) uploads the shareable files it adds. One folder per checkpoint: a file a failed
    /// checkpoint uploaded may be uploaded again by the next one, and must not share a path the failed one's
    /// cleanup deletes.
    pub fn shared_snapshot_dir(
        job: &JobId,
        uid: &str,
        subtask: SubtaskIndex,
        instance: &str,
        id: CheckpointId,
    ) -> String {
        format!("{}/{uid}/{}/{instance}/{}", shared_dir(job), subtask.0, id.0)
    }

    /// `<subtask dir>/keyed`: a subtask's keyed-state files that are not shared.
    pub fn keyed_dir(subtask_dir: &str) -> String {
        format!("{subtask_dir}/keyed")
    }

    /// `<subtask dir>/opstate`: a subtask's operator-state blob.
    pub fn opstate_file(subtask_dir: &str) -> String {
        format!("{subtask_dir}/opstate")
    }

    /// `<job>/taskowned`: files owned by tasks.
    pub fn taskowned_dir(job: &JobId) -> String {
        format!("{job}/taskowned")
    }

    /// `savepoint-<first 6 of job>-<12 random hex>`: the directory name of a new savepoint of `job`.
    pub fn new_savepoint_name(job: &JobId) -> String {
        let job = job.to_string();
        let short: String = job.chars().take(6).collect();
        let rand: String = uuid::Uuid::new_v4().simple().to_string().chars().take(12).collect();
        format!("savepoint-{short}-{rand}")
    }

    /// `<uid>/<subtask>`: where one operator subtask writes a savepoint's state, relative to the savepoint.
    pub fn savepoint_subtask_dir(uid: &str, subtask: SubtaskIndex) -> String {
        format!("{uid}/{}", subtask.0)
    }

    /// The name of a state's offsets file next to the operator-state blob `blob`.
    pub fn offsets_file(blob: &str, state_index: usize) -> String {
        format!("{blob}.offsets-{state_index}")
    }

    /// `_metadata`, the file a checkpoint or savepoint directory is recognised by.
    pub const METADATA_FILE: &str = "_metadata";
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(path: &str) -> CheckpointMetadata {
        let mut operators = BTreeMap::new();
        operators.insert(
            "op".to_string(),
            OperatorCheckpoint {
                signature: None,
                state_config: Default::default(),
                kind: "k".into(),
                parallelism: 1,
                subtasks: vec![OperatorSubtaskState {
                    subtask: SubtaskIndex(0),
                    keyed: None,
                    operator_state: Some(OperatorStateHandle {
                        file: FileHandle { path: path.to_string(), size: 3 },
                        states: vec![],
                    }),
                    end_of_input: false,
                    watermark: None,
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
            savepoint: None,
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
    fn formats_and_modes_parse_from_users_and_from_the_wire() {
        assert_eq!(parse_savepoint_format(""), Ok(SavepointFormat::Native));
        assert_eq!(parse_savepoint_format("canonical"), Ok(SavepointFormat::Canonical));
        assert!(parse_savepoint_format("checkpoint").unwrap_err().to_string().contains("use native or canonical"));
        assert_eq!(savepoint_format_of(0), Ok(SavepointFormat::Native));
        assert_eq!(savepoint_format_of(SavepointFormat::Canonical as i32), Ok(SavepointFormat::Canonical));
        // Inspect reports CHECKPOINT, but no savepoint is written in it; nor in a value this version lacks.
        assert!(savepoint_format_of(SavepointFormat::Checkpoint as i32).is_err());
        assert!(savepoint_format_of(42).is_err());
        assert_eq!(parse_restore_mode("no_claim"), Ok(RestoreMode::NoClaim));
        assert_eq!(parse_restore_mode("claim"), Ok(RestoreMode::Claim));
        assert!(parse_restore_mode("steal").unwrap_err().to_string().contains("claim or no-claim"));
        assert_eq!(restore_mode_of(0), Ok(RestoreMode::NoClaim));
        assert_eq!(restore_mode_of(RestoreMode::Claim as i32), Ok(RestoreMode::Claim));
        assert!(restore_mode_of(9).is_err());
        // Stored metadata keeps the names it had before these became protobuf enums.
        let handle = KeyedStateHandle {
            backend: SnapshotFormat::Canonical,
            key_group_range: KeyGroupRange { start: 0, end: 3 },
            files: Vec::new(),
            states: Vec::new(),
        };
        let json = serde_json::to_string(&handle).unwrap();
        assert!(json.contains(r#""backend":"canonical""#), "{json}");
        assert_eq!(serde_json::from_str::<KeyedStateHandle>(&json).unwrap(), handle);
    }

    #[test]
    fn paths_are_built_in_one_place() {
        let j = JobId("abc".into());
        assert_eq!(paths::metadata(&j, CheckpointId(7)), "abc/chk-7/_metadata");
        assert_eq!(paths::subtask_dir(&j, CheckpointId(7), "counts", SubtaskIndex(1)), "abc/chk-7/counts/1");
    }
}
