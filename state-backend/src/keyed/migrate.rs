//! State migration: rewriting every stored value of a restored state before the operator reads it, when its
//! serializer changed in a way that needs it (an Avro schema that resolves to another encoding, see
//! `weir_common::state::serializer`) or when TTL was turned on or off (the 8-byte timestamp in front of each value is
//! added, stamped with the restore's time, or stripped).
//!
//! Both backends rewrite the same units — a value row, each list element, each map value — with [`RowRewrite`];
//! keys and map user keys are never rewritten. RocksDB writes the rewritten rows of the state's column family, in
//! key order, into sorted SST files and ingests them (no put per value); the heap rewrites its rows in place.

use crate::error::StateError;
use crate::keyed::layout::{decode_list, encode_list_element};
use crate::keyed::meta::{StateKind, TtlChange};
use crate::keyed::ttl::split_ts;

/// Rewrites one stored value (without its TTL timestamp) from the old serializer's bytes to the new one's,
/// appending to the output.
pub type ValueMigration<'a> = dyn FnMut(&[u8], &mut Vec<u8>) -> Result<(), StateError> + 'a;

/// How each row of one state is rewritten.
pub(crate) struct RowRewrite<'a, 'f> {
    /// The state's name (errors).
    pub name: &'a str,
    /// Its kind: whether a row is one value or a list of elements.
    pub kind: StateKind,
    /// The timestamps.
    pub ttl: TtlChange,
    /// The values' migration, if their serializer changed.
    pub values: Option<&'a mut ValueMigration<'f>>,
    /// Values rewritten so far.
    pub count: u64,
    element: Vec<u8>,
}

impl<'a, 'f> RowRewrite<'a, 'f> {
    /// A rewrite of state `name` of `kind`.
    pub(crate) fn new(
        name: &'a str,
        kind: StateKind,
        ttl: TtlChange,
        values: Option<&'a mut ValueMigration<'f>>,
    ) -> Self {
        RowRewrite { name, kind, ttl, values, count: 0, element: Vec::new() }
    }

    /// Appends the rewritten `row` (a whole stored row value) to `out`.
    pub(crate) fn row(&mut self, row: &[u8], out: &mut Vec<u8>) -> Result<(), StateError> {
        if self.kind != StateKind::List {
            return self.unit(row, out);
        }
        let mut element = std::mem::take(&mut self.element);
        let name = self.name;
        let result = decode_list(name, row, &mut |e| {
            element.clear();
            self.unit(e, &mut element)?;
            encode_list_element(&element, out);
            Ok(())
        });
        self.element = element;
        result
    }

    /// Rewrites one value (list element, map value).
    fn unit(&mut self, stored: &[u8], out: &mut Vec<u8>) -> Result<(), StateError> {
        let (ts, user) = match self.ttl {
            TtlChange::Keep { stamped: false } | TtlChange::TurnOn(_) => (None, stored),
            TtlChange::Keep { stamped: true } | TtlChange::TurnOff => {
                let (ts, user) = split_ts(self.name, stored)?;
                (Some(ts), user)
            }
        };
        match (self.ttl, ts) {
            (TtlChange::TurnOn(now), _) => out.extend_from_slice(&now.to_be_bytes()),
            (TtlChange::Keep { stamped: true }, Some(ts)) => out.extend_from_slice(&ts.to_be_bytes()),
            _ => {}
        }
        match self.values.as_mut() {
            Some(f) => f(user, out)?,
            None => out.extend_from_slice(user),
        }
        self.count += 1;
        Ok(())
    }
}

/// Values between two progress lines of a long migration.
pub(crate) const PROGRESS_EVERY: u64 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_rewritten_unit_by_unit() {
        let mut upper = |v: &[u8], out: &mut Vec<u8>| {
            out.extend(v.iter().map(|b| b.to_ascii_uppercase()));
            Ok(())
        };
        let mut out = Vec::new();
        let mut rw = RowRewrite::new("s", StateKind::Value, TtlChange::Keep { stamped: false }, Some(&mut upper));
        rw.row(b"ab", &mut out).unwrap();
        assert_eq!(out, b"AB");

        let mut list = Vec::new();
        encode_list_element(b"x", &mut list);
        encode_list_element(b"yz", &mut list);
        let mut out = Vec::new();
        let mut rw = RowRewrite::new("s", StateKind::List, TtlChange::TurnOn(7), Some(&mut upper));
        rw.row(&list, &mut out).unwrap();
        let mut want = Vec::new();
        encode_list_element(&[0, 0, 0, 0, 0, 0, 0, 7, b'X'], &mut want);
        encode_list_element(&[0, 0, 0, 0, 0, 0, 0, 7, b'Y', b'Z'], &mut want);
        assert_eq!(out, want);
        assert_eq!(rw.count, 2);

        let mut back = Vec::new();
        let mut rw = RowRewrite::new("s", StateKind::List, TtlChange::TurnOff, None);
        rw.row(&out, &mut back).unwrap();
        let mut want = Vec::new();
        encode_list_element(b"X", &mut want);
        encode_list_element(b"YZ", &mut want);
        assert_eq!(back, want);

        let mut kept = Vec::new();
        let mut rw = RowRewrite::new("s", StateKind::Map, TtlChange::Keep { stamped: true }, None);
        rw.row(&[0, 0, 0, 0, 0, 0, 0, 9, 1], &mut kept).unwrap();
        assert_eq!(kept, [0, 0, 0, 0, 0, 0, 0, 9, 1]);
        assert!(RowRewrite::new("s", StateKind::Map, TtlChange::TurnOff, None).row(&[1], &mut kept).is_err());
    }
}
