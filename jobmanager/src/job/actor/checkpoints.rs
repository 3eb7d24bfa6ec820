//! Checkpoints of a running job: triggering them, their acknowledgements and declines, completing a checkpoint
//! or a savepoint (through [`crate::checkpoint::complete`]), failures, notifications and the cleanup of files.

use super::*;
use crate::checkpoint::complete::completed_outcome;
use weir_common::checkpoint::CheckpointOutcome;

impl JobActor {
    pub(super) fn metadata_url(&self, id: CheckpointId) -> String {
        format!("{}/{}", self.shared.store.url().trim_end_matches('/'), paths::metadata(&self.record.id, id))
    }

    pub(super) async fn coordinate(&mut self, now: u64) {
        if self.record.state != JobState::Running {
            return;
        }
        let Some(dep) = self.deployment.as_ref() else { return };
        if dep.coordinator.expired(now).is_some() {
            let timeout = self.record.job.checkpointing.timeout_ms;
            self.fail_pending(format!("expired: not acknowledged by every task within {timeout} ms"), true).await;
            return;
        }
        let Some(dep) = self.deployment.as_mut() else { return };
        if let Some(final_id) = dep.coordinator.final_completed() {
            if now >= dep.last_final_notify_ms.saturating_add(FINAL_RENOTIFY_MS) {
                dep.last_final_notify_ms = now;
                self.notify(final_id, CheckpointOutcome::Final);
            }
            return;
        }
        let readiness = dep.readiness(true);
        match dep.coordinator.decide_trigger(now, readiness) {
            // A stop with drain: the final checkpoint is the savepoint.
            TriggerDecision::Final => {
                let request = self.draining.take();
                self.trigger(true, request).await
            }
            _ if !self.savepoint_queue.is_empty() && dep.coordinator.may_trigger_savepoint(readiness) => {
                let request = self.savepoint_queue.pop_front();
                self.trigger(false, request).await
            }
            TriggerDecision::Wait => {}
            TriggerDecision::Periodic => self.trigger(false, None).await,
        }
    }

    /// Triggers the next checkpoint; with a savepoint request, as that savepoint (its client waits for it).
    pub(super) async fn trigger(&mut self, is_final: bool, savepoint: Option<SavepointRequest>) {
        let now = now_ms();
        let job_id = self.record.id.clone();
        let id = self.record.next_checkpoint_id;
        self.record.next_checkpoint_id = CheckpointId(id.0 + 1);
        let savepoint = savepoint.map(|request| {
            let target = request.target.clone();
            self.savepoint_in_flight = Some((id, request));
            target
        });
        let path = match &savepoint {
            Some(t) => format!("{}/{}", t.url, paths::METADATA_FILE),
            None => self.metadata_url(id),
        };
        let mut entry = CheckpointHistoryEntry::in_progress(id, now, path, is_final);
        entry.is_savepoint = savepoint.is_some();
        self.record.push_history(entry);
        let target = savepoint.as_ref().map(pb::SavepointTarget::from);
        let Some(dep) = self.deployment.as_mut() else { return };
        let expected: BTreeSet<TaskKey> = dep.tasks.keys().copied().collect();
        dep.coordinator.begin(id, now, expected, is_final, savepoint);
        let attempt = dep.attempt;
        // The id is persisted before any task hears of it, so ids never go backwards.
        if let Err(e) = self.persist().await {
            self.fail_pending(format!("cannot persist the checkpoint id counter: {e}"), true).await;
            return;
        }
        info!(job_id = %job_id, checkpoint_id = id.0, attempt = attempt.0, is_final, "triggering checkpoint");
        let Some(dep) = self.deployment.as_ref() else { return };
        let mut calls = Vec::new();
        for v in self.graph.vertices.iter().filter(|v| v.input.is_none()) {
            for s in 0..v.parallelism {
                let key = (v.id, SubtaskIndex(s));
                let slot = dep.slots[s as usize].clone();
                let clients = self.shared.clients.clone();
                let req = pb::TriggerCheckpointRequest {
                    task: Some(task_ref(&job_id, attempt, key)),
                    checkpoint_id: id.0,
                    timestamp_ms: now,
                    jm_session: self.shared.session.clone(),
                    jm_epoch: self.shared.epoch,
                    savepoint: target.clone(),
                };
                calls.push(async move {
                    let result = match clients.get(&slot.rpc_address) {
                        Ok(mut c) => c.trigger_checkpoint(req).await.map(|_| ()),
                        Err(e) => Err(e),
                    };
                    (slot, key, result)
                });
            }
        }
        let results = join_all(calls).await;
        if let Some(failure) = self.rpc_failures(results, "checkpoint trigger") {
            if failure.connection_lost {
                self.failover(failure.cause, FailureClass::Retryable).await;
            } else {
                self.fail_pending(failure.cause, true).await;
            }
        }
    }

    pub(super) async fn on_acknowledge(
        &mut self,
        attempt: AttemptNumber,
        task: TaskKey,
        checkpoint_id: CheckpointId,
        snapshot: TaskSnapshot,
    ) {
        let job_id = self.record.id.clone();
        let files = snapshot_files(&snapshot);
        let outcome = match self.deployment.as_mut() {
            Some(dep) => dep.coordinator.acknowledge(attempt, checkpoint_id, task, snapshot),
            None => AckOutcome::Dropped("the job is not deployed"),
        };
        match outcome {
            AckOutcome::Dropped(reason) => {
                debug!(job_id = %job_id, checkpoint_id = checkpoint_id.0, attempt = attempt.0, reason, "acknowledgement dropped");
                // Files a task uploaded for a checkpoint that already failed are deleted again; a savepoint's
                // are in its own directory, which goes again as a whole.
                match self.record.failed_checkpoint(checkpoint_id) {
                    Some(e) if e.is_savepoint => {
                        let dir = crate::checkpoint::savepoint::dir_of(&e.path).to_string();
                        self.spawn_savepoint_cleanup(dir, "a late acknowledgement");
                    }
                    Some(_) => self.spawn_cleanup(vec![checkpoint_id], files),
                    None => {}
                }
            }
            AckOutcome::Pending { remaining } => {
                debug!(job_id = %job_id, checkpoint_id = checkpoint_id.0, remaining, "checkpoint acknowledged by a task");
            }
            AckOutcome::Complete => self.complete_checkpoint().await,
        }
    }

    pub(super) async fn on_decline(
        &mut self,
        attempt: AttemptNumber,
        task: TaskKey,
        checkpoint_id: CheckpointId,
        reason: String,
    ) {
        let pending = self.deployment.as_ref().is_some_and(|d| d.coordinator.is_pending(attempt, checkpoint_id));
        if !pending {
            debug!(job_id = %self.record.id, checkpoint_id = checkpoint_id.0, attempt = attempt.0, "stale decline dropped");
            return;
        }
        let name = describe_task(&self.record.job, &self.graph, task);
        self.fail_pending(format!("declined by {name}: {reason}"), true).await;
    }

    pub(super) async fn complete_checkpoint(&mut self) {
        let job_id = self.record.id.clone();
        let Some(pending) = self.deployment.as_mut().and_then(|d| d.coordinator.take_pending()) else { return };
        let id = pending.id;
        // The guard on operator state declines the checkpoint without counting it as a failure: the job keeps
        // running and says why.
        if let Some(reason) = operator_state_over_limit(&job_id, &pending, self.shared.config.operator_state_limit) {
            self.record_failed(pending, reason, false).await;
            return;
        }
        let meta = match build_metadata(&job_id, &self.record.job, &self.graph, &pending) {
            Ok(m) => m,
            Err(reason) => {
                self.record_failed(pending, format!("invalid acknowledgements: {reason}"), true).await;
                return;
            }
        };
        if let Some(target) = pending.savepoint.clone() {
            self.complete_savepoint(pending, meta, target).await;
            return;
        }
        let written =
            write_metadata(MetadataTarget::Checkpoint { store: &self.shared.store, job_id: &job_id }, id, &meta);
        let metadata_path = match written.await {
            Ok(path) => path,
            Err(reason) => {
                self.record_failed(pending, reason.to_string(), true).await;
                return;
            }
        };
        let done = Completion::of(&pending, &meta, now_ms());
        let Completion { now_ms: now, full_size_bytes, uploaded_bytes, duration_ms, .. } = done;
        // The completion is applied to a copy that must reach the job store first: a checkpoint is complete only
        // once it is durably recorded. Notified before that, sinks would commit output that a restarted job
        // manager, resuming from the older recorded checkpoint, replays.
        let mut next = self.record.clone();
        next.retained.push(RetainedCheckpoint {
            id,
            metadata_path,
            timestamp_ms: pending.trigger_time_ms,
            full_size_bytes,
            uploaded_bytes,
            is_final: pending.is_final,
        });
        next.mark_completed(id, duration_ms, full_size_bytes, uploaded_bytes);
        let ids: Vec<CheckpointId> = next.retained.iter().map(|r| r.id).collect();
        let gone = subsumed(&ids, next.job.checkpointing.retained);
        next.retained.retain(|r| !gone.contains(&r.id));
        let dispose_claimed = next.release_initial();
        let recorded = match weir_common::service::fault::hit("checkpoint-after-metadata").await {
            Ok(()) => self.persist_record(&next).await.map_err(|e| e.to_string()),
            Err(f) => Err(f.to_string()),
        };
        if let Err(e) = recorded {
            // Not recorded, so not complete: its directory (with the `_metadata` just written) is deleted again.
            self.record_failed(pending, format!("cannot record the checkpoint in the job store: {e}"), true).await;
            return;
        }
        self.record = next;
        if let Some(dep) = self.deployment.as_mut() {
            dep.completed(id, now, pending.is_final);
        }
        self.retained_meta.insert(id, Arc::new(meta));
        self.retained_meta.retain(|k, _| !gone.contains(k));
        info!(job_id = %job_id, checkpoint_id = id.0, duration_ms, full_size_bytes, uploaded_bytes,
            is_final = pending.is_final, subsumed = ?gone.iter().map(|c| c.0).collect::<Vec<_>>(), "checkpoint completed");
        // The subsumed checkpoints' shared files are read from their own `_metadata` by the cleanup.
        self.spawn_cleanup(gone, Vec::new());
        if let Some(url) = dispose_claimed {
            let opts = self.shared.config.store_options();
            tokio::spawn(async move {
                match crate::checkpoint::savepoint::delete_claimed(&url, &opts).await {
                    Ok(files) => info!(savepoint = %url, files, "claimed savepoint subsumed and deleted"),
                    Err(error) => warn!(savepoint = %url, %error, "cannot delete the claimed savepoint"),
                }
            });
        }
        if now.saturating_sub(self.last_sweep_ms) >= SWEEP_INTERVAL_MS {
            self.last_sweep_ms = now;
            let min_age = self.record.job.checkpointing.timeout_ms.saturating_add(SWEEP_CLOCK_MARGIN_MS);
            self.spawn_sweep(Some(min_age), 0);
        }
        self.notify(id, completed_outcome(pending.is_final, false));
        // A final checkpoint waiting behind this one starts at once.
        self.coordinate(now_ms()).await;
    }

    /// Completes a savepoint: its `_metadata` goes into its own directory; the job does not retain it (it is
    /// the user's), and the client waiting for it gets its URL. A stop-with-savepoint then finishes the tasks.
    pub(super) async fn complete_savepoint(
        &mut self,
        pending: PendingCheckpoint,
        meta: CheckpointMetadata,
        target: SavepointTarget,
    ) {
        let job_id = self.record.id.clone();
        let id = pending.id;
        let options = self.shared.config.store_options();
        let written = write_metadata(MetadataTarget::Savepoint { url: &target.url, options: &options }, id, &meta);
        if let Err(reason) = written.await {
            self.record_failed(pending, reason.to_string(), true).await;
            return;
        }
        let done = Completion::of(&pending, &meta, now_ms());
        let Completion { now_ms: now, full_size_bytes, uploaded_bytes, duration_ms, .. } = done;
        // As for a checkpoint: a savepoint counts only once the job store recorded it. Answered or notified
        // before that, the client would hold a savepoint the job's history does not know and sinks would commit
        // output that a restarted job manager replays.
        let mut next = self.record.clone();
        next.mark_completed(id, duration_ms, full_size_bytes, uploaded_bytes);
        if let Err(e) = self.persist_record(&next).await {
            // Its directory (with the `_metadata` just written) is deleted again by the failure's cleanup.
            self.record_failed(pending, format!("cannot record the savepoint in the job store: {e}"), true).await;
            return;
        }
        self.record = next;
        let stops = target.stop || pending.is_final;
        if stops {
            self.stopping_until_ms = Some(now + STOP_FINISH_TIMEOUT_MS);
        }
        if let Some(dep) = self.deployment.as_mut() {
            dep.completed(id, now, pending.is_final);
        }
        info!(job_id = %job_id, checkpoint_id = id.0, savepoint = %target.url, format = %target.format,
            duration_ms, full_size_bytes, stop = stops, "savepoint completed");
        self.notify(id, completed_outcome(pending.is_final, target.stop));
        let response = pb::SavepointResponse {
            savepoint: target.url.clone(),
            checkpoint_id: id.0,
            full_size_bytes,
            format: target.format as i32,
            job: Some(self.record.info()),
        };
        self.answer_savepoint(id, Ok(response));
    }

    /// Fails the checkpoint in flight; `counts` toward the tolerable failures.
    pub(super) async fn fail_pending(&mut self, reason: String, counts: bool) {
        if let Some(pending) = self.deployment.as_mut().and_then(|d| d.coordinator.take_pending()) {
            self.record_failed(pending, reason, counts).await;
        }
    }

    pub(super) async fn record_failed(&mut self, pending: PendingCheckpoint, reason: String, counts: bool) {
        let over = self.note_failure(&pending, &reason, counts);
        if pending.is_final {
            // A bounded job cannot finish until its final checkpoint completes: say why it does not.
            self.record.waiting = format!(
                "the final checkpoint ({}) failed and is retried every {} ms: {reason}",
                pending.id,
                crate::checkpoint::coordinator::FINAL_RETRY_DELAY_MS
            );
        }
        let _ = self.persist().await;
        self.notify(pending.id, CheckpointOutcome::Aborted);
        if over {
            let tolerable = self.record.job.checkpointing.tolerable_failures.unwrap_or(0);
            let cause = format!(
                "more than {tolerable} consecutive checkpoints failed; the last one, {}, because {reason}",
                pending.id
            );
            self.failover(cause, FailureClass::Retryable).await;
        }
    }

    /// Bookkeeping of a failed checkpoint (history, counters, cleanup of what it wrote, the waiting client of a
    /// savepoint); returns whether the job must fail over.
    pub(super) fn note_failure(&mut self, pending: &PendingCheckpoint, reason: &str, counts: bool) -> bool {
        let now = now_ms();
        if let Some(e) = self.record.history_mut(pending.id) {
            e.status = CheckpointStatus::Failed;
            e.failure_reason = reason.to_string();
            e.duration_ms = now.saturating_sub(pending.trigger_time_ms);
            e.uploaded_bytes = pending.uploaded_bytes();
        }
        self.record.checkpoints_failed += 1;
        warn!(job_id = %self.record.id, checkpoint_id = pending.id.0, attempt = pending.attempt.0, reason, "checkpoint failed");
        match &pending.savepoint {
            // A savepoint wrote only into its own directory; its client learns why it failed. (A draining stop's
            // final checkpoint is then retried as a plain one.)
            Some(target) => {
                self.answer_savepoint(pending.id, Err(JobRequestError::SavepointFailed(reason.to_string())));
                self.spawn_savepoint_cleanup(target.url.clone(), "the savepoint failed");
            }
            None => self.spawn_cleanup(vec![pending.id], pending.acks.values().flat_map(snapshot_files).collect()),
        }
        match self.deployment.as_mut() {
            Some(dep) if dep.attempt == pending.attempt => dep.coordinator.record_failure(now, counts),
            _ => false,
        }
    }

    /// Aborts the checkpoint in flight without counting it as a failure (failover, cancel, finish).
    pub(super) fn abort_pending(&mut self, reason: &str) {
        if let Some(pending) = self.deployment.as_mut().and_then(|d| d.coordinator.take_pending()) {
            self.note_failure(&pending, reason, false);
        }
    }

    /// Sends `NotifyCheckpoint` to the task managers of the deployment (best effort, in the background);
    /// `is_final` marks a completed final checkpoint, after which tasks finish.
    pub(super) fn notify(&self, id: CheckpointId, outcome: CheckpointOutcome) {
        let Some(dep) = self.deployment.as_ref() else { return };
        let req = pb::NotifyCheckpointRequest {
            job_id: self.record.id.to_string(),
            attempt: dep.attempt.0,
            checkpoint_id: id.0,
            outcome: outcome as i32,
            jm_session: self.shared.session.clone(),
            jm_epoch: self.shared.epoch,
        };
        self.call_each(dep.rpc_addresses(), "notify checkpoint", false, move |mut c| {
            let req = req.clone();
            async move {
                // Tests hold a notification back here to deliver it after this job manager lost leadership.
                weir_common::service::fault::hit("jm-send-notify")
                    .await
                    .map_err(|f| tonic::Status::unavailable(f.to_string()))?;
                c.notify_checkpoint(req).await.map(|_| ())
            }
        });
    }

    /// Deletes what the job's checkpoints left that no retained checkpoint references — shared files and
    /// directories of checkpoints not retained (see [`sweep_job_files`]) — after `delay_ms`.
    pub(super) fn spawn_sweep(&self, min_age_ms: Option<u64>, delay_ms: u64) {
        let store = self.shared.store.clone();
        let job_id = self.record.id.clone();
        let retained = self.record.retained.clone();
        let known = self.retained_meta.clone();
        let shared = self.shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
            // A deposed leader's view of the retained checkpoints is stale: the new leader's own checkpoints
            // reference files it does not know of.
            if shared.is_deposed() {
                return;
            }
            sweep_job_files(&store, &job_id, &retained, &known, min_age_ms).await;
        });
    }

    /// Deletes what a failed savepoint wrote, in the background; `after` says what happened (its failure, or a
    /// late acknowledgement naming files a task uploaded after it).
    pub(super) fn spawn_savepoint_cleanup(&self, url: String, after: &'static str) {
        let opts = self.shared.config.store_options();
        let job_id = self.record.id.clone();
        tokio::spawn(async move {
            match crate::checkpoint::savepoint::delete_files(&url, &opts).await {
                Ok(0) => {}
                Ok(files) => {
                    info!(job_id = %job_id, savepoint = %url, files, after, "deleted the files of a failed savepoint")
                }
                Err(error) => {
                    warn!(job_id = %job_id, savepoint = %url, %error, "cannot delete the files of a failed savepoint")
                }
            }
        });
    }

    /// Deletes the directories of checkpoints no longer needed, in the background.
    /// `files` are the files those checkpoints referenced, where known: shared (incremental) files among them
    /// that no retained checkpoint references are deleted too.
    pub(super) fn spawn_cleanup(&self, ids: Vec<CheckpointId>, files: Vec<String>) {
        let ids: Vec<CheckpointId> =
            ids.into_iter().filter(|id| !self.record.retained.iter().any(|r| r.id == *id)).collect();
        if ids.is_empty() && files.is_empty() {
            return;
        }
        let store = self.shared.store.clone();
        let job_id = self.record.id.clone();
        let retained = self.record.retained.clone();
        let known = self.retained_meta.clone();
        let shared = self.shared.clone();
        tokio::spawn(async move {
            // Leaking files is better than deleting what a new leader's checkpoints might reference.
            if shared.is_deposed() {
                return;
            }
            delete_checkpoint_dirs(&store, &job_id, &retained, &known, &ids, files).await;
        });
    }
}
