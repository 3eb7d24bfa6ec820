//! Records as Arrow record batches: the columns the runtime knows by name, the key/value shape the built-in
//! kinds use, and how an operator reads rows of it and builds batches of it.
//!
//! Every batch has an event-time column, [`EVENT_TIME`] (`Timestamp(ms)`, null where a source gave no time).
//! A batch on a key-by edge has a [`KEY`] column (`Binary`, the serialized key by which it is partitioned), and
//! the runtime adds [`KEY_GROUP`] to it when it routes the batch, so a keyed operator never hashes a key again.
//! Column names that start with `_` are the runtime's: sinks do not write them.
//!
//! The key/value shape is `key: Binary`, `value: Int64 | Binary` (nullable; null is [`Value::Unit`]) and the
//! event time: what `datagen` and `keyed-count` produce and what [`Record`] is a row of. Other shapes are read
//! and written column by column, or as typed structs ([`crate::api::rows`]).

use crate::api::error::OperatorError;
use crate::api::record::{Key, Record, Value};
use arrow_array::builder::{ArrayBuilder, BinaryBuilder, Int64Builder, TimestampMillisecondBuilder};
use arrow_array::{Array, ArrayRef, BinaryArray, Int64Array, RecordBatch, TimestampMillisecondArray, UInt16Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use std::sync::{Arc, OnceLock};

/// The record key column: serialized key bytes.
pub const KEY: &str = "key";
/// The key/value shape's value column.
pub const VALUE: &str = "value";
/// The event-time column, in every batch: milliseconds since the epoch, null where none was assigned.
pub const EVENT_TIME: &str = "_event_time";
/// The key group of each row, added by the runtime on key-by edges.
pub const KEY_GROUP: &str = "_key_group";
/// The change a row of an updating result makes (`Int8`, [`RowKind`]): absent in append-only batches.
pub const OP: &str = "_op";

/// The change a row of an updating result (a changelog) makes, as Flink's `RowKind`: stored in the [`OP`]
/// column as its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    /// A new row (`+I`).
    Insert = 0,
    /// The row before an update, retracted (`-U`).
    UpdateBefore = 1,
    /// The row after an update (`+U`).
    UpdateAfter = 2,
    /// A row retracted for good (`-D`).
    Delete = 3,
}

impl RowKind {
    /// The kind an [`OP`] value stands for.
    pub fn from_i8(v: i8) -> Option<RowKind> {
        Some(match v {
            0 => RowKind::Insert,
            1 => RowKind::UpdateBefore,
            2 => RowKind::UpdateAfter,
            3 => RowKind::Delete,
            _ => return None,
        })
    }

    /// Its short form, as Flink's changelog formats write it.
    pub fn short(self) -> &'static str {
        match self {
            RowKind::Insert => "+I",
            RowKind::UpdateBefore => "-U",
            RowKind::UpdateAfter => "+U",
            RowKind::Delete => "-D",
        }
    }

    /// Whether the row is taken back (`-U`, `-D`).
    pub fn retracts(self) -> bool {
        matches!(self, RowKind::UpdateBefore | RowKind::Delete)
    }
}

/// The [`OP`] column's field.
pub fn op_field() -> Field {
    Field::new(OP, DataType::Int8, false)
}

/// Whether a column is the runtime's (sinks skip it).
pub fn is_system_column(name: &str) -> bool {
    name.starts_with('_')
}

/// The event-time column's field.
pub fn event_time_field() -> Field {
    Field::new(EVENT_TIME, DataType::Timestamp(TimeUnit::Millisecond, None), true)
}

/// The type of a key/value batch's value column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// Integers ([`Value::I64`]).
    I64,
    /// Bytes ([`Value::Bytes`]).
    Bytes,
}

/// The key/value schema with values of type `t` (one shared instance per type, so batches compare cheaply).
pub fn key_value_schema(t: ValueType) -> SchemaRef {
    static I64: OnceLock<SchemaRef> = OnceLock::new();
    static BYTES: OnceLock<SchemaRef> = OnceLock::new();
    let build = |dt: DataType| {
        Arc::new(Schema::new(vec![
            Field::new(KEY, DataType::Binary, false),
            Field::new(VALUE, dt, true),
            event_time_field(),
        ]))
    };
    match t {
        ValueType::I64 => I64.get_or_init(|| build(DataType::Int64)).clone(),
        ValueType::Bytes => BYTES.get_or_init(|| build(DataType::Binary)).clone(),
    }
}

/// The schema with a key-group column appended (what a key-by edge sends).
pub(crate) fn with_key_group(schema: &Schema) -> SchemaRef {
    let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
    fields.push(Arc::new(Field::new(KEY_GROUP, DataType::UInt16, false)));
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// A batch's event-time column, if it has one of the right type.
pub fn event_times(batch: &RecordBatch) -> Option<&TimestampMillisecondArray> {
    batch.column_by_name(EVENT_TIME)?.as_any().downcast_ref()
}

/// A batch's key column, or an error naming what is missing.
pub fn keys(batch: &RecordBatch) -> Result<&BinaryArray, OperatorError> {
    let col = batch.column_by_name(KEY).ok_or_else(|| {
        OperatorError::Records(format!("the batch has no {KEY:?} column (schema {})", batch.schema()))
    })?;
    col.as_any()
        .downcast_ref()
        .ok_or_else(|| OperatorError::Records(format!("the {KEY:?} column is {}, not Binary", col.data_type())))
}

/// Makes the key of row `i` (of a batch's [`keys`]) the backend's current key, with the key group the runtime
/// computed (the batch's [`key_groups`]) if there is one.
pub fn set_current_key_of_row(
    backend: &mut dyn weir_state::KeyedStateBackend,
    keys: &BinaryArray,
    groups: Option<&UInt16Array>,
    i: usize,
) {
    match groups {
        Some(g) => backend.set_current_key_in_group(keys.value(i), u32::from(g.value(i))),
        None => backend.set_current_key(keys.value(i)),
    }
}

/// A batch's key groups, as the runtime computed them when it routed the batch (absent off a key-by edge).
pub fn key_groups(batch: &RecordBatch) -> Option<&UInt16Array> {
    batch.column_by_name(KEY_GROUP)?.as_any().downcast_ref()
}

/// A batch's value column, typed.
#[derive(Debug, Clone, Copy)]
pub enum ValueColumn<'a> {
    /// No value column: every row's value is [`Value::Unit`].
    None,
    /// Integers.
    I64(&'a Int64Array),
    /// Bytes.
    Bytes(&'a BinaryArray),
}

/// A key/value batch read row by row without copying: the key, the key group the runtime computed, the value
/// and the event time of each row.
#[derive(Debug, Clone, Copy)]
pub struct KvRows<'a> {
    keys: &'a BinaryArray,
    groups: Option<&'a UInt16Array>,
    values: ValueColumn<'a>,
    times: Option<&'a TimestampMillisecondArray>,
}

impl<'a> KvRows<'a> {
    /// The rows of `batch`, which must have a [`KEY`] column; a [`VALUE`] column other than `Int64` or `Binary`
    /// is an error.
    pub fn new(batch: &'a RecordBatch) -> Result<Self, OperatorError> {
        let values = match batch.column_by_name(VALUE) {
            None => ValueColumn::None,
            Some(c) => match c.data_type() {
                DataType::Int64 => ValueColumn::I64(c.as_any().downcast_ref().ok_or_else(|| bad_value(c))?),
                DataType::Binary => ValueColumn::Bytes(c.as_any().downcast_ref().ok_or_else(|| bad_value(c))?),
                _ => return Err(bad_value(c)),
            },
        };
        Ok(KvRows { keys: keys(batch)?, groups: key_groups(batch), values, times: event_times(batch) })
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Row `i`'s key.
    pub fn key(&self, i: usize) -> &'a [u8] {
        self.keys.value(i)
    }

    /// Row `i`'s key group, when the runtime computed it (rows off a key-by edge).
    pub fn key_group(&self, i: usize) -> Option<u32> {
        self.groups.map(|g| g.value(i) as u32)
    }

    /// Makes row `i`'s key the backend's current key, with the key group the runtime computed if there is one.
    pub fn set_current_key(&self, backend: &mut dyn weir_state::KeyedStateBackend, i: usize) {
        set_current_key_of_row(backend, self.keys, self.groups, i);
    }

    /// The value column.
    pub fn values(&self) -> ValueColumn<'a> {
        self.values
    }

    /// Row `i`'s integer value, if the value column holds integers and the row's is not null.
    pub fn value_i64(&self, i: usize) -> Option<i64> {
        match self.values {
            ValueColumn::I64(v) if v.is_valid(i) => Some(v.value(i)),
            _ => None,
        }
    }

    /// Row `i`'s value.
    pub fn value(&self, i: usize) -> Value {
        match self.values {
            ValueColumn::I64(v) if v.is_valid(i) => Value::I64(v.value(i)),
            ValueColumn::Bytes(v) if v.is_valid(i) => Value::Bytes(v.value(i).to_vec()),
            _ => Value::Unit,
        }
    }

    /// Row `i`'s event time.
    pub fn timestamp(&self, i: usize) -> Option<i64> {
        self.times.and_then(|t| t.is_valid(i).then(|| t.value(i)))
    }

    /// Row `i` as an owned record (copies a bytes value).
    pub fn record(&self, i: usize) -> Record {
        Record { key: Key::from_slice(self.key(i)), value: self.value(i), timestamp: self.timestamp(i) }
    }

    /// Every row as an owned record.
    pub fn records(&self) -> impl Iterator<Item = Record> + '_ {
        (0..self.len()).map(|i| self.record(i))
    }
}

fn bad_value(c: &ArrayRef) -> OperatorError {
    OperatorError::Records(format!("the {VALUE:?} column is {}, not Int64 or Binary", c.data_type()))
}

/// The rows of a key/value batch as owned records.
pub fn records(batch: &RecordBatch) -> Result<Vec<Record>, OperatorError> {
    Ok(KvRows::new(batch)?.records().collect())
}

enum Values {
    /// Only unit values so far: how many.
    Units(usize),
    I64(Int64Builder),
    Bytes(BinaryBuilder),
}

/// Builds key/value batches row by row: what [`crate::api::operator::Collector::emit`] and sources that push
/// [`Record`]s fill. The value column's type is the first non-unit value's; a batch mixing integer and bytes
/// values is an error (an edge has one schema).
pub struct RecordsBuilder {
    keys: BinaryBuilder,
    values: Values,
    times: TimestampMillisecondBuilder,
    capacity: usize,
}

impl RecordsBuilder {
    /// A builder with room for `capacity` rows.
    pub fn with_capacity(capacity: usize) -> Self {
        RecordsBuilder {
            keys: BinaryBuilder::with_capacity(capacity, capacity * 8),
            values: Values::Units(0),
            times: TimestampMillisecondBuilder::with_capacity(capacity),
            capacity,
        }
    }

    /// Rows so far.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.keys.len() == 0
    }

    /// Adds a row with an integer value.
    #[inline]
    pub fn push_i64(&mut self, key: &[u8], value: i64, timestamp: Option<i64>) -> Result<(), OperatorError> {
        match &mut self.values {
            Values::I64(b) => b.append_value(value),
            Values::Units(n) => {
                let mut b = Int64Builder::with_capacity(self.capacity.max(*n + 1));
                b.append_nulls(*n);
                b.append_value(value);
                self.values = Values::I64(b);
            }
            Values::Bytes(_) => return Err(mixed()),
        }
        self.keys.append_value(key);
        self.times.append_option(timestamp);
        Ok(())
    }

    /// Adds a row with a bytes value.
    pub fn push_bytes(&mut self, key: &[u8], value: &[u8], timestamp: Option<i64>) -> Result<(), OperatorError> {
        match &mut self.values {
            Values::Bytes(b) => b.append_value(value),
            Values::Units(n) => {
                let mut b = BinaryBuilder::with_capacity(self.capacity.max(*n + 1), value.len() * self.capacity);
                b.append_nulls(*n);
                b.append_value(value);
                self.values = Values::Bytes(b);
            }
            Values::I64(_) => return Err(mixed()),
        }
        self.keys.append_value(key);
        self.times.append_option(timestamp);
        Ok(())
    }

    /// Adds a record.
    pub fn push(&mut self, r: &Record) -> Result<(), OperatorError> {
        match &r.value {
            Value::I64(v) => self.push_i64(&r.key, *v, r.timestamp),
            Value::Bytes(b) => self.push_bytes(&r.key, b, r.timestamp),
            Value::Unit => {
                match &mut self.values {
                    Values::Units(n) => *n += 1,
                    Values::I64(b) => b.append_null(),
                    Values::Bytes(b) => b.append_null(),
                }
                self.keys.append_value(&r.key);
                self.times.append_option(r.timestamp);
                Ok(())
            }
        }
    }

    /// The rows so far as a batch (`None` when there are none); the builder is left empty, ready for more.
    pub fn finish(&mut self) -> Option<RecordBatch> {
        if self.is_empty() {
            return None;
        }
        // Builders start empty after `finish`: give the next batch its room up front instead of growing it
        // by doubling, row by row.
        let cap = self.capacity.max(self.len());
        let key_bytes = self.keys.values_slice().len();
        let keys = std::mem::replace(&mut self.keys, BinaryBuilder::with_capacity(cap, key_bytes)).finish();
        let (t, values): (ValueType, ArrayRef) = match &mut self.values {
            Values::Units(n) => (ValueType::I64, Arc::new(Int64Array::new_null(std::mem::take(n)))),
            Values::I64(b) => {
                (ValueType::I64, Arc::new(std::mem::replace(b, Int64Builder::with_capacity(cap)).finish()))
            }
            Values::Bytes(b) => {
                let bytes = b.values_slice().len();
                (ValueType::Bytes, Arc::new(std::mem::replace(b, BinaryBuilder::with_capacity(cap, bytes)).finish()))
            }
        };
        let times = std::mem::replace(&mut self.times, TimestampMillisecondBuilder::with_capacity(cap)).finish();
        let (keys, times): (ArrayRef, ArrayRef) = (Arc::new(keys), Arc::new(times));
        // The columns match the schema by construction.
        RecordBatch::try_new(key_value_schema(t), vec![keys, values, times]).ok()
    }
}

fn mixed() -> OperatorError {
    OperatorError::Records("one output mixed integer and bytes values (an edge has one schema)".into())
}

/// A key/value batch of `records` (for tests and small outputs).
pub fn batch_of(records: &[Record]) -> Result<RecordBatch, OperatorError> {
    let mut b = RecordsBuilder::with_capacity(records.len());
    for r in records {
        b.push(r)?;
    }
    Ok(b.finish().unwrap_or_else(|| RecordBatch::new_empty(key_value_schema(ValueType::I64))))
}

/// The integers of column `name` of `batch` (32- or 64-bit integers, or millisecond timestamps); `who` names the
/// operator in errors.
pub fn int_column(batch: &arrow_array::RecordBatch, name: &str, who: &str) -> Result<Vec<Option<i64>>, OperatorError> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type, TimestampMillisecondType};
    use arrow_schema::{DataType, TimeUnit};
    let col = batch.column_by_name(name).ok_or_else(|| OperatorError::Records(format!("{who}: no column {name:?}")))?;
    Ok(match col.data_type() {
        DataType::Int64 => col.as_primitive::<Int64Type>().iter().collect(),
        DataType::Int32 => col.as_primitive::<Int32Type>().iter().map(|v| v.map(i64::from)).collect(),
        DataType::Timestamp(TimeUnit::Millisecond, None) => {
            col.as_primitive::<TimestampMillisecondType>().iter().collect()
        }
        t => return Err(OperatorError::Records(format!("{who}: column {name:?} is {t}, not an integer"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_a_batch() {
        let recs = vec![
            Record::new_i64(&7u64.to_be_bytes(), 1),
            Record::new(Key::from_slice(b"u"), Value::Unit).at(5),
            Record::new_i64(b"user-1", -3).at(-5),
        ];
        let b = batch_of(&recs).unwrap();
        assert_eq!(b.schema(), key_value_schema(ValueType::I64));
        assert_eq!(records(&b).unwrap(), recs);
        let rows = KvRows::new(&b).unwrap();
        assert_eq!((rows.value_i64(0), rows.value_i64(1), rows.timestamp(2)), (Some(1), None, Some(-5)));
        assert_eq!(rows.key_group(0), None);

        let bytes = [Record::new(Key::from_slice(b"k"), Value::Bytes(b"a,b".to_vec())), Record::new_i64(b"k", 1)];
        let mut builder = RecordsBuilder::with_capacity(2);
        builder.push(&bytes[0]).unwrap();
        assert!(builder.push(&bytes[1]).unwrap_err().to_string().contains("mixed"));
        let b = builder.finish().unwrap();
        assert_eq!(records(&b).unwrap(), bytes[..1]);
        assert!(builder.finish().is_none());
    }

    #[test]
    fn a_batch_without_keys_is_refused_by_name() {
        let b = RecordBatch::try_from_iter(vec![("x", Arc::new(Int64Array::from(vec![1])) as ArrayRef)]).unwrap();
        assert!(KvRows::new(&b).unwrap_err().to_string().contains("no \"key\" column"));
    }
}
