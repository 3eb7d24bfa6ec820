//! The library's error types that cross module boundaries.

use std::path::PathBuf;
use weir_common::config::ConfigError;
use weir_common::store::StoreError;

/// Why the job manager could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum JobManagerError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The checkpoint store cannot be opened.
    #[error("checkpoint store: {0}")]
    Store(#[from] StoreError),
    /// The checkpoint store answers but refuses writes.
    #[error("{0}")]
    StoreRefused(weir_common::store::ProbeError),
    /// The local job store cannot be used.
    #[error(transparent)]
    JobStore(#[from] crate::job_store::JobStoreError),
    /// High availability cannot work (etcd unreachable, conflicting clusters).
    #[error(transparent)]
    Ha(#[from] crate::ha::HaError),
    /// TLS, secret or token files cannot be used.
    #[error(transparent)]
    Security(#[from] weir_common::security::SecurityError),
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The listening socket cannot be used.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A local directory cannot be created.
    #[error("cannot create directory {path}: {source}")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Why a client request about a job was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobRequestError {
    /// The job id is malformed.
    #[error("{0}")]
    InvalidId(String),
    /// The spec does not validate.
    #[error("{0}")]
    InvalidSpec(String),
    /// No job has this id.
    #[error("no job with id {0}")]
    NotFound(String),
    /// The job is in a state that does not allow the request.
    #[error("job {id} is already {state}")]
    AlreadyTerminal {
        /// The job id.
        id: String,
        /// Its state.
        state: &'static str,
    },
    /// The job could not be written to the local job store.
    #[error("cannot store job: {0}")]
    Storage(String),
    /// The job manager is shutting down.
    #[error("the job manager is shutting down")]
    ShuttingDown,
    /// The checkpoint store refuses writes, so the job could never checkpoint.
    #[error("job not accepted: {0}")]
    StoreRefused(String),
    /// The savepoint to restore from cannot be used (no savepoint there, unreadable, incompatible).
    #[error("{0}")]
    BadSavepoint(String),
    /// The savepoint's store could not be read (try again).
    #[error("{0}")]
    SavepointUnavailable(String),
    /// The savepoint could not be taken.
    #[error("savepoint failed: {0}")]
    SavepointFailed(String),
    /// The job cannot take a savepoint in its state.
    #[error("{0}")]
    NotRunning(String),
}

impl From<JobRequestError> for tonic::Status {
    fn from(e: JobRequestError) -> Self {
        let msg = e.to_string();
        match e {
            JobRequestError::InvalidId(_) | JobRequestError::InvalidSpec(_) => tonic::Status::invalid_argument(msg),
            JobRequestError::NotFound(_) => tonic::Status::not_found(msg),
            JobRequestError::AlreadyTerminal { .. } => tonic::Status::failed_precondition(msg),
            JobRequestError::Storage(_) => tonic::Status::internal(msg),
            JobRequestError::ShuttingDown => tonic::Status::unavailable(msg),
            JobRequestError::StoreRefused(_) => tonic::Status::failed_precondition(msg),
            JobRequestError::BadSavepoint(_) => tonic::Status::failed_precondition(msg),
            JobRequestError::SavepointUnavailable(_) => tonic::Status::unavailable(msg),
            JobRequestError::SavepointFailed(_) => tonic::Status::aborted(msg),
            JobRequestError::NotRunning(_) => tonic::Status::failed_precondition(msg),
        }
    }
}
