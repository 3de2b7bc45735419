//! A network namespace of the test's own, joined to the host by a veth pair, for putting a bad
//! network between floodgate (on the host) and a server (inside): nftables rules in the
//! namespace drop packets at random or all of them. Traffic stays on this machine: the pair's
//! /30 is checked against every address and route the host has, and a blackhole route for it
//! (behind the pair's own) keeps anything sent to it on the host once the pair is gone.
//! Everything is removed when the value is dropped, on a panic too.
//!
//! Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN), `ip` (iproute2) and `nft` (nftables);
//! [`require`] says whether this environment has them: outside CI a test without them skips
//! with the reason, under `CI=true` it fails.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The /16 the pairs' /30s are taken from.
const BASE: [u8; 2] = [10, 200];
/// /30s in BASE.
const SUBNETS: u32 = 256 * 64;
/// Names start with this, then the test process's id: stale ones of a dead process are removed.
const NAME_PREFIX: &str = "fgnf";
/// The metric of the blackhole route beside the pair's connected route (metric 0), which wins
/// while the pair exists.
const BLACKHOLE_METRIC: &str = "4242";
/// The nftables table the faults live in (inside the namespace).
const TABLE: &str = "floodgate_fault";

static MADE: AtomicU32 = AtomicU32::new(0);

/// Why this environment cannot make namespaces.
#[derive(Debug, Clone)]
pub struct Unavailable(pub String);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether namespaces can be made here: `Ok` to go on; `Err` with the reason to skip outside
/// CI. Under `CI=true` a missing capability or tool is a failure, never a skip.
pub fn require() -> Result<(), Unavailable> {
    let probe = NetNamespace::create();
    match probe {
        Ok(_) => Ok(()),
        Err(reason) if std::env::var("CI").is_ok_and(|ci| ci == "true") => panic!(
            "CI=true and network namespaces are unavailable: {reason} (the network fault \
             tests need root, or CAP_NET_ADMIN and CAP_SYS_ADMIN, `ip` and `nft`)"
        ),
        Err(reason) => Err(reason),
    }
}

/// One namespace, its veth pair and its /30: the host end is `.1`, the namespace's `.2`.
pub struct NetNamespace {
    name: String,
    host_if: String,
    ns_if: String,
    subnet: Ipv4Addr,
    blackhole: bool,
}

impl NetNamespace {
    /// A fresh namespace `fgnf<pid>n<N>` with its pair up and addressed, and an empty fault
    /// table; why not, when this environment cannot.
    pub fn create() -> Result<Self, Unavailable> {
        for tool in ["ip", "nft"] {
            if crate::which(tool).is_none() {
                return Err(Unavailable(format!(
                    "`{tool}` not found (scripts/install-peers.sh installs iproute2 and nftables)"
                )));
            }
        }
        remove_stale();
        let pid = std::process::id();
        let turn = MADE.fetch_add(1, Ordering::Relaxed);
        let name = format!("{NAME_PREFIX}{pid}n{turn}");
        // Interface names have at most 15 bytes: the pid's last digits tell processes apart.
        let short = format!("{}{turn}", pid % 100_000);
        let mut made = NetNamespace {
            name,
            host_if: format!("fgh{short}"),
            ns_if: format!("fgn{short}"),
            subnet: free_subnet(pid, turn)?,
            blackhole: false,
        };
        made.set_up()?;
        Ok(made)
    }

    fn set_up(&mut self) -> Result<(), Unavailable> {
        ip(&["netns", "add", &self.name])?;
        ip(&[
            "link",
            "add",
            &self.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &self.ns_if,
        ])?;
        ip(&["link", "set", &self.ns_if, "netns", &self.name])?;
        let host = format!("{}/30", self.host_addr());
        ip(&["addr", "add", &host, "dev", &self.host_if])?;
        ip(&["link", "set", &self.host_if, "up"])?;
        let inside = format!("{}/30", self.ns_addr());
        self.ip_inside(&["addr", "add", &inside, "dev", &self.ns_if])?;
        self.ip_inside(&["link", "set", &self.ns_if, "up"])?;
        self.ip_inside(&["link", "set", "lo", "up"])?;
        let subnet = format!("{}/30", self.subnet);
        ip(&[
            "route",
            "add",
            "blackhole",
            &subnet,
            "metric",
            BLACKHOLE_METRIC,
        ])?;
        self.blackhole = true;
        self.nft(&format!(
            "add table inet {TABLE}\n\
             add chain inet {TABLE} input {{ type filter hook input priority 0; policy accept; }}\n\
             add chain inet {TABLE} output {{ type filter hook output priority 0; policy accept; }}\n"
        ))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host's end of the pair.
    pub fn host_addr(&self) -> Ipv4Addr {
        offset(self.subnet, 1)
    }

    /// The namespace's end: where a server inside listens.
    pub fn ns_addr(&self) -> Ipv4Addr {
        offset(self.subnet, 2)
    }

    /// `program` to be run inside the namespace (`ip netns exec`, which execs it: the child's
    /// pid is the program's).
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name, program]);
        command
    }

    /// Drops `percent` % of the packets crossing the pair, each way, at random.
    pub fn lose(&self, percent: u8) {
        self.set_rules(&format!("numgen random mod 100 < {percent} drop"));
    }

    /// Drops every packet crossing the pair: a partition.
    pub fn partition(&self) {
        self.set_rules("drop");
    }

    /// No rule: the network heals.
    pub fn heal(&self) {
        self.nft(&format!(
            "flush chain inet {TABLE} input\nflush chain inet {TABLE} output\n"
        ))
        .unwrap_or_else(|error| panic!("nft in {}: {error}", self.name));
    }

    /// `verdict` for every packet in from and out to the pair (loopback inside is left alone).
    fn set_rules(&self, verdict: &str) {
        self.nft(&format!(
            "flush chain inet {TABLE} input\nflush chain inet {TABLE} output\n\
             add rule inet {TABLE} input iifname \"{ns_if}\" {verdict}\n\
             add rule inet {TABLE} output oifname \"{ns_if}\" {verdict}\n",
            ns_if = self.ns_if
        ))
        .unwrap_or_else(|error| panic!("nft in {}: {error}", self.name));
    }

    /// Runs an nftables script inside the namespace.
    fn nft(&self, script: &str) -> Result<(), Unavailable> {
        let file = tempfile::NamedTempFile::new()
            .map_err(|error| Unavailable(format!("temp file: {error}")))?;
        std::fs::write(file.path(), script)
            .map_err(|error| Unavailable(format!("write nft script: {error}")))?;
        let path = file.path().display().to_string();
        run("ip", &["netns", "exec", &self.name, "nft", "-f", &path])
    }

    fn ip_inside(&self, args: &[&str]) -> Result<(), Unavailable> {
        let mut full = vec!["netns", "exec", self.name.as_str(), "ip"];
        full.extend_from_slice(args);
        run("ip", &full)
    }
}

impl Drop for NetNamespace {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and so the pair.
        let _ = run("ip", &["netns", "del", &self.name]);
        let _ = run("ip", &["link", "del", &self.host_if]);
        // The host end goes asynchronously; the blackhole route stays until it has.
        let deadline = Instant::now() + Duration::from_secs(5);
        while link_exists(&self.host_if) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if self.blackhole {
            let subnet = format!("{}/30", self.subnet);
            let _ = run(
                "ip",
                &[
                    "route",
                    "del",
                    "blackhole",
                    &subnet,
                    "metric",
                    BLACKHOLE_METRIC,
                ],
            );
        }
    }
}

fn link_exists(name: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", name])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn offset(subnet: Ipv4Addr, by: u8) -> Ipv4Addr {
    let [a, b, c, d] = subnet.octets();
    Ipv4Addr::new(a, b, c, d + by)
}

/// A /30 of BASE that no address or route of the host overlaps, starting from one that
/// depends on the process and the turn, so concurrent tests pick apart.
fn free_subnet(pid: u32, turn: u32) -> Result<Ipv4Addr, Unavailable> {
    let taken = host_prefixes()?;
    let start = pid.wrapping_mul(7_919).wrapping_add(turn.wrapping_mul(97)) % SUBNETS;
    for step in 0..SUBNETS {
        let index = (start + step) % SUBNETS;
        let candidate = Ipv4Addr::new(BASE[0], BASE[1], (index / 64) as u8, (index % 64 * 4) as u8);
        let ours = (u32::from(candidate), 30);
        if !taken.iter().any(|&theirs| overlaps(ours, theirs)) {
            return Ok(candidate);
        }
    }
    Err(Unavailable(format!(
        "every /30 of {}.{}.0.0/16 is in use on this host",
        BASE[0], BASE[1]
    )))
}

fn overlaps((a, a_len): (u32, u8), (b, b_len): (u32, u8)) -> bool {
    let len = a_len.min(b_len);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    a & mask == b & mask
}

/// Every IPv4 prefix the host has an address in or a route to (the default route left out:
/// it covers everything).
fn host_prefixes() -> Result<Vec<(u32, u8)>, Unavailable> {
    let mut prefixes = Vec::new();
    let addresses = output("ip", &["-o", "-4", "addr", "show"])?;
    for word in addresses.split_whitespace() {
        if let Some(prefix) = parse_prefix(word) {
            prefixes.push(prefix);
        }
    }
    let routes = output("ip", &["-4", "route", "show", "table", "all"])?;
    for line in routes.lines() {
        let mut words = line.split_whitespace();
        let first = match words.next() {
            Some("blackhole" | "unreachable" | "prohibit" | "local" | "broadcast") => words.next(),
            other => other,
        };
        if let Some(prefix) = first.and_then(parse_prefix) {
            prefixes.push(prefix);
        }
    }
    Ok(prefixes)
}

/// `a.b.c.d/len` or a bare `a.b.c.d` (a /32).
fn parse_prefix(word: &str) -> Option<(u32, u8)> {
    let (addr, len) = match word.split_once('/') {
        Some((addr, len)) => (addr, len.parse::<u8>().ok()?),
        None => (word, 32),
    };
    let addr: Ipv4Addr = addr.parse().ok()?;
    (len <= 32 && len > 0).then_some((u32::from(addr), len))
}

/// Namespaces of this harness left by a process that is gone (killed before its drops ran).
fn remove_stale() {
    let Ok(list) = output("ip", &["netns", "list"]) else {
        return;
    };
    for line in list.lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(rest) = name.strip_prefix(NAME_PREFIX) else {
            continue;
        };
        let Some(pid) = rest
            .split('n')
            .next()
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run("ip", &["netns", "del", name]);
        }
    }
}

fn ip(args: &[&str]) -> Result<(), Unavailable> {
    run("ip", args)
}

fn run(program: &str, args: &[&str]) -> Result<(), Unavailable> {
    output(program, args).map(|_| ())
}

fn output(program: &str, args: &[&str]) -> Result<String, Unavailable> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|error| Unavailable(format!("cannot run {program}: {error}")))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(Unavailable(format!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}
