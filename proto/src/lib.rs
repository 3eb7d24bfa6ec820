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

/// The enums that users write and read in lower case (`rocksdb`, `key-by`, `canonical`, `no-claim`): named by the
/// generated `as_str_name` without the enum's prefix, lower-cased, `_` as `-` — the names they serialize by.
macro_rules! named_in_kebab_case {
    ($ty:ty, $prefix:literal) => {
        impl $ty {
            /// The value's name as users write it (`key-by`, not `PARTITIONING_KEY_BY`).
            pub fn name(self) -> String {
                let full = self.as_str_name();
                full.strip_prefix($prefix).unwrap_or(full).to_ascii_lowercase().replace('_', "-")
            }

            /// The value of a name as users write it; `None` for an unknown name (or `unspecified`).
            pub fn from_name(name: &str) -> Option<Self> {
                let value =
                    Self::from_str_name(&format!("{}{}", $prefix, name.to_ascii_uppercase().replace('-', "_")))?;
                (value as i32 != 0 && !name.contains('_')).then_some(value)
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(&self.name())
            }
        }
    };
}

named_in_kebab_case!(StateBackend, "STATE_BACKEND_");
named_in_kebab_case!(Partitioning, "PARTITIONING_");
named_in_kebab_case!(SavepointFormat, "SAVEPOINT_FORMAT_");
named_in_kebab_case!(RestoreMode, "RESTORE_MODE_");
named_in_kebab_case!(SnapshotFormat, "SNAPSHOT_FORMAT_");

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

    #[test]
    fn kebab_names_are_the_serialized_names() {
        assert_eq!(Partitioning::KeyBy.name(), "key-by");
        assert_eq!(Partitioning::from_name("key-by"), Some(Partitioning::KeyBy));
        assert_eq!(Partitioning::from_name("key_by"), None);
        assert_eq!(Partitioning::from_name("unspecified"), None);
        assert_eq!(RestoreMode::NoClaim.to_string(), "no-claim");
        assert_eq!(SnapshotFormat::from_name("canonical"), Some(SnapshotFormat::Canonical));
        assert_eq!(StateBackend::from_name("heap"), Some(StateBackend::Heap));
        for p in [Partitioning::Forward, Partitioning::Rebalance, Partitioning::Broadcast, Partitioning::KeyBy] {
            assert_eq!(serde_json::to_string(&p).unwrap(), format!("\"{}\"", p.name()));
            assert_eq!(serde_json::from_str::<Partitioning>(&format!("\"{p}\"")).unwrap(), p);
        }
        assert_eq!(serde_json::to_string(&SavepointFormat::Native).unwrap(), "\"native\"");
    }
}

/// Config values written in code (tests, clients building a spec): text, integers and flags.
macro_rules! config_value_from {
    ($($ty:ty => $kind:ident($conv:expr)),* $(,)?) => {
        $(impl From<$ty> for ConfigValue {
            fn from(v: $ty) -> Self {
                ConfigValue { kind: Some(config_value::Kind::$kind($conv(v))) }
            }
        })*
    };
}

config_value_from!(
    &str => Text(str::to_string),
    String => Text(std::convert::identity),
    i64 => Int(std::convert::identity),
    bool => Flag(std::convert::identity),
);

impl From<u64> for ConfigValue {
    fn from(v: u64) -> Self {
        let kind = match i64::try_from(v) {
            Ok(i) => config_value::Kind::Int(i),
            Err(_) => config_value::Kind::Uint(v),
        };
        ConfigValue { kind: Some(kind) }
    }
}

impl ConfigValue {
    /// The text this value holds, if it is text.
    pub fn as_text(&self) -> Option<&str> {
        match &self.kind {
            Some(config_value::Kind::Text(s)) => Some(s),
            _ => None,
        }
    }
}
