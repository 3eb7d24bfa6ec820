//! Weir's own scalar functions, beside DataFusion's: `KEY_INT(key)` and `KEY_STRING(key)`, a keyed result's
//! grouping column read back from its key bytes (a `project`'s `key: id` writes an integer as its 8 big-endian
//! bytes, as `datagen` does, and a string as its UTF-8 bytes). How a window aggregate's `key` becomes the column
//! it was grouped by again.

use arrow_array::builder::{Int64Builder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use datafusion_common::{exec_err, Result, ScalarValue};
use datafusion_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility};
use std::sync::Arc;

/// What a key function reads its key as.
#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
pub enum KeyAs {
    /// `KEY_INT`: an 8-byte integer (null for a key of another length).
    Int,
    /// `KEY_STRING`: UTF-8 text (null for bytes that are not).
    String,
}

/// `KEY_INT(key)` or `KEY_STRING(key)`: the one column a key was made of.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct KeyColumn {
    reads: KeyAs,
    signature: Signature,
}

impl KeyColumn {
    /// The function reading a key as `reads`.
    pub fn new(reads: KeyAs) -> Self {
        KeyColumn { reads, signature: Signature::exact(vec![DataType::Binary], Volatility::Immutable) }
    }
}

fn key_int(bytes: &[u8]) -> Option<i64> {
    <[u8; 8]>::try_from(bytes).ok().map(i64::from_be_bytes)
}

impl ScalarUDFImpl for KeyColumn {
    fn name(&self) -> &str {
        match self.reads {
            KeyAs::Int => "key_int",
            KeyAs::String => "key_string",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(match self.reads {
            KeyAs::Int => DataType::Int64,
            KeyAs::String => DataType::Utf8,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = self.name().to_uppercase();
        let [arg] = args.args.as_slice() else {
            return exec_err!("{name} takes one argument");
        };
        let keys = match arg {
            ColumnarValue::Scalar(ScalarValue::Binary(b)) => {
                let b = b.as_deref();
                return Ok(ColumnarValue::Scalar(match self.reads {
                    KeyAs::Int => ScalarValue::Int64(b.and_then(key_int)),
                    KeyAs::String => ScalarValue::Utf8(b.and_then(|b| std::str::from_utf8(b).ok()).map(str::to_string)),
                }));
            }
            ColumnarValue::Scalar(other) => return exec_err!("{name} of a {}", other.data_type()),
            ColumnarValue::Array(a) => match a.as_binary_opt::<i32>() {
                Some(keys) => keys,
                None => return exec_err!("{name} of a {}", a.data_type()),
            },
        };
        let out: ArrayRef = match self.reads {
            KeyAs::Int => {
                let mut out = Int64Builder::with_capacity(keys.len());
                for i in 0..keys.len() {
                    out.append_option(if keys.is_null(i) { None } else { key_int(keys.value(i)) });
                }
                Arc::new(out.finish())
            }
            KeyAs::String => {
                let mut out = StringBuilder::with_capacity(keys.len(), keys.values().len());
                for i in 0..keys.len() {
                    out.append_option(if keys.is_null(i) { None } else { std::str::from_utf8(keys.value(i)).ok() });
                }
                Arc::new(out.finish())
            }
        };
        Ok(ColumnarValue::Array(out))
    }
}
