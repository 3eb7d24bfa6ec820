//! Moving snapshots between local disk and the object store.

use crate::keyed::LocalSnapshot;
use crate::StateError;
use std::path::Path;
use weir_common::checkpoint::{check_relative_path, FileHandle, KeyedStateHandle};
use weir_common::store::Store;

/// Uploads every file of a local snapshot under `remote_dir`; returns the handle and the bytes uploaded.
pub async fn upload_keyed(
    store: &Store,
    local: &LocalSnapshot,
    remote_dir: &str,
) -> Result<(KeyedStateHandle, u64), StateError> {
    let mut files = Vec::with_capacity(local.files.len());
    let mut uploaded = 0;
    for (name, _) in &local.files {
        let rel = format!("{remote_dir}/{name}");
        let size = store.put_file(&rel, &local.dir.join(name)).await?;
        uploaded += size;
        files.push(FileHandle { path: rel, size });
    }
    Ok((
        KeyedStateHandle { backend: local.backend.to_string(), key_group_range: local.key_group_range, files },
        uploaded,
    ))
}

/// Downloads the files of a keyed-state handle into `local_dir` (created; must be empty or absent).
pub async fn download_keyed(store: &Store, handle: &KeyedStateHandle, local_dir: &Path) -> Result<(), StateError> {
    tokio::fs::create_dir_all(local_dir)
        .await
        .map_err(|e| StateError::io(format!("create {}", local_dir.display()), e))?;
    for f in &handle.files {
        check_relative_path(&f.path).map_err(StateError::Corrupt)?;
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
    use crate::keyed::{open_keyed_backend, ValueState};
    use weir_common::keygroup::KeyGroupRange;
    use weir_common::spec::StateBackendKind;
    use weir_common::store::StoreOptions;

    #[tokio::test]
    async fn upload_and_restore_both_backends() {
        for kind in [StateBackendKind::Rocksdb, StateBackendKind::Heap] {
            let tmp = tempfile::tempdir().unwrap();
            let store = Store::open("memory:///", &StoreOptions::default()).unwrap();
            let range = KeyGroupRange { start: 0, end: 63 };
            let mut b = open_keyed_backend(kind, &tmp.path().join("w"), 128, range, None, &Default::default()).unwrap();
            let mut st = ValueState::<u64>::register(b.as_mut(), "n").unwrap();
            b.set_current_key(b"k");
            st.update(b.as_mut(), &5).unwrap();
            let snap = b.snapshot_sync(&tmp.path().join("snap")).unwrap();
            let (handle, bytes) = upload_keyed(&store, &snap, "job/chk-1/op/0").await.unwrap();
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
}
