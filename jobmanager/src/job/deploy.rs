//! The decisions of a deployment, apart from its I/O (the actor's `try_deploy` does what these say): what a
//! restore point means for the job's record, what a failed restore or a failed deployment leads to, and the
//! order the tasks are deployed in.

use crate::checkpoint::store::RestoreError;
use crate::job::record::InitialRestore;
use weir_common::deploy::descriptor::ExecutionGraph;
use weir_common::ids::{CheckpointId, VertexId};

/// What the job's record says about the checkpoint an attempt restores from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreNotes {
    /// Set when the restore skipped newer checkpoints that cannot be read: kept for the job's life (a later
    /// restore of the same checkpoint no longer skips anything), since the input after it was processed again.
    pub fallback: Option<String>,
    /// The restore the attempt starts from, as `weir job status` shows it; empty without one.
    pub restored_from: String,
    /// Retained checkpoints that can never be restored: the job stops retaining them and deletes their files.
    pub unreadable: Vec<CheckpointId>,
}

/// Notes a restore from `checkpoint` (having skipped `skipped`, newest first), of the job's own checkpoints
/// when `own_files`, else of the savepoint or retained checkpoint the job was submitted with (`initial`).
pub fn restore_notes(
    restore: Option<(CheckpointId, &[(CheckpointId, String)])>,
    own_files: bool,
    initial: Option<&InitialRestore>,
) -> RestoreNotes {
    let Some((id, skipped)) = restore else {
        return RestoreNotes { fallback: None, restored_from: String::new(), unreadable: Vec::new() };
    };
    let fallback = (!skipped.is_empty()).then(|| {
        let why: Vec<String> = skipped.iter().map(|(id, why)| format!("checkpoint {id}: {why}")).collect();
        format!("fell back to checkpoint {id} past newer ones that cannot be read ({})", why.join("; "))
    });
    let restored_from = if own_files {
        format!("checkpoint {id}")
    } else {
        format!(
            "savepoint {} (checkpoint {id}, {})",
            initial.map(|i| i.url.as_str()).unwrap_or_default(),
            initial.map(|i| i.mode.name()).unwrap_or_default()
        )
    };
    RestoreNotes { fallback, restored_from, unreadable: skipped.iter().map(|(id, _)| *id).collect() }
}

/// What a deployment does when the checkpoint to restore cannot be had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterRestoreError {
    /// The store could not be read: release the slots and try the whole deployment again shortly.
    RetrySoon,
    /// Nothing restorable is left: the job fails with this reason.
    Fail(String),
}

/// Decides on a failed restore: an unreachable store is retried, unreadable checkpoints fail the job.
pub fn after_restore_error(e: &RestoreError) -> AfterRestoreError {
    match e {
        RestoreError::Unavailable { .. } => AfterRestoreError::RetrySoon,
        RestoreError::NoneReadable(_) => AfterRestoreError::Fail(e.to_string()),
    }
}

/// What a deployment does when a task manager did not take a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterDeployFailure {
    /// The attempt never ran: the task manager was gone (now marked lost), so deploy again at once on the
    /// others, without spending a restart of the restart strategy.
    RedeployNow,
    /// A task manager refused the task: a failover, as for any task failure.
    Failover,
}

/// Decides on a failed deployment from whether the connection to a task manager was lost.
pub fn after_deploy_failure(connection_lost: bool) -> AfterDeployFailure {
    if connection_lost {
        AfterDeployFailure::RedeployNow
    } else {
        AfterDeployFailure::Failover
    }
}

/// The order vertices are deployed in: consumers before producers, so every producer finds its consumers'
/// data servers expecting it.
pub fn deploy_order(graph: &ExecutionGraph) -> Vec<VertexId> {
    graph.vertices.iter().rev().map(|v| v.id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_common::checkpoint::RestoreMode;
    use weir_common::service::store::StoreError;

    fn initial(mode: RestoreMode) -> InitialRestore {
        InitialRestore {
            url: "s3://b/sp-1".into(),
            root: "s3://b/sp-1".into(),
            checkpoint_id: CheckpointId(4),
            mode,
            active: true,
        }
    }

    #[test]
    fn no_restore_leaves_nothing_to_note() {
        let notes = restore_notes(None, false, Some(&initial(RestoreMode::NoClaim)));
        assert_eq!(notes, RestoreNotes { fallback: None, restored_from: String::new(), unreadable: vec![] });
    }

    #[test]
    fn a_checkpoint_of_the_job_is_named_by_its_id() {
        let notes = restore_notes(Some((CheckpointId(7), &[])), true, None);
        assert_eq!(notes.restored_from, "checkpoint 7");
        assert_eq!((notes.fallback, notes.unreadable), (None, vec![]));
    }

    #[test]
    fn a_savepoint_is_named_by_its_url_checkpoint_and_mode() {
        for (mode, text) in [(RestoreMode::NoClaim, "no-claim"), (RestoreMode::Claim, "claim")] {
            let notes = restore_notes(Some((CheckpointId(4), &[])), false, Some(&initial(mode)));
            assert_eq!(notes.restored_from, format!("savepoint s3://b/sp-1 (checkpoint 4, {text})"));
        }
    }

    #[test]
    fn skipped_checkpoints_are_a_fallback_and_are_no_longer_retained() {
        let skipped = [(CheckpointId(9), "missing _metadata".to_string()), (CheckpointId(8), "corrupt".to_string())];
        let notes = restore_notes(Some((CheckpointId(7), &skipped)), true, None);
        assert_eq!(
            notes.fallback.as_deref(),
            Some(
                "fell back to checkpoint 7 past newer ones that cannot be read (checkpoint 9: missing _metadata; \
                 checkpoint 8: corrupt)"
            )
        );
        assert_eq!(notes.unreadable, vec![CheckpointId(9), CheckpointId(8)]);
    }

    #[test]
    fn an_unreachable_store_is_retried_and_unreadable_checkpoints_fail_the_job() {
        let unavailable =
            RestoreError::Unavailable { checkpoint: CheckpointId(3), source: StoreError::NoDirectory("/gone".into()) };
        assert_eq!(after_restore_error(&unavailable), AfterRestoreError::RetrySoon);
        let none = RestoreError::NoneReadable(vec![(CheckpointId(3), "corrupt".into())]);
        assert_eq!(
            after_restore_error(&none),
            AfterRestoreError::Fail("no retained checkpoint can be restored: checkpoint 3: corrupt".into())
        );
    }

    #[test]
    fn a_lost_task_manager_redeploys_at_once_and_a_refusal_fails_over() {
        assert_eq!(after_deploy_failure(true), AfterDeployFailure::RedeployNow);
        assert_eq!(after_deploy_failure(false), AfterDeployFailure::Failover);
    }

    #[test]
    fn consumers_are_deployed_before_their_producers() {
        let job = crate::job::descriptors::tests::demo_job();
        let graph = ExecutionGraph::build(&job);
        let order = deploy_order(&graph);
        for v in &graph.vertices {
            let at = |id: VertexId| order.iter().position(|o| *o == id).expect("every vertex is deployed");
            for (out, _) in &v.outputs {
                assert!(at(*out) < at(v.id), "vertex {:?} before its consumer {:?}: {order:?}", v.id, out);
            }
        }
        assert_eq!(order.len(), graph.vertices.len());
    }
}
