//! Typed rows: an operator author reads a batch as Rust structs and emits structs, instead of working with
//! arrays (`serde_arrow` maps each struct field to the column of the same name).
//!
//! ```ignore
//! #[derive(Serialize, Deserialize)]
//! struct Bid { auction: u64, bidder: u64, price: u64, #[serde(rename = "_event_time")] time: Option<i64> }
//! for bid in rows::<Bid>(batch)? { … }
//! out.emit_rows(&[Out { … }])?;
//! ```
//!
//! A field named [`EVENT_TIME`] (an `Option<i64>`, through `#[serde(rename = "_event_time")]`) reads and writes
//! the row's event time; without one, emitted rows have none. Bytes fields (the [`crate::api::batch::KEY`]
//! column is `Binary`) take `#[serde(with = "serde_bytes")]`-style byte serialization or a `Vec<u8>`.

use crate::api::batch::{event_time_field, EVENT_TIME};
use crate::api::operator::{Collector, OperatorError};
use arrow_array::{new_null_array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use serde_arrow::schema::{SchemaLike, TracingOptions};
use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

fn arrow_error(what: &str, e: impl std::fmt::Display) -> OperatorError {
    OperatorError::Records(format!("{what}: {e}"))
}

/// The rows of `batch` as `T`s (columns the struct does not name are ignored).
pub fn rows<T: for<'de> Deserialize<'de>>(batch: &RecordBatch) -> Result<Vec<T>, OperatorError> {
    serde_arrow::from_record_batch(batch).map_err(|e| arrow_error("reading typed rows", e))
}

/// How rows of one type become a batch: the traced fields, and the schema with the event time.
struct RowSchema {
    fields: Vec<FieldRef>,
    schema: SchemaRef,
    has_event_time: bool,
}

/// The row schema of `T`, traced once per type: the trace is not free and the same types are emitted batch
/// after batch.
fn row_schema<T: for<'de> Deserialize<'de> + 'static>() -> Result<Arc<RowSchema>, OperatorError> {
    static CACHE: OnceLock<RwLock<HashMap<TypeId, Arc<RowSchema>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(s) = cache.read().get(&TypeId::of::<T>()) {
        return Ok(s.clone());
    }
    let options = TracingOptions::default()
        .strings_as_large_utf8(false)
        .bytes_as_large_binary(false)
        .sequence_as_large_list(false)
        .enums_without_data_as_strings(true);
    let traced = Vec::<FieldRef>::from_type::<T>(options).map_err(|e| arrow_error("tracing a row type", e))?;
    let mut has_event_time = false;
    let fields: Vec<FieldRef> = traced
        .into_iter()
        .map(|f| match f.name().as_str() {
            EVENT_TIME => {
                has_event_time = true;
                Arc::new(event_time_field())
            }
            crate::api::batch::KEY if matches!(f.data_type(), DataType::List(_)) => {
                Arc::new(Field::new(crate::api::batch::KEY, DataType::Binary, f.is_nullable()))
            }
            _ => f,
        })
        .collect();
    let mut all = fields.clone();
    if !has_event_time {
        all.push(Arc::new(event_time_field()));
    }
    let s = Arc::new(RowSchema { fields, schema: Arc::new(Schema::new(all)), has_event_time });
    cache.write().insert(TypeId::of::<T>(), s.clone());
    Ok(s)
}

/// `rows` as one batch of `T`'s schema (with the event-time column).
pub fn batch_of_rows<T>(rows: &[T]) -> Result<RecordBatch, OperatorError>
where
    T: Serialize + for<'de> Deserialize<'de> + 'static,
{
    let s = row_schema::<T>()?;
    let batch = serde_arrow::to_record_batch(&s.fields, &rows).map_err(|e| arrow_error("writing typed rows", e))?;
    if s.has_event_time {
        return Ok(batch);
    }
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    columns.push(new_null_array(&event_time_field().data_type().clone(), batch.num_rows()));
    RecordBatch::try_new(s.schema.clone(), columns).map_err(|e| arrow_error("writing typed rows", e))
}

impl Collector<'_> {
    /// Emits `rows` as one batch of `T`'s schema.
    pub fn emit_rows<T>(&mut self, rows: &[T]) -> Result<(), OperatorError>
    where
        T: Serialize + for<'de> Deserialize<'de> + 'static,
    {
        if rows.is_empty() {
            return Ok(());
        }
        self.emit_batch(batch_of_rows(rows)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::batch::{batch_of, event_times, KvRows};
    use crate::api::record::Record;
    use arrow_array::Array;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Bid {
        key: Vec<u8>,
        auction: u64,
        price: f64,
        channel: String,
        note: Option<String>,
        #[serde(rename = "_event_time")]
        time: Option<i64>,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Count {
        key: Vec<u8>,
        value: i64,
    }

    #[test]
    fn typed_rows_round_trip_with_their_event_time() {
        let bids = vec![
            Bid { key: b"a".to_vec(), auction: 1, price: 2.5, channel: "web".into(), note: None, time: Some(7) },
            Bid { key: vec![0, 1], auction: 2, price: 0.0, channel: "app".into(), note: Some("x".into()), time: None },
        ];
        let batch = batch_of_rows(&bids).unwrap();
        assert_eq!(batch.schema().field_with_name("key").unwrap().data_type(), &DataType::Binary);
        assert_eq!(batch.schema().field_with_name("channel").unwrap().data_type(), &DataType::Utf8);
        let times = event_times(&batch).unwrap();
        assert_eq!((times.value(0), times.is_null(1)), (7, true));
        assert_eq!(rows::<Bid>(&batch).unwrap(), bids);
        // The key/value view reads the same batch's key column.
        assert_eq!(KvRows::new(&batch).unwrap().key(1), &[0, 1]);

        let mut got = Vec::new();
        let mut down = |b: RecordBatch| {
            got.push(b);
            Ok(())
        };
        let mut out = Collector::new(&mut down);
        out.emit_rows(&[Count { key: b"k".to_vec(), value: 3 }]).unwrap();
        out.flush().unwrap();
        // A struct without the event-time field gets a null one, and reads as a key/value record.
        assert_eq!(got.len(), 1);
        assert!(event_times(&got[0]).unwrap().is_null(0));
        assert_eq!(crate::api::batch::records(&got[0]).unwrap(), vec![Record::new_i64(b"k", 3)]);
        // Built key/value batches read as typed rows.
        let kv = batch_of(&[Record::new_i64(b"z", 9).at(4)]).unwrap();
        assert_eq!(rows::<Count>(&kv).unwrap(), vec![Count { key: b"z".to_vec(), value: 9 }]);
    }
}
