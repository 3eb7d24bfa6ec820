//! An S3-compatible server for tests: moto's standalone server (installed by `scripts/setup.sh` into
//! `$WEIR_TOOLS/venv`, default `~/.cache/weir/tools`) on a free loopback port, with one bucket.

use crate::process::{free_port, Process};
use anyhow::{anyhow, bail, Context, Result};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};
use weir_common::service::store::{Store, StoreOptions};

/// Where the processes of a cluster reach an S3 bucket.
#[derive(Clone, Debug)]
pub struct S3Endpoint {
    /// `http://127.0.0.1:PORT` (the server, or a proxy in front of it).
    pub endpoint: String,
    /// Bucket name.
    pub bucket: String,
    /// Key prefix of the checkpoint root.
    pub prefix: String,
}

impl S3Endpoint {
    /// The checkpoint-store URL, `s3://bucket/prefix`.
    pub fn url(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }

    /// The `AWS_*` variables that point every process at this endpoint.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint.as_str()),
            ("AWS_ENDPOINT", self.endpoint.as_str()),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_DEFAULT_REGION", "us-east-1"),
            ("AWS_ALLOW_HTTP", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// Opens the checkpoint root as a [`Store`] from this process.
    pub fn store(&self) -> Result<Store> {
        let options = [
            ("aws_endpoint", self.endpoint.as_str()),
            ("aws_access_key_id", "test"),
            ("aws_secret_access_key", "test"),
            ("aws_region", "us-east-1"),
            ("aws_allow_http", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let opts = StoreOptions { options, request_timeout: Some(Duration::from_secs(10)) };
        Ok(Store::open(&self.url(), &opts)?)
    }

    /// Every object key under the checkpoint root (relative to it).
    pub fn list(&self) -> Result<Vec<String>> {
        let store = self.store()?;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        Ok(rt.block_on(store.list(""))?)
    }
}

/// The tools directory `scripts/setup.sh` installs into.
pub fn tools_dir() -> PathBuf {
    match std::env::var_os("WEIR_TOOLS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/weir/tools"),
    }
}

/// A moto S3 server on a free loopback port, killed when dropped.
pub struct S3Server {
    process: Process,
    addr: SocketAddr,
    bucket: String,
    _logs: tempfile::TempDir,
}

impl S3Server {
    /// Starts moto, waits until it answers and creates the bucket `weir`.
    pub fn start() -> Result<S3Server> {
        let moto = tools_dir().join("venv/bin/moto_server");
        if !moto.is_file() {
            bail!("{} not found: run scripts/setup.sh first (it installs moto)", moto.display());
        }
        let logs = tempfile::Builder::new().prefix("weir-moto-").tempdir()?;
        // A free port can be taken by someone else between probing and binding: try a few.
        let mut last_err = None;
        for _ in 0..3 {
            let port = free_port()?;
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
            let mut cmd = Command::new(&moto);
            cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
            let mut process = Process::spawn("moto", cmd, &logs.path().join("moto.log"))?;
            match wait_for_http(&mut process, addr, Duration::from_secs(30)) {
                Ok(()) => {
                    let server = S3Server { process, addr, bucket: "weir".into(), _logs: logs };
                    server.create_bucket()?;
                    return Ok(server);
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.expect("tried").context("moto did not start"))
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bucket, reached directly, with checkpoints under `prefix`.
    pub fn endpoint(&self, prefix: &str) -> S3Endpoint {
        self.endpoint_via(self.addr, prefix)
    }

    /// The bucket reached through another address (a [`crate::TcpProxy`] in front of the server).
    pub fn endpoint_via(&self, addr: SocketAddr, prefix: &str) -> S3Endpoint {
        S3Endpoint { endpoint: format!("http://{addr}"), bucket: self.bucket.clone(), prefix: prefix.into() }
    }

    /// Deletes the (empty) bucket, so that the store answers and refuses from now on.
    pub fn delete_bucket(&self) -> Result<()> {
        let status = http_request(self.addr, "DELETE", &format!("/{}", self.bucket))?;
        if !(200..300).contains(&status) {
            bail!("deleting bucket {} answered HTTP {status}\n{}", self.bucket, self.process.tail(20));
        }
        Ok(())
    }

    fn create_bucket(&self) -> Result<()> {
        let status = http_request(self.addr, "PUT", &format!("/{}", self.bucket))?;
        if status != 200 {
            bail!("creating bucket {} answered HTTP {status}\n{}", self.bucket, self.process.tail(20));
        }
        Ok(())
    }
}

fn wait_for_http(process: &mut Process, addr: SocketAddr, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(200) = http_request(addr, "GET", "/") {
            return Ok(());
        }
        if !process.is_running() {
            bail!("moto exited\n{}", process.tail(20));
        }
        if Instant::now() >= deadline {
            bail!("moto did not answer on {addr} within {timeout:?}\n{}", process.tail(20));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A bodiless HTTP/1.1 request; returns the status code.
fn http_request(addr: SocketAddr, method: &str, path: &str) -> Result<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
    let mut head = [0u8; 64];
    let n = s.read(&mut head)?;
    let text = String::from_utf8_lossy(&head[..n]);
    let code = text.split_whitespace().nth(1).ok_or_else(|| anyhow!("no HTTP status in {text:?}"))?;
    code.parse().with_context(|| format!("bad HTTP status in {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TcpProxy;

    #[test]
    fn moto_serves_the_bucket_directly_and_through_a_proxy() {
        let s3 = S3Server::start().unwrap();
        let direct = s3.endpoint("root");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let store = direct.store().unwrap();
        rt.block_on(store.put("job/chk-1/_metadata", bytes_of("meta"))).unwrap();
        assert_eq!(direct.list().unwrap(), vec!["job/chk-1/_metadata".to_string()]);

        let proxy = TcpProxy::start(s3.addr()).unwrap();
        let via = s3.endpoint_via(proxy.addr(), "root");
        assert_eq!(via.list().unwrap(), vec!["job/chk-1/_metadata".to_string()]);
        proxy.down();
        assert!(via.list().is_err(), "listing must fail while the proxy is down");
        proxy.up();
        assert_eq!(via.list().unwrap().len(), 1);
    }

    fn bytes_of(s: &str) -> bytes::Bytes {
        bytes::Bytes::from(s.to_string())
    }
}
