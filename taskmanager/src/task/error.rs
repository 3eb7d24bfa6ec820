//! How a task fails: its error type, and an operator's error naming the operator.

use crate::api::operator::{ErrorClass, OperatorError};

/// A task failure, described.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TaskError {
    #[error(transparent)]
    Operator(#[from] OperatorError),
    #[error(transparent)]
    State(#[from] weir_state::StateError),
    #[error(transparent)]
    Net(#[from] crate::net::NetError),
    #[error(transparent)]
    Codec(#[from] crate::api::record::CodecError),
    #[error(transparent)]
    Store(#[from] weir_common::service::store::StoreError),
    #[error(transparent)]
    Restore(#[from] crate::task::restore::RestoreError),
    #[error("source {uid:?}: {source}")]
    EventTime { uid: String, source: weir_common::job::watermarks::EventTimeOutOfRange },
    #[error(transparent)]
    SplitRuns(#[from] super::event_time::SplitRunsError),
    #[error("canceled")]
    Canceled,
    #[error("{0}")]
    Other(String),
}

impl TaskError {
    /// Whether a restart may mend it: an operator's error says; anything else (the network, the store, a restore
    /// that could not read its files) may pass.
    pub(super) fn class(&self) -> ErrorClass {
        match self {
            TaskError::Operator(e) => e.class(),
            _ => ErrorClass::Retryable,
        }
    }
}

/// An operator's error, naming the operator (a user sees which one of a chain failed, e.g. a state value over
/// the size limit). Errors raised further down the chain, which reach an operator through its collector,
/// already name theirs.
pub(crate) fn in_operator(uid: &str, e: OperatorError) -> TaskError {
    match e {
        e @ OperatorError::InOperator { .. } => TaskError::Operator(e),
        e => TaskError::Operator(OperatorError::InOperator { uid: uid.to_string(), source: Box::new(e) }),
    }
}
