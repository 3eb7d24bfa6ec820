//! The formats a keyed snapshot's files may have — a backend's native one or the canonical one — and how a
//! snapshot tells its format: by name ([`crate::keyed::LocalSnapshot::backend`], a checkpoint's handle) or by the
//! files of a downloaded directory.

use crate::error::StateError;
use crate::heap::statefile::{HEAP_V1, HEAP_V2};
use crate::snapshot::canonical::{self, CANONICAL_FILE};
use std::path::Path;
use weir_common::job::spec::StateBackend;

/// How a snapshot's files are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SnapshotFormat {
    /// A RocksDB checkpoint plus the ingest files of the rows frozen at its barrier ([`crate::rocks::ingest`]).
    Rocksdb,
    /// The heap backend's `heap-state.bin`.
    Heap,
    /// Backend-independent `canonical-state.bin` ([`crate::snapshot::canonical`]).
    Canonical,
}

impl SnapshotFormat {
    /// The format of a snapshot named `name` (a [`crate::keyed::LocalSnapshot::backend`], as handles record it):
    /// `rocksdb`, `heap` or `canonical`.
    pub fn from_name(name: &str) -> Result<Self, StateError> {
        match name {
            "rocksdb" => Ok(SnapshotFormat::Rocksdb),
            "heap" => Ok(SnapshotFormat::Heap),
            canonical::CANONICAL_BACKEND => Ok(SnapshotFormat::Canonical),
            other => Err(StateError::Corrupt(format!(
                "unknown snapshot format {other:?} (expected rocksdb, heap or canonical)"
            ))),
        }
    }

    /// The format's name (the inverse of [`SnapshotFormat::from_name`]).
    pub fn name(self) -> &'static str {
        match self {
            SnapshotFormat::Rocksdb => "rocksdb",
            SnapshotFormat::Heap => "heap",
            SnapshotFormat::Canonical => canonical::CANONICAL_BACKEND,
        }
    }

    /// The native format of a backend kind.
    pub fn native(kind: StateBackend) -> Self {
        match kind {
            StateBackend::Rocksdb | StateBackend::Unspecified => SnapshotFormat::Rocksdb,
            StateBackend::Heap => SnapshotFormat::Heap,
        }
    }

    /// The format of a downloaded snapshot directory, told by its files (a canonical or heap file, or a
    /// RocksDB `CURRENT`); `None` if it has none of them.
    pub fn detect(dir: &Path) -> Option<Self> {
        if dir.join(CANONICAL_FILE).is_file() {
            Some(SnapshotFormat::Canonical)
        } else if dir.join(crate::heap::FILE).is_file() {
            Some(SnapshotFormat::Heap)
        } else if dir.join("CURRENT").is_file() {
            Some(SnapshotFormat::Rocksdb)
        } else {
            None
        }
    }

    /// The file of a heap-structured format and the magics it may have.
    pub(crate) fn state_file(self) -> Option<(&'static str, &'static [&'static [u8; 8]])> {
        match self {
            SnapshotFormat::Rocksdb => None,
            SnapshotFormat::Heap => Some((crate::heap::FILE, &[HEAP_V2, HEAP_V1])),
            SnapshotFormat::Canonical => Some((CANONICAL_FILE, canonical::MAGICS)),
        }
    }
}

impl From<SnapshotFormat> for weir_common::checkpoint::SnapshotFormat {
    fn from(f: SnapshotFormat) -> Self {
        match f {
            SnapshotFormat::Rocksdb => Self::Rocksdb,
            SnapshotFormat::Heap => Self::Heap,
            SnapshotFormat::Canonical => Self::Canonical,
        }
    }
}

impl SnapshotFormat {
    /// The format a checkpoint's handle records (unspecified is corrupt metadata).
    pub fn of_handle(format: weir_common::checkpoint::SnapshotFormat) -> Result<Self, StateError> {
        use weir_common::checkpoint::SnapshotFormat as Recorded;
        match format {
            Recorded::Rocksdb => Ok(SnapshotFormat::Rocksdb),
            Recorded::Heap => Ok(SnapshotFormat::Heap),
            Recorded::Canonical => Ok(SnapshotFormat::Canonical),
            Recorded::Unspecified => Err(StateError::Corrupt("a keyed state handle names no snapshot format".into())),
        }
    }
}

impl std::fmt::Display for SnapshotFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_format_names_round_trip() {
        for f in [SnapshotFormat::Rocksdb, SnapshotFormat::Heap, SnapshotFormat::Canonical] {
            assert_eq!(SnapshotFormat::from_name(f.name()).unwrap(), f);
        }
        let e = SnapshotFormat::from_name("native").unwrap_err().to_string();
        assert!(e.contains("\"native\"") && e.contains("canonical"), "{e}");
    }
}
