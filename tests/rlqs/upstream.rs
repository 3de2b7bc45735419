//! What Envoy lets through, counted where it arrives: an HTTP/1.1 upstream that answers every
//! request 200 and keeps, for each, when it came and the `x-load` header naming the load that
//! sent it. Counting here, not at the client, measures exactly what the limits admitted.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use floodgate_testkit::free_port;

type Arrivals = Arc<Mutex<Vec<(Instant, String)>>>;

pub struct CountingUpstream {
    pub port: u16,
    arrivals: Arrivals,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl CountingUpstream {
    pub fn start() -> CountingUpstream {
        let port = free_port();
        let listener = TcpListener::bind(("127.0.0.1", port))
            .unwrap_or_else(|error| panic!("the counting upstream cannot bind {port}: {error}"));
        listener
            .set_nonblocking(true)
            .unwrap_or_else(|error| panic!("the counting upstream: {error}"));
        let arrivals: Arrivals = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let accept = {
            let (arrivals, stop) = (Arc::clone(&arrivals), Arc::clone(&stop));
            std::thread::spawn(move || accept_until_stopped(&listener, &arrivals, &stop))
        };
        CountingUpstream {
            port,
            arrivals,
            stop,
            accept: Some(accept),
        }
    }

    /// Requests of load `source` (every load with `None`) that arrived from `from` to `to`.
    pub fn count(&self, from: Instant, to: Instant, source: Option<&str>) -> usize {
        lock(&self.arrivals)
            .iter()
            .filter(|(at, name)| *at >= from && *at < to && source.is_none_or(|s| s == name))
            .count()
    }

    /// Requests of `source` (every load with `None`) per second from `from` to `to`.
    pub fn rate(&self, from: Instant, to: Instant, source: Option<&str>) -> f64 {
        self.count(from, to, source) as f64 / (to - from).as_secs_f64()
    }
}

impl Drop for CountingUpstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

fn accept_until_stopped(listener: &TcpListener, arrivals: &Arrivals, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let arrivals = Arc::clone(arrivals);
                // Ends when Envoy closes the connection (at the latest when it stops).
                std::thread::spawn(move || serve_connection(stream, &arrivals));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Answers requests (no bodies: the loads send GETs) until the connection closes.
fn serve_connection(stream: TcpStream, arrivals: &Arrivals) {
    if stream.set_nonblocking(false).is_err() {
        return;
    }
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        let mut source = String::new();
        let mut headers = 0;
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let header = line.trim_end();
            if header.is_empty() && headers > 0 {
                break;
            }
            headers += 1;
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("x-load") {
                    value.trim().clone_into(&mut source);
                }
            }
        }
        lock(arrivals).push((Instant::now(), source));
        if writer
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .is_err()
        {
            return;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
