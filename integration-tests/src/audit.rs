//! Audits what a job left in a checkpoint store (local or S3): shared files no `_metadata` references, and
//! referenced files that are gone.

use anyhow::Result;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;
use weir_common::checkpoint::CheckpointMetadata;
use weir_common::service::store::{Store, StoreOptions};

/// The shared files of a job's checkpoints under the local store `root`.
#[derive(Debug, Default)]
pub struct SharedFileAudit {
    /// Files under `<job>/shared/` that no `_metadata` in the store references.
    pub orphans: Vec<String>,
    /// Files some `_metadata` references that are not in the store.
    pub missing: Vec<String>,
}

/// Audits the shared files of job `job` in the local checkpoint store at `root`.
pub fn audit_shared_files(root: &Path, job: &str) -> Result<SharedFileAudit> {
    let store = Store::open(&format!("file://{}", root.display()), &StoreOptions::default())?;
    audit_shared_files_in(&store, job)
}

/// Audits the shared files of job `job` in any checkpoint store.
pub fn audit_shared_files_in(store: &Store, job: &str) -> Result<SharedFileAudit> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let listing = rt.block_on(store.list(job))?;
    let mut referenced = BTreeSet::new();
    for p in listing.iter().filter(|p| p.ends_with("/_metadata")) {
        let meta = CheckpointMetadata::from_bytes(&rt.block_on(store.get(p))?).map_err(anyhow::Error::msg)?;
        for op in meta.operators.values() {
            for st in &op.subtasks {
                referenced.extend(st.keyed.iter().flat_map(|k| k.files.iter()).map(|f| f.path.clone()));
            }
        }
    }
    let shared_prefix = format!("{job}/shared/");
    Ok(SharedFileAudit {
        orphans: listing
            .iter()
            .filter(|p| p.starts_with(&shared_prefix) && !referenced.contains(*p))
            .cloned()
            .collect(),
        missing: referenced.iter().filter(|p| !listing.contains(p)).cloned().collect(),
    })
}

/// Waits (up to `timeout`) until no shared file of `job` is orphaned — the job manager sweeps them in the
/// background when a job ends — and fails naming what is left, or what a sweep deleted that is still used.
pub fn wait_for_no_orphaned_shared_files(root: &Path, job: &str, timeout: Duration) -> Result<()> {
    let store = Store::open(&format!("file://{}", root.display()), &StoreOptions::default())?;
    wait_for_no_orphaned_shared_files_in(&store, job, timeout)
}

/// [`wait_for_no_orphaned_shared_files`] for any checkpoint store.
pub fn wait_for_no_orphaned_shared_files_in(store: &Store, job: &str, timeout: Duration) -> Result<()> {
    // A sweep deletes unreferenced shared files before the leftover checkpoint directories that name them, so
    // a file can look "missing" for a moment: wait for both lists to be empty, and name what is left.
    crate::cluster::wait_until("for the shared files to be swept", timeout, || {
        let audit = audit_shared_files_in(store, job)?;
        if audit.orphans.is_empty() && audit.missing.is_empty() {
            Ok(Some(()))
        } else {
            Err(anyhow::anyhow!(
                "unreferenced shared files left: {:?}; files a `_metadata` in the store references that are gone: {:?}",
                audit.orphans,
                audit.missing
            ))
        }
    })
}
