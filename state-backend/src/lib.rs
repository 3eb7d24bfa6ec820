//! Weir's state: keyed state (per key, partitioned into key groups) and operator state (per subtask), the
//! RocksDB and heap backends behind one trait, and snapshots to and from an object store.
//!
//! The modules are folders, one concern each, and depend one way (A ← B: B uses A): `error.rs` ← [`keyed`] ←
//! [`timers`] ← the backends [`rocks`] and [`heap`] ← [`snapshot`] ← [`restore`]. The typed layer [`typed`]
//! stands on [`keyed`] and [`timers`] beside the backends, and [`operator`] uses only `error.rs`.
//!
//! - [`error`]: [`StateError`], the state layer's errors.
//! - [`keyed`]: the [`KeyedStateBackend`] trait both backends implement and the [`LocalSnapshot`] it takes, with
//!   what its bytes mean, which both backends share. Writes larger than the backend's value limit
//!   ([`DEFAULT_MAX_VALUE_BYTES`], [`KeyedStateBackend::set_max_value_bytes`]) are refused.
//!   - [`keyed::meta`]: the state metadata — [`StateKind`], [`StateOptions`] (TTL and how a change of it
//!     rewrites values, namespaces: window and timer state, [`KeyedStateBackend::set_current_namespace`],
//!     [`set_namespace`]), the kind record that stores them, and the declaration checks: a name keeps its kind,
//!     namespacing and TTL on/off for good (also across snapshot and restore).
//!   - [`keyed::layout`]: the row layout both backends share — row keys `key_group | key [| namespace]`, the
//!     list format, the byte bounds of a key-group range — and the row and element visitors that walk it.
//!   - [`keyed::ttl`]: state time-to-live ([`StateTtlConfig`], given to a typed handle in its
//!     [`StateDescriptor`]), an injectable [`Clock`] ([`KeyedStateBackend::set_clock`]), lazy, snapshot,
//!     incremental (heap) and compaction-filter (RocksDB) cleanup.
//!   - [`keyed::migrate`]: rewriting a restored state's stored values when its serializer needs a migration or
//!     its TTL was turned on or off ([`KeyedStateBackend::migrate_state`]; RocksDB through sorted SST files and
//!     ingestion).
//! - [`timers`]: timer services — an operator's event-time and processing-time timers as keyed state of kind
//!   [`StateKind::Timers`] (rows key group first, then timestamp), with each key group's earliest timer cached
//!   and its due timers read ahead in batches ([`TimerService`]); they move with their key groups through every
//!   snapshot, restore and rescale path. `timers/set.rs` is the ordered set of timer rows the backends keep in
//!   memory, with a snapshot that copies pointers.
//! - [`typed`]: the typed layer operators use.
//!   - [`typed::handles`]: the typed state handles — [`ValueState`], [`ListState`], [`MapState`],
//!     [`ReducingState`] and [`AggregatingState`] —, each with `clear` (current key) and `clear_all` (every key
//!     of the backend), and the TTL semantics on top of the stored bytes.
//!   - [`typed::codec`]: [`StateCodec`], how a typed value becomes bytes.
//!   - [`typed::formats`]: [`Bincode`], [`Avro`] and [`Protobuf`] state values, whose type signatures carry
//!     serializer snapshots (recorded in checkpoints, resolved on restore, migrated for Avro).
//!   - [`typed::evolution`]: whether a new serializer reads what an old one's snapshot wrote ([`resolve`]: Avro's
//!     and Protobuf's own rules) and the [`Migrator`] that rewrites stored values; the job manager, which links
//!     neither format, has a task manager judge a savepoint's snapshots.
//!   - [`typed::signature`]: state type signatures — [`signature::TypeSignature`] (with
//!     `#[derive(TypeSignature)]` from `weir-state-derive`), an operator's [`signature::StateSignature`],
//!     `uid_stated` and the test helper `assert_signature` that pins one.
//! - [`rocks`]: the RocksDB backend: a column family per state, row key `key_group | key` (map rows
//!   `key_group | len(key) | key | user key`), list appends through a merge operator. Its module docs describe
//!   the row layout.
//!   - [`rocks::cache`]: the write-back cache in front of RocksDB for value rows.
//!   - [`rocks::ingest`]: how the backend keeps a snapshot's synchronous part short — dirty cache rows frozen at
//!     the barrier, written as SST files and ingested by a background thread.
//!   - `rocks/import.rs`: RocksDB's column-family import through its C API, which moves whole SST files of
//!     several databases into one.
//! - [`heap`]: in-memory backend with the same behaviour, for small state and tests; `heap/statefile.rs` reads
//!   and writes its snapshot file, whose structure canonical snapshots share.
//! - [`snapshot`]: a keyed snapshot once its backend has taken it.
//!   - [`snapshot::format`]: [`SnapshotFormat`], the layouts a snapshot's files may have, told by name or by
//!     the files of a directory.
//!   - [`snapshot::canonical`]: the backend-independent canonical snapshot format (`canonical-state.bin`,
//!     ordered by key group) and [`write_canonical`], which converts a native snapshot into it; heap ↔ RocksDB
//!     moves go through it.
//!   - [`snapshot::transfer`]: uploading local snapshots to an object store (incrementally: an SST the last
//!     completed checkpoint holds is referenced, not uploaded again) and downloading them for restore.
//! - [`restore`]: [`open_keyed_backend`] opens a backend, fresh or from its own snapshot, and
//!   [`open_keyed_backend_from`] restores one backend from several snapshots ([`RestoreSource`], in any
//!   [`SnapshotFormat`]), clipped to its key-group range — RocksDB by importing the native snapshots' SST files
//!   whole and cutting the rest with range deletes, other formats through SST ingestion — as a subtask does when
//!   a job rescales (`restore/rescale.rs`, [`rescale`]).
//! - [`operator`]: operator list state, snapshotted as one blob plus per-state element offsets.
//!
//! The same test suite (`tests/suite.rs`) runs every state kind, clear, clear_all, kind conflicts, the size limit
//! and snapshot/restore round trips against both backends, and state TTL (every kind, both update types, both
//! visibilities, snapshot/restore) with a [`ManualClock`]. `restore/rescale.rs`'s tests restore every state kind
//! from `p_old` to `p_new` subtasks for both targets and every source format.

// The derive macros name `::weir_state`, also inside this crate.
extern crate self as weir_state;

pub mod error;
pub mod heap;
pub mod keyed;
pub mod operator;
pub mod restore;
pub mod rocks;
pub mod snapshot;
#[cfg(test)]
mod tests;
pub mod timers;
pub mod typed;

pub use error::StateError;
pub use keyed::meta::{StateDescriptor, StateKind, StateOptions, StateSummary};
pub use keyed::ttl::{Clock, ManualClock, StateTtlConfig, SystemClock, TtlUpdateType, TtlVisibility};
pub use keyed::{KeyedStateBackend, LocalSnapshot, StateId, DEFAULT_MAX_VALUE_BYTES};
pub use operator::OperatorStateStore;
pub use restore::rescale::{open_keyed_backend, open_keyed_backend_from, RestoreSource};
pub use snapshot::canonical::write_canonical;
pub use snapshot::format::SnapshotFormat;
pub use timers::{TimeDomain, TimerService};
pub use typed::codec::StateCodec;
pub use typed::evolution::{resolve, EvolutionError, Migrator};
pub use typed::formats::{Avro, Bincode, Protobuf};
pub use typed::handles::{
    set_namespace, AggregateFunction, AggregatingState, ListState, MapState, ReducingState, ValueState,
};

// The module paths other crates name (and `#[derive(TypeSignature)]` expands to), where they were before the
// modules went into folders.
pub use restore::rescale;
pub use typed::{formats, signature};
