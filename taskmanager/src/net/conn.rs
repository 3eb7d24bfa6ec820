//! A data connection: the byte stream it runs over, how long each end waits for the other (liveness), the
//! socket options that bound a dead peer, and the cancel signal a blocked send wakes on.

use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;

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
pub(super) const CONSUMER_USER_TIMEOUT: Duration = Duration::from_secs(30);

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

/// Turns on TCP keepalive (and, where supported and asked for, a bound on unacknowledged data) on a data
/// connection. A failure is logged, not fatal: the heartbeat timeout still bounds the wait.
pub(super) fn tune_socket(stream: &TcpStream, user_timeout: Option<Duration>) {
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
pub(super) async fn canceled(cancel: &mut watch::Receiver<bool>) {
    if cancel.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// A byte stream a data connection runs over: TCP, or TLS over TCP.
pub trait DataIo: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> DataIo for T {}

/// A data connection.
pub type DataStream = Box<dyn DataIo>;
pub(super) type DataReadHalf = tokio::io::ReadHalf<DataStream>;
pub(super) type DataWriteHalf = tokio::io::WriteHalf<DataStream>;

/// A connection from a producer, named by its vertex, its subtask and the consumer's input it feeds.
pub type Incoming = ((u32, u32, u32), DataStream);
