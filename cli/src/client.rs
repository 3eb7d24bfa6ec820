//! A typed client of the job manager's `ClientApi`: every call has a timeout, and gRPC failures become
//! [`CliError`]s with the job manager's own message.

use crate::error::error_chain;
use crate::CliError;
use std::future::Future;
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use weir_proto as pb;
use weir_proto::client_api_client::ClientApiClient;

/// Longest wait for a TCP connection to the job manager.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to one job manager.
#[derive(Clone, Debug)]
pub struct JobManager {
    addr: String,
    client: ClientApiClient<Channel>,
    timeout: Duration,
}

impl JobManager {
    /// Connects to `addr` (with a scheme, e.g. `http://127.0.0.1:6123`); every later call times out after `timeout`.
    pub async fn connect(addr: &str, timeout: Duration) -> Result<JobManager, CliError> {
        let endpoint = Endpoint::from_shared(addr.to_string())
            .map_err(|e| CliError::Usage(format!("invalid job manager address {addr:?}: {}", error_chain(&e))))?
            .connect_timeout(CONNECT_TIMEOUT.min(timeout))
            .timeout(timeout);
        let unreachable = |cause: String| CliError::Unreachable { addr: addr.to_string(), cause };
        let channel = match tokio::time::timeout(timeout, endpoint.connect()).await {
            Ok(Ok(channel)) => channel,
            Ok(Err(e)) => return Err(unreachable(error_chain(&e))),
            Err(_) => return Err(unreachable(format!("no connection within {}", crate::render::duration(timeout)))),
        };
        Ok(JobManager { addr: addr.to_string(), client: ClientApiClient::new(channel), timeout })
    }

    /// The address this client talks to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Submits a job; an `INVALID_ARGUMENT` answer (the spec is wrong) becomes [`CliError::Spec`].
    pub async fn submit_job(&self, req: pb::SubmitJobRequest) -> Result<String, CliError> {
        match self.call("SubmitJob", |mut c| async move { c.submit_job(req).await }).await {
            Ok(r) => Ok(r.job_id),
            Err(Rejected(s)) if s.code() == Code::InvalidArgument => Err(CliError::Spec(s.message().to_string())),
            Err(e) => Err(self.error(e)),
        }
    }

    /// All jobs the job manager knows.
    pub async fn list_jobs(&self) -> Result<Vec<pb::JobInfo>, CliError> {
        let r = self.call("ListJobs", |mut c| async move { c.list_jobs(pb::ListJobsRequest {}).await }).await;
        Ok(r.map_err(|e| self.error(e))?.jobs)
    }

    /// One job.
    pub async fn get_job(&self, job_id: &str) -> Result<pb::JobInfo, CliError> {
        let req = pb::GetJobRequest { job_id: job_id.to_string() };
        let r = self.call("GetJob", |mut c| async move { c.get_job(req).await }).await;
        r.map_err(|e| self.error(e))?.job.ok_or_else(|| missing_field("GetJob", "job"))
    }

    /// Cancels a job; returns its state after the request.
    pub async fn cancel_job(&self, job_id: &str) -> Result<pb::JobInfo, CliError> {
        let req = pb::CancelJobRequest { job_id: job_id.to_string() };
        let r = self.call("CancelJob", |mut c| async move { c.cancel_job(req).await }).await;
        r.map_err(|e| self.error(e))?.job.ok_or_else(|| missing_field("CancelJob", "job"))
    }

    /// The checkpoints of a job.
    pub async fn list_checkpoints(&self, job_id: &str) -> Result<Vec<pb::CheckpointInfo>, CliError> {
        let req = pb::ListCheckpointsRequest { job_id: job_id.to_string() };
        let r = self.call("ListCheckpoints", |mut c| async move { c.list_checkpoints(req).await }).await;
        Ok(r.map_err(|e| self.error(e))?.checkpoints)
    }

    /// Takes a savepoint (`stop`: and stops the job, draining it first if `drain`).
    pub async fn savepoint(
        &self,
        job_id: &str,
        dir: &str,
        format: &str,
        stop: Option<bool>,
    ) -> Result<pb::SavepointResponse, CliError> {
        let r = match stop {
            None => {
                let req = pb::TriggerSavepointRequest {
                    job_id: job_id.to_string(),
                    target_dir: dir.to_string(),
                    format: format.to_string(),
                };
                self.call("TriggerSavepoint", |mut c| async move { c.trigger_savepoint(req).await }).await
            }
            Some(drain) => {
                let req = pb::StopJobRequest {
                    job_id: job_id.to_string(),
                    target_dir: dir.to_string(),
                    format: format.to_string(),
                    drain,
                };
                self.call("StopJob", |mut c| async move { c.stop_job(req).await }).await
            }
        };
        r.map_err(|e| self.error(e))
    }

    /// Summarises a savepoint.
    pub async fn inspect_savepoint(&self, url: &str) -> Result<pb::InspectSavepointResponse, CliError> {
        let req = pb::InspectSavepointRequest { url: url.to_string() };
        let r = self.call("InspectSavepoint", |mut c| async move { c.inspect_savepoint(req).await }).await;
        r.map_err(|e| self.error(e))
    }

    /// What restoring a savepoint into `spec` would do.
    pub async fn check_savepoint(
        &self,
        url: &str,
        spec: pb::JobSpec,
        allow_non_restored_state: bool,
    ) -> Result<pb::CheckSavepointResponse, CliError> {
        let req = pb::CheckSavepointRequest { url: url.to_string(), spec: Some(spec), allow_non_restored_state };
        let r = self.call("CheckSavepoint", |mut c| async move { c.check_savepoint(req).await }).await;
        r.map_err(|e| self.error(e))
    }

    /// Deletes a savepoint; returns the number of files deleted.
    pub async fn dispose_savepoint(&self, url: &str) -> Result<u64, CliError> {
        let req = pb::DisposeSavepointRequest { url: url.to_string() };
        let r = self.call("DisposeSavepoint", |mut c| async move { c.dispose_savepoint(req).await }).await;
        Ok(r.map_err(|e| self.error(e))?.deleted_files)
    }

    /// The registered task managers and their slots.
    pub async fn cluster_overview(&self) -> Result<pb::ClusterOverviewResponse, CliError> {
        let r = self
            .call("ClusterOverview", |mut c| async move { c.cluster_overview(pb::ClusterOverviewRequest {}).await });
        r.await.map_err(|e| self.error(e))
    }

    async fn call<T, F, Fut>(&self, what: &'static str, f: F) -> Result<T, CallError>
    where
        F: FnOnce(ClientApiClient<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        match tokio::time::timeout(self.timeout, f(self.client.clone())).await {
            Ok(Ok(r)) => Ok(r.into_inner()),
            Ok(Err(s)) => Err(Rejected(s)),
            Err(_) => Err(CallError::TimedOut(what)),
        }
    }

    fn error(&self, e: CallError) -> CliError {
        match e {
            CallError::TimedOut(what) => self.timeout_error(what),
            Rejected(s) => match s.code() {
                Code::Unavailable => CliError::Unreachable { addr: self.addr.clone(), cause: status_cause(&s) },
                Code::DeadlineExceeded => self.timeout_error("the request"),
                Code::Cancelled if s.message().to_ascii_lowercase().contains("timeout") => {
                    self.timeout_error("the request")
                }
                Code::InvalidArgument | Code::NotFound | Code::FailedPrecondition | Code::AlreadyExists => {
                    CliError::Failed(status_cause(&s))
                }
                code => CliError::Failed(format!("the job manager answered {code:?}: {}", status_cause(&s))),
            },
        }
    }

    fn timeout_error(&self, what: &str) -> CliError {
        CliError::Timeout(format!(
            "the job manager at {} did not answer {what} within {} (see --rpc-timeout)",
            self.addr,
            crate::render::duration(self.timeout)
        ))
    }
}

/// A failed call, before it is turned into a [`CliError`].
enum CallError {
    Rejected(Status),
    TimedOut(&'static str),
}
use CallError::Rejected;

fn status_cause(s: &Status) -> String {
    let msg = s.message();
    match std::error::Error::source(s) {
        Some(src) => {
            let chain = error_chain(src);
            if msg.is_empty() || chain.contains(msg) {
                chain
            } else if msg.contains(&chain) {
                msg.to_string()
            } else {
                format!("{msg}: {chain}")
            }
        }
        None if msg.is_empty() => format!("{:?}", s.code()),
        None => msg.to_string(),
    }
}

fn missing_field(rpc: &str, field: &str) -> CliError {
    CliError::Failed(format!("the job manager's {rpc} answer has no {field}"))
}
