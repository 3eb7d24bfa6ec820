//! The library's error types that cross module boundaries.

use std::path::PathBuf;
use weir_common::ids::JobId;
use weir_common::service::config::ConfigError;
use weir_common::service::store::StoreError;

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
    StoreRefused(weir_common::service::store::ProbeError),
    /// The local job store cannot be used.
    #[error(transparent)]
    JobStore(#[from] JobStoreError),
    /// High availability cannot work (etcd unreachable, conflicting clusters).
    #[error(transparent)]
    Ha(#[from] crate::ha::etcd::HaError),
    /// TLS, secret or token files cannot be used.
    #[error(transparent)]
    Security(#[from] weir_common::service::security::SecurityError),
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
    #[error(transparent)]
    InvalidId(#[from] weir_common::ids::InvalidJobId),
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
    /// The job has not ended, so its record cannot be deleted.
    #[error(
        "job {id} is {state}: only a job that has ended (FINISHED, CANCELED or FAILED) can be deleted; cancel it first"
    )]
    NotEnded {
        /// The job id.
        id: String,
        /// Its state.
        state: &'static str,
    },
    /// What the request would delete is still needed by another job.
    #[error("{0}")]
    InUse(String),
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
    /// No task manager could check the spec's operators (none registered holds every kind of it, or none
    /// answered): try again once one has registered.
    #[error("{0}")]
    NoChecker(String),
}

/// The longest message a refused request carries: far above any real one, and far below the message size a
/// client can read, so that no input echoed into an error keeps the client from learning what was wrong.
pub const MAX_ERROR_BYTES: usize = 64 * 1024;

/// `msg` cut to [`MAX_ERROR_BYTES`] at a character boundary, saying how much was cut.
fn capped(msg: String) -> String {
    if msg.len() <= MAX_ERROR_BYTES {
        return msg;
    }
    let mut cut = MAX_ERROR_BYTES;
    while !msg.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… ({} more bytes not shown)", &msg[..cut], msg.len() - cut)
}

impl From<JobRequestError> for tonic::Status {
    fn from(e: JobRequestError) -> Self {
        let msg = capped(e.to_string());
        match e {
            JobRequestError::InvalidId(_) | JobRequestError::InvalidSpec(_) => tonic::Status::invalid_argument(msg),
            JobRequestError::NotFound(_) => tonic::Status::not_found(msg),
            JobRequestError::AlreadyTerminal { .. } | JobRequestError::NotEnded { .. } | JobRequestError::InUse(_) => {
                tonic::Status::failed_precondition(msg)
            }
            JobRequestError::Storage(_) => tonic::Status::internal(msg),
            JobRequestError::ShuttingDown => tonic::Status::unavailable(msg),
            JobRequestError::StoreRefused(_) => tonic::Status::failed_precondition(msg),
            JobRequestError::BadSavepoint(_) => tonic::Status::failed_precondition(msg),
            JobRequestError::SavepointUnavailable(_) => tonic::Status::unavailable(msg),
            JobRequestError::SavepointFailed(_) => tonic::Status::aborted(msg),
            JobRequestError::NotRunning(_) => tonic::Status::failed_precondition(msg),
            JobRequestError::NoChecker(_) => tonic::Status::unavailable(msg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_capped() {
        let huge = JobRequestError::InvalidSpec(format!("operator \"x\": {}", "é".repeat(MAX_ERROR_BYTES)));
        let status = tonic::Status::from(huge);
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().len() < MAX_ERROR_BYTES + 64, "{}", status.message().len());
        assert!(status.message().starts_with("operator \"x\"") && status.message().ends_with("more bytes not shown)"));
        let small = tonic::Status::from(JobRequestError::NotFound("j".into()));
        assert_eq!(small.message(), "no job with id j");
    }
}

/// A job store failure.
#[derive(Debug, thiserror::Error)]
pub enum JobStoreError {
    /// A file or directory cannot be read or written.
    #[error("job store {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// This job manager no longer leads: the write was refused.
    #[error("job store: not written: this job manager is no longer the leader (epoch {epoch})")]
    Fenced {
        /// The epoch the writer led at.
        epoch: u64,
    },
    /// etcd cannot be reached or refused.
    #[error("job store: {0}")]
    Etcd(String),
    /// A record too large for etcd.
    #[error("job store: job {job}'s record is {bytes} bytes, more than etcd takes ({limit}); lower the job's retained checkpoints")]
    TooLarge {
        /// The job.
        job: JobId,
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A job file is not readable as a job.
    #[error("job store {path}: unreadable job file: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}
