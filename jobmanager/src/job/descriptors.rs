//! Building the `TaskDescriptor` of every subtask of a deployment: chain, key-group range, input channels,
//! output targets with the data address of the task manager running each downstream subtask, and the state
//! to restore. Plain functions, no I/O.

use crate::cluster::registry::SlotTarget;
use std::collections::BTreeMap;
use weir_common::checkpoint::CheckpointMetadata;
use weir_common::deploy::assignment::{assign, AssignError};
use weir_common::deploy::descriptor::{
    input_channels, output_targets, ExecutionGraph, InputDescriptor, OperatorDescriptor, OutputDescriptor,
    RestoreDescriptor, SubtaskRestore, TaskDescriptor,
};
use weir_common::ids::{AttemptNumber, CheckpointId, JobId, SubtaskIndex, VertexId};
use weir_common::job::spec::{Partitioning, ResolvedJob};
use weir_common::state::keygroup::KeyGroupRange;

/// Why a deployment cannot be described.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeployError {
    /// Fewer slots than the widest vertex needs.
    #[error("the job needs {needed} slots but {got} were assigned")]
    NotEnoughSlots {
        /// Slots needed.
        needed: u32,
        /// Slots given.
        got: usize,
    },
    /// The job's number of key groups differs from the checkpoint's.
    #[error("cannot restore from checkpoint {checkpoint}: it was taken with max_parallelism {stored}, the job has {now}; max_parallelism can never change for a job's state")]
    MaxParallelismChanged {
        /// The checkpoint.
        checkpoint: CheckpointId,
        /// Max parallelism in the checkpoint.
        stored: u32,
        /// Max parallelism of the job.
        now: u32,
    },
    /// The stored state of an operator cannot be redistributed.
    #[error("cannot restore operator {uid:?} from checkpoint {checkpoint}: {source}")]
    Assignment {
        /// The checkpoint.
        checkpoint: CheckpointId,
        /// Operator uid.
        uid: String,
        /// Why.
        source: AssignError,
    },
    /// The checkpoint lacks the state of one subtask.
    #[error("checkpoint {checkpoint} has no state for subtask {subtask} of operator {uid:?}")]
    MissingSubtask {
        /// The checkpoint.
        checkpoint: CheckpointId,
        /// Operator uid.
        uid: String,
        /// The subtask.
        subtask: SubtaskIndex,
    },
}

/// Everything needed to describe one deployment of a job.
#[derive(Clone, Copy, Debug)]
pub struct DeployPlan<'a> {
    /// The job's id.
    pub job_id: &'a JobId,
    /// The validated job.
    pub job: &'a ResolvedJob,
    /// Its execution graph.
    pub graph: &'a ExecutionGraph,
    /// The attempt being deployed.
    pub attempt: AttemptNumber,
    /// Slot `i` runs subtask `i` of every vertex.
    pub slots: &'a [SlotTarget],
    /// Object-store URL of the checkpoint root.
    pub checkpoint_root: &'a str,
    /// The checkpoint or savepoint to restore from, if any.
    pub restore: Option<RestorePlan<'a>>,
    /// Element offsets up to this many bytes per operator state travel inline in acknowledgements.
    pub operator_state_inline_limit: u64,
}

/// A checkpoint or savepoint to restore a deployment from.
#[derive(Clone, Copy, Debug)]
pub struct RestorePlan<'a> {
    /// Its metadata.
    pub metadata: &'a CheckpointMetadata,
    /// URL the metadata's paths are relative to.
    pub root: &'a str,
    /// It is one of this job's own checkpoints (see [`RestoreDescriptor::own_files`]).
    pub own_files: bool,
}

/// Checks that a checkpoint can be restored into the job as it is now: the same number of key groups, and a
/// state for every subtask the checkpoint says an operator had. Parallelisms may differ (rescaling).
pub fn check_restorable(job: &ResolvedJob, meta: &CheckpointMetadata) -> Result<(), DeployError> {
    if meta.max_parallelism != job.max_parallelism {
        return Err(DeployError::MaxParallelismChanged {
            checkpoint: meta.checkpoint_id,
            stored: meta.max_parallelism,
            now: job.max_parallelism,
        });
    }
    for op in &job.operators {
        let Some(stored) = meta.operators.get(&op.uid) else { continue };
        for s in 0..stored.parallelism {
            if !stored.subtasks.iter().any(|st| st.subtask == SubtaskIndex(s)) {
                return Err(DeployError::MissingSubtask {
                    checkpoint: meta.checkpoint_id,
                    uid: op.uid.clone(),
                    subtask: SubtaskIndex(s),
                });
            }
        }
    }
    Ok(())
}

/// Builds the descriptor of every subtask, vertices in topological order and subtasks in index order.
pub fn build_descriptors(plan: &DeployPlan<'_>) -> Result<Vec<TaskDescriptor>, DeployError> {
    let needed = plan.graph.slots_needed();
    if plan.slots.len() < needed as usize {
        return Err(DeployError::NotEnoughSlots { needed, got: plan.slots.len() });
    }
    let job = plan.job;
    // Who restores what, per operator uid: one entry per new subtask.
    let mut assigned: BTreeMap<&str, Vec<SubtaskRestore>> = BTreeMap::new();
    if let Some(r) = plan.restore {
        check_restorable(job, r.metadata)?;
        for op in &job.operators {
            let Some(stored) = r.metadata.operators.get(&op.uid) else { continue };
            let parts = assign(stored, op.parallelism, job.max_parallelism).map_err(|source| {
                DeployError::Assignment { checkpoint: r.metadata.checkpoint_id, uid: op.uid.clone(), source }
            })?;
            assigned.insert(op.uid.as_str(), parts);
        }
    }
    let mut out = Vec::new();
    for vertex in &plan.graph.vertices {
        let p = vertex.parallelism;
        for s in 0..p {
            let subtask = SubtaskIndex(s);
            let operators = vertex
                .operators
                .iter()
                .enumerate()
                .map(|(k, &i)| OperatorDescriptor {
                    uid: job.operators[i].uid.clone(),
                    kind: job.operators[i].kind.clone(),
                    config: job.operators[i].config.clone(),
                    watermarks: job.operators[i].watermarks,
                    chained_to: k.checked_sub(1).and_then(|k| vertex.chained_to.get(k)).map(|&at| at as u32),
                })
                .collect();
            let input_of = |(from, partitioning): (VertexId, Partitioning)| {
                let from_p = vertex_parallelism(plan.graph, from);
                InputDescriptor {
                    from_vertex: from,
                    from_parallelism: from_p,
                    partitioning,
                    channels: input_channels(partitioning, from_p, subtask, p),
                }
            };
            let (input, second_input) = (vertex.input.map(input_of), vertex.second_input.map(input_of));
            let edge = |to: VertexId,
                        partitioning: Partitioning,
                        side: Option<(String, String)>,
                        from: Option<u32>,
                        to_input: u32| {
                let to_p = vertex_parallelism(plan.graph, to);
                let targets = output_targets(partitioning, subtask, to_p)
                    .into_iter()
                    .map(|t| (t, plan.slots[t.0 as usize].data_address.clone()))
                    .collect();
                OutputDescriptor { to_vertex: to, partitioning, targets, to_parallelism: to_p, side, from, to_input }
            };
            let outputs = vertex
                .outputs
                .iter()
                .enumerate()
                .map(|(n, &(to, partitioning))| {
                    let from = vertex.output_from.get(n).map(|&at| at as u32);
                    edge(to, partitioning, None, from, vertex.output_to_input.get(n).copied().unwrap_or(0))
                })
                .chain(
                    vertex
                        .side_outputs
                        .iter()
                        .map(|e| edge(e.to, e.partitioning, Some((e.uid.clone(), e.tag.clone())), None, 0)),
                )
                .collect();
            let restore = plan.restore.map(|r| {
                let operators = vertex
                    .operators
                    .iter()
                    .filter_map(|&i| {
                        let uid = job.operators[i].uid.as_str();
                        let part = assigned.get(uid)?.get(s as usize)?;
                        Some((uid.to_string(), part.clone()))
                    })
                    .collect();
                RestoreDescriptor {
                    checkpoint_id: r.metadata.checkpoint_id,
                    root: r.root.to_string(),
                    own_files: r.own_files,
                    operators,
                }
            });
            out.push(TaskDescriptor {
                job_id: plan.job_id.clone(),
                job_name: job.name.clone(),
                attempt: plan.attempt,
                vertex: vertex.id,
                subtask,
                parallelism: p,
                max_parallelism: job.max_parallelism,
                key_group_range: KeyGroupRange::for_subtask(subtask, p, job.max_parallelism),
                operators,
                state_backend: job.state_backend,
                checkpoint_root: plan.checkpoint_root.to_string(),
                incremental: job.checkpointing.incremental,
                operator_state_inline_limit: plan.operator_state_inline_limit,
                input,
                second_input,
                outputs,
                linger_ms: job.linger_ms,
                restore,
            });
        }
    }
    Ok(out)
}

fn vertex_parallelism(graph: &ExecutionGraph, v: VertexId) -> u32 {
    graph.vertices.get(v.0 as usize).map(|v| v.parallelism).unwrap_or(0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use weir_common::checkpoint::{OperatorCheckpoint, OperatorSubtaskState, METADATA_FORMAT_VERSION};
    use weir_common::job::kind::KindInfo;
    use weir_common::job::spec::{parse_spec_text, resolve, Partitioning};

    pub(crate) const DEMO: &str = r#"
name: demo
parallelism: 2
checkpointing: { interval_ms: 100, retained: 2 }
restart: { strategy: fixed-delay, attempts: 3, delay_ms: 10 }
operators:
  - { uid: events, kind: datagen, config: { count: 1000, keys: 10, seed: 1 } }
  - { uid: counts, kind: keyed-count, input: events }
  - { uid: out, kind: file-sink, input: counts, parallelism: 1, config: { path: /tmp/out } }
"#;

    pub(crate) fn demo_job() -> ResolvedJob {
        resolve(&parse_spec_text(DEMO).unwrap(), &demo_kinds()).unwrap()
    }

    /// What a task manager holding the demo's kinds reports: the job manager knows no more.
    pub(crate) fn demo_kinds() -> Vec<KindInfo> {
        use weir_common::job::kind::Role;
        use weir_common::job::schema::{key_column, key_value, OutputSchema};
        vec![
            KindInfo::new("datagen", Role::Source, false, "1").with_output(OutputSchema::Columns(key_value("int64"))),
            KindInfo::new("keyed-count", Role::Operator, true, "1")
                .with_input(vec![key_column()])
                .with_output(OutputSchema::Columns(key_value("int64"))),
            KindInfo::new("file-sink", Role::Sink, false, "1"),
        ]
    }

    fn slots() -> Vec<SlotTarget> {
        (0..2)
            .map(|i| SlotTarget {
                tm_id: format!("tm{i}"),
                instance: i,
                rpc_address: format!("http://rpc{i}"),
                data_address: format!("data{i}:1"),
            })
            .collect()
    }

    fn subtask_state(s: u32, p: u32) -> OperatorSubtaskState {
        OperatorSubtaskState {
            subtask: SubtaskIndex(s),
            keyed: Some(weir_common::checkpoint::KeyedStateHandle {
                backend: weir_common::checkpoint::SnapshotFormat::Rocksdb,
                key_group_range: KeyGroupRange::for_subtask(SubtaskIndex(s), p, 128),
                files: vec![],
                states: vec![],
            }),
            operator_state: None,
            end_of_input: false,
            watermark: None,
        }
    }

    #[test]
    fn datagen_keyed_count_file_sink() {
        let job = demo_job();
        let graph = ExecutionGraph::build(&job);
        let id = JobId("j".into());
        let slots = slots();
        let plan = DeployPlan {
            job_id: &id,
            job: &job,
            graph: &graph,
            attempt: AttemptNumber(1),
            slots: &slots,
            checkpoint_root: "file:///cp",
            restore: None,
            operator_state_inline_limit: 64 << 10,
        };
        let d = build_descriptors(&plan).unwrap();
        assert_eq!(d.len(), 5, "2 datagen + 2 keyed-count + 1 sink");
        let find = |v: u32, s: u32| d.iter().find(|t| t.vertex == VertexId(v) && t.subtask == SubtaskIndex(s)).unwrap();

        let src1 = find(0, 1);
        assert_eq!(src1.operators[0].uid, "events");
        assert!(src1.input.is_none());
        assert_eq!(src1.outputs.len(), 1);
        assert_eq!(src1.outputs[0].partitioning, Partitioning::KeyBy);
        assert_eq!(
            src1.outputs[0].targets,
            vec![(SubtaskIndex(0), "data0:1".to_string()), (SubtaskIndex(1), "data1:1".to_string())]
        );
        assert_eq!(src1.key_group_range, KeyGroupRange { start: 64, end: 127 });

        let cnt0 = find(1, 0);
        assert_eq!(cnt0.key_group_range, KeyGroupRange { start: 0, end: 63 });
        let input = cnt0.input.as_ref().unwrap();
        assert_eq!(input.from_vertex, VertexId(0));
        assert_eq!(input.channels, vec![SubtaskIndex(0), SubtaskIndex(1)]);
        assert_eq!(cnt0.outputs[0].targets, vec![(SubtaskIndex(0), "data0:1".to_string())], "the sink runs in slot 0");
        assert_eq!(cnt0.outputs[0].partitioning, Partitioning::Rebalance);

        let sink = find(2, 0);
        assert_eq!(sink.parallelism, 1);
        assert_eq!(sink.key_group_range, KeyGroupRange { start: 0, end: 127 });
        assert_eq!(sink.input.as_ref().unwrap().channels, vec![SubtaskIndex(0), SubtaskIndex(1)]);
        assert!(sink.outputs.is_empty());
        assert!(d
            .iter()
            .all(|t| t.attempt == AttemptNumber(1) && t.restore.is_none() && t.checkpoint_root == "file:///cp"));

        // Restoring hands each new subtask what the assignment gives it; a changed parallelism rescales.
        let mut operators = BTreeMap::new();
        for (uid, p) in [("events", 2), ("counts", 2), ("out", 1)] {
            operators.insert(
                uid.to_string(),
                OperatorCheckpoint {
                    signature: None,
                    state_config: Default::default(),
                    kind: String::new(),
                    parallelism: p,
                    subtasks: (0..p).map(|s| subtask_state(s, p)).collect(),
                },
            );
        }
        let mut meta = CheckpointMetadata {
            format_version: METADATA_FORMAT_VERSION,
            job_id: id.clone(),
            checkpoint_id: CheckpointId(7),
            timestamp_ms: 1,
            max_parallelism: 128,
            is_final: false,
            operators,
            savepoint: None,
        };
        let d = build_descriptors(&DeployPlan { restore: restore_plan(&meta), ..plan }).unwrap();
        let r = find_restore(&d, 1, 1);
        assert_eq!(r.checkpoint_id, CheckpointId(7));
        assert!(r.own_files);
        assert_eq!(r.operators["counts"].keyed.len(), 1);
        assert_eq!(r.operators["counts"].keyed[0].key_group_range, KeyGroupRange { start: 64, end: 127 });
        assert_eq!(r.operators.len(), 1);

        // Stored at 4, restored at 2: each new subtask opens two old snapshots.
        let counts = meta.operators.get_mut("counts").unwrap();
        *counts = OperatorCheckpoint {
            signature: None,
            state_config: Default::default(),
            kind: String::new(),
            parallelism: 4,
            subtasks: (0..4).map(|s| subtask_state(s, 4)).collect(),
        };
        let d = build_descriptors(&DeployPlan { restore: restore_plan(&meta), ..plan }).unwrap();
        let ranges: Vec<KeyGroupRange> =
            find_restore(&d, 1, 1).operators["counts"].keyed.iter().map(|k| k.key_group_range).collect();
        assert_eq!(ranges, vec![KeyGroupRange { start: 64, end: 95 }, KeyGroupRange { start: 96, end: 127 }]);
        meta.operators.get_mut("counts").unwrap().subtasks.pop();
        assert!(matches!(
            build_descriptors(&DeployPlan { restore: restore_plan(&meta), ..plan }),
            Err(DeployError::MissingSubtask { .. })
        ));
        meta.max_parallelism = 256;
        assert!(matches!(
            build_descriptors(&DeployPlan { restore: restore_plan(&meta), ..plan }),
            Err(DeployError::MaxParallelismChanged { .. })
        ));
        assert!(matches!(
            build_descriptors(&DeployPlan { slots: &slots[..1], ..plan }),
            Err(DeployError::NotEnoughSlots { needed: 2, got: 1 })
        ));
    }

    fn restore_plan(meta: &CheckpointMetadata) -> Option<RestorePlan<'_>> {
        Some(RestorePlan { metadata: meta, root: "file:///cp", own_files: true })
    }

    fn find_restore(d: &[TaskDescriptor], v: u32, s: u32) -> RestoreDescriptor {
        d.iter()
            .find(|t| t.vertex == VertexId(v) && t.subtask == SubtaskIndex(s))
            .and_then(|t| t.restore.clone())
            .unwrap()
    }
}
