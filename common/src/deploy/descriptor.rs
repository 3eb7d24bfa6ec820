//! The execution graph (operators chained into vertices) and the descriptor the job manager sends a task
//! manager to deploy one subtask of one vertex.

use crate::checkpoint::{DistributionMode, FileHandle, KeyedStateHandle};
use crate::ids::{AttemptNumber, CheckpointId, JobId, SubtaskIndex, VertexId};
use crate::job::spec::{Partitioning, ResolvedJob, StateBackend};
use crate::state::keygroup::KeyGroupRange;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A chain of operators that runs as one task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Vertex {
    /// Vertex id (its index in [`ExecutionGraph::vertices`]).
    pub id: VertexId,
    /// Indexes of the chained operators in [`ResolvedJob::operators`], head first.
    pub operators: Vec<usize>,
    /// Parallelism shared by the chain.
    pub parallelism: u32,
    /// The upstream vertex and the partitioning of the edge, if the head is not a source.
    pub input: Option<(VertexId, Partitioning)>,
    /// A two-input head's second upstream vertex and the partitioning of that edge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_input: Option<(VertexId, Partitioning)>,
    /// For each chained operator after the head, the position in `operators` of the one it reads (empty: each
    /// reads the one before it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chained_to: Vec<usize>,
    /// Downstream vertices fed by the chain's main outputs.
    pub outputs: Vec<(VertexId, Partitioning)>,
    /// For each of `outputs`, the position in `operators` of the operator emitting it (empty: the last one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_from: Vec<usize>,
    /// For each of `outputs`, which input of its consumer it feeds (empty: the first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_to_input: Vec<u32>,
    /// Downstream vertices fed by a side output of one of the chain's operators.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub side_outputs: Vec<SideEdge>,
}

/// An edge from an operator's side output (late records of a window, say) to the vertex reading it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SideEdge {
    /// The operator emitting it.
    pub uid: String,
    /// Its tag.
    pub tag: String,
    /// The vertex reading it.
    pub to: VertexId,
    /// The edge's partitioning.
    pub partitioning: Partitioning,
}

/// Operators grouped into chained vertices.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutionGraph {
    /// Vertices in topological order.
    pub vertices: Vec<Vertex>,
}

impl ExecutionGraph {
    /// Chains operators joined by a forward edge with equal parallelism when the upstream has no other
    /// consumer, and orders vertices so that every input comes before its consumers.
    pub fn build(job: &ResolvedJob) -> ExecutionGraph {
        let n = job.operators.len();
        let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut waiting_for = vec![0usize; n];
        for (i, op) in job.operators.iter().enumerate() {
            for up in op.input.into_iter().chain(op.second_input) {
                consumers[up].push(i);
                waiting_for[i] += 1;
            }
        }
        let chained_to_input = |i: usize| -> bool {
            let op = &job.operators[i];
            match op.input {
                // With several readers of one output, each is chained (the chain fans out, as Flink's does).
                Some(up) => {
                    op.partitioning == Partitioning::Forward
                        && op.input_tag.is_none()
                        && op.second_input.is_none()
                        && job.operators[up].parallelism == op.parallelism
                        && job.operators[up].role != crate::job::kind::Role::Sink
                }
                None => false,
            }
        };
        // Topological order of operators (inputs first), depth-first from sources: an operator is taken once
        // all its inputs are.
        let mut order = Vec::with_capacity(n);
        let mut stack: Vec<usize> = (0..n).filter(|&i| waiting_for[i] == 0).rev().collect();
        while let Some(i) = stack.pop() {
            order.push(i);
            for &c in consumers[i].iter().rev() {
                waiting_for[c] -= 1;
                if waiting_for[c] == 0 {
                    stack.push(c);
                }
            }
        }
        let mut vertex_of = vec![usize::MAX; n];
        let mut vertices: Vec<Vertex> = Vec::new();
        for &i in &order {
            if chained_to_input(i) {
                let up = job.operators[i].input.unwrap_or(i);
                let v = vertex_of[up];
                let at = vertices[v].operators.iter().position(|&o| o == up).unwrap_or(0);
                vertices[v].operators.push(i);
                vertices[v].chained_to.push(at);
                vertex_of[i] = v;
            } else {
                let id = vertices.len();
                let input =
                    job.operators[i].input.map(|up| (VertexId(vertex_of[up] as u32), job.operators[i].partitioning));
                if let Some((VertexId(up_v), p)) = input {
                    let to = VertexId(id as u32);
                    match (&job.operators[i].input_tag, job.operators[i].input) {
                        (Some(tag), Some(up)) => vertices[up_v as usize].side_outputs.push(SideEdge {
                            uid: job.operators[up].uid.clone(),
                            tag: tag.clone(),
                            to,
                            partitioning: p,
                        }),
                        (_, Some(up)) => {
                            let from = &mut vertices[up_v as usize];
                            let at = from.operators.iter().position(|&o| o == up).unwrap_or(0);
                            from.outputs.push((to, p));
                            from.output_from.push(at);
                            from.output_to_input.push(0);
                        }
                        _ => {}
                    }
                }
                let second_input = job.operators[i]
                    .second_input
                    .map(|up| (VertexId(vertex_of[up] as u32), job.operators[i].partitioning));
                if let (Some((VertexId(up_v), p)), Some(up)) = (second_input, job.operators[i].second_input) {
                    let from = &mut vertices[up_v as usize];
                    let at = from.operators.iter().position(|&o| o == up).unwrap_or(0);
                    from.outputs.push((VertexId(id as u32), p));
                    from.output_from.push(at);
                    from.output_to_input.push(1);
                }
                vertices.push(Vertex {
                    id: VertexId(id as u32),
                    operators: vec![i],
                    parallelism: job.operators[i].parallelism,
                    input,
                    second_input,
                    chained_to: Vec::new(),
                    outputs: Vec::new(),
                    output_from: Vec::new(),
                    output_to_input: Vec::new(),
                    side_outputs: Vec::new(),
                });
                vertex_of[i] = id;
            }
        }
        ExecutionGraph { vertices }
    }

    /// Number of slots the job needs with slot sharing: the largest vertex parallelism.
    pub fn slots_needed(&self) -> u32 {
        self.vertices.iter().map(|v| v.parallelism).max().unwrap_or(0)
    }
}

/// One operator of a deployed chain.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OperatorDescriptor {
    /// Stable uid.
    pub uid: String,
    /// Registry kind.
    pub kind: String,
    /// Config as given in the spec.
    pub config: crate::job::kind::OperatorConfig,
    /// Sources only: how it generates watermarks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermarks: Option<crate::job::watermarks::WatermarkStrategy>,
    /// The index in the chain of the operator it reads (`None`: the one before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chained_to: Option<u32>,
}

/// The input of a deployed task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InputDescriptor {
    /// Upstream vertex.
    pub from_vertex: VertexId,
    /// Upstream parallelism.
    pub from_parallelism: u32,
    /// Edge partitioning.
    pub partitioning: Partitioning,
    /// Upstream subtasks that send to this subtask.
    pub channels: Vec<SubtaskIndex>,
}

/// One output edge of a deployed task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OutputDescriptor {
    /// Downstream vertex.
    pub to_vertex: VertexId,
    /// Edge partitioning.
    pub partitioning: Partitioning,
    /// Downstream subtasks this subtask sends to, with the data address of the task manager of each.
    pub targets: Vec<(SubtaskIndex, String)>,
    /// Downstream parallelism.
    pub to_parallelism: u32,
    /// The side output the edge carries, as `(operator uid, tag)`; `None` for the tail's main output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side: Option<(String, String)>,
    /// The index in the chain of the operator whose main output the edge carries (`None`: the last one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<u32>,
    /// Which of the consumer's inputs it feeds: 0, or 1 for a two-input head's second input.
    #[serde(default)]
    pub to_input: u32,
}

/// State to restore a task from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RestoreDescriptor {
    /// The checkpoint (or savepoint) restored from.
    pub checkpoint_id: CheckpointId,
    /// Object-store URL that the paths of the handles below are relative to: the checkpoint root for a
    /// checkpoint of this job, the savepoint's (or retained checkpoint's) root otherwise.
    pub root: String,
    /// The files are this job's own checkpoint's: later incremental checkpoints may reference its shared
    /// files. False for savepoints and other jobs' checkpoints, whose files the job never references (so the
    /// first checkpoint after such a restore is a full one).
    pub own_files: bool,
    /// Per operator uid of the chain, what this subtask restores.
    pub operators: BTreeMap<String, SubtaskRestore>,
}

/// What one new subtask of one operator restores, as decided by the job manager's assignment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SubtaskRestore {
    /// Every old keyed snapshot whose key-group range overlaps this subtask's (clipped to it on restore).
    pub keyed: Vec<KeyedStateHandle>,
    /// Operator-state elements to read, per old blob.
    pub operator_state: Vec<OperatorStatePart>,
    /// Every old subtask had consumed all of its input (end-of-input work is not done again).
    pub end_of_input: bool,
    /// The serializers the restored state was written with: a state whose serializer now needs a migration is
    /// rewritten before the operator starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub serializers: Vec<crate::state::serializer::StateSerializers>,
    /// The lowest watermark of the old subtasks, if each had one: the restored operator never emits or sees a
    /// watermark below it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<i64>,
}

/// Elements of some operator states inside one old operator-state blob.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OperatorStatePart {
    /// The blob.
    pub file: FileHandle,
    /// Per state, which of its elements.
    pub states: Vec<StatePart>,
}

/// Some elements of one operator state inside a blob.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatePart {
    /// State name.
    pub name: String,
    /// Its distribution mode.
    pub mode: DistributionMode,
    /// Where the elements are.
    pub elements: ElementRef,
}

/// Which elements of a state, by their offsets in the blob.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ElementRef {
    /// The offsets of the elements.
    Inline(Vec<u64>),
    /// Elements `first .. first + count` of a state whose offsets are in a file.
    InFile {
        /// The offsets file.
        offsets: FileHandle,
        /// Index of the first element.
        first: u64,
        /// Number of elements.
        count: u64,
    },
}

impl ElementRef {
    /// Number of elements referenced.
    pub fn count(&self) -> u64 {
        match self {
            ElementRef::Inline(o) => o.len() as u64,
            ElementRef::InFile { count, .. } => *count,
        }
    }
}

/// Everything a task manager needs to run one subtask.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskDescriptor {
    /// Job id.
    pub job_id: JobId,
    /// Job name, for logs.
    pub job_name: String,
    /// Deployment attempt.
    pub attempt: AttemptNumber,
    /// Vertex.
    pub vertex: VertexId,
    /// Subtask index.
    pub subtask: SubtaskIndex,
    /// Vertex parallelism.
    pub parallelism: u32,
    /// Number of key groups.
    pub max_parallelism: u32,
    /// Key groups this subtask owns.
    pub key_group_range: KeyGroupRange,
    /// The chained operators, head first.
    pub operators: Vec<OperatorDescriptor>,
    /// State backend.
    pub state_backend: StateBackend,
    /// Object-store URL of the checkpoint root.
    pub checkpoint_root: String,
    /// Incremental checkpoints.
    pub incremental: bool,
    /// Per operator state, element offsets up to this many bytes travel inline in the acknowledgement;
    /// beyond it they are written to a file next to the blob.
    #[serde(default = "default_inline_limit")]
    pub operator_state_inline_limit: u64,
    /// Input, if the head is not a source.
    pub input: Option<InputDescriptor>,
    /// A two-input head's second input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second_input: Option<InputDescriptor>,
    /// Outputs of the tail.
    pub outputs: Vec<OutputDescriptor>,
    /// Longest a partly filled batch waits before it is sent, ms.
    #[serde(default = "default_linger_ms")]
    pub linger_ms: u64,
    /// State to restore. Travels as a protobuf message of its own next to the rest
    /// (`DeployTaskRequest.restore` beside `.descriptor`, see [`crate::deploy::wire`]), not inside it.
    #[serde(skip)]
    pub restore: Option<RestoreDescriptor>,
}

/// Default of [`TaskDescriptor::operator_state_inline_limit`]: 64 KiB.
pub const DEFAULT_OPERATOR_STATE_INLINE_LIMIT: u64 = 64 << 10;

fn default_linger_ms() -> u64 {
    crate::job::spec::DEFAULT_LINGER_MS
}

fn default_inline_limit() -> u64 {
    DEFAULT_OPERATOR_STATE_INLINE_LIMIT
}

/// The upstream subtasks of `to` (of `to_p`) on an edge from a vertex of parallelism `from_p`.
pub fn input_channels(partitioning: Partitioning, from_p: u32, to: SubtaskIndex, to_p: u32) -> Vec<SubtaskIndex> {
    match partitioning {
        Partitioning::Forward => {
            debug_assert_eq!(from_p, to_p);
            vec![to]
        }
        _ => (0..from_p).map(SubtaskIndex).collect(),
    }
}

/// The downstream subtasks that `from` sends to on an edge to a vertex of parallelism `to_p`.
pub fn output_targets(partitioning: Partitioning, from: SubtaskIndex, to_p: u32) -> Vec<SubtaskIndex> {
    match partitioning {
        Partitioning::Forward => vec![from],
        _ => (0..to_p).map(SubtaskIndex).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::spec::{parse_spec_text, resolve};

    /// A window's late records, read as `win.late`: the reader gets a vertex and a side edge of its own, and the
    /// window's main output still chains into its single main reader.
    #[test]
    fn a_side_output_reader_is_never_chained() {
        let text = r#"
name: late
operators:
  - { uid: src, kind: datagen, config: { event_time: { start_ms: 0 } }, watermarks: { max_out_of_orderness_ms: 5 } }
  - { uid: win, kind: window-aggregate, input: src, config: { window: { tumbling_ms: 10 }, late: side-output } }
  - { uid: out, kind: file-sink, input: win, config: { path: /tmp/o } }
  - { uid: late, kind: file-sink, input: win.late, config: { path: /tmp/l } }
"#;
        let job = resolve(&parse_spec_text(text).unwrap(), &crate::job::spec::tests::test_kinds()).unwrap();
        assert_eq!((job.operators[3].input, job.operators[3].input_tag.as_deref()), (Some(1), Some("late")));
        assert_eq!(job.operators[2].input_tag, None);
        let g = ExecutionGraph::build(&job);
        assert_eq!(g.vertices.len(), 3, "{g:?}");
        assert_eq!(g.vertices[1].operators, vec![1, 2], "the main reader chains");
        assert_eq!(g.vertices[1].outputs, vec![], "the chain's tail is a sink");
        assert_eq!(
            g.vertices[1].side_outputs,
            vec![SideEdge {
                uid: "win".into(),
                tag: "late".into(),
                to: VertexId(2),
                partitioning: Partitioning::Forward
            }]
        );
        assert_eq!(g.vertices[2].input, Some((VertexId(1), Partitioning::Forward)));
    }

    #[test]
    fn chains_forward_edges_only() {
        let text = r#"
name: g
parallelism: 2
operators:
  - { uid: src, kind: datagen }
  - { uid: cnt, kind: keyed-count, input: src }
  - { uid: bh, kind: blackhole, input: cnt }
  - { uid: out, kind: file-sink, input: cnt, parallelism: 1, config: { path: /tmp/x } }
"#;
        let job = resolve(&parse_spec_text(text).unwrap(), &crate::job::spec::tests::test_kinds()).unwrap();
        let g = ExecutionGraph::build(&job);
        // cnt has two consumers: the forward one chains to it, the one of another parallelism does not.
        assert_eq!(g.vertices.len(), 3);
        assert_eq!(g.vertices[1].operators, vec![1, 2]);
        assert_eq!(g.vertices[1].outputs, vec![(VertexId(2), Partitioning::Rebalance)]);
        assert_eq!(g.vertices[1].output_from, vec![0], "cnt's own output, not bh's");
        let text2 = text
            .replace("  - { uid: out, kind: file-sink, input: cnt, parallelism: 1, config: { path: /tmp/x } }\n", "");
        let job2 = resolve(&parse_spec_text(&text2).unwrap(), &crate::job::spec::tests::test_kinds()).unwrap();
        let g2 = ExecutionGraph::build(&job2);
        assert_eq!(g2.vertices.len(), 2);
        assert_eq!(g2.vertices[1].operators, vec![1, 2]);
        assert_eq!(g2.vertices[1].input, Some((VertexId(0), Partitioning::KeyBy)));
        assert_eq!(g2.vertices[0].outputs, vec![(VertexId(1), Partitioning::KeyBy)]);
        assert_eq!(g2.slots_needed(), 2);
    }
}
