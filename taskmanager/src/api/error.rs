//! The error an operator raises (kept apart from the traits, so that the record helpers that raise it do not
//! import the module that imports them).

/// An error raised by an operator; it fails the task (and the job fails over).
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
    /// Anything else, described.
    #[error("{0}")]
    Other(String),
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
}
