//! A blocking client of the Kafka wire protocol (messages from the `kafka-protocol` crate) for the requests
//! librdkafka does not expose: committing a transaction another producer left open, by its transactional id,
//! producer id and epoch (`EndTxn`, as Flink does after a restore); fencing a transactional id
//! (`InitProducerId`, which aborts the transaction open under it); and, in tests, fetching a log with its
//! control batches. One request at a time on one connection, every read and write bounded by a timeout.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::error::{ParseResponseErrorCode, ResponseError};
use kafka_protocol::messages::{
    EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest, ProducerId, RequestHeader, ResponseHeader,
    TransactionalId,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// A request that failed.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// No broker could be reached or a connection broke.
    #[error("{addr}: {source}")]
    Io {
        /// The broker's address.
        addr: String,
        /// What went wrong.
        source: std::io::Error,
    },
    /// A request or response did not encode or decode.
    #[error("{api} with {addr}: {detail}")]
    Protocol {
        /// The request.
        api: &'static str,
        /// The broker's address.
        addr: String,
        /// What went wrong.
        detail: String,
    },
    /// The broker answered with an error code.
    #[error("{api}: {error}")]
    Broker {
        /// The request.
        api: &'static str,
        /// The broker's error.
        error: ResponseError,
    },
}

impl WireError {
    /// Whether the same request may succeed if sent again shortly (a coordinator moving or busy, a transaction
    /// still completing).
    pub fn is_retriable(&self) -> bool {
        match self {
            WireError::Io { .. } => true,
            WireError::Protocol { .. } => false,
            WireError::Broker { error, .. } => matches!(
                error,
                ResponseError::CoordinatorLoadInProgress
                    | ResponseError::CoordinatorNotAvailable
                    | ResponseError::NotCoordinator
                    | ResponseError::ConcurrentTransactions
                    | ResponseError::RequestTimedOut
                    | ResponseError::NetworkException
            ),
        }
    }
}

/// One connection to one broker.
pub struct Connection {
    stream: TcpStream,
    addr: String,
    correlation: i32,
}

impl Connection {
    /// Connects to `addr` (`host:port`), every connect, read and write bounded by `timeout`.
    pub fn connect(addr: &str, timeout: Duration) -> Result<Self, WireError> {
        let io = |source| WireError::Io { addr: addr.to_string(), source };
        let mut last = std::io::Error::new(std::io::ErrorKind::NotFound, "the address resolves to nothing");
        for sock in addr.to_socket_addrs().map_err(io)? {
            match TcpStream::connect_timeout(&sock, timeout) {
                Ok(stream) => {
                    stream.set_read_timeout(Some(timeout)).map_err(io)?;
                    stream.set_write_timeout(Some(timeout)).map_err(io)?;
                    stream.set_nodelay(true).map_err(io)?;
                    return Ok(Connection { stream, addr: addr.to_string(), correlation: 0 });
                }
                Err(e) => last = e,
            }
        }
        Err(io(last))
    }

    /// Connects to the first of `servers` (`host:port[,host:port…]`) that answers.
    pub fn bootstrap(servers: &str, timeout: Duration) -> Result<Self, WireError> {
        let mut last = None;
        for addr in servers.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match Connection::connect(addr, timeout) {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| WireError::Io {
            addr: servers.to_string(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "no broker address"),
        }))
    }

    /// The broker's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends `req` as `version` of its API and reads the response.
    pub fn send<R: Request>(&mut self, api: &'static str, version: i16, req: &R) -> Result<R::Response, WireError> {
        let proto = |detail: String| WireError::Protocol { api, addr: self.addr.clone(), detail };
        self.correlation = self.correlation.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("weir")));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header.encode(&mut buf, R::header_version(version)).map_err(|e| proto(e.to_string()))?;
        req.encode(&mut buf, version).map_err(|e| proto(e.to_string()))?;
        let len = i32::try_from(buf.len() - 4).map_err(|_| proto("request too large".into()))?;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        let io = |source| WireError::Io { addr: self.addr.clone(), source };
        self.stream.write_all(&buf).map_err(io)?;
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).map_err(io)?;
        let len = i32::from_be_bytes(len);
        let len = usize::try_from(len).map_err(|_| proto(format!("negative response length {len}")))?;
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body).map_err(io)?;
        let mut body = Bytes::from(body);
        let header = ResponseHeader::decode(&mut body, R::Response::header_version(version))
            .map_err(|e| proto(format!("response header: {e}")))?;
        if header.correlation_id != self.correlation {
            return Err(proto(format!("response to request {} for {}", header.correlation_id, self.correlation)));
        }
        R::Response::decode(&mut body, version).map_err(|e| proto(format!("response: {e}")))
    }
}

/// `Err` of the broker's error `code` for `api`, if it is one.
pub fn check(api: &'static str, code: i16) -> Result<(), WireError> {
    match code.err() {
        None => Ok(()),
        Some(error) => Err(WireError::Broker { api, error }),
    }
}

/// The address (`host:port`) of the coordinator of transactional id `id`, asked of `conn`'s broker.
pub fn transaction_coordinator(conn: &mut Connection, id: &str) -> Result<String, WireError> {
    let req = FindCoordinatorRequest::default().with_key(StrBytes::from_string(id.to_string())).with_key_type(1);
    let resp = conn.send("FindCoordinator", 1, &req)?;
    check("FindCoordinator", resp.error_code)?;
    Ok(format!("{}:{}", resp.host.as_str(), resp.port))
}

/// `InitProducerId` for transactional id `id` at its coordinator `conn`: the producer id and the new epoch. The
/// coordinator aborts the transaction open under `id`, if any, and fences every producer of an older epoch. An
/// epoch of 0 means the id had never been used.
pub fn init_producer_id(conn: &mut Connection, id: &str, timeout_ms: i32) -> Result<(i64, i16), WireError> {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_string(id.to_string()))))
        .with_transaction_timeout_ms(timeout_ms)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    // Version 3 carries the producer id and epoch (-1: a new producer), which Tansu requires.
    let resp = conn.send("InitProducerId", 3, &req)?;
    check("InitProducerId", resp.error_code)?;
    Ok((resp.producer_id.0, resp.producer_epoch))
}

/// `EndTxn`: commits (or aborts) the transaction open under `id` by producer `producer_id` at `epoch`, at its
/// coordinator `conn`.
pub fn end_txn(conn: &mut Connection, id: &str, producer_id: i64, epoch: i16, commit: bool) -> Result<(), WireError> {
    let req = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_string(id.to_string())))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(epoch)
        .with_committed(commit);
    let resp = conn.send("EndTxn", 1, &req)?;
    check("EndTxn", resp.error_code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{EndTxnResponse, RequestHeader as Header};
    use std::net::TcpListener;

    /// A broker that answers one request with an `EndTxn` response of `code`, and checks what it was sent.
    fn one_answer(code: i16) -> (String, std::thread::JoinHandle<EndTxnRequest>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let h = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut len = [0u8; 4];
            s.read_exact(&mut len).unwrap();
            let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
            s.read_exact(&mut body).unwrap();
            let mut body = Bytes::from(body);
            let header = Header::decode(&mut body, EndTxnRequest::header_version(1)).unwrap();
            assert_eq!(header.request_api_key, EndTxnRequest::KEY);
            let req = EndTxnRequest::decode(&mut body, 1).unwrap();
            let mut out = BytesMut::new();
            out.put_i32(0);
            ResponseHeader::default()
                .with_correlation_id(header.correlation_id)
                .encode(&mut out, EndTxnResponse::header_version(1))
                .unwrap();
            EndTxnResponse::default().with_error_code(code).encode(&mut out, 1).unwrap();
            let n = (out.len() - 4) as i32;
            out[..4].copy_from_slice(&n.to_be_bytes());
            s.write_all(&out).unwrap();
            req
        });
        (addr, h)
    }

    #[test]
    fn a_request_round_trips_and_a_broker_error_is_typed() {
        let (addr, h) = one_answer(0);
        let mut c = Connection::connect(&addr, Duration::from_secs(5)).unwrap();
        end_txn(&mut c, "p-0-3", 42, 7, true).unwrap();
        let sent = h.join().unwrap();
        assert_eq!((sent.transactional_id.0.as_str(), sent.producer_id.0, sent.producer_epoch), ("p-0-3", 42, 7));
        assert!(sent.committed);

        // CONCURRENT_TRANSACTIONS (51): retriable; PRODUCER_FENCED (90): not.
        let (addr, h) = one_answer(51);
        let mut c = Connection::connect(&addr, Duration::from_secs(5)).unwrap();
        let e = end_txn(&mut c, "p-0-3", 42, 7, true).unwrap_err();
        h.join().unwrap();
        assert!(e.is_retriable() && e.to_string().contains("EndTxn"), "{e}");
        let (addr, h) = one_answer(90);
        let mut c = Connection::connect(&addr, Duration::from_secs(5)).unwrap();
        let e = end_txn(&mut c, "p-0-3", 42, 7, false).unwrap_err();
        h.join().unwrap();
        assert!(!e.is_retriable(), "{e}");
    }

    #[test]
    fn no_broker_is_a_bounded_io_error_naming_the_address() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let e = Connection::bootstrap(&format!(" {addr} ,"), Duration::from_secs(2)).err().unwrap();
        assert!(matches!(e, WireError::Io { .. }) && e.to_string().contains(&addr), "{e}");
    }
}
