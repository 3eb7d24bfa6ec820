//! Why a script cannot run.

use sqlparser::tokenizer::Location;

/// Why a script cannot run: what is wrong, and where in the script when that is known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", at.map(|(l, c)| format!("line {l}, column {c}: ")).unwrap_or_default())]
pub struct SqlError {
    /// What is wrong.
    pub message: String,
    /// Line and column (from 1).
    pub at: Option<(u64, u64)>,
}

impl SqlError {
    /// An error at a place of the script.
    pub fn at(at: Location, message: impl Into<String>) -> Self {
        SqlError { message: message.into(), at: (at.line > 0).then_some((at.line, at.column)) }
    }

    /// An error whose message says where, or that concerns no one place.
    pub fn plain(message: impl Into<String>) -> Self {
        SqlError { message: message.into(), at: None }
    }

    /// This error at `at`, unless it says where already (a parser's message names its own line and column).
    pub fn located(mut self, at: Location) -> Self {
        if self.at.is_none() && !self.message.contains("Line: ") {
            self.at = (at.line > 0).then_some((at.line, at.column));
        }
        self
    }
}

impl From<datafusion_common::DataFusionError> for SqlError {
    /// DataFusion's error in its own words, without the layer that raised it.
    fn from(e: datafusion_common::DataFusionError) -> Self {
        SqlError::plain(crate::expr::compile::explain(e).0)
    }
}
