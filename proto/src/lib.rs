//! Weir's wire protocol: the generated tonic/prost code for `proto/weir.proto`, and the names its enums are
//! shown by (the value's name without the enum's prefix, as clients print and parse them).

#![allow(clippy::all, missing_docs)]

/// Version 1 of the protocol.
pub mod v1 {
    tonic::include_proto!("weir.v1");
}

pub use v1::*;

/// The enums whose values clients show by name: the generated `as_str_name` without the enum's prefix.
macro_rules! shown_by_name {
    ($ty:ty, $prefix:literal) => {
        impl $ty {
            /// The value's name as clients show it (`RUNNING`, not `JOB_STATE_RUNNING`).
            pub fn name(self) -> &'static str {
                let full = self.as_str_name();
                full.strip_prefix($prefix).unwrap_or(full)
            }

            /// The value of a name as clients show it; `None` for an unknown name (or `UNSPECIFIED`).
            pub fn from_name(name: &str) -> Option<Self> {
                let value = Self::from_str_name(&format!("{}{name}", $prefix))?;
                (value as i32 != 0).then_some(value)
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.name())
            }
        }
    };
}

shown_by_name!(JobState, "JOB_STATE_");
shown_by_name!(CheckpointStatus, "CHECKPOINT_STATUS_");
shown_by_name!(Verdict, "VERDICT_");

impl JobState {
    /// Whether the job is over: it never leaves this state.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Finished | JobState::Canceled | JobState::Failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_drop_the_prefix_and_parse_back() {
        assert_eq!(JobState::Running.name(), "RUNNING");
        assert_eq!(JobState::Running.to_string(), "RUNNING");
        assert_eq!(JobState::from_name("RESTARTING"), Some(JobState::Restarting));
        assert_eq!(JobState::from_name("UNSPECIFIED"), None);
        assert_eq!(JobState::from_name("running"), None);
        assert_eq!(CheckpointStatus::InProgress.name(), "IN_PROGRESS");
        assert_eq!(CheckpointStatus::from_name("COMPLETED"), Some(CheckpointStatus::Completed));
        assert!(JobState::Failed.is_terminal() && !JobState::Restarting.is_terminal());
    }
}
