//! A typed client of the job manager's `ClientApi`: every call has a timeout, and gRPC failures become
//! [`CliError`]s with the job manager's own message.

use crate::error::error_chain;
use crate::error::CliError;
use std::future::Future;
use std::time::Duration;
use tonic::{Code, Status};
use weir_common::checkpoint::SavepointFormat;
use weir_common::service::cluster::JmLink;
use weir_common::service::security::{SecureChannel, Security};
use weir_proto as pb;
use weir_proto::client_api_client::ClientApiClient;

/// A connection to the job managers of one cluster: calls go to the leader, following a standby's answer.
#[derive(Clone)]
pub struct JobManager {
    link: JmLink,
    timeout: Duration,
    /// Without TLS a transport failure may be a TLS server refusing plaintext: the error says so.
    plaintext: bool,
}

impl JobManager {
    /// A client of `addrs` (comma-separated, each with a scheme, e.g. `http://127.0.0.1:6123`), presenting
    /// `security`; every later call times out after `timeout`. Connections are made by the first call.
    pub async fn connect(addrs: &str, timeout: Duration, security: Security) -> Result<JobManager, CliError> {
        let list = weir_common::service::cluster::parse_addresses(addrs).map_err(|e| CliError::Usage(e.to_string()))?;
        let plaintext = security.tls.is_none();
        let link = JmLink::new(list, security, timeout).map_err(|e| CliError::Usage(e.to_string()))?;
        Ok(JobManager { link, timeout, plaintext })
    }

    /// The address this client talks to now.
    pub fn addr(&self) -> String {
        self.link.current()
    }

    /// Submits a job; an `INVALID_ARGUMENT` answer (the spec is wrong) becomes [`CliError::Spec`].
    pub async fn submit_job(&self, req: pb::SubmitJobRequest) -> Result<pb::SubmitJobResponse, CliError> {
        match self
            .call("SubmitJob", move |mut c| {
                let req = req.clone();
                async move { c.submit_job(req).await }
            })
            .await
        {
            Ok(r) => Ok(r),
            Err(Rejected(s)) if s.code() == Code::InvalidArgument => Err(CliError::Spec(s.message().to_string())),
            Err(e) => Err(self.error(e)),
        }
    }

    /// All jobs the job manager knows, read a page at a time (so that no answer outgrows a message).
    pub async fn list_jobs(&self) -> Result<Vec<pb::JobInfo>, CliError> {
        let mut jobs = Vec::new();
        let mut page_token = String::new();
        loop {
            let req = pb::ListJobsRequest { page_size: 0, page_token: page_token.clone() };
            let r = self
                .call("ListJobs", move |mut c| {
                    let req = req.clone();
                    async move { c.list_jobs(req).await }
                })
                .await
                .map_err(|e| self.error(e))?;
            jobs.extend(r.jobs);
            if r.next_page_token.is_empty() {
                return Ok(jobs);
            }
            page_token = r.next_page_token;
        }
    }

    /// Deletes the record of an ended job (and its checkpoints, if asked); returns the files deleted.
    pub async fn delete_job(&self, job_id: &str, delete_checkpoints: bool) -> Result<u64, CliError> {
        let req = pb::DeleteJobRequest { job_id: job_id.to_string(), delete_checkpoints };
        let r = self
            .call("DeleteJob", move |mut c| {
                let req = req.clone();
                async move { c.delete_job(req).await }
            })
            .await;
        Ok(r.map_err(|e| self.error(e))?.deleted_files)
    }

    /// One job.
    pub async fn get_job(&self, job_id: &str) -> Result<pb::JobInfo, CliError> {
        let req = pb::GetJobRequest { job_id: job_id.to_string() };
        let r = self
            .call("GetJob", move |mut c| {
                let req = req.clone();
                async move { c.get_job(req).await }
            })
            .await;
        r.map_err(|e| self.error(e))?.job.ok_or_else(|| missing_field("GetJob", "job"))
    }

    /// Cancels a job; returns its state after the request.
    pub async fn cancel_job(&self, job_id: &str) -> Result<pb::JobInfo, CliError> {
        let req = pb::CancelJobRequest { job_id: job_id.to_string() };
        let r = self
            .call("CancelJob", move |mut c| {
                let req = req.clone();
                async move { c.cancel_job(req).await }
            })
            .await;
        r.map_err(|e| self.error(e))?.job.ok_or_else(|| missing_field("CancelJob", "job"))
    }

    /// The checkpoints of a job.
    pub async fn list_checkpoints(&self, job_id: &str) -> Result<Vec<pb::CheckpointInfo>, CliError> {
        let req = pb::ListCheckpointsRequest { job_id: job_id.to_string() };
        let r = self
            .call("ListCheckpoints", move |mut c| {
                let req = req.clone();
                async move { c.list_checkpoints(req).await }
            })
            .await;
        Ok(r.map_err(|e| self.error(e))?.checkpoints)
    }

    /// Takes a savepoint (`stop`: and stops the job, draining it first if `drain`).
    pub async fn savepoint(
        &self,
        job_id: &str,
        dir: &str,
        format: SavepointFormat,
        stop: Option<bool>,
    ) -> Result<pb::SavepointResponse, CliError> {
        let r = match stop {
            None => {
                let req = pb::TriggerSavepointRequest {
                    job_id: job_id.to_string(),
                    target_dir: dir.to_string(),
                    format: format as i32,
                };
                self.call("TriggerSavepoint", move |mut c| {
                    let req = req.clone();
                    async move { c.trigger_savepoint(req).await }
                })
                .await
            }
            Some(drain) => {
                let req = pb::StopJobRequest {
                    job_id: job_id.to_string(),
                    target_dir: dir.to_string(),
                    format: format as i32,
                    drain,
                };
                self.call("StopJob", move |mut c| {
                    let req = req.clone();
                    async move { c.stop_job(req).await }
                })
                .await
            }
        };
        r.map_err(|e| self.error(e))
    }

    /// Summarises a savepoint.
    pub async fn inspect_savepoint(&self, url: &str) -> Result<pb::InspectSavepointResponse, CliError> {
        let req = pb::InspectSavepointRequest { url: url.to_string() };
        let r = self
            .call("InspectSavepoint", move |mut c| {
                let req = req.clone();
                async move { c.inspect_savepoint(req).await }
            })
            .await;
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
        let r = self
            .call("CheckSavepoint", move |mut c| {
                let req = req.clone();
                async move { c.check_savepoint(req).await }
            })
            .await;
        r.map_err(|e| self.error(e))
    }

    /// Deletes a savepoint; returns the number of files deleted.
    pub async fn dispose_savepoint(&self, url: &str) -> Result<u64, CliError> {
        let req = pb::DisposeSavepointRequest { url: url.to_string() };
        let r = self
            .call("DisposeSavepoint", move |mut c| {
                let req = req.clone();
                async move { c.dispose_savepoint(req).await }
            })
            .await;
        Ok(r.map_err(|e| self.error(e))?.deleted_files)
    }

    /// The registered task managers and their slots.
    pub async fn cluster_overview(&self) -> Result<pb::ClusterOverviewResponse, CliError> {
        let r = self
            .call("ClusterOverview", |mut c| async move { c.cluster_overview(pb::ClusterOverviewRequest {}).await });
        r.await.map_err(|e| self.error(e))
    }

    /// The operator kinds the registered task managers report.
    pub async fn list_kinds(&self) -> Result<pb::ListKindsResponse, CliError> {
        let r = self.call("ListKinds", |mut c| async move { c.list_kinds(pb::ListKindsRequest {}).await });
        r.await.map_err(|e| self.error(e))
    }

    async fn call<T, F, Fut>(&self, what: &'static str, f: F) -> Result<T, CallError>
    where
        F: Fn(ClientApiClient<SecureChannel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, Status>>,
    {
        // Each address at most twice: enough to follow a standby to the leader and to skip dead ones.
        let mut tries = 2 * self.link.addresses().len() + 1;
        loop {
            let channel = self.link.channel().map_err(|e| Rejected(Status::invalid_argument(e.to_string())))?;
            let answer = match tokio::time::timeout(self.timeout, f(ClientApiClient::new(channel))).await {
                // The channel's own timeout (a tower layer) may answer first: the same as no answer.
                Ok(Err(s)) if s.code() == Code::Cancelled && weir_common::service::cluster::timed_out(&s) => Err(()),
                Ok(r) => Ok(r),
                Err(_) => Err(()),
            };
            match answer {
                Ok(Ok(r)) => return Ok(r.into_inner()),
                // A standby did nothing, and a refused connection carried nothing: trying elsewhere is safe.
                Ok(Err(s)) if tries > 1 && self.link.observe(&s) => tries -= 1,
                Ok(Err(s)) => return Err(Rejected(s)),
                // A job manager that accepts connections but does not answer (paused, half hung): a read may
                // be asked elsewhere; a change may have been made there, so it is not sent twice.
                Err(_) if tries > 1 && !CHANGES.contains(&what) => {
                    if !self.link.observe(&Status::deadline_exceeded("no answer")) {
                        return Err(CallError::TimedOut(what));
                    }
                    tries -= 1;
                }
                Err(_) => return Err(CallError::TimedOut(what)),
            }
        }
    }

    fn error(&self, e: CallError) -> CliError {
        let e = match e {
            Rejected(s) if self.plaintext && is_transport_failure(&s) => {
                return CliError::Unreachable {
                    addr: self.link.addresses().join(","),
                    cause: format!(
                        "{} (if the job manager serves TLS, give --tls-ca and an https:// address)",
                        status_cause(&s)
                    ),
                }
            }
            e => e,
        };
        match e {
            CallError::TimedOut(what) => self.timeout_error(what),
            Rejected(s) => match s.code() {
                Code::Unavailable => {
                    CliError::Unreachable { addr: self.link.addresses().join(","), cause: status_cause(&s) }
                }
                Code::Unauthenticated => CliError::Failed(format!("UNAUTHENTICATED: {}", status_cause(&s))),
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
            self.link.current(),
            crate::render::duration(self.timeout)
        ))
    }
}

/// The calls that change something: never sent a second time after a timeout.
const CHANGES: &[&str] = &["SubmitJob", "CancelJob", "TriggerSavepoint", "StopJob", "DisposeSavepoint"];

/// A failed call, before it is turned into a [`CliError`].
enum CallError {
    Rejected(Status),
    TimedOut(&'static str),
}
use CallError::Rejected;

/// Whether a call failed in the transport (the connection broke) rather than with an answer.
fn is_transport_failure(s: &Status) -> bool {
    let cause = status_cause(s).to_ascii_lowercase();
    matches!(s.code(), Code::Unknown | Code::Unavailable | Code::Internal)
        && (cause.contains("transport error") || cause.contains("broken pipe") || cause.contains("connection reset"))
}

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
