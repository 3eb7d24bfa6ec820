//! Weir's own scalar functions, beside DataFusion's: `KEY_INT` and `KEY_STRING`, a keyed result's grouping
//! columns read back from its key bytes. How a window aggregate's `key` becomes the columns it was grouped by.
//!
//! A key of one column (`KEY_INT(key)`, `KEY_STRING(key)`) is an integer's 8 big-endian bytes (as `project`'s
//! `key: id` and `datagen` write it) or a string's UTF-8 bytes. A key of several columns is each in turn, strings
//! and bytes after their 4-byte length: `KEY_INT(key, layout, n)` reads the `n`th (from 1), `layout` saying how
//! long each part is — `i` 8 bytes (integers, timestamps), `d` 16 (decimals), `b` 1 (booleans), `s` a length
//! and that many bytes (strings, bytes) — comma-separated: `KEY_STRING(key, 'i,s', 2)`.

use arrow_array::builder::{Int64Builder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use datafusion_common::{exec_err, Result, ScalarValue};
use datafusion_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, TypeSignature, Volatility};
use std::sync::Arc;

/// What a key function reads its key as.
#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
pub enum KeyAs {
    /// `KEY_INT`: an 8-byte integer (null for a part of another length).
    Int,
    /// `KEY_STRING`: UTF-8 text (null for bytes that are not).
    String,
}

/// `KEY_INT(key [, layout, n])` or `KEY_STRING(key [, layout, n])`: a column a key was made of.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct KeyColumn {
    reads: KeyAs,
    signature: Signature,
}

impl KeyColumn {
    /// The function reading a key as `reads`.
    pub fn new(reads: KeyAs) -> Self {
        let signature = Signature::one_of(
            vec![
                TypeSignature::Exact(vec![DataType::Binary]),
                TypeSignature::Exact(vec![DataType::Binary, DataType::Utf8, DataType::Int64]),
            ],
            Volatility::Immutable,
        );
        KeyColumn { reads, signature }
    }
}

/// The most parts a layout may name (a bound on the work per row).
const MAX_PARTS: usize = 64;

/// How long a part of a key is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Fixed(usize),
    Prefixed,
}

/// A layout's parts, or why it is not one.
fn layout(text: &str) -> std::result::Result<Vec<Part>, String> {
    let parts: Vec<Part> = text
        .split(',')
        .map(|p| match p.trim() {
            "i" => Ok(Part::Fixed(8)),
            "d" => Ok(Part::Fixed(16)),
            "b" => Ok(Part::Fixed(1)),
            "s" => Ok(Part::Prefixed),
            other => Err(format!("`{other}` is not a key part (i, d, b or s)")),
        })
        .collect::<std::result::Result<_, _>>()?;
    if parts.len() > MAX_PARTS {
        return Err(format!("a key of {} parts: at most {MAX_PARTS}", parts.len()));
    }
    Ok(parts)
}

/// Part `n` (from 0) of a key of `parts`; `None` where the bytes are too short.
fn part<'a>(key: &'a [u8], parts: &[Part], n: usize) -> Option<&'a [u8]> {
    let mut at = 0usize;
    for (i, p) in parts.iter().enumerate() {
        let (start, len) = match p {
            Part::Fixed(len) => (at, *len),
            Part::Prefixed => {
                let bytes = key.get(at..at.checked_add(4)?)?;
                (at + 4, u32::from_be_bytes(bytes.try_into().ok()?) as usize)
            }
        };
        let end = start.checked_add(len)?;
        if i == n {
            return key.get(start..end);
        }
        at = end;
    }
    None
}

impl KeyColumn {
    fn read(&self, bytes: Option<&[u8]>) -> ScalarValue {
        match self.reads {
            KeyAs::Int => ScalarValue::Int64(bytes.and_then(|b| <[u8; 8]>::try_from(b).ok()).map(i64::from_be_bytes)),
            KeyAs::String => ScalarValue::Utf8(bytes.and_then(|b| std::str::from_utf8(b).ok()).map(str::to_string)),
        }
    }
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
        let (key, which) = match args.args.as_slice() {
            [key] => (key, None),
            [key, ColumnarValue::Scalar(ScalarValue::Utf8(Some(l))), ColumnarValue::Scalar(ScalarValue::Int64(Some(n)))] =>
            {
                let parts = match layout(l) {
                    Ok(p) => p,
                    Err(e) => return exec_err!("{name}: {e}"),
                };
                if *n < 1 || *n as usize > parts.len() {
                    return exec_err!("{name}: part {n} of a key of {} parts", parts.len());
                }
                (key, Some((parts, *n as usize - 1)))
            }
            _ => return exec_err!("{name} takes a key, or a key, a constant layout and a constant part number"),
        };
        let pick = |b: &[u8]| -> Option<Vec<u8>> {
            match &which {
                None => Some(b.to_vec()),
                Some((parts, n)) => part(b, parts, *n).map(<[u8]>::to_vec),
            }
        };
        let keys = match key {
            ColumnarValue::Scalar(ScalarValue::Binary(b)) => {
                return Ok(ColumnarValue::Scalar(self.read(b.as_deref().and_then(pick).as_deref())));
            }
            ColumnarValue::Scalar(other) => return exec_err!("{name} of a {}", other.data_type()),
            ColumnarValue::Array(a) => match a.as_binary_opt::<i32>() {
                Some(keys) => keys,
                None => return exec_err!("{name} of a {}", a.data_type()),
            },
        };
        let bytes = |i: usize| -> Option<&[u8]> {
            if keys.is_null(i) {
                return None;
            }
            let b = keys.value(i);
            match &which {
                None => Some(b),
                Some((parts, n)) => part(b, parts, *n),
            }
        };
        let out: ArrayRef = match self.reads {
            KeyAs::Int => {
                let mut out = Int64Builder::with_capacity(keys.len());
                for i in 0..keys.len() {
                    out.append_option(bytes(i).and_then(|b| <[u8; 8]>::try_from(b).ok()).map(i64::from_be_bytes));
                }
                Arc::new(out.finish())
            }
            KeyAs::String => {
                let mut out = StringBuilder::with_capacity(keys.len(), keys.values().len());
                for i in 0..keys.len() {
                    out.append_option(bytes(i).and_then(|b| std::str::from_utf8(b).ok()));
                }
                Arc::new(out.finish())
            }
        };
        Ok(ColumnarValue::Array(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn parts_are_found_by_the_layout_and_short_keys_read_as_null() {
        let name = b"ab";
        let k = key(&[&7i64.to_be_bytes(), &(name.len() as u32).to_be_bytes(), name, &[1]]);
        let parts = layout("i, s ,b").unwrap();
        assert_eq!(part(&k, &parts, 0), Some(&7i64.to_be_bytes()[..]));
        assert_eq!(part(&k, &parts, 1), Some(&name[..]));
        assert_eq!(part(&k, &parts, 2), Some(&[1u8][..]));
        assert_eq!(part(&k[..10], &parts, 1), None, "a length past the end");
        let huge = key(&[&7i64.to_be_bytes(), &u32::MAX.to_be_bytes()]);
        assert_eq!(part(&huge, &parts, 2), None);
        assert!(layout("i,x").unwrap_err().contains("`x`"));
        assert!(layout(&vec!["i"; MAX_PARTS + 1].join(",")).unwrap_err().contains("at most"));
    }
}
