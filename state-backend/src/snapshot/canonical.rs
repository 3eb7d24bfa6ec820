//! The canonical snapshot format: backend-independent keyed state, ordered by key group, which both backends
//! restore. A job moves between the heap and RocksDB through a canonical savepoint.
//!
//! ## Format
//!
//! One file, [`CANONICAL_FILE`], with the structure of the heap's `WEIRHP02` snapshots (see [`crate::heap`]; both
//! are read and written by `heap/statefile.rs`) under the magic `WEIRCN01`:
//!
//! ```text
//! "WEIRCN01"
//! u32 state count
//! per state, ordered by name:
//!     bytes name
//!     kind record (1 byte, or 11 with TTL: see crate::keyed::meta)
//!     u32 row count
//!     value, reducing, aggregating, list:  (bytes row key, bytes value)*
//!     map:                                  (bytes row key, u32 entry count, (bytes user key, bytes value)*)*
//! ```
//!
//! Every number is a little-endian `u32`, every `bytes` a `u32` length and the bytes. Row keys are the heap's:
//! `kg | key`, or `kg | key | ns | u32 BE len(ns)` for a namespaced state, with `kg` the key group (1 byte if
//! max parallelism ≤ 128, else 2, big-endian); a map state has one row per (key, namespace) holding its entries.
//! Values are the stored bytes as they are: a list's concatenated length-prefixed elements (merged), TTL
//! timestamps included. So a canonical file restores byte-identically into either backend.
//!
//! Rows are in RocksDB's order, which is by key group: value and list rows by row key; map rows by their
//! RocksDB row prefix `kg | u32 BE len(key) | key [| u32 BE len(ns) | ns]` (by key group, then key length, key
//! and namespace), entries by user key. That is the order in which a RocksDB snapshot is iterated and in which
//! a RocksDB restore writes SST files, so neither side sorts; only a heap snapshot (hash maps) is sorted, one
//! state at a time (in one byte arena).
//!
//! ## Conversion
//!
//! [`write_canonical`] converts a native local snapshot in the asynchronous part of a savepoint, off the task
//! thread, so a canonical savepoint pauses the task no longer than a native one. A RocksDB snapshot is opened in
//! a scratch directory (its ingest files applied) and every state's column family is streamed into the file;
//! rows are copied as the snapshot holds them (expired TTL rows that no compaction dropped yet included: they
//! are never returned and go at the next compaction, as after a native restore; a heap snapshot has none, since
//! the heap leaves them out of every snapshot). A heap snapshot is read twice: once for the state headers, then
//! state by state in name order, each state's rows sorted in memory.

use crate::error::StateError;
use crate::heap::statefile::{Row, SortBuffer, StateFileReader, StateFileWriter, CANONICAL_V1, HEAP_V1, HEAP_V2};
use crate::keyed::layout::{map_prefix_of_row, row_in, split_map_row};
use crate::keyed::meta::{encode_kind_record, StateKind};
use crate::keyed::LocalSnapshot;
use crate::rocks::{RocksDbBackend, RocksOptions};
use std::path::Path;
use std::time::Instant;
use weir_common::state::keygroup::{key_group_prefix_len, KeyGroupRange};

/// The file of a canonical snapshot.
pub const CANONICAL_FILE: &str = "canonical-state.bin";

/// The backend name of canonical snapshots ([`LocalSnapshot::backend`]).
pub const CANONICAL_BACKEND: &str = "canonical";

/// The magics a canonical snapshot file may have.
pub(crate) const MAGICS: &[&[u8; 8]] = &[CANONICAL_V1];

/// Converts a native local snapshot (RocksDB or heap, after [`LocalSnapshot::ready`]; a snapshot still
/// pending is waited for) into the canonical format in `out_dir`; blocking. `work_dir` is scratch space of its
/// own (a RocksDB snapshot is opened there, and its `db`, `ingest` and `restore-ingest` directories are replaced
/// and removed); a RocksDB snapshot's directory is consumed (moved). Returns the canonical snapshot (backend
/// `canonical`, the native snapshot's key-group range).
pub fn write_canonical(
    mut native: LocalSnapshot,
    work_dir: &Path,
    out_dir: &Path,
    max_parallelism: u32,
    rocks: &RocksOptions,
) -> Result<LocalSnapshot, StateError> {
    native.ready_blocking()?;
    let started = Instant::now();
    std::fs::create_dir_all(out_dir).map_err(|e| StateError::io(format!("create {}", out_dir.display()), e))?;
    let path = out_dir.join(CANONICAL_FILE);
    let range = native.key_group_range;
    let mut w = StateFileWriter::create(&path, CANONICAL_V1)?;
    match native.backend {
        "rocksdb" => {
            let result = rocks_to_canonical(&native, work_dir, max_parallelism, rocks, &mut w);
            for dir in ["db", "ingest", "restore-ingest"].map(|d| work_dir.join(d)) {
                if dir.exists() {
                    if let Err(e) = std::fs::remove_dir_all(&dir) {
                        tracing::warn!(dir = %dir.display(), error = %e, "removing canonical conversion scratch failed");
                    }
                }
            }
            result?;
        }
        "heap" => heap_to_canonical(&native.dir, range, max_parallelism, &mut w)?,
        other => {
            return Err(StateError::Corrupt(format!(
                "only native rocksdb and heap snapshots convert to canonical, not {other:?}"
            )))
        }
    }
    let size = w.finish()?;
    tracing::info!(
        from = native.backend,
        range = ?range,
        bytes = size,
        ms = started.elapsed().as_millis() as u64,
        "wrote canonical snapshot"
    );
    Ok(LocalSnapshot {
        dir: out_dir.to_path_buf(),
        files: vec![(CANONICAL_FILE.to_string(), size)],
        backend: CANONICAL_BACKEND,
        key_group_range: range,
        pending: None,
    })
}

/// Streams every state of a RocksDB snapshot, in name order, into `w`.
fn rocks_to_canonical(
    native: &LocalSnapshot,
    work_dir: &Path,
    max_parallelism: u32,
    rocks: &RocksOptions,
    w: &mut StateFileWriter,
) -> Result<(), StateError> {
    let range = native.key_group_range;
    let db = RocksDbBackend::open(work_dir, max_parallelism, range, Some(&native.dir), rocks.clone())?;
    let prefix_len = db.prefix_len();
    let mut row = Vec::new();
    for (name, (kind, ttl, namespaced)) in db.stored_states()? {
        w.begin_state(&name, kind, &encode_kind_record(kind, ttl.as_ref(), namespaced))?;
        if kind == StateKind::Map {
            db.scan(&name, range, &mut |k, v| {
                let user_key = split_map_row(k, prefix_len, namespaced, &mut row)?;
                w.map_entry(&row, user_key, v)
            })?;
        } else {
            db.scan(&name, range, &mut |k, v| w.value_row(k, v))?;
        }
    }
    Ok(())
}

/// Writes every state of a heap snapshot, in name order and each sorted, into `w`.
fn heap_to_canonical(
    dir: &Path,
    range: KeyGroupRange,
    max_parallelism: u32,
    w: &mut StateFileWriter,
) -> Result<(), StateError> {
    let prefix_len = key_group_prefix_len(max_parallelism);
    let in_range = |key: &[u8]| row_in(key, prefix_len, Some(range));
    let mut r = StateFileReader::open(&dir.join(crate::heap::FILE), &[HEAP_V2, HEAP_V1])?;
    let mut headers = Vec::new();
    while let Some(h) = r.next_state()? {
        headers.push(h);
    }
    headers.sort_by(|a, b| a.name.cmp(&b.name));
    for h in &headers {
        r.seek_to(h)?;
        r.next_state()?;
        let (kind, ttl, namespaced) = h.record;
        w.begin_state(&h.name, kind, &encode_kind_record(kind, ttl.as_ref(), namespaced))?;
        // Sorted by RocksDB row key (map rows: `prefix | user key`), the canonical order.
        let mut rows = SortBuffer::default();
        let mut prefix = Vec::new();
        let mut prefix_of = Vec::new();
        r.rows(&mut |row| {
            match row {
                Row::Value { key, value } if kind != StateKind::Map => {
                    if in_range(key)? {
                        rows.push(&[key], value);
                    }
                }
                Row::MapEntry { key, user_key, value } if kind == StateKind::Map => {
                    if prefix_of != key {
                        map_prefix_of_row(key, prefix_len, namespaced, &mut prefix)?;
                        prefix_of.clear();
                        prefix_of.extend_from_slice(key);
                    }
                    if in_range(key)? {
                        rows.push(&[&prefix, user_key], value);
                    }
                }
                _ => return Err(StateError::Corrupt(format!("{kind} state {:?} holds a row of another kind", h.name))),
            }
            Ok(())
        })?;
        rows.sort();
        let mut row = Vec::new();
        if kind == StateKind::Map {
            rows.for_each(&mut |k, v| {
                let user_key = split_map_row(k, prefix_len, namespaced, &mut row)?;
                w.map_entry(&row, user_key, v)
            })?;
        } else {
            rows.for_each(&mut |k, v| w.value_row(k, v))?;
        }
    }
    Ok(())
}
