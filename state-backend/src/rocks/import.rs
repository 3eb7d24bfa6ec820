//! Moving a column family's SST files from several RocksDB databases into one without reading their rows:
//! RocksDB's column-family import (`CreateColumnFamilyWithImport`), which a rescaled restore uses to merge whole
//! snapshots (see `restore/rescale.rs`).
//!
//! The `rocksdb` crate wraps neither the import nor the file metadata it needs (sequence numbers), so this
//! module calls RocksDB's C API directly — the only `unsafe` code of the backend. One import takes the files of
//! every source database at once: RocksDB keeps each file's level and sequence numbers, so the newest version
//! of a row stays the newest, including rows of files a database *ingested* (their keys carry sequence number
//! 0; the database's manifest holds the real one, which we pass along).
//!
//! The C API cannot pass a file's internal-key bounds, so RocksDB recomputes them from the file's content. For
//! point keys that is exact; a range tombstone, though, may have been stored wider than the file it sits in,
//! so files of a column family holding range deletions must not be imported ([`range_deletions`] tells).

use crate::error::StateError;
use librocksdb_sys as ffi;
use rocksdb::{AsColumnFamilyRef, AsRawPtr, Options, DB};
use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};

/// One live SST file of a database, with what an import needs to place it.
#[derive(Clone, Debug)]
pub(crate) struct SstFile {
    /// The column family it belongs to.
    pub(crate) column_family: String,
    /// Where it is.
    pub(crate) path: PathBuf,
    /// Its level in the LSM tree.
    pub(crate) level: i32,
    /// Bytes.
    pub(crate) size: usize,
    /// Its smallest and largest user keys.
    pub(crate) smallest_key: Vec<u8>,
    pub(crate) largest_key: Vec<u8>,
    /// Its sequence numbers (both the global one for an ingested file).
    pub(crate) smallest_seqno: u64,
    pub(crate) largest_seqno: u64,
    /// Entries and deletions (as RocksDB counts them).
    pub(crate) entries: u64,
    pub(crate) deletions: u64,
}

/// Turns an error string RocksDB allocated into a [`StateError`] (freeing it).
unsafe fn take_error(err: *mut c_char, what: &str) -> Result<(), StateError> {
    if err.is_null() {
        return Ok(());
    }
    let msg = CStr::from_ptr(err).to_string_lossy().into_owned();
    ffi::rocksdb_free(err.cast());
    Err(StateError::Restore(format!("{what}: {msg}")))
}

unsafe fn bytes(ptr: *const c_char, len: usize) -> Vec<u8> {
    if ptr.is_null() {
        Vec::new()
    } else {
        std::slice::from_raw_parts(ptr.cast::<u8>(), len).to_vec()
    }
}

fn c_string(s: &str) -> Result<CString, StateError> {
    CString::new(s).map_err(|_| StateError::Restore(format!("{s:?} holds a NUL byte")))
}

/// Stops `db` from deleting files it no longer needs, then lists its live SST files: they stay on disk, as
/// listed, until the database closes (a compaction may start as soon as a database opens).
pub(crate) fn freeze_live_files(db: &DB) -> Result<Vec<SstFile>, StateError> {
    // SAFETY: `db` outlives the call.
    unsafe {
        let mut err = std::ptr::null_mut();
        ffi::rocksdb_disable_file_deletions(db.as_raw_ptr(), &mut err);
        take_error(err, "stop file deletions")?;
    }
    live_files(db)
}

/// The live SST files of `db`.
pub(crate) fn live_files(db: &DB) -> Result<Vec<SstFile>, StateError> {
    // SAFETY: `db` outlives every call; the list RocksDB returns is read, then destroyed once.
    unsafe {
        let raw = db.as_raw_ptr();
        let files = ffi::rocksdb_livefiles(raw);
        if files.is_null() {
            return Err(StateError::Restore("RocksDB listed no live files".into()));
        }
        let mut out = Vec::new();
        for i in 0..ffi::rocksdb_livefiles_count(files) {
            let text = |p: *const c_char| CStr::from_ptr(p).to_string_lossy().into_owned();
            let name = text(ffi::rocksdb_livefiles_name(files, i));
            let dir = text(ffi::rocksdb_livefiles_directory(files, i));
            let (mut small_len, mut large_len) = (0usize, 0usize);
            let small = ffi::rocksdb_livefiles_smallestkey(files, i, &mut small_len);
            let large = ffi::rocksdb_livefiles_largestkey(files, i, &mut large_len);
            out.push(SstFile {
                column_family: text(ffi::rocksdb_livefiles_column_family_name(files, i)),
                path: Path::new(&dir).join(name.trim_start_matches('/')),
                level: ffi::rocksdb_livefiles_level(files, i),
                size: ffi::rocksdb_livefiles_size(files, i),
                smallest_key: bytes(small, small_len),
                largest_key: bytes(large, large_len),
                smallest_seqno: ffi::rocksdb_livefiles_smallest_seqno(files, i),
                largest_seqno: ffi::rocksdb_livefiles_largest_seqno(files, i),
                entries: ffi::rocksdb_livefiles_entries(files, i),
                deletions: ffi::rocksdb_livefiles_deletions(files, i),
            });
        }
        ffi::rocksdb_livefiles_destroy(files);
        Ok(out)
    }
}

/// How many range deletions the SST files of a column family hold (from its aggregated table properties).
pub(crate) fn range_deletions(db: &DB, cf: &impl AsColumnFamilyRef) -> Result<u64, StateError> {
    let props = db.property_value_cf(cf, "rocksdb.aggregated-table-properties")?.unwrap_or_default();
    let Some(rest) = props.split("# range deletions=").nth(1) else {
        // No SST file at all.
        return Ok(0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().map_err(|_| StateError::Restore(format!("unreadable table properties {props:?}")))
}

/// Creates column family `name` (with `opts`) in `db` holding `files`, which are moved into the database
/// (hard-linked, then unlinked). Their key ranges must not overlap across the databases they come from.
pub(crate) fn create_column_family_with_import(
    db: &DB,
    name: &str,
    opts: &Options,
    files: &[SstFile],
) -> Result<(), StateError> {
    let c_name = c_string(name)?;
    let strings = files
        .iter()
        .map(|f| {
            let dir = f.path.parent().map(|d| d.display().to_string()).unwrap_or_default();
            let file = f.path.file_name().map(|n| format!("/{}", n.to_string_lossy())).unwrap_or_default();
            Ok((c_string(&f.column_family)?, c_string(&dir)?, c_string(&file)?))
        })
        .collect::<Result<Vec<_>, StateError>>()?;
    // SAFETY: every pointer handed to RocksDB is alive for the call; the list is moved into the metadata
    // (`set_files` takes it), and the metadata, the options and the handle are destroyed once.
    unsafe {
        let list = ffi::rocksdb_livefiles_create();
        for (f, (cf, dir, file)) in files.iter().zip(&strings) {
            let lf = ffi::rocksdb_livefile_create();
            ffi::rocksdb_livefile_set_column_family_name(lf, cf.as_ptr());
            ffi::rocksdb_livefile_set_level(lf, f.level);
            ffi::rocksdb_livefile_set_name(lf, file.as_ptr());
            ffi::rocksdb_livefile_set_directory(lf, dir.as_ptr());
            ffi::rocksdb_livefile_set_size(lf, f.size);
            ffi::rocksdb_livefile_set_smallest_key(lf, f.smallest_key.as_ptr().cast(), f.smallest_key.len());
            ffi::rocksdb_livefile_set_largest_key(lf, f.largest_key.as_ptr().cast(), f.largest_key.len());
            ffi::rocksdb_livefile_set_smallest_seqno(lf, f.smallest_seqno);
            ffi::rocksdb_livefile_set_largest_seqno(lf, f.largest_seqno);
            ffi::rocksdb_livefile_set_num_entries(lf, f.entries);
            ffi::rocksdb_livefile_set_num_deletions(lf, f.deletions);
            ffi::rocksdb_livefiles_add(list, lf);
        }
        let meta = ffi::rocksdb_export_import_files_metadata_create();
        ffi::rocksdb_export_import_files_metadata_set_db_comparator_name(meta, c"leveldb.BytewiseComparator".as_ptr());
        ffi::rocksdb_export_import_files_metadata_set_files(meta, list);
        let import = ffi::rocksdb_import_column_family_options_create();
        ffi::rocksdb_import_column_family_options_set_move_files(import, 1);
        let mut err = std::ptr::null_mut();
        let handle = ffi::rocksdb_create_column_family_with_import(
            db.as_raw_ptr(),
            opts.as_raw_ptr(),
            c_name.as_ptr(),
            import,
            meta,
            &mut err,
        );
        ffi::rocksdb_import_column_family_options_destroy(import);
        ffi::rocksdb_export_import_files_metadata_destroy(meta);
        if !handle.is_null() {
            // The database keeps the column family; `rocksdb::DB` learns of it when it is opened again.
            ffi::rocksdb_column_family_handle_destroy(handle);
        }
        take_error(err, &format!("import {} SST files into column family {name:?}", files.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocksdb::{IngestExternalFileOptions, SstFileWriter, WriteOptions};

    fn key(db: u8, i: u32) -> Vec<u8> {
        let mut k = vec![db];
        k.extend_from_slice(&i.to_be_bytes());
        k
    }

    /// A database holding rows `key(tag, 0..1000)` in column family `s`: flushed rows, then an ingested file that
    /// overwrites half of them (sequence number 0 in the file), then newer memtable rows flushed again.
    fn source(dir: &Path, tag: u8) -> DB {
        let mut o = Options::default();
        o.create_if_missing(true);
        o.create_missing_column_families(true);
        let db = DB::open_cf(&o, dir, ["s"]).unwrap();
        let cf = db.cf_handle("s").unwrap();
        let mut w = WriteOptions::default();
        w.disable_wal(true);
        for i in 0..1000 {
            db.put_cf_opt(cf, key(tag, i), b"old", &w).unwrap();
        }
        db.flush_cf(cf).unwrap();
        let sst = dir.join("ingest.sst");
        let mut writer = SstFileWriter::create(&o);
        writer.open(&sst).unwrap();
        for i in (0..1000).step_by(2) {
            writer.put(key(tag, i), b"ingested").unwrap();
        }
        writer.finish().unwrap();
        let mut io = IngestExternalFileOptions::default();
        io.set_move_files(true);
        db.ingest_external_file_cf_opts(cf, &io, vec![&sst]).unwrap();
        for i in (0..1000).step_by(4) {
            db.put_cf_opt(cf, key(tag, i), b"newest", &w).unwrap();
        }
        db.delete_cf_opt(cf, key(tag, 999), &w).unwrap();
        db.flush_cf(cf).unwrap();
        db
    }

    fn expected(i: u32) -> Option<&'static [u8]> {
        match i {
            999 => None,
            _ if i.is_multiple_of(4) => Some(b"newest"),
            _ if i.is_multiple_of(2) => Some(b"ingested"),
            _ => Some(b"old"),
        }
    }

    #[test]
    fn importing_two_databases_keeps_the_newest_version_of_every_row() {
        let tmp = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        let mut sources = Vec::new();
        for tag in [1u8, 2] {
            let db = source(&tmp.path().join(format!("src{tag}")), tag);
            assert_eq!(range_deletions(&db, db.cf_handle("s").unwrap()).unwrap(), 0);
            files.extend(freeze_live_files(&db).unwrap().into_iter().filter(|f| f.column_family == "s"));
            sources.push(db);
        }
        // The ingested file's sequence number comes from the manifest, not the file.
        assert!(files.iter().all(|f| f.largest_seqno > 0), "{files:?}");
        drop(sources);
        let mut o = Options::default();
        o.create_if_missing(true);
        let target_dir = tmp.path().join("target");
        {
            let db = DB::open(&o, &target_dir).unwrap();
            create_column_family_with_import(&db, "s", &o, &files).unwrap();
            let err = create_column_family_with_import(&db, "s", &o, &files).unwrap_err();
            assert!(err.to_string().contains("import"), "{err}");
        }
        let db = DB::open_cf(&o, &target_dir, ["s"]).unwrap();
        let cf = db.cf_handle("s").unwrap();
        for tag in [1u8, 2] {
            for i in 0..1000 {
                assert_eq!(db.get_cf(cf, key(tag, i)).unwrap().as_deref(), expected(i), "row {tag}/{i}");
            }
        }
        assert_eq!(db.iterator_cf(cf, rocksdb::IteratorMode::Start).count(), 2 * 999);
        // New writes are newer than every imported row.
        db.put_cf(cf, key(1, 0), b"after").unwrap();
        db.flush_cf(cf).unwrap();
        db.compact_range_cf(cf, None::<&[u8]>, None::<&[u8]>);
        assert_eq!(db.get_cf(cf, key(1, 0)).unwrap().as_deref(), Some(&b"after"[..]));
        assert_eq!(db.get_cf(cf, key(2, 4)).unwrap().as_deref(), Some(&b"newest"[..]));
    }

    #[test]
    fn range_deletions_are_counted() {
        let tmp = tempfile::tempdir().unwrap();
        let db = source(tmp.path(), 1);
        let cf = db.cf_handle("s").unwrap();
        db.delete_range_cf(cf, key(1, 10), key(1, 20)).unwrap();
        db.flush_cf(cf).unwrap();
        assert_eq!(range_deletions(&db, cf).unwrap(), 1);
    }
}
