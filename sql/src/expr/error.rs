//! Why an expression cannot be used.

/// Why an expression cannot be parsed, typed or evaluated: the message names the text's problem (and where, for a
/// syntax error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ExprError(pub String);

impl ExprError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        ExprError(message.into())
    }
}
