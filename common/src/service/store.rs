//! Object stores from URLs: `file:///dir` (default), `s3://bucket/prefix` (any S3-compatible server, set up
//! by the standard `AWS_*` variables or explicit options), `memory:///` (tests). The rest of Weir only sees
//! [`Store`] and paths relative to its root.

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// An object-store error with the URL and path it concerns.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL cannot be used.
    #[error("invalid object-store URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// A local store's directory does not exist (and was not to be created).
    #[error("no such directory: {0}")]
    NoDirectory(String),
    /// An object does not exist.
    #[error("not found in object store: {0}")]
    NotFound(String),
    /// An immutable object exists already.
    #[error("object already exists: {0}")]
    AlreadyExists(String),
    /// Any other failure (unreachable server, permissions, …).
    #[error("object store {url}: {op} {path}: {source}")]
    Io {
        /// Store URL.
        url: String,
        /// Operation.
        op: &'static str,
        /// Relative path.
        path: String,
        /// Cause.
        #[source]
        source: Box<object_store::Error>,
    },
}

/// What a probe of a store found wrong: a store that refuses (it exists and answers, but will not take
/// checkpoints — a missing bucket, no permission, a bad path) or one that cannot be reached now (down, slow,
/// a network problem — it may be fine in a minute).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The store answered and refused.
    #[error("checkpoint store {url} refuses writes: {reason}")]
    Refused {
        /// Store URL.
        url: String,
        /// The store's answer.
        reason: String,
    },
    /// The store could not be reached.
    #[error("checkpoint store {url} is unreachable or too slow: {reason}")]
    Unreachable {
        /// Store URL.
        url: String,
        /// What happened.
        reason: String,
    },
    /// The store did not answer within the probe's time.
    #[error("checkpoint store {url} is unreachable or too slow: no answer within {after_ms} ms")]
    TimedOut {
        /// Store URL.
        url: String,
        /// How long the probe waited.
        after_ms: u64,
    },
}

impl ProbeError {
    /// Whether the store did not answer within the probe's time (it may be hung rather than down).
    pub fn is_timeout(&self) -> bool {
        matches!(self, ProbeError::TimedOut { .. })
    }

    /// Whether the store refused (as opposed to being unreachable, which may pass).
    pub fn is_refusal(&self) -> bool {
        matches!(self, ProbeError::Refused { .. })
    }
}

/// Whether an error of a store that answered means it refuses for good (wrong bucket, credentials,
/// permissions, a local directory that cannot be written) rather than a passing failure of the network or of
/// a server that is down. Unknown errors count as passing: a healthy cluster must not stop on a doubt.
fn is_refusal(e: &StoreError) -> bool {
    match e {
        StoreError::InvalidUrl { .. }
        | StoreError::NoDirectory(_)
        | StoreError::NotFound(_)
        | StoreError::AlreadyExists(_) => true,
        StoreError::Io { source, .. } => match source.as_ref() {
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }
            | object_store::Error::NotFound { .. } => true,
            other => {
                // object_store keeps HTTP details in its error text: a 4xx answer is the store refusing; a local
                // file system error is a refusal too (permissions, read-only, no space).
                let text = format!("{other:?}");
                let client_error = ["status 40", "status: 40", "Client error", "NoSuchBucket", "AccessDenied"]
                    .iter()
                    .any(|m| text.contains(m));
                let local = matches!(other, object_store::Error::Generic { store: "LocalFileSystem", .. });
                client_error || local
            }
        },
    }
}

/// An object store with a root prefix; every path given to it is relative to that root.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    root: String,
    url: String,
    /// The directory of a `file://` store: [`Store::put_file`] links or copies into it in the kernel.
    local_dir: Option<std::path::PathBuf>,
}

/// Options for opening an S3 store (anything not given comes from the `AWS_*` environment).
#[derive(Clone, Debug, Default)]
pub struct StoreOptions {
    /// Extra `object_store` config keys, e.g. `aws_endpoint`, `aws_allow_http`.
    pub options: BTreeMap<String, String>,
    /// Per-request timeout.
    pub request_timeout: Option<Duration>,
}

impl StoreOptions {
    /// Options for an S3-compatible endpoint given in a binary's config (`None` = from `AWS_ENDPOINT_URL`).
    pub fn s3(endpoint: Option<&str>, allow_http: bool) -> Self {
        let mut options = BTreeMap::new();
        if let Some(e) = endpoint {
            options.insert("aws_endpoint".to_string(), e.to_string());
        }
        if allow_http {
            options.insert("aws_allow_http".to_string(), "true".to_string());
        }
        StoreOptions { options, request_timeout: None }
    }
}

impl Store {
    /// Opens the store a URL names; a local directory is created if it does not exist.
    pub fn open(url: &str, opts: &StoreOptions) -> Result<Store, StoreError> {
        Self::open_with(url, opts, true)
    }

    /// Opens the store a URL names for reading what is there: a local directory that does not exist is an
    /// error, not created (a mistyped savepoint path must leave nothing behind).
    pub fn open_existing(url: &str, opts: &StoreOptions) -> Result<Store, StoreError> {
        Self::open_with(url, opts, false)
    }

    fn open_with(url: &str, opts: &StoreOptions, create: bool) -> Result<Store, StoreError> {
        let bad = |reason: String| StoreError::InvalidUrl { url: url.to_string(), reason };
        let parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
        let local_dir = match parsed.scheme() {
            "file" => parsed.to_file_path().ok(),
            _ => None,
        };
        let (inner, root): (Arc<dyn ObjectStore>, String) = match parsed.scheme() {
            "file" => {
                let dir = parsed.to_file_path().map_err(|_| bad("not an absolute local path".into()))?;
                if create {
                    std::fs::create_dir_all(&dir).map_err(|e| bad(format!("cannot create {}: {e}", dir.display())))?;
                } else if !dir.is_dir() {
                    return Err(StoreError::NoDirectory(dir.display().to_string()));
                }
                let fs = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| bad(e.to_string()))?
                    .with_automatic_cleanup(true);
                (Arc::new(fs), String::new())
            }
            "memory" => (Arc::new(object_store::memory::InMemory::new()), parsed.path().trim_matches('/').to_string()),
            "s3" | "s3a" => {
                let bucket = parsed.host_str().ok_or_else(|| bad("missing bucket".into()))?;
                // The S3 client's rustls has no provider of its own (AWS-LC is not compiled in): ring is the
                // process default. Err means one is installed already, which is as good.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
                if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none() {
                    b = b.with_region("us-east-1");
                }
                for (k, v) in &opts.options {
                    let key = k.to_ascii_lowercase().parse().map_err(|_| bad(format!("unknown S3 option {k:?}")))?;
                    b = b.with_config(key, v);
                }
                let timeout = opts.request_timeout.unwrap_or(Duration::from_secs(30));
                let mut client = object_store::ClientOptions::new()
                    .with_timeout(timeout)
                    .with_connect_timeout(Duration::from_secs(5));
                if std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v == "true" || v == "1")
                    || opts.options.get("aws_allow_http").is_some_and(|v| v == "true")
                {
                    client = client.with_allow_http(true);
                }
                // Fail a checkpoint in seconds, not minutes, when the store is down: the coordinator retries
                // with the next checkpoint anyway.
                let retry = object_store::RetryConfig {
                    max_retries: 3,
                    retry_timeout: Duration::from_secs(10),
                    ..Default::default()
                };
                let s3 = b.with_client_options(client).with_retry(retry).build().map_err(|e| bad(e.to_string()))?;
                (Arc::new(s3), parsed.path().trim_matches('/').to_string())
            }
            other => return Err(bad(format!("unsupported scheme {other:?} (use file://, s3:// or memory://)"))),
        };
        Ok(Store { inner, root, url: url.to_string(), local_dir })
    }

    /// Checks that the store takes writes: writes a marker, reads it back and deletes it, all within
    /// `timeout`. The error says whether the store refused or could not be reached.
    pub async fn probe(&self, timeout: Duration) -> Result<(), ProbeError> {
        let marker = format!(".weir-probe-{}", uuid::Uuid::new_v4().simple());
        let body = Bytes::from_static(b"weir store probe");
        let steps = async {
            self.put(&marker, body.clone()).await?;
            let back = self.get(&marker).await?;
            self.delete(&marker).await?;
            Ok::<bool, StoreError>(back == body)
        };
        match tokio::time::timeout(timeout, steps).await {
            Ok(Ok(true)) => Ok(()),
            Ok(Ok(false)) => Err(ProbeError::Refused {
                url: self.url.clone(),
                reason: "a marker written to the store read back different".into(),
            }),
            Ok(Err(e)) if is_refusal(&e) => Err(ProbeError::Refused { url: self.url.clone(), reason: e.to_string() }),
            Ok(Err(e)) => Err(ProbeError::Unreachable { url: self.url.clone(), reason: e.to_string() }),
            Err(_) => Err(ProbeError::TimedOut { url: self.url.clone(), after_ms: timeout.as_millis() as u64 }),
        }
    }

    /// The URL the store was opened from.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn path(&self, rel: &str) -> ObjPath {
        if self.root.is_empty() {
            ObjPath::from(rel)
        } else {
            ObjPath::from(format!("{}/{}", self.root, rel))
        }
    }

    /// Failpoint `name` as the store error a real fault would be (so it takes the same paths).
    async fn fault(&self, name: &str, op: &'static str, rel: &str) -> Result<(), StoreError> {
        crate::service::fault::hit(name)
            .await
            .map_err(|f| self.io(op, rel, object_store::Error::Generic { store: "failpoint", source: Box::new(f) }))
    }

    fn io(&self, op: &'static str, rel: &str, source: object_store::Error) -> StoreError {
        match source {
            object_store::Error::NotFound { .. } => StoreError::NotFound(format!("{}/{}", self.url, rel)),
            object_store::Error::AlreadyExists { .. } => StoreError::AlreadyExists(format!("{}/{}", self.url, rel)),
            source => StoreError::Io { url: self.url.clone(), op, path: rel.to_string(), source: Box::new(source) },
        }
    }

    /// Writes an object, replacing any previous one.
    pub async fn put(&self, rel: &str, data: Bytes) -> Result<(), StoreError> {
        self.fault("store-put", "put", rel).await?;
        self.inner.put(&self.path(rel), PutPayload::from(data)).await.map_err(|e| self.io("put", rel, e))?;
        Ok(())
    }

    /// Writes an immutable object: fails with [`StoreError::AlreadyExists`] if it exists, so that a stale
    /// writer can never overwrite a newer artefact.
    pub async fn put_new(&self, rel: &str, data: Bytes) -> Result<(), StoreError> {
        self.fault("store-put", "put", rel).await?;
        let opts = PutOptions { mode: PutMode::Create, ..Default::default() };
        match self.inner.put_opts(&self.path(rel), PutPayload::from(data.clone()), opts).await {
            Ok(_) => Ok(()),
            Err(object_store::Error::NotImplemented { .. }) | Err(object_store::Error::NotSupported { .. }) => {
                if self.exists(rel).await? {
                    return Err(StoreError::AlreadyExists(format!("{}/{}", self.url, rel)));
                }
                self.put(rel, data).await
            }
            Err(e) => Err(self.io("put", rel, e)),
        }
    }

    /// Reads a whole object.
    pub async fn get(&self, rel: &str) -> Result<Bytes, StoreError> {
        self.fault("store-get", "get", rel).await?;
        let r = self.inner.get(&self.path(rel)).await.map_err(|e| self.io("get", rel, e))?;
        r.bytes().await.map_err(|e| self.io("get", rel, e))
    }

    /// Whether an object exists.
    pub async fn exists(&self, rel: &str) -> Result<bool, StoreError> {
        match self.inner.head(&self.path(rel)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.io("head", rel, e)),
        }
    }

    /// Uploads a local file. Into a `file://` store the file is hard-linked (copied in the kernel if the store is
    /// on another file system) under a staging name and renamed, as `object_store` writes: a checkpoint's
    /// files are written once and never changed, and reading hundreds of MB into memory only to write them
    /// back took a tenth of Nexmark q4's CPU at 20M events.
    pub async fn put_file(&self, rel: &str, local: &std::path::Path) -> Result<u64, StoreError> {
        if let Some(dir) = &self.local_dir {
            return self.link_file(dir, rel, local).await;
        }
        let data = tokio::fs::read(local).await.map_err(|e| StoreError::Io {
            url: self.url.clone(),
            op: "read local file for",
            path: rel.to_string(),
            source: Box::new(object_store::Error::Generic { store: "local", source: Box::new(e) }),
        })?;
        let len = data.len() as u64;
        self.put(rel, Bytes::from(data)).await?;
        Ok(len)
    }

    async fn link_file(&self, dir: &std::path::Path, rel: &str, local: &std::path::Path) -> Result<u64, StoreError> {
        self.fault("store-put", "put", rel).await?;
        let io = |op: &'static str, e: std::io::Error| StoreError::Io {
            url: self.url.clone(),
            op,
            path: rel.to_string(),
            source: Box::new(object_store::Error::Generic { store: "LocalFileSystem", source: Box::new(e) }),
        };
        // The object path, checked as object_store checks it (no `..`, no empty parts).
        let path = ObjPath::parse(rel).map_err(|e| self.io("put", rel, e.into()))?;
        let dest = path.parts().fold(dir.to_path_buf(), |d, part| d.join(part.as_ref()));
        if let Some(parent) = dest.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(|e| io("create the directory for", e))?;
        }
        // `#` marks a staging file, which object_store's listing skips.
        static STAGING: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = STAGING.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut staging = dest.clone().into_os_string();
        staging.push(format!("#{}-{n}", std::process::id()));
        let staging = std::path::PathBuf::from(staging);
        let len = match tokio::fs::hard_link(local, &staging).await {
            // The modification time is the upload's, as for a written object: the job manager's sweep keeps
            // files younger than any checkpoint in flight, and a link would carry the original's (minutes old
            // for a RocksDB file). The file is written once, so nothing else reads its time.
            Ok(()) => {
                let linked = staging.clone();
                tokio::task::spawn_blocking(move || -> std::io::Result<u64> {
                    let f = std::fs::File::open(&linked)?;
                    f.set_modified(std::time::SystemTime::now())?;
                    Ok(f.metadata()?.len())
                })
                .await
                .map_err(|e| io("link", std::io::Error::other(e)))?
                .map_err(|e| io("touch the link of", e))?
            }
            Err(_) => tokio::fs::copy(local, &staging).await.map_err(|e| io("copy local file for", e))?,
        };
        if let Err(e) = tokio::fs::rename(&staging, &dest).await {
            let _ = tokio::fs::remove_file(&staging).await;
            return Err(io("rename into", e));
        }
        Ok(len)
    }

    /// Downloads an object into a local file.
    pub async fn get_file(&self, rel: &str, local: &std::path::Path) -> Result<u64, StoreError> {
        let data = self.get(rel).await?;
        tokio::fs::write(local, &data).await.map_err(|e| StoreError::Io {
            url: self.url.clone(),
            op: "write local file for",
            path: rel.to_string(),
            source: Box::new(object_store::Error::Generic { store: "local", source: Box::new(e) }),
        })?;
        Ok(data.len() as u64)
    }

    /// Relative paths of every object under a directory.
    pub async fn list(&self, rel_dir: &str) -> Result<Vec<String>, StoreError> {
        Ok(self.list_with_modified(rel_dir).await?.into_iter().map(|(path, _)| path).collect())
    }

    /// Relative paths of every object under a directory, with their last-modified times (ms since the epoch,
    /// as the store reports them).
    pub async fn list_with_modified(&self, rel_dir: &str) -> Result<Vec<(String, u64)>, StoreError> {
        self.fault("store-list", "list", rel_dir).await?;
        let prefix = self.path(rel_dir);
        let metas: Vec<_> =
            self.inner.list(Some(&prefix)).try_collect().await.map_err(|e| self.io("list", rel_dir, e))?;
        let strip = if self.root.is_empty() { 0 } else { self.root.len() + 1 };
        Ok(metas
            .into_iter()
            .map(|m| (m.location.as_ref()[strip..].to_string(), m.last_modified.timestamp_millis().max(0) as u64))
            .collect())
    }

    /// Deletes every object under a directory.
    pub async fn delete_dir(&self, rel_dir: &str) -> Result<(), StoreError> {
        for rel in self.list(rel_dir).await? {
            self.fault("store-delete", "delete", &rel).await?;
            match self.inner.delete(&self.path(&rel)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.io("delete", &rel, e)),
            }
        }
        Ok(())
    }

    /// Deletes one object (absent is fine).
    pub async fn delete(&self, rel: &str) -> Result<(), StoreError> {
        self.fault("store-delete", "delete", rel).await?;
        match self.inner.delete(&self.path(rel)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.io("delete", rel, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The leader's health watch resigns on a hung store and tells it from a down one by `is_timeout`.
    #[tokio::test]
    async fn a_store_that_never_answers_times_out_and_one_that_refuses_connections_does_not() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Accepts connections and holds them without answering a byte.
        let held = tokio::spawn(async move {
            let mut conns = Vec::new();
            while let Ok((c, _)) = listener.accept().await {
                conns.push(c);
            }
        });
        let open = |endpoint: String| {
            let mut opts = StoreOptions::s3(Some(&endpoint), true);
            opts.options.insert("aws_access_key_id".into(), "test".into());
            opts.options.insert("aws_secret_access_key".into(), "test".into());
            Store::open("s3://bucket/prefix", &opts).unwrap()
        };
        let e = open(format!("http://{addr}")).probe(Duration::from_millis(300)).await.unwrap_err();
        assert!(e.is_timeout(), "{e}");
        assert!(e.to_string().contains("no answer within 300 ms"), "{e}");
        held.abort();
        // A port nobody listens on refuses at once: unreachable, not hung.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let e = open(format!("http://{closed}")).probe(Duration::from_secs(20)).await.unwrap_err();
        assert!(!e.is_timeout(), "{e}");
    }

    #[test]
    fn opening_to_read_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/savepoint");
        let url = format!("file://{}", missing.display());
        let err = Store::open_existing(&url, &StoreOptions::default()).unwrap_err().to_string();
        assert!(err.contains("no such directory"), "{err}");
        assert!(!dir.path().join("no").exists(), "nothing was created");
        Store::open(&url, &StoreOptions::default()).unwrap();
        assert!(missing.is_dir(), "a store opened to write creates its directory");
        Store::open_existing(&url, &StoreOptions::default()).unwrap();
    }

    #[tokio::test]
    async fn file_store_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}/root", dir.path().display());
        let s = Store::open(&url, &StoreOptions::default()).unwrap();
        s.put("a/b/c", Bytes::from_static(b"hi")).await.unwrap();
        assert_eq!(&s.get("a/b/c").await.unwrap()[..], b"hi");
        assert!(matches!(s.put_new("a/b/c", Bytes::from_static(b"x")).await, Err(StoreError::AlreadyExists(_))));
        assert_eq!(s.list("a").await.unwrap(), vec!["a/b/c".to_string()]);
        s.delete_dir("a").await.unwrap();
        assert!(matches!(s.get("a/b/c").await, Err(StoreError::NotFound(_))));
        assert!(Store::open("ftp://x/y", &StoreOptions::default()).is_err());
    }

    #[tokio::test]
    async fn a_file_put_into_a_file_store_is_a_copy_that_outlives_the_original() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&format!("file://{}/root", dir.path().display()), &StoreOptions::default()).unwrap();
        let local = dir.path().join("sst");
        std::fs::write(&local, b"rows").unwrap();
        // A file written an hour ago is uploaded now: its object is as new as the upload (the sweep's age).
        let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options().write(true).open(&local).unwrap().set_modified(hour_ago).unwrap();
        assert_eq!(s.put_file("chk/1/sst", &local).await.unwrap(), 4);
        let listed = s.list_with_modified("chk").await.unwrap();
        assert!(listed[0].1 + 60_000 > crate::now_ms(), "modified at {} ms, now {}", listed[0].1, crate::now_ms());
        // Written once, then the original goes (a snapshot directory is deleted after its upload).
        std::fs::remove_file(&local).unwrap();
        assert_eq!(&s.get("chk/1/sst").await.unwrap()[..], b"rows");
        assert_eq!(s.list("chk").await.unwrap(), vec!["chk/1/sst".to_string()], "no staging file is left");
        // Replacing an object, as put does.
        std::fs::write(&local, b"other").unwrap();
        assert_eq!(s.put_file("chk/1/sst", &local).await.unwrap(), 5);
        assert_eq!(&s.get("chk/1/sst").await.unwrap()[..], b"other");
        assert!(s.put_file("../escape", &local).await.is_err(), "a path out of the store is refused");
        assert!(!dir.path().join("escape").exists());
        let missing = s.put_file("chk/2/sst", &dir.path().join("absent")).await.unwrap_err();
        assert!(missing.to_string().contains("chk/2/sst"), "{missing}");
    }

    #[tokio::test]
    async fn probes_tell_a_refusing_store_from_a_working_one() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&format!("file://{}/root", dir.path().display()), &StoreOptions::default()).unwrap();
        s.probe(Duration::from_secs(5)).await.unwrap();
        assert!(s.list("").await.unwrap().is_empty(), "the probe leaves nothing behind");
        // A root that is no directory any more (works as root, unlike permissions): a refusal, not a passing
        // failure.
        let gone = dir.path().join("gone");
        let s = Store::open(&format!("file://{}", gone.display()), &StoreOptions::default()).unwrap();
        std::fs::remove_dir(&gone).unwrap();
        std::fs::write(&gone, b"a file").unwrap();
        let e = s.probe(Duration::from_secs(5)).await.unwrap_err();
        assert!(e.is_refusal(), "{e}");
        assert!(e.to_string().contains("refuses writes"), "{e}");
        let e = ProbeError::Unreachable { url: "s3://b".into(), reason: "no answer".into() };
        assert!(!e.is_refusal());
        assert!(is_refusal(&StoreError::NotFound("s3://nope/x".into())));
    }

    #[tokio::test]
    async fn memory_store_with_prefix() {
        let s = Store::open("memory:///pre/fix", &StoreOptions::default()).unwrap();
        s.put_new("x/1", Bytes::from_static(b"1")).await.unwrap();
        assert_eq!(s.list("x").await.unwrap(), vec!["x/1".to_string()]);
    }
}
