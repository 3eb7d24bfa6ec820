//! What the job manager's services and every job's coordinator share: config, session and epoch, the stores,
//! the task-manager registry and clients, the jobs' handles. Below both the manager and the jobs, so that a
//! job never reaches up into the manager.

use crate::cluster::client::TmClients;
use crate::cluster::registry::Registry;
use crate::config::JobManagerConfig;
use crate::ha::etcd::Term;
use crate::job::mailbox::{JobEvent, JobHandle};
use crate::job::store::JobStore;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;
use tracing::warn;
use weir_common::ids::JobId;
use weir_common::service::store::Store;

/// State shared by the services and the job coordinators.
pub(crate) struct Shared {
    pub(crate) config: JobManagerConfig,
    pub(crate) session: String,
    pub(crate) store: Store,
    pub(crate) job_store: JobStore,
    pub(crate) registry: Mutex<Registry>,
    pub(crate) jobs: Mutex<BTreeMap<JobId, JobHandle>>,
    pub(crate) clients: TmClients,
    /// The HA leader's epoch, carried by every message to a task manager (0 without HA).
    pub(crate) epoch: u64,
    /// The leadership term this job manager coordinates in (`None` without HA).
    pub(crate) term: Option<Term>,
    /// Set once this job manager lost leadership: nothing it still has in flight may delete files.
    pub(crate) deposed: AtomicBool,
    pub(crate) shutdown: watch::Sender<bool>,
    pub(crate) monitor: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Shared {
    /// Whether this job manager lost the leadership it coordinated under.
    pub(crate) fn is_deposed(&self) -> bool {
        self.deposed.load(Ordering::SeqCst) || self.term.as_ref().is_some_and(Term::is_lost)
    }

    pub(crate) fn shutdown_receiver(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Removes a task manager (if it is still this instance) and tells every job.
    pub(crate) fn tm_lost(&self, tm_id: &str, instance: u64, reason: &str) {
        let removed = self.registry.lock().remove(tm_id, instance);
        if let Some(tm) = removed {
            warn!(tm_id, instance, reason, "task manager lost");
            self.clients.forget(&tm.rpc_address);
            self.broadcast_lost(tm_id, instance, reason);
        }
    }

    pub(crate) fn broadcast_lost(&self, tm_id: &str, instance: u64, reason: &str) {
        for handle in self.jobs.lock().values() {
            let _ = handle.tx.send(JobEvent::TaskManagerLost {
                tm_id: tm_id.to_string(),
                instance,
                reason: reason.to_string(),
            });
        }
    }
}
