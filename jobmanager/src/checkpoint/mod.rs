//! Checkpoints as the job manager sees them: the pure coordinator's decisions ([`coordinator`]: when to
//! trigger, when complete, what is stale, subsumed, over a limit), completing a checkpoint or a savepoint
//! ([`complete`]: its figures and its `_metadata`, one path for both), the object-store work they lead to
//! ([`store`]: reading the restore point, deleting and sweeping files), and savepoints from outside a running
//! job ([`savepoint`]: reading, checking, summarising, disposing, ownership), and the serializers a check asks a
//! task manager to judge ([`serializers`]).

pub mod complete;
pub mod coordinator;
pub mod savepoint;
pub mod serializers;
pub mod store;
