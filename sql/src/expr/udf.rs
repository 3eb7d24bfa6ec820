//! Weir's own scalar functions, beside DataFusion's.

use arrow_array::builder::Int64Builder;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use datafusion_common::{exec_err, Result, ScalarValue};
use datafusion_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility};
use std::sync::Arc;

/// `KEY_INT(key)`: the integer a key made of one integer holds (a `project`'s `key: id` writes it as its 8
/// big-endian bytes, as `datagen` does); null for a key of another length. How a keyed result (a window
/// aggregate's `key`, say) gets its grouping column back.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct KeyInt {
    signature: Signature,
}

impl Default for KeyInt {
    fn default() -> Self {
        KeyInt { signature: Signature::exact(vec![DataType::Binary], Volatility::Immutable) }
    }
}

fn key_int(bytes: &[u8]) -> Option<i64> {
    <[u8; 8]>::try_from(bytes).ok().map(i64::from_be_bytes)
}

impl ScalarUDFImpl for KeyInt {
    fn name(&self) -> &str {
        "key_int"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [arg] = args.args.as_slice() else {
            return exec_err!("KEY_INT takes one argument");
        };
        match arg {
            ColumnarValue::Scalar(ScalarValue::Binary(b)) => {
                Ok(ColumnarValue::Scalar(ScalarValue::Int64(b.as_deref().and_then(key_int))))
            }
            ColumnarValue::Scalar(other) => exec_err!("KEY_INT of a {}", other.data_type()),
            ColumnarValue::Array(a) => {
                let Some(keys) = a.as_binary_opt::<i32>() else {
                    return exec_err!("KEY_INT of a {}", a.data_type());
                };
                let mut out = Int64Builder::with_capacity(keys.len());
                for i in 0..keys.len() {
                    out.append_option(if keys.is_null(i) { None } else { key_int(keys.value(i)) });
                }
                Ok(ColumnarValue::Array(Arc::new(out.finish()) as ArrayRef))
            }
        }
    }
}
