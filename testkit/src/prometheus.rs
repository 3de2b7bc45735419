//! A real Prometheus server for tests (`prometheus`, Debian's package, which
//! `scripts/install-peers.sh` installs): its data in the test's directory, on a free loopback
//! port, scraping loopback targets every second; stopped by pid when dropped.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::{free_port, wait_for_port, which, Running};

/// One scrape job: `127.0.0.1:port` at `/metrics`, with `labels` attached to its series (as
/// Kubernetes service discovery would attach a pod's labels).
pub struct ScrapeJob<'a> {
    pub name: &'a str,
    pub port: u16,
    pub labels: &'a [(&'a str, &'a str)],
}

/// The `prometheus.yml` for `jobs`: every job scraped (and rules evaluated) every second.
pub fn config(jobs: &[ScrapeJob<'_>]) -> String {
    let mut text = String::from(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n",
    );
    for job in jobs {
        text.push_str(&format!(
            "  - job_name: '{}'\n    static_configs:\n      - targets: ['127.0.0.1:{}']\n",
            job.name, job.port
        ));
        if !job.labels.is_empty() {
            text.push_str("        labels:\n");
            for (name, value) in job.labels {
                text.push_str(&format!(
                    "          {name}: '{}'\n",
                    value.replace('\'', "''")
                ));
            }
        }
    }
    text
}

/// Prometheus on a free port, scraping `jobs`, its configuration, storage and log in `dir`;
/// once it listens. A missing `prometheus` binary fails the test.
pub fn start(dir: &Path, jobs: &[ScrapeJob<'_>]) -> (Running, u16) {
    assert!(
        which("prometheus").is_some(),
        "prometheus not found on PATH: run scripts/install-peers.sh (Debian's prometheus package)"
    );
    let file = dir.join("prometheus.yml");
    std::fs::write(&file, config(jobs))
        .unwrap_or_else(|error| panic!("write prometheus.yml: {error}"));
    let port = free_port();
    let mut command = Command::new("prometheus");
    command
        .arg(format!("--config.file={}", file.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--log.level=warn");
    let process = Running::spawn("prometheus", &mut command, dir);
    wait_for_port(port, Duration::from_secs(20), "prometheus");
    (process, port)
}

/// `text` percent-encoded for a URL's query string (every byte but RFC 3986's unreserved).
pub fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// The body of `GET /api/v1/query?query=<expr>` (an instant query at the server's now), as
/// text: the caller parses the JSON. Chunked bodies are decoded.
pub fn query(port: u16, expr: &str) -> std::io::Result<(u16, String)> {
    let path = format!("/api/v1/query?query={}", url_encode(expr));
    let response = crate::http::get(port, &path, &[])?;
    let chunked = response
        .header("transfer-encoding")
        .is_some_and(|value| value.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(&response.body)
    } else {
        response.body
    };
    Ok((response.status, body))
}

/// A `Transfer-Encoding: chunked` body, decoded (an undecodable rest is kept as it is).
fn dechunk(mut raw: &str) -> String {
    let mut body = String::new();
    while let Some((size_line, rest)) = raw.split_once("\r\n") {
        let size = size_line.split(';').next().unwrap_or("").trim();
        let Ok(size) = usize::from_str_radix(size, 16) else {
            body.push_str(raw);
            return body;
        };
        if size == 0 {
            return body;
        }
        let (Some(chunk), Some(after)) = (rest.get(..size), rest.get(size..)) else {
            body.push_str(rest);
            return body;
        };
        body.push_str(chunk);
        raw = after.strip_prefix("\r\n").unwrap_or(after);
    }
    body
}
