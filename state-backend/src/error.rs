//! The state layer's error type.

/// Errors of the state layer.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// RocksDB reported an error.
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    /// Local file I/O failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The object store failed.
    #[error(transparent)]
    Store(#[from] weir_common::service::store::StoreError),
    /// Stored bytes could not be decoded.
    #[error("corrupt state: {0}")]
    Corrupt(String),
    /// A stored value of a state does not decode as the type the operator reads it as: the state's type changed
    /// since the value was written.
    #[error(
        "state {state:?}: a stored value does not decode as {type_name} ({detail}); the state's type changed since \
         it was written. Give the operator's kind a state signature (weir_taskmanager::api::registry::signed) so that \
         `weir savepoint check` and submissions catch the change before deploying, or drop the state on restore \
         (the operator's drop_state_on_change: true, or --allow-non-restored-state)"
    )]
    Decode {
        /// State name.
        state: String,
        /// The type it was read as.
        type_name: &'static str,
        /// What the codec said.
        detail: String,
    },
    /// A snapshot cannot be restored into the backend asked for (a native RocksDB snapshot into the heap).
    #[error("cannot restore: {0}")]
    Restore(String),
    /// A state was declared twice with different kinds, or used wrongly.
    #[error("state {name:?}: {message}")]
    Declaration {
        /// State name.
        name: String,
        /// What is wrong.
        message: String,
    },
}

impl StateError {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        StateError::Io { context: context.into(), source }
    }
}
