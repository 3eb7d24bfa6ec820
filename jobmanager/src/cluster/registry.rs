//! The task-manager registry: registrations, heartbeats, timeouts, and slot bookkeeping with slot sharing
//! and round-robin spreading over task managers. Plain data, no I/O.

use std::collections::BTreeMap;
use weir_common::ids::JobId;
use weir_common::job::kind::KindInfo;
use weir_proto as pb;

/// One registered task manager.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskManagerEntry {
    /// The id the task manager chose.
    pub id: String,
    /// Which registration of this id this is; a re-registration gets a new instance.
    pub instance: u64,
    /// URL of its `TaskManagerApi` service.
    pub rpc_address: String,
    /// `HOST:PORT` of its data plane.
    pub data_address: String,
    /// Number of slots it offers.
    pub slots: u32,
    /// Operator kinds its registry holds.
    pub kinds: Vec<KindInfo>,
    /// When its last heartbeat (or its registration) arrived.
    pub last_heartbeat_ms: u64,
    /// Slots in use, per job.
    pub allocations: BTreeMap<JobId, u32>,
}

impl TaskManagerEntry {
    /// Slots not used by any job.
    pub fn free_slots(&self) -> u32 {
        self.slots.saturating_sub(self.allocations.values().sum())
    }
}

/// A slot handed to a job: where subtask `i` of every vertex runs when this is slot `i`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotTarget {
    /// Task manager id.
    pub tm_id: String,
    /// Registration instance of that task manager.
    pub instance: u64,
    /// URL of its `TaskManagerApi` service.
    pub rpc_address: String,
    /// `HOST:PORT` of its data plane.
    pub data_address: String,
}

/// What a task manager sends when it registers.
#[derive(Clone, Debug, PartialEq)]
pub struct Registration {
    /// Task manager id.
    pub tm_id: String,
    /// URL of its `TaskManagerApi` service.
    pub rpc_address: String,
    /// `HOST:PORT` of its data plane.
    pub data_address: String,
    /// Slot count.
    pub slots: u32,
    /// Operator kinds.
    pub kinds: Vec<KindInfo>,
}

/// A registration request that lacks what a task manager must send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    /// A required field left empty.
    #[error("{0} is required")]
    Missing(&'static str),
    /// No slots.
    #[error("slots must be at least 1")]
    NoSlots,
}

impl Registration {
    /// Checks and normalises a registration request.
    pub fn from_proto(req: &pb::RegisterTaskManagerRequest) -> Result<Registration, RegistrationError> {
        if req.tm_id.trim().is_empty() {
            return Err(RegistrationError::Missing("tm_id"));
        }
        if req.rpc_address.trim().is_empty() {
            return Err(RegistrationError::Missing("rpc_address"));
        }
        if req.data_address.trim().is_empty() {
            return Err(RegistrationError::Missing("data_address"));
        }
        if req.slots == 0 {
            return Err(RegistrationError::NoSlots);
        }
        let rpc = req.rpc_address.trim();
        let rpc_address = if rpc.contains("://") { rpc.to_string() } else { format!("http://{rpc}") };
        // A kind this job manager cannot read (a newer task manager's) is left out: specs using it are refused
        // as naming an unknown kind.
        let kinds = req
            .operator_kinds
            .iter()
            .filter_map(|k| {
                KindInfo::try_from(k)
                    .map_err(|e| tracing::warn!(tm_id = %req.tm_id, error = %e, "operator kind left out"))
                    .ok()
            })
            .collect();
        Ok(Registration {
            tm_id: req.tm_id.trim().to_string(),
            rpc_address,
            data_address: req.data_address.trim().to_string(),
            slots: req.slots,
            kinds,
        })
    }
}

/// Assigns `needed` slots from task managers with the given free slot counts, round-robin in the given
/// order, so that consecutive slots land on different task managers. `None` if there are not enough.
pub fn assign_slots<K: Clone>(free: &[(K, u32)], needed: u32) -> Option<Vec<K>> {
    let total: u64 = free.iter().map(|(_, f)| *f as u64).sum();
    if total < needed as u64 {
        return None;
    }
    let mut left: Vec<u32> = free.iter().map(|(_, f)| *f).collect();
    let mut out = Vec::with_capacity(needed as usize);
    while out.len() < needed as usize {
        for (i, (k, _)) in free.iter().enumerate() {
            if out.len() == needed as usize {
                break;
            }
            if left[i] > 0 {
                left[i] -= 1;
                out.push(k.clone());
            }
        }
    }
    Some(out)
}

/// Every registered task manager.
#[derive(Debug, Default)]
pub struct Registry {
    tms: BTreeMap<String, TaskManagerEntry>,
    next_instance: u64,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a task manager and returns its instance number and, if the id was registered already,
    /// the replaced entry (which the caller treats as lost).
    pub fn register(&mut self, reg: Registration, now_ms: u64) -> (u64, Option<TaskManagerEntry>) {
        self.next_instance += 1;
        let instance = self.next_instance;
        let entry = TaskManagerEntry {
            id: reg.tm_id.clone(),
            instance,
            rpc_address: reg.rpc_address,
            data_address: reg.data_address,
            slots: reg.slots,
            kinds: reg.kinds,
            last_heartbeat_ms: now_ms,
            allocations: BTreeMap::new(),
        };
        let old = self.tms.insert(reg.tm_id, entry);
        (instance, old)
    }

    /// Records a heartbeat; `false` if the id is not registered.
    pub fn heartbeat(&mut self, tm_id: &str, now_ms: u64) -> bool {
        match self.tms.get_mut(tm_id) {
            Some(tm) => {
                tm.last_heartbeat_ms = tm.last_heartbeat_ms.max(now_ms);
                true
            }
            None => false,
        }
    }

    /// Task managers (id, instance) whose last heartbeat is at least `timeout_ms` old.
    pub fn expired(&self, now_ms: u64, timeout_ms: u64) -> Vec<(String, u64)> {
        self.tms
            .values()
            .filter(|tm| now_ms.saturating_sub(tm.last_heartbeat_ms) >= timeout_ms)
            .map(|tm| (tm.id.clone(), tm.instance))
            .collect()
    }

    /// Removes a task manager if it is still the given instance.
    pub fn remove(&mut self, tm_id: &str, instance: u64) -> Option<TaskManagerEntry> {
        if self.tms.get(tm_id).is_some_and(|tm| tm.instance == instance) {
            self.tms.remove(tm_id)
        } else {
            None
        }
    }

    /// The entry of a task manager.
    pub fn get(&self, tm_id: &str) -> Option<&TaskManagerEntry> {
        self.tms.get(tm_id)
    }

    /// Every registered task manager, by id.
    pub fn entries(&self) -> impl Iterator<Item = &TaskManagerEntry> {
        self.tms.values()
    }

    /// Total slots of every registered task manager.
    pub fn total_slots(&self) -> u32 {
        self.tms.values().map(|tm| tm.slots).sum()
    }

    /// Slots not used by any job.
    pub fn free_slots(&self) -> u32 {
        self.tms.values().map(|tm| tm.free_slots()).sum()
    }

    /// Reserves `needed` slots for a job, spread round-robin over the task managers with the most free
    /// slots first. Slot `i` of the result runs subtask `i` of every vertex (slot sharing).
    pub fn allocate(&mut self, job: &JobId, needed: u32) -> Option<Vec<SlotTarget>> {
        let mut free: Vec<(String, u32)> =
            self.tms.values().filter(|tm| tm.free_slots() > 0).map(|tm| (tm.id.clone(), tm.free_slots())).collect();
        // Most free first, ties by id, so placement is deterministic.
        free.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let ids = assign_slots(&free, needed)?;
        let mut targets = Vec::with_capacity(ids.len());
        for id in ids {
            let tm = self.tms.get_mut(&id)?;
            *tm.allocations.entry(job.clone()).or_insert(0) += 1;
            targets.push(SlotTarget {
                tm_id: tm.id.clone(),
                instance: tm.instance,
                rpc_address: tm.rpc_address.clone(),
                data_address: tm.data_address.clone(),
            });
        }
        Some(targets)
    }

    /// Frees every slot a job holds.
    pub fn release(&mut self, job: &JobId) {
        for tm in self.tms.values_mut() {
            tm.allocations.remove(job);
        }
    }

    /// The RPC addresses of the task managers that hold every kind of `kinds`, the one with most free slots
    /// first: who can check a spec of those kinds.
    pub fn checkers(&self, kinds: &std::collections::BTreeSet<&str>) -> Vec<String> {
        let mut able: Vec<&TaskManagerEntry> =
            self.tms.values().filter(|tm| kinds.iter().all(|k| tm.kinds.iter().any(|i| i.kind == *k))).collect();
        able.sort_by_key(|tm| std::cmp::Reverse(tm.free_slots()));
        able.into_iter().map(|tm| tm.rpc_address.clone()).collect()
    }

    /// Whether any registered task manager reported a kind.
    pub fn knows_kinds(&self) -> bool {
        self.tms.values().any(|tm| !tm.kinds.is_empty())
    }

    /// Every kind the registered task managers reported: all the job manager knows of kinds (it runs none of
    /// their code). A kind several report is described as the task manager whose id sorts last reports it.
    pub fn kinds(&self) -> Vec<KindInfo> {
        let mut map: BTreeMap<String, KindInfo> = BTreeMap::new();
        for tm in self.tms.values() {
            for k in &tm.kinds {
                map.insert(k.kind.clone(), k.clone());
            }
        }
        map.into_values().collect()
    }

    /// The cluster as the client API shows it.
    pub fn overview(&self) -> pb::ClusterOverviewResponse {
        pb::ClusterOverviewResponse {
            task_managers: self
                .tms
                .values()
                .map(|tm| pb::TaskManagerInfo {
                    id: tm.id.clone(),
                    rpc_address: tm.rpc_address.clone(),
                    data_address: tm.data_address.clone(),
                    slots: tm.slots,
                    free_slots: tm.free_slots(),
                })
                .collect(),
            total_slots: self.total_slots(),
            free_slots: self.free_slots(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(id: &str, slots: u32) -> Registration {
        Registration {
            tm_id: id.into(),
            rpc_address: format!("http://{id}:1"),
            data_address: format!("{id}:2"),
            slots,
            kinds: vec![],
        }
    }

    #[test]
    fn round_robin_assignment() {
        assert_eq!(assign_slots(&[("a", 2), ("b", 2)], 2), Some(vec!["a", "b"]));
        assert_eq!(assign_slots(&[("a", 3), ("b", 1)], 4), Some(vec!["a", "b", "a", "a"]));
        assert_eq!(assign_slots(&[("a", 1), ("b", 1), ("c", 1)], 3), Some(vec!["a", "b", "c"]));
        assert_eq!(assign_slots(&[("a", 1), ("b", 1)], 3), None);
        assert_eq!(assign_slots::<&str>(&[], 0), Some(vec![]));
    }

    #[test]
    fn allocation_spreads_and_releases() {
        let mut r = Registry::new();
        r.register(reg("tm1", 2), 0);
        r.register(reg("tm2", 2), 0);
        assert_eq!(r.total_slots(), 4);
        let j1 = JobId("j1".into());
        let slots = r.allocate(&j1, 2).unwrap();
        let tms: Vec<&str> = slots.iter().map(|s| s.tm_id.as_str()).collect();
        assert_eq!(tms, vec!["tm1", "tm2"], "a job of 2 slots lands on both task managers");
        assert_eq!(slots[1].data_address, "tm2:2");
        assert_eq!(r.free_slots(), 2);
        let j2 = JobId("j2".into());
        assert!(r.allocate(&j2, 3).is_none(), "not enough slots: nothing is reserved");
        assert_eq!(r.free_slots(), 2);
        assert_eq!(r.allocate(&j2, 2).unwrap().len(), 2);
        assert_eq!(r.free_slots(), 0);
        r.release(&j1);
        assert_eq!(r.free_slots(), 2);
        assert_eq!(r.overview().task_managers[0].free_slots, 1);
    }

    #[test]
    fn heartbeats_timeouts_and_reregistration() {
        let mut r = Registry::new();
        let (i1, old) = r.register(reg("tm1", 1), 1000);
        assert!(old.is_none());
        r.register(reg("tm2", 1), 1000);
        assert!(r.heartbeat("tm1", 4000));
        assert!(!r.heartbeat("nope", 4000));
        assert_eq!(r.expired(6000, 5000), vec![("tm2".to_string(), 2)]);
        let (i1b, old) = r.register(reg("tm1", 3), 6000);
        assert_eq!(old.map(|o| o.instance), Some(i1));
        assert_ne!(i1, i1b);
        assert!(r.remove("tm1", i1).is_none(), "a stale instance does not remove the new registration");
        assert!(r.remove("tm1", i1b).is_some());
        assert_eq!(r.total_slots(), 1);
    }

    #[test]
    fn registration_checks_and_kinds() {
        let mut req = pb::RegisterTaskManagerRequest {
            tm_id: "tm".into(),
            rpc_address: "127.0.0.1:5".into(),
            data_address: "127.0.0.1:6".into(),
            slots: 2,
            operator_kinds: vec![pb::OperatorKindInfo {
                kind: "my-op".into(),
                version: "1".into(),
                role: pb::KindRole::Operator as i32,
                keyed: true,
                states: vec![],
                state_signature: "00000000000000ab".into(),
                state_signature_text: "key: u64".into(),
                ..Default::default()
            }],
        };
        let r = Registration::from_proto(&req).unwrap();
        assert_eq!(r.rpc_address, "http://127.0.0.1:5");
        let mut reg_ = Registry::new();
        reg_.register(r, 0);
        let kinds = reg_.kinds();
        assert!(kinds
            .iter()
            .any(|k| k.kind == "my-op" && k.keyed && k.signature.as_ref().is_some_and(|s| s.text == "key: u64")));
        assert_eq!(kinds.len(), 1, "the job manager knows only the kinds task managers reported: {kinds:?}");
        req.slots = 0;
        assert!(Registration::from_proto(&req).is_err());
    }
}
