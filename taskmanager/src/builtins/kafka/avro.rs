//! `format: avro` of the `kafka` source and `kafka-sink`: Avro binary bodies of a flat record schema (checked at
//! submission, `crate::builtins::kafka::config::avro`) straight into Arrow builders and back, optionally framed in Confluent's
//! wire format. Written here rather than taken from `apache-avro` (whose `Value` allocates every field of every
//! record) or `arrow-avro` (a stream decoder that cannot tell which of a poll's records is malformed): the
//! encoding of primitives is a page of the Avro spec, and `apache-avro` checks both directions in the tests.
//!
//! A record is first read into slots (a value, or a range of the input for strings and bytes), then appended:
//! a malformed record leaves no half row behind, and a good one allocates nothing.

use super::json::Decoded;
use crate::builtins::kafka::config::avro::{AvroField, AvroKind, AvroSchema, AvroWire};
use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float32Builder, Float64Builder, Int32Builder, Int64Builder, StringBuilder,
    TimestampMillisecondBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Fields, TimeUnit};
use std::sync::Arc;

/// The Confluent wire format's header: a zero magic byte and a 4-byte schema id.
const CONFLUENT_HEADER: usize = 5;

/// The Arrow type a field of `kind` is read as.
fn arrow_type(kind: AvroKind) -> DataType {
    match kind {
        AvroKind::Boolean => DataType::Boolean,
        AvroKind::Int => DataType::Int32,
        AvroKind::Long => DataType::Int64,
        AvroKind::TimestampMillis => DataType::Timestamp(TimeUnit::Millisecond, None),
        AvroKind::Float => DataType::Float32,
        AvroKind::Double => DataType::Float64,
        AvroKind::String => DataType::Utf8,
        AvroKind::Bytes => DataType::Binary,
    }
}

/// One field's value in a record being read.
#[derive(Clone, Copy)]
enum Slot {
    Null,
    Bool(bool),
    Long(i64),
    Float(f32),
    Double(f64),
    /// A string's or bytes' range in the record's value.
    Range(usize, usize),
}

/// A column being built.
enum Builder {
    Bool(BooleanBuilder),
    Int(Int32Builder),
    Long(Int64Builder),
    Time(TimestampMillisecondBuilder),
    Float(Float32Builder),
    Double(Float64Builder),
    Str(StringBuilder),
    Bin(BinaryBuilder),
}

impl Builder {
    fn new(kind: AvroKind) -> Builder {
        match kind {
            AvroKind::Boolean => Builder::Bool(BooleanBuilder::new()),
            AvroKind::Int => Builder::Int(Int32Builder::new()),
            AvroKind::Long => Builder::Long(Int64Builder::new()),
            AvroKind::TimestampMillis => Builder::Time(TimestampMillisecondBuilder::new()),
            AvroKind::Float => Builder::Float(Float32Builder::new()),
            AvroKind::Double => Builder::Double(Float64Builder::new()),
            AvroKind::String => Builder::Str(StringBuilder::new()),
            AvroKind::Bytes => Builder::Bin(BinaryBuilder::new()),
        }
    }

    /// Appends a slot read for this builder's kind (the reader guarantees the match).
    fn append(&mut self, slot: Slot, value: &[u8]) {
        match (self, slot) {
            (Builder::Bool(b), Slot::Bool(v)) => b.append_value(v),
            (Builder::Int(b), Slot::Long(v)) => b.append_value(v as i32),
            (Builder::Long(b), Slot::Long(v)) => b.append_value(v),
            (Builder::Time(b), Slot::Long(v)) => b.append_value(v),
            (Builder::Float(b), Slot::Float(v)) => b.append_value(v),
            (Builder::Double(b), Slot::Double(v)) => b.append_value(v),
            // The reader checked the range is UTF-8.
            (Builder::Str(b), Slot::Range(s, e)) => b.append_value(std::str::from_utf8(&value[s..e]).unwrap_or("")),
            (Builder::Bin(b), Slot::Range(s, e)) => b.append_value(&value[s..e]),
            (b, _) => b.append_null(),
        }
    }

    fn append_null(&mut self) {
        match self {
            Builder::Bool(b) => b.append_null(),
            Builder::Int(b) => b.append_null(),
            Builder::Long(b) => b.append_null(),
            Builder::Time(b) => b.append_null(),
            Builder::Float(b) => b.append_null(),
            Builder::Double(b) => b.append_null(),
            Builder::Str(b) => b.append_null(),
            Builder::Bin(b) => b.append_null(),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Builder::Bool(b) => Arc::new(b.finish()),
            Builder::Int(b) => Arc::new(b.finish()),
            Builder::Long(b) => Arc::new(b.finish()),
            Builder::Time(b) => Arc::new(b.finish()),
            Builder::Float(b) => Arc::new(b.finish()),
            Builder::Double(b) => Arc::new(b.finish()),
            Builder::Str(b) => Arc::new(b.finish()),
            Builder::Bin(b) => Arc::new(b.finish()),
        }
    }
}

/// Reads a zigzag varint `long` at `pos`.
fn read_long(v: &[u8], pos: &mut usize) -> Result<i64, &'static str> {
    let mut n: u64 = 0;
    for shift in (0..64).step_by(7) {
        let Some(&b) = v.get(*pos) else { return Err("truncated") };
        *pos += 1;
        n |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok((n >> 1) as i64 ^ -((n & 1) as i64));
        }
    }
    Err("a varint longer than 10 bytes")
}

/// Writes `n` as a zigzag varint `long`.
fn write_long(n: i64, out: &mut Vec<u8>) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn take<'a>(v: &'a [u8], pos: &mut usize, n: usize) -> Result<&'a [u8], &'static str> {
    let end = pos.checked_add(n).filter(|&e| e <= v.len()).ok_or("truncated")?;
    let s = &v[*pos..end];
    *pos = end;
    Ok(s)
}

/// A record value that is not an Avro body of the schema (the reason a malformed record carries).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AvroRecordError {
    /// No Confluent header where one is expected.
    #[error("not in Confluent's wire format (no zero magic byte and schema id)")]
    NotConfluent,
    /// A Confluent header naming another schema than the configured one.
    #[error("written with schema id {found}, not {expected}")]
    SchemaId {
        /// The id the record carries.
        found: u32,
        /// The configured id.
        expected: u32,
    },
    /// A field that does not read.
    #[error("field {field:?}: {source}")]
    Field {
        /// The field.
        field: String,
        /// What is wrong with its bytes.
        #[source]
        source: AvroFieldError,
    },
    /// Bytes left over after the last field.
    #[error("{0} bytes after the record")]
    TrailingBytes(usize),
}

/// What is wrong with one field's bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AvroFieldError {
    /// The value ends early, or a varint runs on.
    #[error("{0}")]
    Malformed(&'static str),
    /// A union branch other than the two of a union with null.
    #[error("union branch {0} of a two-branch union")]
    UnionBranch(i64),
    /// A boolean byte other than 0 or 1.
    #[error("boolean byte {0}")]
    BooleanByte(u8),
    /// An `int` outside 32 bits.
    #[error("int {0} out of range")]
    IntOutOfRange(i64),
    /// A string or bytes of negative length.
    #[error("negative length {0}")]
    NegativeLength(i64),
    /// A string that is not UTF-8.
    #[error("a string that is not UTF-8")]
    NotUtf8,
}

/// Where the Avro body of `v` starts, once its framing is checked.
fn body_start(wire: AvroWire, v: &[u8]) -> Result<usize, AvroRecordError> {
    match wire {
        AvroWire::Plain => Ok(0),
        AvroWire::Confluent(id) => {
            if v.len() < CONFLUENT_HEADER || v[0] != 0 {
                return Err(AvroRecordError::NotConfluent);
            }
            let found = u32::from_be_bytes([v[1], v[2], v[3], v[4]]);
            match id {
                Some(id) if id != found => Err(AvroRecordError::SchemaId { found, expected: id }),
                _ => Ok(CONFLUENT_HEADER),
            }
        }
    }
}

/// Reads one record's fields into `slots`.
fn read_record(fields: &[AvroField], wire: AvroWire, v: &[u8], slots: &mut Vec<Slot>) -> Result<(), AvroRecordError> {
    slots.clear();
    let mut pos = body_start(wire, v)?;
    for f in fields {
        let why = |e: AvroFieldError| AvroRecordError::Field { field: f.name.clone(), source: e };
        let malformed = |e: &'static str| why(AvroFieldError::Malformed(e));
        if let Some(null) = f.null_branch {
            match read_long(v, &mut pos).map_err(malformed)? {
                b if b == i64::from(null) => {
                    slots.push(Slot::Null);
                    continue;
                }
                b if b == 1 - i64::from(null) => {}
                b => return Err(why(AvroFieldError::UnionBranch(b))),
            }
        }
        let slot = match f.kind {
            AvroKind::Boolean => match take(v, &mut pos, 1).map_err(malformed)?[0] {
                0 => Slot::Bool(false),
                1 => Slot::Bool(true),
                b => return Err(why(AvroFieldError::BooleanByte(b))),
            },
            AvroKind::Int => {
                let n = read_long(v, &mut pos).map_err(malformed)?;
                if i32::try_from(n).is_err() {
                    return Err(why(AvroFieldError::IntOutOfRange(n)));
                }
                Slot::Long(n)
            }
            AvroKind::Long | AvroKind::TimestampMillis => Slot::Long(read_long(v, &mut pos).map_err(malformed)?),
            AvroKind::Float => {
                let b = take(v, &mut pos, 4).map_err(malformed)?;
                Slot::Float(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            AvroKind::Double => {
                let b = take(v, &mut pos, 8).map_err(malformed)?;
                Slot::Double(f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            }
            AvroKind::String | AvroKind::Bytes => {
                let n = read_long(v, &mut pos).map_err(malformed)?;
                let n = usize::try_from(n).map_err(|_| why(AvroFieldError::NegativeLength(n)))?;
                let start = pos;
                let s = take(v, &mut pos, n).map_err(malformed)?;
                if f.kind == AvroKind::String && std::str::from_utf8(s).is_err() {
                    return Err(why(AvroFieldError::NotUtf8));
                }
                Slot::Range(start, pos)
            }
        };
        slots.push(slot);
    }
    if pos != v.len() {
        return Err(AvroRecordError::TrailingBytes(v.len() - pos));
    }
    Ok(())
}

/// A poll's Avro values, decoded as they come.
pub struct AvroRows {
    fields: Vec<AvroField>,
    arrow_fields: Fields,
    wire: AvroWire,
    builders: Vec<Builder>,
    slots: Vec<Slot>,
    /// Records pushed since the last clear.
    pushed: usize,
    /// The malformed ones: index, why, and their value as it was (for a dead letter).
    bad: Vec<(usize, String)>,
    bad_values: Vec<Option<Vec<u8>>>,
}

impl AvroRows {
    /// Rows of `schema`'s fields, framed as `wire` says.
    pub fn new(schema: &AvroSchema, wire: AvroWire) -> AvroRows {
        let arrow_fields: Fields =
            schema.fields.iter().map(|f| Field::new(&f.name, arrow_type(f.kind), f.null_branch.is_some())).collect();
        AvroRows {
            builders: schema.fields.iter().map(|f| Builder::new(f.kind)).collect(),
            fields: schema.fields.clone(),
            arrow_fields,
            wire,
            slots: Vec::with_capacity(schema.fields.len()),
            pushed: 0,
            bad: Vec::new(),
            bad_values: Vec::new(),
        }
    }

    /// The Arrow fields of the schema's columns.
    pub fn fields(&self) -> &Fields {
        &self.arrow_fields
    }

    /// Decodes the next record's value (`None`: a tombstone, which is malformed).
    pub fn push(&mut self, value: Option<&[u8]>) {
        let i = self.pushed;
        self.pushed += 1;
        let Some(v) = value else {
            self.bad.push((i, "no value (a tombstone)".into()));
            self.bad_values.push(None);
            return;
        };
        match read_record(&self.fields, self.wire, v, &mut self.slots) {
            Ok(()) => {
                for (b, s) in self.builders.iter_mut().zip(&self.slots) {
                    b.append(*s, v);
                }
            }
            Err(why) => {
                // A malformed record's reason travels as text, to the job's error or a dead letter.
                self.bad.push((i, why.to_string()));
                self.bad_values.push(Some(v.to_vec()));
            }
        }
    }

    /// Malformed record `i`'s value, as it was (until [`AvroRows::clear`]); `None` for a good one or a tombstone.
    pub fn value(&self, i: usize) -> Option<&[u8]> {
        let at = self.bad.iter().position(|(b, _)| *b == i)?;
        self.bad_values[at].as_deref()
    }

    /// The columns of the good records pushed since the last clear, and the bad ones' reasons.
    pub fn decode(&mut self) -> Decoded {
        Decoded { columns: self.builders.iter_mut().map(Builder::finish).collect(), bad: self.bad.clone() }
    }

    /// Forgets the poll (after [`AvroRows::decode`] and any dead letters).
    pub fn clear(&mut self) {
        self.pushed = 0;
        self.bad.clear();
        self.bad_values.clear();
    }
}

/// How one field is written: its column and its kind.
struct Written {
    column: usize,
    kind: AvroKind,
    null_branch: Option<u8>,
    name: String,
}

/// Rows that cannot be written as Avro bodies of the record schema.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AvroWriteError {
    /// A field without a column of its name.
    #[error("field {field:?} of the Avro schema has no column (the rows have {})", .columns.join(", "))]
    NoColumn {
        /// The field.
        field: String,
        /// The rows' columns.
        columns: Vec<String>,
    },
    /// A field whose column is of another type than it is written from.
    #[error("field {field:?} is Avro {kind:?}, written from a {} column, but the column is {found}", .kind.column_type())]
    ColumnType {
        /// The field.
        field: String,
        /// Its Avro type.
        kind: AvroKind,
        /// The column's Arrow type.
        found: DataType,
    },
    /// A null in a field that is not a union with null.
    #[error("field {0:?} is not nullable, and the row's value is null")]
    NullInField(String),
}

/// Rows of one batch schema as Avro bodies of a record schema.
pub struct AvroWriter {
    wire: AvroWire,
    written: Vec<Written>,
}

impl AvroWriter {
    /// A writer of `schema`'s fields from rows of `batch`'s schema: every field needs a column of its name and
    /// type, or this says which does not have one.
    pub fn new(schema: &AvroSchema, wire: AvroWire, batch: &RecordBatch) -> Result<AvroWriter, AvroWriteError> {
        let s = batch.schema();
        let mut written = Vec::with_capacity(schema.fields.len());
        for f in &schema.fields {
            let column = s.index_of(&f.name).map_err(|_| AvroWriteError::NoColumn {
                field: f.name.clone(),
                columns: s.fields().iter().map(|f| f.name().clone()).collect(),
            })?;
            let found = s.field(column).data_type();
            if *found != arrow_type(f.kind) {
                return Err(AvroWriteError::ColumnType { field: f.name.clone(), kind: f.kind, found: found.clone() });
            }
            written.push(Written { column, kind: f.kind, null_branch: f.null_branch, name: f.name.clone() });
        }
        Ok(AvroWriter { wire, written })
    }

    /// Appends row `row` of `batch` to `out`, framed; a null in a field that is not a union with null is an
    /// error naming it.
    pub fn write_row(&self, batch: &RecordBatch, row: usize, out: &mut Vec<u8>) -> Result<(), AvroWriteError> {
        if let AvroWire::Confluent(id) = self.wire {
            out.push(0);
            out.extend_from_slice(&id.unwrap_or(0).to_be_bytes());
        }
        for w in &self.written {
            let col = batch.column(w.column);
            let valid = col.is_valid(row);
            match (w.null_branch, valid) {
                (Some(null), false) => {
                    write_long(i64::from(null), out);
                    continue;
                }
                (Some(null), true) => write_long(1 - i64::from(null), out),
                (None, false) => return Err(AvroWriteError::NullInField(w.name.clone())),
                (None, true) => {}
            }
            write_value(col.as_ref(), w.kind, row, out);
        }
        Ok(())
    }
}

fn write_value(col: &dyn Array, kind: AvroKind, row: usize, out: &mut Vec<u8>) {
    match kind {
        AvroKind::Boolean => out.push(u8::from(col.as_boolean().value(row))),
        AvroKind::Int => write_long(i64::from(col.as_primitive::<Int32Type>().value(row)), out),
        AvroKind::Long => write_long(col.as_primitive::<Int64Type>().value(row), out),
        AvroKind::TimestampMillis => write_long(col.as_primitive::<TimestampMillisecondType>().value(row), out),
        AvroKind::Float => out.extend_from_slice(&col.as_primitive::<Float32Type>().value(row).to_le_bytes()),
        AvroKind::Double => out.extend_from_slice(&col.as_primitive::<Float64Type>().value(row).to_le_bytes()),
        AvroKind::String => {
            let s = col.as_string::<i32>().value(row);
            write_long(s.len() as i64, out);
            out.extend_from_slice(s.as_bytes());
        }
        AvroKind::Bytes => {
            let b = col.as_binary::<i32>().value(row);
            write_long(b.len() as i64, out);
            out.extend_from_slice(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::types::Value;
    use proptest::prelude::*;

    const SCHEMA: &str = r#"{"type": "record", "name": "Bid", "fields": [
        {"name": "auction", "type": "long"},
        {"name": "bidder", "type": ["null", "string"]},
        {"name": "price", "type": ["double", "null"]},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "ok", "type": "boolean"},
        {"name": "n", "type": "int"},
        {"name": "f", "type": "float"},
        {"name": "raw", "type": "bytes"}]}"#;

    type Row = (i64, Option<String>, Option<f64>, i64, bool, i32, f32, Vec<u8>);

    /// The row as `apache-avro` writes it.
    fn encode(row: &Row) -> Vec<u8> {
        let schema = apache_avro::Schema::parse_str(SCHEMA).unwrap();
        let (auction, bidder, price, at, ok, n, f, raw) = row.clone();
        let value = Value::Record(vec![
            ("auction".into(), Value::Long(auction)),
            (
                "bidder".into(),
                Value::Union(u32::from(bidder.is_some()), Box::new(bidder.map_or(Value::Null, Value::String))),
            ),
            (
                "price".into(),
                match price {
                    Some(p) => Value::Union(0, Box::new(Value::Double(p))),
                    None => Value::Union(1, Box::new(Value::Null)),
                },
            ),
            ("at".into(), Value::TimestampMillis(at)),
            ("ok".into(), Value::Boolean(ok)),
            ("n".into(), Value::Int(n)),
            ("f".into(), Value::Float(f)),
            ("raw".into(), Value::Bytes(raw)),
        ]);
        apache_avro::to_avro_datum(&schema, value).unwrap()
    }

    fn row_strategy() -> impl Strategy<Value = Row> {
        (
            any::<i64>(),
            proptest::option::of(".{0,12}"),
            proptest::option::of(-1e12f64..1e12),
            any::<i64>(),
            any::<bool>(),
            any::<i32>(),
            -1e6f32..1e6,
            proptest::collection::vec(any::<u8>(), 0..16),
        )
    }

    fn rows_of(d: &Decoded, i: usize) -> Row {
        let c = &d.columns;
        (
            c[0].as_primitive::<Int64Type>().value(i),
            c[1].is_valid(i).then(|| c[1].as_string::<i32>().value(i).to_string()),
            c[2].is_valid(i).then(|| c[2].as_primitive::<Float64Type>().value(i)),
            c[3].as_primitive::<TimestampMillisecondType>().value(i),
            c[4].as_boolean().value(i),
            c[5].as_primitive::<Int32Type>().value(i),
            c[6].as_primitive::<Float32Type>().value(i),
            c[7].as_binary::<i32>().value(i).to_vec(),
        )
    }

    proptest! {
        #[test]
        fn what_apache_avro_writes_is_read_and_what_is_written_apache_avro_reads(rows in proptest::collection::vec(row_strategy(), 1..20)) {
            let schema = AvroSchema::parse(SCHEMA).unwrap();
            let mut r = AvroRows::new(&schema, AvroWire::Plain);
            for row in &rows {
                r.push(Some(&encode(row)));
            }
            let d = r.decode();
            prop_assert!(d.bad.is_empty());
            let read: Vec<Row> = (0..rows.len()).map(|i| rows_of(&d, i)).collect();
            prop_assert_eq!(&read, &rows);
            // Written back from the decoded columns, byte for byte what apache-avro wrote.
            let batch = RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(r.fields().clone())), d.columns).unwrap();
            let w = AvroWriter::new(&schema, AvroWire::Plain, &batch).unwrap();
            for (i, row) in rows.iter().enumerate() {
                let mut out = Vec::new();
                w.write_row(&batch, i, &mut out).unwrap();
                prop_assert_eq!(out, encode(row));
            }
        }
    }

    #[test]
    fn malformed_records_are_told_apart_and_leave_no_half_row() {
        let schema = AvroSchema::parse(SCHEMA).unwrap();
        let row: Row = (7, Some("ann".into()), None, 1000, true, -3, 1.5, vec![1, 2]);
        let good = encode(&row);
        let mut r = AvroRows::new(&schema, AvroWire::Confluent(Some(42)));
        let framed = |id: u32, body: &[u8]| {
            let mut v = vec![0];
            v.extend_from_slice(&id.to_be_bytes());
            v.extend_from_slice(body);
            v
        };
        r.push(Some(&framed(42, &good)));
        r.push(Some(&framed(42, &good[..good.len() - 1]))); // truncated in the last field
        r.push(Some(&good)); // no framing
        r.push(Some(&framed(41, &good))); // another schema
        r.push(None);
        let mut extra = framed(42, &good);
        extra.push(9);
        r.push(Some(&extra));
        let mut bad_union = framed(42, &good);
        bad_union[CONFLUENT_HEADER + 1] = 4; // bidder's branch 2 of two
        r.push(Some(&bad_union));
        r.push(Some(&framed(42, &good)));
        let d = r.decode();
        let bad: Vec<usize> = d.bad.iter().map(|(i, _)| *i).collect();
        assert_eq!(bad, [1, 2, 3, 4, 5, 6]);
        let why: Vec<&str> = d.bad.iter().map(|(_, w)| w.as_str()).collect();
        assert!(why[0].contains("field \"raw\": truncated"), "{why:?}");
        assert!(why[1].contains("Confluent"), "{why:?}");
        assert!(why[2].contains("schema id 41, not 42"), "{why:?}");
        assert!(why[3].contains("tombstone"), "{why:?}");
        assert!(why[4].contains("1 bytes after"), "{why:?}");
        assert!(why[5].contains("field \"bidder\": union branch 2"), "{why:?}");
        assert_eq!(r.value(2), Some(&good[..]));
        assert_eq!(r.value(4), None);
        assert_eq!(d.columns[0].len(), 2);
        assert_eq!((rows_of(&d, 0), rows_of(&d, 1)), (row.clone(), row));
        r.clear();
        r.push(Some(&framed(42, &good)));
        let d = r.decode();
        assert!(d.bad.is_empty() && d.columns[0].len() == 1);
    }

    #[test]
    fn the_writer_names_a_missing_or_mistyped_column_and_a_null_it_cannot_write() {
        let schema = AvroSchema::parse(
            r#"{"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}, {"name": "b", "type": "string"}]}"#,
        )
        .unwrap();
        let batch = |b: ArrayRef| {
            let a: ArrayRef = Arc::new(arrow_array::Int64Array::from(vec![Some(1), None]));
            RecordBatch::try_from_iter([("a", a), ("b", b)]).unwrap()
        };
        let strings: ArrayRef = Arc::new(arrow_array::StringArray::from(vec!["x", "y"]));
        let ints: ArrayRef = Arc::new(arrow_array::Int32Array::from(vec![1, 2]));
        let e = AvroWriter::new(&schema, AvroWire::Plain, &batch(ints)).err().unwrap().to_string();
        assert!(e.contains("field \"b\"") && e.contains("Int32"), "{e}");
        let only_a =
            RecordBatch::try_from_iter([("a", Arc::new(arrow_array::Int64Array::from(vec![1])) as ArrayRef)]).unwrap();
        assert!(AvroWriter::new(&schema, AvroWire::Plain, &only_a).err().unwrap().to_string().contains("no column"));
        let b = batch(strings);
        let w = AvroWriter::new(&schema, AvroWire::Confluent(Some(5)), &b).unwrap();
        let mut out = Vec::new();
        w.write_row(&b, 0, &mut out).unwrap();
        assert_eq!(out, [0, 0, 0, 0, 5, 2, 2, b'x']);
        assert!(w.write_row(&b, 1, &mut out).unwrap_err().to_string().contains("field \"a\" is not nullable"));
    }
}
