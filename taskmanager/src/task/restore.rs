//! Restoring a subtask's state from what the job manager assigned it: download the keyed snapshots that
//! overlap its key-group range and open one backend clipped to that range (merging several when the
//! parallelism changed), and read the operator-state elements it was given out of the old blobs.
//!
//! Paths come only from the restore descriptor (built from `weir_common::checkpoint::paths` by the job
//! manager) and key-group arithmetic only from `weir_common::state::keygroup` (inside the state backend).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use weir_common::checkpoint::{FileHandle, KeyedStateHandle};
use weir_common::deploy::descriptor::{ElementRef, OperatorStatePart};
use weir_common::job::spec::StateBackend;
use weir_common::service::store::{Store, StoreError};
use weir_common::state::keygroup::KeyGroupRange;
use weir_state::{KeyedStateBackend, OperatorStateStore, RestoreSource, SnapshotFormat, StateError};

/// Why a restore failed.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// A state file could not be read.
    #[error("cannot read restored state: {0}")]
    Store(#[from] StoreError),
    /// The state could not be opened.
    #[error(transparent)]
    State(#[from] StateError),
    /// The descriptor or a file does not add up.
    #[error("corrupt restored state: {0}")]
    Corrupt(String),
    /// A restored state could not be migrated to its new serializer.
    #[error(
        "operator {uid:?}, state {state:?}: cannot restore it, written as {from} and now read as {to}: {why}. Check          the restore with `weir savepoint check`; restore it with the serializer that wrote it, make the change one          the format can evolve, or drop the state (a new uid, drop_state_on_change: true)"
    )]
    Migration {
        /// Operator uid.
        uid: String,
        /// State name.
        state: String,
        /// The schema it was written with.
        from: String,
        /// The schema it is read with now.
        to: String,
        /// Why.
        why: String,
    },
}

/// Reads the operator-state elements a subtask was assigned from the old blobs.
pub async fn operator_state(store: &Store, parts: &[OperatorStatePart]) -> Result<OperatorStateStore, RestoreError> {
    let mut out = OperatorStateStore::new();
    // An offsets file is read once however many parts of it this subtask got.
    let mut offsets_files: HashMap<String, Vec<u64>> = HashMap::new();
    for part in parts {
        let blob = store.get(&part.file.path).await?;
        if blob.len() as u64 != part.file.size {
            return Err(RestoreError::Corrupt(format!(
                "{} has {} bytes, the checkpoint says {}",
                part.file.path,
                blob.len(),
                part.file.size
            )));
        }
        for st in &part.states {
            let offsets: Vec<u64> = match &st.elements {
                ElementRef::Inline(o) => o.clone(),
                ElementRef::InFile { offsets, first, count } => {
                    if !offsets_files.contains_key(&offsets.path) {
                        let bytes = store.get(&offsets.path).await?;
                        offsets_files.insert(offsets.path.clone(), weir_state::operator::decode_offsets(&bytes)?);
                    }
                    let all = &offsets_files[&offsets.path];
                    let (first, count) = (*first as usize, *count as usize);
                    all.get(first..first.saturating_add(count))
                        .ok_or_else(|| {
                            RestoreError::Corrupt(format!(
                                "{} holds {} offsets, elements {first}..{} were assigned",
                                offsets.path,
                                all.len(),
                                first + count
                            ))
                        })?
                        .to_vec()
                }
            };
            out.restore_elements(&st.name, st.mode, &blob, &offsets)?;
        }
    }
    Ok(out)
}

/// A keyed backend restored from its assigned snapshots, with the files later incremental checkpoints may
/// reference again (only when it is one snapshot of this job's own, opened as it is).
pub struct RestoredKeyed {
    /// The backend.
    pub backend: Box<dyn KeyedStateBackend>,
    /// Shareable files of the restored snapshot, by local name.
    pub reusable: Option<HashMap<String, FileHandle>>,
}

/// What a keyed restore needs besides the handles.
pub struct KeyedTarget<'a> {
    /// The job's backend.
    pub kind: StateBackend,
    /// The subtask's key groups.
    pub range: KeyGroupRange,
    /// Number of key groups.
    pub max_parallelism: u32,
    /// Where the backend lives.
    pub state_dir: &'a Path,
    /// Tuning of RocksDB.
    pub rocks: &'a weir_state::rocks::RocksOptions,
    /// The snapshots are this job's own checkpoint's.
    pub own_files: bool,
}

/// Downloads every assigned keyed snapshot into a directory of its own under `download_dir`.
pub async fn download_keyed(
    store: &Store,
    handles: &[KeyedStateHandle],
    download_dir: &Path,
) -> Result<Vec<(PathBuf, KeyedStateHandle)>, RestoreError> {
    let mut out = Vec::with_capacity(handles.len());
    for (i, h) in handles.iter().enumerate() {
        let dir = download_dir.join(format!("snapshot-{i}"));
        weir_state::snapshot::download_keyed(store, h, &dir).await?;
        out.push((dir, h.clone()));
    }
    Ok(out)
}

/// Opens the backend from downloaded snapshots, clipped to the target's range (blocking: RocksDB work).
pub fn open_keyed(
    target: &KeyedTarget<'_>,
    downloaded: Vec<(PathBuf, KeyedStateHandle)>,
) -> Result<RestoredKeyed, RestoreError> {
    // One snapshot of exactly this range: opened as it is (and, if it is this job's, its files stay reusable).
    let reusable = match downloaded.as_slice() {
        [(_, h)] if h.key_group_range == target.range && target.own_files => {
            Some(weir_state::snapshot::shareable_files(h))
        }
        _ => None,
    };
    let mut sources = Vec::with_capacity(downloaded.len());
    for (dir, h) in downloaded {
        let format = SnapshotFormat::of_handle(h.backend)?;
        sources.push(RestoreSource { dir, format, key_group_range: h.key_group_range });
    }
    let started = std::time::Instant::now();
    let (backend, report) = weir_state::rescale::open_keyed_backend_reporting(
        target.kind,
        target.state_dir,
        target.max_parallelism,
        target.range,
        sources,
        target.rocks,
    )?;
    tracing::info!(
        uid = uid_of_state_dir(target.state_dir),
        backend = backend.kind(),
        range = ?target.range,
        restore_path = report.path.name(),
        sources = report.sources,
        imported_files = report.imported_files,
        copied_states = report.copied_states,
        ms = started.elapsed().as_millis() as u64,
        "restored keyed state"
    );
    Ok(RestoredKeyed { backend, reusable })
}

/// The operator uid of a task's keyed state directory (`state-<uid>`, as the task lays it out), or the
/// directory's name if it is not of that form.
fn uid_of_state_dir(dir: &Path) -> &str {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    name.strip_prefix("state-").unwrap_or(name)
}

/// Migrates, before the operator opens, every restored keyed state whose serializer changed in a way that needs
/// it: `written` are the serializers the savepoint recorded, `declared` the kind's now. A state the new version
/// cannot read fails the restore with the operator, the state, both schemas and what to do (the job manager's
/// pre-flight check refuses such a restore before deploying; this catches a binary swapped behind its back).
pub fn migrate_keyed(
    uid: &str,
    backend: &mut dyn KeyedStateBackend,
    written: &[weir_common::state::serializer::StateSerializers],
    declared: Option<&weir_common::job::kind::KindSignature>,
) -> Result<u64, RestoreError> {
    use weir_state::Migrator;
    let Some(declared) = declared else { return Ok(0) };
    let present: Vec<String> = backend.state_summaries()?.into_iter().map(|s| s.name).collect();
    let mut migrated = 0;
    for new in &declared.states {
        let Some(old) = written.iter().find(|o| o.state == new.state) else { continue };
        if !present.contains(&new.state) {
            continue;
        }
        let fail = |why: String| RestoreError::Migration {
            uid: uid.to_string(),
            state: new.state.clone(),
            from: old.value.describe(),
            to: new.value.describe(),
            why,
        };
        let migrator = match Migrator::between(&old.value, &new.value) {
            Ok(None) => continue,
            Ok(Some(m)) => m,
            Err(why) => return Err(fail(why.to_string())),
        };
        tracing::info!(uid, state = %new.state, migration = %migrator.description, "migrating state before the operator starts");
        let mut rewrite = |bytes: &[u8], out: &mut Vec<u8>| {
            migrator.migrate(bytes, out).map_err(|e| StateError::Corrupt(e.to_string()))
        };
        migrated += backend.migrate_state(&new.state, &mut rewrite).map_err(|e| fail(e.to_string()))?;
    }
    Ok(migrated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_common::job::kind::KindSignature;
    use weir_common::state::serializer::{SerializerSnapshot, StateSerializers};
    use weir_state::{open_keyed_backend, ValueState};

    const RANGE: KeyGroupRange = KeyGroupRange { start: 0, end: 127 };

    #[test]
    fn the_restore_log_names_the_operator_of_its_state_directory() {
        assert_eq!(uid_of_state_dir(Path::new("/d/tasks/j-a1-v2-s0/state-win0")), "win0");
        assert_eq!(uid_of_state_dir(Path::new("/d/other")), "other");
        assert_eq!(uid_of_state_dir(Path::new("/")), "");
    }

    fn avro(json: &str) -> SerializerSnapshot {
        weir_state::typed::evolution::avro_snapshot(&apache_avro::Schema::parse_str(json).unwrap())
    }

    fn declared(value: SerializerSnapshot) -> KindSignature {
        let states =
            vec![StateSerializers { state: "s".into(), kind: "value".into(), value, user_key: None, namespace: None }];
        KindSignature { fingerprint: String::new(), text: String::new(), key: None, states }
    }

    /// A restored state the new serializer cannot read fails the restore naming the operator, the state, both
    /// schemas and what to do; one it can read after a migration is rewritten; one it reads as is is untouched.
    #[test]
    fn restored_states_are_migrated_or_refused_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let rocks = Default::default();
        let mut b = open_keyed_backend(StateBackend::Heap, &tmp.path().join("a"), 128, RANGE, None, &rocks).unwrap();
        let old = r#"{"type":"record","name":"P","fields":[{"name":"n","type":"long"}]}"#;
        let new = r#"{"type":"record","name":"P","fields":[{"name":"n","type":"long"},{"name":"w","type":"long","default":1}]}"#;
        let mut s = ValueState::<Vec<u8>>::register(b.as_mut(), "s").unwrap();
        b.set_current_key(b"k");
        s.update(b.as_mut(), &vec![6]).unwrap(); // the long 3, zigzag-encoded
        let mut snap = b.snapshot_sync(&tmp.path().join("snap")).unwrap();
        snap.ready_blocking().unwrap();
        let written = declared(avro(old)).states;
        let restore = |dir: &str| {
            open_keyed_backend(StateBackend::Heap, &tmp.path().join(dir), 128, RANGE, Some(&snap.dir), &rocks).unwrap()
        };

        let mut same = restore("same");
        assert_eq!(migrate_keyed("op", same.as_mut(), &written, Some(&declared(avro(old)))).unwrap(), 0);

        let mut migrated = restore("migrated");
        assert_eq!(migrate_keyed("op", migrated.as_mut(), &written, Some(&declared(avro(new)))).unwrap(), 1);
        let s = ValueState::<Vec<u8>>::register(migrated.as_mut(), "s").unwrap();
        migrated.set_current_key(b"k");
        assert_eq!(s.value(migrated.as_mut()).unwrap(), Some(vec![6, 2]), "the default weight 1 appended");

        let mut refused = restore("refused");
        let other = SerializerSnapshot::bincode("P", "struct P{n:i64}");
        let e = migrate_keyed("op", refused.as_mut(), &written, Some(&declared(other))).unwrap_err().to_string();
        for part in ["operator \"op\"", "state \"s\"", "written as avro P", "now read as bincode P", "savepoint check"]
        {
            assert!(e.contains(part), "{part:?} missing in: {e}");
        }
    }
}
