//! A redis-server inside a [`NetNamespace`], listening on the namespace's end of the pair:
//! reached from the host across the veth, so the namespace's fault rules stand between them.
//! No persistence; stopped by pid when dropped (before the namespace, which its owner drops
//! after it).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::netns::NetNamespace;

/// The port inside the namespace: its own network stack, so no other server can hold it; not
/// Redis's default all the same.
const PORT: u16 = 16_379;
const START_TIMEOUT: Duration = Duration::from_secs(10);

pub struct NamespacedRedis {
    addr: Ipv4Addr,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl NamespacedRedis {
    /// Starts redis-server in `netns` and waits until it answers PING from the host.
    pub fn start(netns: &NetNamespace) -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("no temp dir: {error}"));
        let log = std::fs::File::create(dir.path().join("redis.log"))
            .unwrap_or_else(|error| panic!("redis log: {error}"));
        let log_err = log
            .try_clone()
            .unwrap_or_else(|error| panic!("redis log: {error}"));
        let addr = netns.ns_addr();
        let child = netns
            .command("redis-server")
            .args(["--port", &PORT.to_string()])
            .args(["--bind", &addr.to_string()])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(["--protected-mode", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn()
            .unwrap_or_else(|error| {
                panic!("cannot start redis-server in {}: {error}", netns.name())
            });
        let mut redis = Self {
            addr,
            child: Some(child),
            dir,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while !redis.answers_ping() {
            if let Some(Ok(Some(status))) = redis.child.as_mut().map(Child::try_wait) {
                panic!(
                    "redis-server in {} exited with {status}: {}",
                    netns.name(),
                    redis.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "redis-server in {} gave no PONG within {START_TIMEOUT:?}: {}",
                netns.name(),
                redis.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((self.addr, PORT))
    }

    pub fn url(&self) -> String {
        format!("redis://{}/0", self.addr())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child
            .as_ref()
            .map(Child::id)
            .unwrap_or_else(|| panic!("redis-server at {} is not running", self.addr()))
    }

    /// SIGSTOP: the kernel still accepts connections and takes the bytes, nobody answers.
    pub fn pause(&self) {
        signal(self.pid(), "-STOP");
    }

    /// SIGCONT after `pause`.
    pub fn resume(&self) {
        signal(self.pid(), "-CONT");
    }

    /// A connection from the host, to inspect what the store wrote (the network must be whole).
    pub async fn inspector(&self) -> redis::aio::MultiplexedConnection {
        crate::redis::connect_url(&self.url(), "inspect the namespaced redis").await
    }

    fn answers_ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect_timeout(&self.addr(), Duration::from_millis(200))
        else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok()
            && stream.read_exact(&mut reply).is_ok()
            && &reply == b"+PONG\r\n"
    }
}

impl Drop for NamespacedRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal_quietly(child.id(), "-CONT");
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn signal(pid: u32, which: &str) {
    assert!(signal_quietly(pid, which), "kill {which} {pid} failed");
}

fn signal_quietly(pid: u32, which: &str) -> bool {
    std::process::Command::new("kill")
        .arg(which)
        .arg(pid.to_string())
        .status()
        .is_ok_and(|status| status.success())
}
