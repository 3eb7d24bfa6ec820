//! The job lifecycle as a typed state machine: the states, the one table of allowed transitions, and the
//! restart decision taken when a running job fails.

use serde::{Deserialize, Serialize};
use std::fmt;
use weir_common::spec::RestartSettings;

/// The state of a job as clients see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Accepted, waiting for enough slots to be deployed for the first time.
    Created,
    /// Every task is deployed.
    Running,
    /// A failure happened; the job waits for its restart delay and for slots.
    Restarting,
    /// Every task finished after the final checkpoint (terminal).
    Finished,
    /// Canceled by a client (terminal).
    Canceled,
    /// Failed for good: no restart left or an unrecoverable error (terminal).
    Failed,
}

impl JobState {
    /// Every state, in lifecycle order.
    pub const ALL: [JobState; 6] = [
        JobState::Created,
        JobState::Running,
        JobState::Restarting,
        JobState::Finished,
        JobState::Canceled,
        JobState::Failed,
    ];

    /// The state's name on the wire (`CREATED`, `RUNNING`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Created => "CREATED",
            JobState::Running => "RUNNING",
            JobState::Restarting => "RESTARTING",
            JobState::Finished => "FINISHED",
            JobState::Canceled => "CANCELED",
            JobState::Failed => "FAILED",
        }
    }

    /// Whether the job is over.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Finished | JobState::Canceled | JobState::Failed)
    }

    /// The states this state may move to: the single table of allowed transitions.
    ///
    /// `RESTARTING → RESTARTING` is a failure while redeploying (the restart counter still grows).
    pub fn allowed_next(self) -> &'static [JobState] {
        use JobState::*;
        match self {
            Created => &[Running, Restarting, Canceled, Failed],
            Running => &[Restarting, Finished, Canceled, Failed],
            Restarting => &[Running, Restarting, Canceled, Failed],
            Finished | Canceled | Failed => &[],
        }
    }

    /// Whether `self → next` is allowed.
    pub fn can_become(self, next: JobState) -> bool {
        self.allowed_next().contains(&next)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A transition the state machine does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a {from} job cannot become {to}")]
pub struct InvalidTransition {
    /// Current state.
    pub from: JobState,
    /// Requested state.
    pub to: JobState,
}

/// Checks a transition and returns the new state.
pub fn transition(from: JobState, to: JobState) -> Result<JobState, InvalidTransition> {
    if from.can_become(to) {
        Ok(to)
    } else {
        Err(InvalidTransition { from, to })
    }
}

/// What to do after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartDecision {
    /// Restart (this is restart number `number`, 1-based) after `delay_ms`.
    Restart {
        /// The restart's number.
        number: u32,
        /// Delay before redeploying.
        delay_ms: u64,
    },
    /// The strategy allows no more restarts: the job fails.
    GiveUp,
}

/// The decision of the restart strategy after `restarts_so_far` restarts.
pub fn restart_decision(settings: &RestartSettings, restarts_so_far: u32) -> RestartDecision {
    let number = restarts_so_far.saturating_add(1);
    match settings.delay_for(number) {
        Some(delay_ms) => RestartDecision::Restart { number, delay_ms },
        None => RestartDecision::GiveUp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use JobState::*;

    #[test]
    fn transitions_table() {
        assert!(Created.can_become(Running));
        assert!(Running.can_become(Restarting));
        assert!(Restarting.can_become(Running));
        assert!(Restarting.can_become(Restarting));
        assert!(Running.can_become(Finished));
        assert!(!Created.can_become(Finished), "a job that never ran cannot finish");
        assert!(!Running.can_become(Created));
        assert!(!Running.can_become(Running));
        for terminal in [Finished, Canceled, Failed] {
            assert!(terminal.is_terminal());
            for next in JobState::ALL {
                assert_eq!(transition(terminal, next), Err(InvalidTransition { from: terminal, to: next }));
            }
        }
        for s in [Created, Running, Restarting] {
            assert!(!s.is_terminal());
            assert!(s.can_become(Canceled) && s.can_become(Failed), "{s} must be cancelable and failable");
        }
        assert_eq!(transition(Created, Running), Ok(Running));
        assert_eq!(Restarting.to_string(), "RESTARTING");
        assert_eq!(serde_json::to_string(&Canceled).unwrap(), "\"CANCELED\"");
    }

    #[test]
    fn restart_strategy_delays() {
        let fixed = RestartSettings::FixedDelay { attempts: 2, delay_ms: 500 };
        assert_eq!(restart_decision(&fixed, 0), RestartDecision::Restart { number: 1, delay_ms: 500 });
        assert_eq!(restart_decision(&fixed, 1), RestartDecision::Restart { number: 2, delay_ms: 500 });
        assert_eq!(restart_decision(&fixed, 2), RestartDecision::GiveUp);

        let exp = RestartSettings::ExponentialDelay {
            attempts: 10,
            initial_delay_ms: 100,
            max_delay_ms: 1000,
            multiplier: 2.0,
        };
        let delays: Vec<u64> = (0..6)
            .map(|n| match restart_decision(&exp, n) {
                RestartDecision::Restart { delay_ms, .. } => delay_ms,
                RestartDecision::GiveUp => u64::MAX,
            })
            .collect();
        assert_eq!(delays, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(restart_decision(&exp, 10), RestartDecision::GiveUp);

        assert_eq!(restart_decision(&RestartSettings::None, 0), RestartDecision::GiveUp);
        let unlimited = RestartSettings::FixedDelay { attempts: u32::MAX, delay_ms: 1 };
        assert_eq!(
            restart_decision(&unlimited, u32::MAX - 1),
            RestartDecision::Restart { number: u32::MAX, delay_ms: 1 }
        );
    }
}
