//! Weir's state: keyed state (per key, partitioned into key groups) and operator state (per subtask), the
//! RocksDB and heap backends behind one trait, and snapshots to and from an object store.
//!
//! - [`keyed`]: the [`KeyedStateBackend`] trait both backends implement, the [`LocalSnapshot`] it takes, and
//!   [`open_keyed_backend`]. Writes larger than the backend's value limit ([`DEFAULT_MAX_VALUE_BYTES`],
//!   [`KeyedStateBackend::set_max_value_bytes`]) are refused. It re-exports the handles, kinds and options below,
//!   so `keyed::ValueState` and the like keep working.
//! - [`handles`]: the typed state handles operators use — [`ValueState`], [`ListState`], [`MapState`],
//!   [`ReducingState`] and [`AggregatingState`] —, each with `clear` (current key) and `clear_all` (every key of
//!   the backend), and the TTL semantics on top of the stored bytes.
//! - [`meta`]: the state metadata — [`StateKind`], [`StateOptions`] (TTL, namespaces: window and timer state,
//!   [`KeyedStateBackend::set_current_namespace`], [`set_namespace`]), the kind record that stores them, and the
//!   declaration checks: a name keeps its kind, namespacing and TTL on/off for good (also across snapshot and
//!   restore).
//! - [`layout`]: the row layout both backends share — row keys `key_group | key [| namespace]`, the list format,
//!   the byte bounds of a key-group range.
//! - [`rocks`]: RocksDB backend: a column family per state, row key `key_group | key` (map rows
//!   `key_group | len(key) | key | user key`), list appends through a merge operator, a write-back cache for
//!   value rows. The module docs describe the row layout.
//! - [`ingest`]: how the RocksDB backend keeps a snapshot's synchronous part short — dirty cache rows frozen at
//!   the barrier, written as SST files and ingested by a background thread.
//! - [`migrate`]: rewriting a restored state's stored values when its serializer needs a migration or its TTL was
//!   turned on or off ([`KeyedStateBackend::migrate_state`]; RocksDB through sorted SST files and ingestion).
//! - [`heap`]: in-memory backend with the same behaviour, for small state and tests.
//! - [`rescale`]: [`open_keyed_backend_from`] restores one backend from several snapshots ([`RestoreSource`], in
//!   any [`SnapshotFormat`]), clipped to its key-group range — RocksDB by importing the native snapshots' SST
//!   files whole (`import.rs`, RocksDB's column-family import through its C API) and cutting the rest with range
//!   deletes, other formats through SST ingestion — as a subtask does when a job rescales.
//! - [`canonical`]: the backend-independent canonical snapshot format (`canonical-state.bin`, ordered by key
//!   group) and [`write_canonical`], which converts a native snapshot into it; heap ↔ RocksDB moves go through
//!   it. Its file structure is the heap snapshot's (`statefile.rs`).
//! - [`signature`]: state type signatures — [`signature::TypeSignature`] (with `#[derive(TypeSignature)]` from
//!   `weir-state-derive`), an operator's [`signature::StateSignature`], `uid_stated` and the test helper
//!   `assert_signature` that pins one.
//! - [`formats`]: [`formats::Bincode`], [`formats::Avro`] and [`formats::Protobuf`] state values, whose type
//!   signatures carry serializer snapshots (recorded in checkpoints, resolved on restore, migrated for Avro).
//! - [`operator`]: operator list state, snapshotted as one blob plus per-state element offsets.
//! - [`ttl`]: state time-to-live ([`StateTtlConfig`], the typed handles' `register_with_ttl`), an injectable
//!   [`Clock`] ([`KeyedStateBackend::set_clock`]), lazy, snapshot, incremental (heap) and compaction-filter
//!   (RocksDB) cleanup.
//! - [`snapshot`]: uploading local snapshots to an object store and downloading them for restore.
//!
//! The same test suite (`suite.rs`) runs every state kind, clear, clear_all, kind conflicts, the size limit and
//! snapshot/restore round trips against both backends, and state TTL (every kind, both update types, both
//! visibilities, snapshot/restore) with a [`ManualClock`]. `rescale.rs`'s tests restore every state kind from
//! `p_old` to `p_new` subtasks for both targets and every source format.

// The derive macros name `::weir_state`, also inside this crate.
extern crate self as weir_state;

pub mod cache;
pub mod canonical;
pub mod codec;
pub mod formats;
pub mod handles;
pub mod heap;
pub(crate) mod import;
pub mod ingest;
pub mod keyed;
pub mod layout;
pub mod meta;
pub mod migrate;
pub mod operator;
pub mod rescale;
pub mod rocks;
pub mod signature;
pub mod snapshot;
pub(crate) mod statefile;
#[cfg(test)]
mod suite;
pub mod ttl;

pub use canonical::write_canonical;
pub use codec::StateCodec;
pub use formats::{Avro, Bincode, Protobuf};
pub use keyed::{
    open_keyed_backend, set_namespace, AggregateFunction, AggregatingState, KeyedStateBackend, ListState,
    LocalSnapshot, MapState, ReducingState, StateId, StateKind, StateOptions, ValueState, DEFAULT_MAX_VALUE_BYTES,
};
pub use meta::StateSummary;
pub use operator::OperatorStateStore;
pub use rescale::{open_keyed_backend_from, RestoreSource, SnapshotFormat};
pub use ttl::{Clock, ManualClock, StateTtlConfig, SystemClock, TtlUpdateType, TtlVisibility};

/// Errors of the state layer.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// RocksDB reported an error.
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    /// Local file I/O failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The object store failed.
    #[error(transparent)]
    Store(#[from] weir_common::store::StoreError),
    /// Stored bytes could not be decoded.
    #[error("corrupt state: {0}")]
    Corrupt(String),
    /// A stored value of a state does not decode as the type the operator reads it as: the state's type changed
    /// since the value was written.
    #[error(
        "state {state:?}: a stored value does not decode as {type_name} ({detail}); the state's type changed since \
         it was written. Give the operator's kind a state signature (weir_taskmanager::registry::signed) so that \
         `weir savepoint check` and submissions catch the change before deploying, or drop the state on restore \
         (the operator's drop_state_on_change: true, or --allow-non-restored-state)"
    )]
    Decode {
        /// State name.
        state: String,
        /// The type it was read as.
        type_name: &'static str,
        /// What the codec said.
        detail: String,
    },
    /// A snapshot cannot be restored into the backend asked for (a native RocksDB snapshot into the heap).
    #[error("cannot restore: {0}")]
    Restore(String),
    /// A state was declared twice with different kinds, or used wrongly.
    #[error("state {name:?}: {message}")]
    Declaration {
        /// State name.
        name: String,
        /// What is wrong.
        message: String,
    },
}

impl StateError {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        StateError::Io { context: context.into(), source }
    }
}
