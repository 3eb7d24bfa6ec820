//! Savepoint requests: queued until their turn, answered when their savepoint completes or fails.

use super::*;

impl JobActor {
    pub(super) async fn on_savepoint_request(&mut self, request: SavepointRequest) {
        let refuse = |request: SavepointRequest, why: String| {
            let _ = request.reply.send(Err(JobRequestError::NotRunning(why)));
        };
        if self.record.state.is_terminal() {
            let why = format!("job {} is {}: it can take no savepoint", self.record.id, self.record.state);
            return refuse(request, why);
        }
        if self.draining.is_some() || self.stopping_until_ms.is_some() {
            return refuse(request, format!("job {} is already stopping", self.record.id));
        }
        info!(job_id = %self.record.id, savepoint = %request.target.url, format = %request.target.format,
            stop = request.target.stop, drain = request.drain, "savepoint requested");
        if request.drain {
            self.draining = Some(request);
            self.end_input();
        } else {
            self.savepoint_queue.push_back(request);
        }
        self.coordinate(now_ms()).await;
    }

    /// Answers the client waiting for savepoint `id`, if any.
    pub(super) fn answer_savepoint(
        &mut self,
        id: CheckpointId,
        result: Result<pb::SavepointResponse, JobRequestError>,
    ) {
        let waiting = match self.savepoint_in_flight.take() {
            Some((sid, r)) if sid == id => Some(r),
            other => {
                self.savepoint_in_flight = other;
                None
            }
        };
        if let Some(r) = waiting {
            let _ = r.reply.send(result);
        }
    }
}
