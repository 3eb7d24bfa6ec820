//! A record as a row: a key (its serialized bytes, by which it is partitioned), a value and, when its source
//! assigned one, an event timestamp. Records travel as Arrow batches ([`crate::api::batch`]); this is the row
//! an operator reads from or adds to a key/value batch, and a compact codec for operators that keep records in
//! their state (`u8 key length`, key, `u8 value tag` — its high bit set when an `i64` timestamp follows —, the
//! timestamp and the value).

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
    /// Event time (ms since the epoch), if the source assigned one.
    pub timestamp: Option<i64>,
}

impl Record {
    /// A record with an integer value and no timestamp.
    pub fn new_i64(key: &[u8], v: i64) -> Self {
        Record { key: Key::from_slice(key), value: Value::I64(v), timestamp: None }
    }

    /// A record with a key and a value, and no timestamp.
    pub fn new(key: Key, value: Value) -> Self {
        Record { key, value, timestamp: None }
    }

    /// The same record with event time `timestamp`.
    pub fn at(mut self, timestamp: i64) -> Self {
        self.timestamp = Some(timestamp);
        self
    }

    /// The key as text for sinks: an 8-byte key as its unsigned big-endian number, else UTF-8 or hex.
    pub fn key_text(&self) -> String {
        let mut s = String::new();
        self.write_key_text(&mut s);
        s
    }

    /// Appends [`Record::key_text`] to `out` without allocating.
    pub fn write_key_text(&self, out: &mut String) {
        write_key_text(&self.key, out);
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

/// Appends a key as text for sinks: an 8-byte key as its unsigned big-endian number, else UTF-8 or hex.
pub fn write_key_text(key: &[u8], out: &mut String) {
    use std::fmt::Write;
    if let Ok(arr) = <[u8; 8]>::try_from(key) {
        let _ = write!(out, "{}", u64::from_be_bytes(arr));
        return;
    }
    match std::str::from_utf8(key) {
        Ok(s) => out.push_str(s),
        Err(_) => key.iter().for_each(|b| {
            let _ = write!(out, "{b:02x}");
        }),
    }
}

/// A batch that cannot be decoded.
#[derive(Debug, thiserror::Error)]
#[error("corrupt record batch: {0}")]
pub struct CodecError(pub String);

/// Fewest bytes one encoded record takes: its key length and value tag (an empty key and no value).
pub const MIN_ENCODED_RECORD: usize = 2;
/// Most records one batch may carry. Producers send at most the task's batch size (1024 records); the cap
/// bounds what a consumer allocates for a batch's records, whatever its header claims.
pub const MAX_BATCH_RECORDS: u32 = 1 << 16;

const TAG_UNIT: u8 = 0;
const TAG_I64: u8 = 1;
const TAG_BYTES: u8 = 2;
/// Set in the value tag when a timestamp follows it.
const TAG_TIMESTAMP: u8 = 0x80;

/// Appends one record to an encoded batch body. Keys longer than 255 bytes are refused.
pub fn encode_record(r: &Record, out: &mut Vec<u8>) -> Result<(), CodecError> {
    let klen =
        u8::try_from(r.key.len()).map_err(|_| CodecError(format!("key of {} bytes is over 255", r.key.len())))?;
    out.push(klen);
    out.extend_from_slice(&r.key);
    let tag = |t: u8, out: &mut Vec<u8>| match r.timestamp {
        None => out.push(t),
        Some(ts) => {
            out.push(t | TAG_TIMESTAMP);
            out.extend_from_slice(&ts.to_le_bytes());
        }
    };
    match &r.value {
        Value::Unit => tag(TAG_UNIT, out),
        Value::I64(v) => {
            tag(TAG_I64, out);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Value::Bytes(b) => {
            let len =
                u32::try_from(b.len()).map_err(|_| CodecError(format!("value of {} bytes is over 4 GiB", b.len())))?;
            tag(TAG_BYTES, out);
            out.extend_from_slice(&len.to_le_bytes());
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

/// Decodes an encoded body that claims `count` records: the count must fit the body (at
/// most [`MAX_BATCH_RECORDS`], each record at least [`MIN_ENCODED_RECORD`] bytes), so a corrupt count is an
/// error instead of sizing an allocation.
pub fn decode_batch(count: u32, body: &[u8]) -> Result<Vec<Record>, CodecError> {
    if count > MAX_BATCH_RECORDS || count as usize > body.len() / MIN_ENCODED_RECORD {
        return Err(CodecError(format!("{count} records claimed in {} bytes", body.len())));
    }
    let mut records = Vec::with_capacity(count as usize);
    decode_records(body, count as usize, &mut records)?;
    Ok(records)
}

/// Decodes `count` records from a batch body, appending them to `out`.
pub fn decode_records(mut buf: &[u8], count: usize, out: &mut Vec<Record>) -> Result<(), CodecError> {
    // Room for what the bytes can hold at most, not for what the count claims.
    out.reserve(count.min(buf.len() / MIN_ENCODED_RECORD));
    for _ in 0..count {
        let klen = take(&mut buf, 1)?[0] as usize;
        let key = Key::from_slice(take(&mut buf, klen)?);
        let tag = take(&mut buf, 1)?[0];
        let timestamp = if tag & TAG_TIMESTAMP != 0 {
            Some(i64::from_le_bytes(take(&mut buf, 8)?.try_into().map_err(|_| CodecError("timestamp".into()))?))
        } else {
            None
        };
        let value = match tag & !TAG_TIMESTAMP {
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
        out.push(Record { key, value, timestamp });
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
            Record::new(Key::from_slice(b"user-1"), Value::Bytes(b"xyz".to_vec())).at(-5),
            Record::new(Key::new(), Value::Unit).at(i64::MAX),
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

    #[test]
    fn a_count_the_bytes_cannot_hold_is_refused_before_allocating() {
        let mut body = Vec::new();
        encode_record(&Record::new_i64(b"k", 1), &mut body).unwrap();
        assert!(decode_batch(1, &body).is_ok());
        for count in [body.len() as u32 / 2 + 1, MAX_BATCH_RECORDS + 1, u32::MAX] {
            let e = decode_batch(count, &body).unwrap_err();
            assert!(e.to_string().contains("claimed"), "{e}");
        }
        let mut out = Vec::new();
        assert!(decode_records(&body, u32::MAX as usize, &mut out).is_err());
        assert!(
            out.capacity() <= body.len() / MIN_ENCODED_RECORD,
            "capacity {} for {} bytes",
            out.capacity(),
            body.len()
        );
    }

    fn record() -> impl Strategy<Value = Record> {
        let value = prop_oneof![
            Just(Value::Unit),
            any::<i64>().prop_map(Value::I64),
            vec(any::<u8>(), 0..64).prop_map(Value::Bytes),
        ];
        (prop_oneof![vec(any::<u8>(), 0..20), vec(any::<u8>(), 0..=255)], value, proptest::option::of(any::<i64>()))
            .prop_map(|(key, value, timestamp)| Record { key: Key::from_vec(key), value, timestamp })
    }

    use proptest::collection::vec;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_bytes_never_panic_nor_allocate_beyond_them(
            body in vec(any::<u8>(), 0..1024),
            count in prop_oneof![0u32..64, any::<u32>()],
        ) {
            let mut out = Vec::new();
            let decoded = decode_records(&body, count as usize, &mut out);
            prop_assert!(out.capacity() <= (body.len() / MIN_ENCODED_RECORD).max(4));
            if decoded.is_ok() {
                prop_assert_eq!(out.len(), count as usize);
            }
            if let Ok(records) = decode_batch(count, &body) {
                prop_assert_eq!(records.len(), count as usize);
                prop_assert!(records.capacity() <= body.len() / MIN_ENCODED_RECORD);
            }
        }

        #[test]
        fn valid_batches_round_trip(records in vec(record(), 0..50)) {
            let mut body = Vec::new();
            for r in &records {
                encode_record(r, &mut body).unwrap();
            }
            prop_assert_eq!(decode_batch(records.len() as u32, &body).unwrap(), records);
        }
    }
}
