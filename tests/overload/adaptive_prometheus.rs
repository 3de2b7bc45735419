//! Adaptive limits driven by a real Prometheus (`/usr/bin/prometheus`, Debian's package):
//! Prometheus scrapes a target in this test every second, whose latency and error ratio the
//! test sets; floodgate's adaptive rule queries Prometheus every second. While the latency is
//! above the SLO the effective limit falls to `min`; with low latency but too many errors it
//! holds; once both are healthy it climbs back. Decisions follow the effective limit.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate::proto::rate_limit_response::Code;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use floodgate_testkit::adaptive::{
    charge, client, effective_limit, rlconfig, wait_for_holds, wait_for_limit, wait_until, DOMAIN,
    LABELS, RULE,
};
use floodgate_testkit::prom::{self, scrape};
use floodgate_testkit::prometheus::{self, ScrapeJob};
use floodgate_testkit::rls;
use floodgate_testkit::{tempdir, Floodgate, Running};

/// Falling from 200 to 50 takes 13 steps of one second; Prometheus needs a few to start.
const PHASE_TIMEOUT: Duration = Duration::from_secs(40);

/// What the test target reports; f64 bits.
#[derive(Clone, Default)]
struct Upstream {
    latency_ms: Arc<AtomicU64>,
    error_ratio: Arc<AtomicU64>,
}

impl Upstream {
    fn set(&self, latency_ms: f64, error_ratio: f64) {
        self.latency_ms
            .store(latency_ms.to_bits(), Ordering::SeqCst);
        self.error_ratio
            .store(error_ratio.to_bits(), Ordering::SeqCst);
    }

    fn exposition(&self) -> String {
        let latency = f64::from_bits(self.latency_ms.load(Ordering::SeqCst));
        let errors = f64::from_bits(self.error_ratio.load(Ordering::SeqCst));
        format!(
            "# TYPE test_upstream_p95_milliseconds gauge\n\
             test_upstream_p95_milliseconds {latency}\n\
             # TYPE test_upstream_error_ratio gauge\n\
             test_upstream_error_ratio {errors}\n"
        )
    }
}

/// Serves `/metrics` (whatever the path) with the upstream's numbers, one response per
/// connection, until the test's runtime ends.
async fn serve_target(upstream: Upstream) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|error| panic!("bind the target: {error}"));
    let port = listener
        .local_addr()
        .unwrap_or_else(|error| panic!("target address: {error}"))
        .port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 1024];
                while !request.windows(4).any(|window| window == b"\r\n\r\n") {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => request.extend_from_slice(&buffer[..read]),
                    }
                }
                let body = upstream.exposition();
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    port
}

/// Prometheus on a free port, scraping `target_port` every second.
fn start_prometheus(dir: &Path, target_port: u16) -> (Running, u16) {
    prometheus::start(
        dir,
        &[ScrapeJob {
            name: "upstream",
            port: target_port,
            labels: &[],
        }],
    )
}

fn rules(prometheus_port: u16) -> String {
    let url = format!("http://127.0.0.1:{prometheus_port}");
    format!(
        r#"
domain: {DOMAIN}
descriptors:
  - key: pool
    value: checkout
    descriptors:
      - key: client
        rate_limit: {{unit: hour, requests_per_unit: 200, algorithm: token_bucket}}
        adaptive:
          min: 50
          max: 400
          interval: 1s
          slo: 250ms
          signal_unit: ms
          signal:
            prometheus: {{url: "{url}", query: "max(test_upstream_p95_milliseconds)"}}
          errors:
            prometheus: {{url: "{url}", query: "max(test_upstream_error_ratio)"}}
            max_ratio: 0.01
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_follows_the_latency_prometheus_reports() {
    let dir = tempdir();
    let upstream = Upstream::default();
    upstream.set(400.0, 0.0);
    let target_port = serve_target(upstream.clone()).await;
    let (_prometheus, prometheus_port) = start_prometheus(dir.path(), target_port);
    let floodgate =
        Floodgate::start_with_rules(dir.path(), "shop.yaml", &rules(prometheus_port), &[]);
    let mut grpc = rls::connect(&floodgate.grpc_url()).await;

    // Latency 400 ms > SLO 250 ms: −10 % a second, down to min.
    let mut seen = Vec::new();
    wait_for_limit(
        &grpc,
        PHASE_TIMEOUT,
        "the limit falls to min while the latency is high",
        || {},
        |limit| {
            seen.push(*limit);
            *limit == 50
        },
    )
    .await;
    assert!(
        seen.windows(2).all(|pair| pair[1] <= pair[0]),
        "the limit only fell: {seen:?}"
    );

    // Decisions follow the effective limit: a fresh client's bucket holds 50, not 200.
    assert_eq!(charge(&mut grpc, DOMAIN, &client("a"), 50).await, Code::Ok);
    assert_eq!(
        charge(&mut grpc, DOMAIN, &client("a"), 1).await,
        Code::OverLimit
    );
    assert_eq!(
        charge(&mut grpc, DOMAIN, &client("b"), 51).await,
        Code::OverLimit
    );

    let metrics = scrape(floodgate.debug_port);
    prom::promtool_check(&metrics.text);
    assert_eq!(metrics.value("floodgate_adaptive_limit", &LABELS), 50.0);
    assert_eq!(
        metrics.value("floodgate_adaptive_latency_seconds", &LABELS),
        0.4
    );
    let config = rlconfig(floodgate.debug_port);
    assert!(
        config.lines().any(|line| line.starts_with(RULE)
            && line
                .contains("effective 50/3600s by adaptive (signal prometheus http://127.0.0.1:")),
        "/rlconfig shows the adaptive limit:\n{config}"
    );

    // Low latency but 5 % errors: no growth.
    upstream.set(50.0, 0.05);
    wait_until(
        PHASE_TIMEOUT,
        "the controller reads the new latency and error ratio",
        || async { scrape(floodgate.debug_port) },
        |metrics| {
            metrics.get("floodgate_adaptive_error_ratio", &LABELS) == Some(0.05)
                && metrics.get("floodgate_adaptive_latency_seconds", &LABELS) == Some(0.05)
        },
    )
    .await;
    wait_for_holds(
        floodgate.debug_port,
        PHASE_TIMEOUT,
        "the controller holds twice more",
        2.0,
    )
    .await;
    assert_eq!(
        effective_limit(&mut grpc, DOMAIN, &client("watch")).await,
        50
    );

    // Healthy again: +5 % (at least +1) a second.
    upstream.set(50.0, 0.0);
    let mut climbing = Vec::new();
    wait_for_limit(
        &grpc,
        PHASE_TIMEOUT,
        "the limit climbs back once latency and errors are low",
        || {},
        |limit| {
            climbing.push(*limit);
            *limit >= 60
        },
    )
    .await;
    assert!(
        climbing.windows(2).all(|pair| pair[1] >= pair[0]),
        "the limit only rose: {climbing:?}"
    );
    let log = floodgate.process.log_text();
    assert!(
        log.contains(
            "adaptive limit of shop.pool_checkout.client: 200 → 180 (p95 400ms > slo 250ms)"
        ),
        "each change is logged with old → new and why:\n{log}"
    );
    assert!(
        log.contains("errors 5.00% > 1.00%"),
        "the hold says why:\n{log}"
    );
}
