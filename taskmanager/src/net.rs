//! The data plane: framed TCP between task managers, one connection per (producer subtask, consumer
//! subtask) channel, with credit-based flow control.
//!
//! Frame: `u32` little-endian length of what follows, `u8` type, payload. The producer opens the connection
//! and sends a handshake naming the consumer task; the consumer grants [`INITIAL_CREDIT`] frames and returns
//! one credit per frame it has processed, so a producer never has more frames in flight than the consumer
//! granted and a slow operator back-pressures its sources.
//!
//! Liveness: a consumer also sends a credit of 0 every [`HEARTBEAT_INTERVAL`], so a producer tells a consumer
//! that is alive but holds credit back (aligning barriers, back-pressured) from one whose host is gone: a
//! producer that, once credit started to flow, hears nothing at all from its consumer for [`CREDIT_TIMEOUT`]
//! fails the channel. Both ends turn on TCP keepalive. A task's cancel signal interrupts a send blocked on
//! back-pressure.
//!
//! Security: with TLS on, every data connection is TLS with client certificates both ways (rustls; both
//! ends must present a certificate of the cluster's CA). With TLS off but a cluster secret configured, the
//! producer's first frame is the secret ([`T_AUTH`]), and a consumer drops a connection without it.
//!
//! Bounds: nothing read off the network sizes an allocation by itself. A frame's buffer grows as its bytes
//! arrive (at most [`MAX_FRAME`]), and a batch's record count must fit the bytes it came with (see
//! [`crate::record::decode_batch`]).

use crate::record::{MAX_BATCH_RECORDS, MIN_ENCODED_RECORD};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;

/// Frames a consumer lets a producer send before the first credit comes back.
pub const INITIAL_CREDIT: u32 = 8;
/// Largest frame accepted from the network.
pub const MAX_FRAME: usize = 64 << 20;
/// Largest handshake accepted: it names a job and a subtask, a few hundred bytes.
const MAX_HANDSHAKE: usize = 64 << 10;
/// What a frame's buffer starts with before its bytes arrive: a length read off the network is trusted with
/// no more. Above every batch a producer sends in the normal case (64 KiB plus one record), so those are read
/// in one go; larger frames grow, by doubling, as their bytes arrive.
const READ_CHUNK: usize = 256 << 10;
/// Credit a producer accepts having in hand: far above what a consumer grants ([`INITIAL_CREDIT`] plus one
/// per processed frame), it only keeps a broken consumer from overflowing the producer's count.
const MAX_CREDIT: usize = 1 << 20;

/// How often a consumer tells each producer it is alive (a credit of 0), whether or not it has credit to
/// return. Alignment or a slow operator can hold credit back for minutes; the heartbeat is what lets the
/// producer wait that long without mistaking a busy consumer for a dead one. 9 bytes per channel every 5 s.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
/// How long a producer accepts hearing nothing at all from its consumer (no credit, no heartbeat) before it
/// fails the channel: 12 missed heartbeats, far beyond scheduling or GC hiccups on the consumer's side, yet a
/// bound on how long a producer thread and its state outlive a consumer host that vanished (the job
/// manager's heartbeat timeout usually notices a lost task manager first and cancels the task; this bounds
/// the wait when it does not, e.g. when only the link between two task managers is cut). Checked every
/// quarter of it, so a dead consumer is detected within 1.25 times this.
pub const CREDIT_TIMEOUT: Duration = Duration::from_secs(60);
/// TCP keepalive on data connections: first probe after this much silence on the socket…
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);
/// …then a probe this often…
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// …and the connection is dead after this many unanswered probes (about 35 s in all). The kernel probes only
/// while nothing it sent is unacknowledged; the heartbeat timeout covers a producer with data in flight.
#[cfg_attr(not(any(target_os = "linux", target_os = "macos", target_os = "freebsd")), allow(dead_code))]
const KEEPALIVE_RETRIES: u32 = 4;
/// Consumer side, Linux: what the consumer sends (credits, heartbeats) may stay unacknowledged this long
/// before the kernel drops the connection. Keepalive alone does not cover that case (retransmissions of the
/// heartbeats would go on for some 15 minutes), and the producer reads credits at once, so a live producer
/// never leaves them unacknowledged. Not set on the producer side: a back-pressured consumer may
/// legitimately leave the producer's data unread (a zero window) for longer than any such bound.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
const CONSUMER_USER_TIMEOUT: Duration = Duration::from_secs(30);

/// Bounds on how long a data connection waits for its peer; [`Liveness::default`] holds the production values
/// (tests shorten them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// Consumer: how often it sends a heartbeat.
    pub heartbeat: Duration,
    /// Producer: how long it accepts hearing nothing from the consumer.
    pub silence_timeout: Duration,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness { heartbeat: HEARTBEAT_INTERVAL, silence_timeout: CREDIT_TIMEOUT }
    }
}

const T_HANDSHAKE: u8 = 0;
const T_BATCH: u8 = 1;
const T_BARRIER: u8 = 2;
const T_END: u8 = 3;
const T_CREDIT: u8 = 4;
/// The cluster secret, a producer's first frame when TLS is off and a secret is configured.
const T_AUTH: u8 = 5;

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
        /// Set when the checkpoint is a savepoint: where every task writes its state (Flink's barriers carry
        /// the checkpoint's type and target location the same way).
        savepoint: Option<Box<weir_common::checkpoint::SavepointTarget>>,
    },
    /// The producer will send no more records.
    EndOfInput,
    /// Consumer → producer: permission to send more frames (0: a heartbeat).
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
    /// The task was canceled while it waited to send.
    #[error("canceled")]
    Canceled,
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
        Frame::Barrier { id, timestamp_ms, savepoint } => {
            begin_frame(&mut out, T_BARRIER);
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&timestamp_ms.to_le_bytes());
            if let Some(t) = savepoint {
                // A struct of strings and enums always serializes.
                if let Ok(json) = serde_json::to_vec(t) {
                    out.extend_from_slice(&json);
                }
            }
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

/// A credit frame, without allocating (one goes out per frame a consumer processes).
fn credit_frame(n: u32) -> [u8; 9] {
    let mut out = [5, 0, 0, 0, T_CREDIT, 0, 0, 0, 0];
    out[5..].copy_from_slice(&n.to_le_bytes());
    out
}

/// A frame of type `kind` carrying `value` as JSON; an encoding failure is an error, never an empty payload.
fn json_frame<T: Serialize>(kind: u8, value: &T, what: &'static str) -> Result<Vec<u8>, NetError> {
    let mut out = Vec::new();
    begin_frame(&mut out, kind);
    serde_json::to_writer(&mut out, value).map_err(|e| NetError::Encode { what, reason: e.to_string() })?;
    finish_frame(&mut out);
    Ok(out)
}

/// Decodes a frame's payload. Every frame has an exact size, but a batch, whose record count must fit the
/// bytes it came with: each record takes at least [`MIN_ENCODED_RECORD`] bytes.
fn decode_frame(kind: u8, mut payload: Vec<u8>) -> Result<Frame, String> {
    // The match arms fix the slice lengths these are called with.
    let le_u32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let le_u64 = |b: &[u8]| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    match (kind, payload.len()) {
        (T_BATCH, n) if n >= 4 => {
            let count = le_u32(&payload[..4]);
            let body = n - 4;
            if count > MAX_BATCH_RECORDS || count as usize > body / MIN_ENCODED_RECORD {
                return Err(format!("batch frame claims {count} records in {body} bytes"));
            }
            payload.drain(..4);
            Ok(Frame::Batch { count, body: payload })
        }
        (T_BARRIER, n) if n >= 16 => {
            let savepoint = match n {
                16 => None,
                _ => Some(Box::new(
                    serde_json::from_slice(&payload[16..])
                        .map_err(|e| format!("barrier with a bad savepoint target: {e}"))?,
                )),
            };
            Ok(Frame::Barrier { id: le_u64(&payload[..8]), timestamp_ms: le_u64(&payload[8..16]), savepoint })
        }
        (T_END, 0) => Ok(Frame::EndOfInput),
        (T_CREDIT, 4) => Ok(Frame::Credit(le_u32(&payload))),
        (T_BATCH | T_BARRIER | T_END | T_CREDIT, n) => Err(format!("frame of type {kind} with a payload of {n} bytes")),
        _ => Err(format!("bad frame type {kind}")),
    }
}

/// Reads one raw frame of at most `max` bytes; `Ok(None)` on a clean end of stream (at a frame boundary).
async fn read_raw(r: &mut (impl AsyncRead + Unpin), ctx: &str, max: usize) -> Result<Option<(u8, Vec<u8>)>, NetError> {
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
            decode_frame(kind, payload).map(Some).map_err(|e| NetError::Protocol(format!("{ctx}: {e}")))
        }
    }
}

/// Turns on TCP keepalive (and, where supported and asked for, a bound on unacknowledged data) on a data
/// connection. A failure is logged, not fatal: the heartbeat timeout still bounds the wait.
fn tune_socket(stream: &TcpStream, user_timeout: Option<Duration>) {
    let _ = stream.set_nodelay(true);
    let sock = socket2::SockRef::from(stream);
    let keepalive = socket2::TcpKeepalive::new().with_time(KEEPALIVE_IDLE).with_interval(KEEPALIVE_INTERVAL);
    #[cfg(any(target_os = "linux", target_os = "macos", target_os = "freebsd"))]
    let keepalive = keepalive.with_retries(KEEPALIVE_RETRIES);
    if let Err(e) = sock.set_tcp_keepalive(&keepalive) {
        tracing::warn!(error = %e, "cannot turn on TCP keepalive on a data connection");
    }
    #[cfg(target_os = "linux")]
    if let Err(e) = sock.set_tcp_user_timeout(user_timeout) {
        tracing::warn!(error = %e, "cannot set TCP_USER_TIMEOUT on a data connection");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = user_timeout;
}

/// Resolves once `cancel` is `true`; never if its sender is gone without having canceled.
async fn canceled(cancel: &mut watch::Receiver<bool>) {
    if cancel.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A byte stream a data connection runs over: TCP, or TLS over TCP.
pub trait DataIo: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> DataIo for T {}

/// A data connection.
pub type DataStream = Box<dyn DataIo>;
type DataReadHalf = tokio::io::ReadHalf<DataStream>;
type DataWriteHalf = tokio::io::WriteHalf<DataStream>;

type Incoming = (u32, DataStream);

/// How data connections are secured: TLS with member certificates both ways, or the cluster secret as the
/// producer's first frame, or nothing (the embedded local default).
#[derive(Clone, Default)]
pub struct DataSecurity {
    tls: Option<(tokio_rustls::TlsAcceptor, tokio_rustls::TlsConnector)>,
    secret: Option<weir_common::security::Secret>,
}

impl DataSecurity {
    /// The data plane's side of a process's [`Security`](weir_common::security::Security).
    pub fn from(
        security: &weir_common::security::Security,
    ) -> Result<DataSecurity, weir_common::security::SecurityError> {
        let tls = match &security.tls {
            Some(files) => Some((
                tokio_rustls::TlsAcceptor::from(files.rustls_server()?),
                tokio_rustls::TlsConnector::from(files.rustls_client()?),
            )),
            None => None,
        };
        Ok(DataSecurity { secret: if tls.is_some() { None } else { security.secret.clone() }, tls })
    }

    /// The consumer's side: a TLS handshake (the peer must present a member certificate) or the secret.
    async fn accept(&self, tcp: TcpStream) -> Result<DataStream, String> {
        let mut stream: DataStream = match &self.tls {
            Some((acceptor, _)) => Box::new(acceptor.accept(tcp).await.map_err(|e| format!("TLS handshake: {e}"))?),
            None => Box::new(tcp),
        };
        if let Some(secret) = &self.secret {
            match read_raw(&mut stream, "cluster secret", MAX_HANDSHAKE).await {
                Ok(Some((T_AUTH, offered))) if secret.matches(&offered) => {}
                Ok(Some((T_AUTH, _))) => return Err("wrong cluster secret".into()),
                _ => return Err("no cluster secret".into()),
            }
        }
        Ok(stream)
    }

    /// The producer's side.
    async fn connect(&self, tcp: TcpStream, addr: &str) -> Result<DataStream, String> {
        let mut stream: DataStream = match &self.tls {
            Some((_, connector)) => {
                let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr).trim_matches(['[', ']']);
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|e| format!("TLS server name {host:?}: {e}"))?;
                Box::new(connector.connect(name, tcp).await.map_err(|e| format!("TLS handshake: {e}"))?)
            }
            None => Box::new(tcp),
        };
        if let Some(secret) = &self.secret {
            let mut frame = Vec::new();
            begin_frame(&mut frame, T_AUTH);
            frame.extend_from_slice(secret.expose().as_bytes());
            finish_frame(&mut frame);
            stream.write_all(&frame).await.map_err(|e| format!("sending the cluster secret: {e}"))?;
        }
        Ok(stream)
    }
}

/// Accepts data connections and hands each to the consumer task it names, holding connections that arrive
/// before their task is deployed.
pub struct DataServer {
    inner: Mutex<ServerState>,
    security: DataSecurity,
    /// Most connections parked at once ([`MAX_PARKED`] unless set otherwise).
    max_parked: usize,
}

impl Default for DataServer {
    fn default() -> Self {
        DataServer::new(DataSecurity::default())
    }
}

#[derive(Default)]
struct ServerState {
    waiting: HashMap<ChannelKey, mpsc::UnboundedSender<Incoming>>,
    /// Connections that arrived before their consumer registered; each is held by a watcher task
    /// ([`DataServer::hold`]) that hands it over when claimed and closes it when its peer does.
    parked: HashMap<ChannelKey, Vec<Parked>>,
    /// How many connections `parked` holds, all keys together.
    parked_count: usize,
    next_parked_id: u64,
}

/// A parked connection, as the server's state knows it: sending the consumer's channel on `claim` hands the
/// connection over; dropping `claim` closes it.
struct Parked {
    id: u64,
    claim: tokio::sync::oneshot::Sender<mpsc::UnboundedSender<Incoming>>,
}

/// Most connections a task manager holds for consumers not yet deployed. Consumers are deployed before their
/// producers, so parking is brief and rare; the bound keeps peers that connect and never get claimed from
/// holding the process's file descriptors.
pub const MAX_PARKED: usize = 4096;
/// A parked connection nobody claimed within this long is closed.
pub const PARK_TIMEOUT: Duration = Duration::from_secs(60);

impl DataServer {
    /// A server whose connections are secured by `security`.
    pub fn new(security: DataSecurity) -> DataServer {
        DataServer { inner: Mutex::default(), security, max_parked: MAX_PARKED }
    }

    /// The same server holding at most `n` parked connections.
    pub fn with_parking_limit(mut self, n: usize) -> DataServer {
        self.max_parked = n;
        self
    }

    /// How this task manager's data connections are secured (for the ones it opens).
    pub fn security(&self) -> &DataSecurity {
        &self.security
    }

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
                tune_socket(&stream, Some(CONSUMER_USER_TIMEOUT));
                let secured = tokio::time::timeout(Duration::from_secs(10), me.security.accept(stream)).await;
                let mut stream = match secured {
                    Ok(Ok(s)) => s,
                    Ok(Err(reason)) => {
                        tracing::warn!(peer = %peer, %reason, "refusing a data connection");
                        return;
                    }
                    Err(_) => {
                        tracing::warn!(peer = %peer, "refusing a data connection: no handshake within 10 s");
                        return;
                    }
                };
                let hs =
                    tokio::time::timeout(Duration::from_secs(10), read_raw(&mut stream, "handshake", MAX_HANDSHAKE))
                        .await;
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

    fn deliver(self: &Arc<Self>, key: ChannelKey, incoming: Incoming) {
        let mut st = self.inner.lock();
        if let Some(tx) = st.waiting.get(&key) {
            let _ = tx.send(incoming);
            return;
        }
        // Not deployed yet: park it, up to a bound.
        if st.parked_count >= self.max_parked {
            tracing::warn!(job_id = %key.job_id, vertex = key.vertex, subtask = key.subtask, parked = st.parked_count,
                "refusing a data connection: too many connections wait for consumers not deployed");
            return;
        }
        let (claim, claimed) = tokio::sync::oneshot::channel();
        let id = st.next_parked_id;
        st.next_parked_id += 1;
        st.parked.entry(key.clone()).or_default().push(Parked { id, claim });
        st.parked_count += 1;
        tokio::spawn(self.clone().hold(key, id, incoming, claimed));
    }

    /// Holds parked connection `id` until its consumer claims it, its peer closes it, it waits longer than
    /// [`PARK_TIMEOUT`] or its consumer is forgotten; in all but the first case it is closed and forgotten.
    async fn hold(
        self: Arc<Self>,
        key: ChannelKey,
        id: u64,
        incoming: Incoming,
        mut claimed: tokio::sync::oneshot::Receiver<mpsc::UnboundedSender<Incoming>>,
    ) {
        let (from, mut stream) = incoming;
        let mut byte = [0u8; 1];
        // A producer sends nothing before its consumer grants credit: a read that completes means the peer
        // closed the connection (or broke the protocol). Dropping the read when the claim comes loses nothing.
        let outcome = tokio::select! {
            to = &mut claimed => match to {
                Ok(to) => Ok(to),
                Err(_) => Err("its consumer was forgotten"),
            },
            r = stream.read(&mut byte) => Err(match r {
                Ok(0) | Err(_) => "the peer closed it",
                Ok(_) => "the peer sent data before its consumer granted credit",
            }),
            _ = tokio::time::sleep(PARK_TIMEOUT) => Err("nobody claimed it in time"),
        };
        match outcome {
            Ok(to) => {
                let _ = to.send((from, stream));
            }
            Err(why) => {
                let mut st = self.inner.lock();
                if let Some(v) = st.parked.get_mut(&key) {
                    let before = v.len();
                    v.retain(|p| p.id != id);
                    let removed = before - v.len();
                    if v.is_empty() {
                        st.parked.remove(&key);
                    }
                    st.parked_count -= removed;
                }
                tracing::debug!(job_id = %key.job_id, vertex = key.vertex, subtask = key.subtask, from, why,
                    "closed a parked data connection");
            }
        }
    }

    /// Registers a consumer task; connections for it (including parked ones) arrive on the receiver.
    pub fn register(&self, key: ChannelKey) -> mpsc::UnboundedReceiver<Incoming> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut st = self.inner.lock();
        let parked = st.parked.remove(&key).unwrap_or_default();
        st.parked_count -= parked.len();
        for p in parked {
            let _ = p.claim.send(tx.clone());
        }
        st.waiting.insert(key, tx);
        rx
    }

    /// Forgets a consumer task (its parked connections are closed).
    pub fn unregister(&self, key: &ChannelKey) {
        let mut st = self.inner.lock();
        st.waiting.remove(key);
        if let Some(parked) = st.parked.remove(key) {
            st.parked_count -= parked.len();
        }
    }

    /// How many connections are parked now (tests, metrics).
    pub fn parked(&self) -> usize {
        self.inner.lock().parked_count
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

/// The consumer side of a task's input channels: returns credits to the producers. Dropping it stops the
/// channels' readers and closes their connections.
pub struct InputChannels {
    credits: Vec<mpsc::UnboundedSender<u32>>,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl InputChannels {
    /// Waits until a connection arrived for every expected producer subtask, then starts a reader per
    /// channel that forwards frames into `events` (via `wrap`), and a writer that returns credits and sends
    /// heartbeats as `liveness` says.
    pub async fn accept<E: Send + 'static>(
        mut incoming: mpsc::UnboundedReceiver<Incoming>,
        producers: &[u32],
        events: mpsc::Sender<E>,
        wrap: fn(ChannelEvent) -> E,
        timeout: Duration,
        liveness: Liveness,
    ) -> Result<InputChannels, NetError> {
        let mut streams: Vec<Option<DataStream>> = (0..producers.len()).map(|_| None).collect();
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
        let mut tasks = Vec::with_capacity(2 * streams.len());
        for (idx, stream) in streams.into_iter().enumerate() {
            let Some(stream) = stream else { continue };
            let (mut rd, mut wr) = tokio::io::split(stream);
            let (ctx, mut crx) = mpsc::unbounded_channel::<u32>();
            credits.push(ctx);
            let heartbeat = liveness.heartbeat;
            let writer = tokio::spawn(async move {
                if wr.write_all(&credit_frame(INITIAL_CREDIT)).await.is_err() {
                    return;
                }
                let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
                beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    let n = tokio::select! {
                        biased;
                        n = crx.recv() => match n {
                            Some(mut n) => {
                                while let Ok(m) = crx.try_recv() {
                                    n = n.saturating_add(m);
                                }
                                n
                            }
                            None => return,
                        },
                        _ = beat.tick() => 0,
                    };
                    if wr.write_all(&credit_frame(n)).await.is_err() {
                        return;
                    }
                }
            });
            tasks.push(writer.abort_handle());
            let events = events.clone();
            let reader = tokio::spawn(async move {
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
            tasks.push(reader.abort_handle());
        }
        Ok(InputChannels { credits, tasks })
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

impl Drop for InputChannels {
    fn drop(&mut self) {
        // A reader waits for its producer, which may never send again (its host gone): stop it.
        self.tasks.iter().for_each(|t| t.abort());
    }
}

/// The producer side of one channel: frames are queued here and written when credit allows.
pub struct OutputChannel {
    tx: mpsc::Sender<Vec<u8>>,
    cancel: watch::Receiver<bool>,
    /// Why the channel failed, set once by whichever part of it noticed first.
    failure: Arc<OnceLock<String>>,
    /// Where this channel goes, for error messages.
    pub target: String,
}

impl OutputChannel {
    /// Connects to a consumer (retrying until `timeout`) and starts the writer. `cancel` is the task's cancel
    /// signal: once it is `true`, a blocked [`OutputChannel::send_blocking`] returns [`NetError::Canceled`]
    /// and the connection is dropped.
    pub async fn connect(
        security: &DataSecurity,
        addr: &str,
        hs: &Handshake,
        timeout: Duration,
        liveness: Liveness,
        cancel: watch::Receiver<bool>,
    ) -> Result<OutputChannel, NetError> {
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
        tune_socket(&stream, None);
        let stream = security.connect(stream, addr).await.map_err(|reason| NetError::Io {
            context: format!("to {target}"),
            source: std::io::Error::other(reason),
        })?;
        let (rd, mut wr) = tokio::io::split(stream);
        let hs_frame = json_frame(T_HANDSHAKE, hs, "handshake")?;
        wr.write_all(&hs_frame).await.map_err(|e| NetError::Io { context: format!("to {target}"), source: e })?;

        let permits = Arc::new(Semaphore::new(0));
        let heard = Arc::new(AtomicU64::new(0));
        let failure = Arc::new(OnceLock::new());
        let (tx, rx) = mpsc::channel::<Vec<u8>>(2);
        let reader = tokio::spawn(read_credits(rd, permits.clone(), heard.clone(), failure.clone()));
        let writer = tokio::spawn(write_frames(wr, rx, permits, cancel.clone(), failure.clone()));
        let guard = Guard { target: target.clone(), heard, failure: failure.clone(), liveness };
        tokio::spawn(guard.run(writer, reader, cancel.clone()));
        Ok(OutputChannel { tx, cancel, failure, target })
    }

    /// Queues an encoded frame, blocking the calling (task) thread while the channel has no room, until there
    /// is room, the channel fails, or the task is canceled ([`NetError::Canceled`]).
    pub fn send_blocking(&mut self, frame: Vec<u8>) -> Result<(), NetError> {
        if frame.len() > MAX_FRAME + 4 {
            return Err(NetError::Encode {
                what: "record batch",
                reason: format!("{} bytes is over the frame limit of {MAX_FRAME} (a record too large)", frame.len()),
            });
        }
        let frame = match self.tx.try_send(frame) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(self.lost()),
            Err(mpsc::error::TrySendError::Full(frame)) => frame,
        };
        // Back-pressure: wait for room or for the cancel signal, whichever comes first.
        let (tx, cancel) = (&self.tx, &mut self.cancel);
        let sent = futures::executor::block_on(async {
            tokio::select! {
                biased;
                _ = canceled(cancel) => None,
                r = tx.send(frame) => Some(r.is_ok()),
            }
        });
        match sent {
            Some(true) => Ok(()),
            Some(false) => Err(self.lost()),
            None => Err(NetError::Canceled),
        }
    }

    fn lost(&self) -> NetError {
        // A cancel also drops the connection: a send that finds it gone then was canceled too.
        if *self.cancel.borrow() {
            return NetError::Canceled;
        }
        let reason = self.failure.get().cloned().unwrap_or_else(|| "the connection closed".into());
        NetError::Lost { target: self.target.clone(), reason }
    }
}

/// Reads credits (and heartbeats) from the consumer until the connection ends; then closes `permits`, so a
/// writer waiting for credit notices.
async fn read_credits(
    mut rd: DataReadHalf,
    permits: Arc<Semaphore>,
    heard: Arc<AtomicU64>,
    failure: Arc<OnceLock<String>>,
) {
    let reason = loop {
        match read_frame(&mut rd, "credit").await {
            Ok(Some(Frame::Credit(n))) => {
                heard.fetch_add(1, Ordering::Relaxed);
                let room = MAX_CREDIT.saturating_sub(permits.available_permits());
                permits.add_permits((n as usize).min(room));
            }
            Ok(Some(_)) => break "the consumer sent a frame other than credit".to_string(),
            Ok(None) => break "the consumer closed the connection".to_string(),
            Err(e) => break e.to_string(),
        }
    };
    let _ = failure.set(reason);
    permits.close();
}

/// Writes queued frames as credit allows. Ends when the task dropped its end of the queue (then shuts the
/// connection down cleanly unless the task was canceled) or when the connection fails.
async fn write_frames(
    mut wr: DataWriteHalf,
    mut rx: mpsc::Receiver<Vec<u8>>,
    permits: Arc<Semaphore>,
    cancel: watch::Receiver<bool>,
    failure: Arc<OnceLock<String>>,
) -> bool {
    while let Some(buf) = rx.recv().await {
        match permits.acquire().await {
            Ok(p) => p.forget(),
            // The reader recorded why.
            Err(_) => return false,
        }
        if let Err(e) = wr.write_all(&buf).await {
            let _ = failure.set(format!("write failed: {e}"));
            return false;
        }
    }
    if !*cancel.borrow() {
        let _ = wr.shutdown().await;
    }
    true
}

/// Watches one output channel: drops it on cancel, and fails it when the consumer falls silent after it
/// started granting credit.
struct Guard {
    target: String,
    heard: Arc<AtomicU64>,
    failure: Arc<OnceLock<String>>,
    liveness: Liveness,
}

impl Guard {
    async fn run(self, mut writer: JoinHandle<bool>, mut reader: JoinHandle<()>, mut cancel: watch::Receiver<bool>) {
        let period = (self.liveness.silence_timeout / 4).max(Duration::from_millis(1));
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut last_count, mut last_change) = (0, Instant::now());
        let mut writing = true;
        loop {
            tokio::select! {
                _ = canceled(&mut cancel) => {
                    let _ = self.failure.set("the task was canceled".into());
                    break;
                }
                done = &mut writer, if writing => {
                    writing = false;
                    // After a clean end the reader goes on until the consumer closes (or falls silent), so
                    // that nothing unread is left behind when the connection closes.
                    if !matches!(done, Ok(true)) {
                        break;
                    }
                }
                _ = &mut reader => break,
                _ = tick.tick() => {
                    // Before its first credit the consumer may still be restoring state or waiting for its
                    // other producers, for as long as that takes; TCP keepalive covers a host lost meanwhile.
                    let n = self.heard.load(Ordering::Relaxed);
                    if n != last_count || n == 0 {
                        (last_count, last_change) = (n, Instant::now());
                        continue;
                    }
                    if last_change.elapsed() >= self.liveness.silence_timeout {
                        let reason = format!(
                            "no credit or heartbeat from the consumer for {:.1}s (its task manager is gone or \
                             unreachable)",
                            last_change.elapsed().as_secs_f64()
                        );
                        if writing {
                            tracing::warn!(target = %self.target, reason = %reason, "failing data connection");
                        }
                        let _ = self.failure.set(reason);
                        break;
                    }
                }
            }
        }
        writer.abort();
        reader.abort();
    }
}

/// Test support: the largest single allocation a piece of code makes on the calling thread.
#[cfg(test)]
pub(crate) mod alloc_probe {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    struct Probe;

    thread_local! {
        static LARGEST: Cell<usize> = const { Cell::new(0) };
    }

    fn note(size: usize) {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    }

    // SAFETY: every call is passed on to the system allocator unchanged.
    unsafe impl GlobalAlloc for Probe {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            note(layout.size());
            unsafe { System.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            note(layout.size());
            unsafe { System.alloc_zeroed(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            note(new_size);
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static PROBE: Probe = Probe;

    /// Runs `f` and returns its result with the largest single allocation it made on this thread.
    pub(crate) fn largest_allocation<R>(f: impl FnOnce() -> R) -> (R, usize) {
        LARGEST.with(|l| l.set(0));
        let r = f();
        (r, LARGEST.with(|l| l.get()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{decode_batch, encode_record, Key, Record, Value};
    use proptest::collection::vec;
    use proptest::prelude::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use tokio::io::ReadBuf;

    fn read_all(bytes: &[u8]) -> Result<Option<Frame>, NetError> {
        futures::executor::block_on(read_frame(&mut &bytes[..], "t"))
    }

    #[test]
    fn frames_round_trip() {
        for f in [
            Frame::Batch { count: 1, body: vec![1, 2, 3] },
            Frame::Barrier { id: 9, timestamp_ms: 77, savepoint: None },
            Frame::Barrier {
                id: 10,
                timestamp_ms: 78,
                savepoint: Some(Box::new(weir_common::checkpoint::SavepointTarget {
                    url: "file:///sp/savepoint-1".into(),
                    format: weir_common::checkpoint::SavepointFormat::Canonical,
                    stop: true,
                })),
            },
            Frame::EndOfInput,
            Frame::Credit(5),
        ] {
            assert_eq!(read_all(&encode_frame(&f)).unwrap().unwrap(), f);
        }
        assert_eq!(read_all(&credit_frame(7)).unwrap().unwrap(), Frame::Credit(7));
        assert!(read_all(&[]).unwrap().is_none(), "a clean end at a frame boundary");
        assert!(read_all(&[1, 0]).is_err(), "an end inside a header is not clean");
    }

    #[test]
    fn lengths_off_the_network_are_checked_against_the_bytes() {
        // A batch that claims more records than its bytes can hold.
        let f = encode_frame(&Frame::Batch { count: 2, body: vec![0, 0] });
        let e = read_all(&f).unwrap_err().to_string();
        assert!(e.contains("claims 2 records in 2 bytes"), "{e}");
        // Fixed-size frames with trailing or missing bytes.
        let mut f = encode_frame(&Frame::Credit(1));
        f.push(0);
        f[0] += 1;
        assert!(read_all(&f).is_err());
        let mut f = encode_frame(&Frame::Barrier { id: 1, timestamp_ms: 2, savepoint: None });
        f.pop();
        f[0] -= 1;
        assert!(read_all(&f).is_err());
        // A frame that claims 60 MiB but brings 10 bytes: no 60 MiB buffer.
        let mut f = ((60u32 << 20) + 1).to_le_bytes().to_vec();
        f.push(T_BATCH);
        f.extend_from_slice(&[0; 10]);
        let (r, largest) = alloc_probe::largest_allocation(|| read_all(&f));
        assert!(r.is_err());
        assert!(largest <= READ_CHUNK, "allocated {largest} bytes for a frame of 10");
    }

    #[test]
    fn an_encoding_failure_is_an_error_not_an_empty_payload() {
        // JSON maps need string keys: this value cannot be encoded.
        let bad: HashMap<(u8, u8), u8> = [((1, 2), 3)].into_iter().collect();
        let e = json_frame(T_HANDSHAKE, &bad, "handshake").unwrap_err();
        assert!(matches!(e, NetError::Encode { what: "handshake", .. }), "{e}");
        let key = ChannelKey { job_id: "j".into(), attempt: 1, vertex: 1, subtask: 0 };
        let hs = Handshake { to: key, from_vertex: 0, from_subtask: 3 };
        let frame = json_frame(T_HANDSHAKE, &hs, "handshake").unwrap();
        let (kind, payload) =
            futures::executor::block_on(read_raw(&mut &frame[..], "t", MAX_HANDSHAKE)).unwrap().unwrap();
        assert_eq!(kind, T_HANDSHAKE);
        assert_eq!(serde_json::from_slice::<Handshake>(&payload).unwrap(), hs);
    }

    /// Hands out its bytes a few at a time, as a socket may.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl AsyncRead for Trickle<'_> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let n = self.step.min(self.bytes.len()).min(buf.remaining());
            let (head, tail) = self.bytes.split_at(n);
            buf.put_slice(head);
            self.bytes = tail;
            Poll::Ready(Ok(()))
        }
    }

    fn arb_record() -> impl Strategy<Value = Record> {
        let value = prop_oneof![
            Just(Value::Unit),
            any::<i64>().prop_map(Value::I64),
            vec(any::<u8>(), 0..300).prop_map(Value::Bytes),
        ];
        (vec(any::<u8>(), 0..40), value).prop_map(|(k, value)| Record { key: Key::from_vec(k), value })
    }

    fn arb_frame() -> impl Strategy<Value = Frame> {
        prop_oneof![
            (any::<u64>(), any::<u64>()).prop_map(|(id, timestamp_ms)| Frame::Barrier {
                id,
                timestamp_ms,
                savepoint: None
            }),
            Just(Frame::EndOfInput),
            any::<u32>().prop_map(Frame::Credit),
        ]
    }

    /// Bytes that are mostly a plausible frame (a right length, a known type, a small count) made wrong in
    /// one place, or noise.
    fn arb_wire() -> impl Strategy<Value = Vec<u8>> {
        let framed = (0u8..6, prop_oneof![0u32..8, any::<u32>()], vec(any::<u8>(), 0..600), any::<i8>()).prop_map(
            |(kind, count, body, skew)| {
                let mut out = Vec::new();
                begin_frame(&mut out, kind);
                if kind == T_BATCH {
                    out.extend_from_slice(&count.to_le_bytes());
                }
                out.extend_from_slice(&body);
                finish_frame(&mut out);
                let len = u32::from_le_bytes([out[0], out[1], out[2], out[3]]) as i64 + (skew as i64 % 4);
                out[..4].copy_from_slice(&(len.max(0) as u32).to_le_bytes());
                out
            },
        );
        prop_oneof![framed, vec(any::<u8>(), 0..600)]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        /// No input makes the decoders panic, or allocate more than the bytes it brought can justify: the
        /// frame buffer grows only as bytes arrive (from at most `READ_CHUNK`), and a batch's records take
        /// room for at most what its body can hold.
        #[test]
        fn arbitrary_bytes_never_panic_nor_overallocate(wire in arb_wire(), step in 1usize..64) {
            let (_, largest) = alloc_probe::largest_allocation(|| {
                let mut r = Trickle { bytes: &wire, step };
                while let Ok(Some(f)) = futures::executor::block_on(read_frame(&mut r, "fuzz")) {
                    if let Frame::Batch { count, body } = f {
                        let _ = decode_batch(count, &body);
                    }
                }
            });
            let bound = READ_CHUNK.max(wire.len() / MIN_ENCODED_RECORD * std::mem::size_of::<Record>());
            prop_assert!(largest <= bound, "{} bytes allocated for {} bytes of input", largest, wire.len());
        }

        #[test]
        fn valid_frames_round_trip(frames in vec(arb_frame(), 0..8), records in vec(arb_record(), 1..40), step in 1usize..200) {
            let mut wire = Vec::new();
            for f in &frames {
                wire.extend_from_slice(&encode_frame(f));
            }
            let mut batch = Vec::new();
            begin_batch(&mut batch);
            for r in &records {
                encode_record(r, &mut batch).unwrap();
            }
            finish_batch(&mut batch, records.len() as u32);
            wire.extend_from_slice(&batch);
            let mut r = Trickle { bytes: &wire, step };
            for f in &frames {
                prop_assert_eq!(&futures::executor::block_on(read_frame(&mut r, "t")).unwrap().unwrap(), f);
            }
            match futures::executor::block_on(read_frame(&mut r, "t")).unwrap().unwrap() {
                Frame::Batch { count, body } => prop_assert_eq!(decode_batch(count, &body).unwrap(), records),
                other => prop_assert!(false, "expected a batch, got {:?}", other),
            }
            prop_assert!(futures::executor::block_on(read_frame(&mut r, "t")).unwrap().is_none());
        }
    }

    fn key() -> ChannelKey {
        ChannelKey { job_id: "j".into(), attempt: 1, vertex: 1, subtask: 0 }
    }

    fn barrier(i: u64) -> Vec<u8> {
        encode_frame(&Frame::Barrier { id: i, timestamp_ms: 0, savepoint: None })
    }

    /// Polls `cond` until it holds or `within` passed.
    fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if cond() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        cond()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parked_connections_are_bounded_and_closed_with_their_peers() {
        let server = Arc::new(DataServer::default().with_parking_limit(3));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(server.clone().run(listener));
        let wait_for = |what: &str, want: usize| {
            let (server, what) = (server.clone(), what.to_string());
            async move {
                let deadline = Instant::now() + Duration::from_secs(10);
                while server.parked() != want {
                    assert!(Instant::now() < deadline, "{what}: {} parked, not {want}", server.parked());
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        };
        // Five producers handshake for a consumer that is not deployed: three are parked, two refused.
        let mut peers = Vec::new();
        for from in 0..5u32 {
            let mut c = TcpStream::connect(addr).await.unwrap();
            let hs = Handshake { to: key(), from_vertex: 0, from_subtask: from };
            c.write_all(&json_frame(T_HANDSHAKE, &hs, "handshake").unwrap()).await.unwrap();
            peers.push(c);
            if from < 3 {
                wait_for("while parking", from as usize + 1).await;
            }
        }
        for refused in peers.iter_mut().skip(3) {
            let mut buf = [0u8; 1];
            let n = tokio::time::timeout(Duration::from_secs(10), refused.read(&mut buf)).await.unwrap();
            assert!(matches!(n, Ok(0) | Err(_)), "a connection over the bound is closed: {n:?}");
        }
        assert_eq!(server.parked(), 3);
        // Two peers go away: their parked connections are closed and forgotten at once, not after a minute.
        drop(peers.remove(0));
        drop(peers.remove(0));
        wait_for("after two peers closed", 1).await;
        // The consumer registers and gets the one left.
        let mut incoming = server.register(key());
        let (from, _) = tokio::time::timeout(Duration::from_secs(10), incoming.recv()).await.unwrap().unwrap();
        assert_eq!(from, 2);
        assert_eq!(server.parked(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn credits_bound_frames_in_flight() {
        let server = Arc::new(DataServer::default());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(server.clone().run(listener));
        let hs = Handshake { to: key(), from_vertex: 0, from_subtask: 3 };
        let (_cancel_tx, cancel) = watch::channel(false);
        // The producer connects before the consumer registers: the connection is parked.
        let mut out = OutputChannel::connect(
            &DataSecurity::default(),
            &addr,
            &hs,
            Duration::from_secs(5),
            Liveness::default(),
            cancel,
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let incoming = server.register(key());
        let (etx, mut erx) = mpsc::channel::<ChannelEvent>(100);
        let inputs = InputChannels::accept(incoming, &[3], etx, |e| e, Duration::from_secs(5), Liveness::default())
            .await
            .unwrap();
        let sender = std::thread::spawn(move || {
            for i in 0..20u64 {
                out.send_blocking(barrier(i)).unwrap();
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

    /// A consumer that accepts the connection, grants `credit` and then says nothing more; it keeps the
    /// connection open and reports when it sees the producer close it.
    async fn mute_consumer(credit: u32) -> (String, tokio::sync::oneshot::Receiver<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            if credit > 0 {
                s.write_all(&credit_frame(credit)).await.unwrap();
            }
            let mut buf = vec![0u8; 1 << 20];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            let _ = closed_tx.send(());
        });
        (addr, closed_rx)
    }

    /// Sends barriers on `out` from a thread until a send fails; counts the sends that went through.
    fn keep_sending(mut out: OutputChannel) -> (Arc<AtomicU64>, std::thread::JoinHandle<NetError>) {
        let sent = Arc::new(AtomicU64::new(0));
        let counter = sent.clone();
        let t = std::thread::spawn(move || {
            for i in 0.. {
                if let Err(e) = out.send_blocking(barrier(i)) {
                    return e;
                }
                counter.fetch_add(1, Ordering::Relaxed);
            }
            unreachable!()
        });
        (sent, t)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cancel_interrupts_a_send_blocked_on_backpressure() {
        let (addr, closed) = mute_consumer(0).await;
        let hs = Handshake { to: key(), from_vertex: 0, from_subtask: 0 };
        let (cancel_tx, cancel) = watch::channel(false);
        // Long timeouts: only the cancel can end the wait.
        let liveness = Liveness { heartbeat: Duration::from_secs(600), silence_timeout: Duration::from_secs(600) };
        let out =
            OutputChannel::connect(&DataSecurity::default(), &addr, &hs, Duration::from_secs(5), liveness, cancel)
                .await
                .unwrap();
        let (sent, sender) = keep_sending(out);
        // No credit: the writer holds one frame and the queue two, then the sender blocks.
        let blocked = tokio::task::spawn_blocking(move || {
            eventually(Duration::from_secs(5), || sent.load(Ordering::Relaxed) == 3)
        });
        assert!(blocked.await.unwrap(), "three frames are queued without credit");
        assert!(!sender.is_finished(), "the sender waits for credit");
        let canceled_at = Instant::now();
        cancel_tx.send(true).unwrap();
        let ended = tokio::task::spawn_blocking(move || {
            let ended = eventually(Duration::from_secs(3), || sender.is_finished());
            (ended, sender)
        });
        let (ended, sender) = ended.await.unwrap();
        assert!(ended, "a canceled send returns within seconds");
        assert!(canceled_at.elapsed() < Duration::from_secs(3));
        let e = sender.join().unwrap();
        assert!(matches!(e, NetError::Canceled), "{e}");
        tokio::time::timeout(Duration::from_secs(3), closed).await.expect("the connection is dropped").unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_consumer_that_falls_silent_fails_the_producer_within_the_bound() {
        let (addr, closed) = mute_consumer(2).await;
        let hs = Handshake { to: key(), from_vertex: 0, from_subtask: 0 };
        let (_cancel_tx, cancel) = watch::channel(false);
        let silence = Duration::from_millis(300);
        let liveness = Liveness { heartbeat: Duration::from_millis(50), silence_timeout: silence };
        let out =
            OutputChannel::connect(&DataSecurity::default(), &addr, &hs, Duration::from_millis(300), liveness, cancel)
                .await
                .unwrap();
        let started = Instant::now();
        let (_, sender) = keep_sending(out);
        let ended = tokio::task::spawn_blocking(move || {
            let ended = eventually(Duration::from_secs(5), || sender.is_finished());
            (ended, sender)
        });
        let (ended, sender) = ended.await.unwrap();
        assert!(ended, "the producer gives up on a silent consumer");
        // Detected within 1.25 times the timeout after the last word, plus scheduling slack.
        assert!(started.elapsed() < silence * 2 + Duration::from_millis(1500), "took {:?}", started.elapsed());
        let e = sender.join().unwrap();
        assert!(e.to_string().contains("no credit or heartbeat from the consumer"), "{e}");
        tokio::time::timeout(Duration::from_secs(3), closed).await.expect("the connection is dropped").unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_live_consumer_may_hold_credit_back_longer_than_the_timeout() {
        let server = Arc::new(DataServer::default());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(server.clone().run(listener));
        let incoming = server.register(key());
        let hs = Handshake { to: key(), from_vertex: 0, from_subtask: 0 };
        let (_cancel_tx, cancel) = watch::channel(false);
        let silence = Duration::from_millis(400);
        let liveness = Liveness { heartbeat: Duration::from_millis(20), silence_timeout: silence };
        let out =
            OutputChannel::connect(&DataSecurity::default(), &addr, &hs, Duration::from_secs(5), liveness, cancel)
                .await
                .unwrap();
        let (etx, mut erx) = mpsc::channel::<ChannelEvent>(100);
        let inputs = InputChannels::accept(incoming, &[0], etx, |e| e, Duration::from_secs(5), liveness).await.unwrap();
        let (sent, sender) = keep_sending(out);
        // The consumer processes nothing (as while aligning) for many times the silence timeout; its
        // heartbeats keep the producer waiting instead of failing.
        tokio::time::sleep(silence * 4).await;
        assert!(!sender.is_finished(), "the producer still waits");
        let before = sent.load(Ordering::Relaxed);
        for _ in 0..INITIAL_CREDIT {
            let ev = tokio::time::timeout(Duration::from_secs(2), erx.recv()).await.unwrap().unwrap();
            assert!(matches!(ev, ChannelEvent::Frame(0, Frame::Barrier { .. })), "{ev:?}");
            inputs.release(0);
        }
        let more = tokio::task::spawn_blocking(move || {
            eventually(Duration::from_secs(3), || sent.load(Ordering::Relaxed) >= before + INITIAL_CREDIT as u64)
        });
        assert!(more.await.unwrap(), "credit returned after the stall lets the producer go on");
        drop(inputs);
    }
}
