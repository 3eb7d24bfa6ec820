//! High availability through etcd: the primitives (connection, election, terms and their fencing) in
//! [`etcd`], below the job store that writes through them. The loop that runs a job manager as leader or
//! standby is `crate::leader`, above the job manager it runs.
//!
//! Keys, all under `/weir/<cluster-id>/`: `leader` (the leader's client address on its lease; its create
//! revision is the leader's **epoch**), `cluster` (the checkpoint store the cluster was created with) and
//! `jobs/<job-id>` (one job record, see `job::store`).

pub mod etcd;

pub use etcd::{campaign, Etcd, HaError, Term, CLUSTER_MARKER};
