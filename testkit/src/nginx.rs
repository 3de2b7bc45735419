//! Test support for nginx: start a real nginx on a configuration in a temporary prefix, a tiny
//! upstream application for it to proxy to, and a keep-alive HTTP/1.1 client for timing tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{which, Running};

/// The nginx binary: `$FLOODGATE_NGINX`, `/usr/sbin/nginx`, or `nginx` on PATH. Missing nginx
/// fails the test: `scripts/install-peers.sh` installs it.
pub fn nginx_bin() -> PathBuf {
    if let Ok(path) = std::env::var("FLOODGATE_NGINX") {
        return PathBuf::from(path);
    }
    let debian = PathBuf::from("/usr/sbin/nginx");
    if debian.is_file() {
        return debian;
    }
    which("nginx").unwrap_or_else(|| {
        panic!("nginx not found: run scripts/install-peers.sh (or set FLOODGATE_NGINX)")
    })
}

/// A running nginx master; stopped (SIGTERM to the master, which stops its workers) on drop.
pub struct Nginx {
    process: Running,
    pub prefix: PathBuf,
    pub port: u16,
}

impl Nginx {
    /// Writes `config` to `<prefix>/nginx.conf` and runs nginx with that prefix, in the
    /// foreground, with its pid file and error log in the prefix. `port` is the port the
    /// configuration listens on (waited for).
    pub fn start(config: &str, prefix: &Path, port: u16) -> Nginx {
        let conf = prefix.join("nginx.conf");
        std::fs::write(&conf, config)
            .unwrap_or_else(|error| panic!("cannot write {}: {error}", conf.display()));
        let mut prefix_arg = prefix.as_os_str().to_owned();
        prefix_arg.push("/");
        let mut command = Command::new(nginx_bin());
        command
            .arg("-p")
            .arg(&prefix_arg)
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(prefix.join("error.log"))
            .arg("-g")
            .arg(format!(
                "daemon off; pid {};",
                prefix.join("nginx.pid").display()
            ));
        let process = Running::spawn("nginx", &mut command, prefix);
        let nginx = Nginx {
            process,
            prefix: prefix.to_owned(),
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx did not listen on 127.0.0.1:{port} within 10 s\n{}",
                nginx.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        nginx
    }

    /// nginx's error log and its stderr, for failure messages.
    pub fn logs(&self) -> String {
        let error_log = std::fs::read_to_string(self.prefix.join("error.log")).unwrap_or_default();
        format!(
            "nginx error.log:\n{error_log}\nnginx output:\n{}",
            self.process.log_text()
        )
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // A SIGKILLed master would leave its workers listening; SIGTERM stops them all.
        let _ = self.process.terminate(Duration::from_secs(5));
    }
}

/// Replaces `from` by `to` in `text`, failing the test when `from` is not there (so a changed
/// deploy file cannot silently make a test run against the wrong ports).
pub fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "expected {from:?} in the configuration, to replace it by {to:?}"
    );
    text.replacen(from, to, 1)
}

/// A tiny upstream application: answers every request 200 with a body that echoes the
/// `x-ratelimit-remaining` header it received (keep-alive, one thread per connection).
pub struct App {
    pub port: u16,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl App {
    pub fn start() -> App {
        let listener = TcpListener::bind("127.0.0.1:0")
            .unwrap_or_else(|error| panic!("cannot bind the test app: {error}"));
        let port = listener
            .local_addr()
            .map(|addr| addr.port())
            .unwrap_or_else(|error| panic!("test app address: {error}"));
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let acceptor = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(stream) = stream {
                    std::thread::spawn(move || serve_app_connection(stream));
                }
            }
        });
        App {
            port,
            stop,
            acceptor: Some(acceptor),
        }
    }
}

impl Drop for App {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocked accept so the thread sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn serve_app_connection(stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    // Bounded: nginx reuses a connection for at most `keepalive_requests` (1000) requests.
    for _ in 0..10_000 {
        let Some((_, headers)) = read_head(&mut reader) else {
            return;
        };
        let length = content_length(&headers);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let remaining = headers
            .iter()
            .find(|(name, _)| name == "x-ratelimit-remaining")
            .map_or("-", |(_, value)| value.as_str());
        let text = format!("app: x-ratelimit-remaining={remaining}\n");
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// Reads a request or response head: the first line and the headers (names lower-cased).
fn read_head(reader: &mut impl BufRead) -> Option<(String, Vec<(String, String)>)> {
    let mut first = String::new();
    if reader.read_line(&mut first).ok()? == 0 {
        return None;
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            return Some((first.trim_end().to_owned(), headers));
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
}

fn content_length(headers: &[(String, String)]) -> usize {
    headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0)
}

/// A keep-alive HTTP/1.1 client for one server: requests go over one connection (reopened when
/// the server closes it), so timing tests measure the request, not the TCP handshake.
pub struct KeepAliveClient {
    port: u16,
    connection: Option<(TcpStream, BufReader<TcpStream>)>,
}

/// Status and headers (names lower-case) of one response.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl KeepAliveClient {
    pub fn new(port: u16) -> KeepAliveClient {
        KeepAliveClient {
            port,
            connection: None,
        }
    }

    /// Opens the connection now (so the first timed request does not pay for it).
    pub fn connect(&mut self) -> std::io::Result<()> {
        let stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let reader = BufReader::new(stream.try_clone()?);
        self.connection = Some((stream, reader));
        Ok(())
    }

    /// `GET path` with `headers`; retried once on a fresh connection if the kept one was closed.
    pub fn get(&mut self, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Answer> {
        match self.try_get(path, headers) {
            Ok(answer) => Ok(answer),
            Err(_) => {
                self.connect()?;
                self.try_get(path, headers)
            }
        }
    }

    fn try_get(&mut self, path: &str, headers: &[(&str, &str)]) -> std::io::Result<Answer> {
        self.send(path, headers)?;
        self.receive()
    }

    /// Writes `GET path` without waiting for the answer (see [`KeepAliveClient::receive`]), so
    /// that requests to two servers can be in flight at once.
    pub fn send(&mut self, path: &str, headers: &[(&str, &str)]) -> std::io::Result<()> {
        if self.connection.is_none() {
            self.connect()?;
        }
        let Some((stream, _)) = self.connection.as_mut() else {
            return Err(std::io::Error::other("not connected"));
        };
        let mut text = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\n", self.port);
        for (name, value) in headers {
            text.push_str(&format!("{name}: {value}\r\n"));
        }
        text.push_str("\r\n");
        stream.write_all(text.as_bytes())
    }

    /// Reads the answer to the request [`KeepAliveClient::send`] wrote.
    pub fn receive(&mut self) -> std::io::Result<Answer> {
        let Some((_, reader)) = self.connection.as_mut() else {
            return Err(std::io::Error::other("not connected"));
        };
        let closed = || std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed");
        let (status_line, headers) = read_head(reader).ok_or_else(closed)?;
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line {status_line:?}")))?;
        let mut body = vec![0; content_length(&headers)];
        reader.read_exact(&mut body)?;
        let server_closes = headers
            .iter()
            .any(|(name, value)| name == "connection" && value.eq_ignore_ascii_case("close"));
        if server_closes {
            self.connection = None;
        }
        Ok(Answer { status, headers })
    }
}
