//! The row layout both backends share: row keys (`key_group | key`, see `RowKeyBuilder`), the stored list
//! format, and the byte intervals of key-group ranges. The RocksDB module docs (`rocks/mod.rs`) show the
//! whole table; the heap keeps value and list rows under the same row keys, and map entries in an ordered map
//! per row key.

use crate::error::StateError;
use weir_common::state::keygroup::KeyGroupRange;

/// A visitor of `(key, value)` rows.
pub type RowVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), StateError> + 'a;

/// A visitor of single byte strings (list elements).
pub type ElementVisitor<'a> = dyn FnMut(&[u8]) -> Result<(), StateError> + 'a;

/// A visitor of timer rows ([`crate::keyed::KeyedStateBackend::scan_timers`]); returns whether to go on.
pub type TimerScan<'a> = dyn FnMut(&[u8]) -> Result<bool, StateError> + 'a;

/// Appends one list element in the stored list format: little-endian `u32` length, then the bytes.
pub fn encode_list_element(element: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(element.len() as u32).to_le_bytes());
    out.extend_from_slice(element);
}

/// Calls `f` for every element of a stored list (concatenated length-prefixed elements).
pub(crate) fn decode_list(name: &str, mut bytes: &[u8], f: &mut ElementVisitor<'_>) -> Result<(), StateError> {
    while !bytes.is_empty() {
        let corrupt = || StateError::Corrupt(format!("list state {name:?}: truncated element"));
        let len: [u8; 4] = bytes.get(..4).ok_or_else(corrupt)?.try_into().map_err(|_| corrupt())?;
        let len = u32::from_le_bytes(len) as usize;
        let elem = bytes.get(4..4 + len).ok_or_else(corrupt)?;
        f(elem)?;
        bytes = &bytes[4 + len..];
    }
    Ok(())
}

/// The smallest byte string greater than every string starting with `prefix`, if there is one.
pub(crate) fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.last_mut() {
        if *last == 0xff {
            s.pop();
        } else {
            *last += 1;
            return Some(s);
        }
    }
    None
}

/// Builds row keys (`key_group | key`) for the current key, shared by both backends.
#[derive(Debug)]
pub(crate) struct RowKeyBuilder {
    pub max_parallelism: u32,
    pub prefix_len: usize,
    /// `key_group | key` of the current key.
    pub row: Vec<u8>,
    /// The current namespace of namespaced states (empty: none set).
    namespace: Vec<u8>,
    /// `key_group | key | namespace | u32 BE namespace length`: the current row of namespaced states. Read
    /// from the end, it splits unambiguously into key and namespace.
    ns_row: Vec<u8>,
}

impl RowKeyBuilder {
    /// A builder for `max_parallelism` key groups, with no current key.
    pub fn new(max_parallelism: u32) -> Self {
        RowKeyBuilder {
            max_parallelism,
            prefix_len: weir_common::state::keygroup::key_group_prefix_len(max_parallelism),
            row: Vec::with_capacity(32),
            namespace: Vec::new(),
            ns_row: Vec::new(),
        }
    }

    /// Sets the current key (its serialized bytes); computes its key group.
    pub fn set(&mut self, key: &[u8]) {
        let kg = weir_common::state::keygroup::key_group_for_key(key, self.max_parallelism);
        self.set_in_group(key, kg.0);
    }

    /// Sets the current key whose key group is known.
    pub fn set_in_group(&mut self, key: &[u8], kg: u32) {
        debug_assert_eq!(kg, weir_common::state::keygroup::key_group_for_key(key, self.max_parallelism).0);
        let kg = weir_common::ids::KeyGroup(kg);
        self.row.clear();
        weir_common::state::keygroup::write_key_group_prefix(kg, self.max_parallelism, &mut self.row);
        self.row.extend_from_slice(key);
        self.ns_row.clear();
    }

    /// Sets the namespace of namespaced states.
    pub fn set_namespace(&mut self, namespace: &[u8]) {
        // Windows set the same namespace again and again (read, then write a slice): keep the row built for it.
        if self.namespace == namespace {
            return;
        }
        self.namespace.clear();
        self.namespace.extend_from_slice(namespace);
        self.ns_row.clear();
    }

    /// The current row of a state: `key_group | key`, or for a namespaced state (`namespaced`) that followed by
    /// `namespace | u32 BE namespace length`.
    pub fn key(&mut self, namespaced: bool) -> &[u8] {
        if !namespaced {
            return &self.row;
        }
        if self.ns_row.is_empty() {
            self.ns_row.extend_from_slice(&self.row);
            self.ns_row.extend_from_slice(&self.namespace);
            self.ns_row.extend_from_slice(&(self.namespace.len() as u32).to_be_bytes());
        }
        &self.ns_row
    }

    /// The prefix of the current key's map rows: `key_group | u32 BE key length | key`, for a namespaced state
    /// followed by `u32 BE namespace length | namespace`.
    pub fn map_prefix(&self, namespaced: bool, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.row[..self.prefix_len]);
        out.extend_from_slice(&((self.row.len() - self.prefix_len) as u32).to_be_bytes());
        out.extend_from_slice(&self.row[self.prefix_len..]);
        if namespaced {
            out.extend_from_slice(&(self.namespace.len() as u32).to_be_bytes());
            out.extend_from_slice(&self.namespace);
        }
    }

    /// The key of a value or list row (without its key-group prefix) as iteration shows it: the whole rest for
    /// a plain state; for a namespaced state the key, if the row belongs to the current namespace.
    pub fn visible_key<'a>(&self, namespaced: bool, rest: &'a [u8]) -> Option<&'a [u8]> {
        if !namespaced {
            return Some(rest);
        }
        let len_at = rest.len().checked_sub(4)?;
        let ns_len = u32::from_be_bytes(rest[len_at..].try_into().ok()?) as usize;
        let ns_at = len_at.checked_sub(ns_len)?;
        (rest[ns_at..len_at] == self.namespace[..]).then_some(&rest[..ns_at])
    }

    /// The current key and namespace's timer row at `ts` into `out`; returns the key group.
    pub fn timer_row(&self, ts: i64, out: &mut Vec<u8>) -> Result<u32, StateError> {
        let (kg, key) = self.row.split_at(self.prefix_len.min(self.row.len()));
        out.clear();
        out.extend_from_slice(kg);
        append_timer(ts, key, &self.namespace, out);
        row_key_group(&self.row, self.prefix_len)
    }

    /// The first possible timer row of key group `kg` at or after `ts`, and the first row past the key group.
    pub fn timer_bounds(&self, kg: u32, ts: i64) -> (Vec<u8>, Vec<u8>) {
        let (mut lo, hi) = self.range_bounds(KeyGroupRange { start: kg, end: kg });
        lo.extend_from_slice(&timer_ts_bytes(ts));
        (lo, hi)
    }

    /// The row of `timer`, of key group `kg`, into `out` (cleared first).
    pub fn timer_row_of(&self, kg: u32, timer: &TimerRow, out: &mut Vec<u8>) {
        out.clear();
        weir_common::state::keygroup::write_key_group_prefix(weir_common::ids::KeyGroup(kg), self.max_parallelism, out);
        append_timer(timer.timestamp, &timer.key, &timer.namespace, out);
    }

    /// The first possible timer row of key group `kg` after timer `after` (its row and a zero byte), into `out`.
    pub fn timer_after(&self, kg: u32, after: &TimerRow, out: &mut Vec<u8>) {
        self.timer_row_of(kg, after, out);
        out.push(0);
    }

    /// Into `lo` and `hi`: the bounds of a scan of key group `kg`'s timers from `ts` (or past row `after`) on.
    pub fn timer_scan_bounds(&self, kg: u32, ts: i64, after: Option<&[u8]>, lo: &mut Vec<u8>, hi: &mut Vec<u8>) {
        use weir_common::ids::KeyGroup;
        lo.clear();
        weir_common::state::keygroup::write_key_group_prefix(KeyGroup(kg), self.max_parallelism, lo);
        match after {
            // The least byte string greater than the row.
            Some(row) => {
                lo.extend_from_slice(row);
                lo.push(0);
            }
            None => lo.extend_from_slice(&timer_ts_bytes(ts)),
        }
        hi.clear();
        weir_common::state::keygroup::write_key_group_prefix(KeyGroup(kg + 1), self.max_parallelism, hi);
    }

    /// The current key's key group.
    pub fn key_group(&self) -> Result<u32, StateError> {
        row_key_group(&self.row, self.prefix_len)
    }

    /// The current key (without its key-group prefix) and namespace.
    pub fn current(&self) -> (&[u8], &[u8]) {
        (&self.row[self.prefix_len.min(self.row.len())..], &self.namespace)
    }

    /// The first row key of a key-group range and the first one past it (the key-group prefix of
    /// `range.end + 1` always fits the prefix width, since key groups are `< max_parallelism`).
    pub fn range_bounds(&self, range: KeyGroupRange) -> (Vec<u8>, Vec<u8>) {
        use weir_common::ids::KeyGroup;
        let mut lo = Vec::new();
        weir_common::state::keygroup::write_key_group_prefix(KeyGroup(range.start), self.max_parallelism, &mut lo);
        let mut hi = Vec::new();
        weir_common::state::keygroup::write_key_group_prefix(KeyGroup(range.end + 1), self.max_parallelism, &mut hi);
        (lo, hi)
    }

    /// First row-key byte string of a key-group range and the first one past it.
    pub fn bounds(&self, range: KeyGroupRange) -> (Vec<u8>, Option<Vec<u8>>) {
        use weir_common::ids::KeyGroup;
        let mut lo = Vec::new();
        weir_common::state::keygroup::write_key_group_prefix(KeyGroup(range.start), self.max_parallelism, &mut lo);
        let hi = if range.end + 1 >= self.max_parallelism {
            None
        } else {
            let mut hi = Vec::new();
            weir_common::state::keygroup::write_key_group_prefix(
                KeyGroup(range.end + 1),
                self.max_parallelism,
                &mut hi,
            );
            Some(hi)
        };
        (lo, hi)
    }
}

/// A timer's timestamp as row-key bytes: big-endian with the sign bit flipped, so byte order is numeric order.
pub(crate) fn timer_ts_bytes(ts: i64) -> [u8; 8] {
    ((ts as u64) ^ (1 << 63)).to_be_bytes()
}

/// The timestamp of a timer row without its key-group prefix.
pub(crate) fn timer_row_timestamp(rest: &[u8]) -> Result<i64, StateError> {
    match rest.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
        Some(ts) => Ok((u64::from_be_bytes(ts) ^ (1 << 63)) as i64),
        None => Err(StateError::Corrupt(format!("timer row {rest:?} is malformed"))),
    }
}

/// One timer as a timer row names it (buffers reused from row to row).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimerRow {
    /// When it fires (ms).
    pub timestamp: i64,
    /// Its key's serialized bytes.
    pub key: Vec<u8>,
    /// Its namespace's serialized bytes (empty: none).
    pub namespace: Vec<u8>,
}

impl TimerRow {
    /// Fills the timer from a timer row without its key-group prefix:
    /// `u64 BE timestamp | key | namespace | u32 BE len(namespace)`.
    pub(crate) fn read(&mut self, rest: &[u8]) -> Result<(), StateError> {
        let corrupt = || StateError::Corrupt(format!("timer row {rest:?} is malformed"));
        let ts: [u8; 8] = rest.get(..8).ok_or_else(corrupt)?.try_into().map_err(|_| corrupt())?;
        let len_at = rest.len().checked_sub(4).filter(|at| *at >= 8).ok_or_else(corrupt)?;
        let ns_len = u32::from_be_bytes(rest[len_at..].try_into().map_err(|_| corrupt())?) as usize;
        let ns_at = len_at.checked_sub(ns_len).filter(|at| *at >= 8).ok_or_else(corrupt)?;
        self.timestamp = (u64::from_be_bytes(ts) ^ (1 << 63)) as i64;
        self.key.clear();
        self.key.extend_from_slice(&rest[8..ns_at]);
        self.namespace.clear();
        self.namespace.extend_from_slice(&rest[ns_at..len_at]);
        Ok(())
    }
}

/// Appends the rest of a timer row after its key-group prefix — `timestamp | key | namespace | u32 BE
/// len(namespace)` —: key group first, then timestamp, so that a key group's timers are one interval in firing
/// order.
pub(crate) fn append_timer(ts: i64, key: &[u8], namespace: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&timer_ts_bytes(ts));
    out.extend_from_slice(key);
    out.extend_from_slice(namespace);
    out.extend_from_slice(&(namespace.len() as u32).to_be_bytes());
}

/// The key group of a row key (its first 1 or 2 bytes, big-endian).
pub(crate) fn row_key_group(row: &[u8], prefix_len: usize) -> Result<u32, StateError> {
    match (prefix_len, row) {
        (1, [kg, ..]) => Ok(u32::from(*kg)),
        (2, [hi, lo, ..]) => Ok(u32::from(u16::from_be_bytes([*hi, *lo]))),
        _ => Err(StateError::Corrupt(format!("row key {row:?} is shorter than its key-group prefix"))),
    }
}

/// Whether a row's key group lies in `keep` (`None`: every key group).
pub(crate) fn row_in(row: &[u8], prefix_len: usize, keep: Option<KeyGroupRange>) -> Result<bool, StateError> {
    match keep {
        None => Ok(true),
        Some(range) => Ok(range.contains(weir_common::ids::KeyGroup(row_key_group(row, prefix_len)?))),
    }
}

/// The byte intervals `[lo, hi)` holding every row key outside `range` (for `max_parallelism` key groups): the
/// key groups before it and those after it. Empty if `range` covers every key group.
pub(crate) fn outside_bounds(range: KeyGroupRange, max_parallelism: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    let row = RowKeyBuilder::new(max_parallelism);
    let mut out = Vec::with_capacity(2);
    if range.start > 0 {
        out.push(row.range_bounds(KeyGroupRange { start: 0, end: range.start - 1 }));
    }
    if range.end + 1 < max_parallelism {
        out.push(row.range_bounds(KeyGroupRange { start: range.end + 1, end: max_parallelism - 1 }));
    }
    out
}

/// The RocksDB map-row prefix (`kg | u32 BE len(key) | key [| u32 BE len(ns) | ns]`) of a heap map row key
/// (`kg | key [| ns | u32 BE len(ns)]`), appended to `out` (cleared first).
pub(crate) fn map_prefix_of_row(
    row: &[u8],
    prefix_len: usize,
    namespaced: bool,
    out: &mut Vec<u8>,
) -> Result<(), StateError> {
    let corrupt = || StateError::Corrupt(format!("map row key {row:?} does not split into key and namespace"));
    let (kg, rest) = (row.get(..prefix_len).ok_or_else(corrupt)?, &row[prefix_len.min(row.len())..]);
    let (key, ns) = if namespaced {
        let len_at = rest.len().checked_sub(4).ok_or_else(corrupt)?;
        let ns_len = u32::from_be_bytes(rest[len_at..].try_into().map_err(|_| corrupt())?) as usize;
        let ns_at = len_at.checked_sub(ns_len).ok_or_else(corrupt)?;
        (&rest[..ns_at], Some(&rest[ns_at..len_at]))
    } else {
        (rest, None)
    };
    out.clear();
    out.extend_from_slice(kg);
    out.extend_from_slice(&(key.len() as u32).to_be_bytes());
    out.extend_from_slice(key);
    if let Some(ns) = ns {
        out.extend_from_slice(&(ns.len() as u32).to_be_bytes());
        out.extend_from_slice(ns);
    }
    Ok(())
}

/// Splits a RocksDB map row (`kg | u32 BE len(key) | key [| u32 BE len(ns) | ns] | user key`) into the heap's
/// row key (`kg | key [| ns | u32 BE len(ns)]`, written to `row_out`, cleared first) and the user key (returned).
pub(crate) fn split_map_row<'a>(
    rocks_row: &'a [u8],
    prefix_len: usize,
    namespaced: bool,
    row_out: &mut Vec<u8>,
) -> Result<&'a [u8], StateError> {
    let corrupt = || StateError::Corrupt(format!("map row {rocks_row:?} is malformed"));
    // A length-prefixed byte string at `at`: (its bytes, the offset after it).
    let field = |at: usize| -> Result<(&'a [u8], usize), StateError> {
        let len: [u8; 4] = rocks_row.get(at..at + 4).ok_or_else(corrupt)?.try_into().map_err(|_| corrupt())?;
        let end = at + 4 + u32::from_be_bytes(len) as usize;
        Ok((rocks_row.get(at + 4..end).ok_or_else(corrupt)?, end))
    };
    let kg = rocks_row.get(..prefix_len).ok_or_else(corrupt)?;
    let (key, mut at) = field(prefix_len)?;
    row_out.clear();
    row_out.extend_from_slice(kg);
    row_out.extend_from_slice(key);
    if namespaced {
        let (ns, end) = field(at)?;
        row_out.extend_from_slice(ns);
        row_out.extend_from_slice(&(ns.len() as u32).to_be_bytes());
        at = end;
    }
    Ok(&rocks_row[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_rows_convert_between_the_backends_layouts() {
        for (m, namespaced) in [(128, false), (128, true), (4096, false), (4096, true)] {
            let mut b = RowKeyBuilder::new(m);
            b.set(b"some key");
            b.set_namespace(b"window-7");
            let heap_row = b.key(namespaced).to_vec();
            let mut rocks = Vec::new();
            b.map_prefix(namespaced, &mut rocks);
            let mut prefix = Vec::new();
            map_prefix_of_row(&heap_row, b.prefix_len, namespaced, &mut prefix).unwrap();
            assert_eq!(prefix, rocks, "m={m} namespaced={namespaced}");
            rocks.extend_from_slice(b"user key");
            let mut row = Vec::new();
            let user_key = split_map_row(&rocks, b.prefix_len, namespaced, &mut row).unwrap();
            assert_eq!((row.as_slice(), user_key), (heap_row.as_slice(), &b"user key"[..]));
            assert_eq!(row_key_group(&row, b.prefix_len).unwrap(), row_key_group(&b.row, b.prefix_len).unwrap());
        }
        let mut row = Vec::new();
        assert!(split_map_row(&[0, 0, 0, 0, 9, 1], 1, false, &mut row).is_err(), "key longer than the row");
        assert!(map_prefix_of_row(&[0, 1, 0, 0, 0, 5], 1, true, &mut row).is_err(), "namespace longer than the row");
        assert!(row_key_group(&[1], 2).is_err());
    }

    #[test]
    fn timer_rows_sort_by_key_group_then_timestamp_and_read_back() {
        let mut b = RowKeyBuilder::new(128);
        let mut rows = Vec::new();
        for (key, ns, ts) in
            [(&b"a"[..], &b""[..], -5i64), (b"bb", b"w1", 0), (b"a", b"", i64::MAX), (b"", b"x", i64::MIN)]
        {
            b.set(key);
            b.set_namespace(ns);
            let mut row = Vec::new();
            let kg = b.timer_row(ts, &mut row).unwrap();
            let mut t = TimerRow::default();
            t.read(&row[b.prefix_len..]).unwrap();
            assert_eq!((t.timestamp, t.key.as_slice(), t.namespace.as_slice()), (ts, key, ns));
            let mut again = Vec::new();
            b.timer_row_of(kg, &t, &mut again);
            assert_eq!(again, row);
            let (lo, hi) = b.timer_bounds(kg, ts);
            assert!(row >= lo && row < hi);
            rows.push((kg, ts, row));
        }
        let mut by_bytes = rows.clone();
        by_bytes.sort_by(|a, b| a.2.cmp(&b.2));
        rows.sort_by_key(|r| (r.0, r.1));
        assert_eq!(
            by_bytes.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>(),
            rows.iter().map(|r| (r.0, r.1)).collect::<Vec<_>>()
        );
        let mut t = TimerRow::default();
        assert!(t.read(&[0; 11]).is_err(), "shorter than a timestamp and a length");
        assert!(t.read(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]).is_err(), "namespace longer than the row");
    }

    #[test]
    fn outside_bounds_cover_exactly_the_other_key_groups() {
        for m in [128u32, 256] {
            let range = KeyGroupRange { start: 10, end: 20 };
            let bounds = outside_bounds(range, m);
            assert_eq!(bounds.len(), 2);
            for kg in 0..m {
                let mut row = Vec::new();
                weir_common::state::keygroup::write_key_group_prefix(weir_common::ids::KeyGroup(kg), m, &mut row);
                row.extend_from_slice(b"\xff\xffkey");
                let outside = bounds.iter().any(|(lo, hi)| row >= *lo && row < *hi);
                assert_eq!(outside, !range.contains(weir_common::ids::KeyGroup(kg)), "m={m} kg={kg}");
            }
            assert!(outside_bounds(KeyGroupRange { start: 0, end: m - 1 }, m).is_empty());
            assert_eq!(outside_bounds(KeyGroupRange { start: 0, end: 5 }, m).len(), 1);
        }
    }
}
