//! The gRPC services: `ClientApi` for the CLI and `JobManagerInternal` for task managers. Handlers only
//! translate between protobuf and [`JobManager`] calls.

use crate::job::mailbox::TaskError;
use crate::leader::Gate;
use crate::manager::{JobManager, TaskAddress};
use tonic::{Request, Response, Status};
use tracing::warn;
use weir_common::checkpoint::TaskSnapshot;
use weir_common::ids::CheckpointId;
use weir_proto as pb;
use weir_proto::client_api_server::ClientApi;
use weir_proto::job_manager_internal_server::JobManagerInternal;

/// Failpoint `name` as the error a lost request would be.
async fn fault(name: &str) -> Result<(), Status> {
    weir_common::service::fault::hit(name).await.map_err(|f| Status::unavailable(f.to_string()))
}

/// Implements both gRPC services on top of a [`JobManager`]: the one this process runs while it leads; a
/// standby answers every call with where the leader is.
#[derive(Clone)]
pub struct JobManagerService {
    gate: Gate,
}

impl JobManagerService {
    /// Serves whatever job manager `gate` lets through.
    pub fn new(gate: Gate) -> Self {
        JobManagerService { gate }
    }

    fn jm(&self) -> Result<JobManager, Status> {
        self.gate.get()
    }
}

#[tonic::async_trait]
impl ClientApi for JobManagerService {
    async fn submit_job(
        &self,
        request: Request<pb::SubmitJobRequest>,
    ) -> Result<Response<pb::SubmitJobResponse>, Status> {
        let req = request.into_inner();
        if req.spec.is_none() {
            return Err(Status::invalid_argument("spec is required"));
        }
        Ok(Response::new(self.jm()?.submit_from(&req).await?))
    }

    async fn list_jobs(&self, request: Request<pb::ListJobsRequest>) -> Result<Response<pb::ListJobsResponse>, Status> {
        Ok(Response::new(self.jm()?.list_jobs_page(request.get_ref())?))
    }

    async fn delete_job(
        &self,
        request: Request<pb::DeleteJobRequest>,
    ) -> Result<Response<pb::DeleteJobResponse>, Status> {
        let r = request.into_inner();
        let deleted_files = self.jm()?.delete_job(&r.job_id, r.delete_checkpoints).await?;
        Ok(Response::new(pb::DeleteJobResponse { deleted_files }))
    }

    async fn get_job(&self, request: Request<pb::GetJobRequest>) -> Result<Response<pb::GetJobResponse>, Status> {
        let job = self.jm()?.job(&request.into_inner().job_id)?;
        Ok(Response::new(pb::GetJobResponse { job: Some(job) }))
    }

    async fn cancel_job(
        &self,
        request: Request<pb::CancelJobRequest>,
    ) -> Result<Response<pb::CancelJobResponse>, Status> {
        let job = self.jm()?.cancel(&request.into_inner().job_id).await?;
        Ok(Response::new(pb::CancelJobResponse { job: Some(job) }))
    }

    async fn list_checkpoints(
        &self,
        request: Request<pb::ListCheckpointsRequest>,
    ) -> Result<Response<pb::ListCheckpointsResponse>, Status> {
        let checkpoints = self.jm()?.checkpoints(&request.into_inner().job_id)?;
        Ok(Response::new(pb::ListCheckpointsResponse { checkpoints }))
    }

    async fn cluster_overview(
        &self,
        _request: Request<pb::ClusterOverviewRequest>,
    ) -> Result<Response<pb::ClusterOverviewResponse>, Status> {
        let jm = self.jm()?;
        let mut overview = jm.cluster_overview();
        overview.leader = self.gate.leader().unwrap_or_default();
        overview.epoch = jm.epoch();
        Ok(Response::new(overview))
    }

    async fn list_kinds(
        &self,
        _request: Request<pb::ListKindsRequest>,
    ) -> Result<Response<pb::ListKindsResponse>, Status> {
        Ok(Response::new(self.jm()?.list_kinds()))
    }

    async fn trigger_savepoint(
        &self,
        request: Request<pb::TriggerSavepointRequest>,
    ) -> Result<Response<pb::SavepointResponse>, Status> {
        let r = request.into_inner();
        Ok(Response::new(self.jm()?.savepoint(&r.job_id, &r.target_dir, r.format, None).await?))
    }

    async fn stop_job(&self, request: Request<pb::StopJobRequest>) -> Result<Response<pb::SavepointResponse>, Status> {
        let r = request.into_inner();
        Ok(Response::new(self.jm()?.savepoint(&r.job_id, &r.target_dir, r.format, Some(r.drain)).await?))
    }

    async fn dispose_savepoint(
        &self,
        request: Request<pb::DisposeSavepointRequest>,
    ) -> Result<Response<pb::DisposeSavepointResponse>, Status> {
        let deleted_files = self.jm()?.dispose_savepoint(&request.into_inner().url).await?;
        Ok(Response::new(pb::DisposeSavepointResponse { deleted_files }))
    }

    async fn check_savepoint(
        &self,
        request: Request<pb::CheckSavepointRequest>,
    ) -> Result<Response<pb::CheckSavepointResponse>, Status> {
        Ok(Response::new(self.jm()?.check_savepoint(request.get_ref()).await?))
    }

    async fn inspect_savepoint(
        &self,
        request: Request<pb::InspectSavepointRequest>,
    ) -> Result<Response<pb::InspectSavepointResponse>, Status> {
        Ok(Response::new(self.jm()?.inspect_savepoint(&request.into_inner().url).await?))
    }
}

#[tonic::async_trait]
impl JobManagerInternal for JobManagerService {
    async fn register_task_manager(
        &self,
        request: Request<pb::RegisterTaskManagerRequest>,
    ) -> Result<Response<pb::RegisterTaskManagerResponse>, Status> {
        fault("rpc-register").await?;
        let resp =
            self.jm()?.register_task_manager(request.get_ref()).map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok(Response::new(resp))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        fault("rpc-heartbeat").await?;
        Ok(Response::new(self.jm()?.heartbeat(request.get_ref())))
    }

    async fn update_task_state(
        &self,
        request: Request<pb::UpdateTaskStateRequest>,
    ) -> Result<Response<pb::UpdateTaskStateResponse>, Status> {
        fault("rpc-task-state").await?;
        let req = request.into_inner();
        let task = TaskAddress::from_proto(req.task.as_ref()).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let state = pb::TaskState::try_from(req.state)
            .map_err(|_| Status::invalid_argument(format!("unknown task state {}", req.state)))?;
        let error = TaskError { text: req.error, caused_by_peer: req.caused_by_peer, fatal: req.fatal };
        self.jm()?.task_state(&req.tm_id, task, state, error);
        Ok(Response::new(pb::UpdateTaskStateResponse {}))
    }

    async fn acknowledge_checkpoint(
        &self,
        request: Request<pb::AcknowledgeCheckpointRequest>,
    ) -> Result<Response<pb::AcknowledgeCheckpointResponse>, Status> {
        fault("rpc-acknowledge").await?;
        let req = request.into_inner();
        let task = TaskAddress::from_proto(req.task.as_ref()).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let checkpoint_id = CheckpointId(req.checkpoint_id);
        let snapshot = req.snapshot.ok_or_else(|| "the acknowledgement carries no snapshot".to_string());
        match snapshot.and_then(|s| TaskSnapshot::try_from(s).map_err(|e| e.to_string())) {
            Ok(snapshot) => {
                self.jm()?.acknowledge(task, checkpoint_id, snapshot);
                Ok(Response::new(pb::AcknowledgeCheckpointResponse {}))
            }
            Err(e) => {
                // The checkpoint cannot complete without this task's state: fail it now rather than at expiry.
                let reason = format!("unreadable task snapshot: {e}");
                warn!(job_id = %task.job_id, checkpoint_id = checkpoint_id.0, tm_id = %req.tm_id, error = %e, "unreadable checkpoint acknowledgement");
                self.jm()?.decline(task, checkpoint_id, reason.clone());
                Err(Status::invalid_argument(reason))
            }
        }
    }

    async fn decline_checkpoint(
        &self,
        request: Request<pb::DeclineCheckpointRequest>,
    ) -> Result<Response<pb::DeclineCheckpointResponse>, Status> {
        fault("rpc-decline").await?;
        let req = request.into_inner();
        let task = TaskAddress::from_proto(req.task.as_ref()).map_err(|e| Status::invalid_argument(e.to_string()))?;
        self.jm()?.decline(task, CheckpointId(req.checkpoint_id), req.reason);
        Ok(Response::new(pb::DeclineCheckpointResponse {}))
    }
}
