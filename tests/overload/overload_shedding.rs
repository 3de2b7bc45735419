//! Self-protection of the real binary: calls beyond `--max-in-flight` get `--overload-answer`
//! at once, a call whose `grpc-timeout` has passed is not decided (DEADLINE_EXCEEDED), and
//! both are counted in `floodgate_overload_rejections_total`. Counts and answers only: the
//! latency under overload is measured by `scripts/bench-overload.sh`, not asserted here.

use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::RateLimitResponse;
use floodgate_testkit as common;
use floodgate_testkit::prom::scrape;
use floodgate_testkit::rls;
use floodgate_testkit::{runtime, Floodgate};

const RULES: &str =
    "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n";

fn start(extra: &[&str]) -> (tempfile::TempDir, Floodgate) {
    let temp = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let config = temp.path().join("rules.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write: {error}"));
    let server = Floodgate::start(&config, extra, temp.path());
    (temp, server)
}

fn overload_rejections(server: &Floodgate, reason: &str) -> f64 {
    scrape(server.debug_port).value("floodgate_overload_rejections_total", &[("reason", reason)])
}

fn two_descriptors() -> floodgate::proto::RateLimitRequest {
    rls::request("shop", &[&[("user", "a")], &[("user", "b")]])
}

fn header<'a>(response: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    response
        .response_headers_to_add
        .iter()
        .find(|header| header.key == name)
        .map(|header| header.value.as_str())
}

fn is_overloaded(response: &RateLimitResponse) -> bool {
    header(response, "x-floodgate-overloaded") == Some("true")
}

#[test]
fn over_limit_overload_answer_rejects_with_retry_after_and_the_overloaded_header() {
    // 0 in flight: every call is beyond the bound, deterministically.
    let (_temp, server) = start(&["--max-in-flight", "0", "--overload-answer", "over_limit"]);
    let responses = runtime().block_on(async {
        let mut client = rls::connect(&server.grpc_url()).await;
        let mut responses = Vec::new();
        for _ in 0..3 {
            responses.push(
                rls::call(&mut client, two_descriptors())
                    .await
                    .unwrap_or_else(|status| panic!("call failed: {status}")),
            );
        }
        responses
    });
    for response in &responses {
        assert_eq!(response.overall_code, Code::OverLimit as i32);
        assert_eq!(response.statuses.len(), 2);
        assert!(response
            .statuses
            .iter()
            .all(|status| status.code == Code::OverLimit as i32 && status.current_limit.is_none()));
        assert_eq!(header(response, "retry-after"), Some("1"));
        assert!(is_overloaded(response));
    }
    assert_eq!(overload_rejections(&server, "in_flight"), 3.0);
    // Nothing was decided: no counter was charged (a rule's series appear at its first decision).
    assert_eq!(
        scrape(server.debug_port)
            .get(
                "floodgate_requests_allowed_total",
                &[("domain", "shop"), ("rule", "shop.user")]
            )
            .unwrap_or(0.0),
        0.0
    );
}

#[test]
fn ok_overload_answer_admits_every_descriptor_without_a_limit() {
    let (_temp, server) = start(&["--max-in-flight", "0", "--overload-answer", "ok"]);
    let response = runtime().block_on(async {
        let mut client = rls::connect(&server.grpc_url()).await;
        rls::call(&mut client, two_descriptors())
            .await
            .unwrap_or_else(|status| panic!("call failed: {status}"))
    });
    assert_eq!(response.overall_code, Code::Ok as i32);
    assert_eq!(response.statuses.len(), 2);
    assert!(response
        .statuses
        .iter()
        .all(|status| status.code == Code::Ok as i32 && status.current_limit.is_none()));
    assert!(response.response_headers_to_add.is_empty());
    assert_eq!(overload_rejections(&server, "in_flight"), 1.0);
}

#[test]
fn the_default_overload_answer_is_unavailable() {
    let (_temp, server) = start(&["--max-in-flight", "0"]);
    let status = runtime().block_on(async {
        let mut client = rls::connect(&server.grpc_url()).await;
        rls::call(&mut client, two_descriptors()).await
    });
    match status {
        Err(status) => assert_eq!(status.code(), tonic::Code::Unavailable, "{status}"),
        Ok(response) => panic!("expected UNAVAILABLE, got {response:?}"),
    }
    assert_eq!(overload_rejections(&server, "in_flight"), 1.0);
}

/// One ShouldRateLimit call over raw HTTP/2 with `grpc-timeout: timeout`: its grpc-status.
/// Not through tonic's client, which enforces the timeout itself and would give up before the
/// server ever saw the call.
async fn grpc_status_with_timeout(server: &Floodgate, timeout: &str) -> String {
    grpc_status_of_call(server, timeout, Message::Sent).await
}

/// Whether a raw call sends its message after its headers.
#[derive(PartialEq)]
enum Message {
    Sent,
    NeverSent,
}

async fn grpc_status_of_call(server: &Floodgate, timeout: &str, message_sent: Message) -> String {
    use prost::Message as _;
    use tonic::codegen::{http, Bytes};

    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", server.grpc_port))
        .await
        .unwrap_or_else(|error| panic!("connect: {error}"));
    let (mut send, connection) = h2::client::handshake(tcp)
        .await
        .unwrap_or_else(|error| panic!("HTTP/2 handshake: {error}"));
    tokio::spawn(connection);
    let request = http::Request::post(format!(
        "http://127.0.0.1:{}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        server.grpc_port
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .header("grpc-timeout", timeout)
    .body(())
    .unwrap_or_else(|error| panic!("request: {error}"));
    let message = two_descriptors().encode_to_vec();
    let length = u32::try_from(message.len()).unwrap_or_else(|error| panic!("length: {error}"));
    // gRPC framing: uncompressed flag, big-endian length, message.
    let mut frame = vec![0u8];
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(&message);
    let (response, mut body) = send
        .send_request(request, false)
        .unwrap_or_else(|error| panic!("send: {error}"));
    if message_sent == Message::Sent {
        body.send_data(Bytes::from(frame), true)
            .unwrap_or_else(|error| panic!("send body: {error}"));
    }
    let response = tokio::time::timeout(rls::CALL_TIMEOUT, response)
        .await
        .unwrap_or_else(|_| panic!("no answer within {:?}", rls::CALL_TIMEOUT))
        .unwrap_or_else(|error| panic!("response: {error}"));
    // A status without a message comes trailers-only: in the headers.
    if let Some(status) = response.headers().get("grpc-status") {
        return status.to_str().unwrap_or_default().to_owned();
    }
    let mut body = response.into_body();
    while let Some(data) = body.data().await {
        data.unwrap_or_else(|error| panic!("body: {error}"));
    }
    let trailers = body
        .trailers()
        .await
        .unwrap_or_else(|error| panic!("trailers: {error}"))
        .unwrap_or_default();
    trailers
        .get("grpc-status")
        .and_then(|status| status.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

const GRPC_OK: &str = "0";
const GRPC_DEADLINE_EXCEEDED: &str = "4";

#[test]
fn a_call_whose_deadline_has_passed_is_not_decided() {
    let (_temp, server) = start(&[]);
    let (expired, fresh) = runtime().block_on(async {
        let expired = grpc_status_with_timeout(&server, "1n").await;
        // A generous deadline leaves time to decide.
        let fresh = grpc_status_with_timeout(&server, "10S").await;
        (expired, fresh)
    });
    // DEADLINE_EXCEEDED whether the deadline passed before the handler ran or while the
    // message was still arriving (`server::grpc_deadline`): an error to Envoy, nothing decided.
    assert_eq!(expired, GRPC_DEADLINE_EXCEEDED, "grpc-status {expired}");
    assert_eq!(fresh, GRPC_OK);
    assert_eq!(overload_rejections(&server, "deadline"), 1.0);
    // Only the fresh call charged the counters (once per descriptor).
    assert_eq!(
        scrape(server.debug_port).value(
            "floodgate_requests_allowed_total",
            &[("domain", "shop"), ("rule", "shop.user")]
        ),
        2.0
    );
}

#[test]
fn a_call_still_arriving_at_its_deadline_is_answered_and_counted_at_it() {
    let (_temp, server) = start(&[]);
    let status = runtime()
        .block_on(async { grpc_status_of_call(&server, "300m", Message::NeverSent).await });
    // Headers in, message never sent: the call ends at its deadline, not when the connection
    // closes, and counts as a deadline rejection though the handler never ran.
    assert_eq!(status, GRPC_DEADLINE_EXCEEDED, "grpc-status {status}");
    assert_eq!(overload_rejections(&server, "deadline"), 1.0);
    assert_eq!(overload_rejections(&server, "in_flight"), 0.0);
}

/// Many calls at once against a bound of 1: every call is answered, either decided or with
/// the overload answer, and the shed ones are exactly those counted. A permit is held only
/// while a call whose message is in is decided, so calls overlap there only when more threads
/// decide than there are CPUs (a thread preempted mid-decision holds its permit).
#[test]
fn concurrent_calls_beyond_the_bound_are_shed_and_every_call_is_answered() {
    const CONNECTIONS: usize = 8;
    const CALLS_PER_CONNECTION: usize = 50;
    const MAX_ROUNDS: usize = 20;
    let (_temp, server) = start(&[
        "--max-in-flight",
        "1",
        "--overload-answer",
        "over_limit",
        "--worker-threads",
        "16",
    ]);
    let runtime = runtime();
    let (mut decided, mut shed) = (0usize, 0usize);
    // Overlap depends on scheduling: a few bounded rounds until some call was shed.
    for _ in 0..MAX_ROUNDS {
        let (round_decided, round_shed) =
            runtime.block_on(burst(&server, CONNECTIONS, CALLS_PER_CONNECTION));
        assert_eq!(
            round_decided + round_shed,
            CONNECTIONS * CALLS_PER_CONNECTION,
            "every call gets an answer"
        );
        decided += round_decided;
        shed += round_shed;
        if shed > 0 {
            break;
        }
    }
    assert!(shed > 0, "no call was shed in {MAX_ROUNDS} bursts");
    assert!(decided > 0, "no call was decided");
    assert_eq!(overload_rejections(&server, "in_flight"), shed as f64);
    assert_eq!(overload_rejections(&server, "deadline"), 0.0);
}

/// `calls` calls at once on each of `connections` connections: (decided, shed).
async fn burst(server: &Floodgate, connections: usize, calls: usize) -> (usize, usize) {
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let client = rls::connect(&server.grpc_url()).await;
        for call in 0..calls {
            let mut client = client.clone();
            let user = format!("u{call}");
            tasks.push(tokio::spawn(async move {
                rls::call(&mut client, rls::request("shop", &[&[("user", &user)]])).await
            }));
        }
    }
    let (mut decided, mut shed) = (0, 0);
    for task in tasks {
        let response = task
            .await
            .unwrap_or_else(|error| panic!("client task: {error}"))
            .unwrap_or_else(|status| panic!("call failed: {status}"));
        if is_overloaded(&response) {
            assert_eq!(response.overall_code, Code::OverLimit as i32);
            shed += 1;
        } else {
            assert_eq!(response.overall_code, Code::Ok as i32);
            decided += 1;
        }
    }
    (decided, shed)
}

#[test]
fn bad_flag_values_are_refused_at_start() {
    let output = std::process::Command::new(common::floodgate_bin())
        .args([
            "serve",
            "--config",
            "/nonexistent",
            "--overload-answer",
            "deny",
        ])
        .output()
        .unwrap_or_else(|error| panic!("run floodgate: {error}"));
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unknown overload answer 'deny'"),
        "stderr: {stderr}"
    );
}

#[test]
fn a_shed_threshold_not_below_the_hard_bound_is_refused_at_start() {
    let temp = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let config = temp.path().join("rules.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write: {error}"));
    for (shed_above, expected) in [
        ("64", "--shed-above 64 must be below --max-in-flight 64"),
        ("0", "invalid value '0' for '--shed-above"),
    ] {
        let output = std::process::Command::new(common::floodgate_bin())
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--max-in-flight", "64", "--shed-above", shed_above])
            .output()
            .unwrap_or_else(|error| panic!("run floodgate: {error}"));
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "stderr: {stderr}");
    }
}

#[test]
fn one_worker_thread_decides_concurrent_calls() {
    // --worker-threads 1 runs tokio's single-threaded scheduler (docs/benchmarks-redis.md):
    // every call is still decided, none waits on another (nothing in the call path may block
    // the only thread).
    let (_temp, server) = start(&["--worker-threads", "1"]);
    let (decided, shed) = runtime().block_on(burst(&server, 4, 25));
    assert_eq!((decided, shed), (100, 0));
}

#[test]
fn zero_worker_threads_are_refused_at_start() {
    let output = std::process::Command::new(common::floodgate_bin())
        .args(["serve", "--config", "/nonexistent", "--worker-threads", "0"])
        .output()
        .unwrap_or_else(|error| panic!("run floodgate: {error}"));
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("invalid value '0' for '--worker-threads"),
        "stderr: {stderr}"
    );
}

#[test]
fn a_malformed_tokio_worker_threads_is_refused_at_start() {
    for value in ["0", "two"] {
        let output = std::process::Command::new(common::floodgate_bin())
            .args(["serve", "--config", "/nonexistent"])
            .env("TOKIO_WORKER_THREADS", value)
            .env_remove("FLOODGATE_WORKER_THREADS")
            .output()
            .unwrap_or_else(|error| panic!("run floodgate: {error}"));
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!(
                "TOKIO_WORKER_THREADS=\"{value}\" is not a number of threads"
            )),
            "stderr: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "stderr: {stderr}");
    }
}

/// `--shed-above` in the real binary: Redis paused (SIGSTOP), so the calls that reach the store
/// wait in floodgate; past 2 of them a new call survives with probability 2 / depth, and the
/// shed ones are answered at once with the overload answer and counted by reason. Once Redis
/// answers again, the waiting calls are decided.
#[test]
fn calls_past_shed_above_are_shed_while_a_paused_redis_holds_the_rest() {
    use floodgate_testkit::redis::{store_flags, RedisServer};

    const CALLS: usize = 60;
    let redis = RedisServer::start();
    let url = redis.url();
    let flags = store_flags(
        &url,
        &["--shed-above", "2", "--overload-answer", "over_limit"],
    );
    let (_temp, server) = start(&flags);
    let answers = runtime().block_on(async {
        let mut client = rls::connect(&server.grpc_url()).await;
        // The connection to Redis is up before it stops.
        let first = rls::call(&mut client, two_descriptors())
            .await
            .unwrap_or_else(|status| panic!("call failed: {status}"));
        assert_eq!(first.overall_code, Code::Ok as i32);
        redis.pause();
        let calls: Vec<_> = (0..CALLS)
            .map(|_| {
                let mut client = client.clone();
                tokio::spawn(async move { rls::call(&mut client, two_descriptors()).await })
            })
            .collect();
        // Long enough for every call to arrive; far below --redis-timeout-ms (2 s).
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        redis.resume();
        let mut answers = Vec::new();
        for call in calls {
            answers.push(
                call.await
                    .unwrap_or_else(|error| panic!("task: {error}"))
                    .unwrap_or_else(|status| panic!("call failed: {status}")),
            );
        }
        answers
    });
    let shed = answers
        .iter()
        .filter(|answer| is_overloaded(answer))
        .count();
    for answer in &answers {
        let expected = if is_overloaded(answer) {
            Code::OverLimit
        } else {
            Code::Ok
        };
        assert_eq!(answer.overall_code, expected as i32, "{answer:?}");
    }
    // About 45 of 60 are shed when all arrive while Redis is stopped; 5 leaves room for a
    // machine so busy that most arrived after it resumed.
    assert!(shed >= 5, "{shed} of {CALLS} shed");
    assert!(shed < CALLS, "the first calls past the threshold survive");
    assert_eq!(overload_rejections(&server, "shed"), shed as f64);
    assert_eq!(overload_rejections(&server, "in_flight"), 0.0);
}
