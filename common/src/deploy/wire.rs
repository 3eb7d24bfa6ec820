//! The protobuf forms of checkpoint handles and restore descriptors: task managers acknowledge checkpoints
//! with typed [`pb::TaskSnapshot`]s and receive typed [`pb::RestoreDescriptor`]s, so the job manager routes and
//! sizes them without decoding JSON. Encoding is total; decoding checks that required fields are present and
//! enums known, and says which is not.

use crate::checkpoint::{
    DistributionMode, FileHandle, KeyedStateHandle, KeyedStateInfo, Offsets, OperatorStateHandle, OperatorSubtaskState,
    SnapshotFormat, StateMetaInfo, TaskSnapshot,
};
use crate::deploy::descriptor::{
    ElementRef, InputDescriptor, OperatorDescriptor, OperatorStatePart, OutputDescriptor, RestoreDescriptor, StatePart,
    SubtaskRestore, TaskDescriptor,
};
use crate::ids::{AttemptNumber, CheckpointId, JobId, SubtaskIndex, VertexId};
use crate::job::spec::{Partitioning, StateBackend};
use crate::state::keygroup::KeyGroupRange;
use crate::state::serializer::{Resolution, SerializerSnapshot, StateSerializers};
use weir_proto as pb;

/// A protobuf message that does not describe a valid handle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what}: {reason}")]
pub struct WireError {
    /// The message.
    pub what: &'static str,
    /// What is wrong.
    pub reason: String,
}

fn missing(what: &'static str, field: &str) -> WireError {
    WireError { what, reason: format!("{field} is missing") }
}

impl From<&FileHandle> for pb::FileHandle {
    fn from(f: &FileHandle) -> Self {
        pb::FileHandle { path: f.path.clone(), size: f.size }
    }
}

impl From<pb::FileHandle> for FileHandle {
    fn from(f: pb::FileHandle) -> Self {
        FileHandle { path: f.path, size: f.size }
    }
}

fn file(f: Option<pb::FileHandle>, what: &'static str) -> Result<FileHandle, WireError> {
    f.map(FileHandle::from).ok_or_else(|| missing(what, "file"))
}

impl From<DistributionMode> for pb::DistributionMode {
    fn from(m: DistributionMode) -> Self {
        match m {
            DistributionMode::SplitDistribute => pb::DistributionMode::SplitDistribute,
            DistributionMode::Union => pb::DistributionMode::Union,
            DistributionMode::Broadcast => pb::DistributionMode::Broadcast,
        }
    }
}

fn mode(m: i32, what: &'static str) -> Result<DistributionMode, WireError> {
    match pb::DistributionMode::try_from(m) {
        Ok(pb::DistributionMode::SplitDistribute) => Ok(DistributionMode::SplitDistribute),
        Ok(pb::DistributionMode::Union) => Ok(DistributionMode::Union),
        Ok(pb::DistributionMode::Broadcast) => Ok(DistributionMode::Broadcast),
        _ => Err(WireError { what, reason: format!("unknown distribution mode {m}") }),
    }
}

impl From<&KeyedStateHandle> for pb::KeyedStateHandle {
    fn from(k: &KeyedStateHandle) -> Self {
        pb::KeyedStateHandle {
            backend: k.backend as i32,
            key_group_range: Some(pb::KeyGroupRange { start: k.key_group_range.start, end: k.key_group_range.end }),
            files: k.files.iter().map(pb::FileHandle::from).collect(),
            states: k
                .states
                .iter()
                .map(|s| pb::KeyedStateInfo {
                    name: s.name.clone(),
                    kind: s.kind.clone(),
                    ttl_ms: s.ttl_ms,
                    bytes: s.bytes,
                    entries: s.entries,
                })
                .collect(),
        }
    }
}

impl TryFrom<pb::KeyedStateHandle> for KeyedStateHandle {
    type Error = WireError;

    fn try_from(k: pb::KeyedStateHandle) -> Result<Self, WireError> {
        let r = k.key_group_range.ok_or_else(|| missing("keyed state handle", "key_group_range"))?;
        Ok(KeyedStateHandle {
            backend: match SnapshotFormat::try_from(k.backend) {
                Ok(SnapshotFormat::Unspecified) | Err(_) => {
                    return Err(WireError {
                        what: "keyed state handle",
                        reason: format!("unknown backend {}", k.backend),
                    })
                }
                Ok(f) => f,
            },
            key_group_range: KeyGroupRange { start: r.start, end: r.end },
            files: k.files.into_iter().map(FileHandle::from).collect(),
            states: k
                .states
                .into_iter()
                .map(|s| KeyedStateInfo {
                    name: s.name,
                    kind: s.kind,
                    ttl_ms: s.ttl_ms,
                    bytes: s.bytes,
                    entries: s.entries,
                })
                .collect(),
        })
    }
}

impl From<&StateMetaInfo> for pb::StateMetaInfo {
    fn from(m: &StateMetaInfo) -> Self {
        let offsets = match &m.offsets {
            Offsets::Inline(o) => pb::offsets::Where::Inline(pb::PackedOffsets { offsets: o.clone() }),
            Offsets::File(f) => pb::offsets::Where::File(f.into()),
        };
        pb::StateMetaInfo {
            name: m.name.clone(),
            mode: pb::DistributionMode::from(m.mode) as i32,
            elements: m.elements,
            bytes: m.bytes,
            offsets: Some(pb::Offsets { r#where: Some(offsets) }),
        }
    }
}

impl TryFrom<pb::StateMetaInfo> for StateMetaInfo {
    type Error = WireError;

    fn try_from(m: pb::StateMetaInfo) -> Result<Self, WireError> {
        const WHAT: &str = "operator state meta info";
        let offsets = match m.offsets.and_then(|o| o.r#where) {
            Some(pb::offsets::Where::Inline(p)) => Offsets::Inline(p.offsets),
            Some(pb::offsets::Where::File(f)) => Offsets::File(f.into()),
            None => return Err(missing(WHAT, "offsets")),
        };
        Ok(StateMetaInfo { name: m.name, mode: mode(m.mode, WHAT)?, elements: m.elements, bytes: m.bytes, offsets })
    }
}

impl From<&OperatorStateHandle> for pb::OperatorStateHandle {
    fn from(h: &OperatorStateHandle) -> Self {
        pb::OperatorStateHandle { file: Some((&h.file).into()), states: h.states.iter().map(Into::into).collect() }
    }
}

impl TryFrom<pb::OperatorStateHandle> for OperatorStateHandle {
    type Error = WireError;

    fn try_from(h: pb::OperatorStateHandle) -> Result<Self, WireError> {
        Ok(OperatorStateHandle {
            file: file(h.file, "operator state handle")?,
            states: h.states.into_iter().map(StateMetaInfo::try_from).collect::<Result<_, _>>()?,
        })
    }
}

impl From<&OperatorSubtaskState> for pb::OperatorSubtaskState {
    fn from(s: &OperatorSubtaskState) -> Self {
        pb::OperatorSubtaskState {
            subtask: s.subtask.0,
            keyed: s.keyed.as_ref().map(Into::into),
            operator_state: s.operator_state.as_ref().map(Into::into),
            end_of_input: s.end_of_input,
            watermark: s.watermark,
        }
    }
}

impl TryFrom<pb::OperatorSubtaskState> for OperatorSubtaskState {
    type Error = WireError;

    fn try_from(s: pb::OperatorSubtaskState) -> Result<Self, WireError> {
        Ok(OperatorSubtaskState {
            subtask: SubtaskIndex(s.subtask),
            keyed: s.keyed.map(KeyedStateHandle::try_from).transpose()?,
            operator_state: s.operator_state.map(OperatorStateHandle::try_from).transpose()?,
            end_of_input: s.end_of_input,
            watermark: s.watermark,
        })
    }
}

impl From<&TaskSnapshot> for pb::TaskSnapshot {
    fn from(t: &TaskSnapshot) -> Self {
        pb::TaskSnapshot {
            vertex: t.vertex.0,
            subtask: t.subtask.0,
            operators: t.operators.iter().map(|(uid, s)| (uid.clone(), s.into())).collect(),
            uploaded_bytes: t.uploaded_bytes,
        }
    }
}

impl TryFrom<pb::TaskSnapshot> for TaskSnapshot {
    type Error = WireError;

    fn try_from(t: pb::TaskSnapshot) -> Result<Self, WireError> {
        let operators = t
            .operators
            .into_iter()
            .map(|(uid, s)| Ok((uid, OperatorSubtaskState::try_from(s)?)))
            .collect::<Result<_, WireError>>()?;
        Ok(TaskSnapshot {
            vertex: VertexId(t.vertex),
            subtask: SubtaskIndex(t.subtask),
            operators,
            uploaded_bytes: t.uploaded_bytes,
        })
    }
}

impl From<&StatePart> for pb::StatePart {
    fn from(p: &StatePart) -> Self {
        let elements = match &p.elements {
            ElementRef::Inline(o) => pb::state_part::Elements::Inline(pb::PackedOffsets { offsets: o.clone() }),
            ElementRef::InFile { offsets, first, count } => pb::state_part::Elements::InFile(pb::ElementRange {
                offsets: Some(offsets.into()),
                first: *first,
                count: *count,
            }),
        };
        pb::StatePart {
            name: p.name.clone(),
            mode: pb::DistributionMode::from(p.mode) as i32,
            elements: Some(elements),
        }
    }
}

impl TryFrom<pb::StatePart> for StatePart {
    type Error = WireError;

    fn try_from(p: pb::StatePart) -> Result<Self, WireError> {
        const WHAT: &str = "state part";
        let elements = match p.elements {
            Some(pb::state_part::Elements::Inline(o)) => ElementRef::Inline(o.offsets),
            Some(pb::state_part::Elements::InFile(r)) => {
                ElementRef::InFile { offsets: file(r.offsets, WHAT)?, first: r.first, count: r.count }
            }
            None => return Err(missing(WHAT, "elements")),
        };
        Ok(StatePart { name: p.name, mode: mode(p.mode, WHAT)?, elements })
    }
}

impl From<&SubtaskRestore> for pb::SubtaskRestore {
    fn from(r: &SubtaskRestore) -> Self {
        pb::SubtaskRestore {
            keyed: r.keyed.iter().map(Into::into).collect(),
            operator_state: r
                .operator_state
                .iter()
                .map(|p| pb::OperatorStatePart {
                    file: Some((&p.file).into()),
                    states: p.states.iter().map(Into::into).collect(),
                })
                .collect(),
            end_of_input: r.end_of_input,
            serializers: r.serializers.iter().map(Into::into).collect(),
            watermark: r.watermark,
        }
    }
}

impl TryFrom<pb::SubtaskRestore> for SubtaskRestore {
    type Error = WireError;

    fn try_from(r: pb::SubtaskRestore) -> Result<Self, WireError> {
        let operator_state = r
            .operator_state
            .into_iter()
            .map(|p| {
                Ok(OperatorStatePart {
                    file: file(p.file, "operator state part")?,
                    states: p.states.into_iter().map(StatePart::try_from).collect::<Result<_, _>>()?,
                })
            })
            .collect::<Result<_, WireError>>()?;
        Ok(SubtaskRestore {
            keyed: r.keyed.into_iter().map(KeyedStateHandle::try_from).collect::<Result<_, _>>()?,
            operator_state,
            end_of_input: r.end_of_input,
            serializers: r.serializers.into_iter().map(StateSerializers::from).collect(),
            watermark: r.watermark,
        })
    }
}

impl From<&RestoreDescriptor> for pb::RestoreDescriptor {
    fn from(r: &RestoreDescriptor) -> Self {
        pb::RestoreDescriptor {
            checkpoint_id: r.checkpoint_id.0,
            root: r.root.clone(),
            own_files: r.own_files,
            operators: r.operators.iter().map(|(uid, s)| (uid.clone(), s.into())).collect(),
        }
    }
}

impl TryFrom<pb::RestoreDescriptor> for RestoreDescriptor {
    type Error = WireError;

    fn try_from(r: pb::RestoreDescriptor) -> Result<Self, WireError> {
        let operators = r
            .operators
            .into_iter()
            .map(|(uid, s)| Ok((uid, SubtaskRestore::try_from(s)?)))
            .collect::<Result<_, WireError>>()?;
        Ok(RestoreDescriptor {
            checkpoint_id: CheckpointId(r.checkpoint_id),
            root: r.root,
            own_files: r.own_files,
            operators,
        })
    }
}

impl From<&SerializerSnapshot> for pb::SerializerSnapshot {
    fn from(s: &SerializerSnapshot) -> Self {
        pb::SerializerSnapshot {
            format: s.format.clone(),
            version: s.version,
            root: s.root.clone(),
            schema: s.schema.clone(),
        }
    }
}

impl From<pb::SerializerSnapshot> for SerializerSnapshot {
    fn from(s: pb::SerializerSnapshot) -> Self {
        SerializerSnapshot { format: s.format, version: s.version, root: s.root, schema: s.schema }
    }
}

impl From<&Resolution> for pb::SerializerResolution {
    fn from(r: &Resolution) -> Self {
        match r {
            Resolution::AsIs => pb::SerializerResolution::AsIs,
            Resolution::Reconfigured => pb::SerializerResolution::Reconfigured,
            Resolution::AfterMigration => pb::SerializerResolution::AfterMigration,
            Resolution::Incompatible(_) => pb::SerializerResolution::Incompatible,
        }
    }
}

/// A resolution as it came over the wire (`reason`: an incompatible one's why); an unknown one is incompatible.
pub fn resolution_from_wire(resolution: pb::SerializerResolution, reason: String) -> Resolution {
    match resolution {
        pb::SerializerResolution::AsIs => Resolution::AsIs,
        pb::SerializerResolution::Reconfigured => Resolution::Reconfigured,
        pb::SerializerResolution::AfterMigration => Resolution::AfterMigration,
        pb::SerializerResolution::Incompatible => Resolution::Incompatible(reason),
        pb::SerializerResolution::Unspecified => {
            Resolution::Incompatible(format!("the task manager that judged it sent no resolution ({reason})"))
        }
    }
}

impl From<&StateSerializers> for pb::StateSerializers {
    fn from(s: &StateSerializers) -> Self {
        pb::StateSerializers {
            state: s.state.clone(),
            kind: s.kind.clone(),
            value: Some((&s.value).into()),
            user_key: s.user_key.as_ref().map(Into::into),
            namespace: s.namespace.as_ref().map(Into::into),
        }
    }
}

impl From<pb::StateSerializers> for StateSerializers {
    fn from(s: pb::StateSerializers) -> Self {
        StateSerializers {
            state: s.state,
            kind: s.kind,
            value: s.value.map_or_else(SerializerSnapshot::opaque, Into::into),
            user_key: s.user_key.map(Into::into),
            namespace: s.namespace.map(Into::into),
        }
    }
}

/// A descriptor's partitioning: a known value other than unspecified (the job manager resolves that away).
fn partitioning(p: i32, what: &'static str) -> Result<Partitioning, WireError> {
    match Partitioning::try_from(p) {
        Ok(Partitioning::Unspecified) | Err(_) => Err(WireError { what, reason: format!("unknown partitioning {p}") }),
        Ok(p) => Ok(p),
    }
}

/// A descriptor's state backend: a known value other than unspecified.
fn backend(b: i32) -> Result<StateBackend, WireError> {
    match StateBackend::try_from(b) {
        Ok(StateBackend::Unspecified) | Err(_) => {
            Err(WireError { what: "task descriptor", reason: format!("unknown state backend {b}") })
        }
        Ok(b) => Ok(b),
    }
}

/// The descriptor without its restore, which travels as its own message (`DeployTaskRequest.restore`).
impl From<&TaskDescriptor> for pb::TaskDescriptor {
    fn from(d: &TaskDescriptor) -> Self {
        pb::TaskDescriptor {
            job_id: d.job_id.0.clone(),
            job_name: d.job_name.clone(),
            attempt: d.attempt.0,
            vertex: d.vertex.0,
            subtask: d.subtask.0,
            parallelism: d.parallelism,
            max_parallelism: d.max_parallelism,
            key_group_range: Some(pb::KeyGroupRange { start: d.key_group_range.start, end: d.key_group_range.end }),
            operators: d
                .operators
                .iter()
                .map(|o| pb::OperatorDescriptor {
                    uid: o.uid.clone(),
                    kind: o.kind.clone(),
                    config: o.config.iter().map(|(k, v)| (k.clone(), crate::job::config_value::to_proto(v))).collect(),
                    watermarks: o.watermarks.as_ref().map(|w| w.to_proto()),
                    chained_to: o.chained_to,
                })
                .collect(),
            state_backend: d.state_backend as i32,
            checkpoint_root: d.checkpoint_root.clone(),
            incremental: d.incremental,
            operator_state_inline_limit: d.operator_state_inline_limit,
            input: d.input.as_ref().map(input_to_proto),
            second_input: d.second_input.as_ref().map(input_to_proto),
            outputs: d
                .outputs
                .iter()
                .map(|o| pb::OutputDescriptor {
                    to_vertex: o.to_vertex.0,
                    partitioning: o.partitioning as i32,
                    targets: o
                        .targets
                        .iter()
                        .map(|(s, a)| pb::OutputTarget { subtask: s.0, data_address: a.clone() })
                        .collect(),
                    to_parallelism: o.to_parallelism,
                    side: o.side.as_ref().map(|(uid, tag)| pb::SideOutput { uid: uid.clone(), tag: tag.clone() }),
                    from: o.from,
                    to_input: o.to_input,
                })
                .collect(),
            linger_ms: d.linger_ms,
        }
    }
}

fn input_to_proto(i: &InputDescriptor) -> pb::InputDescriptor {
    pb::InputDescriptor {
        from_vertex: i.from_vertex.0,
        from_parallelism: i.from_parallelism,
        partitioning: i.partitioning as i32,
        channels: i.channels.iter().map(|c| c.0).collect(),
    }
}

fn input_from_proto(i: pb::InputDescriptor) -> Result<InputDescriptor, WireError> {
    Ok(InputDescriptor {
        from_vertex: VertexId(i.from_vertex),
        from_parallelism: i.from_parallelism,
        partitioning: partitioning(i.partitioning, "input descriptor")?,
        channels: i.channels.into_iter().map(SubtaskIndex).collect(),
    })
}

/// A descriptor without a restore (the caller adds the one `DeployTaskRequest.restore` carries).
impl TryFrom<pb::TaskDescriptor> for TaskDescriptor {
    type Error = WireError;

    fn try_from(d: pb::TaskDescriptor) -> Result<Self, WireError> {
        const WHAT: &str = "task descriptor";
        let range = d.key_group_range.ok_or_else(|| missing(WHAT, "key_group_range"))?;
        if d.operators.is_empty() {
            return Err(missing(WHAT, "operators"));
        }
        let input = d.input.map(input_from_proto).transpose()?;
        let second_input = d.second_input.map(input_from_proto).transpose()?;
        let outputs = d
            .outputs
            .into_iter()
            .map(|o| {
                Ok(OutputDescriptor {
                    to_vertex: VertexId(o.to_vertex),
                    partitioning: partitioning(o.partitioning, "output descriptor")?,
                    targets: o.targets.into_iter().map(|t| (SubtaskIndex(t.subtask), t.data_address)).collect(),
                    to_parallelism: o.to_parallelism,
                    side: o.side.map(|s| (s.uid, s.tag)),
                    from: o.from,
                    to_input: o.to_input,
                })
            })
            .collect::<Result<_, WireError>>()?;
        Ok(TaskDescriptor {
            job_id: JobId(d.job_id),
            job_name: d.job_name,
            attempt: AttemptNumber(d.attempt),
            vertex: VertexId(d.vertex),
            subtask: SubtaskIndex(d.subtask),
            parallelism: d.parallelism,
            max_parallelism: d.max_parallelism,
            key_group_range: KeyGroupRange { start: range.start, end: range.end },
            operators: d
                .operators
                .into_iter()
                .map(|o| {
                    let watermarks = o
                        .watermarks
                        .map(|w| crate::job::watermarks::WatermarkStrategy::from_proto(&w))
                        .transpose()
                        .map_err(|e| WireError { what: "task descriptor", reason: format!("watermarks: {e}") })?;
                    let config = o
                        .config
                        .iter()
                        .map(|(k, v)| Ok((k.clone(), crate::job::config_value::from_proto(v)?)))
                        .collect::<Result<_, crate::job::config_value::ConfigValueError>>()
                        .map_err(|e| WireError {
                            what: "task descriptor",
                            reason: format!("config of {}: {e}", o.uid),
                        })?;
                    Ok(OperatorDescriptor { uid: o.uid, kind: o.kind, config, watermarks, chained_to: o.chained_to })
                })
                .collect::<Result<_, WireError>>()?,
            state_backend: backend(d.state_backend)?,
            checkpoint_root: d.checkpoint_root,
            incremental: d.incremental,
            operator_state_inline_limit: d.operator_state_inline_limit,
            input,
            second_input,
            outputs,
            linger_ms: d.linger_ms,
            restore: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn file(path: &str) -> FileHandle {
        FileHandle { path: path.into(), size: 3 }
    }

    #[test]
    fn task_descriptors_round_trip_and_unknown_enums_are_errors() {
        let d = TaskDescriptor {
            job_id: JobId("j".into()),
            job_name: "name".into(),
            attempt: AttemptNumber(3),
            vertex: VertexId(1),
            subtask: SubtaskIndex(2),
            parallelism: 4,
            max_parallelism: 128,
            key_group_range: KeyGroupRange { start: 64, end: 95 },
            operators: vec![OperatorDescriptor {
                uid: "count".into(),
                kind: "keyed-count".into(),
                config: BTreeMap::from([
                    ("emit".to_string(), serde_json::json!("updates")),
                    ("window".to_string(), serde_json::json!({ "tumbling_ms": 10, "seed": u64::MAX })),
                ]),
                watermarks: Some(crate::job::watermarks::WatermarkStrategy {
                    max_out_of_orderness_ms: 250,
                    idle_timeout_ms: Some(1000),
                    auto_watermark_interval_ms: 50,
                }),
                chained_to: Some(0),
            }],
            state_backend: StateBackend::Heap,
            checkpoint_root: "s3://b/c".into(),
            incremental: true,
            operator_state_inline_limit: 1000,
            input: Some(InputDescriptor {
                from_vertex: VertexId(0),
                from_parallelism: 2,
                partitioning: Partitioning::KeyBy,
                channels: vec![SubtaskIndex(0), SubtaskIndex(1)],
            }),
            second_input: Some(InputDescriptor {
                from_vertex: VertexId(3),
                from_parallelism: 1,
                partitioning: Partitioning::KeyBy,
                channels: vec![SubtaskIndex(0)],
            }),
            outputs: vec![
                OutputDescriptor {
                    to_vertex: VertexId(2),
                    partitioning: Partitioning::Broadcast,
                    targets: vec![(SubtaskIndex(0), "10.0.0.1:7000".into())],
                    to_parallelism: 1,
                    side: None,
                    from: None,
                    to_input: 1,
                },
                OutputDescriptor {
                    to_vertex: VertexId(3),
                    partitioning: Partitioning::Rebalance,
                    targets: vec![(SubtaskIndex(0), "10.0.0.1:7000".into())],
                    to_parallelism: 1,
                    side: Some(("win".into(), "late".into())),
                    from: None,
                    to_input: 0,
                },
            ],
            linger_ms: 7,
            restore: None,
        };
        assert_eq!(TaskDescriptor::try_from(pb::TaskDescriptor::from(&d)).unwrap(), d);
        let mut bad = pb::TaskDescriptor::from(&d);
        bad.state_backend = 9;
        assert_eq!(
            TaskDescriptor::try_from(bad).unwrap_err().to_string(),
            "invalid task descriptor: unknown state backend 9"
        );
        let mut bad = pb::TaskDescriptor::from(&d);
        bad.outputs[0].partitioning = 0;
        assert!(TaskDescriptor::try_from(bad).unwrap_err().to_string().contains("unknown partitioning 0"));
        let mut bad = pb::TaskDescriptor::from(&d);
        bad.key_group_range = None;
        assert!(TaskDescriptor::try_from(bad).unwrap_err().to_string().contains("key_group_range is missing"));
    }

    #[test]
    fn snapshots_and_restore_descriptors_round_trip() {
        let state = OperatorSubtaskState {
            subtask: SubtaskIndex(2),
            keyed: Some(KeyedStateHandle {
                backend: SnapshotFormat::Rocksdb,
                key_group_range: KeyGroupRange { start: 64, end: 127 },
                files: vec![file("j/shared/a.sst"), file("j/chk-1/op/2/keyed/MANIFEST")],
                states: vec![
                    KeyedStateInfo { name: "n".into(), kind: "value".into(), ttl_ms: Some(5), bytes: 9, entries: None },
                    KeyedStateInfo {
                        name: "t".into(),
                        kind: "timers".into(),
                        ttl_ms: None,
                        bytes: 3,
                        entries: Some(2),
                    },
                ],
            }),
            operator_state: Some(OperatorStateHandle {
                file: file("j/chk-1/op/2/opstate"),
                states: vec![
                    StateMetaInfo::inline("u", DistributionMode::Union, vec![0, 9], 18),
                    StateMetaInfo {
                        name: "splits".into(),
                        mode: DistributionMode::SplitDistribute,
                        elements: 1_000_000,
                        bytes: 16_000_000,
                        offsets: Offsets::File(file("j/chk-1/op/2/opstate.offsets-1")),
                    },
                ],
            }),
            end_of_input: true,
            watermark: Some(1_234),
        };
        let snapshot = TaskSnapshot {
            vertex: VertexId(1),
            subtask: SubtaskIndex(2),
            operators: BTreeMap::from([("op".to_string(), state.clone())]),
            uploaded_bytes: 77,
        };
        assert_eq!(TaskSnapshot::try_from(pb::TaskSnapshot::from(&snapshot)).unwrap(), snapshot);

        let restore = RestoreDescriptor {
            checkpoint_id: CheckpointId(4),
            root: "file:///sp".into(),
            own_files: false,
            operators: BTreeMap::from([(
                "op".to_string(),
                SubtaskRestore {
                    keyed: state.keyed.into_iter().collect(),
                    operator_state: vec![OperatorStatePart {
                        file: file("j/chk-1/op/2/opstate"),
                        states: vec![
                            StatePart {
                                name: "u".into(),
                                mode: DistributionMode::Union,
                                elements: ElementRef::Inline(vec![0, 9]),
                            },
                            StatePart {
                                name: "splits".into(),
                                mode: DistributionMode::SplitDistribute,
                                elements: ElementRef::InFile {
                                    offsets: file("j/chk-1/op/2/opstate.offsets-1"),
                                    first: 10,
                                    count: 5,
                                },
                            },
                        ],
                    }],
                    end_of_input: true,
                    watermark: Some(-7),
                    serializers: vec![crate::state::serializer::StateSerializers {
                        state: "m".into(),
                        kind: "map".into(),
                        value: crate::state::serializer::SerializerSnapshot::bincode("P", "struct P{a:u8}"),
                        user_key: Some(crate::state::serializer::SerializerSnapshot::signature("string")),
                        namespace: Some(crate::state::serializer::SerializerSnapshot::signature("u64")),
                    }],
                },
            )]),
        };
        assert_eq!(RestoreDescriptor::try_from(pb::RestoreDescriptor::from(&restore)).unwrap(), restore);
    }

    #[test]
    fn incomplete_messages_say_what_is_missing() {
        let e = KeyedStateHandle::try_from(pb::KeyedStateHandle::default()).unwrap_err();
        assert_eq!(e.to_string(), "invalid keyed state handle: key_group_range is missing");
        let e = StateMetaInfo::try_from(pb::StateMetaInfo { mode: 9, ..Default::default() }).unwrap_err();
        assert!(e.to_string().contains("offsets is missing"), "{e}");
        let bad_mode = pb::StateMetaInfo {
            mode: 9,
            offsets: Some(pb::Offsets { r#where: Some(pb::offsets::Where::Inline(Default::default())) }),
            ..Default::default()
        };
        assert!(StateMetaInfo::try_from(bad_mode).unwrap_err().to_string().contains("unknown distribution mode 9"));
        assert!(StatePart::try_from(pb::StatePart::default()).is_err());
    }
}
