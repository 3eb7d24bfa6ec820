//! A loopback TCP proxy that a test can take down, stall and bring back up, to make a server unreachable on
//! demand: refusing connections (a server that is gone) or swallowing them (a network that drops packets).

use anyhow::Result;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Forwards.
    Up,
    /// Resets every open and every new connection at once, as a server that went away would.
    Down,
    /// Accepts connections but forwards nothing either way, as a network that drops packets would; requests
    /// hang until the client's timeout. Connections held this way are reset when the proxy comes up again.
    Stalled,
}

/// Forwards connections from its own loopback port to a target, until told otherwise.
pub struct TcpProxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    rt: Option<tokio::runtime::Runtime>,
}

impl TcpProxy {
    /// Starts forwarding from a free port on 127.0.0.1 to `target`.
    pub fn start(target: SocketAddr) -> Result<TcpProxy> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
        let listener = rt.block_on(TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        let (mode, state) = watch::channel(Mode::Up);
        rt.spawn(accept_loop(listener, target, state));
        Ok(TcpProxy { addr, mode, rt: Some(rt) })
    }

    /// The proxy's own address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts every connection and refuses new ones.
    pub fn down(&self) {
        self.mode.send_replace(Mode::Down);
    }

    /// Stops forwarding without closing anything: requests hang.
    pub fn stall(&self) {
        self.mode.send_replace(Mode::Stalled);
    }

    /// Forwards again.
    pub fn up(&self) {
        self.mode.send_replace(Mode::Up);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, mode: watch::Receiver<Mode>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let now = *mode.borrow();
        match now {
            Mode::Up => {
                tokio::spawn(forward(client, target, mode.clone()));
            }
            Mode::Down => reset(client),
            Mode::Stalled => {
                tokio::spawn(hold(vec![client], mode.clone()));
            }
        }
    }
}

async fn forward(mut client: TcpStream, target: SocketAddr, mut mode: watch::Receiver<Mode>) {
    let Ok(mut server) = TcpStream::connect(target).await else {
        reset(client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let changed = tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => return,
        changed = mode.wait_for(|m| *m != Mode::Up) => changed.map(|m| *m),
    };
    match changed {
        Ok(Mode::Stalled) => hold(vec![client, server], mode).await,
        _ => {
            reset(client);
            reset(server);
        }
    }
}

/// Keeps connections open without reading or writing until the proxy comes up (or goes down), then resets them.
async fn hold(streams: Vec<TcpStream>, mut mode: watch::Receiver<Mode>) {
    let _ = mode.wait_for(|m| *m != Mode::Stalled).await;
    streams.into_iter().for_each(reset);
}

/// Closes a connection with a reset rather than an orderly shutdown.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn echo_server() -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn echo_through(addr: SocketAddr) -> std::io::Result<Vec<u8>> {
        let mut s = std::net::TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(b"ping")?;
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf)?;
        Ok(buf.to_vec())
    }

    #[test]
    fn forwards_until_down_and_again_when_up() {
        let proxy = TcpProxy::start(echo_server()).unwrap();
        assert_eq!(echo_through(proxy.addr()).unwrap(), b"ping");

        let mut open = std::net::TcpStream::connect(proxy.addr()).unwrap();
        open.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        open.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        open.read_exact(&mut buf).unwrap();

        proxy.down();
        assert!(echo_through(proxy.addr()).is_err(), "a new connection must fail while down");
        // The open connection is cut too: the next read sees a reset or end of stream.
        let cut = match open.read(&mut buf) {
            Ok(0) | Err(_) => true,
            Ok(_) => false,
        };
        assert!(cut, "an open connection must be cut while down");

        proxy.up();
        assert_eq!(echo_through(proxy.addr()).unwrap(), b"ping");
    }

    #[test]
    fn a_stalled_proxy_swallows_requests_until_up() {
        let proxy = TcpProxy::start(echo_server()).unwrap();
        proxy.stall();
        let mut s = std::net::TcpStream::connect(proxy.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        s.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        let err = s.read(&mut buf).unwrap_err();
        assert!(matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut), "{err}");
        proxy.up();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)), "a held connection is reset when the proxy comes up");
        assert_eq!(echo_through(proxy.addr()).unwrap(), b"ping");
    }
}
