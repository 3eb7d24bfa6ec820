//! Weir's state: keyed state (per key, partitioned into key groups) and operator state (per subtask), the
//! RocksDB and heap backends behind one trait, and snapshots to and from an object store.
//!
//! - [`keyed`]: the [`KeyedStateBackend`] trait both backends implement and the [`LocalSnapshot`] it takes.
//!   Writes larger than the backend's value limit ([`DEFAULT_MAX_VALUE_BYTES`],
//!   [`KeyedStateBackend::set_max_value_bytes`]) are refused.
//! - [`error`]: [`StateError`], the state layer's errors.
//! - [`handles`]: the typed state handles operators use — [`ValueState`], [`ListState`], [`MapState`],
//!   [`ReducingState`] and [`AggregatingState`] —, each with `clear` (current key) and `clear_all` (every key of
//!   the backend), and the TTL semantics on top of the stored bytes.
//! - [`meta`]: the state metadata — [`StateKind`], [`StateOptions`] (TTL and how a change of it rewrites values, namespaces: window and timer state,
//!   [`KeyedStateBackend::set_current_namespace`], [`set_namespace`]), the kind record that stores them, and the
//!   declaration checks: a name keeps its kind, namespacing and TTL on/off for good (also across snapshot and
//!   restore).
//! - [`layout`]: the row layout both backends share — row keys `key_group | key [| namespace]`, the list format,
//!   the byte bounds of a key-group range — and the row and element visitors that walk it.
//! - [`rocks`]: RocksDB backend: a column family per state, row key `key_group | key` (map rows
//!   `key_group | len(key) | key | user key`), list appends through a merge operator, a write-back cache for
//!   value rows. The module docs describe the row layout.
//! - [`ingest`]: how the RocksDB backend keeps a snapshot's synchronous part short — dirty cache rows frozen at
//!   the barrier, written as SST files and ingested by a background thread.
//! - [`migrate`]: rewriting a restored state's stored values when its serializer needs a migration or its TTL was
//!   turned on or off ([`KeyedStateBackend::migrate_state`]; RocksDB through sorted SST files and ingestion).
//! - [`heap`]: in-memory backend with the same behaviour, for small state and tests.
//! - [`rescale`]: [`open_keyed_backend`] opens a backend, fresh or from its own snapshot, and
//!   [`open_keyed_backend_from`] restores one backend from several snapshots ([`RestoreSource`], in
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
//! - [`ttl`]: state time-to-live ([`StateTtlConfig`], given to a typed handle in its [`StateDescriptor`]), an injectable
//!   [`Clock`] ([`KeyedStateBackend::set_clock`]), lazy, snapshot, incremental (heap) and compaction-filter
//!   (RocksDB) cleanup.
//! - [`timers`]: timer services — an operator's event-time and processing-time timers as keyed state of kind
//!   [`StateKind::Timers`] (rows key group first, then timestamp), with each key group's earliest timer cached
//!   and its due timers read ahead in batches ([`TimerService`]); they move with their key groups through every
//!   snapshot, restore and rescale path.
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
pub mod error;
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
pub mod timers;
mod timerset;
pub mod ttl;

pub use canonical::write_canonical;
pub use codec::StateCodec;
pub use error::StateError;
pub use formats::{Avro, Bincode, Protobuf};
pub use handles::{set_namespace, AggregateFunction, AggregatingState, ListState, MapState, ReducingState, ValueState};
pub use keyed::{KeyedStateBackend, LocalSnapshot, StateId, DEFAULT_MAX_VALUE_BYTES};
pub use meta::StateSummary;
pub use meta::{StateDescriptor, StateKind, StateOptions};
pub use operator::OperatorStateStore;
pub use rescale::{open_keyed_backend, open_keyed_backend_from, RestoreSource, SnapshotFormat};
pub use timers::{TimeDomain, TimerService};
pub use ttl::{Clock, ManualClock, StateTtlConfig, SystemClock, TtlUpdateType, TtlVisibility};
