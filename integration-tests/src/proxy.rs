//! A loopback TCP proxy that a test can take down and bring back up, to make a server unreachable on demand.

use anyhow::Result;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Forwards connections from its own loopback port to a target. While down, it resets every open connection
/// and every new one at once, as a server that went away would.
pub struct TcpProxy {
    addr: SocketAddr,
    up: watch::Sender<bool>,
    rt: Option<tokio::runtime::Runtime>,
}

impl TcpProxy {
    /// Starts forwarding from a free port on 127.0.0.1 to `target`.
    pub fn start(target: SocketAddr) -> Result<TcpProxy> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
        let listener = rt.block_on(TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        let (up, state) = watch::channel(true);
        rt.spawn(accept_loop(listener, target, state));
        Ok(TcpProxy { addr, up, rt: Some(rt) })
    }

    /// The proxy's own address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts every connection and refuses new ones.
    pub fn down(&self) {
        self.up.send_replace(false);
    }

    /// Forwards again.
    pub fn up(&self) {
        self.up.send_replace(true);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, state: watch::Receiver<bool>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if !*state.borrow() {
            reset(client);
            continue;
        }
        tokio::spawn(forward(client, target, state.clone()));
    }
}

async fn forward(mut client: TcpStream, target: SocketAddr, mut state: watch::Receiver<bool>) {
    let Ok(mut server) = TcpStream::connect(target).await else {
        reset(client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = state.wait_for(|up| !*up) => {
            reset(client);
            reset(server);
        }
    }
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
}
