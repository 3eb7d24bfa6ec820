//! Arrow record batches as data-plane frame payloads: Arrow's IPC stream format, so a channel's frames are the
//! stream cut at message boundaries. The first frame of a channel carries the schema message; every later
//! frame carries exactly one record batch (preceded by the dictionary messages it needs, if any). A frame never
//! ends inside a message, so no decoder state outlives a frame but the schema and dictionaries. A producer whose
//! output schema changes sends a new schema frame, which starts the stream over.
//!
//! Decoding a corrupt frame is an error, never a panic: every length in a message is checked against the frame's
//! bytes before Arrow reads it (Arrow slices buffers without checking), and the body is read in place, so nothing
//! allocates by a declared size.

use super::frame::MAX_BATCH_ROWS;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_buffer::Buffer;
use arrow_ipc::reader::{read_dictionary, read_record_batch};
use arrow_ipc::writer::StreamWriter;
use arrow_ipc::MessageHeader;
use arrow_schema::{ArrowError, Schema, SchemaRef};
use std::collections::HashMap;
use std::sync::Arc;

/// Why a frame did not decode into what a channel expects.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// Arrow refused the bytes (or could not encode a batch).
    #[error("arrow ipc: {0}")]
    Arrow(#[from] ArrowError),
    /// The frame ended inside a message.
    #[error("a frame ended inside an arrow ipc message")]
    Incomplete,
    /// A frame held more than one record batch, or a batch before the schema.
    #[error("a frame held {0}")]
    Unexpected(&'static str),
}

/// Encodes the batches of one channel.
pub struct BatchEncoder {
    writer: StreamWriter<Vec<u8>>,
}

impl BatchEncoder {
    /// An encoder for batches of `schema`, and the channel's first frame (the schema message), whole.
    pub fn new(schema: &Schema) -> Result<(Self, Vec<u8>), BatchError> {
        let mut writer = StreamWriter::try_new(frame_start(), schema)?;
        let frame = finish(std::mem::replace(writer.get_mut(), frame_start()), 0);
        Ok((BatchEncoder { writer }, frame))
    }

    /// One batch as one frame's payload (for tests: [`BatchEncoder::encode_frames`] makes whole frames).
    #[cfg(test)]
    pub fn encode(&mut self, batch: &RecordBatch) -> Result<Vec<u8>, BatchError> {
        let frame = self.encode_one(batch)?;
        Ok(frame[FRAME_HEADER..].to_vec())
    }

    fn encode_one(&mut self, batch: &RecordBatch) -> Result<Vec<u8>, BatchError> {
        self.writer.write(batch)?;
        Ok(finish(std::mem::replace(self.writer.get_mut(), frame_start()), batch.num_rows() as u32))
    }

    /// `batch` as whole batch frames, written straight after the frame header: one frame, or, for a batch whose
    /// frame would pass [`super::frame::MAX_FRAME`] or [`MAX_BATCH_ROWS`], its halves' frames in turn.
    pub fn encode_frames(&mut self, batch: &RecordBatch) -> Result<Vec<Vec<u8>>, BatchError> {
        let mut frames = Vec::with_capacity(1);
        self.encode_split(batch, &mut frames)?;
        Ok(frames)
    }

    fn encode_split(&mut self, batch: &RecordBatch, frames: &mut Vec<Vec<u8>>) -> Result<(), BatchError> {
        let rows = batch.num_rows();
        if rows > MAX_BATCH_ROWS as usize {
            let half = rows / 2;
            self.encode_split(&batch.slice(0, half), frames)?;
            return self.encode_split(&batch.slice(half, rows - half), frames);
        }
        let frame = self.encode_one(batch)?;
        if frame.len() > super::frame::MAX_FRAME && rows > 1 {
            // Arrow writes a slice's buffers only, so each half is about half the bytes.
            let half = rows / 2;
            self.encode_split(&batch.slice(0, half), frames)?;
            return self.encode_split(&batch.slice(half, rows - half), frames);
        }
        frames.push(frame);
        Ok(())
    }
}

/// A batch frame's header: length, type and row count.
#[cfg(test)]
const FRAME_HEADER: usize = 9;

fn frame_start() -> Vec<u8> {
    let mut v = Vec::with_capacity(16 << 10);
    super::frame::begin_batch(&mut v);
    v
}

fn finish(mut frame: Vec<u8>, rows: u32) -> Vec<u8> {
    super::frame::finish_batch(&mut frame, rows);
    frame
}

/// Decodes the frames of one channel.
#[derive(Debug, Default)]
pub struct BatchDecoder {
    schema: Option<SchemaRef>,
    dictionaries: HashMap<i64, ArrayRef>,
}

/// The IPC stream's message prefix: a continuation marker, then the metadata's length.
const CONTINUATION: [u8; 4] = [0xFF; 4];
/// What IPC pads every message and buffer to.
const ALIGNMENT: usize = 8;

impl BatchDecoder {
    /// A decoder that has seen no frame.
    pub fn new() -> Self {
        Self::default()
    }

    /// The channel's schema, once its first frame was decoded.
    pub fn schema(&self) -> Option<&SchemaRef> {
        self.schema.as_ref()
    }

    /// Decodes one frame's payload: `None` for a schema frame (the channel's first, or one that starts the
    /// stream over with a new schema), the batch for every other.
    pub fn decode(&mut self, payload: Vec<u8>) -> Result<Option<RecordBatch>, BatchError> {
        // Arrow reads columns in place as typed slices, which needs 8-byte alignment: a frame's buffers sit at
        // multiples of 8 from its start, so the start must be too (the allocator's usually is; if not, copy).
        let frame = if payload.as_ptr().align_offset(ALIGNMENT) == 0 {
            Buffer::from(payload)
        } else {
            Buffer::from_slice_ref(&payload)
        };
        let schema_frame =
            matches!(next_message(&frame[..]), Ok((m, _, _)) if m.header_type() == MessageHeader::Schema);
        if schema_frame {
            self.schema = None;
            self.dictionaries.clear();
        }
        let mut rest = &frame[..];
        let mut batch = None;
        while !rest.is_empty() {
            let (message, body_at, body_len) = next_message(rest)?;
            if (frame.len() - rest.len() + body_at) % ALIGNMENT != 0 {
                return Err(BatchError::Arrow(ArrowError::IpcError("a message body off its 8-byte alignment".into())));
            }
            let body = frame.slice_with_length(frame.len() - rest.len() + body_at, body_len);
            let version = message.version();
            match message.header_type() {
                MessageHeader::Schema if schema_frame && self.schema.is_none() => {
                    let fb = message.header_as_schema().ok_or(BatchError::Unexpected("a schema without its header"))?;
                    // Arrow 59 reads a schema only with `fb_to_schema`, which panics on a field it cannot read.
                    self.schema = Some(Arc::new(guarded(|| Ok(arrow_ipc::convert::fb_to_schema(fb)))?));
                }
                MessageHeader::DictionaryBatch if !schema_frame && batch.is_none() => {
                    let schema =
                        self.schema.as_ref().ok_or(BatchError::Unexpected("a dictionary before the schema"))?;
                    let dict =
                        message.header_as_dictionary_batch().ok_or(BatchError::Unexpected("an empty dictionary"))?;
                    let data = dict.data().ok_or(BatchError::Unexpected("a dictionary without data"))?;
                    check_buffers(&data, body_len)?;
                    let dictionaries = &mut self.dictionaries;
                    guarded(|| read_dictionary(&body, dict, schema, dictionaries, &version))?;
                }
                MessageHeader::RecordBatch if !schema_frame && batch.is_none() => {
                    let schema =
                        self.schema.clone().ok_or(BatchError::Unexpected("a record batch before the schema"))?;
                    let rb = message.header_as_record_batch().ok_or(BatchError::Unexpected("an empty record batch"))?;
                    check_buffers(&rb, body_len)?;
                    let dictionaries = &self.dictionaries;
                    batch = Some(guarded(|| read_record_batch(&body, rb, schema, dictionaries, None, &version))?);
                }
                _ => return Err(BatchError::Unexpected("a message out of place")),
            }
            rest = &rest[body_at + body_len..];
        }
        match (schema_frame, batch) {
            (true, _) => Ok(None),
            (false, None) => Err(BatchError::Unexpected("no record batch")),
            (false, Some(b)) => Ok(Some(b)),
        }
    }
}

/// Runs one of Arrow's readers on checked bytes. Arrow validates what it builds, but a few of its checks panic
/// on corrupt lengths instead of failing (`Buffer::typed_data` on an offsets buffer whose length is not a
/// multiple of its type, reached from `ArrayData::validate`; `fb_to_schema` on a type it cannot read, as
/// arrow 59 has no fallible form of it); such a panic is this frame's error. The checks
/// above keep it rare: lengths, offsets and row counts are all checked first.
fn guarded<T>(read: impl FnOnce() -> Result<T, ArrowError>) -> Result<T, BatchError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)) {
        Ok(result) => Ok(result?),
        Err(_) => {
            Err(BatchError::Arrow(ArrowError::IpcError("corrupt record batch: arrow refused its buffers".into())))
        }
    }
}

/// The first message of `bytes`: its metadata, where its body starts and how long it is. Every length is checked
/// against the bytes there are, so a corrupt length is an error before anything is read or allocated.
fn next_message(bytes: &[u8]) -> Result<(arrow_ipc::Message<'_>, usize, usize), BatchError> {
    if bytes.len() < 8 || bytes[..4] != CONTINUATION {
        return Err(BatchError::Incomplete);
    }
    let meta_len = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) as usize;
    let meta = bytes.get(8..8 + meta_len).ok_or(BatchError::Incomplete)?;
    let message = arrow_ipc::root_as_message(meta)
        .map_err(|e| ArrowError::IpcError(format!("unreadable message metadata: {e}")))?;
    let body_len = usize::try_from(message.bodyLength()).map_err(|_| BatchError::Incomplete)?;
    if bytes.len() - 8 - meta_len < body_len {
        return Err(BatchError::Incomplete);
    }
    Ok((message, 8 + meta_len, body_len))
}

/// Checks that a record batch's buffers lie inside its body and that its row count is one its body can hold (a
/// row takes at least a bit of some buffer), before Arrow reads them: Arrow slices buffers without checking.
fn check_buffers(batch: &arrow_ipc::RecordBatch<'_>, body_len: usize) -> Result<(), BatchError> {
    let corrupt = |what: &str| BatchError::Arrow(ArrowError::IpcError(format!("corrupt record batch: {what}")));
    if batch.compression().is_some() {
        return Err(corrupt("compressed, which this version never sends"));
    }
    let rows = usize::try_from(batch.length()).map_err(|_| corrupt("a negative row count"))?;
    if rows > body_len.saturating_mul(8).saturating_add(8) {
        return Err(corrupt("more rows than its bytes can hold"));
    }
    for b in batch.buffers().into_iter().flatten() {
        let (Ok(offset), Ok(len)) = (usize::try_from(b.offset()), usize::try_from(b.length())) else {
            return Err(corrupt("a negative buffer offset or length"));
        };
        if offset.checked_add(len).is_none_or(|end| end > body_len) {
            return Err(corrupt("a buffer outside its body"));
        }
        if offset % ALIGNMENT != 0 {
            return Err(corrupt("a buffer off its 8-byte alignment"));
        }
    }
    for n in batch.nodes().into_iter().flatten() {
        if n.length() < 0 || n.null_count() < 0 || n.length() as usize > rows.max(body_len.saturating_mul(8)) {
            return Err(corrupt("a column longer than its bytes can hold"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::builder::StringDictionaryBuilder;
    use arrow_array::types::Int32Type;
    use arrow_array::{
        ArrayRef, BinaryArray, BooleanArray, Float64Array, Int64Array, StringArray, TimestampMillisecondArray,
        UInt64Array,
    };
    use arrow_schema::{DataType, Field, TimeUnit};
    use proptest::prelude::*;
    use std::sync::Arc;

    /// A batch with every column type records use: keys as bytes, numbers, text, a dictionary column, and a
    /// nullable event-time column.
    fn batch(rows: &[(Vec<u8>, i64, Option<i64>, String)]) -> RecordBatch {
        let mut dict = StringDictionaryBuilder::<Int32Type>::new();
        for (_, _, _, s) in rows {
            dict.append_value(if s.len() % 2 == 0 { "even" } else { "odd" });
        }
        let columns: Vec<(&str, ArrayRef, bool)> = vec![
            ("key", Arc::new(BinaryArray::from_iter_values(rows.iter().map(|r| r.0.as_slice()))), false),
            ("value", Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))), false),
            ("count", Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.1.unsigned_abs()))), false),
            ("ratio", Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.1 as f64 / 3.0))), false),
            ("flag", Arc::new(BooleanArray::from_iter(rows.iter().map(|r| Some(r.1 % 2 == 0)))), false),
            ("name", Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.3.as_str()))), false),
            ("parity", Arc::new(dict.finish()), false),
            ("event_time", Arc::new(TimestampMillisecondArray::from_iter(rows.iter().map(|r| r.2))) as ArrayRef, true),
        ];
        RecordBatch::try_from_iter_with_nullable(columns).unwrap()
    }

    fn rows() -> impl Strategy<Value = Vec<(Vec<u8>, i64, Option<i64>, String)>> {
        proptest::collection::vec(
            (
                proptest::collection::vec(any::<u8>(), 0..12),
                any::<i64>(),
                proptest::option::of(any::<i64>()),
                "[a-zé]{0,8}",
            ),
            0..40,
        )
    }

    #[test]
    fn the_schema_goes_first_then_one_batch_per_frame() {
        let b = batch(&[(vec![1], 5, Some(1_000), "x".into()), (vec![2, 3], -7, None, "yy".into())]);
        let (mut enc, schema_frame) = BatchEncoder::new(&b.schema()).unwrap();
        let schema_frame = schema_frame[FRAME_HEADER..].to_vec();
        // A batch before the schema is refused (another encoder's: dictionaries go out once per stream, so a
        // channel's frames are never dropped).
        let (mut other, _) = BatchEncoder::new(&b.schema()).unwrap();
        assert!(matches!(BatchDecoder::new().decode(other.encode(&b).unwrap()), Err(BatchError::Unexpected(_))));
        let mut dec = BatchDecoder::new();
        assert!(dec.decode(schema_frame).unwrap().is_none());
        assert_eq!(dec.schema().unwrap().field_with_name("event_time").unwrap().data_type(), &{
            DataType::Timestamp(TimeUnit::Millisecond, None)
        });
        for _ in 0..3 {
            assert_eq!(dec.decode(enc.encode(&b).unwrap()).unwrap().unwrap(), b);
        }
        // A frame cut inside a message is refused, and so is an empty one.
        let frame = enc.encode(&b).unwrap();
        assert!(matches!(dec.decode(frame[..frame.len() - 1].to_vec()), Err(BatchError::Incomplete)));
        let mut dec2 = BatchDecoder::new();
        let (_, schema_frame) = BatchEncoder::new(&Schema::new(vec![Field::new("v", DataType::Int64, false)])).unwrap();
        let schema_frame = schema_frame[FRAME_HEADER..].to_vec();
        dec2.decode(schema_frame).unwrap();
        assert!(dec2.decode(Vec::new()).is_err());
    }

    proptest! {
        #[test]
        fn batches_round_trip(batches in proptest::collection::vec(rows(), 1..5)) {
            let first = batch(&batches[0]);
            let (mut enc, schema_frame) = BatchEncoder::new(&first.schema()).unwrap();
        let schema_frame = schema_frame[FRAME_HEADER..].to_vec();
            let mut dec = BatchDecoder::new();
            prop_assert!(dec.decode(schema_frame).unwrap().is_none());
            for rows in &batches {
                let b = batch(rows);
                prop_assert_eq!(dec.decode(enc.encode(&b).unwrap()).unwrap().unwrap(), b);
            }
        }

        /// Any change to a valid frame, or any bytes at all, decode into an error or a batch: never a panic.
        #[test]
        fn corrupt_frames_are_errors_not_panics(
            rows in rows(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
            noise in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let b = batch(&rows);
            let (mut enc, schema_frame) = BatchEncoder::new(&b.schema()).unwrap();
        let schema_frame = schema_frame[FRAME_HEADER..].to_vec();
            let frame = enc.encode(&b).unwrap();
            for target in [&schema_frame, &frame] {
                let mut bad = target.clone();
                for (at, byte) in &flips {
                    let i = at.index(bad.len());
                    bad[i] ^= byte | 1;
                }
                let mut dec = BatchDecoder::new();
                if target == &frame {
                    let _ = dec.decode(schema_frame.clone());
                }
                let _ = dec.decode(bad);
                let mut dec = BatchDecoder::new();
                let _ = dec.decode(schema_frame.clone());
                let _ = dec.decode(target[..cut.index(target.len())].to_vec());
            }
            let _ = BatchDecoder::new().decode(noise.clone());
            let mut dec = BatchDecoder::new();
            let _ = dec.decode(schema_frame);
            let _ = dec.decode(noise);
        }
    }
}
