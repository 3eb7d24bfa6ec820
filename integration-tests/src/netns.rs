//! Several hosts on one machine: a network namespace per host, each with its own address, joined by a bridge
//! that lives in a namespace of its own (so no firewall rule of the machine's own namespace applies). A test
//! can cut one host off the network (not kill it) and heal it again. Everything is deleted on drop. Needs
//! root and `ip` (iproute2, installed by `scripts/setup.sh`).

use anyhow::{bail, Context, Result};
use std::process::Command;

/// The hosts, the switch and their addresses.
pub struct Hosts {
    prefix: String,
    subnet: String,
    names: Vec<String>,
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip").args(args).output().context("cannot run ip (iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

impl Hosts {
    /// Whether this process can create network namespaces (root, `ip` present).
    pub fn available() -> bool {
        let name = format!("weirprobe{}", std::process::id());
        let ok = ip(&["netns", "add", &name]).is_ok();
        if ok {
            let _ = ip(&["netns", "del", &name]);
        }
        ok
    }

    /// Creates one namespace per host name, addressed `10.213.N.(i+1)/24` in order.
    pub fn create(names: &[&str]) -> Result<Hosts> {
        let pid = std::process::id();
        let hosts = Hosts {
            prefix: format!("w{}", pid % 100_000),
            subnet: format!("10.213.{}", pid % 250),
            names: names.iter().map(|s| s.to_string()).collect(),
        };
        let switch = hosts.switch();
        ip(&["netns", "add", &switch])?;
        ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &switch, "link", "set", "br0", "up"])?;
        for (i, _) in names.iter().enumerate() {
            let ns = hosts.ns(i);
            let (outside, inside) = (format!("{}s{i}", hosts.prefix), format!("{}h{i}", hosts.prefix));
            ip(&["netns", "add", &ns])?;
            ip(&["link", "add", &outside, "type", "veth", "peer", "name", &inside])?;
            ip(&["link", "set", &outside, "netns", &switch])?;
            ip(&["link", "set", &inside, "netns", &ns])?;
            ip(&["-n", &switch, "link", "set", &outside, "master", "br0"])?;
            ip(&["-n", &switch, "link", "set", &outside, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", hosts.addr(i)), "dev", &inside])?;
            ip(&["-n", &ns, "link", "set", &inside, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }

    fn switch(&self) -> String {
        format!("{}-switch", self.prefix)
    }

    fn ns(&self, i: usize) -> String {
        format!("{}-{}", self.prefix, self.names[i])
    }

    fn index(&self, host: &str) -> usize {
        self.names.iter().position(|n| n == host).unwrap_or_else(|| panic!("no host {host}"))
    }

    fn addr(&self, i: usize) -> String {
        format!("{}.{}", self.subnet, i + 1)
    }

    /// The address of `host`.
    pub fn ip_of(&self, host: &str) -> String {
        self.addr(self.index(host))
    }

    /// A command that runs `program` inside `host`'s namespace.
    pub fn command(&self, host: &str, program: &std::path::Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns(self.index(host))]).arg(program);
        cmd
    }

    /// Cuts `host` off the network: its link to the switch goes down (the process keeps running).
    pub fn cut(&self, host: &str) -> Result<()> {
        let i = self.index(host);
        ip(&["-n", &self.switch(), "link", "set", &format!("{}s{i}", self.prefix), "down"])
    }

    /// Heals a cut.
    pub fn heal(&self, host: &str) -> Result<()> {
        let i = self.index(host);
        ip(&["-n", &self.switch(), "link", "set", &format!("{}s{i}", self.prefix), "up"])
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Deleting a namespace deletes the veth ends in it, and with them their peers.
        for i in 0..self.names.len() {
            let _ = ip(&["netns", "del", &self.ns(i)]);
        }
        let _ = ip(&["netns", "del", &self.switch()]);
    }
}
