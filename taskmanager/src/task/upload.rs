//! A checkpoint's snapshot: the synchronous part taken at the barrier, and the upload that runs on the
//! runtime while processing continues (incremental, savepoint or canonical; operator-state offsets inline or
//! by reference).

use super::*;

/// Shareable snapshot files (by local name) per operator uid.
pub(super) type SharedFiles = BTreeMap<String, std::collections::HashMap<String, FileHandle>>;

/// What incremental checkpoints may reuse: the shareable files of the last completed checkpoint, and those
/// of snapshots uploaded but not yet known to be complete (promoted on the completion notification).
#[derive(Default)]
pub(super) struct Incremental {
    pub(super) confirmed: SharedFiles,
    pub(super) uploaded: BTreeMap<u64, SharedFiles>,
}

impl Incremental {
    /// Checkpoint `id` completed: its files become the ones to reuse; older unconfirmed uploads never will.
    pub(super) fn completed(&mut self, id: u64) {
        if let Some(files) = self.uploaded.remove(&id) {
            self.confirmed = files;
        }
        self.uploaded.retain(|&k, _| k > id);
    }
}

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
            let mut ctx = SnapshotContext { checkpoint_id: id, timestamp_ms, operator_state: &mut op.op_state };
            match &mut op.head {
                Head::Source(s) => s.snapshot_state(&mut ctx)?,
                Head::Operator(o) => o.snapshot_state(&mut ctx)?,
            }
            let (keyed, keyed_states) = match &mut op.keyed {
                Some(k) => {
                    let snapshot = k.snapshot_sync(&dir.join(&op.info.uid))?;
                    (Some(snapshot), describe_states(k.state_summaries()?))
                }
                None => (None, Vec::new()),
            };
            let op_state = (!op.op_state.is_empty()).then(|| op.op_state.snapshot());
            parts.push(SnapshotPart { uid: op.info.uid.clone(), keyed, keyed_states, op_state });
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
        let job = self.desc.job_id.clone();
        let (vertex, subtask) = (self.desc.vertex, self.desc.subtask);
        let end_of_input = self.input_ended;
        let dir = self.snapshot_dir(id);
        let async_seconds = metrics::histogram!("weir_checkpoint_async_seconds", &labels(&self.desc));
        let uploaded_total = metrics::counter!("weir_checkpoint_uploaded_bytes_total", &labels(&self.desc));
        let incremental = self.incremental.clone();
        // A savepoint is self-contained: every file goes into its own directory, nothing is shared with (or
        // reused from) the job's checkpoints.
        let incremental_on = self.desc.incremental && savepoint.is_none();
        let confirmed = if incremental_on { incremental.lock().confirmed.clone() } else { SharedFiles::new() };
        let instance = self.instance.clone();
        let inline_limit = self.desc.operator_state_inline_limit;
        let store = match &savepoint {
            None => Ok(self.store.clone()),
            Some(t) => Store::open(&t.url, &self.env.store_options),
        };
        let canonical = savepoint.as_ref().is_some_and(|t| t.format == SavepointFormat::Canonical);
        let (max_parallelism, rocks) = (self.desc.max_parallelism, self.env.rocks.clone());
        self.env.runtime.spawn(async move {
            let started = Instant::now();
            let result: Result<TaskSnapshot, TaskError> = async {
                let store = store?;
                weir_common::fault::hit("task-upload").await.map_err(TaskError::Other)?;
                let mut operators = BTreeMap::new();
                let mut uploaded = 0;
                let mut shareable = SharedFiles::new();
                for mut part in parts {
                    let remote = match &savepoint {
                        None => paths::subtask_dir(&job, id, &part.uid, subtask),
                        Some(_) => paths::savepoint_subtask_dir(&part.uid, subtask),
                    };
                    if canonical {
                        if let Some(mut native) = part.keyed.take() {
                            native.ready().await?;
                            // Inside the checkpoint's directory, which goes once the upload is over.
                            let (scratch, out) = (
                                dir.join(format!("canonical-{}-work", part.uid)),
                                dir.join(format!("canonical-{}", part.uid)),
                            );
                            let rocks = rocks.clone();
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
                            let shared = incremental_on
                                .then(|| paths::shared_snapshot_dir(&job, &part.uid, subtask, &instance, id));
                            let empty = std::collections::HashMap::new();
                            let (h, n) = weir_state::snapshot::upload_keyed_incremental(
                                &store,
                                local,
                                &paths::keyed_dir(&remote),
                                shared.as_deref(),
                                confirmed.get(&part.uid).unwrap_or(&empty),
                            )
                            .await?;
                            uploaded += n;
                            let h = KeyedStateHandle { states: std::mem::take(&mut part.keyed_states), ..h };
                            if savepoint.is_none() {
                                shareable.insert(part.uid.clone(), weir_state::snapshot::shareable_files(&h));
                            }
                            Some(h)
                        }
                        None => None,
                    };
                    let operator_state = match part.op_state {
                        Some((blob, mut states)) => {
                            let path = paths::opstate_file(&remote);
                            // Offsets beyond the inline limit go next to the blob: the acknowledgement (and the
                            // job manager's memory) carries only the file's handle.
                            for (i, meta) in states.iter_mut().enumerate() {
                                let Offsets::Inline(offsets) = &meta.offsets else { continue };
                                if offsets.len() as u64 * OFFSET_BYTES <= inline_limit {
                                    continue;
                                }
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
                    operators.insert(part.uid, OperatorSubtaskState { subtask, keyed, operator_state, end_of_input });
                }
                if savepoint.is_none() {
                    incremental.lock().uploaded.insert(id.0, shareable);
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
                    reporter.decline(&tref, id.0, format!("upload of vertex {} subtask {}: {e}", vertex.0, subtask.0))
                }
            }
        });
    }
}

pub(super) struct SnapshotPart {
    pub(super) uid: String,
    pub(super) keyed: Option<LocalSnapshot>,
    /// What the keyed snapshot holds, for its handle.
    pub(super) keyed_states: Vec<KeyedStateInfo>,
    pub(super) op_state: Option<(Vec<u8>, Vec<weir_common::checkpoint::StateMetaInfo>)>,
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
        })
        .collect()
}
