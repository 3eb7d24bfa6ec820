//! What one operator or source holds as a subtask (its state, timers, watermark, clock and snapshots' store),
//! what it emitted, and how the harness runs the task's I/O.

use super::{Snapshot, INLINE_OFFSETS};
use crate::api::batch::{keys, records};
use crate::api::error::OperatorError;
use crate::api::operator::{Collector, InitContext, ProcessContext, RuntimeInfo, SnapshotContext};
use crate::api::record::Record;
use crate::api::timers::TimerSlot;
use crate::task::{snapshot_part, upload_part, PartDirs, PartUpload, RunIo, TaskError};
use arrow_array::{Array, RecordBatch};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use weir_common::checkpoint::{paths, OperatorCheckpoint};
use weir_common::ids::{CheckpointId, JobId};
use weir_common::service::store::Store;
use weir_common::state::keygroup::key_group_for_key;
use weir_state::rocks::RocksOptions;
use weir_state::{Clock, KeyedStateBackend, ManualClock, OperatorStateStore};

/// Runs a setup step's I/O on the harness's runtime.
pub(super) struct OnRuntime<'a>(pub(super) &'a tokio::runtime::Runtime);

impl RunIo for OnRuntime<'_> {
    fn run<T, E: Into<TaskError>>(
        &mut self,
        step: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, TaskError> {
        self.0.block_on(step).map_err(Into::into)
    }
}

/// A task's error as the harness reports it: an operator's own error as it raised it.
pub(super) fn error(e: TaskError) -> OperatorError {
    match e {
        TaskError::Operator(OperatorError::InOperator { source, .. }) => *source,
        TaskError::Operator(e) => e,
        TaskError::State(e) => OperatorError::State(e),
        other => OperatorError::Records(other.to_string()),
    }
}

/// What one operator or source holds as a subtask: its state, timers, watermark and clock, and where its
/// snapshots go.
pub(super) struct Slot {
    pub(super) info: RuntimeInfo,
    pub(super) kind: String,
    /// The job id of the store paths its snapshots are written under (its own, whatever `info.job_id` says).
    pub(super) paths_job: JobId,
    pub(super) keyed: Option<Box<dyn KeyedStateBackend>>,
    pub(super) timers: TimerSlot,
    pub(super) op_state: OperatorStateStore,
    pub(super) watermark: i64,
    pub(super) clock: Arc<ManualClock>,
    pub(super) rocks: RocksOptions,
    pub(super) store: Store,
    pub(super) restored: bool,
    /// Restored from a snapshot taken after the end of the input: no input may come, no hook runs again.
    pub(super) restored_at_end: bool,
    pub(super) input_ended: bool,
    /// Snapshots taken, naming each one's local directory.
    pub(super) snapshots: u64,
    pub(super) rt: tokio::runtime::Runtime,
    pub(super) work: tempfile::TempDir,
}

impl Slot {
    pub(super) fn init_context(&mut self) -> InitContext<'_> {
        crate::task::init_context(&self.info, self.restored, &mut self.op_state, &mut self.keyed)
    }

    /// What a harness's `Debug` shows: where it runs and how far it got.
    pub(super) fn describe(&self, name: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(name)
            .field("uid", &self.info.uid)
            .field("subtask", &self.info.subtask.0)
            .field("parallelism", &self.info.parallelism)
            .field("key_groups", &self.info.key_group_range)
            .field("keyed", &self.keyed.as_ref().map(|k| k.kind()))
            .field("restored", &self.restored)
            .field("watermark", &self.watermark)
            .field("processing_time", &self.clock.now_ms())
            .finish()
    }

    pub(super) fn context(&mut self) -> ProcessContext<'_> {
        crate::task::op_context(&self.info, &mut self.keyed, &mut self.timers, self.watermark)
    }

    pub(super) fn keyed(&mut self) -> Result<&mut dyn KeyedStateBackend, OperatorError> {
        match self.keyed.as_mut() {
            Some(k) => Ok(k.as_mut()),
            None => Err(OperatorError::Misuse(format!("operator {:?} has no keyed state", self.info.uid))),
        }
    }

    /// Refuses input a task would not pass on: any after a restore at the end of input, and, for a keyed
    /// operator, rows of keys outside its key groups (a key-by edge never routes them here).
    pub(super) fn check_input(&self, batch: &RecordBatch) -> Result<(), OperatorError> {
        if self.restored_at_end {
            return Err(OperatorError::Records("records arrived after end of input".into()));
        }
        if self.keyed.is_none() || batch.num_rows() == 0 {
            return Ok(());
        }
        let (keys, range) = (keys(batch)?, self.info.key_group_range);
        for i in 0..keys.len() {
            let group = key_group_for_key(keys.value(i), self.info.max_parallelism);
            if !range.contains(group) {
                return Err(OperatorError::Records(format!(
                    "row {i}: its key is in key group {}, not one of this subtask's ({}..={}): route the rows with \
                     testing::partition",
                    group.0, range.start, range.end
                )));
            }
        }
        Ok(())
    }

    /// Takes the synchronous part of snapshot `id` (the operator's hook is `hook`) and uploads it.
    pub(super) fn snapshot(
        &mut self,
        id: u64,
        canonical: bool,
        hook: impl FnOnce(&mut SnapshotContext<'_>) -> Result<(), OperatorError>,
    ) -> Result<Snapshot, OperatorError> {
        self.snapshots += 1;
        let dir = self.work.path().join(format!("chk-{id}-{}", self.snapshots));
        let checkpoint_id = CheckpointId(id);
        let mut ctx =
            SnapshotContext { checkpoint_id, timestamp_ms: self.clock.now_ms(), operator_state: &mut self.op_state };
        let keyed = crate::task::keyed_mut(&mut self.keyed);
        let part = snapshot_part(&self.info.uid, &mut ctx, hook, keyed, self.watermark, &dir).map_err(error)?;
        let remote = paths::subtask_dir(&self.paths_job, checkpoint_id, &self.info.uid, self.info.subtask);
        let how = PartUpload {
            canonical,
            confirmed: &HashMap::new(),
            inline_limit: INLINE_OFFSETS,
            max_parallelism: self.info.max_parallelism,
            rocks: &self.rocks,
            local_dir: &dir,
            subtask: self.info.subtask,
            end_of_input: self.input_ended,
        };
        let uploaded = self.rt.block_on(upload_part(&self.store, part, PartDirs { remote, shared: None }, &how));
        let _ = std::fs::remove_dir_all(&dir);
        let (state, _) = uploaded.map_err(error)?;
        Ok(Snapshot {
            id: checkpoint_id,
            store: self.store.clone(),
            max_parallelism: self.info.max_parallelism,
            checkpoint: OperatorCheckpoint {
                kind: self.kind.clone(),
                parallelism: self.info.parallelism,
                subtasks: vec![state],
                signature: None,
                state_config: Default::default(),
            },
        })
    }
}

/// What an operator or source emitted and nobody has taken yet.
#[derive(Default)]
pub(super) struct Emitted {
    pub(super) main: Vec<RecordBatch>,
    pub(super) side: BTreeMap<String, Vec<RecordBatch>>,
    pub(super) watermarks: Vec<i64>,
}

impl Emitted {
    /// The main output's batches as key/value records, taken.
    pub(super) fn take_records(&mut self) -> Result<Vec<Record>, OperatorError> {
        let mut out = Vec::new();
        for batch in std::mem::take(&mut self.main) {
            out.extend(records(&batch)?);
        }
        Ok(out)
    }

    /// Runs `f` with a collector whose batches are kept here, and flushes it.
    pub(super) fn collect<T>(
        &mut self,
        f: impl FnOnce(&mut Collector<'_>) -> Result<T, OperatorError>,
    ) -> Result<T, OperatorError> {
        let (main, side) = (&mut self.main, &mut self.side);
        let mut route = |tag: Option<&str>, batch: RecordBatch| {
            match tag {
                None => main.push(batch),
                Some(tag) => side.entry(tag.to_string()).or_default().push(batch),
            }
            Ok(())
        };
        let mut out = Collector::routed(&mut route);
        let result = f(&mut out)?;
        out.flush()?;
        Ok(result)
    }
}
