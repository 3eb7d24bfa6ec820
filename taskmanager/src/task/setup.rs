//! Setting a task up: building its chain, opening or restoring each operator's keyed and operator state,
//! connecting its input and output channels.

use super::base::{labels, unless_canceled, Task, TaskEnv, TaskEvent};
use super::error::in_operator;
use super::error::TaskError;
use super::event_time::SourceTime;
use super::incremental::Incremental;
use super::output::keyed_mut;
use super::output::{CancelSignal, ChainOp, Head, OutputEdge};
use crate::api::operator::{InitContext, RuntimeInfo};
use crate::api::registry::Instance;
use crate::api::timers::TimerSlot;
use crate::net::{BatchDecoder, ChannelKey, Handshake, InputChannels, Liveness, OutputChannel};
use crate::task::align::{BarrierAligner, Deferred};
use crate::time::valve::WatermarkValve;
use crate::time::MIN_WATERMARK;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use weir_common::checkpoint::FileHandle;
use weir_common::deploy::descriptor::SubtaskRestore;
use weir_common::deploy::descriptor::TaskDescriptor;
use weir_common::ids::SubtaskIndex;
use weir_common::job::spec::StateBackend;
use weir_common::service::store::Store;
use weir_common::state::keygroup::KeyGroupRange;
use weir_state::rocks::RocksOptions;
use weir_state::KeyedStateBackend;
use weir_state::{open_keyed_backend, OperatorStateStore};

/// What every setup step needs: the task's descriptor and environment, the runtime its I/O runs on, and the
/// cancel signal that stops any step at once.
struct SetupCtx<'a> {
    desc: &'a TaskDescriptor,
    env: &'a TaskEnv,
    rt: tokio::runtime::Handle,
    cancel: watch::Receiver<bool>,
}

/// Runs a step of opening state that does I/O (a download, a read of operator state) to its end: a task on its
/// runtime, giving up as soon as it is canceled; the operator test harness on its own runtime.
pub(crate) trait RunIo {
    /// Runs `step` and waits for it.
    fn run<T, E: Into<TaskError>>(
        &mut self,
        step: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, TaskError>;
}

impl RunIo for SetupCtx<'_> {
    fn run<T, E: Into<TaskError>>(
        &mut self,
        step: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, TaskError> {
        unless_canceled(&self.rt, &mut self.cancel, step)
    }
}

impl Task {
    /// Sets a task up: builds its chain and opens each operator's state (restored where the plan says),
    /// initializes the operators, connects its outputs and accepts its inputs.
    pub(super) fn setup(
        desc: TaskDescriptor,
        env: Arc<TaskEnv>,
        rx: mpsc::Receiver<TaskEvent>,
        events: mpsc::Sender<TaskEvent>,
        work_dir: PathBuf,
        key: &ChannelKey,
        cancel: watch::Receiver<bool>,
    ) -> Result<Task, TaskError> {
        // Claim input connections first, so producers that connect early are held for us.
        let incoming = desc.input.as_ref().map(|_| env.data_server.register(key.clone()));
        std::fs::create_dir_all(&work_dir)
            .map_err(|e| TaskError::Other(format!("cannot create {}: {e}", work_dir.display())))?;
        let store = Store::open(&desc.checkpoint_root, &env.store_options)?;
        let mut cx = SetupCtx { desc: &desc, env: &env, rt: env.runtime.clone(), cancel };
        let plan = plan_setup(&desc, &work_dir, |kind| env.registry.info(kind).is_some_and(|k| k.keyed));
        let mut incremental = Incremental::default();
        let mut ops = build_chain(&mut cx, &plan, &store, &mut incremental)?;
        initialize_chain(&mut ops, &plan)?;
        let outputs = connect_outputs(&mut cx, &plan)?;
        let restored_at_end = plan.restored_at_end;
        drop(plan);
        let floor = ops.first().map_or(MIN_WATERMARK, |o| o.watermark);
        // A source with a watermark strategy generates watermarks per split from its records' timestamps.
        let source_time = match (ops.first().map(|o| &o.head), desc.operators.first().and_then(|o| o.watermarks)) {
            (Some(Head::Source(s)), Some(strategy)) => {
                Some(SourceTime::new(&strategy, s.splits() as usize, ops[0].watermark))
            }
            _ => None,
        };
        let first_channels = desc.input.as_ref().map_or(0, |i| i.channels.len());
        let (inputs, n_inputs) = accept_inputs(&mut cx, incoming, events)?;
        Ok(Task {
            env,
            store,
            rx,
            ops,
            outputs,
            inputs,
            second_input_from: if desc.second_input.is_some() { first_channels } else { n_inputs },
            aligner: BarrierAligner::new(n_inputs),
            valve: WatermarkValve::restored(n_inputs, floor),
            source_time,
            watermark_gauge: metrics::gauge!("weir_watermark_ms", &labels(&desc)),
            watermark_lag_gauge: metrics::gauge!("weir_watermark_lag_ms", &labels(&desc)),
            deferred: Deferred::new(n_inputs),
            decoders: (0..n_inputs).map(|_| BatchDecoder::new()).collect(),
            input_ended: false,
            restored_at_end,
            work_dir,
            linger: Duration::from_millis(desc.linger_ms),
            last_flush: Instant::now(),
            records_in: metrics::counter!("weir_records_in_total", &labels(&desc)),
            incremental: Arc::new(parking_lot::Mutex::new(incremental)),
            last_state_metrics: Instant::now(),
            instance: uuid::Uuid::new_v4().simple().to_string()[..12].to_string(),
            savepoint_barriers: BTreeMap::new(),
            suspended_by: None,
            end_input_requested: false,
            sync_seconds: metrics::histogram!("weir_checkpoint_sync_seconds", &labels(&desc)),
            desc,
        })
    }
}

/// Builds the chain: each operator from the registry with its state opened (restored where the plan says), then
/// who feeds whom and which output edges leave which operator.
fn build_chain(
    cx: &mut SetupCtx<'_>,
    plan: &SetupPlan<'_>,
    store: &Store,
    incremental: &mut Incremental,
) -> Result<Vec<ChainOp>, TaskError> {
    let (desc, env) = (cx.desc, cx.env);
    // Restored state is read from where the job manager says (a savepoint lives in its own directory).
    let restore_store = match &plan.source {
        RestoreSource::Nothing => None,
        RestoreSource::Checkpoints => Some(store.clone()),
        RestoreSource::Elsewhere(root) => Some(Store::open_existing(root, &env.store_options)?),
    };
    let mut ops = Vec::with_capacity(plan.operators.len());
    for (od, op) in desc.operators.iter().zip(&plan.operators) {
        let info = RuntimeInfo {
            uid: od.uid.clone(),
            job_id: desc.job_id.0.clone(),
            attempt: desc.attempt.0,
            subtask: desc.subtask,
            parallelism: desc.parallelism,
            max_parallelism: desc.max_parallelism,
            key_group_range: desc.key_group_range,
        };
        let head = match env.registry.build(&od.kind, &od.config) {
            Ok(Instance::Source(s)) => Head::Source(s),
            Ok(Instance::Operator(o)) => Head::Operator(o),
            Err(e) => return Err(TaskError::Other(format!("operator {:?}: {e}", od.uid))),
        };
        let site = KeyedSite {
            backend: desc.state_backend,
            max_parallelism: desc.max_parallelism,
            range: desc.key_group_range,
            rocks: &env.rocks,
            own_files: plan.own_files,
        };
        let declared = env.registry.info(&od.kind).and_then(|k| k.signature.as_ref());
        let opened = open_state(cx, &site, &od.uid, op, restore_store.as_ref(), declared)?;
        // The restored checkpoint completed, so its files may be referenced again.
        if let Some(files) = opened.reusable {
            incremental.confirmed.insert(od.uid.clone(), files);
        }
        let late_records = metrics::counter!(
            "weir_late_records_total",
            "job_id" => desc.job_id.0.clone(),
            "operator" => od.uid.clone(),
            "subtask" => desc.subtask.0.to_string()
        );
        ops.push(ChainOp {
            info,
            head,
            keyed: opened.keyed,
            timers: opened.timers,
            op_state: opened.op_state,
            watermark: opened.watermark,
            late_records,
            feeds: Vec::new(),
            edges: Vec::new(),
            canceled: CancelSignal::new(cx.cancel.clone()),
        });
    }
    // Who feeds whom in the chain: an operator reads the one its descriptor names (the one before it, for a
    // chain without fan-out); main output edges leave the operator they name (the chain's last one).
    for (i, od) in desc.operators.iter().enumerate().skip(1) {
        let from = od.chained_to.map_or(i - 1, |f| f as usize);
        if from >= i {
            return Err(TaskError::Other(format!("operator {:?} is chained to a later one ({from})", od.uid)));
        }
        ops[from].feeds.push(i);
    }
    let last = ops.len().saturating_sub(1);
    for (e, out) in desc.outputs.iter().enumerate().filter(|(_, o)| o.side.is_none()) {
        let from = out.from.map_or(last, |f| f as usize);
        ops.get_mut(from)
            .ok_or_else(|| TaskError::Other(format!("an output edge from chain index {from}, past the chain")))?
            .edges
            .push(e);
    }
    Ok(ops)
}

/// Where an operator's keyed state is opened: the job's backend over the subtask's key groups.
pub(crate) struct KeyedSite<'a> {
    /// The job's backend.
    pub backend: StateBackend,
    /// Number of key groups.
    pub max_parallelism: u32,
    /// The subtask's key groups.
    pub range: KeyGroupRange,
    /// Tuning of RocksDB (and the TTL clock of either backend, if set).
    pub rocks: &'a RocksOptions,
    /// The restored files are the job's own checkpoint's, which later incremental checkpoints may reference.
    pub own_files: bool,
}

/// One operator's state as its subtask starts with it.
pub(crate) struct OpenedState {
    /// Its operator state.
    pub op_state: OperatorStateStore,
    /// Its keyed state (keyed kinds).
    pub keyed: Option<Box<dyn KeyedStateBackend>>,
    /// Its timers: open when the restored keyed state holds some.
    pub timers: TimerSlot,
    /// The watermark it restores at (the lowest of its old subtasks'), or the minimum.
    pub watermark: i64,
    /// Shareable files of the restored keyed snapshot, when it is one snapshot of this job's own opened as it is.
    pub reusable: Option<HashMap<String, FileHandle>>,
}

/// Opens one operator's state as `op` plans it: its operator state read from `restore_store`; its keyed state
/// none for a stateless kind, restored (downloaded, opened over the site's key groups, its serializers migrated
/// to `declared`) or fresh; the timers its restored state holds; the watermark it restores at, never below.
pub(crate) fn open_state(
    io: &mut impl RunIo,
    site: &KeyedSite<'_>,
    uid: &str,
    op: &OperatorPlan<'_>,
    restore_store: Option<&Store>,
    declared: Option<&weir_common::job::kind::KindSignature>,
) -> Result<OpenedState, TaskError> {
    let op_state = match (op.restore, restore_store) {
        (Some(r), Some(store)) => io.run(crate::task::restore::operator_state(store, &r.operator_state))?,
        _ => OperatorStateStore::new(),
    };
    let (mut keyed, reusable) = match (&op.keyed, restore_store) {
        (KeyedPlan::Stateless, _) => (None, None),
        (KeyedPlan::Restore { from, download_dir, state_dir }, Some(store)) => {
            let downloaded = io.run(crate::task::restore::download_keyed(store, &from.keyed, download_dir))?;
            let target = crate::task::restore::KeyedTarget {
                kind: site.backend,
                range: site.range,
                max_parallelism: site.max_parallelism,
                state_dir,
                rocks: site.rocks,
                own_files: site.own_files,
            };
            let mut restored = crate::task::restore::open_keyed(&target, downloaded)?;
            let _ = std::fs::remove_dir_all(download_dir);
            crate::task::restore::migrate_keyed(uid, restored.backend.as_mut(), &from.serializers, declared)?;
            (Some(restored.backend), restored.reusable)
        }
        (KeyedPlan::Fresh { state_dir } | KeyedPlan::Restore { state_dir, .. }, _) => {
            let backend =
                open_keyed_backend(site.backend, state_dir, site.max_parallelism, site.range, None, site.rocks)?;
            (Some(backend), None)
        }
    };
    let timers = restored_timers(keyed_mut(&mut keyed), site.range)?;
    let watermark = op.restore.and_then(|r| r.watermark).unwrap_or(MIN_WATERMARK);
    Ok(OpenedState { op_state, keyed, timers, watermark, reusable })
}

/// Calls each operator's `initialize_state` with its state, telling it whether it was restored.
fn initialize_chain(ops: &mut [ChainOp], plan: &SetupPlan<'_>) -> Result<(), TaskError> {
    for (op, planned) in ops.iter_mut().zip(&plan.operators) {
        let mut ctx = init_context(&op.info, planned.restore.is_some(), &mut op.op_state, &mut op.keyed);
        let result = match &mut op.head {
            Head::Source(s) => s.initialize_state(&mut ctx),
            Head::Operator(o) => o.initialize_state(&mut ctx),
        };
        result.map_err(|e| in_operator(&op.info.uid, e))?;
    }
    Ok(())
}

/// The context an operator's `initialize_state` gets: where it runs, whether it was restored, its state.
pub(crate) fn init_context<'a>(
    info: &'a RuntimeInfo,
    restored: bool,
    operator_state: &'a mut OperatorStateStore,
    keyed: &'a mut Option<Box<dyn KeyedStateBackend>>,
) -> InitContext<'a> {
    InitContext { info, restored, operator_state, keyed: keyed_mut(keyed) }
}

/// Connects every output edge's channels, each to its consumer's data address.
fn connect_outputs(cx: &mut SetupCtx<'_>, plan: &SetupPlan<'_>) -> Result<Vec<OutputEdge>, TaskError> {
    let (desc, env) = (cx.desc, cx.env);
    let mut outputs = Vec::with_capacity(desc.outputs.len());
    for (out, connections) in desc.outputs.iter().zip(&plan.outputs) {
        let mut channels = Vec::with_capacity(connections.len());
        for (addr, hs) in connections {
            let connect = OutputChannel::connect(
                env.data_server.security(),
                addr,
                hs,
                env.connect_timeout,
                Liveness::default(),
                cx.cancel.clone(),
            );
            channels.push(cx.run(connect)?);
        }
        let n = channels.len();
        outputs.push(OutputEdge {
            partitioning: out.partitioning,
            targets: channels.into_iter().map(super::output::Target::new).collect(),
            next: desc.subtask.0 as usize % n.max(1),
            to_parallelism: out.to_parallelism,
            max_parallelism: desc.max_parallelism,
            records_out: metrics::counter!("weir_records_out_total", &labels(desc)),
            groups: Vec::new(),
            rows_of: vec![Vec::new(); n],
            keyed_schema: None,
            side: out.side.clone(),
        });
    }
    Ok(outputs)
}

/// Accepts the channels of the task's first input, then those of a two-input head's second (each producer by
/// its vertex and subtask): the channels and how many there are.
fn accept_inputs(
    cx: &mut SetupCtx<'_>,
    incoming: Option<mpsc::UnboundedReceiver<crate::net::Incoming>>,
    events: mpsc::Sender<TaskEvent>,
) -> Result<(Option<InputChannels>, usize), TaskError> {
    let (desc, env) = (cx.desc, cx.env);
    let producers_of = |i: &weir_common::deploy::descriptor::InputDescriptor, input: u32| -> Vec<(u32, u32, u32)> {
        i.channels.iter().map(|s: &SubtaskIndex| (i.from_vertex.0, s.0, input)).collect()
    };
    match (&desc.input, incoming) {
        (Some(input), Some(incoming)) => {
            let mut producers = producers_of(input, 0);
            producers.extend(desc.second_input.as_ref().map(|i| producers_of(i, 1)).unwrap_or_default());
            let accept = InputChannels::accept(
                incoming,
                &producers,
                events,
                TaskEvent::Channel,
                env.connect_timeout,
                Liveness::default(),
            );
            let ch = cx.run(accept)?;
            let n = ch.len();
            Ok((Some(ch), n))
        }
        _ => Ok((None, 0)),
    }
}

/// Where a task's restored state is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RestoreSource {
    /// Nothing is restored: every operator starts empty.
    Nothing,
    /// The job's own checkpoint root (a checkpoint of this job).
    Checkpoints,
    /// Another root: a savepoint's, or a retained checkpoint of another job.
    Elsewhere(String),
}

/// How one operator's keyed state starts.
#[derive(Debug, PartialEq)]
pub(crate) enum KeyedPlan<'a> {
    /// The kind is not keyed: no keyed backend.
    Stateless,
    /// An empty backend in `state_dir`.
    Fresh {
        /// Where the backend lives.
        state_dir: PathBuf,
    },
    /// Download `from`'s keyed snapshots to `download_dir`, open them in `state_dir`, migrate what changed.
    Restore {
        /// What the job manager assigned this subtask.
        from: &'a SubtaskRestore,
        /// Where the snapshots are downloaded to (deleted once opened).
        download_dir: PathBuf,
        /// Where the backend lives.
        state_dir: PathBuf,
    },
}

/// What one operator of the chain starts from.
#[derive(Debug, PartialEq)]
pub(crate) struct OperatorPlan<'a> {
    /// Set when the checkpoint or savepoint has the operator: its operator state is read from it, and its
    /// `initialize_state` hears it was restored. An operator the checkpoint lacks (new in this job) starts
    /// afresh, even when the rest of the job restores: a source added to a job reads from its beginning.
    pub restore: Option<&'a SubtaskRestore>,
    /// Its keyed state.
    pub keyed: KeyedPlan<'a>,
}

/// Everything a task's setup decides before it does any I/O.
#[derive(Debug, PartialEq)]
pub(crate) struct SetupPlan<'a> {
    /// Where restored state comes from.
    pub source: RestoreSource,
    /// The restored files are the job's own checkpoint's, which later incremental checkpoints may reference.
    pub own_files: bool,
    /// Every old subtask had consumed all of its input: the task does not read its input again.
    pub restored_at_end: bool,
    /// Per operator of the chain, head first.
    pub operators: Vec<OperatorPlan<'a>>,
    /// Per output edge, the connections to open: the consumer's data address and the handshake naming it.
    pub outputs: Vec<Vec<(&'a str, Handshake)>>,
}

/// Decides how a task starts: which operators restore what, from which root, into which directories, and
/// which channels it opens. `keyed` says whether an operator kind is keyed.
pub(crate) fn plan_setup<'a>(desc: &'a TaskDescriptor, work_dir: &Path, keyed: impl Fn(&str) -> bool) -> SetupPlan<'a> {
    let restore = desc.restore.as_ref();
    let source = match restore {
        None => RestoreSource::Nothing,
        Some(r) if r.root == desc.checkpoint_root => RestoreSource::Checkpoints,
        Some(r) => RestoreSource::Elsewhere(r.root.clone()),
    };
    let operators = desc
        .operators
        .iter()
        .map(|od| {
            let from = restore.and_then(|r| r.operators.get(&od.uid));
            let state_dir = work_dir.join(format!("state-{}", od.uid));
            let keyed = match from.filter(|r| !r.keyed.is_empty()) {
                _ if !keyed(&od.kind) => KeyedPlan::Stateless,
                Some(from) => {
                    KeyedPlan::Restore { from, download_dir: work_dir.join(format!("restore-{}", od.uid)), state_dir }
                }
                None => KeyedPlan::Fresh { state_dir },
            };
            OperatorPlan { restore: from, keyed }
        })
        .collect();
    let outputs = desc
        .outputs
        .iter()
        .map(|out| {
            out.targets
                .iter()
                .map(|(sub, addr)| {
                    let to = ChannelKey {
                        job_id: desc.job_id.0.clone(),
                        attempt: desc.attempt.0,
                        vertex: out.to_vertex.0,
                        subtask: sub.0,
                    };
                    (
                        addr.as_str(),
                        Handshake {
                            to,
                            from_vertex: desc.vertex.0,
                            from_subtask: desc.subtask.0,
                            to_input: out.to_input,
                        },
                    )
                })
                .collect()
        })
        .collect();
    SetupPlan {
        source,
        own_files: restore.is_some_and(|r| r.own_files),
        restored_at_end: restore.is_some_and(|r| r.operators.values().any(|s| s.end_of_input)),
        operators,
        outputs,
    }
}

/// The timer service of a keyed operator whose restored state holds timers (so they fire whether or not the
/// operator sets another one); others open theirs on first use.
fn restored_timers(
    keyed: Option<&mut dyn KeyedStateBackend>,
    range: weir_common::state::keygroup::KeyGroupRange,
) -> Result<TimerSlot, TaskError> {
    let mut slot = TimerSlot::default();
    if let Some(backend) = keyed {
        let names = backend.state_summaries()?;
        if names.iter().any(|s| weir_state::timers::TimeDomain::of_state(&s.name).is_some()) {
            slot.open(backend, range).map_err(TaskError::Operator)?;
        }
    }
    Ok(slot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_common::checkpoint::FileHandle;
    use weir_common::checkpoint::KeyedStateHandle;
    use weir_common::deploy::descriptor::{OperatorDescriptor, OutputDescriptor, RestoreDescriptor};
    use weir_common::ids::CheckpointId;
    use weir_common::ids::{AttemptNumber, JobId, VertexId};
    use weir_common::job::spec::{Partitioning, StateBackend};
    use weir_common::state::keygroup::KeyGroupRange;

    const ROOT: &str = "file:///ckpt";

    fn op(uid: &str, kind: &str) -> OperatorDescriptor {
        OperatorDescriptor {
            uid: uid.into(),
            kind: kind.into(),
            config: Default::default(),
            watermarks: None,
            chained_to: None,
        }
    }

    /// A chain `src` (datagen, not keyed) → `count` (keyed-count, keyed) of subtask 1 of vertex 0.
    fn desc() -> TaskDescriptor {
        TaskDescriptor {
            job_id: JobId("j".into()),
            job_name: "j".into(),
            attempt: AttemptNumber(3),
            vertex: VertexId(0),
            subtask: SubtaskIndex(1),
            parallelism: 2,
            max_parallelism: 128,
            key_group_range: KeyGroupRange { start: 64, end: 127 },
            operators: vec![op("src", "datagen"), op("count", "keyed-count")],
            state_backend: StateBackend::Rocksdb,
            checkpoint_root: ROOT.into(),
            incremental: true,
            operator_state_inline_limit: 64 << 10,
            input: None,
            second_input: None,
            outputs: vec![OutputDescriptor {
                to_vertex: VertexId(1),
                partitioning: Partitioning::Rebalance,
                targets: vec![(SubtaskIndex(0), "10.0.0.1:7000".into()), (SubtaskIndex(1), "10.0.0.2:7000".into())],
                to_parallelism: 2,
                side: None,
                from: None,
                to_input: 0,
            }],
            linger_ms: 7,
            restore: None,
        }
    }

    fn keyed_kind(kind: &str) -> bool {
        kind == "keyed-count"
    }

    fn keyed_handle() -> KeyedStateHandle {
        KeyedStateHandle {
            backend: weir_common::checkpoint::SnapshotFormat::Rocksdb,
            key_group_range: KeyGroupRange { start: 0, end: 127 },
            files: vec![FileHandle { path: "a/1.sst".into(), size: 10 }],
            states: vec![],
        }
    }

    fn restore(root: &str, own_files: bool, ops: &[(&str, SubtaskRestore)]) -> RestoreDescriptor {
        RestoreDescriptor {
            checkpoint_id: CheckpointId(7),
            root: root.into(),
            own_files,
            operators: ops.iter().map(|(u, r)| (u.to_string(), r.clone())).collect(),
        }
    }

    #[test]
    fn without_a_restore_every_operator_starts_empty_and_only_keyed_kinds_get_a_backend() {
        let d = desc();
        let plan = plan_setup(&d, Path::new("/w"), keyed_kind);
        assert_eq!(plan.source, RestoreSource::Nothing);
        assert!(!plan.own_files && !plan.restored_at_end);
        assert_eq!(plan.operators[0], OperatorPlan { restore: None, keyed: KeyedPlan::Stateless });
        assert_eq!(
            plan.operators[1],
            OperatorPlan { restore: None, keyed: KeyedPlan::Fresh { state_dir: PathBuf::from("/w/state-count") } }
        );
    }

    #[test]
    fn a_checkpoint_of_the_job_restores_from_its_own_root_and_its_files_may_be_shared_again() {
        let mut d = desc();
        let count = SubtaskRestore { keyed: vec![keyed_handle()], ..Default::default() };
        d.restore = Some(restore(ROOT, true, &[("src", SubtaskRestore::default()), ("count", count.clone())]));
        let plan = plan_setup(&d, Path::new("/w"), keyed_kind);
        assert_eq!(plan.source, RestoreSource::Checkpoints);
        assert!(plan.own_files);
        assert!(plan.operators[0].restore.is_some(), "the source's operator state (its offsets) is restored");
        assert_eq!(plan.operators[0].keyed, KeyedPlan::Stateless);
        assert_eq!(
            plan.operators[1].keyed,
            KeyedPlan::Restore {
                from: &count,
                download_dir: PathBuf::from("/w/restore-count"),
                state_dir: PathBuf::from("/w/state-count"),
            }
        );
    }

    #[test]
    fn a_savepoint_is_read_from_its_own_root_and_an_operator_it_lacks_starts_afresh() {
        let mut d = desc();
        let count = SubtaskRestore { keyed: vec![keyed_handle()], ..Default::default() };
        d.restore = Some(restore("s3://b/savepoints/sp-1", false, &[("count", count)]));
        let plan = plan_setup(&d, Path::new("/w"), keyed_kind);
        assert_eq!(plan.source, RestoreSource::Elsewhere("s3://b/savepoints/sp-1".into()));
        assert!(!plan.own_files, "a savepoint's files are never referenced by the job's checkpoints");
        assert_eq!(plan.operators[0], OperatorPlan { restore: None, keyed: KeyedPlan::Stateless });
        assert!(matches!(plan.operators[1].keyed, KeyedPlan::Restore { .. }));
    }

    #[test]
    fn a_keyed_operator_restored_without_keyed_snapshots_opens_an_empty_backend_but_counts_as_restored() {
        let mut d = desc();
        d.restore = Some(restore(ROOT, true, &[("count", SubtaskRestore::default())]));
        let plan = plan_setup(&d, Path::new("/w"), keyed_kind);
        assert!(plan.operators[1].restore.is_some());
        assert_eq!(plan.operators[1].keyed, KeyedPlan::Fresh { state_dir: PathBuf::from("/w/state-count") });
    }

    #[test]
    fn end_of_input_is_restored_when_any_operator_had_consumed_its_input() {
        let mut d = desc();
        let ended = SubtaskRestore { end_of_input: true, ..Default::default() };
        d.restore = Some(restore(ROOT, true, &[("src", ended), ("count", SubtaskRestore::default())]));
        assert!(plan_setup(&d, Path::new("/w"), keyed_kind).restored_at_end);
    }

    #[test]
    fn each_output_channel_names_its_consumer_and_this_producer() {
        let d = desc();
        let plan = plan_setup(&d, Path::new("/w"), keyed_kind);
        let edge = &plan.outputs[0];
        assert_eq!(edge.len(), 2);
        for (i, (addr, hs)) in edge.iter().enumerate() {
            assert_eq!(*addr, d.outputs[0].targets[i].1);
            assert_eq!((hs.to.job_id.as_str(), hs.to.attempt, hs.to.vertex, hs.to.subtask), ("j", 3, 1, i as u32));
            assert_eq!((hs.from_vertex, hs.from_subtask), (0, 1));
        }
    }
}
