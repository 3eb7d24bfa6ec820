//! The data plane: framed TCP between task managers, one connection per (producer subtask, consumer
//! subtask) channel, with credit-based flow control.
//!
//! Frame: `u32` little-endian length of what follows, `u8` type, payload. The producer opens the connection
//! and sends a handshake naming the consumer task; the consumer grants [`INITIAL_CREDIT`] frames and returns
//! one credit per frame it has processed, so a producer never has more frames in flight than the consumer
//! granted and a slow operator back-pressures its sources.

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};

/// Frames a consumer lets a producer send before the first credit comes back.
pub const INITIAL_CREDIT: u32 = 8;
/// Largest frame accepted from the network.
pub const MAX_FRAME: usize = 64 << 20;

const T_HANDSHAKE: u8 = 0;
const T_BATCH: u8 = 1;
const T_BARRIER: u8 = 2;
const T_END: u8 = 3;
const T_CREDIT: u8 = 4;

/// A data-plane message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// `count` records, encoded by [`crate::record::encode_record`].
    Batch {
        /// Number of records.
        count: u32,
        /// Encoded records.
        body: Vec<u8>,
    },
    /// Checkpoint barrier.
    Barrier {
        /// Checkpoint id.
        id: u64,
        /// Trigger timestamp.
        timestamp_ms: u64,
    },
    /// The producer will send no more records.
    EndOfInput,
    /// Consumer → producer: permission to send more frames.
    Credit(u32),
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
        Frame::Barrier { id, timestamp_ms } => {
            begin_frame(&mut out, T_BARRIER);
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&timestamp_ms.to_le_bytes());
        }
        Frame::EndOfInput => begin_frame(&mut out, T_END),
        Frame::Credit(n) => {
            begin_frame(&mut out, T_CREDIT);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
    finish_frame(&mut out);
    out
}

fn decode_frame(kind: u8, mut payload: Vec<u8>) -> Option<Frame> {
    let u64_at = |p: &[u8], i: usize| p.get(i..i + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    let u32_at = |p: &[u8], i: usize| p.get(i..i + 4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes);
    match kind {
        T_BATCH => {
            let count = u32_at(&payload, 0)?;
            payload.drain(..4);
            Some(Frame::Batch { count, body: payload })
        }
        T_BARRIER => Some(Frame::Barrier { id: u64_at(&payload, 0)?, timestamp_ms: u64_at(&payload, 8)? }),
        T_END => Some(Frame::EndOfInput),
        T_CREDIT => Some(Frame::Credit(u32_at(&payload, 0)?)),
        _ => None,
    }
}

/// Reads one raw frame; `Ok(None)` on a clean end of stream.
async fn read_raw(r: &mut (impl AsyncReadExt + Unpin), ctx: &str) -> Result<Option<(u8, Vec<u8>)>, NetError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(NetError::Io { context: ctx.to_string(), source: e }),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(NetError::Protocol(format!("{ctx}: frame of {len} bytes")));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).await.map_err(|e| NetError::Io { context: ctx.to_string(), source: e })?;
    let kind = buf[0];
    buf.drain(..1);
    Ok(Some((kind, buf)))
}

/// Reads one frame; `Ok(None)` on a clean end of stream.
pub async fn read_frame(r: &mut (impl AsyncReadExt + Unpin), ctx: &str) -> Result<Option<Frame>, NetError> {
    match read_raw(r, ctx).await? {
        None => Ok(None),
        Some((kind, payload)) => decode_frame(kind, payload)
            .map(Some)
            .ok_or_else(|| NetError::Protocol(format!("{ctx}: bad frame type {kind}"))),
    }
}

type Incoming = (u32, tokio::net::TcpStream);

/// Accepts data connections and hands each to the consumer task it names, holding connections that arrive
/// before their task is deployed.
#[derive(Default)]
pub struct DataServer {
    inner: Mutex<ServerState>,
}

#[derive(Default)]
struct ServerState {
    waiting: HashMap<ChannelKey, mpsc::UnboundedSender<Incoming>>,
    parked: HashMap<ChannelKey, Vec<(Instant, Incoming)>>,
}

impl DataServer {
    /// Accepts connections until the listener fails.
    pub async fn run(self: Arc<Self>, listener: TcpListener) {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "data listener accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let me = self.clone();
            tokio::spawn(async move {
                let mut stream = stream;
                let _ = stream.set_nodelay(true);
                let hs = tokio::time::timeout(Duration::from_secs(10), read_raw(&mut stream, "handshake")).await;
                let hs: Option<Handshake> = match hs {
                    Ok(Ok(Some((T_HANDSHAKE, payload)))) => serde_json::from_slice(&payload).ok(),
                    _ => None,
                };
                match hs {
                    Some(hs) => me.deliver(hs.to, (hs.from_subtask, stream)),
                    None => tracing::warn!(peer = %peer, "dropping data connection without a valid handshake"),
                }
            });
        }
    }

    fn deliver(&self, key: ChannelKey, incoming: Incoming) {
        let mut st = self.inner.lock();
        if let Some(tx) = st.waiting.get(&key) {
            if tx.send(incoming).is_ok() {
                return;
            }
            return;
        }
        // Not deployed yet: park it, forgetting connections nobody claimed for a minute.
        st.parked.retain(|_, v| {
            v.retain(|(t, _)| t.elapsed() < Duration::from_secs(60));
            !v.is_empty()
        });
        st.parked.entry(key).or_default().push((Instant::now(), incoming));
    }

    /// Registers a consumer task; connections for it (including parked ones) arrive on the receiver.
    pub fn register(&self, key: ChannelKey) -> mpsc::UnboundedReceiver<Incoming> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut st = self.inner.lock();
        for (_, inc) in st.parked.remove(&key).unwrap_or_default() {
            let _ = tx.send(inc);
        }
        st.waiting.insert(key, tx);
        rx
    }

    /// Forgets a consumer task.
    pub fn unregister(&self, key: &ChannelKey) {
        let mut st = self.inner.lock();
        st.waiting.remove(key);
        st.parked.remove(key);
    }
}

/// What the reader of an input channel tells its task.
#[derive(Debug)]
pub enum ChannelEvent {
    /// A frame from channel `channel`.
    Frame(usize, Frame),
    /// The channel's connection ended; `error` is `None` for a clean close.
    Closed(usize, Option<String>),
}

/// The consumer side of a task's input channels: returns credits to the producers.
pub struct InputChannels {
    credits: Vec<mpsc::UnboundedSender<u32>>,
}

impl InputChannels {
    /// Waits until a connection arrived for every expected producer subtask, then starts a reader per
    /// channel that forwards frames into `events` (via `wrap`).
    pub async fn accept<E: Send + 'static>(
        mut incoming: mpsc::UnboundedReceiver<Incoming>,
        producers: &[u32],
        events: mpsc::Sender<E>,
        wrap: fn(ChannelEvent) -> E,
        timeout: Duration,
    ) -> Result<InputChannels, NetError> {
        let mut streams: Vec<Option<TcpStream>> = (0..producers.len()).map(|_| None).collect();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut missing = producers.len();
        while missing > 0 {
            let got = tokio::time::timeout_at(deadline, incoming.recv()).await;
            let (from, stream) = match got {
                Ok(Some(x)) => x,
                _ => {
                    return Err(NetError::Timeout {
                        what: format!("{missing} of {} input channels to connect", producers.len()),
                        secs: timeout.as_secs(),
                    })
                }
            };
            if let Some(idx) = producers.iter().position(|&p| p == from) {
                if streams[idx].is_none() {
                    missing -= 1;
                }
                streams[idx] = Some(stream);
            }
        }
        let mut credits = Vec::with_capacity(streams.len());
        for (idx, stream) in streams.into_iter().enumerate() {
            let Some(stream) = stream else { continue };
            let (mut rd, mut wr) = stream.into_split();
            let (ctx, mut crx) = mpsc::unbounded_channel::<u32>();
            credits.push(ctx);
            tokio::spawn(async move {
                if wr.write_all(&encode_frame(&Frame::Credit(INITIAL_CREDIT))).await.is_err() {
                    return;
                }
                while let Some(mut n) = crx.recv().await {
                    while let Ok(m) = crx.try_recv() {
                        n += m;
                    }
                    if wr.write_all(&encode_frame(&Frame::Credit(n))).await.is_err() {
                        return;
                    }
                }
            });
            let events = events.clone();
            tokio::spawn(async move {
                let ctx = format!("input channel {idx}");
                let mut saw_end = false;
                loop {
                    match read_frame(&mut rd, &ctx).await {
                        Ok(Some(f)) => {
                            saw_end |= f == Frame::EndOfInput;
                            if events.send(wrap(ChannelEvent::Frame(idx, f))).await.is_err() {
                                return;
                            }
                        }
                        Ok(None) => {
                            let err =
                                (!saw_end).then(|| "producer closed the connection before end of input".to_string());
                            let _ = events.send(wrap(ChannelEvent::Closed(idx, err))).await;
                            return;
                        }
                        Err(e) => {
                            let _ = events.send(wrap(ChannelEvent::Closed(idx, Some(e.to_string())))).await;
                            return;
                        }
                    }
                }
            });
        }
        Ok(InputChannels { credits })
    }

    /// Returns one credit to the producer of `channel` after its frame was processed.
    pub fn release(&self, channel: usize) {
        if let Some(tx) = self.credits.get(channel) {
            let _ = tx.send(1);
        }
    }

    /// Number of channels.
    pub fn len(&self) -> usize {
        self.credits.len()
    }

    /// Whether there are no channels.
    pub fn is_empty(&self) -> bool {
        self.credits.is_empty()
    }
}

/// The producer side of one channel: frames are queued here and written when credit allows.
pub struct OutputChannel {
    tx: mpsc::Sender<Vec<u8>>,
    /// Where this channel goes, for error messages.
    pub target: String,
}

impl OutputChannel {
    /// Connects to a consumer (retrying until `timeout`) and starts the writer.
    pub async fn connect(addr: &str, hs: &Handshake, timeout: Duration) -> Result<OutputChannel, NetError> {
        let deadline = Instant::now() + timeout;
        let target = format!("{addr} (vertex {} subtask {})", hs.to.vertex, hs.to.subtask);
        let stream = loop {
            match TcpStream::connect(addr).await {
                Ok(s) => break s,
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(addr, error = %e, "data connection refused, retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(NetError::Io { context: format!("to {target}"), source: e }),
            }
        };
        let _ = stream.set_nodelay(true);
        let (mut rd, mut wr) = stream.into_split();
        let mut hs_frame = Vec::new();
        begin_frame(&mut hs_frame, T_HANDSHAKE);
        hs_frame.extend_from_slice(&serde_json::to_vec(hs).unwrap_or_default());
        finish_frame(&mut hs_frame);
        wr.write_all(&hs_frame).await.map_err(|e| NetError::Io { context: format!("to {target}"), source: e })?;

        let permits = Arc::new(Semaphore::new(0));
        let credit_permits = permits.clone();
        tokio::spawn(async move {
            while let Ok(Some(Frame::Credit(n))) = read_frame(&mut rd, "credit").await {
                credit_permits.add_permits(n as usize);
            }
            // Connection gone: wake a writer waiting for credit so it notices.
            credit_permits.close();
        });
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(2);
        let t = target.clone();
        tokio::spawn(async move {
            while let Some(buf) = rx.recv().await {
                match permits.acquire().await {
                    Ok(p) => p.forget(),
                    Err(_) => {
                        tracing::debug!(target = %t, "data connection closed by consumer");
                        return;
                    }
                }
                if let Err(e) = wr.write_all(&buf).await {
                    tracing::debug!(target = %t, error = %e, "data connection write failed");
                    return;
                }
            }
            let _ = wr.shutdown().await;
        });
        Ok(OutputChannel { tx, target })
    }

    /// Queues an encoded frame, blocking the calling (task) thread while the channel has no room.
    pub fn send_blocking(&self, frame: Vec<u8>) -> Result<(), NetError> {
        self.tx.blocking_send(frame).map_err(|_| NetError::Io {
            context: format!("to {}", self.target),
            source: std::io::Error::new(std::io::ErrorKind::BrokenPipe, "downstream connection lost"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        for f in [
            Frame::Batch { count: 2, body: vec![1, 2, 3] },
            Frame::Barrier { id: 9, timestamp_ms: 77 },
            Frame::EndOfInput,
            Frame::Credit(5),
        ] {
            let bytes = encode_frame(&f);
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let got = rt.block_on(async { read_frame(&mut bytes.as_slice(), "t").await.unwrap().unwrap() });
            assert_eq!(got, f);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn credits_bound_frames_in_flight() {
        let server = Arc::new(DataServer::default());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(server.clone().run(listener));
        let key = ChannelKey { job_id: "j".into(), attempt: 1, vertex: 1, subtask: 0 };
        let hs = Handshake { to: key.clone(), from_vertex: 0, from_subtask: 3 };
        // The producer connects before the consumer registers: the connection is parked.
        let out = OutputChannel::connect(&addr, &hs, Duration::from_secs(5)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let incoming = server.register(key);
        let (etx, mut erx) = mpsc::channel::<ChannelEvent>(100);
        let inputs = InputChannels::accept(incoming, &[3], etx, |e| e, Duration::from_secs(5)).await.unwrap();
        let sender = std::thread::spawn(move || {
            for i in 0..20u64 {
                out.send_blocking(encode_frame(&Frame::Barrier { id: i, timestamp_ms: 0 })).unwrap();
            }
            out
        });
        let mut got = 0;
        while let Ok(Some(ev)) = tokio::time::timeout(Duration::from_millis(500), erx.recv()).await {
            assert!(matches!(ev, ChannelEvent::Frame(0, Frame::Barrier { .. })));
            got += 1;
        }
        assert_eq!(got, INITIAL_CREDIT as usize, "no credit returned yet, so only the initial credit may arrive");
        for _ in 0..got {
            inputs.release(0);
        }
        while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(500), erx.recv()).await {
            got += 1;
        }
        assert_eq!(got, 16);
        let out = tokio::task::spawn_blocking(move || sender.join().unwrap());
        for _ in 0..16 {
            inputs.release(0);
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), out).await.unwrap();
    }
}
