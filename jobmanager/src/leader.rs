//! The leader loop: a job manager campaigns, leads until its term is lost (or it cannot work and resigns),
//! stands by, and campaigns again; [`Gate`] is what the gRPC services serve meanwhile (the job manager while
//! it leads, otherwise where the leader is).
//!
//! A leader declares itself deposed when its lease could have expired (see `ha::etcd`). It also resigns
//! when it is alive but cannot work: when its health probe (a write, read and delete of a marker in the
//! checkpoint store) hangs [`HEALTH_STRIKES`] times in a row.

use crate::config::JobManagerConfig;
use crate::error::JobManagerError;
use crate::ha::etcd::{campaign, Etcd};
use crate::manager::JobManager;
use parking_lot::RwLock;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::{error, warn};

/// Consecutive hung health probes after which a leader resigns.
pub const HEALTH_STRIKES: u32 = 3;
/// After resigning because it could not work, a job manager waits this long before campaigning again, so a
/// healthy standby takes over.
const RESIGN_BACKOFF: Duration = Duration::from_secs(10);

/// Why a leader stopped leading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lost {
    /// Its lease lapsed or may have (etcd silent).
    Lease,
    /// It resigned: its checkpoint store does not answer.
    Unhealthy,
}

impl Lost {
    /// The `reason` label of `weir_jobmanager_leadership_lost_total`.
    fn label(self) -> &'static str {
        match self {
            Lost::Lease => "lease",
            Lost::Unhealthy => "unhealthy",
        }
    }
}

/// What the services serve: the job manager while this process leads, and otherwise where the leader is.
#[derive(Clone)]
pub struct Gate {
    leading: Arc<RwLock<Option<JobManager>>>,
    leader: watch::Receiver<Option<String>>,
}

impl Gate {
    /// A gate that always leads (no HA).
    pub fn fixed(jm: JobManager) -> Gate {
        let (_, leader) = watch::channel(None);
        Gate { leading: Arc::new(RwLock::new(Some(jm))), leader }
    }

    /// A standby gate that points to `leader`.
    pub fn standby(leader: watch::Receiver<Option<String>>) -> Gate {
        Gate { leading: Arc::new(RwLock::new(None)), leader }
    }

    /// The job manager, or the standby's answer naming the leader.
    pub fn get(&self) -> Result<JobManager, tonic::Status> {
        if let Some(jm) = self.leading.read().as_ref() {
            return Ok(jm.clone());
        }
        Err(weir_common::service::cluster::not_leader(self.leader.borrow().as_deref()))
    }

    /// The leader's address as this process knows it (its own while it leads).
    pub fn leader(&self) -> Option<String> {
        self.leader.borrow().clone()
    }

    fn lead(&self, jm: JobManager) {
        *self.leading.write() = Some(jm);
    }

    fn step_down(&self) -> Option<JobManager> {
        self.leading.write().take()
    }
}

/// Runs the HA loop until `stop`: campaign, lead until the term is lost (or the job manager cannot work and
/// resigns), stand by, campaign again.
pub async fn run(
    config: JobManagerConfig,
    etcd: Etcd,
    address: String,
    leader: watch::Sender<Option<String>>,
    gate: Gate,
    mut stop: watch::Receiver<bool>,
) -> Result<(), JobManagerError> {
    let ttl = Duration::from_millis(config.ha_lease_ttl_ms);
    loop {
        let Some(term) = campaign(&etcd, &address, ttl, &leader, &mut stop).await else { return Ok(()) };
        let jm = match JobManager::start_leader(config.clone(), term.clone()).await {
            Ok(jm) => jm,
            Err(e) => {
                error!(error = %e, "cannot take over as leader; resigning");
                term.resign().await;
                tokio::time::sleep(RESIGN_BACKOFF).await;
                continue;
            }
        };
        gate.lead(jm.clone());
        metrics::gauge!("weir_jobmanager_is_leader").set(1.0);
        metrics::gauge!("weir_jobmanager_epoch").set(term.epoch as f64);
        metrics::counter!("weir_jobmanager_leader_elections_total").increment(1);
        let started = Instant::now();
        let outcome = tokio::select! {
            _ = term.lost() => Some(Lost::Lease),
            _ = health_watch(&jm, ttl) => Some(Lost::Unhealthy),
            _ = stop.wait_for(|s| *s) => None,
        };
        gate.step_down();
        leader.send_replace(None);
        metrics::gauge!("weir_jobmanager_is_leader").set(0.0);
        let Some(reason) = outcome else {
            jm.shutdown().await;
            term.resign().await;
            return Ok(());
        };
        metrics::counter!("weir_jobmanager_leadership_lost_total", "reason" => reason.label()).increment(1);
        if reason == Lost::Lease {
            warn!(
                epoch = term.epoch,
                led_ms = started.elapsed().as_millis() as u64,
                "leadership lost; coordination stopped"
            );
            jm.depose().await;
            continue;
        }
        error!(
            epoch = term.epoch,
            strikes = HEALTH_STRIKES,
            "the checkpoint store does not answer: resigning leadership"
        );
        // Nothing of this term acts any more, the lease goes at once (a standby leads now, not when the hung
        // store calls of this one's jobs give up, minutes later), and then the jobs are waited for.
        jm.stop_coordinating();
        term.resign().await;
        jm.depose().await;
        tokio::select! {
            _ = tokio::time::sleep(RESIGN_BACKOFF) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }
}

/// Resolves once the leader's health probe has hung [`HEALTH_STRIKES`] times in a row.
async fn health_watch(jm: &JobManager, ttl: Duration) {
    let mut strikes = 0;
    loop {
        tokio::time::sleep(ttl).await;
        let probe = async {
            if weir_common::service::fault::hit("leader-health").await.is_err() {
                // An injected error is an answer, as a refusal of the store would be.
                return ProbeOutcome::Answered;
            }
            match jm.checkpoint_store().probe(ttl).await {
                Err(e) if e.is_timeout() => ProbeOutcome::Hung,
                _ => ProbeOutcome::Answered,
            }
        };
        let outcome = tokio::time::timeout(ttl * 2, probe).await.unwrap_or(ProbeOutcome::Hung);
        strikes = next_strikes(strikes, outcome);
        if strikes > 0 {
            warn!(strikes, "leader health probe hung");
        }
        if strikes >= HEALTH_STRIKES {
            return;
        }
    }
}

/// What one health probe of the checkpoint store came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProbeOutcome {
    /// The store answered, whatever it said: a store that refuses or is down is the jobs' problem (their
    /// checkpoints fail), not a reason to hand leadership to a standby that would see the same store.
    Answered,
    /// No answer in time: this job manager may be cut off from the store while a standby is not.
    Hung,
}

/// Strikes after a probe: a hang adds one, any answer starts the count again.
fn next_strikes(strikes: u32, outcome: ProbeOutcome) -> u32 {
    match outcome {
        ProbeOutcome::Hung => strikes + 1,
        ProbeOutcome::Answered => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_consecutive_hangs_count_toward_resigning() {
        let outcomes = [ProbeOutcome::Hung, ProbeOutcome::Hung, ProbeOutcome::Answered, ProbeOutcome::Hung];
        let seen: Vec<u32> = outcomes
            .iter()
            .scan(0, |s, o| {
                *s = next_strikes(*s, *o);
                Some(*s)
            })
            .collect();
        assert_eq!(seen, vec![1, 2, 0, 1]);
    }
}
