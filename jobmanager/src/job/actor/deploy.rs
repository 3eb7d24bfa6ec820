//! Deploying a job and failing it over: where it restores from, placing and deploying its tasks, their
//! state reports, undeploying, failover with its provisional cause, failing, canceling and finishing.

use super::*;

impl JobActor {
    /// Where the restore of the next deployment comes from: the newest readable retained checkpoint, else the
    /// savepoint the job was submitted with, else nothing.
    pub(super) async fn restore_source(&mut self) -> Result<Option<(RestorePoint, String, bool)>, RestoreError> {
        let job_id = self.record.id.clone();
        if let Some(r) = load_restore_point(&self.shared.store, &job_id, &self.record.retained).await? {
            return Ok(Some((r, self.shared.store.url().to_string(), true)));
        }
        let Some(initial) = self.record.initial.clone().filter(|i| i.active) else { return Ok(None) };
        match crate::checkpoint::savepoint::load(&initial.url, &self.shared.config.store_options()).await {
            Ok(sp) => {
                let checkpoint = RetainedCheckpoint {
                    id: sp.metadata.checkpoint_id,
                    metadata_path: format!("{}/{}", initial.url, paths::METADATA_FILE),
                    timestamp_ms: sp.metadata.timestamp_ms,
                    full_size_bytes: sp.metadata.full_size(),
                    uploaded_bytes: 0,
                    is_final: sp.metadata.is_final,
                };
                // State the submission checked and dropped (uids the job lacks, or whose kind or signature
                // changed) is not restored.
                let mut metadata = sp.metadata;
                for uid in &self.record.dropped_state {
                    metadata.operators.remove(uid);
                }
                Ok(Some((RestorePoint { checkpoint, metadata, skipped: vec![] }, initial.root, false)))
            }
            Err(crate::checkpoint::savepoint::SavepointError::Unavailable { source, .. }) => {
                Err(RestoreError::Unavailable { checkpoint: initial.checkpoint_id, source })
            }
            Err(e) => Err(RestoreError::NoneReadable(vec![(initial.checkpoint_id, e.to_string())])),
        }
    }

    pub(super) async fn on_task_state(
        &mut self,
        tm_id: String,
        attempt: AttemptNumber,
        task: TaskKey,
        state: pb::TaskState,
        error: TaskError,
    ) {
        let job_id = self.record.id.clone();
        let name = describe_task(&self.record.job, &self.graph, task);
        let error_text = error.text;
        if state == pb::TaskState::Failed && !error.caused_by_peer {
            let cause = format!("task {name} failed on task manager {tm_id}: {error_text}");
            if self.replace_provisional_cause(attempt, &cause, now_ms()) {
                let _ = self.persist().await;
                return;
            }
        }
        let Some(dep) = self.deployment.as_mut() else {
            debug!(job_id = %job_id, attempt = attempt.0, task = %name, "dropping the state report of a task that is not deployed");
            return;
        };
        if attempt != dep.attempt {
            debug!(job_id = %job_id, attempt = attempt.0, current_attempt = dep.attempt.0, task = %name, "dropping a stale task state report");
            return;
        }
        let Some(status) = dep.tasks.get_mut(&task) else {
            warn!(job_id = %job_id, attempt = attempt.0, task = %name, "state report from an unknown task");
            return;
        };
        match state {
            pb::TaskState::Running => {
                if *status == TaskStatus::Deploying {
                    *status = TaskStatus::Running;
                    debug!(job_id = %job_id, attempt = attempt.0, task = %name, "task running");
                }
            }
            pb::TaskState::EndOfInput => {
                if *status != TaskStatus::Finished {
                    *status = TaskStatus::EndOfInput;
                    info!(job_id = %job_id, attempt = attempt.0, task = %name, "task reached the end of its input");
                }
                // The final checkpoint is triggered at once, not at the next tick.
                self.coordinate(now_ms()).await;
            }
            pb::TaskState::Finished => {
                *status = TaskStatus::Finished;
                info!(job_id = %job_id, attempt = attempt.0, task = %name, "task finished");
                if dep.tasks.values().all(|s| *s == TaskStatus::Finished) {
                    self.finish().await;
                }
            }
            pb::TaskState::Failed | pb::TaskState::Canceled if self.stopping_until_ms.is_some() => {
                // The stop-with-savepoint completed: its state is safe whatever the tasks do now.
                info!(job_id = %job_id, attempt = attempt.0, task = %name, error = %error_text,
                    "a task ended abnormally after the stop-with-savepoint; the job stops");
                self.undeploy(true);
                self.finish().await;
            }
            pb::TaskState::Failed => {
                let cause = format!("task {name} failed on task manager {tm_id}: {error_text}");
                let provisional = error.caused_by_peer.then_some(attempt);
                let class = if error.fatal { FailureClass::Fatal } else { FailureClass::Retryable };
                self.failover(cause.clone(), class).await;
                self.provisional_cause = provisional.map(|attempt| ProvisionalCause {
                    attempt,
                    cause,
                    until_ms: now_ms() + PROVISIONAL_CAUSE_MS,
                });
            }
            pb::TaskState::Canceled => {
                let cause = format!("task {name} was canceled on task manager {tm_id} without being asked to");
                self.failover(cause, FailureClass::Retryable).await;
            }
            pb::TaskState::Unspecified => {}
        }
    }

    // ------------------------------------------------------------------------------------------ deployment

    pub(super) fn log_waiting(&mut self, now: u64, needed: u32, free: u32) {
        if self.last_waiting_log_ms.is_none_or(|t| now >= t + WAITING_LOG_EVERY_MS) {
            self.last_waiting_log_ms = Some(now);
            info!(job_id = %self.record.id, needed_slots = needed, free_slots = free, "waiting for enough free slots");
        }
    }

    pub(super) async fn try_deploy(&mut self) {
        let now = now_ms();
        let job_id = self.record.id.clone();
        let needed = self.graph.slots_needed();
        let allocated = {
            let mut registry = self.shared.registry.lock();
            registry.allocate(&job_id, needed).ok_or_else(|| registry.free_slots())
        };
        let slots = match allocated {
            Ok(slots) => slots,
            Err(free) => {
                self.log_waiting(now, needed, free);
                return;
            }
        };
        self.last_waiting_log_ms = None;

        let restore = match self.restore_source().await {
            Ok(r) => r,
            Err(e) => {
                self.shared.registry.lock().release(&job_id);
                match after_restore_error(&e) {
                    AfterRestoreError::RetrySoon => {
                        warn!(job_id = %job_id, error = %e, "cannot read the checkpoint to restore from; retrying");
                        self.restart_at_ms = now + STORE_RETRY_MS;
                    }
                    AfterRestoreError::Fail(reason) => self.fail_job(reason).await,
                }
                return;
            }
        };
        let (restore, restore_root, own_files) = match restore {
            Some((r, root, own)) => (Some(r), root, own),
            None => (None, String::new(), false),
        };
        let notes = restore_notes(
            restore.as_ref().map(|r| (r.checkpoint.id, r.skipped.as_slice())),
            own_files,
            self.record.initial.as_ref(),
        );
        if let Some(fallback) = notes.fallback {
            self.record.fallback = fallback;
        }
        self.record.restored_from = notes.restored_from;
        if !notes.unreadable.is_empty() {
            warn!(job_id = %job_id, restore_checkpoint = restore.as_ref().map(|r| r.checkpoint.id.0),
                dropped = ?notes.unreadable.iter().map(|c| c.0).collect::<Vec<_>>(), "restoring from an older checkpoint; dropping the unreadable newer ones");
            self.record.retained.retain(|c| !notes.unreadable.contains(&c.id));
            self.spawn_cleanup(notes.unreadable, Vec::new());
        }

        let attempt = AttemptNumber(self.record.attempt.0 + 1);
        let checkpoint_root = self.shared.store.url().to_string();
        let plan = DeployPlan {
            job_id: &job_id,
            job: &self.record.job,
            graph: &self.graph,
            attempt,
            slots: &slots,
            checkpoint_root: &checkpoint_root,
            restore: restore.as_ref().map(|r| RestorePlan { metadata: &r.metadata, root: &restore_root, own_files }),
            operator_state_inline_limit: self.shared.config.operator_state_inline_limit,
        };
        let descriptors = match build_descriptors(&plan) {
            Ok(d) => d,
            Err(e) => {
                self.shared.registry.lock().release(&job_id);
                self.fail_job(e.to_string()).await;
                return;
            }
        };
        let restore_id = restore.as_ref().map(|r| r.checkpoint.id);
        if let Some(r) = restore.filter(|_| own_files) {
            self.retained_meta.insert(r.checkpoint.id, Arc::new(r.metadata));
        }

        // The attempt number is persisted before any task of it exists, so it is never reused.
        self.record.attempt = attempt;
        let tasks = descriptors.iter().map(|d| ((d.vertex, d.subtask), TaskStatus::Deploying)).collect();
        let settings = self.record.job.checkpointing.clone();
        self.deployment = Some(Deployment {
            attempt,
            slots: slots.clone(),
            tasks,
            coordinator: CheckpointCoordinator::new(settings.clone(), attempt, now),
            last_final_notify_ms: 0,
            watermarks: BTreeMap::new(),
        });
        if self.persist().await.is_err() {
            self.undeploy(false);
            self.restart_at_ms = now + STORE_RETRY_MS;
            return;
        }
        let placement: Vec<&str> = slots.iter().map(|s| s.tm_id.as_str()).collect();
        info!(job_id = %job_id, attempt = attempt.0, restore_checkpoint = restore_id.map(|c| c.0),
            slots = ?placement, tasks = descriptors.len(), "deploying job");

        for vertex in deploy_order(&self.graph) {
            let calls = descriptors.iter().filter(|d| d.vertex == vertex).map(|d| {
                let slot = slots[d.subtask.0 as usize].clone();
                let key = (d.vertex, d.subtask);
                let request = pb::DeployTaskRequest {
                    task: Some(task_ref(&job_id, attempt, key)),
                    jm_session: self.shared.session.clone(),
                    jm_epoch: self.shared.epoch,
                    descriptor: Some(d.into()),
                    restore: d.restore.as_ref().map(Into::into),
                };
                let clients = self.shared.clients.clone();
                async move {
                    let result = match clients.get(&slot.rpc_address) {
                        Ok(mut client) => client.deploy_task(request).await.map(|_| ()),
                        Err(e) => Err(e),
                    };
                    (slot, key, result)
                }
            });
            let results = join_all(calls).await;
            if let Some(failure) = self.rpc_failures(results, "deployment") {
                if after_deploy_failure(failure.connection_lost) == AfterDeployFailure::RedeployNow {
                    warn!(job_id = %job_id, attempt = attempt.0, cause = %failure.cause,
                        "deployment hit a lost task manager; deploying again without it");
                    self.abort_pending(&format!("deployment failed: {}", failure.cause));
                    self.undeploy(true);
                    self.set_state(JobState::Restarting);
                    self.restart_at_ms = now_ms();
                    let _ = self.persist().await;
                } else {
                    self.failover(failure.cause, FailureClass::Retryable).await;
                }
                return;
            }
        }
        if let Some(dep) = self.deployment.as_mut() {
            dep.coordinator = CheckpointCoordinator::new(settings, attempt, now_ms());
        }
        self.set_state(JobState::Running);
        if let Some(t) = self.takeover.take() {
            let seconds = t.elapsed().as_secs_f64();
            metrics::histogram!("weir_jobmanager_resume_seconds").record(seconds);
            info!(job_id = %self.record.id, resume_ms = (seconds * 1000.0) as u64, "job resumed after this job manager took over");
        }
        let _ = self.persist().await;
    }

    /// Looks at RPC results; a connection error marks that task manager lost.
    pub(super) fn rpc_failures(
        &self,
        results: Vec<(SlotTarget, TaskKey, Result<(), tonic::Status>)>,
        what: &str,
    ) -> Option<RpcFailure> {
        let mut failure: Option<RpcFailure> = None;
        for (slot, key, result) in results {
            let Err(status) = result else { continue };
            let lost = is_connection_error(&status);
            let name = describe_task(&self.record.job, &self.graph, key);
            warn!(job_id = %self.record.id, tm_id = %slot.tm_id, task = %name, rpc = what, code = ?status.code(),
                error = %status.message(), "task manager RPC failed");
            if lost {
                self.shared.tm_lost(&slot.tm_id, slot.instance, &format!("{what} RPC failed: {}", status.message()));
            }
            let cause = format!("{what} of {name} on task manager {} failed: {}", slot.tm_id, status.message());
            match &mut failure {
                None => failure = Some(RpcFailure { connection_lost: lost, cause }),
                Some(f) => f.connection_lost |= lost,
            }
        }
        failure
    }

    /// Stops using the current deployment: tells its task managers to cancel its tasks (best effort, in
    /// the background) when `cancel_tasks`, and frees its slots.
    pub(super) fn undeploy(&mut self, cancel_tasks: bool) {
        self.shared.registry.lock().release(&self.record.id);
        let Some(dep) = self.deployment.take() else { return };
        if !cancel_tasks {
            return;
        }
        let req = pb::CancelTasksRequest {
            job_id: self.record.id.to_string(),
            up_to_attempt: dep.attempt.0,
            jm_session: self.shared.session.clone(),
            jm_epoch: self.shared.epoch,
        };
        self.call_each(dep.rpc_addresses(), "cancel", false, move |mut c| {
            let req = req.clone();
            async move { c.cancel_job(req).await.map(|_| ()) }
        });
    }

    /// Calls every task manager at `addresses` in the background, best effort: the outcome is only logged
    /// (a failure at `warn` when `loud`, else at `debug`, as a task manager that died is noticed anyway).
    pub(super) fn call_each<F, Fut>(&self, addresses: Vec<String>, rpc: &'static str, loud: bool, call: F)
    where
        F: Fn(TmClient) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), tonic::Status>> + Send,
    {
        let call = Arc::new(call);
        for address in addresses {
            let (clients, call, job_id) = (self.shared.clients.clone(), call.clone(), self.record.id.clone());
            tokio::spawn(async move {
                let result = match clients.get(&address) {
                    Ok(c) => call(c).await,
                    Err(e) => Err(e),
                };
                match result {
                    Ok(()) => debug!(job_id = %job_id, %address, rpc, "task manager told"),
                    Err(e) if loud => {
                        warn!(job_id = %job_id, %address, rpc, error = %e.message(), "task manager not told")
                    }
                    Err(e) => debug!(job_id = %job_id, %address, rpc, error = %e.message(), "task manager not told"),
                }
            });
        }
    }

    /// A failure: abort the checkpoint in flight, cancel the tasks and restart after the strategy's delay,
    /// or fail the job when no restart is left.
    pub(super) async fn failover(&mut self, cause: String, class: FailureClass) {
        if self.record.state.is_terminal() {
            return;
        }
        warn!(job_id = %self.record.id, attempt = self.record.attempt.0, cause = %cause, "job fails over");
        self.abort_pending(&format!("job failover: {cause}"));
        // A drain in progress is lost with the deployment: the restored sources would not end their input.
        if let Some(r) = self.draining.take() {
            let _ = r.reply.send(Err(JobRequestError::SavepointFailed(format!("the job failed over: {cause}"))));
        }
        self.undeploy(true);
        let now = now_ms();
        let (restart, restarts) = (&self.record.job.restart, self.record.restarts);
        let decision = self.record.restart_history.decide(class, restart, restarts, now, rand::random());
        match decision {
            RestartDecision::GiveUp { reason } => {
                self.record.failure = format!("{cause}; not restarted: {reason}");
                self.set_state(JobState::Failed);
                error!(job_id = %self.record.id, restarts = self.record.restarts, cause = %cause, %reason, "job failed: no restart left");
            }
            RestartDecision::Restart { number, delay_ms } => {
                self.record.failure = cause;
                self.record.restarts = number;
                self.set_state(JobState::Restarting);
                self.restart_at_ms = now.saturating_add(delay_ms);
                info!(job_id = %self.record.id, restart = number, delay_ms, "job restarts after the delay");
            }
        }
        let _ = self.persist().await;
    }

    /// Puts `cause`, a task's own failure in `attempt`, in place of the provisional cause the job failed over on
    /// (a neighbour's broken connection), if that is pending for the same attempt. Whether it did.
    pub(super) fn replace_provisional_cause(&mut self, attempt: AttemptNumber, cause: &str, now: u64) -> bool {
        let Some(p) = self.provisional_cause.take_if(|p| p.attempt == attempt && now < p.until_ms) else {
            return false;
        };
        self.record.failure = self.record.failure.replacen(&p.cause, cause, 1);
        info!(job_id = %self.record.id, attempt = attempt.0, cause = %cause, replaced = %p.cause,
            "the failure that broke the connection was heard: it is the job's failure reason");
        true
    }

    /// A failure that no restart can fix.
    pub(super) async fn fail_job(&mut self, cause: String) {
        if self.record.state.is_terminal() {
            return;
        }
        error!(job_id = %self.record.id, cause = %cause, "job failed");
        self.abort_pending(&format!("job failed: {cause}"));
        self.undeploy(true);
        self.record.failure = cause;
        self.set_state(JobState::Failed);
        let _ = self.persist().await;
    }

    pub(super) async fn cancel(&mut self) -> Result<pb::JobInfo, JobRequestError> {
        match self.record.state {
            JobState::Canceled => return Ok(self.record.info()),
            s if s.is_terminal() => {
                return Err(JobRequestError::AlreadyTerminal { id: self.record.id.to_string(), state: s.name() })
            }
            _ => {}
        }
        self.abort_pending("the job was canceled");
        self.undeploy(true);
        self.set_state(JobState::Canceled);
        let _ = self.persist().await;
        Ok(self.record.info())
    }

    pub(super) async fn finish(&mut self) {
        self.abort_pending("the job finished");
        self.undeploy(false);
        if self.set_state(JobState::Finished) {
            info!(job_id = %self.record.id, attempt = self.record.attempt.0,
                final_checkpoint = self.record.latest_completed().map(|r| r.id.0), "job finished");
        }
        let _ = self.persist().await;
    }

    // ------------------------------------------------------------------------------------------ checkpoints
}
