//! Stateless user kinds for the stateless-pipeline benchmark (`scripts/bench.sh --stateless`): `key-filter` keeps
//! the records whose key, an 8-byte big-endian number as `datagen` makes them, leaves `keep` modulo `modulo`
//! (other keys pass), and `value-map` maps an integer value `v` to `v · multiply + add` (wrapping; other values
//! pass unchanged). Neither keeps state.

use arrow_array::{Array, ArrayRef, BooleanArray, Int64Array, RecordBatch};
use arrow_buffer::BooleanBuffer;
use std::sync::Arc;
use weir_common::job::kind::{
    field, field_err, ConfigField, ConfigFieldError, ConfigReader, KindInfo, OperatorConfig, Role,
};
use weir_taskmanager::api::batch::{keys, VALUE};
use weir_taskmanager::api::operator::{Collector, Operator, OperatorError, ProcessContext};

/// The filter's kind name.
pub const FILTER_KIND: &str = "key-filter";
/// The map's kind name.
pub const MAP_KIND: &str = "value-map";

/// The description of a stateless operator kind.
pub fn kind_info(kind: &str) -> KindInfo {
    KindInfo::new(kind, Role::Operator, false, env!("CARGO_PKG_VERSION"))
        .with_fields(if kind == FILTER_KIND { FILTER_FIELDS } else { MAP_FIELDS })
        .with_output(weir_common::job::schema::OutputSchema::SameAsInput)
}

/// The config fields of `key-filter`.
pub const FILTER_FIELDS: &[ConfigField] = &[
    field("modulo", "keys are kept by their value modulo this (default 2)"),
    field("keep", "the remainder kept, 0 ≤ keep < modulo (default 0)"),
];
/// The config fields of `value-map`.
pub const MAP_FIELDS: &[ConfigField] =
    &[field("multiply", "the factor values are multiplied by (default 2)"), field("add", "added after (default 0)")];

/// Reads the integer fields of a config, each with its default, refusing unknown ones.
fn integers<const N: usize>(
    map: &OperatorConfig,
    known: &'static [ConfigField],
    fields: [(&str, i64); N],
) -> Result<[i64; N], ConfigFieldError> {
    let r = ConfigReader::new(map, known)?;
    let mut out = [0; N];
    for (slot, (field, default)) in out.iter_mut().zip(fields) {
        *slot = r.i64(field)?.unwrap_or(default);
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
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let [modulo, keep] = integers(map, FILTER_FIELDS, [("modulo", 2), ("keep", 0)])?;
        if modulo < 1 || keep < 0 || keep >= modulo {
            let why = format!("need modulo ≥ 1 and 0 ≤ keep < modulo, got modulo {modulo}, keep {keep}");
            return Err(field_err(if modulo < 1 { "modulo" } else { "keep" }, why));
        }
        Ok(KeyFilter { modulo: modulo as u64, keep: keep as u64 })
    }

    fn keeps(&self, key: &[u8]) -> bool {
        <[u8; 8]>::try_from(key).map_or(true, |k| u64::from_be_bytes(k) % self.modulo == self.keep)
    }
}

impl Operator for KeyFilter {
    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        // A selection vector over the key column, then Arrow's filter kernel on the whole batch.
        let keys = keys(batch)?;
        let keep = BooleanArray::new(
            BooleanBuffer::collect_bool(keys.len(), |i| keys.is_null(i) || self.keeps(keys.value(i))),
            None,
        );
        let kept = arrow_select::filter::filter_record_batch(batch, &keep)
            .map_err(|e| OperatorError::Records(format!("key-filter: {e}")))?;
        out.emit_batch(kept)
    }
}

/// `value-map`.
pub struct ValueMap {
    multiply: i64,
    add: i64,
}

impl ValueMap {
    /// Builds it from its config (`multiply`, default 2; `add`, default 0).
    pub fn from_map(map: &OperatorConfig) -> Result<Self, ConfigFieldError> {
        let [multiply, add] = integers(map, MAP_FIELDS, [("multiply", 2), ("add", 0)])?;
        Ok(ValueMap { multiply, add })
    }
}

impl Operator for ValueMap {
    fn process_batch(
        &mut self,
        batch: &RecordBatch,
        _ctx: &mut ProcessContext<'_>,
        out: &mut Collector<'_>,
    ) -> Result<(), OperatorError> {
        // The value column computed anew in one pass; the other columns are shared with the input.
        let Some(i) = batch.schema().index_of(VALUE).ok() else { return out.emit_batch(batch.clone()) };
        let Some(values) = batch.column(i).as_any().downcast_ref::<Int64Array>() else {
            return out.emit_batch(batch.clone());
        };
        let (m, a) = (self.multiply, self.add);
        let mapped: Int64Array = values.unary(|v| v.wrapping_mul(m).wrapping_add(a));
        let mut columns = batch.columns().to_vec();
        columns[i] = Arc::new(mapped) as ArrayRef;
        let mapped = RecordBatch::try_new(batch.schema(), columns)
            .map_err(|e| OperatorError::Records(format!("value-map: {e}")))?;
        out.emit_batch(mapped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_taskmanager::api::batch::{batch_of, records};
    use weir_taskmanager::api::record::Record;

    fn m(pairs: &[(&str, &str)]) -> OperatorConfig {
        pairs.iter().map(|(k, v)| (k.to_string(), (*v).into())).collect()
    }

    #[test]
    fn filter_and_map() {
        let f = KeyFilter::from_map(&m(&[("modulo", "3"), ("keep", "1")])).unwrap();
        let kept: Vec<u64> = (0..10).filter(|k| f.keeps(&u64::to_be_bytes(*k))).collect();
        assert_eq!(kept, vec![1, 4, 7]);
        assert!(f.keeps(b"word"), "other keys pass");
        for bad in [vec![("modulo", "0")], vec![("keep", "2")], vec![("modulus", "2")], vec![("modulo", "x")]] {
            assert!(KeyFilter::from_map(&m(&bad)).is_err(), "{bad:?}");
        }
        let map = ValueMap::from_map(&m(&[("multiply", "3"), ("add", "-1")])).unwrap();
        assert_eq!((map.multiply, map.add), (3, -1));
        assert!(ValueMap::from_map(&m(&[("times", "2")])).is_err());
    }

    #[test]
    fn both_work_on_whole_batches() {
        use weir_taskmanager::api::operator::{Operator, RuntimeInfo};
        let info = RuntimeInfo {
            uid: "f".into(),
            job_id: "j".into(),
            attempt: 1,
            subtask: weir_common::ids::SubtaskIndex(0),
            parallelism: 1,
            max_parallelism: 128,
            key_group_range: weir_common::state::keygroup::KeyGroupRange { start: 0, end: 127 },
        };
        let input =
            batch_of(&(0..6u64).map(|k| Record::new_i64(&k.to_be_bytes(), k as i64).at(k as i64)).collect::<Vec<_>>())
                .unwrap();
        let mut got = Vec::new();
        let mut down = |b: RecordBatch| {
            got.extend(records(&b).unwrap());
            Ok(())
        };
        let mut f = KeyFilter::from_map(&m(&[("modulo", "3"), ("keep", "1")])).unwrap();
        let mut map = ValueMap::from_map(&m(&[("multiply", "10"), ("add", "1")])).unwrap();
        let mut filtered = Vec::new();
        let mut keep = |b: RecordBatch| {
            filtered.push(b);
            Ok(())
        };
        f.process_batch(&input, &mut ProcessContext::new(&info, None), &mut Collector::new(&mut keep)).unwrap();
        for b in &filtered {
            map.process_batch(b, &mut ProcessContext::new(&info, None), &mut Collector::new(&mut down)).unwrap();
        }
        let expected: Vec<Record> =
            [1u64, 4].iter().map(|&k| Record::new_i64(&k.to_be_bytes(), k as i64 * 10 + 1).at(k as i64)).collect();
        assert_eq!(got, expected);
    }
}
