//! The etcd primitives of high availability: the connection ([`Etcd`]), leader election on a lease
//! ([`campaign`]), one term of leadership and its fencing condition ([`Term`]), and the binding of an HA cluster
//! id to one checkpoint store. The job store writes through them; the leader loop ([`super::leader`]) runs on
//! them.
//!
//! Keys, all under `/weir/<cluster-id>/`:
//!
//! - `leader`: the leader's client address, attached to its lease. Its create revision is the leader's
//!   **epoch**: it grows with every new leader, and every JM → TM message carries it.
//! - `cluster`: the checkpoint store URL the cluster was created with (a job manager configured with another
//!   store refuses to start: its jobs' checkpoints would not be where its records say).
//! - `jobs/<job-id>`: one job record (see `job::store`); written only in a transaction conditioned on
//!   the writer still holding `leader` at its epoch, and on the record's own revision (compare-and-swap).
//!
//! A leader declares itself deposed when its lease could have expired: no successful keep-alive for two
//! thirds of the TTL (etcd counts the TTL from the last keep-alive it received, which is before the answer
//! the leader saw).

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, PutOptions, Txn, TxnOp};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::{info, warn};
use weir_common::service::store::Store;

/// How often a standby tries to become leader.
const CAMPAIGN_PERIOD: Duration = Duration::from_millis(250);
/// Wait before a call that could not connect is made again.
const CONNECT_RETRY: Duration = Duration::from_millis(50);
/// The object in the checkpoint store that names the HA cluster owning it.
pub const CLUSTER_MARKER: &str = "_weir_ha_cluster";

/// An HA failure the job manager cannot work around.
#[derive(Debug, thiserror::Error)]
pub enum HaError {
    /// etcd cannot be reached or refused a request.
    #[error("etcd at {endpoints}: {reason}")]
    Etcd {
        /// The endpoints tried.
        endpoints: String,
        /// What went wrong.
        reason: String,
    },
    /// Two clusters would share one store, or one cluster two stores.
    #[error("{0}")]
    Conflict(String),
}

/// The etcd side of one HA cluster.
#[derive(Clone)]
pub struct Etcd {
    client: Client,
    endpoints: String,
    prefix: String,
    /// Upper bound of any single etcd call.
    call_timeout: Duration,
}

impl Etcd {
    /// Connects, bounded by `timeout`, and checks that etcd answers. `https://` endpoints are reached over TLS
    /// with this member's certificate (mutual TLS), trusting the cluster CA (which may be a bundle that also
    /// holds etcd's CA).
    pub async fn connect(
        endpoints: &[String],
        cluster_id: &str,
        timeout: Duration,
        tls: Option<&weir_common::service::security::TlsFiles>,
    ) -> Result<Etcd, HaError> {
        let joined = endpoints.join(",");
        let err = |reason: String| HaError::Etcd { endpoints: joined.clone(), reason };
        let mut options =
            ConnectOptions::new().with_connect_timeout(timeout.min(Duration::from_secs(3))).with_timeout(timeout);
        if let Some(tls) = tls {
            options = options.with_tls(tls.tonic_client());
        }
        if let Ok(user) = std::env::var("WEIR_ETCD_USER") {
            let password = std::env::var("WEIR_ETCD_PASSWORD").unwrap_or_default();
            options = options.with_user(user, password);
        }
        let connect = Client::connect(endpoints, Some(options));
        let mut client = match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(err(e.to_string())),
            Err(_) => return Err(err(format!("no connection within {} ms", timeout.as_millis()))),
        };
        match tokio::time::timeout(timeout, client.status()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(err(e.to_string())),
            Err(_) => return Err(err(format!("no answer within {} ms", timeout.as_millis()))),
        }
        Ok(Etcd { client, endpoints: joined, prefix: format!("/weir/{cluster_id}/"), call_timeout: timeout })
    }

    /// The full key of `rel` under the cluster's prefix.
    pub fn key(&self, rel: &str) -> String {
        format!("{}{rel}", self.prefix)
    }

    /// A client for one call (clones share the connection).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Bounds an etcd call (made by `f` with a fresh client handle) and turns its failure into an
    /// [`HaError`]. A call that could not even connect is made again until the bound: with a member of the
    /// cluster down, the client's balancer still sends some calls to it, and those were never sent, so they
    /// are safe to repeat (a call that reached etcd is never repeated: a job record's compare-and-swap would
    /// then fail against its own write).
    pub async fn call<T, F, Fut>(&self, what: &str, f: F) -> Result<T, HaError>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = Instant::now() + self.call_timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, f(self.client())).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if not_connected(&e) && Instant::now() + CONNECT_RETRY < deadline => {
                    tokio::time::sleep(CONNECT_RETRY).await;
                }
                Ok(Err(e)) => {
                    return Err(HaError::Etcd { endpoints: self.endpoints.clone(), reason: format!("{what}: {e}") })
                }
                Err(_) => {
                    return Err(HaError::Etcd {
                        endpoints: self.endpoints.clone(),
                        reason: format!("{what}: no answer within {} ms", self.call_timeout.as_millis()),
                    })
                }
            }
        }
    }

    /// Binds the cluster to `store_url` on first use and checks the binding afterwards, in etcd and in the
    /// store itself (two clusters with different ids on one store would both lead it).
    pub async fn bind_store(&self, cluster_id: &str, store: &Store) -> Result<(), HaError> {
        let key = self.key("cluster");
        let url = store.url().to_string();
        let txn = Txn::new()
            .when([Compare::version(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.clone(), url.clone(), None)])
            .or_else([TxnOp::get(key.clone(), None)]);
        let resp = self
            .call("binding the checkpoint store", |mut c| {
                let t = txn.clone();
                async move { c.txn(t).await }
            })
            .await?;
        if !resp.succeeded() {
            let existing = first_value(&resp).unwrap_or_default();
            if existing != url {
                return Err(HaError::Conflict(format!(
                    "HA cluster {cluster_id:?} keeps its checkpoints in {existing}, not in {url}: give every job manager of \
                     one cluster the same --checkpoint-store"
                )));
            }
        }
        match store.get(CLUSTER_MARKER).await {
            Ok(bytes) => {
                let owner = String::from_utf8_lossy(&bytes).trim().to_string();
                if owner != cluster_id {
                    return Err(HaError::Conflict(format!(
                        "checkpoint store {url} belongs to HA cluster {owner:?}, and this job manager is in {cluster_id:?}: \
                         two clusters must not share a checkpoint store (check --ha-cluster-id)"
                    )));
                }
                Ok(())
            }
            Err(weir_common::service::store::StoreError::NotFound(_)) => {
                match store.put_new(CLUSTER_MARKER, cluster_id.as_bytes().to_vec().into()).await {
                    Ok(()) => Ok(()),
                    // Another job manager of some cluster wrote it meanwhile: read who.
                    Err(_) => Box::pin(self.bind_store(cluster_id, store)).await,
                }
            }
            Err(e) => Err(HaError::Conflict(format!("cannot read {CLUSTER_MARKER} in checkpoint store {url}: {e}"))),
        }
    }
}

/// Whether a call failed before anything was sent: no connection to the member it was routed to.
/// Whether a call failed before reaching etcd: its connection could not be made (refused, unreachable).
fn not_connected(e: &etcd_client::Error) -> bool {
    let first: &(dyn std::error::Error + 'static) = match e {
        etcd_client::Error::GRpcStatus(s) if s.code() == tonic::Code::Unavailable => s,
        etcd_client::Error::TransportError(t) => t,
        _ => return false,
    };
    std::iter::successors(Some(first), |e| e.source()).any(|e| {
        e.downcast_ref::<std::io::Error>().is_some_and(|io| {
            use std::io::ErrorKind::*;
            matches!(
                io.kind(),
                ConnectionRefused | NotConnected | AddrNotAvailable | HostUnreachable | NetworkUnreachable
            )
        })
    })
}

fn first_value(resp: &etcd_client::TxnResponse) -> Option<String> {
    resp.op_responses().into_iter().find_map(|op| match op {
        etcd_client::TxnOpResponse::Get(g) => g.kvs().first().map(|kv| String::from_utf8_lossy(kv.value()).to_string()),
        _ => None,
    })
}

/// One term of leadership: the epoch, the lease and whether it is over.
#[derive(Clone)]
pub struct Term {
    /// The leader key's create revision: larger for every later leader.
    pub epoch: u64,
    lease: i64,
    leader_key: String,
    lost: watch::Receiver<bool>,
    etcd: Etcd,
}

impl Term {
    /// The condition of every write of this leader: it still holds the leader key it created.
    pub fn fence(&self) -> Compare {
        Compare::create_revision(self.leader_key.clone(), CompareOp::Equal, self.epoch as i64)
    }

    /// Whether this term is over (the lease may have expired, or the leader resigned).
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Resolves when the term is over.
    pub async fn lost(&self) {
        let mut rx = self.lost.clone();
        let _ = rx.wait_for(|l| *l).await;
    }

    /// The etcd connection of this term.
    pub fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    /// Gives leadership up now (revoking the lease deletes the leader key), so a standby takes over without
    /// waiting for the TTL.
    pub async fn resign(&self) {
        if let Err(e) =
            self.etcd.call("revoking the lease", |mut c| async move { c.lease_revoke(self.lease).await }).await
        {
            warn!(error = %e, "cannot revoke the leader lease; it expires by itself");
        }
    }
}

/// Campaigns until this job manager leads (or `stop` fires): returns its term. Meanwhile `leader` holds the
/// current leader's address, for standbys to point callers to.
pub async fn campaign(
    etcd: &Etcd,
    address: &str,
    ttl: Duration,
    leader: &watch::Sender<Option<String>>,
    stop: &mut watch::Receiver<bool>,
) -> Option<Term> {
    let key = etcd.key("leader");
    // Leases last whole seconds; the keep-alive deadline below is computed from the same rounded TTL.
    let ttl_s = ttl.as_secs().max(1) as i64;
    let ttl = Duration::from_secs(ttl_s as u64);
    loop {
        if *stop.borrow() {
            return None;
        }
        match try_to_lead(etcd, &key, address, ttl_s).await {
            Ok(Ok((epoch, lease))) => {
                let (lost_tx, lost) = watch::channel(false);
                leader.send_replace(Some(address.to_string()));
                tokio::spawn(keep_alive(etcd.clone(), lease, ttl, lost_tx));
                info!(epoch, address, ttl_ms = ttl.as_millis() as u64, "elected leader");
                return Some(Term { epoch, lease, leader_key: key, lost, etcd: etcd.clone() });
            }
            Ok(Err(current)) => {
                if *leader.borrow() != current {
                    info!(leader = current.as_deref().unwrap_or(""), "standby: following the leader");
                }
                leader.send_replace(current);
            }
            Err(e) => {
                warn!(error = %e, "cannot campaign; retrying");
                leader.send_replace(None);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(CAMPAIGN_PERIOD) => {}
            _ = stop.changed() => {}
        }
    }
}

/// One round of the campaign: the leader's address if someone leads, else an attempt to create the leader
/// key on a fresh lease (a standby holds no lease: one granted long ago would have expired unrenewed).
async fn try_to_lead(
    etcd: &Etcd,
    key: &str,
    address: &str,
    ttl_s: i64,
) -> Result<Result<(u64, i64), Option<String>>, HaError> {
    let current = etcd.call("reading the leader", |mut c| async move { c.get(key, None).await }).await?;
    if let Some(kv) = current.kvs().first() {
        return Ok(Err(Some(String::from_utf8_lossy(kv.value()).to_string())));
    }
    let lease = etcd.call("granting a lease", |mut c| async move { c.lease_grant(ttl_s, None).await }).await?.id();
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(key, address, Some(PutOptions::new().with_lease(lease)))])
        .or_else([TxnOp::get(key, None)]);
    let resp = etcd
        .call("campaigning", |mut c| {
            let t = txn.clone();
            async move { c.txn(t).await }
        })
        .await?;
    if resp.succeeded() {
        let epoch = resp.header().map(|h| h.revision()).unwrap_or_default() as u64;
        return Ok(Ok((epoch, lease)));
    }
    // Another job manager won this round.
    let _ = etcd.call("revoking an unused lease", |mut c| async move { c.lease_revoke(lease).await }).await;
    Ok(Err(first_value(&resp)))
}

/// Keeps the lease alive; reports the term lost once the lease may have expired.
async fn keep_alive(etcd: Etcd, lease: i64, ttl: Duration, lost: watch::Sender<bool>) {
    let period = (ttl / 4).max(Duration::from_millis(100));
    let deadline = ttl * 2 / 3;
    let mut last_ok = Instant::now();
    let mut stream = None;
    loop {
        if lost.is_closed() {
            return;
        }
        let tick = Instant::now();
        if stream.is_none() {
            if let Ok(Ok(s)) = tokio::time::timeout(period, etcd.client().lease_keep_alive(lease)).await {
                stream = Some(s);
            }
        }
        let mut renewed = false;
        if let Some((keeper, answers)) = stream.as_mut() {
            let round = async {
                keeper.keep_alive().await?;
                answers.message().await
            };
            match tokio::time::timeout(period, round).await {
                Ok(Ok(Some(r))) if r.ttl() > 0 => {
                    last_ok = tick;
                    renewed = true;
                }
                Ok(Ok(Some(_))) => {
                    warn!(lease, "the leader lease expired");
                    lost.send_replace(true);
                    return;
                }
                _ => stream = None,
            }
        }
        if last_ok.elapsed() >= deadline {
            warn!(
                lease,
                silent_ms = last_ok.elapsed().as_millis() as u64,
                "etcd silent: leadership may have lapsed; stopping coordination"
            );
            lost.send_replace(true);
            return;
        }
        // A failed round (a member down, say) is tried again at once on a new stream, which the client's
        // balancer may route to another member.
        let pause = if renewed { period.saturating_sub(tick.elapsed()) } else { CONNECT_RETRY };
        tokio::time::sleep(pause).await;
    }
}

/// A real etcd for unit tests: Debian's `etcd` (installed by `scripts/setup.sh`) on free loopback ports, in a
/// temporary directory, killed when dropped.
#[cfg(test)]
pub(crate) mod test_etcd {
    use std::process::{Child, Command, Stdio};

    /// One etcd member.
    pub(crate) struct TestEtcd {
        child: Child,
        /// Its client URL.
        pub(crate) url: String,
        _dir: tempfile::TempDir,
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
    }

    impl TestEtcd {
        pub(crate) fn start() -> TestEtcd {
            let bin = ["/usr/bin/etcd", "/usr/local/bin/etcd"]
                .into_iter()
                .find(|p| std::path::Path::new(p).exists())
                .expect("etcd not found: run scripts/setup.sh (it installs Debian's etcd-server)");
            let dir = tempfile::tempdir().expect("tempdir");
            let (client, peer) =
                (format!("http://127.0.0.1:{}", free_port()), format!("http://127.0.0.1:{}", free_port()));
            let child = Command::new(bin)
                .args(["--name", "t", "--data-dir"])
                .arg(dir.path().join("data"))
                .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
                .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
                .args(["--initial-cluster", &format!("t={peer}")])
                .env("ETCD_UNSUPPORTED_ARCH", std::env::consts::ARCH)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start etcd");
            TestEtcd { child, url: client, _dir: dir }
        }
    }

    impl Drop for TestEtcd {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_etcd::TestEtcd;
    use super::*;

    #[tokio::test]
    async fn a_call_to_a_member_that_is_gone_is_known_as_never_sent() {
        let etcd = TestEtcd::start();
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = loop {
            if let Ok(Ok(mut c)) =
                tokio::time::timeout(Duration::from_secs(2), Client::connect([etcd.url.as_str()], None)).await
            {
                if c.status().await.is_ok() {
                    break c;
                }
            }
            assert!(Instant::now() < deadline, "etcd did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        drop(etcd);
        // The first call may still meet the dying connection; once it is gone, every reconnect is refused.
        let mut last = None;
        for _ in 0..20 {
            match tokio::time::timeout(Duration::from_secs(2), client.clone().get("k", None)).await {
                Ok(Err(e)) if not_connected(&e) => return,
                Ok(Err(e)) => last = Some(format!("{e:?}")),
                Ok(Ok(_)) => panic!("etcd answered after it was stopped"),
                Err(_) => last = Some("no answer".into()),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no call was recognised as not connected; the last error: {last:?}");
    }

    #[test]
    fn an_error_etcd_answered_with_is_not_a_connection_failure() {
        let answered = etcd_client::Error::GRpcStatus(tonic::Status::failed_precondition("compare failed"));
        assert!(!not_connected(&answered));
        let unavailable = etcd_client::Error::GRpcStatus(tonic::Status::unavailable("leader changed"));
        assert!(!not_connected(&unavailable), "etcd's own UNAVAILABLE reached it: the call may have been applied");
    }
}
