//! The data server: accepting data connections (TLS or the cluster secret first), reading their handshakes
//! and handing each to the consumer task it names, holding (parking) those that arrive before their task.

use super::conn::{tune_socket, DataStream, Incoming, CONSUMER_USER_TIMEOUT};
use super::frame::*;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// A data connection that could not be secured: its TLS handshake or the cluster secret failed.
#[derive(Debug, thiserror::Error)]
pub enum DataSecurityError {
    /// The TLS handshake failed.
    #[error("TLS handshake: {0}")]
    Handshake(#[source] std::io::Error),
    /// The peer's address is not a name TLS can verify.
    #[error("TLS server name {host:?}: {source}")]
    ServerName {
        /// The host part of the address.
        host: String,
        /// Why it is not a server name.
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    /// The producer offered another secret.
    #[error("wrong cluster secret")]
    WrongSecret,
    /// The producer's first frame was not the secret.
    #[error("no cluster secret")]
    NoSecret,
    /// The secret could not be sent.
    #[error("sending the cluster secret: {0}")]
    SendSecret(#[source] std::io::Error),
}

/// How data connections are secured: TLS with member certificates both ways, or the cluster secret as the
/// producer's first frame, or nothing (the embedded local default).
#[derive(Clone, Default)]
pub struct DataSecurity {
    tls: Option<(tokio_rustls::TlsAcceptor, tokio_rustls::TlsConnector)>,
    secret: Option<weir_common::service::security::Secret>,
}

impl DataSecurity {
    /// The data plane's side of a process's [`Security`](weir_common::service::security::Security).
    pub fn from(
        security: &weir_common::service::security::Security,
    ) -> Result<DataSecurity, weir_common::service::security::SecurityError> {
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
    async fn accept(&self, tcp: TcpStream) -> Result<DataStream, DataSecurityError> {
        let mut stream: DataStream = match &self.tls {
            Some((acceptor, _)) => Box::new(acceptor.accept(tcp).await.map_err(DataSecurityError::Handshake)?),
            None => Box::new(tcp),
        };
        if let Some(secret) = &self.secret {
            match read_raw(&mut stream, "cluster secret", MAX_HANDSHAKE).await {
                Ok(Some((T_AUTH, offered))) if secret.matches(&offered) => {}
                Ok(Some((T_AUTH, _))) => return Err(DataSecurityError::WrongSecret),
                _ => return Err(DataSecurityError::NoSecret),
            }
        }
        Ok(stream)
    }

    /// The producer's side.
    pub(super) async fn connect(&self, tcp: TcpStream, addr: &str) -> Result<DataStream, DataSecurityError> {
        let mut stream: DataStream = match &self.tls {
            Some((_, connector)) => {
                let host = addr.rsplit_once(':').map(|(h, _)| h).unwrap_or(addr).trim_matches(['[', ']']);
                let name = rustls::pki_types::ServerName::try_from(host.to_string())
                    .map_err(|source| DataSecurityError::ServerName { host: host.to_string(), source })?;
                Box::new(connector.connect(name, tcp).await.map_err(DataSecurityError::Handshake)?)
            }
            None => Box::new(tcp),
        };
        if let Some(secret) = &self.secret {
            let mut frame = Vec::new();
            begin_frame(&mut frame, T_AUTH);
            frame.extend_from_slice(secret.expose().as_bytes());
            finish_frame(&mut frame);
            stream.write_all(&frame).await.map_err(DataSecurityError::SendSecret)?;
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
pub(super) struct ServerState {
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
pub(super) struct Parked {
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
                    Ok(Ok(Some((T_HANDSHAKE, payload)))) => decode_handshake(&payload).ok(),
                    _ => None,
                };
                match hs {
                    Some(hs) => me.deliver(hs.to, ((hs.from_vertex, hs.from_subtask, hs.to_input), stream)),
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
                tracing::debug!(job_id = %key.job_id, vertex = key.vertex, subtask = key.subtask, from_vertex = from.0, from_subtask = from.1, to_input = from.2, why,
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
