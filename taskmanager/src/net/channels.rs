//! A task's channels: the consumer side (input channels that return credit and heartbeats) and the producer
//! side (output channels that send only with credit and notice a consumer gone silent).

use super::conn::{canceled, tune_socket, DataReadHalf, DataStream, DataWriteHalf, Incoming, Liveness};
use super::data_server::DataSecurity;
use super::frame::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinHandle;

/// Frames a consumer lets a producer send before the first credit comes back.
pub const INITIAL_CREDIT: u32 = 8;
/// Credit a producer accepts having in hand: far above what a consumer grants ([`INITIAL_CREDIT`] plus one
/// per processed frame), it only keeps a broken consumer from overflowing the producer's count.
const MAX_CREDIT: usize = 1 << 20;

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
    /// Waits until a connection arrived for every expected producer (vertex, subtask, input), then starts a reader per
    /// channel that forwards frames into `events` (via `wrap`), and a writer that returns credits and sends
    /// heartbeats as `liveness` says.
    pub async fn accept<E: Send + 'static>(
        mut incoming: mpsc::UnboundedReceiver<Incoming>,
        producers: &[(u32, u32, u32)],
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
        let hs_frame = handshake_frame(hs);
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
pub(super) async fn read_credits(
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
pub(super) async fn write_frames(
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
pub(super) struct Guard {
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
