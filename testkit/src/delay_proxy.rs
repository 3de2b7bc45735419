//! A TCP proxy on 127.0.0.1 in front of one upstream, for faults the kernel here cannot make
//! (no netem qdisc): it holds every chunk it reads for a delay before passing it on, in both
//! directions and in order (latency), or stands in for a server that accepts connections and
//! never answers. A new delay applies to the chunks read from then on, on the open connections
//! too; turning silent (or back) closes every open connection, as a server replaced by
//! another would, so the byte streams stay whole. Runs on the caller's tokio runtime; stops
//! when dropped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the proxy does to the bytes it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Each chunk waits this long before it is written on (zero: straight through).
    Delay(Duration),
    /// Connections are accepted and what they send is read and thrown away; nothing is
    /// passed on and nothing comes back.
    Silent,
}

pub struct DelayProxy {
    port: u16,
    /// The delay of `Mode::Delay`, in µs.
    delay_us: Arc<AtomicU64>,
    /// Whether silent: connections end when it changes.
    silent: watch::Sender<bool>,
    accept: JoinHandle<()>,
}

impl DelayProxy {
    /// Listens on a free loopback port, proxying to `upstream`, straight through at first.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap_or_else(|error| panic!("proxy bind: {error}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|error| panic!("proxy address: {error}"))
            .port();
        let delay_us = Arc::new(AtomicU64::new(0));
        let (silent, silent_now) = watch::channel(false);
        let accept_delay = Arc::clone(&delay_us);
        let accept = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let mut changes = silent_now.clone();
                let silent = *changes.borrow_and_update();
                let delay_us = Arc::clone(&accept_delay);
                connections.spawn(async move {
                    let serve = async {
                        if silent {
                            swallow(client).await;
                        } else {
                            carry(client, upstream, delay_us).await;
                        }
                    };
                    tokio::select! {
                        () = serve => {}
                        _ = changes.changed() => {}
                    }
                });
                // Forget the connections that ended.
                while connections.try_join_next().is_some() {}
            }
        });
        Self {
            port,
            delay_us,
            silent,
            accept,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn set(&self, mode: Mode) {
        let silent = match mode {
            Mode::Delay(delay) => {
                let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
                self.delay_us.store(micros, Ordering::SeqCst);
                false
            }
            Mode::Silent => true,
        };
        self.silent.send_if_modified(|now| {
            let changed = *now != silent;
            *now = silent;
            changed
        });
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        // The connections are in the accept task's JoinSet: aborting it drops them all.
        self.accept.abort();
    }
}

/// A connection to a server that never answers: read until the client gives up.
async fn swallow(mut client: TcpStream) {
    let mut buffer = vec![0u8; 64 * 1024];
    while let Ok(read) = client.read(&mut buffer).await {
        if read == 0 {
            return;
        }
    }
}

/// One connection, both ways, until either side closes.
async fn carry(client: TcpStream, upstream: SocketAddr, delay_us: Arc<AtomicU64>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::select! {
        () = one_way(client_read, server_write, Arc::clone(&delay_us)) => {}
        () = one_way(server_read, client_write, delay_us) => {}
    }
}

/// Reads chunks from `from` and writes each to `to` once its delay is over, in order.
async fn one_way(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay_us: Arc<AtomicU64>) {
    let (queue, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = async move {
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    let reader = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => read,
            };
            let at = Instant::now() + Duration::from_micros(delay_us.load(Ordering::SeqCst));
            if queue.send((at, buffer[..read].to_vec())).is_err() {
                return;
            }
        }
    };
    tokio::join!(writer, reader);
}
