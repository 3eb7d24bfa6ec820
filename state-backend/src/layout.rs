//! The row layout both backends share: row keys (`key_group | key`, see [`RowKeyBuilder`]), the stored list
//! format, and the byte intervals of key-group ranges. The RocksDB module docs ([`crate::rocks`]) show the
//! whole table; the heap keeps value and list rows under the same row keys, and map entries in an ordered map
//! per row key.

use crate::keyed::ElementVisitor;
use crate::StateError;
use weir_common::keygroup::KeyGroupRange;

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
            prefix_len: weir_common::keygroup::key_group_prefix_len(max_parallelism),
            row: Vec::with_capacity(32),
            namespace: Vec::new(),
            ns_row: Vec::new(),
        }
    }

    /// Sets the current key (its serialized bytes); computes its key group.
    pub fn set(&mut self, key: &[u8]) {
        let kg = weir_common::keygroup::key_group_for_key(key, self.max_parallelism);
        self.row.clear();
        weir_common::keygroup::write_key_group_prefix(kg, self.max_parallelism, &mut self.row);
        self.row.extend_from_slice(key);
        self.ns_row.clear();
    }

    /// Sets the namespace of namespaced states.
    pub fn set_namespace(&mut self, namespace: &[u8]) {
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

    /// The first row key of a key-group range and the first one past it (the key-group prefix of
    /// `range.end + 1` always fits the prefix width, since key groups are `< max_parallelism`).
    pub fn range_bounds(&self, range: KeyGroupRange) -> (Vec<u8>, Vec<u8>) {
        use weir_common::ids::KeyGroup;
        let mut lo = Vec::new();
        weir_common::keygroup::write_key_group_prefix(KeyGroup(range.start), self.max_parallelism, &mut lo);
        let mut hi = Vec::new();
        weir_common::keygroup::write_key_group_prefix(KeyGroup(range.end + 1), self.max_parallelism, &mut hi);
        (lo, hi)
    }

    /// First row-key byte string of a key-group range and the first one past it.
    pub fn bounds(&self, range: KeyGroupRange) -> (Vec<u8>, Option<Vec<u8>>) {
        use weir_common::ids::KeyGroup;
        let mut lo = Vec::new();
        weir_common::keygroup::write_key_group_prefix(KeyGroup(range.start), self.max_parallelism, &mut lo);
        let hi = if range.end + 1 >= self.max_parallelism {
            None
        } else {
            let mut hi = Vec::new();
            weir_common::keygroup::write_key_group_prefix(KeyGroup(range.end + 1), self.max_parallelism, &mut hi);
            Some(hi)
        };
        (lo, hi)
    }
}
