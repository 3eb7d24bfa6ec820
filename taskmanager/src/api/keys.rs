//! Keys made of column values (`project`'s `key:`), as the bytes a key-by edge hashes and keyed state is stored
//! under. One part: an integer is its 8 big-endian bytes as an `int64` (so `key: id` keys as a `datagen` key
//! does, and `file-sink` writes it as a number), a string or bytes as they are, a boolean one byte, a timestamp
//! 8 bytes, a decimal its 16 unscaled bytes. Several parts: each in turn, strings and bytes after their length
//! (4 bytes), so that no two different tuples make the same key.

use super::error::OperatorError;
use arrow_array::builder::BinaryBuilder;
use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Int32Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, BinaryArray};
use arrow_schema::{DataType, TimeUnit};

/// The key column of `rows` rows whose key parts are `parts` (each a column of `rows` values).
pub fn encode_keys(parts: &[ArrayRef], rows: usize, builder: &mut BinaryBuilder) -> Result<BinaryArray, OperatorError> {
    let several = parts.len() > 1;
    let mut buf = Vec::with_capacity(16 * parts.len());
    for row in 0..rows {
        buf.clear();
        for (n, part) in parts.iter().enumerate() {
            if part.is_null(row) {
                return Err(OperatorError::Records(format!(
                    "key part {} is null in a row: a key cannot be null",
                    n + 1
                )));
            }
            let mut bytes = |b: &[u8]| {
                if several {
                    buf.extend_from_slice(&(b.len() as u32).to_be_bytes());
                }
                buf.extend_from_slice(b);
            };
            match part.data_type() {
                DataType::Int64 => buf.extend_from_slice(&part.as_primitive::<Int64Type>().value(row).to_be_bytes()),
                DataType::Int32 => {
                    buf.extend_from_slice(&i64::from(part.as_primitive::<Int32Type>().value(row)).to_be_bytes())
                }
                DataType::Timestamp(TimeUnit::Millisecond, _) => {
                    buf.extend_from_slice(&part.as_primitive::<TimestampMillisecondType>().value(row).to_be_bytes())
                }
                DataType::Decimal128(..) => {
                    buf.extend_from_slice(&part.as_primitive::<Decimal128Type>().value(row).to_be_bytes())
                }
                DataType::Boolean => buf.push(u8::from(part.as_boolean().value(row))),
                DataType::Utf8 => bytes(part.as_string::<i32>().value(row).as_bytes()),
                DataType::Binary => bytes(part.as_binary::<i32>().value(row)),
                other => return Err(OperatorError::Records(format!("a key cannot be made of {other} values"))),
            }
        }
        builder.append_value(&buf);
    }
    Ok(builder.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, Int64Array, StringArray};
    use std::sync::Arc;

    #[test]
    fn integers_key_as_int64_and_tuples_cannot_collide() {
        let mut b = BinaryBuilder::new();
        let ints: ArrayRef = Arc::new(Int32Array::from(vec![7]));
        let longs: ArrayRef = Arc::new(Int64Array::from(vec![7]));
        assert_eq!(
            encode_keys(&[ints], 1, &mut b).unwrap().value(0),
            encode_keys(&[longs], 1, &mut b).unwrap().value(0)
        );
        assert_eq!(
            encode_keys(&[Arc::new(Int64Array::from(vec![1])) as ArrayRef], 1, &mut b).unwrap().value(0),
            &[0, 0, 0, 0, 0, 0, 0, 1]
        );
        let a: ArrayRef = Arc::new(StringArray::from(vec!["ab", "a"]));
        let c: ArrayRef = Arc::new(StringArray::from(vec!["c", "bc"]));
        let k = encode_keys(&[a, c], 2, &mut b).unwrap();
        assert_ne!(k.value(0), k.value(1), "(ab, c) and (a, bc)");
        let nulls: ArrayRef = Arc::new(Int64Array::from(vec![None]));
        assert!(encode_keys(&[nulls], 1, &mut b).unwrap_err().to_string().contains("null"));
    }

    /// What `encode_keys` writes, SQL's `KEY_INT` and `KEY_STRING` read back (how a SQL window aggregate's
    /// grouping columns come out of its key): one part, and several.
    #[test]
    fn sql_key_functions_read_what_keys_are_made_of() {
        use arrow_array::RecordBatch;
        use arrow_schema::{Field, Schema};
        let ids: ArrayRef = Arc::new(Int64Array::from(vec![7, -1]));
        let names: ArrayRef = Arc::new(StringArray::from(vec!["ab", ""]));
        let flags: ArrayRef = Arc::new(arrow_array::BooleanArray::from(vec![true, false]));
        let mut b = BinaryBuilder::new();
        let one = encode_keys(std::slice::from_ref(&ids), 2, &mut b).unwrap();
        let three = encode_keys(&[ids.clone(), names.clone(), flags], 2, &mut b).unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("key", DataType::Binary, false)]));
        let read = |keys: &BinaryArray, text: &str| {
            let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(keys.clone())]).unwrap();
            let e = weir_sql::expr::compile(&weir_sql::expr::parse_expr(text).unwrap(), &schema).unwrap();
            e.evaluate(&batch).unwrap()
        };
        assert_eq!(&read(&one, "KEY_INT(key)"), &ids);
        assert_eq!(&read(&three, "KEY_INT(key, 'i,s,b', 1)"), &ids);
        assert_eq!(&read(&three, "KEY_STRING(key, 'i,s,b', 2)"), &names);
        let beyond = read(&three, "KEY_INT(key, 'i,s,b,i', 4)");
        assert_eq!(beyond.null_count(), 2, "a part past the key's end is null");
    }
}
