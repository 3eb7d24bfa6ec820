//! The job lifecycle as a typed state machine: the states, the one table of allowed transitions, and the
//! restart decision taken when a running job fails.

use serde::{Deserialize, Serialize};
use weir_common::job::spec::RestartSettings;

/// The state of a job: the protocol's enum, the one definition the CLI and the test harness use too.
pub use weir_proto::JobState;

/// Every state, in lifecycle order.
pub const ALL_STATES: [JobState; 6] = [
    JobState::Created,
    JobState::Running,
    JobState::Restarting,
    JobState::Finished,
    JobState::Canceled,
    JobState::Failed,
];

/// The states `from` may move to: the single table of allowed transitions.
///
/// `RESTARTING → RESTARTING` is a failure while redeploying (the restart counter still grows).
pub fn allowed_next(from: JobState) -> &'static [JobState] {
    use JobState::*;
    match from {
        Created => &[Running, Restarting, Canceled, Failed],
        Running => &[Restarting, Finished, Canceled, Failed],
        Restarting => &[Running, Restarting, Canceled, Failed],
        Finished | Canceled | Failed | Unspecified => &[],
    }
}

/// A job's state in its stored record, by name (`"RUNNING"`), as records have always been written.
pub mod state_by_name {
    use super::JobState;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the state's name.
    pub fn serialize<S: Serializer>(state: &JobState, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(state.name())
    }

    /// Reads a state's name.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<JobState, D::Error> {
        let name = String::deserialize(d)?;
        JobState::from_name(&name).ok_or_else(|| serde::de::Error::custom(format!("unknown job state {name:?}")))
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
    if allowed_next(from).contains(&to) {
        Ok(to)
    } else {
        Err(InvalidTransition { from, to })
    }
}

/// What to do after a failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartDecision {
    /// Restart (this is restart number `number` of the job's life, 1-based) after `delay_ms`.
    Restart {
        /// The restart's number.
        number: u32,
        /// Delay before redeploying.
        delay_ms: u64,
    },
    /// The strategy allows no more restarts: the job fails.
    GiveUp {
        /// Why the strategy refuses, for the job's failure message.
        reason: String,
    },
}

/// Whether a restart may mend a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// The restart strategy decides.
    Retryable,
    /// No restart can mend it (a task said so): the job fails at once, as Flink does on a
    /// `SuppressRestartsException`.
    Fatal,
}

/// What the restart strategies remember between failures. It is persisted with the job, so a restarted
/// job manager goes on counting where the previous one stopped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartHistory {
    /// `exponential-delay`: restarts since the backoff was last reset (the exponent of the next delay).
    #[serde(default)]
    pub backoff_attempts: u32,
    /// `exponential-delay`: when the last restart was due (ms since the epoch; 0 = never restarted). The
    /// stable period that resets the backoff is measured from here, as Flink does.
    #[serde(default)]
    pub last_restart_due_ms: u64,
    /// `failure-rate`: the times of the latest failures, oldest first (at most `max_failures_per_interval + 1`).
    #[serde(default)]
    pub failure_times_ms: Vec<u64>,
}

impl RestartHistory {
    /// The decision on a failure of `class` at `now_ms`: a fatal one fails the job at once (and is not counted,
    /// the job being over); a retryable one is the strategy's ([`RestartHistory::on_failure`]).
    pub fn decide(
        &mut self,
        class: FailureClass,
        settings: &RestartSettings,
        restarts_so_far: u32,
        now_ms: u64,
        random: f64,
    ) -> RestartDecision {
        match class {
            FailureClass::Fatal => RestartDecision::GiveUp {
                reason: "the failure is fatal: restoring the same state would fail the same way".into(),
            },
            FailureClass::Retryable => self.on_failure(settings, restarts_so_far, now_ms, random),
        }
    }

    /// The restart strategy's decision on a failure at `now_ms`, after `restarts_so_far` restarts over the
    /// job's life; `random` (in `[0, 1)`) draws the jitter. Records the failure.
    pub fn on_failure(
        &mut self,
        settings: &RestartSettings,
        restarts_so_far: u32,
        now_ms: u64,
        random: f64,
    ) -> RestartDecision {
        let number = restarts_so_far.saturating_add(1);
        let restart = |delay_ms| RestartDecision::Restart { number, delay_ms };
        match settings {
            RestartSettings::None => RestartDecision::GiveUp { reason: "the restart strategy is none".into() },
            RestartSettings::FixedDelay { attempts, delay_ms } => {
                if number > *attempts {
                    return RestartDecision::GiveUp {
                        reason: format!("fixed-delay allows {attempts} restarts and all were used"),
                    };
                }
                restart(*delay_ms)
            }
            RestartSettings::ExponentialDelay {
                attempts,
                initial_delay_ms,
                max_delay_ms,
                multiplier,
                reset_backoff_threshold_ms,
                jitter_factor,
            } => {
                if now_ms.saturating_sub(self.last_restart_due_ms) >= *reset_backoff_threshold_ms {
                    self.backoff_attempts = 0;
                }
                if self.backoff_attempts >= *attempts {
                    return RestartDecision::GiveUp {
                        reason: format!(
                            "exponential-delay allows {attempts} restarts until the job runs \
                             {reset_backoff_threshold_ms} ms without a failure, and all were used"
                        ),
                    };
                }
                let base = *initial_delay_ms as f64 * multiplier.powi(self.backoff_attempts.min(1024) as i32);
                let base = base.min(*max_delay_ms as f64);
                let jitter = base * jitter_factor * (2.0 * random.clamp(0.0, 1.0) - 1.0);
                let delay_ms = (base + jitter).clamp(*initial_delay_ms as f64, *max_delay_ms as f64).round() as u64;
                self.backoff_attempts += 1;
                self.last_restart_due_ms = now_ms.saturating_add(delay_ms);
                restart(delay_ms)
            }
            RestartSettings::FailureRate { max_failures_per_interval, failure_rate_interval_ms, delay_ms } => {
                let keep = (*max_failures_per_interval as usize).saturating_add(1);
                self.failure_times_ms.push(now_ms);
                if self.failure_times_ms.len() > keep {
                    let excess = self.failure_times_ms.len() - keep;
                    self.failure_times_ms.drain(..excess);
                }
                let first = self.failure_times_ms[0];
                if self.failure_times_ms.len() == keep && now_ms.saturating_sub(first) <= *failure_rate_interval_ms {
                    return RestartDecision::GiveUp {
                        reason: format!(
                            "failure-rate allows {max_failures_per_interval} failures within \
                             {failure_rate_interval_ms} ms, and this is failure {keep} within {} ms",
                            now_ms.saturating_sub(first)
                        ),
                    };
                }
                restart(*delay_ms)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use JobState::*;

    #[test]
    fn a_fatal_failure_gives_up_whatever_the_strategy_allows() {
        let settings = RestartSettings::FixedDelay { attempts: 5, delay_ms: 10 };
        let mut history = RestartHistory::default();
        let decision = history.decide(FailureClass::Fatal, &settings, 0, 1000, 0.5);
        assert!(matches!(&decision, RestartDecision::GiveUp { reason } if reason.contains("fatal")), "{decision:?}");
        assert_eq!(history, RestartHistory::default(), "a fatal failure is not counted");
        let decision = history.decide(FailureClass::Retryable, &settings, 0, 1000, 0.5);
        assert_eq!(decision, RestartDecision::Restart { number: 1, delay_ms: 10 });
    }

    #[test]
    fn transitions_table() {
        assert!(transition(Created, Running).is_ok());
        assert!(transition(Running, Restarting).is_ok());
        assert!(transition(Restarting, Running).is_ok());
        assert!(transition(Restarting, Restarting).is_ok());
        assert!(transition(Running, Finished).is_ok());
        assert!(transition(Created, Finished).is_err(), "a job that never ran cannot finish");
        assert!(transition(Running, Created).is_err());
        assert!(transition(Running, Running).is_err());
        for terminal in [Finished, Canceled, Failed] {
            assert!(terminal.is_terminal());
            for next in ALL_STATES {
                assert_eq!(transition(terminal, next), Err(InvalidTransition { from: terminal, to: next }));
            }
        }
        for s in [Created, Running, Restarting] {
            assert!(!s.is_terminal());
            assert!(
                transition(s, Canceled).is_ok() && transition(s, Failed).is_ok(),
                "{s} must be cancelable and failable"
            );
        }
        assert_eq!(transition(Created, Running), Ok(Running));
        assert_eq!(Restarting.to_string(), "RESTARTING");
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Stored(#[serde(with = "state_by_name")] JobState);
        assert_eq!(serde_json::to_string(&Stored(Canceled)).unwrap(), "\"CANCELED\"");
        assert_eq!(serde_json::from_str::<Stored>("\"RESTARTING\"").unwrap(), Stored(Restarting));
        assert!(serde_json::from_str::<Stored>("\"UNSPECIFIED\"").is_err());
    }

    /// Restarts a job through the history with the given failure times; a delay per failure, `None` when
    /// the strategy gives up (then the rest is not tried).
    fn delays(settings: &RestartSettings, failures_at: &[u64], random: f64) -> Vec<Option<u64>> {
        let mut history = RestartHistory::default();
        let mut restarts = 0;
        let mut out = Vec::new();
        for &now in failures_at {
            match history.on_failure(settings, restarts, now, random) {
                RestartDecision::Restart { number, delay_ms } => {
                    assert_eq!(number, restarts + 1);
                    restarts = number;
                    out.push(Some(delay_ms));
                }
                RestartDecision::GiveUp { .. } => {
                    out.push(None);
                    break;
                }
            }
        }
        out
    }

    fn exponential(attempts: u32, reset_backoff_threshold_ms: u64, jitter_factor: f64) -> RestartSettings {
        RestartSettings::ExponentialDelay {
            attempts,
            initial_delay_ms: 100,
            max_delay_ms: 1000,
            multiplier: 2.0,
            reset_backoff_threshold_ms,
            jitter_factor,
        }
    }

    #[test]
    fn fixed_delay_counts_every_restart_of_the_job() {
        let fixed = RestartSettings::FixedDelay { attempts: 2, delay_ms: 500 };
        // Even days apart: fixed-delay never forgets (as Flink's).
        assert_eq!(delays(&fixed, &[1_000, 100_000_000, 900_000_000], 0.5), vec![Some(500), Some(500), None]);
        let mut history = RestartHistory::default();
        match history.on_failure(&fixed, 2, 5, 0.5) {
            RestartDecision::GiveUp { reason } => assert!(reason.contains("allows 2 restarts"), "{reason}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            RestartHistory::default().on_failure(&RestartSettings::None, 0, 5, 0.5),
            RestartDecision::GiveUp { reason: "the restart strategy is none".into() }
        );
        let unlimited = RestartSettings::FixedDelay { attempts: u32::MAX, delay_ms: 1 };
        assert_eq!(
            RestartHistory::default().on_failure(&unlimited, u32::MAX - 1, 5, 0.5),
            RestartDecision::Restart { number: u32::MAX, delay_ms: 1 }
        );
    }

    #[test]
    fn exponential_delay_grows_and_resets_after_a_stable_period() {
        let exp = exponential(u32::MAX, 10_000, 0.0);
        // Failures right after each restart: the delay doubles up to the bound.
        let mut t = 1_000_000;
        let mut times = Vec::new();
        let mut expected = Vec::new();
        for d in [100, 200, 400, 800, 1000, 1000] {
            times.push(t);
            expected.push(Some(d));
            t += d + 50;
        }
        assert_eq!(delays(&exp, &times, 0.5), expected);

        // A failure 10 s (the threshold) after the last restart was due starts again at the initial delay;
        // one just before it does not.
        let mut history = RestartHistory::default();
        let mut now = 1_000_000;
        for _ in 0..4 {
            let RestartDecision::Restart { delay_ms, .. } = history.on_failure(&exp, 0, now, 0.5) else { panic!() };
            now += delay_ms + 10;
        }
        assert_eq!(history.backoff_attempts, 4);
        let due = history.last_restart_due_ms;
        let mut before = history.clone();
        assert_eq!(
            before.on_failure(&exp, 4, due + 9_999, 0.5),
            RestartDecision::Restart { number: 5, delay_ms: 1000 }
        );
        assert_eq!(
            history.on_failure(&exp, 4, due + 10_000, 0.5),
            RestartDecision::Restart { number: 5, delay_ms: 100 }
        );
        assert_eq!(history.backoff_attempts, 1);
    }

    #[test]
    fn exponential_delay_attempts_count_until_the_backoff_resets() {
        let exp = exponential(2, 10_000, 0.0);
        assert_eq!(delays(&exp, &[1_000_000, 1_000_150, 1_000_400], 0.5), vec![Some(100), Some(200), None]);
        // With a stable hour between the failures the job never runs out of attempts.
        let hourly: Vec<u64> = (1..=10).map(|h| h * 3_600_000).collect();
        assert_eq!(delays(&exp, &hourly, 0.5), vec![Some(100); 10]);
        let mut history = RestartHistory { backoff_attempts: 2, last_restart_due_ms: 500, failure_times_ms: vec![] };
        match history.on_failure(&exp, 7, 600, 0.5) {
            RestartDecision::GiveUp { reason } => assert!(reason.contains("allows 2 restarts"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn exponential_delay_jitter_stays_within_its_factor_and_bounds() {
        let exp = exponential(u32::MAX, 10_000, 0.25);
        let at = |random| delays(&exp, &[1_000_000, 1_000_500, 1_001_000], random);
        assert_eq!(at(0.5), vec![Some(100), Some(200), Some(400)], "the middle of the range is no jitter");
        assert_eq!(at(0.0), vec![Some(100), Some(150), Some(300)], "never below the initial delay");
        assert_eq!(at(0.999_999), vec![Some(125), Some(250), Some(500)]);
        let high = exponential(u32::MAX, 10_000, 1.0);
        let capped = delays(&high, &[1_000_000, 1_000_200, 1_000_600, 1_001_400, 1_003_000], 0.999_999);
        assert_eq!(capped.last(), Some(&Some(1000)), "never above the maximum: {capped:?}");
    }

    #[test]
    fn failure_rate_fails_the_job_on_too_many_failures_within_the_interval() {
        let rate = RestartSettings::FailureRate {
            max_failures_per_interval: 2,
            failure_rate_interval_ms: 60_000,
            delay_ms: 50,
        };
        // Three failures within a minute: the third fails the job.
        assert_eq!(delays(&rate, &[0, 10_000, 60_000], 0.5), vec![Some(50), Some(50), None]);
        // Spread out, any number of failures is fine (the window slides).
        let spread: Vec<u64> = (0..20).map(|i| i * 30_001).collect();
        assert_eq!(delays(&rate, &spread, 0.5), vec![Some(50); 20]);
        assert_eq!(delays(&rate, &[0, 10_000, 60_001], 0.5), vec![Some(50); 3], "the first is just out of the window");

        let mut history = RestartHistory::default();
        for t in [0, 1, 2, 3, 4, 100_000, 100_001] {
            let _ = history.on_failure(&rate, 0, t, 0.5);
            assert!(history.failure_times_ms.len() <= 3, "the history is bounded: {history:?}");
        }
        match history.on_failure(&rate, 9, 100_002, 0.5) {
            RestartDecision::GiveUp { reason } => {
                assert!(reason.contains("allows 2 failures within 60000 ms"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }
}
