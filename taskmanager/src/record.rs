//! Records and their wire codec. A record is a key (its serialized bytes, by which it is partitioned) and a
//! value. Batches are encoded once per network frame: `u32 count`, then per record `u8 key length`, key,
//! `u8 value tag` and the value.

use smallvec::SmallVec;

/// A record's key: serialized bytes, inline up to 16 bytes.
pub type Key = SmallVec<[u8; 16]>;

/// A record's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// No value.
    Unit,
    /// A signed integer (counts, sums).
    I64(i64),
    /// Opaque bytes (user-defined encodings).
    Bytes(Vec<u8>),
}

/// One record flowing through a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Serialized key.
    pub key: Key,
    /// Value.
    pub value: Value,
}

impl Record {
    /// A record with an integer value.
    pub fn new_i64(key: &[u8], v: i64) -> Self {
        Record { key: Key::from_slice(key), value: Value::I64(v) }
    }

    /// The key as text for sinks: an 8-byte key as its unsigned big-endian number, else UTF-8 or hex.
    pub fn key_text(&self) -> String {
        let mut s = String::new();
        self.write_key_text(&mut s);
        s
    }

    /// Appends [`Record::key_text`] to `out` without allocating.
    pub fn write_key_text(&self, out: &mut String) {
        use std::fmt::Write;
        if let Ok(arr) = <[u8; 8]>::try_from(self.key.as_slice()) {
            let _ = write!(out, "{}", u64::from_be_bytes(arr));
            return;
        }
        match std::str::from_utf8(&self.key) {
            Ok(s) => out.push_str(s),
            Err(_) => self.key.iter().for_each(|b| {
                let _ = write!(out, "{b:02x}");
            }),
        }
    }

    /// Appends the record as the line text sinks write: `key,value\n` (key as [`Record::key_text`], an integer
    /// value in decimal, bytes as UTF-8).
    pub fn write_text_line(&self, out: &mut String) {
        use std::fmt::Write;
        self.write_key_text(out);
        out.push(',');
        match &self.value {
            Value::Unit => {}
            Value::I64(v) => {
                let _ = write!(out, "{v}");
            }
            Value::Bytes(b) => out.push_str(&String::from_utf8_lossy(b)),
        }
        out.push('\n');
    }
}

/// A batch that cannot be decoded.
#[derive(Debug, thiserror::Error)]
#[error("corrupt record batch: {0}")]
pub struct CodecError(pub String);

const TAG_UNIT: u8 = 0;
const TAG_I64: u8 = 1;
const TAG_BYTES: u8 = 2;

/// Appends one record to an encoded batch body. Keys longer than 255 bytes are refused.
pub fn encode_record(r: &Record, out: &mut Vec<u8>) -> Result<(), CodecError> {
    let klen =
        u8::try_from(r.key.len()).map_err(|_| CodecError(format!("key of {} bytes is over 255", r.key.len())))?;
    out.push(klen);
    out.extend_from_slice(&r.key);
    match &r.value {
        Value::Unit => out.push(TAG_UNIT),
        Value::I64(v) => {
            out.push(TAG_I64);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Value::Bytes(b) => {
            out.push(TAG_BYTES);
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
    }
    Ok(())
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Result<&'a [u8], CodecError> {
    if buf.len() < n {
        return Err(CodecError(format!("needed {n} bytes, {} left", buf.len())));
    }
    let (head, tail) = buf.split_at(n);
    *buf = tail;
    Ok(head)
}

/// Decodes `count` records from a batch body, appending them to `out`.
pub fn decode_records(mut buf: &[u8], count: usize, out: &mut Vec<Record>) -> Result<(), CodecError> {
    out.reserve(count);
    for _ in 0..count {
        let klen = take(&mut buf, 1)?[0] as usize;
        let key = Key::from_slice(take(&mut buf, klen)?);
        let value = match take(&mut buf, 1)?[0] {
            TAG_UNIT => Value::Unit,
            TAG_I64 => {
                Value::I64(i64::from_le_bytes(take(&mut buf, 8)?.try_into().map_err(|_| CodecError("i64".into()))?))
            }
            TAG_BYTES => {
                let n = u32::from_le_bytes(take(&mut buf, 4)?.try_into().map_err(|_| CodecError("len".into()))?);
                Value::Bytes(take(&mut buf, n as usize)?.to_vec())
            }
            t => return Err(CodecError(format!("unknown value tag {t}"))),
        };
        out.push(Record { key, value });
    }
    if !buf.is_empty() {
        return Err(CodecError(format!("{} trailing bytes", buf.len())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_round_trip() {
        let recs = vec![
            Record::new_i64(&7u64.to_be_bytes(), 1),
            Record { key: Key::from_slice(b"user-1"), value: Value::Bytes(b"xyz".to_vec()) },
            Record { key: Key::new(), value: Value::Unit },
        ];
        let mut buf = Vec::new();
        for r in &recs {
            encode_record(r, &mut buf).unwrap();
        }
        let mut out = Vec::new();
        decode_records(&buf, 3, &mut out).unwrap();
        assert_eq!(out, recs);
        assert!(decode_records(&buf[..buf.len() - 1], 3, &mut Vec::new()).is_err());
        assert_eq!(recs[0].key_text(), "7");
        assert_eq!(recs[1].key_text(), "user-1");
        let mut line = String::new();
        recs[0].write_text_line(&mut line);
        recs[1].write_text_line(&mut line);
        assert_eq!(line, "7,1\nuser-1,xyz\n");
    }
}
