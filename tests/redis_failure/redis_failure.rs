//! Redis fails under load: each failure policy is honoured (one domain per policy, one process),
//! no call waits much past the deadline once the circuit breaker is open, and decisions resume
//! soon after Redis is back.
//!
//! Latency: the machine may be busy (2 cores, debug build, other tests), so the bound
//! "deadline + 200 ms" is asserted on the slowest call made once the breaker has surely opened
//! (BREAKER_SETTLED after the outage began: five 25 ms failures take far less), when each
//! call either fails at once or is the one probe per second that waits out the 25 ms deadline.
//! The p99 and the maximum of every call are printed as well. The tests of this file run one
//! at a time, with four load tasks, for the same reason.

use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::RateLimitResponse;
use tokio::sync::Mutex;

use floodgate_testkit as common;
use floodgate_testkit::http::request as http_request;
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::rls;
use floodgate_testkit::{wait_for_port, Floodgate};

const TIMEOUT_MS: u64 = 25;
/// The bound on one call once the breaker is open.
/// 200 ms over the deadline, the bound of the network-fault tests: a stalled host (a 105 ms
/// pause was seen under CI load) must not fail it, a call that waits for Redis (the outage
/// lasts 1.5 s) must.
const MAX_CALL_MS: u64 = TIMEOUT_MS + 200;
/// After this much of an outage the breaker is open for sure.
const BREAKER_SETTLED: Duration = Duration::from_millis(300);
const OUTAGE: Duration = Duration::from_millis(1500);
const LOAD_TASKS: usize = 4;

/// The tests of this file run one at a time: on 2 cores, two processes under load at once
/// would measure each other, not the breaker.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

const DOMAINS: [(&str, &str); 4] = [
    // No `failure_policy:`: the global default, `error`.
    ("d_error", ""),
    ("d_open", "failure_policy: fail_open\n"),
    ("d_closed", "failure_policy: fail_closed\n"),
    ("d_local", "failure_policy: local\n"),
];

fn rules(domain: &str, policy_line: &str) -> String {
    format!(
        "domain: {domain}\n{policy_line}descriptors:\n  \
         - key: user\n    rate_limit: {{unit: hour, requests_per_unit: 100000, algorithm: token_bucket, burst: 100000}}\n  \
         - key: strict\n    rate_limit: {{unit: hour, requests_per_unit: 2, algorithm: fixed_window}}\n"
    )
}

struct Setup {
    redis: RedisServer,
    floodgate: Floodgate,
    _dir: tempfile::TempDir,
}

/// floodgate with `threads` worker threads ("1": the single-threaded scheduler, which a
/// 1-CPU container gets; "2": the multi-threaded one).
fn start(threads: &str) -> Setup {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("no temp dir: {error}"));
    let config = common::rules_dir(
        dir.path(),
        DOMAINS.map(|(domain, policy)| (domain.to_owned(), rules(domain, policy))),
    );
    let url = redis.url();
    let timeout = TIMEOUT_MS.to_string();
    let floodgate = Floodgate::start(
        &config,
        &[
            "--store",
            "redis",
            "--redis-url",
            &url,
            "--redis-timeout-ms",
            &timeout,
            "--worker-threads",
            threads,
        ],
        dir.path(),
    );
    wait_for_port(
        floodgate.http_port,
        Duration::from_secs(10),
        "floodgate HTTP",
    );
    Setup {
        redis,
        floodgate,
        _dir: dir,
    }
}

/// What one call returned: the overall code, or the gRPC error code.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Ok,
    OverLimit { unavailable_header: Option<String> },
    Grpc(tonic::Code),
}

fn outcome(result: Result<RateLimitResponse, tonic::Status>) -> Outcome {
    match result {
        Ok(response) => match Code::try_from(response.overall_code) {
            Ok(Code::Ok) => Outcome::Ok,
            Ok(Code::OverLimit) => Outcome::OverLimit {
                unavailable_header: response
                    .response_headers_to_add
                    .iter()
                    .find(|header| header.key == "x-floodgate-unavailable")
                    .map(|header| header.value.clone()),
            },
            other => panic!("unexpected code {other:?}"),
        },
        Err(status) => Outcome::Grpc(status.code()),
    }
}

async fn call(client: &mut rls::Client, domain: &str, key: &str, value: &str) -> Outcome {
    outcome(rls::call(client, rls::request(domain, &[&[(key, value)]])).await)
}

/// One recorded call of the load.
struct Sample {
    started_after_outage: Option<Duration>,
    elapsed: Duration,
    domain: &'static str,
    outcome: Outcome,
}

fn expected_during_outage(domain: &str) -> Outcome {
    match domain {
        "d_error" => Outcome::Grpc(tonic::Code::Unavailable),
        "d_open" | "d_local" => Outcome::Ok,
        "d_closed" => Outcome::OverLimit {
            unavailable_header: Some("redis".to_owned()),
        },
        other => panic!("unknown domain {other}"),
    }
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() - 1) as f64 * fraction).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Runs LOAD_TASKS clients over every domain while `outage` (SIGSTOP, then SIGCONT) happens;
/// checks policies and latency; returns after Redis is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_policy_is_honoured_while_redis_is_paused_and_calls_stay_fast_with_one_thread() {
    every_policy_is_honoured_while_redis_is_paused_and_calls_stay_fast("1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_policy_is_honoured_while_redis_is_paused_and_calls_stay_fast_with_two_threads() {
    every_policy_is_honoured_while_redis_is_paused_and_calls_stay_fast("2").await;
}

async fn every_policy_is_honoured_while_redis_is_paused_and_calls_stay_fast(threads: &str) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let setup = start(threads);
    let url = setup.floodgate.grpc_url();
    let mut probe = rls::connect(&url).await;
    for (domain, _) in DOMAINS {
        assert_eq!(
            call(&mut probe, domain, "user", "warm").await,
            Outcome::Ok,
            "{domain}"
        );
    }

    let outage_started: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for index in 0..LOAD_TASKS {
        let mut client = rls::connect(&url).await;
        let outage_started = Arc::clone(&outage_started);
        let stop = Arc::clone(&stop);
        tasks.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut round = index;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let domain = DOMAINS[round % DOMAINS.len()].0;
                round += 1;
                let started = Instant::now();
                let started_after_outage = outage_started
                    .lock()
                    .await
                    .map(|at| started.saturating_duration_since(at));
                let result = call(&mut client, domain, "user", "load").await;
                samples.push(Sample {
                    started_after_outage,
                    elapsed: started.elapsed(),
                    domain,
                    outcome: result,
                });
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            samples
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    setup.redis.pause();
    *outage_started.lock().await = Some(Instant::now());
    tokio::time::sleep(BREAKER_SETTLED).await;

    // `local` decides on its own counters: the strict limit of 2 holds in this process.
    let mut local = Vec::new();
    for _ in 0..3 {
        local.push(call(&mut probe, "d_local", "strict", "outage").await);
    }
    assert_eq!(
        local,
        vec![
            Outcome::Ok,
            Outcome::Ok,
            Outcome::OverLimit {
                unavailable_header: None
            }
        ]
    );
    // The HTTP endpoints answer 503 under `error`.
    let body = r#"{"domain": "d_error", "descriptors": [{"entries": [{"key": "user", "value": "http"}]}]}"#;
    let http_port = setup.floodgate.http_port;
    let http =
        tokio::task::spawn_blocking(move || http_request(http_port, "POST", "/json", &[], body))
            .await
            .unwrap_or_else(|error| panic!("HTTP task: {error}"))
            .unwrap_or_else(|error| panic!("POST /json: {error}"));
    assert_eq!(http.status, 503, "{http:?}");

    tokio::time::sleep(OUTAGE.saturating_sub(BREAKER_SETTLED)).await;
    setup.redis.resume();
    let resumed = Instant::now();
    // Decisions resume: the first `error`-domain call that succeeds.
    let recovered_after = loop {
        if call(&mut probe, "d_error", "user", "recovery").await == Outcome::Ok {
            break resumed.elapsed();
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(5),
            "no decision within 5 s of Redis returning"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut samples = Vec::new();
    for task in tasks {
        samples.extend(
            task.await
                .unwrap_or_else(|error| panic!("load task: {error}")),
        );
    }

    let settled: Vec<&Sample> = samples
        .iter()
        .filter(|sample| {
            sample
                .started_after_outage
                .is_some_and(|after| after >= BREAKER_SETTLED && after < OUTAGE)
        })
        .collect();
    assert!(
        settled.len() > 20,
        "too few calls during the outage: {}",
        settled.len()
    );
    for sample in &settled {
        assert_eq!(
            sample.outcome,
            expected_during_outage(sample.domain),
            "{}",
            sample.domain
        );
    }
    let mut all: Vec<Duration> = samples.iter().map(|sample| sample.elapsed).collect();
    all.sort();
    let mut open: Vec<Duration> = settled.iter().map(|sample| sample.elapsed).collect();
    open.sort();
    let slowest_open = open.last().copied().unwrap_or_default();
    println!(
        "calls {}; all: p50 {:?} p99 {:?} max {:?}; breaker open: {} calls, p99 {:?} max {:?}; \
         decisions resumed {:?} after SIGCONT",
        all.len(),
        percentile(&all, 0.5),
        percentile(&all, 0.99),
        all.last().copied().unwrap_or_default(),
        open.len(),
        percentile(&open, 0.99),
        slowest_open,
        recovered_after,
    );
    assert!(
        slowest_open <= Duration::from_millis(MAX_CALL_MS),
        "a call took {slowest_open:?} with the breaker open"
    );
    // One probe per 500 ms; a probe may find the connection still reconnecting, the next not.
    // The bound allows several probes more: on 2 shared vCPUs under a parallel build, 1.14 s
    // was seen (CI 2026-12-04), and what is asserted is that decisions resume by themselves.
    assert!(
        recovered_after <= Duration::from_millis(3000),
        "decisions resumed only {recovered_after:?} after Redis returned"
    );
    let metrics_port = setup.floodgate.debug_port;
    let metrics =
        tokio::task::spawn_blocking(move || common::http::get(metrics_port, "/metrics", &[]))
            .await
            .unwrap_or_else(|error| panic!("metrics task: {error}"))
            .unwrap_or_else(|error| panic!("GET /metrics: {error}"));
    for policy in ["error", "fail_open", "fail_closed", "local"] {
        let line = format!("floodgate_failure_policy_calls_total{{policy=\"{policy}\"}}");
        assert!(metrics.body.contains(&line), "{line} missing");
    }
    assert!(
        metrics
            .body
            .lines()
            .any(|line| line.starts_with("floodgate_requests_rejected_total")
                && line.contains("domain=\"d_closed\"")
                && line.contains("reason=\"failure_policy\"")
                && !line.ends_with(" 0")),
        "no failure_policy rejection counted"
    );
    let log = setup.floodgate.process.log_text();
    assert_eq!(log.matches("Redis circuit open").count(), 1, "{log}");
    assert_eq!(log.matches("Redis circuit closed").count(), 1, "{log}");
}

/// SIGKILL, then a fresh Redis on the same port: `fail_open` keeps answering OK throughout,
/// and the `error` domain decides again soon after the new server is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn decisions_resume_after_redis_is_killed_and_restarted_with_one_thread() {
    decisions_resume_after_redis_is_killed_and_restarted("1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn decisions_resume_after_redis_is_killed_and_restarted_with_two_threads() {
    decisions_resume_after_redis_is_killed_and_restarted("2").await;
}

async fn decisions_resume_after_redis_is_killed_and_restarted(threads: &str) {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut setup = start(threads);
    let url = setup.floodgate.grpc_url();
    let mut client = rls::connect(&url).await;
    assert_eq!(call(&mut client, "d_error", "user", "a").await, Outcome::Ok);
    setup.redis.kill();
    let killed = Instant::now();
    let mut slowest_after_open = Duration::ZERO;
    while killed.elapsed() < Duration::from_millis(1200) {
        let started = Instant::now();
        assert_eq!(call(&mut client, "d_open", "user", "a").await, Outcome::Ok);
        let error = call(&mut client, "d_error", "user", "a").await;
        assert_eq!(error, Outcome::Grpc(tonic::Code::Unavailable));
        if started.duration_since(killed) >= BREAKER_SETTLED {
            slowest_after_open = slowest_after_open.max(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    setup.redis.restart();
    let restarted = Instant::now();
    let recovered_after = loop {
        if call(&mut client, "d_error", "user", "a").await == Outcome::Ok {
            break restarted.elapsed();
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(5),
            "no decision within 5 s of Redis restarting"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    println!(
        "two calls (fail_open + error) with the breaker open: max {slowest_after_open:?}; \
         decisions resumed {recovered_after:?} after the restart"
    );
    // Two calls per round, each bounded by the deadline.
    assert!(slowest_after_open <= Duration::from_millis(2 * MAX_CALL_MS));
    assert!(
        recovered_after <= Duration::from_millis(1100),
        "decisions resumed only {recovered_after:?} after Redis restarted"
    );
}
