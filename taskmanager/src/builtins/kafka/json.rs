//! `format: json` of the `kafka` source: record values, JSON objects, into Arrow columns of the declared schema
//! (arrow-json's decoder). A poll's values are decoded together, in one pass; only if that fails (a record is
//! not an object of the schema) is each record decoded alone, to tell the malformed ones from the rest — the
//! slow path is for bad input only.

use arrow_array::{ArrayRef, RecordBatch};
use arrow_json::reader::{Decoder, ReaderBuilder};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;
use weir_common::job::schema::Column;

/// The most records a poll decodes at once.
const MAX_ROWS: usize = 1 << 16;

/// The Arrow type a JSON column of `t` is read as (the types the config allows: a column type, but for bytes and
/// decimals, which JSON has no form of).
pub(super) fn arrow_type(t: &str) -> Option<DataType> {
    weir_sql::expr::types::data_type(t).filter(|d| !matches!(d, DataType::Binary | DataType::Decimal128(..)))
}

/// Columns JSON values cannot be read into, or a value that is not one object of them.
#[derive(Debug, thiserror::Error)]
pub enum JsonRowsError {
    /// A column of a type the JSON decoder does not read.
    #[error("column {name:?}: type {data_type}")]
    ColumnType {
        /// The column.
        name: String,
        /// Its declared type.
        data_type: String,
    },
    /// The JSON decoder refused the schema or the value.
    #[error(transparent)]
    Arrow(#[from] arrow_schema::ArrowError),
    /// A record value holding several JSON values.
    #[error("more than one JSON value")]
    MoreThanOne,
    /// A record value holding none.
    #[error("no JSON value")]
    NoValue,
}

/// What a poll's values decoded to.
pub struct Decoded {
    /// The columns of the good records, in order.
    pub columns: Vec<ArrayRef>,
    /// The records that are not objects of the schema: index in the poll, and why.
    pub bad: Vec<(usize, String)>,
}

/// A poll's JSON values, gathered, then decoded.
pub struct JsonRows {
    schema: SchemaRef,
    decoder: Decoder,
    /// The values, each followed by a newline.
    buf: Vec<u8>,
    /// Where each value ends in `buf` (its newline excluded); `None` for a record without a value.
    ends: Vec<Option<usize>>,
}

impl JsonRows {
    /// Rows of `columns`.
    pub fn new(columns: &[Column]) -> Result<Self, JsonRowsError> {
        let mut fields = Vec::with_capacity(columns.len());
        for c in columns {
            let t = arrow_type(&c.data_type)
                .ok_or_else(|| JsonRowsError::ColumnType { name: c.name.clone(), data_type: c.data_type.clone() })?;
            fields.push(Field::new(&c.name, t, c.nullable));
        }
        let schema = Arc::new(Schema::new(fields));
        let decoder = Self::decoder(&schema)?;
        Ok(JsonRows { schema, decoder, buf: Vec::new(), ends: Vec::new() })
    }

    fn decoder(schema: &SchemaRef) -> Result<Decoder, JsonRowsError> {
        Ok(ReaderBuilder::new(schema.clone()).with_batch_size(MAX_ROWS).build_decoder()?)
    }

    /// The Arrow fields of the declared columns.
    pub fn fields(&self) -> &arrow_schema::Fields {
        self.schema.fields()
    }

    /// Gathers the next record's value (`None`: a tombstone, which is malformed).
    pub fn push(&mut self, value: Option<&[u8]>) {
        match value {
            Some(v) => {
                self.buf.extend_from_slice(v);
                self.ends.push(Some(self.buf.len()));
                self.buf.push(b'\n');
            }
            None => self.ends.push(None),
        }
    }

    /// Record `i`'s value, as gathered (until [`JsonRows::clear`]).
    pub fn value(&self, i: usize) -> Option<&[u8]> {
        let end = self.ends.get(i).copied().flatten()?;
        let start = self.ends[..i].iter().rev().find_map(|e| *e).map_or(0, |e| e + 1);
        Some(&self.buf[start..end])
    }

    /// Forgets the gathered values (after [`JsonRows::decode`]).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.ends.clear();
    }

    /// Decodes what was gathered since the last [`JsonRows::clear`].
    pub fn decode(&mut self) -> Decoded {
        let n = self.ends.len();
        let fast = if n <= MAX_ROWS && self.ends.iter().all(Option::is_some) {
            self.decode_all().filter(|b| b.num_rows() == n)
        } else {
            None
        };
        match fast {
            Some(batch) => Decoded { columns: batch.columns().to_vec(), bad: Vec::new() },
            None => self.decode_one_by_one(),
        }
    }

    /// Every value in one pass, or `None` if any of them is not an object of the schema.
    fn decode_all(&mut self) -> Option<RecordBatch> {
        let result = match self.decoder.decode(&self.buf) {
            Ok(used) if used == self.buf.len() => self.decoder.flush().ok().flatten(),
            _ => None,
        };
        if result.is_none() {
            // The decoder may hold half a row of the bad input: start afresh.
            self.decoder = Self::decoder(&self.schema).ok()?;
        }
        result
    }

    /// Each value alone: the good ones' columns and the bad ones' reasons.
    fn decode_one_by_one(&mut self) -> Decoded {
        let mut good = Vec::new();
        let mut bad = Vec::new();
        for i in 0..self.ends.len() {
            let Some(one) = self.value(i) else {
                bad.push((i, "no value (a tombstone)".to_string()));
                continue;
            };
            let result = Self::decoder(&self.schema).and_then(|mut d| {
                let used = d.decode(one)?;
                if used != one.len() {
                    return Err(JsonRowsError::MoreThanOne);
                }
                match d.flush()? {
                    Some(b) if b.num_rows() == 1 => Ok(b),
                    Some(b) if b.num_rows() > 1 => Err(JsonRowsError::MoreThanOne),
                    _ => Err(JsonRowsError::NoValue),
                }
            });
            match result {
                Ok(b) => good.push(b),
                // A malformed record's reason travels as text, to the job's error or a dead letter.
                Err(e) => bad.push((i, e.to_string())),
            }
        }
        let columns = match arrow_select::concat::concat_batches(&self.schema, &good) {
            Ok(b) => b.columns().to_vec(),
            Err(e) => {
                // Batches of one schema always concatenate; should they not, every record is reported.
                let why = e.to_string();
                return Decoded { columns: Vec::new(), bad: (0..self.ends.len()).map(|i| (i, why.clone())).collect() };
            }
        };
        Decoded { columns, bad }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;

    fn rows() -> JsonRows {
        JsonRows::new(&[Column::new("user", "utf8", false), Column::new("amount", "int64", true)]).unwrap()
    }

    #[test]
    fn good_values_decode_in_one_pass_with_extra_fields_ignored_and_absent_ones_null() {
        let mut r = rows();
        r.push(Some(br#"{"user": "ann", "amount": 5}"#));
        r.push(Some(br#"{"user": "bob", "ignored": [1, 2]}"#));
        let d = r.decode();
        assert!(d.bad.is_empty());
        assert_eq!(d.columns[0].as_string::<i32>().iter().collect::<Vec<_>>(), [Some("ann"), Some("bob")]);
        assert_eq!(d.columns[1].as_primitive::<Int64Type>().iter().collect::<Vec<_>>(), [Some(5), None]);
        r.clear();
        // The next poll starts empty.
        r.push(Some(br#"{"user": "cy"}"#));
        assert_eq!(r.decode().columns[0].len(), 1);
    }

    #[test]
    fn malformed_values_are_told_apart_and_the_rest_kept_in_order() {
        let mut r = rows();
        r.push(Some(br#"{"user": "ann", "amount": 1}"#));
        r.push(Some(b"not json"));
        r.push(Some(br#"{"amount": 2}"#)); // `user` is not nullable
        r.push(None);
        r.push(Some(br#"{"user": "dee", "amount": "many"}"#));
        r.push(Some(br#"{"user": "eve", "amount": 3}"#));
        let d = r.decode();
        assert_eq!(d.bad.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(
            (r.value(1), r.value(3), r.value(5)),
            (Some(&b"not json"[..]), None, Some(&br#"{"user": "eve", "amount": 3}"#[..]))
        );
        r.clear();
        assert!(d.bad[2].1.contains("tombstone"), "{:?}", d.bad);
        assert_eq!(d.columns[0].as_string::<i32>().iter().collect::<Vec<_>>(), [Some("ann"), Some("eve")]);
        // A bad poll leaves the decoder clean for the next.
        r.push(Some(br#"{"user": "fay", "amount": 4}"#));
        let d = r.decode();
        assert!(d.bad.is_empty());
        assert_eq!(d.columns[1].as_primitive::<Int64Type>().value(0), 4);
    }
}
