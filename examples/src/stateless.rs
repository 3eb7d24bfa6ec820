//! Stateless user kinds for the stateless-pipeline benchmark (`scripts/bench.sh --stateless`): `key-filter` keeps
//! the records whose key, an 8-byte big-endian number as `datagen` makes them, leaves `keep` modulo `modulo`
//! (other keys pass), and `value-map` maps an integer value `v` to `v · multiply + add` (wrapping; other values
//! pass unchanged). Neither keeps state.

use std::collections::BTreeMap;
use weir_common::builtin::{KindInfo, Role};
use weir_taskmanager::api::operator::{Collector, Operator, OperatorError, ProcessContext};
use weir_taskmanager::api::record::{Record, Value};

/// The filter's kind name.
pub const FILTER_KIND: &str = "key-filter";
/// The map's kind name.
pub const MAP_KIND: &str = "value-map";

/// The description of a stateless operator kind.
pub fn kind_info(kind: &str) -> KindInfo {
    KindInfo {
        kind: kind.into(),
        role: Role::Operator,
        keyed: false,
        version: env!("CARGO_PKG_VERSION").into(),
        states: vec![],
        signature: None,
    }
}

/// Reads the integer fields of a config, each with its default, refusing unknown ones.
fn integers<const N: usize>(map: &BTreeMap<String, String>, fields: [(&str, i64); N]) -> Result<[i64; N], String> {
    if let Some(unknown) = map.keys().find(|k| !fields.iter().any(|(f, _)| f == k)) {
        let known: Vec<&str> = fields.iter().map(|(f, _)| *f).collect();
        return Err(format!("config field {unknown:?}: unknown field (known fields: {})", known.join(", ")));
    }
    let mut out = [0; N];
    for (slot, (field, default)) in out.iter_mut().zip(fields) {
        *slot = match map.get(field) {
            None => default,
            Some(s) => {
                s.trim().parse().map_err(|_| format!("config field {field:?}: expected an integer, got {s:?}"))?
            }
        };
    }
    Ok(out)
}

/// `key-filter`.
pub struct KeyFilter {
    modulo: u64,
    keep: u64,
}

impl KeyFilter {
    /// Builds it from its config (`modulo` at least 1, default 2; `keep` below it, default 0).
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, String> {
        let [modulo, keep] = integers(map, [("modulo", 2), ("keep", 0)])?;
        if modulo < 1 || keep < 0 || keep >= modulo {
            return Err(format!("config: need modulo ≥ 1 and 0 ≤ keep < modulo, got modulo {modulo}, keep {keep}"));
        }
        Ok(KeyFilter { modulo: modulo as u64, keep: keep as u64 })
    }

    fn keeps(&self, r: &Record) -> bool {
        <[u8; 8]>::try_from(r.key.as_slice()).map_or(true, |k| u64::from_be_bytes(k) % self.modulo == self.keep)
    }
}

impl Operator for KeyFilter {
    fn process_batch(
        &mut self,
        records: &[Record],
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        for r in records.iter().filter(|r| self.keeps(r)) {
            out.emit(r.clone())?;
        }
        Ok(())
    }
}

/// `value-map`.
pub struct ValueMap {
    multiply: i64,
    add: i64,
}

impl ValueMap {
    /// Builds it from its config (`multiply`, default 2; `add`, default 0).
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, String> {
        let [multiply, add] = integers(map, [("multiply", 2), ("add", 0)])?;
        Ok(ValueMap { multiply, add })
    }
}

impl Operator for ValueMap {
    fn process_batch(
        &mut self,
        records: &[Record],
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        for r in records {
            let mut r = r.clone();
            if let Value::I64(v) = &mut r.value {
                *v = v.wrapping_mul(self.multiply).wrapping_add(self.add);
            }
            out.emit(r)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_taskmanager::api::record::Key;

    fn m(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn filter_and_map() {
        let f = KeyFilter::from_map(&m(&[("modulo", "3"), ("keep", "1")])).unwrap();
        let kept: Vec<u64> = (0..10).filter(|k| f.keeps(&Record::new_i64(&u64::to_be_bytes(*k), 1))).collect();
        assert_eq!(kept, vec![1, 4, 7]);
        assert!(f.keeps(&Record::new(Key::from_slice(b"word"), Value::Unit)), "other keys pass");
        for bad in [vec![("modulo", "0")], vec![("keep", "2")], vec![("modulus", "2")], vec![("modulo", "x")]] {
            assert!(KeyFilter::from_map(&m(&bad)).is_err(), "{bad:?}");
        }
        let map = ValueMap::from_map(&m(&[("multiply", "3"), ("add", "-1")])).unwrap();
        assert_eq!((map.multiply, map.add), (3, -1));
        assert!(ValueMap::from_map(&m(&[("times", "2")])).is_err());
    }
}
