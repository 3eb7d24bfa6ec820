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
//! arrive (at most [`MAX_FRAME`]), and a batch's rows are read in place from the bytes it came with, every
//! length checked first (see [`batch`]).

pub mod batch;
mod channels;
mod conn;
mod data_server;
mod frame;

pub use batch::{BatchDecoder, BatchEncoder};
pub use channels::*;
pub use conn::{DataIo, DataStream, Incoming, Liveness, CREDIT_TIMEOUT, HEARTBEAT_INTERVAL};
pub use data_server::*;
pub use frame::*;

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
    use super::conn::*;
    use super::*;
    use crate::api::batch::{batch_of, records as rows_of};
    use crate::api::record::{Key, Record, Value};
    use proptest::collection::vec;
    use proptest::prelude::*;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll};
    use std::time::{Duration, Instant};
    use tokio::io::ReadBuf;
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::{mpsc, watch};
    use weir_common::ids::CheckpointId;

    fn read_all(bytes: &[u8]) -> Result<Option<Frame>, NetError> {
        futures::executor::block_on(read_frame(&mut &bytes[..], "t"))
    }

    #[test]
    fn frames_round_trip() {
        for f in [
            Frame::Batch { count: 1, body: vec![1, 2, 3] },
            Frame::Barrier { id: CheckpointId(9), timestamp_ms: 77, savepoint: None },
            Frame::Barrier {
                id: CheckpointId(10),
                timestamp_ms: 78,
                savepoint: Some(Box::new(weir_common::checkpoint::SavepointTarget {
                    url: "file:///sp/savepoint-1".into(),
                    format: weir_common::checkpoint::SavepointFormat::Canonical,
                    stop: true,
                })),
            },
            Frame::EndOfInput,
            Frame::Credit(5),
            Frame::Watermark(i64::MIN),
            Frame::Watermark(-3),
            Frame::Watermark(1_700_000_000_000),
            Frame::WatermarkStatus(crate::time::WatermarkStatus::Idle),
            Frame::WatermarkStatus(crate::time::WatermarkStatus::Active),
        ] {
            assert_eq!(read_all(&encode_frame(&f)).unwrap().unwrap(), f);
        }
        assert_eq!(read_all(&credit_frame(7)).unwrap().unwrap(), Frame::Credit(7));
        assert!(read_all(&[]).unwrap().is_none(), "a clean end at a frame boundary");
        assert!(read_all(&[1, 0]).is_err(), "an end inside a header is not clean");
    }

    #[test]
    fn lengths_off_the_network_are_checked_against_the_bytes() {
        // A batch that claims more rows than any batch may have.
        let f = encode_frame(&Frame::Batch { count: MAX_BATCH_ROWS + 1, body: vec![0, 0] });
        let e = read_all(&f).unwrap_err().to_string();
        assert!(e.contains("claims 65537 rows in 2 bytes"), "{e}");
        // Fixed-size frames with trailing or missing bytes.
        let mut f = encode_frame(&Frame::Credit(1));
        f.push(0);
        f[0] += 1;
        assert!(read_all(&f).is_err());
        let mut f = encode_frame(&Frame::Barrier { id: CheckpointId(1), timestamp_ms: 2, savepoint: None });
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
    fn handshakes_and_savepoint_barriers_travel_as_protobuf_and_bad_ones_are_refused() {
        let key = ChannelKey { job_id: "j".into(), attempt: 1, vertex: 1, subtask: 0 };
        let hs = Handshake { to: key, from_vertex: 0, from_subtask: 3, to_input: 0 };
        let frame = handshake_frame(&hs);
        let (kind, payload) =
            futures::executor::block_on(read_raw(&mut &frame[..], "t", MAX_HANDSHAKE)).unwrap().unwrap();
        assert_eq!(kind, T_HANDSHAKE);
        assert_eq!(decode_handshake(&payload).unwrap(), hs);
        assert!(decode_handshake(&[0xff, 0xff, 0xff]).is_err());

        let target = weir_common::checkpoint::SavepointTarget {
            url: "s3://b/sp-1".into(),
            format: weir_common::checkpoint::SavepointFormat::Canonical,
            stop: true,
        };
        let barrier = Frame::Barrier { id: CheckpointId(7), timestamp_ms: 9, savepoint: Some(Box::new(target)) };
        let frame = encode_frame(&barrier);
        assert_eq!(decode_frame(frame[4], frame[5..].to_vec()).unwrap(), barrier);
        // A target whose format this version does not know is refused, never read as no savepoint.
        let mut bad = frame[5..21].to_vec();
        prost::Message::encode(&weir_proto::SavepointTarget { url: "u".into(), format: 17, stop: false }, &mut bad)
            .unwrap();
        let e = decode_frame(T_BARRIER, bad).unwrap_err().to_string();
        assert!(e.contains("bad savepoint target"), "{e}");
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

    /// Records of one batch: their values are all integers or all bytes (an edge has one schema), some unit.
    fn arb_records() -> impl Strategy<Value = Vec<Record>> {
        let record = |value: BoxedStrategy<Value>| {
            (vec(any::<u8>(), 0..40), value, proptest::option::of(any::<i64>()))
                .prop_map(|(k, value, timestamp)| Record { key: Key::from_vec(k), value, timestamp })
        };
        let ints = prop_oneof![Just(Value::Unit), any::<i64>().prop_map(Value::I64)].boxed();
        let bytes = prop_oneof![Just(Value::Unit), vec(any::<u8>(), 0..300).prop_map(Value::Bytes)].boxed();
        prop_oneof![vec(record(ints), 1..40), vec(record(bytes), 1..40)]
    }

    fn arb_frame() -> impl Strategy<Value = Frame> {
        prop_oneof![
            (any::<u64>(), any::<u64>()).prop_map(|(id, timestamp_ms)| Frame::Barrier {
                id: CheckpointId(id),
                timestamp_ms,
                savepoint: None
            }),
            Just(Frame::EndOfInput),
            any::<u32>().prop_map(Frame::Credit),
            any::<i64>().prop_map(Frame::Watermark),
            prop_oneof![Just(crate::time::WatermarkStatus::Idle), Just(crate::time::WatermarkStatus::Active)]
                .prop_map(Frame::WatermarkStatus),
        ]
    }

    /// Bytes that are mostly a plausible frame (a right length, a known type, a small count) made wrong in
    /// one place, or noise.
    fn arb_wire() -> impl Strategy<Value = Vec<u8>> {
        let framed = (0u8..8, prop_oneof![0u32..8, any::<u32>()], vec(any::<u8>(), 0..600), any::<i8>()).prop_map(
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
        /// frame buffer grows only as bytes arrive (from at most `READ_CHUNK`), and a batch's rows are read in
        /// place.
        #[test]
        fn arbitrary_bytes_never_panic_nor_overallocate(wire in arb_wire(), step in 1usize..64) {
            let (_, largest) = alloc_probe::largest_allocation(|| {
                let mut r = Trickle { bytes: &wire, step };
                let mut decoder = BatchDecoder::new();
                while let Ok(Some(f)) = futures::executor::block_on(read_frame(&mut r, "fuzz")) {
                    if let Frame::Batch { body, .. } = f {
                        let _ = decoder.decode(body);
                    }
                }
            });
            let bound = READ_CHUNK.max(wire.len() * 8);
            prop_assert!(largest <= bound, "{} bytes allocated for {} bytes of input", largest, wire.len());
        }

        #[test]
        fn valid_frames_round_trip(frames in vec(arb_frame(), 0..8), records in arb_records(), step in 1usize..200) {
            let mut wire = Vec::new();
            for f in &frames {
                wire.extend_from_slice(&encode_frame(f));
            }
            let batch = batch_of(&records).unwrap();
            let (mut encoder, schema_frame) = BatchEncoder::new(&batch.schema()).unwrap();
            wire.extend_from_slice(&schema_frame);
            for f in encoder.encode_frames(&batch).unwrap() {
                wire.extend_from_slice(&f);
            }
            let mut r = Trickle { bytes: &wire, step };
            for f in &frames {
                prop_assert_eq!(&futures::executor::block_on(read_frame(&mut r, "t")).unwrap().unwrap(), f);
            }
            let mut decoder = BatchDecoder::new();
            match futures::executor::block_on(read_frame(&mut r, "t")).unwrap().unwrap() {
                Frame::Batch { count: 0, body } => prop_assert!(decoder.decode(body).unwrap().is_none()),
                other => prop_assert!(false, "expected the schema, got {:?}", other),
            }
            match futures::executor::block_on(read_frame(&mut r, "t")).unwrap().unwrap() {
                Frame::Batch { count, body } => {
                    let b = decoder.decode(body).unwrap().unwrap();
                    prop_assert_eq!(b.num_rows(), count as usize);
                    prop_assert_eq!(rows_of(&b).unwrap(), records);
                }
                other => prop_assert!(false, "expected a batch, got {:?}", other),
            }
            prop_assert!(futures::executor::block_on(read_frame(&mut r, "t")).unwrap().is_none());
        }
    }

    fn key() -> ChannelKey {
        ChannelKey { job_id: "j".into(), attempt: 1, vertex: 1, subtask: 0 }
    }

    fn barrier(i: u64) -> Vec<u8> {
        encode_frame(&Frame::Barrier { id: CheckpointId(i), timestamp_ms: 0, savepoint: None })
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
            let hs = Handshake { to: key(), from_vertex: 0, from_subtask: from, to_input: 0 };
            c.write_all(&handshake_frame(&hs)).await.unwrap();
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
        assert_eq!(from, (0, 2, 0));
        assert_eq!(server.parked(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn credits_bound_frames_in_flight() {
        let server = Arc::new(DataServer::default());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(server.clone().run(listener));
        let hs = Handshake { to: key(), from_vertex: 0, from_subtask: 3, to_input: 0 };
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
        let inputs =
            InputChannels::accept(incoming, &[(0, 3, 0)], etx, |e| e, Duration::from_secs(5), Liveness::default())
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
        let hs = Handshake { to: key(), from_vertex: 0, from_subtask: 0, to_input: 0 };
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
        let hs = Handshake { to: key(), from_vertex: 0, from_subtask: 0, to_input: 0 };
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
        let hs = Handshake { to: key(), from_vertex: 0, from_subtask: 0, to_input: 0 };
        let (_cancel_tx, cancel) = watch::channel(false);
        let silence = Duration::from_millis(400);
        let liveness = Liveness { heartbeat: Duration::from_millis(20), silence_timeout: silence };
        let out =
            OutputChannel::connect(&DataSecurity::default(), &addr, &hs, Duration::from_secs(5), liveness, cancel)
                .await
                .unwrap();
        let (etx, mut erx) = mpsc::channel::<ChannelEvent>(100);
        let inputs =
            InputChannels::accept(incoming, &[(0, 0, 0)], etx, |e| e, Duration::from_secs(5), liveness).await.unwrap();
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
