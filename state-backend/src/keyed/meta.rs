//! The per-state metadata both backends store and check: a state's [`StateKind`], its [`StateOptions`] (TTL,
//! namespaces), the *kind record* that stores them, and the declaration checks run when a state is registered
//! (also after a restore, against the stored record). This is the one place for state metadata: what a state
//! is declared as, how that is encoded, and which redeclarations are refused.
//!
//! ## Kind record
//!
//! One byte `kind` for a state without TTL (value 0, list 1, map 2, reducing 3, aggregating 4, timers 5), with bit `0x40`
//! set if the state is namespaced; a state with TTL sets bit `0x80` and appends the TTL in ms (`u64` LE), the
//! update-type byte and the visibility byte (11 bytes in all). RocksDB stores it in the default
//! column family (row `weir.kind.<name>`); heap snapshots store it after the state's name.

use crate::error::StateError;
use crate::keyed::ttl::{StateTtlConfig, TtlUpdateType, TtlVisibility};
use std::io::Read;
use std::time::Duration;

/// What happens to the TTL timestamp in front of each stored value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TtlChange {
    /// Kept as it is (TTL on before and after) or absent (off before and after).
    Keep {
        /// Whether values carry a timestamp.
        stamped: bool,
    },
    /// TTL turned on: every value is stamped with this time (ms).
    TurnOn(u64),
    /// TTL turned off: timestamps are stripped.
    TurnOff,
}

/// What a state holds per key; declared when the state is registered and fixed for the state's lifetime
/// (it is stored with the state, so it is checked again after a restore).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateKind {
    /// One value per key ([`ValueState`](crate::ValueState)).
    Value,
    /// A list of elements per key ([`ListState`](crate::ListState)).
    List,
    /// A map of user keys to values per key ([`MapState`](crate::MapState)).
    Map,
    /// One value per key folded by a reduce function ([`ReducingState`](crate::ReducingState)).
    Reducing,
    /// One accumulator per key of an aggregate function ([`AggregatingState`](crate::AggregatingState)).
    Aggregating,
    /// The timers of one time domain of a timer service ([`crate::timers`]): rows ordered by key group, then
    /// timestamp, each naming its key and namespace.
    Timers,
}

impl StateKind {
    /// The kind's name, as used in errors.
    pub fn name(self) -> &'static str {
        match self {
            StateKind::Value => "value",
            StateKind::List => "list",
            StateKind::Map => "map",
            StateKind::Reducing => "reducing",
            StateKind::Aggregating => "aggregating",
            StateKind::Timers => "timers",
        }
    }

    /// The byte that stores the kind (RocksDB meta row, heap snapshot).
    pub(crate) fn to_byte(self) -> u8 {
        match self {
            StateKind::Value => 0,
            StateKind::List => 1,
            StateKind::Map => 2,
            StateKind::Reducing => 3,
            StateKind::Aggregating => 4,
            StateKind::Timers => 5,
        }
    }

    /// The kind stored as `b`.
    pub(crate) fn from_byte(b: u8) -> Result<Self, StateError> {
        Ok(match b {
            0 => StateKind::Value,
            1 => StateKind::List,
            2 => StateKind::Map,
            3 => StateKind::Reducing,
            4 => StateKind::Aggregating,
            5 => StateKind::Timers,
            _ => return Err(StateError::Corrupt(format!("unknown state kind byte {b}"))),
        })
    }

    /// Whether the state is stored as one value row per key (value, reducing, aggregating).
    pub(crate) fn is_value_row(self) -> bool {
        matches!(self, StateKind::Value | StateKind::Reducing | StateKind::Aggregating)
    }
}

impl std::fmt::Display for StateKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The error for registering `name` as `wanted` when it exists as `existing`.
pub(crate) fn kind_conflict(name: &str, existing: StateKind, wanted: StateKind) -> StateError {
    StateError::Declaration {
        name: name.to_string(),
        message: format!("registered as {wanted} state but it already exists as {existing} state"),
    }
}

/// The error for using a state through an operation of another kind.
pub(crate) fn wrong_kind(name: &str, kind: StateKind, op: &str) -> StateError {
    StateError::Declaration { name: name.to_string(), message: format!("{op} is not an operation of {kind} state") }
}

/// The error for a value (or list) larger than the limit; nothing has been written when it is returned.
pub(crate) fn too_large(name: &str, kind: StateKind, size: usize, limit: usize) -> StateError {
    StateError::Declaration {
        name: name.to_string(),
        message: format!(
            "{kind} state value of {size} bytes exceeds the limit of {limit} bytes; nothing was written. \
             Split large values over many rows with MapState instead"
        ),
    }
}

/// A state as a snapshot holds it, for `weir savepoint inspect`: its declaration and an estimate of its bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct StateSummary {
    /// State name.
    pub name: String,
    /// Its kind.
    pub kind: StateKind,
    /// Its time-to-live, if any.
    pub ttl: Option<StateTtlConfig>,
    /// Bytes of its rows: exact for the heap (counted by its last snapshot); for RocksDB an estimate, RocksDB's
    /// of the live data in its column family's files plus what its write-back cache holds.
    pub bytes: u64,
    /// Timer states: how many timers it holds (exact).
    pub entries: Option<u64>,
}

/// How a state is declared besides its name and kind: what a Flink state descriptor adds (the value types are
/// the typed handle's).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StateOptions {
    /// Time-to-live of the state's values (see [`crate::keyed::ttl`]).
    pub ttl: Option<StateTtlConfig>,
    /// Whether the state is scoped to a namespace within each key (window and timer state, see
    /// [`crate::KeyedStateBackend::set_current_namespace`]). Stored with the state: it cannot change across a
    /// restore.
    pub namespaced: bool,
}

impl StateOptions {
    /// With a time-to-live.
    pub fn with_ttl(mut self, ttl: StateTtlConfig) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Scoped to namespaces.
    pub fn namespaced(mut self) -> Self {
        self.namespaced = true;
        self
    }
}

/// A state's name and declared options: what a typed handle is registered with (Flink's `StateDescriptor`).
/// A bare name converts into one with default options, so `ValueState::register(backend, "count")` works.
#[derive(Clone, Copy, Debug)]
pub struct StateDescriptor<'a> {
    /// The state's name, unique within the operator.
    pub name: &'a str,
    /// TTL and namespaces.
    pub options: StateOptions,
}

impl<'a> StateDescriptor<'a> {
    /// The state `name` with default options.
    pub fn new(name: &'a str) -> Self {
        StateDescriptor { name, options: StateOptions::default() }
    }

    /// With a time-to-live (see [`crate::keyed::ttl`]).
    pub fn with_ttl(mut self, ttl: StateTtlConfig) -> Self {
        self.options.ttl = Some(ttl);
        self
    }

    /// Scoped to namespaces.
    pub fn namespaced(mut self) -> Self {
        self.options.namespaced = true;
        self
    }

    /// With all of `options`.
    pub fn with_options(mut self, options: StateOptions) -> Self {
        self.options = options;
        self
    }
}

impl<'a> From<&'a str> for StateDescriptor<'a> {
    fn from(name: &'a str) -> Self {
        StateDescriptor::new(name)
    }
}

impl<'a> From<&'a String> for StateDescriptor<'a> {
    fn from(name: &'a String) -> Self {
        StateDescriptor::new(name)
    }
}

/// Checks a registration of `name` as `kind` with `wanted` against how the state exists (`existing`: kind,
/// TTL, namespaced — registered in this backend's lifetime, or only `restored`): another kind, TTL config
/// (not after a restore, where it migrates) or choice of namespaces is a [`StateError::Declaration`].
pub(crate) fn check_redeclaration(
    name: &str,
    (existing_kind, existing_ttl, existing_namespaced): (StateKind, Option<&StateTtlConfig>, bool),
    kind: StateKind,
    wanted: &StateOptions,
    restored: bool,
) -> Result<(), StateError> {
    if existing_kind != kind {
        return Err(kind_conflict(name, existing_kind, kind));
    }
    check_ttl(name, existing_ttl, wanted.ttl.as_ref(), restored)?;
    if existing_namespaced != wanted.namespaced {
        let how = |ns: bool| if ns { "with namespaces" } else { "without namespaces" };
        return Err(StateError::Declaration {
            name: name.to_string(),
            message: format!(
                "registered {} but it already exists {}",
                how(wanted.namespaced),
                how(existing_namespaced)
            ),
        });
    }
    Ok(())
}

/// The stored kind record: `[kind]` without TTL, `[kind | 0x80, ttl ms (u64 LE), update type, visibility]` with;
/// a namespaced state's first byte also has bit 0x40.
pub(crate) fn encode_kind_record(kind: StateKind, ttl: Option<&StateTtlConfig>, namespaced: bool) -> Vec<u8> {
    let first = kind.to_byte() | if namespaced { NAMESPACED_BIT } else { 0 };
    match ttl {
        None => vec![first],
        Some(t) => {
            let mut out = vec![first | 0x80];
            out.extend_from_slice(&t.ttl_ms().to_le_bytes());
            out.push(match t.update_type {
                TtlUpdateType::OnCreateAndWrite => 0,
                TtlUpdateType::OnReadAndWrite => 1,
            });
            out.push(match t.visibility {
                TtlVisibility::NeverReturnExpired => 0,
                TtlVisibility::ReturnExpiredIfNotCleanedUp => 1,
            });
            out
        }
    }
}

/// Bytes of a kind record with TTL.
pub(crate) const TTL_RECORD_LEN: usize = 11;

/// Whether a kind record starting with `first` has a TTL config (and is [`TTL_RECORD_LEN`] bytes long).
pub(crate) fn record_has_ttl(first: u8) -> bool {
    first & 0x80 != 0
}

/// The bit of a kind record's first byte that marks a namespaced state.
const NAMESPACED_BIT: u8 = 0x40;

/// A decoded kind record: kind, TTL config, whether the state is namespaced.
pub(crate) type KindRecord = (StateKind, Option<StateTtlConfig>, bool);

/// Decodes a whole kind record.
pub(crate) fn decode_kind_record(b: &[u8]) -> Result<KindRecord, StateError> {
    let corrupt = || StateError::Corrupt(format!("malformed state kind record {b:?}"));
    let first = *b.first().ok_or_else(corrupt)?;
    let namespaced = first & NAMESPACED_BIT != 0;
    let kind = StateKind::from_byte(first & !(0x80 | NAMESPACED_BIT))?;
    if !record_has_ttl(first) {
        return if b.len() == 1 { Ok((kind, None, namespaced)) } else { Err(corrupt()) };
    }
    if b.len() != TTL_RECORD_LEN {
        return Err(corrupt());
    }
    let ms = u64::from_le_bytes(b[1..9].try_into().map_err(|_| corrupt())?);
    let update_type = match b[9] {
        0 => TtlUpdateType::OnCreateAndWrite,
        1 => TtlUpdateType::OnReadAndWrite,
        _ => return Err(corrupt()),
    };
    let visibility = match b[10] {
        0 => TtlVisibility::NeverReturnExpired,
        1 => TtlVisibility::ReturnExpiredIfNotCleanedUp,
        _ => return Err(corrupt()),
    };
    Ok((kind, Some(StateTtlConfig { ttl: Duration::from_millis(ms), update_type, visibility }), namespaced))
}

/// Checks a registration's TTL config against the existing one: in this backend's lifetime it must be equal;
/// a restored state may be registered with any (see [`ttl_change`]).
pub(crate) fn check_ttl(
    name: &str,
    existing: Option<&StateTtlConfig>,
    wanted: Option<&StateTtlConfig>,
    restored: bool,
) -> Result<(), StateError> {
    // After a restore any change is allowed: turning TTL on or off migrates the stored values (the caller's
    // [`ttl_change`]).
    if restored || existing == wanted {
        return Ok(());
    }
    let message = format!("registered with TTL {wanted:?} but it already exists with TTL {existing:?}");
    Err(StateError::Declaration { name: name.to_string(), message })
}

/// What registering a restored state with TTL `wanted` (stored with `existing`) does to its stored timestamps.
pub(crate) fn ttl_change(existing: Option<&StateTtlConfig>, wanted: Option<&StateTtlConfig>, now: u64) -> TtlChange {
    match (existing.is_some(), wanted.is_some()) {
        (false, true) => TtlChange::TurnOn(now),
        (true, false) => TtlChange::TurnOff,
        (stamped, _) => TtlChange::Keep { stamped },
    }
}

/// Where RocksDB stores the kind record of state `name`: a row of the default column family.
pub(crate) fn rocks_kind_row(name: &str) -> Vec<u8> {
    format!("{ROCKS_KIND_ROW_PREFIX}{name}").into_bytes()
}

/// The prefix of every RocksDB kind row (followed by the state name).
pub(crate) const ROCKS_KIND_ROW_PREFIX: &str = "weir.kind.";

/// Reads one kind record from a snapshot stream (its length follows from its first byte).
pub(crate) fn read_kind_record(r: &mut impl Read) -> Result<KindRecord, StateError> {
    let truncated = |e| StateError::Corrupt(format!("snapshot truncated in a kind record: {e}"));
    let mut k = [0u8; TTL_RECORD_LEN];
    r.read_exact(&mut k[..1]).map_err(truncated)?;
    if record_has_ttl(k[0]) {
        r.read_exact(&mut k[1..]).map_err(truncated)?;
        decode_kind_record(&k)
    } else {
        decode_kind_record(&k[..1])
    }
}

/// Describes a kind record for errors: `list state with TTL 100 ms, namespaced`.
fn describe(record: &KindRecord) -> String {
    let (kind, ttl, namespaced) = record;
    let mut s = format!("{kind} state");
    if let Some(t) = ttl {
        s.push_str(&format!(" with TTL {} ms", t.ttl_ms()));
    }
    s.push_str(if *namespaced { ", namespaced" } else { ", without namespaces" });
    s
}

/// Checks that two snapshots restored into one backend (on rescaling) declare state `name` alike: the same kind,
/// namespacing and TTL on or off, or [`StateError::Declaration`] naming both snapshots. The TTL's duration, update
/// type and visibility may differ (a restore may change them, and an old subtask that never registered the state
/// again kept the older config); the first snapshot's is kept until the state is registered.
pub(crate) fn check_same_declaration(
    name: &str,
    (first, first_from): (&KindRecord, &str),
    (other, other_from): (&KindRecord, &str),
) -> Result<(), StateError> {
    if first.0 == other.0 && first.1.is_some() == other.1.is_some() && first.2 == other.2 {
        return Ok(());
    }
    Err(StateError::Declaration {
        name: name.to_string(),
        message: format!(
            "the snapshots being restored together declare it differently: as {} in {first_from} and as {} in \
             {other_from}",
            describe(first),
            describe(other)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_records_round_trip() {
        let t = StateTtlConfig::new(Duration::from_millis(10));
        for kind in [
            StateKind::Value,
            StateKind::List,
            StateKind::Map,
            StateKind::Reducing,
            StateKind::Aggregating,
            StateKind::Timers,
        ] {
            assert_eq!(encode_kind_record(kind, None, false), vec![kind.to_byte()]);
            assert_eq!(decode_kind_record(&[kind.to_byte()]).unwrap(), (kind, None, false));
            assert_eq!(decode_kind_record(&encode_kind_record(kind, None, true)).unwrap(), (kind, None, true));
            let t = t
                .with_update_type(TtlUpdateType::OnReadAndWrite)
                .with_visibility(TtlVisibility::ReturnExpiredIfNotCleanedUp);
            let rec = encode_kind_record(kind, Some(&t), false);
            assert_eq!(rec.len(), TTL_RECORD_LEN);
            assert_eq!(decode_kind_record(&rec).unwrap(), (kind, Some(t), false));
            let rec = encode_kind_record(kind, Some(&t), true);
            assert_eq!(decode_kind_record(&rec).unwrap(), (kind, Some(t), true));
            assert_eq!(read_kind_record(&mut rec.as_slice()).unwrap(), (kind, Some(t), true));
        }
        assert!(decode_kind_record(&[0x80]).is_err());
        assert!(read_kind_record(&mut &[0x80u8, 1, 2][..]).is_err());
    }

    #[test]
    fn snapshots_restored_together_must_declare_a_state_alike() {
        let t = StateTtlConfig::new(Duration::from_millis(100));
        let list = (StateKind::List, Some(t), true);
        assert!(check_same_declaration("s", (&list, "a"), (&list, "b")).is_ok());
        let longer = (StateKind::List, Some(StateTtlConfig::new(Duration::from_secs(9))), true);
        assert!(check_same_declaration("s", (&list, "a"), (&longer, "b")).is_ok(), "TTL durations may differ");
        for other in
            [(StateKind::Value, Some(t), true), (StateKind::List, None, true), (StateKind::List, Some(t), false)]
        {
            let e = check_same_declaration("s", (&list, "snap-a"), (&other, "snap-b")).unwrap_err().to_string();
            assert!(e.contains("\"s\"") && e.contains("snap-a") && e.contains("snap-b"), "{e}");
            assert!(e.contains("list state with TTL 100 ms, namespaced"), "{e}");
        }
    }
}
