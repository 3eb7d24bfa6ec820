//! The error an operator raises (kept apart from the traits, so that the record helpers that raise it do not
//! import the module that imports them).

/// Whether a restart may mend a failure. A retryable one fails the job over, as the restart strategy allows; a
/// fatal one fails the job at once (Flink's `SuppressRestartsException`): restoring the same checkpoint into the
/// same job graph would fail the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// A restart may find it mended (a broker back, a file system with room, a record that now takes another
    /// path): the restart strategy decides.
    Retryable,
    /// No restart can mend it: the job fails, naming it.
    Fatal,
}

/// An error raised by an operator; it fails the task, and the job fails over or, when it is [fatal](ErrorClass),
/// fails.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// A state access failed.
    #[error(transparent)]
    State(#[from] weir_state::StateError),
    /// A local I/O operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A system outside the operator failed (a broker, a peer's connection, an injected fault). Retryable.
    #[error("{0}")]
    External(String),
    /// A batch or value the operator could not read or build (a column it lacks, a type it cannot take, an Arrow
    /// kernel's error). Retryable, as in Flink: a replay may take another path.
    #[error("{0}")]
    Records(String),
    /// State the operator restored and cannot read: corrupt, or written for other columns or another config.
    /// Fatal: restoring the same checkpoint fails again.
    #[error("{0}")]
    UnreadableState(String),
    /// The operator was used against what its kind declares (no keyed state for a keyed kind, a timer it never
    /// sets, a call before `initialize_state`, no event time where it needs it). Fatal: the same job graph fails
    /// the same way.
    #[error("{0}")]
    Misuse(String),
    /// A failure the operator knows a restart cannot mend. Fatal.
    #[error("{0}")]
    Fatal(String),
    /// An error of the named operator (set by the runtime, so a user sees which operator of a chain failed).
    #[error("operator {uid:?}: {source}")]
    InOperator {
        /// The operator's uid.
        uid: String,
        /// What went wrong.
        #[source]
        source: Box<OperatorError>,
    },
}

impl OperatorError {
    /// Wraps an I/O error with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        OperatorError::Io { context: context.into(), source }
    }

    /// Whether a restart may mend it.
    pub fn class(&self) -> ErrorClass {
        match self {
            OperatorError::State(_)
            | OperatorError::Io { .. }
            | OperatorError::External(_)
            | OperatorError::Records(_) => ErrorClass::Retryable,
            OperatorError::UnreadableState(_) | OperatorError::Misuse(_) | OperatorError::Fatal(_) => ErrorClass::Fatal,
            OperatorError::InOperator { source, .. } => source.class(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_operator_keeps_its_error_class() {
        let fatal = OperatorError::UnreadableState("a stored row is corrupt".into());
        let named = OperatorError::InOperator { uid: "j".into(), source: Box::new(fatal) };
        assert_eq!(named.class(), ErrorClass::Fatal);
        assert_eq!(OperatorError::External("broker down".into()).class(), ErrorClass::Retryable);
        assert_eq!(OperatorError::Misuse("no keyed state".into()).class(), ErrorClass::Fatal);
        assert_eq!(OperatorError::Records("no column x".into()).class(), ErrorClass::Retryable);
    }
}
