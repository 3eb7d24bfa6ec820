//! The formats sinks write ([`FileFormat`]), and rows as text lines (`file-sink`'s line formats; DESIGN §10): key/value rows as
//! `key,value`, other rows as every column in schema order, CSV with a header, or a JSON object per line. The
//! runtime's columns (`_event_time`, `_key_group`) are not written.

use crate::api::batch::{is_system_column, RowKind, KEY, OP, VALUE};
use crate::api::operator::OperatorError;
use crate::api::record::write_key_text;
use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, RecordBatch};
use arrow_schema::{DataType, SchemaRef, TimeUnit};
use std::fmt::Write;
use std::sync::Arc;

/// How `file-sink` writes rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FileFormat {
    /// `key,value` lines for key/value rows; other rows as their columns in schema order, comma-separated,
    /// RFC 4180 quoting where needed (DESIGN §10).
    #[default]
    Text,
    /// RFC 4180 CSV with a header line of column names in every file.
    Csv,
    /// A JSON object per line, by column name.
    Json,
    /// Apache Parquet, a file per checkpoint (snappy-compressed).
    Parquet,
}

/// Writes the rows of batches of one schema as lines.
pub struct LineWriter {
    schema: SchemaRef,
    format: FileFormat,
    /// The columns written: index and name (for JSON, the quoted name and its colon).
    columns: Vec<(usize, String)>,
    /// For JSON: each written column's name, quoted, with its colon.
    json_names: Vec<String>,
    /// The key column's index, written as key text.
    key_column: Option<usize>,
    /// An updating result's change column ([`OP`]): each row starts with its change (`+I,` …; JSON: `"op"`).
    op_column: Option<usize>,
    /// Key/value rows in the text format: `key,value` with no quoting, as Weir always wrote them.
    plain_key_value: bool,
    /// A cell's text before it is quoted (kept, so that writing a row allocates nothing once warm).
    cell: String,
}

impl LineWriter {
    /// A writer for rows of `batch`'s schema; a column of a type it cannot write is an error naming it.
    pub fn new(batch: &RecordBatch, format: FileFormat) -> Result<Self, OperatorError> {
        let schema = batch.schema();
        let mut columns = Vec::new();
        for (i, f) in schema.fields().iter().enumerate() {
            if is_system_column(f.name()) {
                continue;
            }
            if !writable(f.data_type()) {
                return Err(OperatorError::Records(format!(
                    "cannot write column {:?} of type {} as text",
                    f.name(),
                    f.data_type()
                )));
            }
            columns.push((i, f.name().clone()));
        }
        let names: Vec<&str> = columns.iter().map(|(_, n)| n.as_str()).collect();
        let plain_key_value = format == FileFormat::Text && names == [KEY, VALUE];
        let key_column = schema.index_of(KEY).ok();
        let op_column = schema.index_of(OP).ok().filter(|&i| schema.field(i).data_type() == &DataType::Int8);
        let json_names = columns
            .iter()
            .map(|(_, n)| {
                let mut quoted = String::new();
                push_json_string(n, &mut quoted);
                quoted.push(':');
                quoted
            })
            .collect();
        Ok(LineWriter {
            schema,
            format,
            columns,
            json_names,
            key_column,
            op_column,
            plain_key_value,
            cell: String::new(),
        })
    }

    /// Whether `batch` has the schema this writer was made for.
    pub fn writes(&self, batch: &RecordBatch) -> bool {
        let s = batch.schema();
        Arc::ptr_eq(&s, &self.schema) || s == self.schema
    }

    /// The line a file starts with (CSV's header), if any.
    pub fn header(&self) -> Option<String> {
        (self.format == FileFormat::Csv).then(|| {
            let mut line = String::new();
            if self.op_column.is_some() {
                line.push_str("op,");
            }
            for (n, (_, name)) in self.columns.iter().enumerate() {
                if n > 0 {
                    line.push(',');
                }
                push_csv(name, &mut line);
            }
            line.push('\n');
            line
        })
    }

    /// Appends row `row` of `batch` (of this writer's schema) to `out`, with its newline.
    pub fn write_row(&mut self, batch: &RecordBatch, row: usize, out: &mut String) {
        if self.format == FileFormat::Json {
            out.push('{');
        }
        if let Some(i) = self.op_column {
            let kind =
                RowKind::from_i8(batch.column(i).as_primitive::<Int8Type>().value(row)).unwrap_or(RowKind::Insert);
            match self.format {
                FileFormat::Json => {
                    out.push_str("\"op\":\"");
                    out.push_str(kind.short());
                    out.push_str("\",");
                }
                _ => {
                    out.push_str(kind.short());
                    out.push(',');
                }
            }
        }
        for (n, (i, _)) in self.columns.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            let col = batch.column(*i).as_ref();
            let is_key = self.key_column == Some(*i);
            match self.format {
                FileFormat::Json => {
                    out.push_str(&self.json_names[n]);
                    if col.is_null(row) {
                        out.push_str("null");
                        continue;
                    }
                    self.cell.clear();
                    match write_cell(col, row, is_key, &mut self.cell) {
                        true => push_json_string(&self.cell, out),
                        false => out.push_str(&self.cell),
                    }
                }
                _ if col.is_null(row) => {}
                FileFormat::Text if self.plain_key_value => {
                    write_cell(col, row, is_key, out);
                }
                FileFormat::Text | FileFormat::Csv | FileFormat::Parquet => {
                    self.cell.clear();
                    write_cell(col, row, is_key, &mut self.cell);
                    push_csv(&self.cell, out);
                }
            }
        }
        if self.format == FileFormat::Json {
            out.push('}');
        }
        out.push('\n');
    }
}

/// Whether [`write_cell`] writes values of type `t`.
fn writable(t: &DataType) -> bool {
    use DataType::*;
    match t {
        Boolean
        | Int8
        | Int16
        | Int32
        | Int64
        | UInt8
        | UInt16
        | UInt32
        | UInt64
        | Float32
        | Float64
        | Utf8
        | LargeUtf8
        | Utf8View
        | Binary
        | LargeBinary
        | Timestamp(_, _)
        | Decimal128(_, _)
        | Date32
        | Date64 => true,
        Dictionary(k, v) => matches!(**k, Int8 | Int16 | Int32 | Int64) && matches!(**v, Utf8),
        _ => false,
    }
}

/// Writes the (valid) value at `row` as text: numbers in decimal, timestamps and dates as epoch milliseconds,
/// a key as [`write_key_text`], other bytes as UTF-8 (lossy). Returns whether the value is text (JSON quotes it).
pub(crate) fn write_cell(col: &dyn Array, row: usize, is_key: bool, out: &mut String) -> bool {
    use DataType::*;
    macro_rules! num {
        ($t:ty) => {{
            let _ = write!(out, "{}", col.as_primitive::<$t>().value(row));
            false
        }};
    }
    match col.data_type() {
        Boolean => {
            out.push_str(if col.as_boolean().value(row) { "true" } else { "false" });
            false
        }
        Int8 => num!(Int8Type),
        Int16 => num!(Int16Type),
        Int32 => num!(Int32Type),
        Int64 => num!(Int64Type),
        UInt8 => num!(UInt8Type),
        UInt16 => num!(UInt16Type),
        UInt32 => num!(UInt32Type),
        UInt64 => num!(UInt64Type),
        Float32 => num!(Float32Type),
        Float64 => num!(Float64Type),
        // At its scale: `181.600`.
        Decimal128(_, _) => {
            out.push_str(&col.as_primitive::<Decimal128Type>().value_as_string(row));
            false
        }
        Date32 => {
            let _ = write!(out, "{}", col.as_primitive::<Date32Type>().value(row) as i64 * 86_400_000);
            false
        }
        Date64 => num!(Date64Type),
        Timestamp(unit, _) => {
            let ms = match unit {
                TimeUnit::Second => col.as_primitive::<TimestampSecondType>().value(row).saturating_mul(1000),
                TimeUnit::Millisecond => col.as_primitive::<TimestampMillisecondType>().value(row),
                TimeUnit::Microsecond => col.as_primitive::<TimestampMicrosecondType>().value(row) / 1000,
                TimeUnit::Nanosecond => col.as_primitive::<TimestampNanosecondType>().value(row) / 1_000_000,
            };
            let _ = write!(out, "{ms}");
            false
        }
        Utf8 => {
            out.push_str(col.as_string::<i32>().value(row));
            true
        }
        LargeUtf8 => {
            out.push_str(col.as_string::<i64>().value(row));
            true
        }
        Utf8View => {
            out.push_str(col.as_string_view().value(row));
            true
        }
        Binary | LargeBinary => {
            let bytes = match col.data_type() {
                Binary => col.as_binary::<i32>().value(row),
                _ => col.as_binary::<i64>().value(row),
            };
            if is_key {
                write_key_text(bytes, out);
                // A key that is a number stays one.
                return bytes.len() != 8;
            }
            out.push_str(&String::from_utf8_lossy(bytes));
            true
        }
        Dictionary(k, _) => {
            // The row's key, read in place (`writable` admits signed integer keys only).
            let (key, values) = match **k {
                Int8 => (col.as_dictionary::<Int8Type>().key(row), col.as_dictionary::<Int8Type>().values()),
                Int16 => (col.as_dictionary::<Int16Type>().key(row), col.as_dictionary::<Int16Type>().values()),
                Int32 => (col.as_dictionary::<Int32Type>().key(row), col.as_dictionary::<Int32Type>().values()),
                _ => (col.as_dictionary::<Int64Type>().key(row), col.as_dictionary::<Int64Type>().values()),
            };
            if let Some(key) = key.filter(|k| values.is_valid(*k)) {
                write_cell(values.as_ref(), key, false, out);
            }
            true
        }
        // `writable` admits no other type.
        _ => true,
    }
}

/// Appends `s` as one CSV field (RFC 4180: quoted, with quotes doubled, when it holds a comma, quote or line
/// break).
fn push_csv(s: &str, out: &mut String) {
    if !s.contains([',', '"', '\n', '\r']) {
        out.push_str(s);
        return;
    }
    out.push('"');
    for c in s.chars() {
        if c == '"' {
            out.push('"');
        }
        out.push(c);
    }
    out.push('"');
}

/// Appends `s` as a JSON string (quotes, `"` and `\\` escaped, control characters as `\\uXXXX`).
pub(crate) fn push_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Rows of `batches` as sorted text lines (`FileFormat::Text`), each ending in `@` and its event time: what
/// kinds' tests compare output by.
#[cfg(test)]
pub(crate) fn lines_of(batches: &[RecordBatch]) -> Vec<String> {
    let mut lines = Vec::new();
    for b in batches {
        let mut w = LineWriter::new(b, FileFormat::Text).expect("a batch the text format writes");
        let times =
            b.column_by_name(crate::api::batch::EVENT_TIME).map(|t| t.as_primitive::<TimestampMillisecondType>());
        for row in 0..b.num_rows() {
            let mut line = String::new();
            w.write_row(b, row, &mut line);
            let t = times.map_or(-1, |t| t.value(row));
            lines.push(format!("{}@{t}", line.trim_end()));
        }
    }
    lines.sort();
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::batch::batch_of;
    use crate::api::record::{Key, Record, Value};
    use arrow_array::{ArrayRef, Decimal128Array, Float64Array, Int64Array, StringArray, TimestampMillisecondArray};

    fn lines(batch: &RecordBatch, format: FileFormat) -> String {
        let mut w = LineWriter::new(batch, format).unwrap();
        let mut out = w.header().unwrap_or_default();
        for row in 0..batch.num_rows() {
            w.write_row(batch, row, &mut out);
        }
        out
    }

    #[test]
    fn key_value_rows_are_written_as_they_always_were() {
        let b = batch_of(&[Record::new_i64(&7u64.to_be_bytes(), 3).at(5), Record::new_i64(b"user-1", -1)]).unwrap();
        assert_eq!(lines(&b, FileFormat::Text), "7,3\nuser-1,-1\n");
        assert_eq!(lines(&b, FileFormat::Csv), "key,value\n7,3\nuser-1,-1\n");
        assert_eq!(lines(&b, FileFormat::Json), "{\"key\":7,\"value\":3}\n{\"key\":\"user-1\",\"value\":-1}\n");
        let b = batch_of(&[Record::new(Key::from_slice(b"k"), Value::Bytes(b"a,b".to_vec()))]).unwrap();
        assert_eq!(lines(&b, FileFormat::Text), "k,a,b\n", "bytes values unquoted, as before");
        assert_eq!(lines(&b, FileFormat::Csv), "key,value\nk,\"a,b\"\n");
    }

    #[test]
    fn other_rows_are_their_columns_in_schema_order_quoted_where_needed() {
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("key", Arc::new(arrow_array::BinaryArray::from_vec(vec![&1u64.to_be_bytes()]))),
            ("window_start", Arc::new(TimestampMillisecondArray::from(vec![1000]))),
            ("name", Arc::new(StringArray::from(vec![Some("say \"hi\", all")]))),
            ("price", Arc::new(Float64Array::from(vec![2.5]))),
            ("missing", Arc::new(Int64Array::from(vec![None]))),
            ("eur", Arc::new(Decimal128Array::from(vec![181_600]).with_precision_and_scale(23, 3).unwrap())),
            ("_event_time", Arc::new(TimestampMillisecondArray::from(vec![Some(9)]))),
        ];
        let b = RecordBatch::try_from_iter(columns).unwrap();
        assert_eq!(lines(&b, FileFormat::Text), "1,1000,\"say \"\"hi\"\", all\",2.5,,181.600\n");
        assert_eq!(
            lines(&b, FileFormat::Json),
            "{\"key\":1,\"window_start\":1000,\"name\":\"say \\\"hi\\\", all\",\"price\":2.5,\"missing\":null,\"eur\":181.600}\n"
        );
        let list = RecordBatch::try_from_iter(vec![(
            "l",
            Arc::new(arrow_array::ListArray::new_null(
                Arc::new(arrow_schema::Field::new("item", DataType::Int64, true)),
                1,
            )) as ArrayRef,
        )])
        .unwrap();
        let e = LineWriter::new(&list, FileFormat::Text).err().unwrap().to_string();
        assert!(e.contains("column \"l\""), "{e}");
    }
}
