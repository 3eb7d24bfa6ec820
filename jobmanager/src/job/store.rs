//! The job store: what the job manager persists about every job, read back when a job manager (restarted,
//! or a new HA leader) resumes the jobs.
//!
//! - Without HA, one JSON file per job under `<data_dir>/jobs/<job-id>.json`, replaced atomically (temporary
//!   file, fsync, rename) whenever something important changes ([`LocalJobStore`]).
//! - With etcd, one key per job under `/weir/<cluster-id>/jobs/` ([`EtcdJobStore`]): every write is a
//!   transaction conditioned on the writer still leading at its epoch and on the record's revision being the
//!   one it last wrote or read (compare-and-swap), so a deposed leader changes nothing, and the checkpoint id
//!   counter (`next_checkpoint_id`, persisted before a trigger uses it) is never handed out twice. A record
//!   holds the spec, the lifecycle state, the counter, the pointers to the retained checkpoints (their
//!   `_metadata` stays in the object store) and a bounded history; one that would exceed
//!   [`ETCD_RECORD_LIMIT`] is refused rather than sent (etcd refuses requests over 1.5 MiB).

use crate::error::JobStoreError;
use crate::job::record::{JobRecord, JOB_FILE_VERSION};
use std::io::Write;
use std::path::{Path, PathBuf};
use weir_common::ids::JobId;

/// Largest job record written to etcd (its request limit is 1.5 MiB; the rest is headroom).
pub const ETCD_RECORD_LIMIT: usize = 1 << 20;

/// Where job records live.
#[derive(Clone)]
pub enum JobStore {
    /// Files in the data directory.
    Local(LocalJobStore),
    /// Keys in etcd, written by the leader only.
    Etcd(Box<EtcdJobStore>),
}

/// Runs a local job store's file I/O on a blocking thread, off the runtime's workers.
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, JobStoreError> + Send + 'static,
) -> Result<T, JobStoreError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| JobStoreError::Etcd(format!("job store I/O panicked: {e}")))?
}

impl JobStore {
    /// Writes a job's record.
    pub async fn save(&self, record: &JobRecord) -> Result<(), JobStoreError> {
        match self {
            JobStore::Local(s) => {
                let (s, record) = (s.clone(), record.clone());
                off_runtime(move || s.save(&record)).await
            }
            JobStore::Etcd(s) => s.save(record).await,
        }
    }

    /// Deletes a job's record (absent is fine).
    pub async fn delete(&self, id: &JobId) -> Result<(), JobStoreError> {
        match self {
            JobStore::Local(s) => {
                let (s, id) = (s.clone(), id.clone());
                off_runtime(move || s.delete(&id)).await
            }
            JobStore::Etcd(s) => s.delete(id).await,
        }
    }

    /// Reads every record, oldest submission first; records that cannot be read are returned apart.
    pub async fn load_all(&self) -> Result<(Vec<JobRecord>, Vec<JobStoreError>), JobStoreError> {
        match self {
            JobStore::Local(s) => {
                let s = s.clone();
                off_runtime(move || s.load_all()).await
            }
            JobStore::Etcd(s) => s.load_all().await,
        }
    }
}

/// The job records of an HA cluster in etcd, as one leader term writes them.
#[derive(Clone)]
pub struct EtcdJobStore {
    term: crate::ha::etcd::Term,
    /// The revision of each job's key as this leader last wrote or read it (0: absent).
    revisions: std::sync::Arc<parking_lot::Mutex<std::collections::HashMap<JobId, i64>>>,
}

impl EtcdJobStore {
    /// The store of one leader term.
    pub fn new(term: crate::ha::etcd::Term) -> EtcdJobStore {
        EtcdJobStore { term, revisions: Default::default() }
    }

    fn key(&self, id: &JobId) -> String {
        self.term.etcd().key(&format!("jobs/{id}"))
    }

    /// Writes a record if this term still leads and nobody else wrote it since.
    pub async fn save(&self, record: &JobRecord) -> Result<(), JobStoreError> {
        use etcd_client::{Compare, CompareOp, Txn, TxnOp};
        weir_common::service::fault::hit("job-store-save").await.map_err(|f| JobStoreError::Etcd(f.to_string()))?;
        if self.term.is_lost() {
            return Err(JobStoreError::Fenced { epoch: self.term.epoch });
        }
        let bytes = serde_json::to_vec(record)
            .map_err(|e| JobStoreError::Corrupt { path: PathBuf::from(self.key(&record.id)), reason: e.to_string() })?;
        if bytes.len() > ETCD_RECORD_LIMIT {
            return Err(JobStoreError::TooLarge {
                job: record.id.clone(),
                bytes: bytes.len(),
                limit: ETCD_RECORD_LIMIT,
            });
        }
        let key = self.key(&record.id);
        let expected = self.revisions.lock().get(&record.id).copied().unwrap_or(0);
        let txn = Txn::new()
            .when([self.term.fence(), Compare::mod_revision(key.clone(), CompareOp::Equal, expected)])
            .and_then([TxnOp::put(key.clone(), bytes, None)]);
        let resp = self.fenced_txn("writing a job record", txn).await?;
        let revision = resp.header().map(|h| h.revision()).unwrap_or_default();
        self.revisions.lock().insert(record.id.clone(), revision);
        Ok(())
    }

    /// Deletes a record if this term still leads.
    pub async fn delete(&self, id: &JobId) -> Result<(), JobStoreError> {
        use etcd_client::{Txn, TxnOp};
        if self.term.is_lost() {
            return Err(JobStoreError::Fenced { epoch: self.term.epoch });
        }
        let txn = Txn::new().when([self.term.fence()]).and_then([TxnOp::delete(self.key(id), None)]);
        self.fenced_txn("deleting a job record", txn).await?;
        self.revisions.lock().remove(id);
        Ok(())
    }

    /// Sends a transaction whose compares include this term's fence: refused by etcd means fenced.
    async fn fenced_txn(&self, what: &str, txn: etcd_client::Txn) -> Result<etcd_client::TxnResponse, JobStoreError> {
        let resp = self
            .term
            .etcd()
            .call(what, |mut c| {
                let t = txn.clone();
                async move { c.txn(t).await }
            })
            .await
            .map_err(|e| JobStoreError::Etcd(e.to_string()))?;
        if !resp.succeeded() {
            return Err(JobStoreError::Fenced { epoch: self.term.epoch });
        }
        Ok(resp)
    }

    /// Reads every job record of the cluster.
    pub async fn load_all(&self) -> Result<(Vec<JobRecord>, Vec<JobStoreError>), JobStoreError> {
        let etcd = self.term.etcd();
        let prefix = etcd.key("jobs/");
        let resp = etcd
            .call("reading the job records", |mut c| {
                let p = prefix.clone();
                async move { c.get(p, Some(etcd_client::GetOptions::new().with_prefix())).await }
            })
            .await
            .map_err(|e| JobStoreError::Etcd(e.to_string()))?;
        let mut records = Vec::new();
        let mut errors = Vec::new();
        let mut revisions = self.revisions.lock();
        for kv in resp.kvs() {
            let path = PathBuf::from(String::from_utf8_lossy(kv.key()).to_string());
            match serde_json::from_slice::<JobRecord>(kv.value()) {
                Ok(r) if r.format_version == JOB_FILE_VERSION => {
                    revisions.insert(r.id.clone(), kv.mod_revision());
                    records.push(r);
                }
                Ok(r) => errors.push(JobStoreError::Corrupt {
                    path,
                    reason: format!("unsupported format version {}", r.format_version),
                }),
                Err(e) => errors.push(JobStoreError::Corrupt { path, reason: e.to_string() }),
            }
        }
        records.sort_by(|a, b| a.submit_time_ms.cmp(&b.submit_time_ms).then_with(|| a.id.cmp(&b.id)));
        Ok((records, errors))
    }
}

/// The directory of job files.
#[derive(Clone, Debug)]
pub struct LocalJobStore {
    dir: PathBuf,
}

impl LocalJobStore {
    /// Opens (creating it if needed) `<data_dir>/jobs`.
    pub fn open(data_dir: &Path) -> Result<LocalJobStore, JobStoreError> {
        let dir = data_dir.join("jobs");
        std::fs::create_dir_all(&dir).map_err(|source| JobStoreError::Io { path: dir.clone(), source })?;
        Ok(LocalJobStore { dir })
    }

    /// The file of a job.
    pub fn path_of(&self, id: &JobId) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Writes a job's file atomically: a reader sees the old or the new content, never a mix.
    pub fn save(&self, record: &JobRecord) -> Result<(), JobStoreError> {
        let path = self.path_of(&record.id);
        let tmp = self.dir.join(format!(".{}.json.tmp", record.id));
        let io = |source| JobStoreError::Io { path: path.clone(), source };
        weir_common::service::fault::hit_blocking("job-store-save").map_err(|f| io(std::io::Error::other(f)))?;
        let bytes = serde_json::to_vec_pretty(record)
            .map_err(|e| JobStoreError::Corrupt { path: path.clone(), reason: e.to_string() })?;
        {
            let mut f = std::fs::File::create(&tmp).map_err(io)?;
            f.write_all(&bytes).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, &path).map_err(io)?;
        // Make the rename itself durable; not every platform can open a directory, so this is best effort.
        if let Ok(d) = std::fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Deletes a job's file (absent is fine).
    pub fn delete(&self, id: &JobId) -> Result<(), JobStoreError> {
        let path = self.path_of(id);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(JobStoreError::Io { path, source }),
        }
    }

    /// Reads one job file.
    pub fn load(&self, path: &Path) -> Result<JobRecord, JobStoreError> {
        let bytes = std::fs::read(path).map_err(|source| JobStoreError::Io { path: path.to_path_buf(), source })?;
        let record: JobRecord = serde_json::from_slice(&bytes)
            .map_err(|e| JobStoreError::Corrupt { path: path.to_path_buf(), reason: e.to_string() })?;
        if record.format_version != JOB_FILE_VERSION {
            return Err(JobStoreError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("unsupported format version {}", record.format_version),
            });
        }
        let expected = self.path_of(&record.id);
        if expected.file_name() != path.file_name() {
            return Err(JobStoreError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("the file holds job {}", record.id),
            });
        }
        Ok(record)
    }

    /// Reads every job file, oldest submission first; files that cannot be read are returned apart.
    pub fn load_all(&self) -> Result<(Vec<JobRecord>, Vec<JobStoreError>), JobStoreError> {
        let entries =
            std::fs::read_dir(&self.dir).map_err(|source| JobStoreError::Io { path: self.dir.clone(), source })?;
        let mut records = Vec::new();
        let mut errors = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| JobStoreError::Io { path: self.dir.clone(), source })?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().to_string();
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            match self.load(&path) {
                Ok(r) => records.push(r),
                Err(e) => errors.push(e),
            }
        }
        records.sort_by(|a, b| a.submit_time_ms.cmp(&b.submit_time_ms).then_with(|| a.id.cmp(&b.id)));
        Ok((records, errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::coordinator::{CheckpointHistoryEntry, RetainedCheckpoint, HISTORY_LIMIT};
    use crate::job::descriptors::tests::demo_job;
    use crate::job::lifecycle::{JobState, RestartHistory};
    use weir_common::ids::{AttemptNumber, CheckpointId};

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalJobStore::open(dir.path()).unwrap();
        let mut r = JobRecord::new(JobId::random(), demo_job(), 42);
        r.state = JobState::Running;
        r.attempt = AttemptNumber(3);
        r.next_checkpoint_id = CheckpointId(8);
        r.retained.push(RetainedCheckpoint {
            id: CheckpointId(7),
            metadata_path: format!("{}/chk-7/_metadata", r.id),
            timestamp_ms: 5,
            full_size_bytes: 100,
            uploaded_bytes: 10,
            is_final: false,
        });
        for i in 0..(HISTORY_LIMIT as u64 + 5) {
            r.push_history(CheckpointHistoryEntry::in_progress(CheckpointId(i + 1), i, String::new(), false));
        }
        assert_eq!(r.history.len(), HISTORY_LIMIT);
        assert_eq!(r.history[0].id, CheckpointId(6), "oldest entries are dropped");
        store.save(&r).unwrap();
        r.restarts = 2;
        store.save(&r).unwrap();
        let mut other = JobRecord::new(JobId::random(), demo_job(), 1);
        other.state = JobState::Finished;
        store.save(&other).unwrap();
        std::fs::write(dir.path().join("jobs").join("broken.json"), b"{").unwrap();

        let (loaded, errors) = store.load_all().unwrap();
        assert_eq!(loaded, vec![other, r.clone()], "oldest submission first");
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().contains("broken.json"), "{}", errors[0]);
        let info = r.info();
        assert_eq!(info.state(), weir_proto::JobState::Running);
        assert_eq!(info.last_completed_checkpoint, Some(7));
        assert_eq!(info.attempt, 3);
        assert_eq!(info.restarts, 2);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("jobs"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn records_without_restart_history_load() {
        let mut r = JobRecord::new(JobId::random(), demo_job(), 42);
        r.restarts = 3;
        let mut json = serde_json::to_value(&r).unwrap();
        json.as_object_mut().unwrap().remove("restart_history");
        let loaded: JobRecord = serde_json::from_value(json).unwrap();
        assert_eq!(loaded.restart_history, RestartHistory::default());
        assert_eq!(loaded, r);
    }

    /// etcd, a leader term and its job store, and a second client that acts behind the leader's back.
    async fn leading_store(
        etcd: &crate::ha::etcd::test_etcd::TestEtcd,
    ) -> (crate::ha::etcd::Etcd, crate::ha::etcd::Term, EtcdJobStore, etcd_client::Client) {
        use std::time::Duration;
        let url = vec![etcd.url.clone()];
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let conn = loop {
            match crate::ha::etcd::Etcd::connect(&url, "fencing", Duration::from_secs(2), None).await {
                Ok(c) => break c,
                Err(e) if std::time::Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("etcd did not start: {e}"),
            }
        };
        let (leader, _) = tokio::sync::watch::channel(None);
        let (_stop, mut stop) = tokio::sync::watch::channel(false);
        // A long lease: its keep-alive runs every 15 s, so the term cannot learn of anything done behind its
        // back before the writes below; what refuses them is etcd's compare, not the term's own flag.
        let term = crate::ha::etcd::campaign(&conn, "http://leader-a", Duration::from_secs(60), &leader, &mut stop)
            .await
            .expect("elected");
        let other = etcd_client::Client::connect(url, None).await.expect("second client");
        (conn.clone(), term.clone(), EtcdJobStore::new(term), other)
    }

    async fn stored(client: &mut etcd_client::Client, key: &str) -> Vec<u8> {
        let r = client.get(key, None).await.expect("get");
        r.kvs().first().map(|kv| kv.value().to_vec()).unwrap_or_default()
    }

    /// The record with the checkpoint counter moved on, a new checkpoint pointer, and another state: each is a
    /// write a deposed leader must not make.
    fn changes(base: &JobRecord) -> Vec<(&'static str, JobRecord)> {
        let mut counter = base.clone();
        counter.next_checkpoint_id = CheckpointId(base.next_checkpoint_id.0 + 5);
        let mut pointer = base.clone();
        pointer.retained.push(RetainedCheckpoint {
            id: CheckpointId(9),
            metadata_path: format!("{}/chk-9/_metadata", base.id),
            timestamp_ms: 9,
            full_size_bytes: 9,
            uploaded_bytes: 9,
            is_final: false,
        });
        let mut state = base.clone();
        state.state = JobState::Canceled;
        vec![("the checkpoint counter", counter), ("a checkpoint pointer", pointer), ("the job state", state)]
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_refuses_the_writes_of_a_leader_whose_key_was_deleted_behind_its_back() {
        let etcd = crate::ha::etcd::test_etcd::TestEtcd::start();
        let (conn, term, store, mut other) = leading_store(&etcd).await;
        let record = JobRecord::new(JobId::random(), demo_job(), 1);
        store.save(&record).await.expect("the leader writes");
        let key = conn.key(&format!("jobs/{}", record.id));
        let before = stored(&mut other, &key).await;
        assert!(!before.is_empty());

        other.delete(conn.key("leader"), None).await.expect("delete the leader key");
        for (what, changed) in changes(&record) {
            assert!(!term.is_lost(), "the term must still believe it leads, so the write reaches etcd");
            let err = store.save(&changed).await.expect_err(what);
            assert!(matches!(err, JobStoreError::Fenced { .. }), "{what}: {err}");
            assert_eq!(stored(&mut other, &key).await, before, "{what}: the record is unchanged");
        }
        assert!(store.delete(&record.id).await.is_err(), "nor may it delete the record");
        assert_eq!(stored(&mut other, &key).await, before);

        // A new leader, elected meanwhile, writes the same record: the refusal was the fence, not etcd failing.
        let (leader, _) = tokio::sync::watch::channel(None);
        let (_stop, mut stop) = tokio::sync::watch::channel(false);
        let next =
            crate::ha::etcd::campaign(&conn, "http://leader-b", std::time::Duration::from_secs(60), &leader, &mut stop)
                .await
                .expect("elected");
        assert!(next.epoch > term.epoch);
        let next_store = EtcdJobStore::new(next);
        next_store.load_all().await.expect("the new leader reads the records first");
        let (_, counter) = changes(&record).remove(0);
        next_store.save(&counter).await.expect("the new leader writes");
        assert_ne!(stored(&mut other, &key).await, before);
        // And the old one is still refused, now by the new leader key's create revision.
        assert!(matches!(store.save(&record).await, Err(JobStoreError::Fenced { .. })));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_refuses_the_writes_of_a_leader_whose_lease_was_revoked_behind_its_back() {
        let etcd = crate::ha::etcd::test_etcd::TestEtcd::start();
        let (conn, term, store, mut other) = leading_store(&etcd).await;
        let record = JobRecord::new(JobId::random(), demo_job(), 1);
        store.save(&record).await.expect("the leader writes");
        let key = conn.key(&format!("jobs/{}", record.id));
        let before = stored(&mut other, &key).await;

        // Every lease there is, the leader's among them, revoked by another client: the leader key goes with it.
        let leases = other.leases().await.expect("list leases");
        assert!(!leases.leases().is_empty());
        for l in leases.leases() {
            other.lease_revoke(l.id()).await.expect("revoke");
        }
        assert!(stored(&mut other, &conn.key("leader")).await.is_empty(), "the leader key went with its lease");
        for (what, changed) in changes(&record) {
            assert!(!term.is_lost(), "the term must still believe it leads, so the write reaches etcd");
            let err = store.save(&changed).await.expect_err(what);
            assert!(matches!(err, JobStoreError::Fenced { .. }), "{what}: {err}");
            assert_eq!(stored(&mut other, &key).await, before, "{what}: the record is unchanged");
        }
    }
}
