//! A test harness for one operator or source, as Flink's `KeyedOneInputStreamOperatorTestHarness`: feed it
//! batches, watermarks and processing time, read what it emits, snapshot it and restore the snapshot, also at
//! another parallelism. Built-in kinds' tests and users' kinds' tests (`examples/`) use it alike.
//!
//! It runs the operator as a task would, with the task's own code where it matters: its state is opened as a
//! task's setup opens it (`plan_setup`, then `open_state`: the real heap or RocksDB backend over the subtask's
//! key groups, its operator state, its restored timers and watermark), timers fire as a task fires them
//! (`fire_due`), a snapshot is taken and uploaded as a checkpoint's (`snapshot_part`, `upload_part`, into an
//! in-memory object store), and a restore gets what the job manager would assign it
//! (`weir_common::deploy::assignment`): at another parallelism a subtask gets only its key groups (old snapshots split
//! or merged), its share of list state, all of union state. What it leaves out: the network, chaining, barrier
//! alignment and the combining of several inputs' watermarks (the harness's watermark is the operator's).
//!
//! Processing time is a manual clock (the TTL clock of the keyed state too), moved by
//! [`OperatorHarness::set_processing_time`]. A harness runs its I/O on a runtime of its own: use it from a plain
//! `#[test]`, not from inside an async runtime.
//!
//! ```no_run
//! # fn main() -> Result<(), weir_taskmanager::api::error::OperatorError> {
//! use weir_common::job::spec::StateBackend;
//! use weir_taskmanager::api::batch::batch_of;
//! use weir_taskmanager::api::record::Record;
//! use weir_taskmanager::testing::{partition, Harness};
//! use weir_taskmanager::builtins::keyed_count::{KeyedCount, KeyedCountConfig, KeyedCountEmit};
//!
//! let count = || KeyedCount::new(KeyedCountConfig { emit: KeyedCountEmit::End });
//! let mut h = Harness::keyed(StateBackend::Rocksdb).open(count())?;
//! let batch = batch_of(&[Record::new_i64(b"a", 1), Record::new_i64(b"b", 1)])?;
//! h.process(&batch)?;
//! let snapshot = h.snapshot(1)?;
//! // The same state as two subtasks: each gets only the keys of its key groups.
//! for (i, rows) in partition(&batch, 2, 128)?.iter().enumerate() {
//!     let mut half = Harness::keyed(StateBackend::Rocksdb).subtask(i as u32, 2).restore(&snapshot).open(count())?;
//!     half.process(rows)?;
//!     half.end_input()?;
//!     let counts = half.take_records()?;
//! #   let _ = counts;
//! }
//! # Ok(())
//! # }
//! ```

use crate::api::batch::{keys, EVENT_TIME, KEY};
use crate::api::error::OperatorError;
use crate::api::operator::{Operator, RuntimeInfo, Source};
use crate::task::{open_state, plan_setup, KeyedSite, RestoreSource};
use arrow_array::{Array, ArrayRef, BinaryArray, RecordBatch, TimestampMillisecondArray, UInt32Array};
use slot::{error, Emitted, OnRuntime, Slot};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use weir_common::deploy::descriptor::{OperatorDescriptor, RestoreDescriptor, TaskDescriptor};
use weir_common::ids::{AttemptNumber, JobId, KeyGroup, SubtaskIndex, VertexId};
use weir_common::job::spec::StateBackend;
use weir_common::service::store::{Store, StoreOptions};
use weir_common::state::keygroup::{key_group_for_key, subtask_for_key_group, KeyGroupRange};
use weir_state::rocks::RocksOptions;
use weir_state::ManualClock;

mod run;
mod slot;
mod snapshot;
#[cfg(test)]
mod tests;

pub use run::{OperatorHarness, SourceHarness};
pub use snapshot::Snapshot;

/// The operator-state offsets a snapshot keeps inline (as a job's default does); more go to a file.
const INLINE_OFFSETS: u64 = 64 << 10;

/// Numbers harness instances, so that each has its own object store and no two write the same paths.
static INSTANCES: AtomicU64 = AtomicU64::new(0);

/// How a harness starts: keyed or not, which subtask of how many, fresh or restored. [`Harness::open`] then
/// gives an [`OperatorHarness`], [`Harness::open_source`] a [`SourceHarness`].
#[derive(Clone)]
pub struct Harness {
    uid: String,
    kind: String,
    job_id: String,
    attempt: u32,
    subtask: u32,
    parallelism: u32,
    max_parallelism: u32,
    keyed: Option<StateBackend>,
    rocks: RocksOptions,
    processing_time: u64,
    restore: Option<Snapshot>,
}

impl Harness {
    /// An operator without keyed state (operator state only): subtask 0 of 1, 128 key groups, fresh.
    pub fn stateless() -> Harness {
        Harness {
            uid: "op".into(),
            kind: "harness".into(),
            job_id: "j".into(),
            attempt: 1,
            subtask: 0,
            parallelism: 1,
            max_parallelism: 128,
            keyed: None,
            rocks: RocksOptions::default(),
            processing_time: 0,
            restore: None,
        }
    }

    /// A keyed operator on `backend` (heap or RocksDB): subtask 0 of 1, 128 key groups, fresh.
    pub fn keyed(backend: StateBackend) -> Harness {
        Harness { keyed: Some(backend), ..Harness::stateless() }
    }

    /// The operator's uid (default `op`).
    pub fn uid(mut self, uid: &str) -> Harness {
        self.uid = uid.into();
        self
    }

    /// The kind name a snapshot records (default `harness`).
    pub fn kind(mut self, kind: &str) -> Harness {
        self.kind = kind.into();
        self
    }

    /// The job id the operator sees in its [`RuntimeInfo`] (default `j`).
    pub fn job_id(mut self, job_id: &str) -> Harness {
        self.job_id = job_id.into();
        self
    }

    /// The deployment attempt the operator sees (default 1).
    pub fn attempt(mut self, attempt: u32) -> Harness {
        self.attempt = attempt;
        self
    }

    /// Runs as subtask `index` of `parallelism`, owning that subtask's key groups.
    pub fn subtask(mut self, index: u32, parallelism: u32) -> Harness {
        (self.subtask, self.parallelism) = (index, parallelism);
        self
    }

    /// The number of key groups (default 128; a restore takes its snapshot's).
    pub fn max_parallelism(mut self, max_parallelism: u32) -> Harness {
        self.max_parallelism = max_parallelism;
        self
    }

    /// Tunes RocksDB (a small write-back cache, say); its clock is replaced by the harness's.
    pub fn rocks(mut self, rocks: RocksOptions) -> Harness {
        self.rocks = rocks;
        self
    }

    /// The processing time the harness starts at (ms; default 0).
    pub fn processing_time(mut self, now_ms: u64) -> Harness {
        self.processing_time = now_ms;
        self
    }

    /// Starts from `snapshot` (at this harness's subtask and parallelism, which may differ from the snapshot's).
    pub fn restore(mut self, snapshot: &Snapshot) -> Harness {
        self.restore = Some(snapshot.clone());
        self
    }

    /// Opens `operator`'s state and calls its `initialize_state`.
    pub fn open<O: Operator>(self, operator: O) -> Result<OperatorHarness<O>, OperatorError> {
        self.open_boxed(Box::new(operator))
    }

    /// [`Harness::open`] for an operator in a box (a kind's `build` gives one).
    pub fn open_boxed<O: Operator + ?Sized>(self, mut op: Box<O>) -> Result<OperatorHarness<O>, OperatorError> {
        let mut slot = self.open_slot()?;
        op.initialize_state(&mut slot.init_context())?;
        Ok(OperatorHarness { op, slot, out: Emitted::default() })
    }

    /// Opens `source`'s state and calls its `initialize_state`.
    pub fn open_source<S: Source>(self, source: S) -> Result<SourceHarness<S>, OperatorError> {
        self.open_source_boxed(Box::new(source))
    }

    /// [`Harness::open_source`] for a source in a box.
    pub fn open_source_boxed<S: Source + ?Sized>(self, mut src: Box<S>) -> Result<SourceHarness<S>, OperatorError> {
        let mut slot = self.open_slot()?;
        src.initialize_state(&mut slot.init_context())?;
        Ok(SourceHarness { src, slot, out: Emitted::default() })
    }

    /// Plans and opens the operator's state as a task's setup does.
    fn open_slot(self) -> Result<Slot, OperatorError> {
        let instance = INSTANCES.fetch_add(1, Ordering::Relaxed);
        let work = tempfile::tempdir().map_err(|e| OperatorError::io("creating the harness's directory", e))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| OperatorError::io("starting the harness's runtime", e))?;
        let clock = Arc::new(ManualClock::new(self.processing_time));
        let rocks = RocksOptions { clock: Some(clock.clone()), ..self.rocks };
        let (store, max_parallelism, restore) = match &self.restore {
            None => {
                let store = Store::open(&format!("memory:///harness-{instance}"), &StoreOptions::default())
                    .map_err(|e| OperatorError::Records(e.to_string()))?;
                (store, self.max_parallelism, None)
            }
            Some(snapshot) => {
                let m = snapshot.max_parallelism;
                let assigned = weir_common::deploy::assignment::assign(&snapshot.checkpoint, self.parallelism, m)
                    .map_err(|e| OperatorError::Records(format!("restoring the snapshot: {e}")))?;
                let part = assigned.into_iter().nth(self.subtask as usize).ok_or_else(|| {
                    OperatorError::Records(format!("subtask {} of {}", self.subtask, self.parallelism))
                })?;
                let restore = RestoreDescriptor {
                    checkpoint_id: snapshot.id,
                    root: snapshot.store.url().to_string(),
                    own_files: false,
                    operators: [(self.uid.clone(), part)].into_iter().collect(),
                };
                (snapshot.store.clone(), m, Some(restore))
            }
        };
        if self.subtask >= self.parallelism || self.parallelism > max_parallelism {
            return Err(OperatorError::Records(format!(
                "subtask {} of {} with {max_parallelism} key groups",
                self.subtask, self.parallelism
            )));
        }
        let subtask = SubtaskIndex(self.subtask);
        let range = KeyGroupRange::for_subtask(subtask, self.parallelism, max_parallelism);
        let backend = self.keyed.unwrap_or(StateBackend::Heap);
        let desc = TaskDescriptor {
            job_id: JobId(self.job_id.clone()),
            job_name: self.job_id.clone(),
            attempt: AttemptNumber(self.attempt),
            vertex: VertexId(0),
            subtask,
            parallelism: self.parallelism,
            max_parallelism,
            key_group_range: range,
            operators: vec![OperatorDescriptor {
                uid: self.uid.clone(),
                kind: self.kind.clone(),
                config: Default::default(),
                watermarks: None,
                chained_to: None,
            }],
            state_backend: backend,
            checkpoint_root: store.url().to_string(),
            incremental: false,
            operator_state_inline_limit: INLINE_OFFSETS,
            input: None,
            second_input: None,
            outputs: Vec::new(),
            linger_ms: 0,
            restore,
        };
        let plan = plan_setup(&desc, work.path(), |_| self.keyed.is_some());
        let restore_store = (plan.source != RestoreSource::Nothing).then_some(&store);
        let site = KeyedSite { backend, max_parallelism, range, rocks: &rocks, own_files: plan.own_files };
        let planned = &plan.operators[0];
        let opened = open_state(&mut OnRuntime(&rt), &site, &self.uid, planned, restore_store, None).map_err(error)?;
        let (restored, restored_at_end) = (planned.restore.is_some(), plan.restored_at_end);
        drop(plan);
        let info = RuntimeInfo {
            uid: self.uid,
            job_id: self.job_id,
            attempt: self.attempt,
            subtask,
            parallelism: self.parallelism,
            max_parallelism,
            key_group_range: range,
        };
        Ok(Slot {
            info,
            kind: self.kind,
            paths_job: JobId(format!("harness-{instance}")),
            keyed: opened.keyed,
            timers: opened.timers,
            op_state: opened.op_state,
            watermark: opened.watermark,
            clock,
            rocks,
            store,
            restored,
            restored_at_end,
            input_ended: false,
            snapshots: 0,
            rt,
            work,
        })
    }
}

/// A batch as a key-by edge delivers it to a keyed operator: the [`KEY`] column of
/// `keys`, then `columns`, then the event times `times`.
pub fn keyed_batch<K: AsRef<[u8]>>(
    keys: &[K],
    columns: Vec<(&str, ArrayRef)>,
    times: &[i64],
) -> Result<RecordBatch, OperatorError> {
    let mut all: Vec<(&str, ArrayRef)> =
        vec![(KEY, Arc::new(BinaryArray::from_iter_values(keys.iter().map(|k| k.as_ref()))))];
    all.extend(columns);
    all.push((EVENT_TIME, Arc::new(TimestampMillisecondArray::from(times.to_vec()))));
    RecordBatch::try_from_iter(all).map_err(|e| OperatorError::Records(format!("building a batch: {e}")))
}

/// `batch`'s rows by the subtask of `parallelism` (over `max_parallelism` key groups) a key-by edge routes
/// each to, by its key: one batch per subtask, in subtask order, each keeping its rows' order.
pub fn partition(
    batch: &RecordBatch,
    parallelism: u32,
    max_parallelism: u32,
) -> Result<Vec<RecordBatch>, OperatorError> {
    let keys = keys(batch)?;
    let mut rows: Vec<Vec<u32>> = vec![Vec::new(); parallelism as usize];
    for i in 0..keys.len() {
        let group: KeyGroup = key_group_for_key(keys.value(i), max_parallelism);
        let subtask = subtask_for_key_group(group, parallelism, max_parallelism).0 as usize;
        rows.get_mut(subtask).ok_or_else(|| OperatorError::Records(format!("no subtask {subtask}")))?.push(i as u32);
    }
    rows.into_iter()
        .map(|picks| arrow_select::take::take_record_batch(batch, &UInt32Array::from(picks)))
        .collect::<Result<_, _>>()
        .map_err(|e| OperatorError::Records(format!("partitioning a batch: {e}")))
}
