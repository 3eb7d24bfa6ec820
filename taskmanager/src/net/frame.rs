//! Framing: the frame types, their encoding and decoding, and reading one frame off a connection with a
//! bounded buffer.

use prost::Message;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt};
use weir_common::ids::CheckpointId;

/// Largest frame accepted from the network.
pub const MAX_FRAME: usize = 64 << 20;

/// Most rows one batch frame may carry: a consumer refuses more, whatever the frame claims.
pub const MAX_BATCH_ROWS: u32 = 1 << 16;
/// Largest handshake accepted: it names a job and a subtask, a few hundred bytes.
pub(super) const MAX_HANDSHAKE: usize = 64 << 10;
/// What a frame's buffer starts with before its bytes arrive: a length read off the network is trusted with
/// no more. Above every batch a producer sends in the normal case (64 KiB plus one record), so those are read
/// in one go; larger frames grow, by doubling, as their bytes arrive.
pub(super) const READ_CHUNK: usize = 256 << 10;

pub(super) const T_HANDSHAKE: u8 = 0;
pub(super) const T_BATCH: u8 = 1;
pub(super) const T_BARRIER: u8 = 2;
pub(super) const T_END: u8 = 3;
pub(super) const T_CREDIT: u8 = 4;
/// The cluster secret, a producer's first frame when TLS is off and a secret is configured.
pub(super) const T_AUTH: u8 = 5;
pub(super) const T_WATERMARK: u8 = 6;
pub(super) const T_WATERMARK_STATUS: u8 = 7;

/// A data-plane message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Rows as Arrow IPC messages ([`super::batch`]): a record batch of `count` rows, or, with a count of 0, a
    /// schema that starts the channel's stream (over).
    Batch {
        /// Number of rows.
        count: u32,
        /// The IPC messages.
        body: Vec<u8>,
    },
    /// Checkpoint barrier.
    Barrier {
        /// Checkpoint id.
        id: CheckpointId,
        /// Trigger timestamp.
        timestamp_ms: u64,
        /// Set when the checkpoint is a savepoint: where every task writes its state (Flink's barriers carry
        /// the checkpoint's type and target location the same way).
        savepoint: Option<Box<weir_common::checkpoint::SavepointTarget>>,
    },
    /// The producer will send no more records.
    EndOfInput,
    /// Consumer → producer: permission to send more frames (0: a heartbeat).
    Credit(u32),
    /// Event time up to this watermark (ms, inclusive) has passed on this channel: in order with its records.
    Watermark(i64),
    /// The channel's producer became idle (its watermark stops counting) or active again.
    WatermarkStatus(crate::time::WatermarkStatus),
}

/// Data-plane errors.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Socket I/O failed.
    #[error("data connection {context}: {source}")]
    Io {
        /// Which connection.
        context: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The peer sent something that is not a valid frame.
    #[error("data connection {0}: protocol error")]
    Protocol(String),
    /// A channel did not connect in time.
    #[error("timed out after {secs}s waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// Seconds waited.
        secs: u64,
    },
    /// An output channel failed (its connection broke, or its consumer fell silent).
    #[error("data connection to {target} lost: {reason}")]
    Lost {
        /// Where the channel went.
        target: String,
        /// Why.
        reason: String,
    },
    /// A frame could not be encoded.
    #[error("cannot encode {what}: {reason}")]
    Encode {
        /// What was encoded.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// A frame that does not decode.
    #[error("data connection {context}: {source}: protocol error")]
    Frame {
        /// Which connection.
        context: String,
        /// What is wrong with the frame.
        #[source]
        source: FrameError,
    },
    /// The task was canceled while it waited to send.
    #[error("canceled")]
    Canceled,
}

/// A frame or handshake whose payload does not decode.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The handshake is not a `DataHandshake`.
    #[error("bad handshake: {0}")]
    Handshake(#[source] prost::DecodeError),
    /// A batch frame claiming more than [`MAX_BATCH_ROWS`] rows.
    #[error("batch frame claims {count} rows in {body} bytes")]
    TooManyRows {
        /// Rows claimed.
        count: u32,
        /// Bytes of IPC messages that follow.
        body: usize,
    },
    /// A barrier's savepoint target is not a `SavepointTarget`.
    #[error("barrier with a bad savepoint target: {0}")]
    SavepointTargetUndecodable(#[source] prost::DecodeError),
    /// A barrier's savepoint target that this version cannot use (an unknown format, say).
    #[error("barrier with a bad savepoint target: {0}")]
    SavepointTarget(#[source] weir_common::checkpoint::MetadataError),
    /// A watermark status other than active (0) or idle (1).
    #[error("watermark status {0}")]
    WatermarkStatus(u8),
    /// A known frame type with a payload of the wrong size.
    #[error("frame of type {kind} with a payload of {len} bytes")]
    PayloadSize {
        /// The frame type.
        kind: u8,
        /// The payload's size.
        len: usize,
    },
    /// An unknown frame type.
    #[error("bad frame type {0}")]
    UnknownType(u8),
}

impl NetError {
    /// Whether the error is what a peer's failure looks like from here: its connection broke, went silent or
    /// never came (a task that fails closes its channels, and its neighbours fail with one of these).
    pub fn is_peer_failure(&self) -> bool {
        matches!(
            self,
            NetError::Io { .. }
                | NetError::Lost { .. }
                | NetError::Timeout { .. }
                | NetError::Protocol(_)
                | NetError::Frame { .. }
        )
    }
}

/// Identifies the consumer end of a channel: one subtask of one attempt.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChannelKey {
    /// Job id.
    pub job_id: String,
    /// Attempt.
    pub attempt: u32,
    /// Consumer vertex.
    pub vertex: u32,
    /// Consumer subtask.
    pub subtask: u32,
}

/// The first frame on a connection: who is sending to whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handshake {
    /// Consumer.
    pub to: ChannelKey,
    /// Producer vertex.
    pub from_vertex: u32,
    /// Producer subtask.
    pub from_subtask: u32,
    /// Which of the consumer's inputs the connection feeds (0, or 1 for a two-input head's second): one producer
    /// may feed both inputs of a consumer (a chain that fans out), over two connections.
    pub to_input: u32,
}

/// Starts an encoded frame in `out` (the length is patched by [`finish_frame`]).
pub fn begin_frame(out: &mut Vec<u8>, kind: u8) {
    out.clear();
    out.extend_from_slice(&[0, 0, 0, 0, kind]);
}

/// Patches the length of a frame begun with [`begin_frame`].
pub fn finish_frame(out: &mut [u8]) {
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&len.to_le_bytes());
}

/// Starts a batch frame; the record count follows the type byte and is patched by [`finish_batch`].
pub fn begin_batch(out: &mut Vec<u8>) {
    begin_frame(out, T_BATCH);
    out.extend_from_slice(&[0, 0, 0, 0]);
}

/// Patches count and length of a batch frame.
pub fn finish_batch(out: &mut [u8], count: u32) {
    out[5..9].copy_from_slice(&count.to_le_bytes());
    finish_frame(out);
}

/// Encodes a non-batch frame.
pub fn encode_frame(frame: &Frame) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    match frame {
        Frame::Batch { count, body } => {
            begin_batch(&mut out);
            out.extend_from_slice(body);
            finish_batch(&mut out, *count);
            return out;
        }
        Frame::Barrier { id, timestamp_ms, savepoint } => {
            begin_frame(&mut out, T_BARRIER);
            out.extend_from_slice(&id.0.to_le_bytes());
            out.extend_from_slice(&timestamp_ms.to_le_bytes());
            if let Some(t) = savepoint {
                // Encoding a protobuf message into a Vec cannot fail.
                weir_proto::SavepointTarget::from(t.as_ref()).encode(&mut out).unwrap_or_default();
            }
        }
        Frame::EndOfInput => begin_frame(&mut out, T_END),
        Frame::Credit(n) => {
            begin_frame(&mut out, T_CREDIT);
            out.extend_from_slice(&n.to_le_bytes());
        }
        Frame::Watermark(w) => {
            begin_frame(&mut out, T_WATERMARK);
            out.extend_from_slice(&w.to_le_bytes());
        }
        Frame::WatermarkStatus(s) => {
            begin_frame(&mut out, T_WATERMARK_STATUS);
            out.push(match s {
                crate::time::WatermarkStatus::Active => 0,
                crate::time::WatermarkStatus::Idle => 1,
            });
        }
    }
    finish_frame(&mut out);
    out
}

/// A credit frame, without allocating (one goes out per frame a consumer processes).
pub(super) fn credit_frame(n: u32) -> [u8; 9] {
    let mut out = [5, 0, 0, 0, T_CREDIT, 0, 0, 0, 0];
    out[5..].copy_from_slice(&n.to_le_bytes());
    out
}

/// The handshake frame a producer opens a connection with.
pub(super) fn handshake_frame(hs: &Handshake) -> Vec<u8> {
    let mut out = Vec::new();
    begin_frame(&mut out, T_HANDSHAKE);
    weir_proto::DataHandshake::from(hs).encode(&mut out).unwrap_or_default();
    finish_frame(&mut out);
    out
}

/// Decodes a handshake frame's payload.
pub(super) fn decode_handshake(payload: &[u8]) -> Result<Handshake, FrameError> {
    let hs = weir_proto::DataHandshake::decode(payload).map_err(FrameError::Handshake)?;
    Ok(Handshake {
        to: ChannelKey { job_id: hs.job_id, attempt: hs.attempt, vertex: hs.vertex, subtask: hs.subtask },
        from_vertex: hs.from_vertex,
        from_subtask: hs.from_subtask,
        to_input: hs.to_input,
    })
}

impl From<&Handshake> for weir_proto::DataHandshake {
    fn from(hs: &Handshake) -> Self {
        weir_proto::DataHandshake {
            job_id: hs.to.job_id.clone(),
            attempt: hs.to.attempt,
            vertex: hs.to.vertex,
            subtask: hs.to.subtask,
            from_vertex: hs.from_vertex,
            from_subtask: hs.from_subtask,
            to_input: hs.to_input,
        }
    }
}

/// Decodes a frame's payload. Every frame has an exact size, but a batch, whose row count is bounded by
/// [`MAX_BATCH_ROWS`] here and checked against its bytes when its IPC messages are decoded.
pub(super) fn decode_frame(kind: u8, mut payload: Vec<u8>) -> Result<Frame, FrameError> {
    // The match arms fix the slice lengths these are called with.
    let le_u32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let le_u64 = |b: &[u8]| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    match (kind, payload.len()) {
        (T_BATCH, n) if n >= 4 => {
            let count = le_u32(&payload[..4]);
            let body = n - 4;
            if count > MAX_BATCH_ROWS {
                return Err(FrameError::TooManyRows { count, body });
            }
            payload.drain(..4);
            Ok(Frame::Batch { count, body: payload })
        }
        (T_BARRIER, n) if n >= 16 => {
            let savepoint = match n {
                16 => None,
                _ => {
                    let target = weir_proto::SavepointTarget::decode(&payload[16..])
                        .map_err(FrameError::SavepointTargetUndecodable)?;
                    let target = weir_common::checkpoint::SavepointTarget::try_from(target)
                        .map_err(FrameError::SavepointTarget)?;
                    Some(Box::new(target))
                }
            };
            Ok(Frame::Barrier {
                id: CheckpointId(le_u64(&payload[..8])),
                timestamp_ms: le_u64(&payload[8..16]),
                savepoint,
            })
        }
        (T_END, 0) => Ok(Frame::EndOfInput),
        (T_CREDIT, 4) => Ok(Frame::Credit(le_u32(&payload))),
        (T_WATERMARK, 8) => Ok(Frame::Watermark(le_u64(&payload) as i64)),
        (T_WATERMARK_STATUS, 1) => match payload[0] {
            0 => Ok(Frame::WatermarkStatus(crate::time::WatermarkStatus::Active)),
            1 => Ok(Frame::WatermarkStatus(crate::time::WatermarkStatus::Idle)),
            s => Err(FrameError::WatermarkStatus(s)),
        },
        (T_BATCH | T_BARRIER | T_END | T_CREDIT | T_WATERMARK | T_WATERMARK_STATUS, n) => {
            Err(FrameError::PayloadSize { kind, len: n })
        }
        _ => Err(FrameError::UnknownType(kind)),
    }
}

/// Reads one raw frame of at most `max` bytes; `Ok(None)` on a clean end of stream (at a frame boundary).
pub(super) async fn read_raw(
    r: &mut (impl AsyncRead + Unpin),
    ctx: &str,
    max: usize,
) -> Result<Option<(u8, Vec<u8>)>, NetError> {
    let io = |e| NetError::Io { context: ctx.to_string(), source: e };
    let mut head = [0u8; 5];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]).await.map_err(io)? {
            0 if got == 0 => return Ok(None),
            0 => return Err(NetError::Protocol(format!("{ctx}: stream ended inside a frame header"))),
            n => got += n,
        }
    }
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len == 0 || len > max {
        return Err(NetError::Protocol(format!("{ctx}: frame of {len} bytes")));
    }
    let kind = head[4];
    // The length is the peer's word: the buffer grows only as the bytes arrive.
    let want = len - 1;
    let mut buf = vec![0u8; want.min(READ_CHUNK)];
    r.read_exact(&mut buf).await.map_err(io)?;
    while buf.len() < want {
        let have = buf.len();
        buf.resize(want.min(have * 2), 0);
        r.read_exact(&mut buf[have..]).await.map_err(io)?;
    }
    Ok(Some((kind, buf)))
}

/// Reads one frame; `Ok(None)` on a clean end of stream.
pub async fn read_frame(r: &mut (impl AsyncRead + Unpin), ctx: &str) -> Result<Option<Frame>, NetError> {
    match read_raw(r, ctx, MAX_FRAME).await? {
        None => Ok(None),
        Some((kind, payload)) => {
            decode_frame(kind, payload).map(Some).map_err(|source| NetError::Frame { context: ctx.to_string(), source })
        }
    }
}
