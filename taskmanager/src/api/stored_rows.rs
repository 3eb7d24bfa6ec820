//! Rows of a record batch as bytes for keyed state (a join's rows of each side, say), and back into columns.
//!
//! A stored row is its columns in schema order, each a presence byte (0: null) and, when present, the value:
//! little-endian fixed-width numbers (booleans one byte, 32- and 64-bit integers, doubles, millisecond
//! timestamps, 128-bit decimals), or a 4-byte length and the bytes (strings, binary). The schema is not in the
//! row: whoever stores rows keeps the schema beside them ([`columns_text`] is a stable form of it to keep).

use crate::api::batch::{EVENT_TIME, KEY, KEY_GROUP};
use crate::api::error::OperatorError;
use arrow_array::builder::{
    ArrayBuilder, BinaryBuilder, BooleanBuilder, Decimal128Builder, Float64Builder, Int32Builder, Int64Builder,
    StringBuilder, TimestampMillisecondBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Float64Type, Int32Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use std::sync::Arc;

/// Whether rows with a column of type `t` can be stored.
pub fn storable(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Boolean
            | DataType::Int32
            | DataType::Int64
            | DataType::Float64
            | DataType::Decimal128(_, _)
            | DataType::Utf8
            | DataType::Binary
            | DataType::Timestamp(TimeUnit::Millisecond, None)
    )
}

/// A stable text form of a schema's columns (`name:type:nullable;…`), to keep beside stored rows and compare.
pub fn columns_text(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{}:{}:{}", f.name(), f.data_type(), f.is_nullable()))
        .collect::<Vec<_>>()
        .join(";")
}

/// The schema [`columns_text`] wrote, or why it cannot be read back.
pub fn schema_from_text(text: &str) -> Result<SchemaRef, OperatorError> {
    let bad = || OperatorError::UnreadableState(format!("stored columns {text:?} cannot be read"));
    let mut fields = Vec::new();
    for part in text.split(';').filter(|p| !p.is_empty()) {
        let mut it = part.rsplitn(3, ':');
        let (nullable, t, name) = (it.next().ok_or_else(bad)?, it.next().ok_or_else(bad)?, it.next().ok_or_else(bad)?);
        let dt = match t {
            "Boolean" => DataType::Boolean,
            "Int32" => DataType::Int32,
            "Int64" => DataType::Int64,
            "Float64" => DataType::Float64,
            "Utf8" => DataType::Utf8,
            "Binary" => DataType::Binary,
            "Timestamp(ms)" | "Timestamp(Millisecond, None)" => DataType::Timestamp(TimeUnit::Millisecond, None),
            d if d.starts_with("Decimal128(") => {
                let inner = d.trim_start_matches("Decimal128(").trim_end_matches(')');
                let (p, s) = inner.split_once(',').ok_or_else(bad)?;
                DataType::Decimal128(p.trim().parse().map_err(|_| bad())?, s.trim().parse().map_err(|_| bad())?)
            }
            _ => return Err(bad()),
        };
        fields.push(Field::new(name, dt, nullable == "true"));
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// The columns of the rows an operator keeps in state — all of an input's but its key and key group —,
/// learned from the first batch or restored, and checked against every later batch's: rows stored with one list
/// of columns cannot be read with another, so a changed input is refused with both lists.
#[derive(Debug, Default)]
pub struct KeptColumns {
    /// The columns rows are stored with, once known.
    pub stored: Option<SchemaRef>,
    seen: Option<(SchemaRef, Vec<usize>)>,
}

impl KeptColumns {
    /// The indexes in `schema` of the columns kept, and whether they were learned just now; `what` names the
    /// input in errors.
    pub fn of_batch(&mut self, what: &str, schema: &SchemaRef) -> Result<(Vec<usize>, bool), OperatorError> {
        if let Some((seen, idx)) = &self.seen {
            if seen == schema {
                return Ok((idx.clone(), false));
            }
        }
        let idx: Vec<usize> = (0..schema.fields().len())
            .filter(|&i| !matches!(schema.field(i).name().as_str(), KEY | KEY_GROUP))
            .collect();
        let own = Arc::new(schema.project(&idx).map_err(|e| OperatorError::Records(e.to_string()))?);
        if let Some(f) = own.fields().iter().find(|f| !storable(f.data_type())) {
            return Err(OperatorError::Records(format!(
                "{what}'s column {:?} is {}, which cannot be kept in state",
                f.name(),
                f.data_type()
            )));
        }
        let learned = match &self.stored {
            Some(stored) if columns_text(stored) != columns_text(&own) => {
                return Err(OperatorError::UnreadableState(format!(
                    "{what}'s columns changed since its rows were stored: they were [{}], they are [{}]; stored \
                     rows cannot be read with other columns (start the job without this state)",
                    columns_text(stored),
                    columns_text(&own)
                )))
            }
            Some(_) => false,
            None => {
                self.stored = Some(own);
                true
            }
        };
        self.seen = Some((schema.clone(), idx.clone()));
        Ok((idx, learned))
    }

    /// Restores the columns stored under `name` from union-state elements `<name>\t<columns>`.
    pub fn restore(&mut self, name: &str, elements: &[Vec<u8>]) -> Result<(), OperatorError> {
        for e in elements {
            let text =
                std::str::from_utf8(e).map_err(|_| OperatorError::UnreadableState("corrupt stored columns".into()))?;
            let Some((n, columns)) = text.split_once('\t') else {
                return Err(OperatorError::UnreadableState("corrupt stored columns".into()));
            };
            if n != name {
                continue;
            }
            let schema = schema_from_text(columns)?;
            match &self.stored {
                Some(known) if columns_text(known) != columns_text(&schema) => {
                    return Err(OperatorError::UnreadableState(format!(
                        "the restored state holds two column lists for {name}"
                    )))
                }
                _ => self.stored = Some(schema),
            }
        }
        Ok(())
    }

    /// The union-state element that [`KeptColumns::restore`] reads back, once the columns are known.
    pub fn element(&self, name: &str) -> Option<Vec<u8>> {
        self.stored.as_ref().map(|s| format!("{name}\t{}", columns_text(s)).into_bytes())
    }
}

/// Restores the kept columns of each input (`(name, columns)`) from union operator state `state`, as
/// [`snapshot_kept`] wrote them.
pub fn restore_kept(
    store: &mut weir_state::OperatorStateStore,
    state: &str,
    inputs: &mut [(&str, &mut KeptColumns)],
) -> Result<(), OperatorError> {
    let restored = store.union_list_state(state)?.clone();
    for (name, columns) in inputs.iter_mut() {
        columns.restore(name, &restored)?;
    }
    Ok(())
}

/// Writes the kept columns of each input (`(name, columns)`) into union operator state `state`, for a checkpoint.
pub fn snapshot_kept(
    store: &mut weir_state::OperatorStateStore,
    state: &str,
    inputs: &[(&str, &KeptColumns)],
) -> Result<(), OperatorError> {
    let list = store.union_list_state(state)?;
    list.clear();
    list.extend(inputs.iter().filter_map(|(name, columns)| columns.element(name)));
    Ok(())
}

/// Appends row `row` of `columns` to `out`.
pub fn encode_row(columns: &[ArrayRef], row: usize, out: &mut Vec<u8>) {
    for col in columns {
        if col.is_null(row) {
            out.push(0);
            continue;
        }
        out.push(1);
        match col.data_type() {
            DataType::Boolean => out.push(u8::from(col.as_boolean().value(row))),
            DataType::Int32 => out.extend_from_slice(&col.as_primitive::<Int32Type>().value(row).to_le_bytes()),
            DataType::Int64 => out.extend_from_slice(&col.as_primitive::<Int64Type>().value(row).to_le_bytes()),
            DataType::Float64 => out.extend_from_slice(&col.as_primitive::<Float64Type>().value(row).to_le_bytes()),
            DataType::Decimal128(_, _) => {
                out.extend_from_slice(&col.as_primitive::<Decimal128Type>().value(row).to_le_bytes())
            }
            DataType::Timestamp(_, _) => {
                out.extend_from_slice(&col.as_primitive::<TimestampMillisecondType>().value(row).to_le_bytes())
            }
            DataType::Utf8 => {
                let v = col.as_string::<i32>().value(row).as_bytes();
                out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                out.extend_from_slice(v);
            }
            DataType::Binary => {
                let v = col.as_binary::<i32>().value(row);
                out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                out.extend_from_slice(v);
            }
            // `storable` admits no other type; the caller checked.
            _ => {}
        }
    }
}

/// Encoded rows one after another in one buffer (no allocation per row): rows of a batch on their way into
/// state, or rows read out of it.
#[derive(Default)]
pub struct EncodedRows {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl EncodedRows {
    /// Forgets the rows, keeping the buffers.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// Appends row `row` of `columns`, encoded.
    pub fn push_row(&mut self, columns: &[ArrayRef], row: usize) {
        encode_row(columns, row, &mut self.bytes);
        self.ends.push(self.bytes.len());
    }

    /// Appends an encoded row.
    pub fn push(&mut self, encoded: &[u8]) {
        self.bytes.extend_from_slice(encoded);
        self.ends.push(self.bytes.len());
    }

    /// Keeps the first `n` rows.
    pub fn truncate(&mut self, n: usize) {
        self.ends.truncate(n);
        self.bytes.truncate(self.ends.last().copied().unwrap_or(0));
    }

    /// How many rows there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Row `i`.
    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// The rows, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// The rows as columns of `schema` (the kept columns they were stored with).
    pub fn decode(&self, schema: &SchemaRef) -> Result<Vec<ArrayRef>, OperatorError> {
        let mut b = RowsBuilder::new(schema.clone())?;
        for r in self.iter() {
            b.push(r)?;
        }
        Ok(b.finish())
    }
}

/// Builds columns of a schema from stored rows.
pub struct RowsBuilder {
    schema: SchemaRef,
    builders: Vec<Box<dyn ArrayBuilder>>,
}

fn corrupt(what: &str) -> OperatorError {
    OperatorError::UnreadableState(format!("a stored row is corrupt: {what}"))
}

fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8], OperatorError> {
    if bytes.len() < n {
        return Err(corrupt("it ends early"));
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Ok(head)
}

fn fixed<const N: usize>(bytes: &mut &[u8]) -> Result<[u8; N], OperatorError> {
    take(bytes, N)?.try_into().map_err(|_| corrupt("a short value"))
}

impl RowsBuilder {
    /// A builder of columns of `schema` (every type [`storable`]).
    pub fn new(schema: SchemaRef) -> Result<Self, OperatorError> {
        let mut builders: Vec<Box<dyn ArrayBuilder>> = Vec::with_capacity(schema.fields().len());
        for f in schema.fields() {
            builders.push(match f.data_type() {
                DataType::Boolean => Box::new(BooleanBuilder::new()),
                DataType::Int32 => Box::new(Int32Builder::new()),
                DataType::Int64 => Box::new(Int64Builder::new()),
                DataType::Float64 => Box::new(Float64Builder::new()),
                DataType::Decimal128(p, s) => Box::new(
                    Decimal128Builder::new()
                        .with_precision_and_scale(*p, *s)
                        .map_err(|e| OperatorError::Records(e.to_string()))?,
                ),
                DataType::Timestamp(TimeUnit::Millisecond, None) => Box::new(TimestampMillisecondBuilder::new()),
                DataType::Utf8 => Box::new(StringBuilder::new()),
                DataType::Binary => Box::new(BinaryBuilder::new()),
                other => return Err(OperatorError::Records(format!("rows with {other} values cannot be stored"))),
            });
        }
        Ok(RowsBuilder { schema, builders })
    }

    /// Appends one stored row.
    pub fn push(&mut self, mut bytes: &[u8]) -> Result<(), OperatorError> {
        let b = &mut bytes;
        for (builder, f) in self.builders.iter_mut().zip(self.schema.fields()) {
            let present = fixed::<1>(b)?[0] == 1;
            macro_rules! put {
                ($t:ty, $v:expr) => {{
                    let builder = builder.as_any_mut().downcast_mut::<$t>().ok_or_else(|| corrupt("a builder"))?;
                    if present {
                        builder.append_value($v);
                    } else {
                        builder.append_null();
                    }
                }};
            }
            match f.data_type() {
                DataType::Boolean => put!(BooleanBuilder, fixed::<1>(b)?[0] == 1),
                DataType::Int32 => put!(Int32Builder, i32::from_le_bytes(fixed(b)?)),
                DataType::Int64 => put!(Int64Builder, i64::from_le_bytes(fixed(b)?)),
                DataType::Float64 => put!(Float64Builder, f64::from_le_bytes(fixed(b)?)),
                DataType::Decimal128(_, _) => put!(Decimal128Builder, i128::from_le_bytes(fixed(b)?)),
                DataType::Timestamp(_, _) => put!(TimestampMillisecondBuilder, i64::from_le_bytes(fixed(b)?)),
                DataType::Utf8 => {
                    let v = if present {
                        let n = u32::from_le_bytes(fixed(b)?) as usize;
                        std::str::from_utf8(take(b, n)?).map_err(|_| corrupt("a string that is not UTF-8"))?
                    } else {
                        ""
                    };
                    put!(StringBuilder, v)
                }
                DataType::Binary => {
                    let v = if present {
                        let n = u32::from_le_bytes(fixed(b)?) as usize;
                        take(b, n)?
                    } else {
                        &[]
                    };
                    put!(BinaryBuilder, v)
                }
                _ => return Err(corrupt("a column type")),
            }
        }
        if !bytes.is_empty() {
            return Err(corrupt("bytes after the last column"));
        }
        Ok(())
    }

    /// The columns of the rows pushed since the last call.
    pub fn finish(&mut self) -> Vec<ArrayRef> {
        self.builders.iter_mut().map(|b| b.finish()).collect()
    }

    /// The columns of the rows pushed since the last call, but the event time (an output puts its own last).
    pub fn finish_without_event_time(&mut self) -> Vec<ArrayRef> {
        let columns = self.finish();
        columns.into_iter().zip(self.schema.fields()).filter(|(_, f)| f.name() != EVENT_TIME).map(|(c, _)| c).collect()
    }

    /// The rows pushed since the last call, as a batch.
    pub fn finish_batch(&mut self) -> Result<RecordBatch, OperatorError> {
        let columns = self.finish();
        RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| OperatorError::Records(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{BooleanArray, Decimal128Array, Int64Array, StringArray, TimestampMillisecondArray};

    #[test]
    fn rows_round_trip_with_nulls_and_so_does_the_schema() {
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("id", Arc::new(Int64Array::from(vec![Some(1), None, Some(-3)]))),
            ("name", Arc::new(StringArray::from(vec![Some("a,b"), Some(""), None]))),
            ("ok", Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)]))),
            (
                "eur",
                Arc::new(
                    Decimal128Array::from(vec![Some(181_600), None, Some(-1)]).with_precision_and_scale(23, 3).unwrap(),
                ),
            ),
            ("_event_time", Arc::new(TimestampMillisecondArray::from(vec![Some(5), Some(6), None]))),
        ];
        let batch = RecordBatch::try_from_iter_with_nullable(columns.into_iter().map(|(n, c)| (n, c, true))).unwrap();
        let schema = schema_from_text(&columns_text(&batch.schema())).unwrap();
        assert_eq!(schema, batch.schema());
        let mut b = RowsBuilder::new(schema).unwrap();
        let mut bytes = Vec::new();
        for row in [2, 0, 1] {
            bytes.clear();
            encode_row(batch.columns(), row, &mut bytes);
            b.push(&bytes).unwrap();
        }
        let back = b.finish_batch().unwrap();
        let want =
            arrow_select::take::take_record_batch(&batch, &arrow_array::UInt32Array::from(vec![2, 0, 1])).unwrap();
        assert_eq!(back, want);
        assert!(b.push(&bytes[..bytes.len() - 1]).is_err());
        assert!(schema_from_text("id:Float16:true").is_err());
    }
}
