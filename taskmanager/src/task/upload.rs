//! A checkpoint's snapshot: the synchronous part taken at the barrier, and the upload that runs on the
//! runtime while processing continues (incremental, savepoint or canonical; operator-state offsets inline or
//! by reference).

use super::base::{labels, task_ref, Task};
use super::error::TaskError;
use super::incremental::SharedFiles;
use super::output::keyed_mut;
use super::output::{ChainOp, Head};
use crate::api::operator::SnapshotContext;
use crate::report::Report;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;
use weir_common::checkpoint::{
    paths, FileHandle, KeyedStateHandle, KeyedStateInfo, Offsets, OperatorStateHandle, OperatorSubtaskState,
    SavepointFormat, SavepointTarget, TaskSnapshot, OFFSET_BYTES,
};
use weir_common::deploy::descriptor::TaskDescriptor;
use weir_common::ids::{CheckpointId, SubtaskIndex};
use weir_common::service::store::Store;
use weir_proto as pb;
use weir_state::keyed::LocalSnapshot;

impl Task {
    /// Where checkpoint `id`'s local snapshot waits for its upload (deleted after it).
    pub(super) fn snapshot_dir(&self, id: CheckpointId) -> PathBuf {
        self.work_dir.join(format!("chk-{}", id.0))
    }

    pub(super) fn snapshot_sync(
        &mut self,
        id: CheckpointId,
        timestamp_ms: u64,
    ) -> Result<Vec<SnapshotPart>, TaskError> {
        let dir = self.snapshot_dir(id);
        let mut parts = Vec::with_capacity(self.ops.len());
        for op in &mut self.ops {
            let ChainOp { info, head, keyed, op_state, watermark, .. } = op;
            let mut ctx = SnapshotContext { checkpoint_id: id, timestamp_ms, operator_state: op_state };
            let hook = |ctx: &mut SnapshotContext<'_>| match head {
                Head::Source(s) => s.snapshot_state(ctx),
                Head::Operator(o) => o.snapshot_state(ctx),
            };
            parts.push(snapshot_part(&info.uid, &mut ctx, hook, keyed_mut(keyed), *watermark, &dir)?);
        }
        Ok(parts)
    }

    pub(super) fn spawn_upload(
        &self,
        id: CheckpointId,
        parts: Vec<SnapshotPart>,
        sync_ms: u64,
        savepoint: Option<SavepointTarget>,
    ) {
        let reporter = self.env.reporter.clone();
        let tref = task_ref(&self.desc);
        let (vertex, subtask) = (self.desc.vertex, self.desc.subtask);
        let end_of_input = self.input_ended;
        let dir = self.snapshot_dir(id);
        let async_seconds = metrics::histogram!("weir_checkpoint_async_seconds", &labels(&self.desc));
        let uploaded_total = metrics::counter!("weir_checkpoint_uploaded_bytes_total", &labels(&self.desc));
        let incremental = self.incremental.clone();
        let plan =
            plan_upload(&self.desc, id, &self.instance, parts.iter().map(|p| p.uid.as_str()), savepoint.as_ref());
        let confirmed = if plan.incremental { incremental.lock().confirmed.clone() } else { SharedFiles::new() };
        let inline_limit = self.desc.operator_state_inline_limit;
        let store = match &plan.savepoint_url {
            None => Ok(self.store.clone()),
            Some(url) => Store::open(url, &self.env.store_options),
        };
        let (max_parallelism, rocks) = (self.desc.max_parallelism, self.env.rocks.clone());
        self.env.runtime.spawn(async move {
            let started = Instant::now();
            let result: Result<TaskSnapshot, TaskError> = async {
                let store = store?;
                weir_common::service::fault::hit("task-upload").await.map_err(|f| TaskError::Other(f.to_string()))?;
                let mut operators = BTreeMap::new();
                let mut uploaded = 0;
                let mut shareable = SharedFiles::new();
                for (part, dirs) in parts.into_iter().zip(plan.parts) {
                    let uid = part.uid.clone();
                    let empty = std::collections::HashMap::new();
                    let how = PartUpload {
                        canonical: plan.canonical,
                        confirmed: confirmed.get(&uid).unwrap_or(&empty),
                        inline_limit,
                        max_parallelism,
                        rocks: &rocks,
                        local_dir: &dir,
                        subtask,
                        end_of_input,
                    };
                    let (state, n) = upload_part(&store, part, dirs, &how).await?;
                    uploaded += n;
                    if let (None, Some(h)) = (&plan.savepoint_url, &state.keyed) {
                        shareable.insert(uid.clone(), weir_state::snapshot::shareable_files(h));
                    }
                    operators.insert(uid, state);
                }
                if plan.savepoint_url.is_none() {
                    incremental.lock().uploaded.insert(id, shareable);
                }
                Ok(TaskSnapshot { vertex, subtask, operators, uploaded_bytes: uploaded })
            }
            .await;
            let _ = tokio::fs::remove_dir_all(&dir).await;
            let async_ms = started.elapsed().as_millis() as u64;
            async_seconds.record(started.elapsed().as_secs_f64());
            if let Ok(s) = &result {
                uploaded_total.increment(s.uploaded_bytes);
            }
            match result {
                Ok(snapshot) => reporter.send(Report::Ack(pb::AcknowledgeCheckpointRequest {
                    tm_id: reporter.tm_id.clone(),
                    task: Some(tref),
                    checkpoint_id: id.0,
                    snapshot: Some((&snapshot).into()),
                    sync_duration_ms: sync_ms,
                    async_duration_ms: async_ms,
                })),
                Err(e) => {
                    tracing::warn!(checkpoint_id = id.0, error = %e, "checkpoint upload failed");
                    reporter.decline(&tref, id, format!("upload of vertex {} subtask {}: {e}", vertex.0, subtask.0))
                }
            }
        });
    }
}

/// One operator's part of a snapshot, taken at the barrier and waiting for its upload.
pub(crate) struct SnapshotPart {
    pub(crate) uid: String,
    pub(crate) keyed: Option<LocalSnapshot>,
    /// What the keyed snapshot holds, for its handle.
    pub(crate) keyed_states: Vec<KeyedStateInfo>,
    pub(crate) op_state: Option<(Vec<u8>, Vec<weir_common::checkpoint::StateMetaInfo>)>,
    /// The operator's watermark, once it has one.
    pub(crate) watermark: Option<i64>,
}

/// The synchronous part of operator `uid`'s snapshot: its `snapshot_state` (`hook`, given `ctx`), then a copy of
/// its keyed state (keyed kinds) in `dir/<uid>` and of its operator state. A task takes every operator's so at
/// a barrier, and so does the operator test harness.
pub(crate) fn snapshot_part(
    uid: &str,
    ctx: &mut SnapshotContext<'_>,
    hook: impl FnOnce(&mut SnapshotContext<'_>) -> Result<(), crate::api::operator::OperatorError>,
    keyed: Option<&mut dyn weir_state::KeyedStateBackend>,
    watermark: i64,
    dir: &std::path::Path,
) -> Result<SnapshotPart, TaskError> {
    hook(ctx)?;
    let (keyed, keyed_states) = match keyed {
        Some(k) => {
            let snapshot = k.snapshot_sync(&dir.join(uid))?;
            (Some(snapshot), describe_states(k.state_summaries()?))
        }
        None => (None, Vec::new()),
    };
    let op_state = (!ctx.operator_state.is_empty()).then(|| ctx.operator_state.snapshot());
    let watermark = (watermark > crate::time::MIN_WATERMARK).then_some(watermark);
    Ok(SnapshotPart { uid: uid.to_string(), keyed, keyed_states, op_state, watermark })
}

/// How one part of a snapshot is uploaded, besides where.
pub(crate) struct PartUpload<'a> {
    /// Convert the keyed state to the canonical format first (a canonical savepoint).
    pub(crate) canonical: bool,
    /// Shareable files of the last completed checkpoint, by local name: referenced instead of uploaded again.
    pub(crate) confirmed: &'a std::collections::HashMap<String, FileHandle>,
    /// Operator-state offsets beyond this many bytes go to a file.
    pub(crate) inline_limit: u64,
    /// Number of key groups.
    pub(crate) max_parallelism: u32,
    /// Tuning of RocksDB (for the canonical conversion).
    pub(crate) rocks: &'a weir_state::rocks::RocksOptions,
    /// The local directory the snapshot was taken in (the canonical conversion works inside it).
    pub(crate) local_dir: &'a std::path::Path,
    /// The subtask whose part it is.
    pub(crate) subtask: SubtaskIndex,
    /// The subtask had consumed all of its input.
    pub(crate) end_of_input: bool,
}

/// Uploads one operator's part of a snapshot into `store` as `dirs` say: its keyed state (converted first for a
/// canonical savepoint; incrementally when `dirs` has a shared directory) and its operator-state blob, with
/// offsets beyond the inline limit in files. Returns its entry in the checkpoint and the bytes uploaded.
pub(crate) async fn upload_part(
    store: &Store,
    mut part: SnapshotPart,
    dirs: PartDirs,
    how: &PartUpload<'_>,
) -> Result<(OperatorSubtaskState, u64), TaskError> {
    let remote = dirs.remote;
    let mut uploaded = 0;
    if how.canonical {
        if let Some(mut native) = part.keyed.take() {
            native.ready().await?;
            // Inside the checkpoint's directory, which goes once the upload is over.
            let (scratch, out) = (
                how.local_dir.join(format!("canonical-{}-work", part.uid)),
                how.local_dir.join(format!("canonical-{}", part.uid)),
            );
            let (rocks, max_parallelism) = (how.rocks.clone(), how.max_parallelism);
            let converted = tokio::task::spawn_blocking(move || {
                let r = weir_state::write_canonical(native, &scratch, &out, max_parallelism, &rocks);
                let _ = std::fs::remove_dir_all(&scratch);
                r
            })
            .await
            .map_err(|e| TaskError::Other(format!("canonical conversion panicked: {e}")))??;
            part.keyed = Some(converted);
        }
    }
    let keyed = match &mut part.keyed {
        Some(local) => {
            let (h, n) = weir_state::snapshot::upload_keyed_incremental(
                store,
                local,
                &paths::keyed_dir(&remote),
                dirs.shared.as_deref(),
                how.confirmed,
            )
            .await?;
            uploaded += n;
            Some(KeyedStateHandle { states: std::mem::take(&mut part.keyed_states), ..h })
        }
        None => None,
    };
    let operator_state = match part.op_state {
        Some((blob, mut states)) => {
            let path = paths::opstate_file(&remote);
            for i in offsets_to_spill(&states, how.inline_limit) {
                let meta = &mut states[i];
                let Offsets::Inline(offsets) = &meta.offsets else { continue };
                let bytes = weir_state::operator::encode_offsets(offsets);
                let size = bytes.len() as u64;
                let offsets_path = paths::offsets_file(&path, i);
                store.put(&offsets_path, bytes::Bytes::from(bytes)).await?;
                uploaded += size;
                meta.offsets = Offsets::File(FileHandle { path: offsets_path, size });
            }
            let size = blob.len() as u64;
            store.put(&path, bytes::Bytes::from(blob)).await?;
            uploaded += size;
            Some(OperatorStateHandle { file: FileHandle { path, size }, states })
        }
        None => None,
    };
    let state = OperatorSubtaskState {
        subtask: how.subtask,
        keyed,
        operator_state,
        end_of_input: how.end_of_input,
        watermark: part.watermark,
    };
    Ok((state, uploaded))
}

/// The keyed states of a backend as a snapshot's handle lists them.
pub(super) fn describe_states(summaries: Vec<weir_state::StateSummary>) -> Vec<KeyedStateInfo> {
    summaries
        .into_iter()
        .map(|s| KeyedStateInfo {
            name: s.name,
            kind: s.kind.name().to_string(),
            ttl_ms: s.ttl.map(|t| t.ttl_ms()),
            bytes: s.bytes,
            entries: s.entries,
        })
        .collect()
}

/// Where one operator's part of a snapshot goes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PartDirs {
    /// The subtask's directory under the store's root (keyed files under `keyed/`, the operator-state blob).
    pub remote: String,
    /// Incremental checkpoints: where new shareable files go, for later checkpoints to reference.
    pub shared: Option<String>,
}

/// How a checkpoint's snapshot is uploaded, decided before any I/O.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct UploadPlan {
    /// A savepoint's own directory; `None`: the job's checkpoint store.
    pub savepoint_url: Option<String>,
    /// Keyed state is converted to the canonical format before its upload.
    pub canonical: bool,
    /// Files of the last completed checkpoint are referenced instead of uploaded again.
    pub incremental: bool,
    /// Per snapshot part (operator), in order.
    pub parts: Vec<PartDirs>,
}

/// Decides where and how the parts of checkpoint `id` (one per operator uid in `uids`) are uploaded. A
/// savepoint is self-contained: every file goes into its own directory, nothing is shared with (or reused
/// from) the job's checkpoints, so it is never incremental.
pub(super) fn plan_upload<'a>(
    desc: &TaskDescriptor,
    id: CheckpointId,
    instance: &str,
    uids: impl Iterator<Item = &'a str>,
    savepoint: Option<&SavepointTarget>,
) -> UploadPlan {
    let incremental = desc.incremental && savepoint.is_none();
    let (job, subtask) = (&desc.job_id, desc.subtask);
    let parts = uids
        .map(|uid| PartDirs {
            remote: match savepoint {
                None => paths::subtask_dir(job, id, uid, subtask),
                Some(_) => paths::savepoint_subtask_dir(uid, subtask),
            },
            shared: incremental.then(|| paths::shared_snapshot_dir(job, uid, subtask, instance, id)),
        })
        .collect();
    UploadPlan {
        savepoint_url: savepoint.map(|t| t.url.clone()),
        canonical: savepoint.is_some_and(|t| t.format == SavepointFormat::Canonical),
        incremental,
        parts,
    }
}

/// The operator states whose offsets go to a file next to the blob: those inline beyond `inline_limit`
/// bytes. The acknowledgement (and the job manager's memory) then carries only the file's handle.
pub(super) fn offsets_to_spill(states: &[weir_common::checkpoint::StateMetaInfo], inline_limit: u64) -> Vec<usize> {
    states
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(&m.offsets, Offsets::Inline(o) if o.len() as u64 * OFFSET_BYTES > inline_limit))
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_common::checkpoint::{DistributionMode, StateMetaInfo};
    use weir_common::ids::{AttemptNumber, JobId, VertexId};
    use weir_common::job::spec::StateBackend;
    use weir_common::state::keygroup::KeyGroupRange;

    fn desc(incremental: bool) -> TaskDescriptor {
        TaskDescriptor {
            job_id: JobId("j".into()),
            job_name: "j".into(),
            attempt: AttemptNumber(1),
            vertex: VertexId(0),
            subtask: SubtaskIndex(2),
            parallelism: 4,
            max_parallelism: 128,
            key_group_range: KeyGroupRange { start: 64, end: 95 },
            operators: vec![],
            state_backend: StateBackend::Rocksdb,
            checkpoint_root: "file:///ckpt".into(),
            incremental,
            operator_state_inline_limit: 64 << 10,
            input: None,
            second_input: None,
            outputs: vec![],
            linger_ms: 5,
            restore: None,
        }
    }

    fn target(format: SavepointFormat) -> SavepointTarget {
        SavepointTarget { url: "s3://b/sp-1".into(), format, stop: false }
    }

    #[test]
    fn an_incremental_checkpoint_goes_to_the_checkpoint_store_with_a_shared_directory_per_part() {
        let d = desc(true);
        let plan = plan_upload(&d, CheckpointId(5), "inst", ["a", "b"].into_iter(), None);
        assert_eq!((plan.savepoint_url.as_deref(), plan.canonical, plan.incremental), (None, false, true));
        for (part, uid) in plan.parts.iter().zip(["a", "b"]) {
            assert_eq!(part.remote, paths::subtask_dir(&d.job_id, CheckpointId(5), uid, SubtaskIndex(2)));
            assert_eq!(
                part.shared.as_deref(),
                Some(paths::shared_snapshot_dir(&d.job_id, uid, SubtaskIndex(2), "inst", CheckpointId(5)).as_str())
            );
        }
    }

    #[test]
    fn a_full_checkpoint_shares_nothing() {
        let plan = plan_upload(&desc(false), CheckpointId(5), "inst", ["a"].into_iter(), None);
        assert!(!plan.incremental);
        assert_eq!(plan.parts[0].shared, None);
    }

    #[test]
    fn a_savepoint_is_self_contained_even_when_the_job_checkpoints_incrementally() {
        for format in [SavepointFormat::Native, SavepointFormat::Canonical] {
            let plan = plan_upload(&desc(true), CheckpointId(5), "inst", ["a"].into_iter(), Some(&target(format)));
            assert_eq!(plan.savepoint_url.as_deref(), Some("s3://b/sp-1"));
            assert!(!plan.incremental);
            assert_eq!(plan.canonical, format == SavepointFormat::Canonical);
            assert_eq!(
                plan.parts,
                vec![PartDirs { remote: paths::savepoint_subtask_dir("a", SubtaskIndex(2)), shared: None }]
            );
        }
    }

    fn state(offsets: Offsets) -> StateMetaInfo {
        StateMetaInfo { name: "s".into(), mode: DistributionMode::SplitDistribute, elements: 0, bytes: 0, offsets }
    }

    #[test]
    fn only_inline_offsets_beyond_the_limit_are_spilled_to_a_file() {
        let limit = 4 * OFFSET_BYTES;
        let states = vec![
            state(Offsets::Inline(vec![0; 4])),
            state(Offsets::Inline(vec![0; 5])),
            state(Offsets::File(FileHandle { path: "x".into(), size: 800 })),
            state(Offsets::Inline(vec![])),
            state(Offsets::Inline(vec![0; 100])),
        ];
        assert_eq!(offsets_to_spill(&states, limit), vec![1, 4]);
    }
}
