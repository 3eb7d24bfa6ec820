//! Finding the leading job manager: the "not the leader" answer a standby gives (with the leader's address in
//! its metadata), and [`JmLink`], the set of job-manager addresses a task manager or client knows, which
//! follows that answer to the leader and moves on to the next address when one cannot be reached.

use crate::service::security::{SecureChannel, Security};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tonic::Status;

/// gRPC metadata key carrying the current leader's client address in a standby's answer.
pub const LEADER_METADATA: &str = "weir-leader";

/// The start of a standby's error message, also how clients recognise one.
pub const NOT_LEADER: &str = "not the leader";

/// What a standby job manager answers every call with: `UNAVAILABLE`, naming the leader when it knows one.
pub fn not_leader(leader: Option<&str>) -> Status {
    match leader {
        Some(addr) => {
            let mut status = Status::unavailable(format!("{NOT_LEADER}; the leader is at {addr}"));
            if let Ok(v) = addr.parse() {
                status.metadata_mut().insert(LEADER_METADATA, v);
            }
            status
        }
        None => Status::unavailable(format!("{NOT_LEADER}; no leader is elected yet")),
    }
}

/// The leader a standby's answer points to, if it is one and names it.
pub fn leader_of(status: &Status) -> Option<String> {
    if !is_not_leader(status) {
        return None;
    }
    status.metadata().get(LEADER_METADATA).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// Whether the answer came from a standby (with or without a leader to name).
pub fn is_not_leader(status: &Status) -> bool {
    status.code() == tonic::Code::Unavailable && status.message().starts_with(NOT_LEADER)
}

/// Whether a call got no answer in time: a channel's own timeout (a tower layer) answers `CANCELLED`
/// "Timeout expired", a deadline `DEADLINE_EXCEEDED`.
pub fn timed_out(status: &Status) -> bool {
    status.code() == tonic::Code::DeadlineExceeded
        || (status.code() == tonic::Code::Cancelled && status.message().contains("Timeout expired"))
}

/// Job-manager addresses that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// None was given.
    #[error("no job manager address given (`jobmanager`, WEIR_JOBMANAGER or --jobmanager)")]
    NoneGiven,
    /// One is not an `http(s)://` URL.
    #[error("job manager address {0:?}: expected http://HOST:PORT or https://HOST:PORT")]
    NotHttp(String),
    /// No channel can be made to one.
    #[error(transparent)]
    Endpoint(#[from] crate::service::security::EndpointError),
}

/// Parses a comma-separated list of `http(s)://HOST:PORT` job-manager addresses.
pub fn parse_addresses(list: &str) -> Result<Vec<String>, AddressError> {
    let addrs: Vec<String> =
        list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| s.trim_end_matches('/').to_string()).collect();
    if addrs.is_empty() {
        return Err(AddressError::NoneGiven);
    }
    for a in &addrs {
        if !a.starts_with("http://") && !a.starts_with("https://") {
            return Err(AddressError::NotHttp(a.clone()));
        }
    }
    Ok(addrs)
}

struct LinkState {
    addresses: Vec<String>,
    current: usize,
    /// How many of `addresses` were given (the rest are leaders learnt of).
    given: usize,
    /// The given address the link last followed a standby's hint from.
    hinted_from: usize,
    channels: HashMap<String, SecureChannel>,
}

/// The job managers one process talks to: cheap to clone, every clone follows the same leader.
#[derive(Clone)]
pub struct JmLink {
    state: Arc<Mutex<LinkState>>,
    security: Security,
    timeout: Duration,
}

impl JmLink {
    /// A link to `addresses` (at least one), with channels secured by `security` and calls bounded by
    /// `timeout`.
    pub fn new(addresses: Vec<String>, security: Security, timeout: Duration) -> Result<JmLink, AddressError> {
        if addresses.is_empty() {
            return Err(AddressError::NoneGiven);
        }
        let link = JmLink {
            state: Arc::new(Mutex::new(LinkState {
                given: addresses.len(),
                addresses,
                current: 0,
                hinted_from: 0,
                channels: HashMap::new(),
            })),
            security,
            timeout,
        };
        link.channel()?;
        Ok(link)
    }

    /// How this link's channels are secured.
    pub fn security(&self) -> &Security {
        &self.security
    }

    /// The address calls go to now.
    pub fn current(&self) -> String {
        let s = self.state.lock();
        s.addresses[s.current].clone()
    }

    /// Every address known, the ones given first, leaders learnt of after.
    pub fn addresses(&self) -> Vec<String> {
        self.state.lock().addresses.clone()
    }

    /// The (lazily connected) channel to the current address.
    pub fn channel(&self) -> Result<SecureChannel, crate::service::security::EndpointError> {
        let mut s = self.state.lock();
        let addr = s.addresses[s.current].clone();
        if let Some(c) = s.channels.get(&addr) {
            return Ok(c.clone());
        }
        let channel = self.security.channel(&addr, self.timeout)?;
        s.channels.insert(addr, channel.clone());
        Ok(channel)
    }

    /// Learns from a failed call: a standby's answer moves the link to the leader it names; an unreachable
    /// job manager (or a standby that knows no leader) moves it to the next address. A leader named by a hint
    /// that cannot be reached (a name only the job managers' network resolves, seen from outside it) moves the
    /// link on to the given address after the one that gave the hint, so that every given address is tried.
    /// Returns whether the address changed, i.e. whether trying again at once may help.
    pub fn observe(&self, status: &Status) -> bool {
        let mut s = self.state.lock();
        if let Some(leader) = leader_of(status) {
            let leader = leader.trim_end_matches('/').to_string();
            let index = match s.addresses.iter().position(|a| *a == leader) {
                Some(i) => i,
                None => {
                    s.addresses.push(leader.clone());
                    s.addresses.len() - 1
                }
            };
            let changed = index != s.current;
            if s.current < s.given {
                s.hinted_from = s.current;
            }
            if changed {
                tracing::info!(leader = %leader, "following the job manager leader");
            }
            s.current = index;
            return changed;
        }
        let unreachable = timed_out(status) || status.code() == tonic::Code::Unavailable;
        if unreachable && s.addresses.len() > 1 {
            s.current =
                if s.current >= s.given { (s.hinted_from + 1) % s.given } else { (s.current + 1) % s.addresses.len() };
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_leader_names_the_leader() {
        let s = not_leader(Some("http://10.0.0.2:6123"));
        assert_eq!(leader_of(&s).as_deref(), Some("http://10.0.0.2:6123"));
        assert!(s.message().contains("the leader is at http://10.0.0.2:6123"), "{}", s.message());
        let s = not_leader(None);
        assert!(is_not_leader(&s));
        assert_eq!(leader_of(&s), None);
        assert_eq!(leader_of(&Status::unavailable("connection refused")), None);
    }

    #[test]
    fn addresses_parse() {
        assert_eq!(
            parse_addresses("http://a:1, https://b:2/").unwrap(),
            vec!["http://a:1".to_string(), "https://b:2".to_string()]
        );
        assert!(parse_addresses("a:1").unwrap_err().to_string().contains("expected http"));
        assert!(parse_addresses(" , ").is_err());
    }

    #[tokio::test]
    async fn link_follows_hints_and_rotates() {
        let link = JmLink::new(
            vec!["http://127.0.0.1:1".into(), "http://127.0.0.1:2".into()],
            Security::default(),
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(link.current(), "http://127.0.0.1:1");
        assert!(link.observe(&Status::unavailable("connection refused")));
        assert_eq!(link.current(), "http://127.0.0.1:2");
        assert!(link.observe(&not_leader(Some("http://127.0.0.1:3"))));
        assert_eq!(link.current(), "http://127.0.0.1:3");
        assert!(!link.observe(&not_leader(Some("http://127.0.0.1:3"))), "already there");
        assert!(!link.observe(&Status::invalid_argument("bad")), "an answer is not a reason to move");
        assert_eq!(link.addresses().len(), 3);
        // The learnt leader cannot be reached (from outside its network): on to the given address after the one
        // that gave the hint, not back to it.
        assert!(link.observe(&Status::unavailable("dns error")));
        assert_eq!(link.current(), "http://127.0.0.1:1");
        assert!(link.observe(&not_leader(Some("http://127.0.0.1:3"))));
        assert!(link.observe(&Status::unavailable("dns error")));
        assert_eq!(link.current(), "http://127.0.0.1:2", "the other given address is tried");
    }
}
