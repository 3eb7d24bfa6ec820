//! State time-to-live (Flink's `StateTtlConfig`), processing time only.
//!
//! A state registered with a [`StateTtlConfig`] (in the typed handle's [`crate::StateDescriptor`]) stores an 8-byte
//! big-endian last-access timestamp in milliseconds **before** every value: before the value of value, reducing
//! and aggregating rows, before every list element (inside the element's length prefix), and before every map
//! entry's value. States without TTL keep their exact row format. A stored value is expired iff
//! `ts + ttl <= now` (saturating, so it never overflows); `now` comes from the backend's [`Clock`]
//! ([`crate::KeyedStateBackend::set_clock`], default [`SystemClock`]).
//!
//! ## Semantics (as in Flink)
//!
//! - Writes (`update`, `add`, `put`) always stamp `now`; with [`TtlUpdateType::OnReadAndWrite`] a read of an
//!   unexpired value stamps it again (a list read re-stamps every returned element, a map iteration every
//!   returned entry).
//! - A read that finds an expired value deletes it; with [`TtlVisibility::NeverReturnExpired`] it reads as
//!   absent, with [`TtlVisibility::ReturnExpiredIfNotCleanedUp`] that one read still returns it (Flink's
//!   `getWithTtlCheckAndUpdate`). Reducing and aggregating `add` always treat an expired value as absent.
//!   `ValueState::for_each` (all keys) filters expired rows by visibility but neither deletes nor re-stamps.
//! - Lists drop every expired element on read (not only an expired prefix) and rewrite the list if any was
//!   dropped. Maps expire per entry.
//!
//! ## Cleanup
//!
//! - Lazy: on read, above.
//! - Full snapshots: the heap backend writes no expired value, element or entry into its snapshot.
//! - Incremental (heap): every access of a TTL state checks the next N rows of that state (default
//!   [`DEFAULT_INCREMENTAL_CLEANUP_ENTRIES`], `HeapBackend::set_incremental_cleanup_entries`), skipping the
//!   current key, whose data the access itself handles.
//! - RocksDB: a compaction filter factory is installed on every state column family; each filter looks up
//!   the TTL config of its state (by column-family name) in a registry the backend fills from the stored kind
//!   records when it opens (also after a restore) and on registration, so the TTL is known before the state is
//!   registered again. The filter drops value and map rows whose timestamp expired and list rows whose every
//!   element expired (a partly expired list is trimmed on read); it reads the clock once per 1000 rows. Periodic
//!   compaction ([`DEFAULT_PERIODIC_COMPACTION_SECS`], 30 days, `RocksDbBackend::set_periodic_compaction_seconds`)
//!   makes sure cold files are filtered too. RocksDB snapshots are file checkpoints and may hold expired rows,
//!   which are never returned.
//!
//! ## Stored config
//!
//! The TTL config is stored with the state's kind, in its kind record (`meta.rs`: RocksDB kind row, heap
//! snapshot kind byte); a state without TTL keeps its one-byte record. Registering a state with another TTL
//! config than it was registered with in this backend is a declaration error; after a restore, turning TTL on
//! or off is refused (as in Flink before 2.x) while the duration, update type and visibility may change (the
//! new config is recorded).

use crate::error::StateError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Rows the heap backend checks for expiry per access of a TTL state.
pub const DEFAULT_INCREMENTAL_CLEANUP_ENTRIES: usize = 5;

/// RocksDB periodic compaction of state column families: 30 days.
pub const DEFAULT_PERIODIC_COMPACTION_SECS: u64 = 30 * 24 * 3600;

/// Rows a RocksDB compaction filter processes between two clock reads.
pub(crate) const FILTER_CLOCK_REFRESH_ROWS: u32 = 1000;

/// Bytes of the timestamp before a TTL value.
pub(crate) const TS_LEN: usize = 8;

/// When the last-access timestamp of a value is renewed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TtlUpdateType {
    /// On creation and on every write (default).
    #[default]
    OnCreateAndWrite,
    /// Also on every read.
    OnReadAndWrite,
}

/// Whether an expired value that is still stored may be returned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TtlVisibility {
    /// Expired values read as absent (default).
    #[default]
    NeverReturnExpired,
    /// An expired value is returned by the read that finds (and deletes) it.
    ReturnExpiredIfNotCleanedUp,
}

/// The time-to-live of a state (Flink's `StateTtlConfig`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StateTtlConfig {
    /// How long a value lives after its last access (millisecond precision).
    pub ttl: Duration,
    /// When the timestamp is renewed.
    pub update_type: TtlUpdateType,
    /// Whether expired values may be returned.
    pub visibility: TtlVisibility,
}

impl StateTtlConfig {
    /// A TTL of `ttl` with the default update type and visibility.
    pub fn new(ttl: Duration) -> Self {
        StateTtlConfig { ttl, update_type: TtlUpdateType::default(), visibility: TtlVisibility::default() }
    }

    /// With another update type.
    pub fn with_update_type(self, update_type: TtlUpdateType) -> Self {
        StateTtlConfig { update_type, ..self }
    }

    /// With another visibility.
    pub fn with_visibility(self, visibility: TtlVisibility) -> Self {
        StateTtlConfig { visibility, ..self }
    }

    /// The TTL in milliseconds (saturating).
    pub fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether a value last accessed at `ts` is expired at `now` (`ts + ttl <= now`, overflow-safe).
    pub fn is_expired(&self, ts: u64, now: u64) -> bool {
        ts.saturating_add(self.ttl_ms()) <= now
    }

    pub(crate) fn returns_expired(&self) -> bool {
        self.visibility == TtlVisibility::ReturnExpiredIfNotCleanedUp
    }

    pub(crate) fn refreshes_on_read(&self) -> bool {
        self.update_type == TtlUpdateType::OnReadAndWrite
    }
}

/// The processing-time clock of TTL.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch (or any fixed origin, consistently).
    fn now_ms(&self) -> u64;
}

/// The system clock (default).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A clock that moves only when told to (tests).
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock showing `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        ManualClock { now: AtomicU64::new(now_ms) }
    }

    /// Sets the time.
    pub fn set(&self, now_ms: u64) {
        self.now.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the time forward.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let _ = self.now.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| Some(t.saturating_add(ms)));
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// A clock that can be replaced while others (RocksDB compaction filters) hold it.
#[derive(Clone)]
pub(crate) struct SharedClock(Arc<RwLock<Arc<dyn Clock>>>);

impl Default for SharedClock {
    fn default() -> Self {
        SharedClock(Arc::new(RwLock::new(Arc::new(SystemClock))))
    }
}

impl SharedClock {
    pub fn set(&self, clock: Arc<dyn Clock>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = clock;
    }

    pub fn now_ms(&self) -> u64 {
        self.0.read().unwrap_or_else(|e| e.into_inner()).now_ms()
    }
}

/// Splits a TTL value into its timestamp and the user value.
pub(crate) fn split_ts<'a>(name: &str, b: &'a [u8]) -> Result<(u64, &'a [u8]), StateError> {
    match b.split_first_chunk::<TS_LEN>() {
        Some((ts, rest)) => Ok((u64::from_be_bytes(*ts), rest)),
        None => Err(StateError::Corrupt(format!("TTL state {name:?}: value shorter than its timestamp"))),
    }
}

/// Appends `ts | value` to `out`.
pub(crate) fn stamp(ts: u64, value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&ts.to_be_bytes());
    out.extend_from_slice(value);
}

/// Whether a stored value or map row (`ts | value`) is expired; a malformed one counts as not expired.
pub(crate) fn row_expired(ttl: &StateTtlConfig, now: u64, row: &[u8]) -> bool {
    row.first_chunk::<TS_LEN>().is_some_and(|ts| ttl.is_expired(u64::from_be_bytes(*ts), now))
}

/// The elements of a stored TTL list that are not expired, re-encoded; `None` if none is expired (or the list is
/// malformed, which the read reports).
pub(crate) fn retain_unexpired(ttl: &StateTtlConfig, now: u64, list: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut dropped = false;
    crate::keyed::layout::decode_list("", list, &mut |e| {
        if row_expired(ttl, now, e) {
            dropped = true;
        } else {
            crate::keyed::layout::encode_list_element(e, &mut out);
        }
        Ok(())
    })
    .ok()?;
    dropped.then_some(out)
}

/// Whether every element of a stored TTL list is expired (false for a malformed list).
pub(crate) fn list_all_expired(ttl: &StateTtlConfig, now: u64, list: &[u8]) -> bool {
    let mut all = true;
    crate::keyed::layout::decode_list("", list, &mut |e| {
        all &= row_expired(ttl, now, e);
        Ok(())
    })
    .is_ok()
        && all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_overflow_safe() {
        let t = StateTtlConfig::new(Duration::from_millis(10));
        assert!(!t.is_expired(100, 109));
        assert!(t.is_expired(100, 110));
        assert!(!StateTtlConfig::new(Duration::MAX).is_expired(u64::MAX - 1, u64::MAX - 1));
        assert!(!t.is_expired(u64::MAX, u64::MAX - 1));
    }
}
