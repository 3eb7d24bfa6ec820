//! Moving snapshots between local disk and the object store.
//!
//! Incremental snapshots: RocksDB's SST files are immutable, so an SST that the last *completed* checkpoint
//! already holds is referenced again instead of uploaded ([`upload_keyed_incremental`]). New SSTs go to the
//! job's shared directory, under a folder per backend instance (two attempts restored from the same
//! checkpoint may create different files with the same number) and checkpoint (a file of a failed checkpoint
//! is uploaded again by the next, and the failed one's cleanup must not delete it); a file keeps its local
//! name as the last path component. MANIFEST, CURRENT and OPTIONS go to the
//! checkpoint's own directory every time. The job manager deletes a shared file once no retained checkpoint
//! references it.

use crate::error::StateError;
use crate::keyed::LocalSnapshot;
use std::collections::HashMap;
use std::path::Path;
use weir_common::checkpoint::{check_relative_path, FileHandle, KeyedStateHandle};
use weir_common::service::store::Store;

/// Whether a snapshot file is immutable and may be shared between checkpoints (a RocksDB SST file).
pub fn is_shareable(name: &str) -> bool {
    name.ends_with(".sst")
}

/// The local name of a snapshot file: the last component of its remote path.
pub fn local_name(f: &FileHandle) -> &str {
    f.path.rsplit('/').next().unwrap_or(&f.path)
}

/// The shareable files of a handle, by local name: what a later snapshot may reuse once this one completed.
pub fn shareable_files(handle: &KeyedStateHandle) -> HashMap<String, FileHandle> {
    handle
        .files
        .iter()
        .filter(|f| is_shareable(local_name(f)))
        .map(|f| (local_name(f).to_string(), f.clone()))
        .collect()
}

/// Uploads every file of a local snapshot under `remote_dir`; returns the handle and the bytes uploaded.
pub async fn upload_keyed(
    store: &Store,
    local: &mut LocalSnapshot,
    remote_dir: &str,
) -> Result<(KeyedStateHandle, u64), StateError> {
    upload_keyed_incremental(store, local, remote_dir, None, &HashMap::new()).await
}

/// Uploads a local snapshot, reusing what `confirmed` (the shareable files of the last completed checkpoint,
/// by local name) already holds; new shareable files go under `shared_dir` (if given), the rest under
/// `exclusive_dir`. Waits for files still being written first. Returns the handle and the bytes uploaded now.
pub async fn upload_keyed_incremental(
    store: &Store,
    local: &mut LocalSnapshot,
    exclusive_dir: &str,
    shared_dir: Option<&str>,
    confirmed: &HashMap<String, FileHandle>,
) -> Result<(KeyedStateHandle, u64), StateError> {
    local.ready().await?;
    let mut files = Vec::with_capacity(local.files.len());
    let mut uploaded = 0;
    for (name, size) in &local.files {
        let shared = shared_dir.filter(|_| is_shareable(name));
        if let (Some(_), Some(prev)) = (shared, confirmed.get(name)) {
            if prev.size == *size {
                files.push(prev.clone());
                continue;
            }
        }
        let rel = format!("{}/{name}", shared.unwrap_or(exclusive_dir));
        let size = store.put_file(&rel, &local.dir.join(name)).await?;
        uploaded += size;
        files.push(FileHandle { path: rel, size });
    }
    Ok((
        KeyedStateHandle {
            backend: crate::snapshot::format::SnapshotFormat::from_name(local.backend)?.into(),
            key_group_range: local.key_group_range,
            files,
            states: Vec::new(),
        },
        uploaded,
    ))
}

/// Downloads the files of a keyed-state handle into `local_dir` (created; must be empty or absent).
pub async fn download_keyed(store: &Store, handle: &KeyedStateHandle, local_dir: &Path) -> Result<(), StateError> {
    tokio::fs::create_dir_all(local_dir)
        .await
        .map_err(|e| StateError::io(format!("create {}", local_dir.display()), e))?;
    for f in &handle.files {
        check_relative_path(&f.path).map_err(|e| StateError::Corrupt(e.to_string()))?;
        let name = f.path.rsplit('/').next().unwrap_or(&f.path);
        let size = store.get_file(&f.path, &local_dir.join(name)).await?;
        if size != f.size {
            return Err(StateError::Corrupt(format!("{} has {size} bytes, the checkpoint says {}", f.path, f.size)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restore::rescale::open_keyed_backend;
    use crate::typed::handles::ValueState;
    use weir_common::job::spec::StateBackend;
    use weir_common::service::store::StoreOptions;
    use weir_common::state::keygroup::KeyGroupRange;

    #[tokio::test]
    async fn upload_and_restore_both_backends() {
        for kind in [StateBackend::Rocksdb, StateBackend::Heap] {
            let tmp = tempfile::tempdir().unwrap();
            let store = Store::open("memory:///", &StoreOptions::default()).unwrap();
            let range = KeyGroupRange { start: 0, end: 63 };
            let mut b = open_keyed_backend(kind, &tmp.path().join("w"), 128, range, None, &Default::default()).unwrap();
            let mut st = ValueState::<u64>::register(b.as_mut(), "n").unwrap();
            b.set_current_key(b"k");
            st.update(b.as_mut(), &5).unwrap();
            let mut snap = b.snapshot_sync(&tmp.path().join("snap")).unwrap();
            let (handle, bytes) = upload_keyed(&store, &mut snap, "job/chk-1/op/0").await.unwrap();
            assert!(bytes > 0);
            download_keyed(&store, &handle, &tmp.path().join("dl")).await.unwrap();
            let mut r = open_keyed_backend(
                kind,
                &tmp.path().join("w2"),
                128,
                range,
                Some(&tmp.path().join("dl")),
                &Default::default(),
            )
            .unwrap();
            let st2 = ValueState::<u64>::register(r.as_mut(), "n").unwrap();
            r.set_current_key(b"k");
            assert_eq!(st2.value(r.as_mut()).unwrap(), Some(5), "{kind:?}");
        }
    }

    #[tokio::test]
    async fn incremental_snapshots_upload_only_new_files_and_survive_subsumption() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open("memory:///", &StoreOptions::default()).unwrap();
        let range = KeyGroupRange { start: 0, end: 127 };
        // Room for every row in the cache and in one memtable: each snapshot then adds exactly one L0 file and
        // no background compaction (which would rewrite files and race with the checkpoints) is triggered.
        let rocks =
            crate::rocks::RocksOptions { cache_bytes: 256 << 20, write_buffer_bytes: 64 << 20, ..Default::default() };
        let mut b = open_keyed_backend(StateBackend::Rocksdb, &tmp.path().join("w"), 128, range, None, &rocks).unwrap();
        let mut st = ValueState::<u64>::register(b.as_mut(), "n").unwrap();
        let keys = 1_000_000u64;
        for k in 0..keys {
            b.set_current_key(&k.to_be_bytes());
            st.update(b.as_mut(), &k).unwrap();
        }
        let mut s1 = b.snapshot_sync(&tmp.path().join("s1")).unwrap();
        let (h1, up1) =
            upload_keyed_incremental(&store, &mut s1, "j/chk-1/op/0/keyed", Some("j/shared/op/0/i1"), &HashMap::new())
                .await
                .unwrap();
        // Checkpoint 1 completed: its SST files may be reused. Then 1% of the keys change.
        let confirmed = shareable_files(&h1);
        assert!(!confirmed.is_empty());
        for k in (0..keys).step_by(100) {
            b.set_current_key(&k.to_be_bytes());
            st.update(b.as_mut(), &(k + 1)).unwrap();
        }
        let mut s2 = b.snapshot_sync(&tmp.path().join("s2")).unwrap();
        let (h2, up2) =
            upload_keyed_incremental(&store, &mut s2, "j/chk-2/op/0/keyed", Some("j/shared/op/0/i1"), &confirmed)
                .await
                .unwrap();
        let full2: u64 = h2.files.iter().map(|f| f.size).sum();
        assert!(up2 * 5 < full2, "checkpoint 2 uploaded {up2} of {full2} bytes (checkpoint 1: {up1})");
        assert!(h2.files.iter().any(|f| confirmed.values().any(|c| c == f)), "some SST files are reused");

        // Checkpoint 1 is subsumed: its exclusive files and the shared files only it used are deleted.
        store.delete_dir("j/chk-1").await.unwrap();
        for f in &h1.files {
            if f.path.starts_with("j/shared/") && !h2.files.contains(f) {
                store.delete(&f.path).await.unwrap();
            }
        }
        drop(b);
        download_keyed(&store, &h2, &tmp.path().join("dl")).await.unwrap();
        let mut r = open_keyed_backend(
            StateBackend::Rocksdb,
            &tmp.path().join("w2"),
            128,
            range,
            Some(&tmp.path().join("dl")),
            &rocks,
        )
        .unwrap();
        let st2 = ValueState::<u64>::register(r.as_mut(), "n").unwrap();
        let mut seen = 0u64;
        st2.for_each(r.as_mut(), |k, v| {
            let k = u64::from_be_bytes(k.try_into().unwrap());
            assert_eq!(v, if k % 100 == 0 { k + 1 } else { k });
            seen += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, keys);
    }
}
