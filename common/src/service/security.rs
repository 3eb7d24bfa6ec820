//! Who may talk to a Weir cluster, and how a process proves it is one of them.
//!
//! - Members (job managers, task managers) authenticate each other by certificate when TLS is on (mutual
//!   TLS: the certificate must be signed by the cluster's CA, `--tls-ca`), or by a shared cluster secret
//!   (`--cluster-secret-file`) sent with every call when it is off. The internal services accept nothing
//!   else: a client token never opens them.
//! - Clients (`weir`) send a bearer token (`--token-file` / `WEIR_TOKEN`); the job manager's client API checks
//!   it against `--auth-token-file`. A member's credential (its certificate, or the cluster secret without
//!   TLS) opens the client API too, so an operator on a cluster node can use the node's own
//!   (`weir --tls-cert/--tls-key` or `weir --cluster-secret-file`).
//! - Secrets are read from files or the environment only; [`Secret`]'s `Debug` and `Display` print
//!   `<redacted>`, so a secret cannot reach a log line or an error message by accident.
//!
//! The checks on the serving side are tonic interceptors (tower services wrapped around each gRPC service):
//! [`MemberCheck`] for the internal services, [`ClientCheck`] for the client API.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Status};

/// Metadata key of the cluster secret on internal calls without TLS.
pub const SECRET_METADATA: &str = "weir-cluster-secret";

/// A security setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    /// A file cannot be read.
    #[error("{what} {path}: {source}")]
    Read {
        /// What the file is for.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The files do not make a usable TLS setup.
    #[error("TLS: {0}")]
    Tls(String),
    /// Some but not all of the TLS flags are given, or a secret is empty.
    #[error("{0}")]
    Incomplete(String),
}

/// A secret value (token, cluster secret): compared in constant time, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    /// Reads a secret from a file (surrounding whitespace is not part of it).
    pub fn from_file(what: &'static str, path: &Path) -> Result<Secret, SecurityError> {
        let text = std::fs::read_to_string(path).map_err(|source| SecurityError::Read {
            what,
            path: path.to_path_buf(),
            source,
        })?;
        Secret::new(what, text.trim())
    }

    /// A secret from a value (from the environment, say); empty is refused.
    pub fn new(what: &'static str, value: &str) -> Result<Secret, SecurityError> {
        if value.trim().is_empty() {
            return Err(SecurityError::Incomplete(format!("{what} is empty")));
        }
        Ok(Secret(Arc::from(value.trim())))
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `offered` is this secret, in time independent of where they differ.
    pub fn matches(&self, offered: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        let mine = self.0.as_bytes();
        mine.len() == offered.len() && bool::from(mine.ct_eq(offered))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A member's certificate, key and the cluster CA, read and checked.
#[derive(Clone)]
pub struct TlsFiles {
    /// The certificate chain (PEM).
    pub cert_pem: Arc<Vec<u8>>,
    /// Its private key (PEM).
    pub key_pem: Arc<Vec<u8>>,
    /// The CA that signs every member's certificate (PEM).
    pub ca_pem: Arc<Vec<u8>>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsFiles { key: <redacted>, .. }")
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsFiles {
    /// Reads the three files and checks that they parse and that the key belongs to the certificate.
    pub fn load(cert: &Path, key: &Path, ca: &Path) -> Result<TlsFiles, SecurityError> {
        let read = |what, p: &Path| {
            std::fs::read(p).map_err(|source| SecurityError::Read { what, path: p.to_path_buf(), source })
        };
        let files = TlsFiles {
            cert_pem: Arc::new(read("TLS certificate", cert)?),
            key_pem: Arc::new(read("TLS key", key)?),
            ca_pem: Arc::new(read("TLS CA", ca)?),
        };
        // Building rustls's configuration checks everything a handshake would, now rather than at the first
        // connection: PEM syntax, a key that matches the certificate, a usable CA.
        files.rustls_server().map_err(|e| match e {
            SecurityError::Tls(m) => SecurityError::Tls(format!(
                "{m} (certificate {}, key {}, CA {})",
                cert.display(),
                key.display(),
                ca.display()
            )),
            e => e,
        })?;
        files.rustls_client()?;
        Ok(files)
    }

    /// Only a CA to trust, no certificate of one's own: a client of the client API (`weir --tls-ca`).
    pub fn trusting(ca: &Path) -> Result<TlsFiles, SecurityError> {
        let ca_pem = std::fs::read(ca).map_err(|source| SecurityError::Read {
            what: "TLS CA",
            path: ca.to_path_buf(),
            source,
        })?;
        let files = TlsFiles { cert_pem: Arc::default(), key_pem: Arc::default(), ca_pem: Arc::new(ca_pem) };
        files.roots()?;
        Ok(files)
    }

    fn certs(&self) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, SecurityError> {
        use rustls::pki_types::pem::PemObject;
        let certs: Result<Vec<_>, _> = rustls::pki_types::CertificateDer::pem_slice_iter(&self.cert_pem).collect();
        let certs = certs.map_err(|e| SecurityError::Tls(format!("unreadable certificate: {e}")))?;
        if certs.is_empty() {
            return Err(SecurityError::Tls("the certificate file holds no certificate".into()));
        }
        Ok(certs)
    }

    fn key(&self) -> Result<rustls::pki_types::PrivateKeyDer<'static>, SecurityError> {
        use rustls::pki_types::pem::PemObject;
        // The parser's error names a PEM section, never the key's bytes.
        rustls::pki_types::PrivateKeyDer::from_pem_slice(&self.key_pem)
            .map_err(|e| SecurityError::Tls(format!("unreadable private key: {e}")))
    }

    fn roots(&self) -> Result<rustls::RootCertStore, SecurityError> {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(&self.ca_pem) {
            let c = c.map_err(|e| SecurityError::Tls(format!("unreadable CA certificate: {e}")))?;
            roots.add(c).map_err(|e| SecurityError::Tls(format!("unusable CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(SecurityError::Tls("the CA file holds no certificate".into()));
        }
        Ok(roots)
    }

    /// A rustls server configuration that requires a client certificate signed by the CA (the data plane,
    /// where every peer is a member).
    pub fn rustls_server(&self) -> Result<Arc<rustls::ServerConfig>, SecurityError> {
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(self.roots()?), provider())
            .build()
            .map_err(|e| SecurityError::Tls(format!("client verifier: {e}")))?;
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| SecurityError::Tls(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.certs()?, self.key()?)
            .map_err(|e| SecurityError::Tls(format!("the key does not fit the certificate: {e}")))?;
        Ok(Arc::new(config))
    }

    /// A rustls server configuration for gRPC: this member's identity and h2; a client certificate is optional
    /// (clients of the client API have none) but, when presented, must be signed by the CA, and
    /// [`MemberCheck`] requires one on the internal services.
    pub fn rustls_grpc_server(&self) -> Result<Arc<rustls::ServerConfig>, SecurityError> {
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(self.roots()?), provider())
            .allow_unauthenticated()
            .build()
            .map_err(|e| SecurityError::Tls(format!("client verifier: {e}")))?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| SecurityError::Tls(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.certs()?, self.key()?)
            .map_err(|e| SecurityError::Tls(format!("the key does not fit the certificate: {e}")))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }

    /// A rustls client configuration that trusts the CA and presents this member's certificate.
    pub fn rustls_client(&self) -> Result<Arc<rustls::ClientConfig>, SecurityError> {
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| SecurityError::Tls(e.to_string()))?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(self.certs()?, self.key()?)
            .map_err(|e| SecurityError::Tls(format!("the key does not fit the certificate: {e}")))?;
        Ok(Arc::new(config))
    }

    /// tonic's client configuration: trust the CA, present this member's certificate.
    pub fn tonic_client(&self) -> ClientTlsConfig {
        let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(self.ca_pem.as_slice()));
        if self.cert_pem.is_empty() {
            return config;
        }
        config.identity(Identity::from_pem(self.cert_pem.as_slice(), self.key_pem.as_slice()))
    }
}

/// Lets a warning about refused peers through at most once per [`RefusalLog::PERIOD`], counting the ones it
/// held back: a peer that retries twice a second with a wrong credential must not flood the log, yet must be
/// seen.
#[derive(Debug, Default)]
struct RefusalLog {
    last_ms: std::sync::atomic::AtomicU64,
    held_back: std::sync::atomic::AtomicU64,
}

impl RefusalLog {
    const PERIOD_MS: u64 = 5_000;

    /// `Some(n)`: log now, `n` refusals were held back since the last line; `None`: hold this one back.
    fn admit(&self) -> Option<u64> {
        use std::sync::atomic::Ordering;
        let now = crate::now_ms();
        let last = self.last_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= Self::PERIOD_MS
            && self.last_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            return Some(self.held_back.swap(0, Ordering::Relaxed));
        }
        self.held_back.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// How long a peer may take over its TLS handshake before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The connections of a gRPC server with TLS: accepted on `listener`, each handshake done (bounded by
/// [`HANDSHAKE_TIMEOUT`]) on its own task. A peer whose handshake fails — a certificate of another CA, a
/// plaintext client — is logged at warning level with its address and the reason, which tonic's own TLS
/// would drop silently. `service` names the server in those lines.
pub fn tls_incoming(
    listener: tokio::net::TcpListener,
    config: Arc<rustls::ServerConfig>,
    service: &'static str,
) -> impl futures::Stream<Item = Result<tokio_rustls::server::TlsStream<tokio::net::TcpStream>, std::io::Error>> {
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let refusals = Arc::new(RefusalLog::default());
    tokio::spawn(async move {
        loop {
            // The server stopped (it dropped the stream): stop accepting, which frees the port.
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = tx.closed() => return,
            };
            let (tcp, peer) = match accepted {
                Ok(c) => c,
                Err(error) => {
                    // Out of descriptors, say: keep serving the connections there are, and try again shortly.
                    tracing::warn!(service, %error, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx, refusals) = (acceptor.clone(), tx.clone(), refusals.clone());
            tokio::spawn(async move {
                let error = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(stream)).await;
                        return;
                    }
                    Ok(Err(error)) => error.to_string(),
                    Err(_) => format!("no TLS handshake within {} ms", HANDSHAKE_TIMEOUT.as_millis()),
                };
                if let Some(held_back) = refusals.admit() {
                    tracing::warn!(service, %peer, %error, held_back, "refused a connection: its TLS handshake failed");
                }
            });
        }
    });
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Why a TLS connection to `addr` (`https://HOST:PORT` or `HOST:PORT`) fails, if it does, found by one
/// handshake of our own with `tls`: a gRPC client only learns that its connection broke ("operation was
/// canceled"), while the peer's alert says why (`UnknownCA`: it does not accept our certificate). With TLS 1.3
/// a server checks the client's certificate after the client finished its side, so the alert is read after
/// the handshake; a connection closed then, with or without the alert, is the peer refusing our certificate.
/// Silence for two seconds means the peer accepted us.
pub async fn diagnose_tls(addr: &str, tls: &TlsFiles) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let host_port = addr.split("://").nth(1).unwrap_or(addr).trim_end_matches('/');
    let host = host_port.rsplit_once(':').map_or(host_port, |(h, _)| h).trim_matches(['[', ']']).to_string();
    let config = match tls.rustls_client() {
        Ok(c) => c,
        Err(e) => return Some(e.to_string()),
    };
    let attempt = async {
        let tcp = tokio::net::TcpStream::connect(host_port).await.map_err(|e| format!("cannot connect: {e}"))?;
        let name = rustls::pki_types::ServerName::try_from(host).map_err(|e| format!("server name: {e}"))?;
        let mut stream = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake: {e}"))?;
        let mut byte = [0u8; 1];
        let refused = "it closed the connection right after the TLS handshake: it does not accept this member's \
                       certificate (is it signed by the peer's CA?)";
        match tokio::time::timeout(Duration::from_secs(2), stream.read(&mut byte)).await {
            Ok(Err(e)) if e.to_string().contains("alert") => {
                Err(format!("{e}: the peer does not accept this member's certificate"))
            }
            Ok(Err(e)) => Err(format!("{refused}: {e}")),
            Ok(Ok(0)) => Err(refused.to_string()),
            _ => Ok(()),
        }
    };
    match tokio::time::timeout(Duration::from_secs(5), attempt).await {
        Ok(Ok(())) => None,
        Ok(Err(why)) => Some(why),
        Err(_) => Some("no TLS handshake within 5 s".into()),
    }
}

/// A gRPC status with the errors it wraps, outermost first: tonic's own message for a failed connection is
/// often only "transport error" or "operation was canceled", and the reason (a TLS alert, a refused
/// certificate) is further down.
pub fn status_chain(status: &Status) -> String {
    let mut text = format!("{}: {}", status.code(), status.message());
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        let s = e.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
        source = e.source();
    }
    text
}

/// The security flags of every Weir binary, defined once and flattened into the job manager's, the task
/// manager's and the `weir` command's arguments (and, under the same keys, into the binaries' configuration
/// files). A member (job or task manager) takes TLS with all three files or none; the `weir` command may give
/// only `--tls-ca`, to trust the job manager without presenting a certificate.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SecurityFlags {
    /// TLS certificate (PEM) this process presents; a member's turns TLS on, with --tls-key and --tls-ca
    #[arg(long, global = true, env = "WEIR_TLS_CERT", value_name = "FILE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM)
    #[arg(long, global = true, env = "WEIR_TLS_KEY", value_name = "FILE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<PathBuf>,
    /// The CA that signs every member's certificate (PEM): what the other side's certificate is checked against
    #[arg(long, global = true, env = "WEIR_TLS_CA", value_name = "FILE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<PathBuf>,
    /// File with the shared secret members present when TLS is off (the `weir` command may present it to the
    /// client API instead of a token)
    #[arg(long, global = true, env = "WEIR_CLUSTER_SECRET_FILE", value_name = "FILE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_secret_file: Option<PathBuf>,
}

impl SecurityFlags {
    /// The configuration keys these flags set (also read from `WEIR_<KEY>`).
    pub const KEYS: &'static [&'static str] = &["tls_cert", "tls_key", "tls_ca", "cluster_secret_file"];

    /// A member's security: the TLS files (all three or none), read and checked, and the cluster secret.
    pub fn member(&self) -> Result<Security, SecurityError> {
        Ok(Security {
            tls: load_tls(self.tls_cert.as_deref(), self.tls_key.as_deref(), self.tls_ca.as_deref())?,
            secret: Security::cluster_secret(self.cluster_secret_file.as_deref())?,
            token: None,
        })
    }

    /// Whether TLS is on for a member (its addresses are `https://`).
    pub fn tls_on(&self) -> bool {
        self.tls_cert.is_some()
    }
}

/// The TLS flags of every binary, read together.
pub fn load_tls(cert: Option<&Path>, key: Option<&Path>, ca: Option<&Path>) -> Result<Option<TlsFiles>, SecurityError> {
    match (cert, key, ca) {
        (None, None, None) => Ok(None),
        (Some(c), Some(k), Some(a)) => TlsFiles::load(c, k, a).map(Some),
        _ => Err(SecurityError::Incomplete("TLS needs all of --tls-cert, --tls-key and --tls-ca".into())),
    }
}

/// What a process presents when it calls another: TLS (and its member certificate), the cluster secret, a
/// client token. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Security {
    /// TLS files; `None` = plaintext.
    pub tls: Option<TlsFiles>,
    /// The cluster secret, sent on calls when TLS is off.
    pub secret: Option<Secret>,
    /// The client token, sent as `authorization: Bearer …`.
    pub token: Option<Secret>,
}

/// A channel that adds this process's credentials to every call.
pub type SecureChannel = InterceptedService<Channel, Credentials>;

/// Adds the cluster secret and the bearer token to outgoing calls.
#[derive(Clone, Debug, Default)]
pub struct Credentials {
    secret: Option<Secret>,
    token: Option<Secret>,
}

impl tonic::service::Interceptor for Credentials {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(s) = &self.secret {
            let v = MetadataValue::try_from(s.expose())
                .map_err(|_| Status::invalid_argument("the cluster secret is not valid header text"))?;
            req.metadata_mut().insert(SECRET_METADATA, v);
        }
        if let Some(t) = &self.token {
            let v = MetadataValue::try_from(format!("Bearer {}", t.expose()))
                .map_err(|_| Status::invalid_argument("the token is not valid header text"))?;
            req.metadata_mut().insert("authorization", v);
        }
        Ok(req)
    }
}

/// An address a channel cannot be made to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// Not a URL a channel can use.
    #[error("invalid address {addr:?}: {reason}")]
    Invalid {
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// TLS could not be set up for it.
    #[error("TLS for {addr}: {reason}")]
    Tls {
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
}

impl Security {
    /// The cluster secret read from `file` (`--cluster-secret-file`), if one is given.
    pub fn cluster_secret(file: Option<&Path>) -> Result<Option<Secret>, SecurityError> {
        file.map(|f| Secret::from_file("cluster secret", f)).transpose()
    }

    /// An endpoint for `addr` (`http://` or `https://`), with TLS when configured.
    pub fn endpoint(&self, addr: &str, timeout: Duration) -> Result<Endpoint, EndpointError> {
        let addr = match (&self.tls, addr.strip_prefix("http://")) {
            // With TLS on, members' advertised `http://` addresses are reached over TLS all the same.
            (Some(_), Some(rest)) => format!("https://{rest}"),
            _ => addr.to_string(),
        };
        let mut endpoint = Endpoint::from_shared(addr.clone())
            .map_err(|e| EndpointError::Invalid { addr: addr.clone(), reason: e.to_string() })?
            .connect_timeout(Duration::from_secs(3))
            .timeout(timeout)
            .tcp_nodelay(true);
        if let Some(tls) = &self.tls {
            endpoint = endpoint
                .tls_config(tls.tonic_client())
                .map_err(|e| EndpointError::Tls { addr: addr.clone(), reason: e.to_string() })?;
        }
        Ok(endpoint)
    }

    /// A lazily connected channel to `addr` carrying this process's credentials.
    pub fn channel(&self, addr: &str, timeout: Duration) -> Result<SecureChannel, EndpointError> {
        let channel = self.endpoint(addr, timeout)?.connect_lazy();
        Ok(InterceptedService::new(channel, self.credentials()))
    }

    /// The interceptor that adds this process's secret and token.
    pub fn credentials(&self) -> Credentials {
        Credentials { secret: if self.tls.is_some() { None } else { self.secret.clone() }, token: self.token.clone() }
    }

    /// The check for the client API: the bearer token `token` (`None`: the API is open), or a member's
    /// credential — its certificate with TLS on, the cluster secret with TLS off. With TLS on the secret is no
    /// credential at all (members never send it then), so it opens nothing.
    pub fn client_check(&self, token: Option<Secret>) -> ClientCheck {
        ClientCheck { token, secret: if self.tls.is_some() { None } else { self.secret.clone() } }
    }

    /// The check for services only members may call.
    pub fn member_check(&self) -> MemberCheck {
        MemberCheck { tls: self.tls.is_some(), secret: self.secret.clone(), refusals: Arc::default() }
    }
}

/// Whether a request came over TLS with a client certificate (which rustls verified against the CA).
fn has_member_certificate<T>(req: &Request<T>) -> bool {
    req.peer_certs().is_some_and(|c| !c.is_empty())
}

/// Admits only members to a service: with TLS, a verified client certificate; without, the cluster secret
/// (no secret configured and no TLS: everyone, the embedded local default).
#[derive(Clone, Debug)]
pub struct MemberCheck {
    tls: bool,
    secret: Option<Secret>,
    refusals: Arc<RefusalLog>,
}

impl MemberCheck {
    fn decide(&self, req: &Request<()>) -> Result<(), Status> {
        if self.tls {
            if has_member_certificate(req) {
                return Ok(());
            }
            return Err(Status::unauthenticated("this service is for cluster members: present a member certificate"));
        }
        match &self.secret {
            None => Ok(()),
            Some(s) => match req.metadata().get(SECRET_METADATA) {
                Some(v) if s.matches(v.as_bytes()) => Ok(()),
                Some(_) => Err(Status::unauthenticated("wrong cluster secret")),
                None => Err(Status::unauthenticated("this service is for cluster members: no cluster secret given")),
            },
        }
    }
}

impl tonic::service::Interceptor for MemberCheck {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        match self.decide(&req) {
            Ok(()) => Ok(req),
            Err(status) => {
                if let Some(held_back) = self.refusals.admit() {
                    let peer = req.remote_addr().map_or_else(|| "unknown".to_string(), |a| a.to_string());
                    tracing::warn!(%peer, reason = status.message(), held_back, "refused a call to an internal service");
                }
                Err(status)
            }
        }
    }
}

/// Admits a client with the right bearer token, or a member's credential (a member certificate, or the
/// cluster secret without TLS); without a configured token, everyone.
#[derive(Clone, Debug)]
pub struct ClientCheck {
    token: Option<Secret>,
    secret: Option<Secret>,
}

impl tonic::service::Interceptor for ClientCheck {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(token) = &self.token else { return Ok(req) };
        if has_member_certificate(&req) {
            return Ok(req);
        }
        let offered = req.metadata().get(SECRET_METADATA);
        if let (Some(secret), Some(v)) = (&self.secret, offered) {
            if secret.matches(v.as_bytes()) {
                return Ok(req);
            }
        }
        match req.metadata().get("authorization").map(|v| v.as_bytes()) {
            Some(v) if v.starts_with(b"Bearer ") && token.matches(&v[7..]) => Ok(req),
            Some(_) => Err(Status::unauthenticated("invalid token")),
            None => Err(Status::unauthenticated("a token is required: give --token-file or WEIR_TOKEN")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("token", " hunter2 \n").unwrap();
        assert_eq!(format!("{s} {s:?}"), "<redacted> <redacted>");
        assert!(s.matches(b"hunter2"));
        assert!(!s.matches(b"hunter3"));
        assert!(!s.matches(b"hunter"));
        assert!(Secret::new("token", "  ").is_err());
    }

    #[test]
    fn member_check_wants_the_secret() {
        let secret = Secret::new("cluster secret", "s3cret").unwrap();
        let mut check = Security { secret: Some(secret.clone()), ..Default::default() }.member_check();
        assert_eq!(check.call(Request::new(())).unwrap_err().code(), tonic::Code::Unauthenticated);
        let mut req = Request::new(());
        req.metadata_mut().insert(SECRET_METADATA, "wrong".parse().unwrap());
        assert_eq!(check.call(req).unwrap_err().message(), "wrong cluster secret");
        let mut creds = Security { secret: Some(secret), ..Default::default() }.credentials();
        let req = creds.call(Request::new(())).unwrap();
        assert!(check.call(req).is_ok());
        // A client token is not a member credential.
        let mut client =
            Security { token: Some(Secret::new("token", "t").unwrap()), ..Default::default() }.credentials();
        let req = client.call(Request::new(())).unwrap();
        assert!(check.call(req).is_err());
        // Without TLS, a certificate cannot be offered at all: the check asks for one only with TLS on.
        let mut tls_check = MemberCheck { tls: true, secret: None, refusals: Arc::default() };
        assert!(tls_check.call(Request::new(())).unwrap_err().message().contains("member certificate"));
    }

    #[test]
    fn with_tls_the_cluster_secret_opens_no_client_api() {
        let secret = Secret::new("cluster secret", "s3cret").unwrap();
        let tls = TlsFiles { cert_pem: Arc::default(), key_pem: Arc::default(), ca_pem: Arc::default() };
        let server = Security { tls: Some(tls), secret: Some(secret.clone()), token: None };
        let mut check = server.client_check(Some(Secret::new("token", "t0k").unwrap()));
        let mut req = Request::new(());
        req.metadata_mut().insert(SECRET_METADATA, "s3cret".parse().unwrap());
        assert_eq!(check.call(req).unwrap_err().code(), tonic::Code::Unauthenticated);
        // Without TLS the same secret is a member's credential.
        let plain = Security { secret: Some(secret), ..Default::default() };
        let mut req = Request::new(());
        req.metadata_mut().insert(SECRET_METADATA, "s3cret".parse().unwrap());
        assert!(plain.client_check(Some(Secret::new("token", "t0k").unwrap())).call(req).is_ok());
    }

    #[test]
    fn client_check_wants_the_token() {
        let mut open = Security::default().client_check(None);
        assert!(open.call(Request::new(())).is_ok());
        let secret = Secret::new("cluster secret", "s3cret").unwrap();
        let server = Security { secret: Some(secret.clone()), ..Default::default() };
        let mut check = server.client_check(Some(Secret::new("token", "t0k").unwrap()));
        // The cluster secret is a member's credential: it opens the client API too.
        let mut member = Security { secret: Some(secret), ..Default::default() }.credentials();
        assert!(check.call(member.call(Request::new(())).unwrap()).is_ok());
        assert!(check.call(Request::new(())).unwrap_err().message().contains("token is required"));
        let mut req = Request::new(());
        req.metadata_mut().insert("authorization", "Bearer nope".parse().unwrap());
        assert_eq!(check.call(req).unwrap_err().code(), tonic::Code::Unauthenticated);
        let mut creds =
            Security { token: Some(Secret::new("token", "t0k").unwrap()), ..Default::default() }.credentials();
        assert!(check.call(creds.call(Request::new(())).unwrap()).is_ok());
    }

    #[test]
    fn tls_flags_come_together() {
        let err = load_tls(Some(Path::new("/x")), None, None).unwrap_err();
        assert!(err.to_string().contains("--tls-key"), "{err}");
        assert!(load_tls(None, None, None).unwrap().is_none());
        let err =
            load_tls(Some(Path::new("/nope/c")), Some(Path::new("/nope/k")), Some(Path::new("/nope/a"))).unwrap_err();
        assert!(err.to_string().contains("/nope/c"), "{err}");
    }
}
