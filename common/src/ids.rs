//! Newtypes for ids and counters, so that no bare integer crosses a module boundary.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A job's id: a UUID in its simple (32 hex digits) form.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub String);

impl JobId {
    /// A fresh random job id.
    pub fn random() -> Self {
        JobId(uuid::Uuid::new_v4().simple().to_string())
    }

    /// Checks that an id read from outside has the form Weir gives ids (it is used in paths).
    pub fn parse(s: &str) -> Result<Self, InvalidJobId> {
        if !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            Ok(JobId(s.to_string()))
        } else {
            Err(InvalidJobId(s.to_string()))
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Text that is not a job id (as read, quoted in the message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid job id {0:?}")]
pub struct InvalidJobId(pub String);

macro_rules! int_id {
    ($(#[$doc:meta])* $name:ident, $ty:ty) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
        #[serde(transparent)]
        pub struct $name(pub $ty);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

int_id!(
    /// A checkpoint's id: starts at 1 and never goes backwards for a job, also across restarts.
    CheckpointId,
    u64
);
int_id!(
    /// A deployment attempt of a job: incremented at every (re)start, so stale messages can be dropped.
    AttemptNumber,
    u32
);
int_id!(
    /// A vertex of the execution graph: a chain of operators that runs as one task.
    VertexId,
    u32
);
int_id!(
    /// The index of one parallel instance of a vertex or operator.
    SubtaskIndex,
    u32
);
int_id!(
    /// A key group: the unit in which keyed state is partitioned and moved.
    KeyGroup,
    u32
);
