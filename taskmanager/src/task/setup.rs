//! Setting a task up: building its chain, opening or restoring each operator's keyed and operator state,
//! connecting its input and output channels.

use super::*;

impl Task {
    pub(super) fn setup(
        desc: TaskDescriptor,
        env: Arc<TaskEnv>,
        rx: mpsc::Receiver<TaskEvent>,
        events: mpsc::Sender<TaskEvent>,
        work_dir: PathBuf,
        key: &ChannelKey,
        mut cancel: watch::Receiver<bool>,
    ) -> Result<Task, TaskError> {
        // Claim input connections first, so producers that connect early are held for us.
        let incoming = desc.input.as_ref().map(|_| env.data_server.register(key.clone()));
        std::fs::create_dir_all(&work_dir)
            .map_err(|e| TaskError::Other(format!("cannot create {}: {e}", work_dir.display())))?;
        let store = Store::open(&desc.checkpoint_root, &env.store_options)?;
        let rt = env.runtime.clone();
        let restored_at_end = desc.restore.as_ref().is_some_and(|r| r.operators.values().any(|s| s.end_of_input));
        // Restored state is read from where the job manager says (a savepoint lives in its own directory).
        let restore_store = match &desc.restore {
            Some(r) if r.root == desc.checkpoint_root => Some(store.clone()),
            Some(r) => Some(Store::open_existing(&r.root, &env.store_options)?),
            None => None,
        };

        let mut incremental = Incremental::default();
        let mut ops = Vec::with_capacity(desc.operators.len());
        for od in &desc.operators {
            let info = RuntimeInfo {
                uid: od.uid.clone(),
                job_id: desc.job_id.0.clone(),
                attempt: desc.attempt.0,
                subtask: desc.subtask,
                parallelism: desc.parallelism,
                max_parallelism: desc.max_parallelism,
                key_group_range: desc.key_group_range,
            };
            let keyed_kind = env.registry.info(&od.kind).is_some_and(|k| k.keyed);
            let head = match env.registry.build(&od.kind, &od.config) {
                Ok(Instance::Source(s)) => Head::Source(s),
                Ok(Instance::Operator(o)) => Head::Operator(o),
                Err(e) => return Err(TaskError::Other(format!("operator {:?}: {e}", od.uid))),
            };
            let restored = desc.restore.as_ref().and_then(|r| r.operators.get(&od.uid));
            let restore_store = restore_store.as_ref();
            let op_state = match (restored, restore_store) {
                (Some(r), Some(store)) => {
                    unless_canceled(&rt, &mut cancel, crate::task::restore::operator_state(store, &r.operator_state))?
                }
                _ => OperatorStateStore::new(),
            };
            let keyed = if keyed_kind {
                let state_dir = work_dir.join(format!("state-{}", od.uid));
                match (restored.filter(|r| !r.keyed.is_empty()), restore_store) {
                    (Some(r), Some(store)) => {
                        let download_dir = work_dir.join(format!("restore-{}", od.uid));
                        let downloaded = unless_canceled(
                            &rt,
                            &mut cancel,
                            crate::task::restore::download_keyed(store, &r.keyed, &download_dir),
                        )?;
                        let target = crate::task::restore::KeyedTarget {
                            kind: desc.state_backend,
                            range: desc.key_group_range,
                            max_parallelism: desc.max_parallelism,
                            state_dir: &state_dir,
                            rocks: &env.rocks,
                            own_files: desc.restore.as_ref().is_some_and(|r| r.own_files),
                        };
                        let mut restored = crate::task::restore::open_keyed(&target, downloaded)?;
                        let _ = std::fs::remove_dir_all(&download_dir);
                        let declared = env.registry.info(&od.kind).and_then(|k| k.signature.as_ref());
                        crate::task::restore::migrate_keyed(
                            &od.uid,
                            restored.backend.as_mut(),
                            &r.serializers,
                            declared,
                        )?;
                        // The restored checkpoint completed, so its files may be referenced again.
                        if let Some(files) = restored.reusable {
                            incremental.confirmed.insert(od.uid.clone(), files);
                        }
                        Some(restored.backend)
                    }
                    _ => Some(open_keyed_backend(
                        desc.state_backend,
                        &state_dir,
                        desc.max_parallelism,
                        desc.key_group_range,
                        None,
                        &env.rocks,
                    )?),
                }
            } else {
                None
            };
            ops.push(ChainOp { info, head, keyed, op_state });
        }
        for op in &mut ops {
            // Per operator: one whose uid the checkpoint or savepoint lacks (new in this job) starts afresh —
            // a source added to a job reads from its beginning — even when the rest of the job restores.
            let restored = desc.restore.as_ref().is_some_and(|r| r.operators.contains_key(&op.info.uid));
            let mut ctx = InitContext {
                info: &op.info,
                restored,
                operator_state: &mut op.op_state,
                keyed: keyed_mut(&mut op.keyed),
            };
            let result = match &mut op.head {
                Head::Source(s) => s.initialize_state(&mut ctx),
                Head::Operator(o) => o.initialize_state(&mut ctx),
            };
            result.map_err(|e| in_operator(&op.info.uid, e))?;
        }

        let mut outputs = Vec::with_capacity(desc.outputs.len());
        for out in &desc.outputs {
            let mut channels = Vec::with_capacity(out.targets.len());
            for (sub, addr) in &out.targets {
                let hs = Handshake {
                    to: ChannelKey {
                        job_id: desc.job_id.0.clone(),
                        attempt: desc.attempt.0,
                        vertex: out.to_vertex.0,
                        subtask: sub.0,
                    },
                    from_vertex: desc.vertex.0,
                    from_subtask: desc.subtask.0,
                };
                let connect = OutputChannel::connect(
                    env.data_server.security(),
                    addr,
                    &hs,
                    env.connect_timeout,
                    Liveness::default(),
                    cancel.clone(),
                );
                channels.push(unless_canceled(&rt, &mut cancel, connect)?);
            }
            let n = channels.len();
            let mut bufs = Vec::with_capacity(n);
            for _ in 0..n {
                let mut b = Vec::with_capacity(BATCH_BYTES + 4096);
                begin_batch(&mut b);
                bufs.push(b);
            }
            outputs.push(OutputEdge {
                partitioning: out.partitioning,
                channels,
                bufs,
                counts: vec![0; n],
                next: desc.subtask.0 as usize % n.max(1),
                to_parallelism: out.to_parallelism,
                max_parallelism: desc.max_parallelism,
                records_out: metrics::counter!("weir_records_out_total", &labels(&desc)),
            });
        }

        let (inputs, n_inputs) = match (&desc.input, incoming) {
            (Some(input), Some(incoming)) => {
                let producers: Vec<u32> = input.channels.iter().map(|s: &SubtaskIndex| s.0).collect();
                let accept = InputChannels::accept(
                    incoming,
                    &producers,
                    events,
                    TaskEvent::Channel,
                    env.connect_timeout,
                    Liveness::default(),
                );
                let ch = unless_canceled(&rt, &mut cancel, accept)?;
                let n = ch.len();
                (Some(ch), n)
            }
            _ => (None, 0),
        };
        Ok(Task {
            env,
            store,
            rx,
            ops,
            outputs,
            inputs,
            aligner: BarrierAligner::new(n_inputs),
            deferred: Deferred::new(n_inputs),
            input_ended: false,
            restored_at_end,
            work_dir,
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
