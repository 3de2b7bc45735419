//! The RLQS stream from a plain gRPC client: an assignment per reported bucket, one pushed
//! between reports when another stream joins the bucket, and the statuses that close a stream
//! (a report without a domain, too many buckets, too many streams, in all or on one connection)
//! while floodgate goes on serving.

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use floodgate_testkit::prom::scrape;
use floodgate_testkit::{runtime, tempdir, Floodgate};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const RULES: &str = "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 20}\n";

fn report(domain: &str, tenants: &[&str]) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: domain.to_owned(),
        bucket_quota_usages: tenants
            .iter()
            .map(|tenant| BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: HashMap::from([("tenant".to_owned(), (*tenant).to_owned())]),
                }),
                time_elapsed: None,
                num_requests_allowed: 1,
                num_requests_denied: 0,
            })
            .collect(),
    }
}

/// The status `answer` was refused with, checked to be `code` and to name `needle`.
fn refused<T: std::fmt::Debug>(answer: Result<T, tonic::Status>, code: tonic::Code, needle: &str) {
    match answer {
        Ok(answered) => panic!("answered instead of refused with {code:?}: {answered:?}"),
        Err(status) => {
            assert_eq!(status.code(), code, "{status}");
            assert!(status.message().contains(needle), "{}", status.message());
        }
    }
}

/// Opens a stream, sends `first`, and returns what the stream answers first.
async fn first_answer(
    url: &str,
    first: RateLimitQuotaUsageReports,
) -> (
    Result<Option<RateLimitQuotaResponse>, tonic::Status>,
    mpsc::Sender<RateLimitQuotaUsageReports>,
) {
    let mut client = RateLimitQuotaServiceClient::connect(url.to_owned())
        .await
        .unwrap_or_else(|error| panic!("cannot connect to {url}: {error}"));
    first_answer_on(&mut client, first).await
}

/// [`first_answer`] on a stream of `client`'s connection.
async fn first_answer_on(
    client: &mut RateLimitQuotaServiceClient<tonic::transport::Channel>,
    first: RateLimitQuotaUsageReports,
) -> (
    Result<Option<RateLimitQuotaResponse>, tonic::Status>,
    mpsc::Sender<RateLimitQuotaUsageReports>,
) {
    let (sender, receiver) = mpsc::channel(4);
    sender
        .send(first)
        .await
        .unwrap_or_else(|_| panic!("the request stream closed"));
    let answer = match client
        .stream_rate_limit_quotas(ReceiverStream::new(receiver))
        .await
    {
        Ok(response) => {
            let mut answers = response.into_inner();
            tokio::time::timeout(Duration::from_secs(10), answers.message())
                .await
                .unwrap_or_else(|_| panic!("no answer within 10 s"))
        }
        Err(status) => Err(status),
    };
    (answer, sender)
}

#[test]
fn each_reported_bucket_gets_a_whole_second_token_bucket() {
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(dir.path(), "edge.yaml", RULES, &[]);
    runtime().block_on(async {
        let (answer, _open) =
            first_answer(&floodgate.grpc_url(), report("edge", &["a", "b"])).await;
        let response = answer
            .unwrap_or_else(|status| panic!("{status}"))
            .unwrap_or_else(|| panic!("the stream ended without an answer"));
        assert_eq!(response.bucket_action.len(), 2);
        for action in &response.bucket_action {
            let Some(Action::QuotaAssignmentAction(assignment)) = action.bucket_action else {
                panic!("not an assignment: {action:?}");
            };
            assert_eq!(
                assignment.assignment_time_to_live.map(|d| d.seconds),
                Some(15)
            );
            let Some(Strategy::TokenBucket(bucket)) =
                assignment.rate_limit_strategy.and_then(|s| s.strategy)
            else {
                panic!("not a token bucket: {assignment:?}");
            };
            // One stream on the bucket: the whole 20/s, as 200 tokens every 10 s.
            assert_eq!(bucket.tokens_per_fill.map(|v| v.value), Some(200));
            assert_eq!(
                bucket.fill_interval.map(|d| (d.seconds, d.nanos)),
                Some((10, 0))
            );
            // The bucket's first assignment on this Envoy: a quarter of its burst of 20.
            assert_eq!(bucket.max_tokens, 5);
        }
        let metrics = scrape(floodgate.debug_port);
        assert_eq!(metrics.value("floodgate_rlqs_streams", &[]), 1.0);
        assert_eq!(metrics.value("floodgate_rlqs_reports_total", &[]), 1.0);
        assert_eq!(metrics.value("floodgate_rlqs_buckets", &[]), 2.0);
    });
}

/// A stream on `url` that has sent `first`: its answers, and where to send more reports.
async fn open_stream(
    url: &str,
    first: RateLimitQuotaUsageReports,
) -> (
    tonic::Streaming<RateLimitQuotaResponse>,
    mpsc::Sender<RateLimitQuotaUsageReports>,
) {
    let mut client = RateLimitQuotaServiceClient::connect(url.to_owned())
        .await
        .unwrap_or_else(|error| panic!("cannot connect to {url}: {error}"));
    let (sender, receiver) = mpsc::channel(4);
    sender
        .send(first)
        .await
        .unwrap_or_else(|_| panic!("the request stream closed"));
    let answers = client
        .stream_rate_limit_quotas(ReceiverStream::new(receiver))
        .await
        .unwrap_or_else(|status| panic!("{status}"))
        .into_inner();
    (answers, sender)
}

/// The next answer of `answers`, as the tokens per fill of its one token bucket.
async fn next_tokens_per_fill(answers: &mut tonic::Streaming<RateLimitQuotaResponse>) -> u32 {
    let response = tokio::time::timeout(Duration::from_secs(10), answers.message())
        .await
        .unwrap_or_else(|_| panic!("no answer within 10 s"))
        .unwrap_or_else(|status| panic!("{status}"))
        .unwrap_or_else(|| panic!("the stream ended"));
    match response.bucket_action.as_slice() {
        [action] => match &action.bucket_action {
            Some(Action::QuotaAssignmentAction(assignment)) => match assignment
                .rate_limit_strategy
                .as_ref()
                .and_then(|s| s.strategy.as_ref())
            {
                Some(Strategy::TokenBucket(bucket)) => {
                    bucket.tokens_per_fill.map_or(0, |value| value.value)
                }
                other => panic!("not a token bucket: {other:?}"),
            },
            other => panic!("not an assignment: {other:?}"),
        },
        actions => panic!("not one action: {actions:?}"),
    }
}

#[test]
fn a_second_stream_on_a_bucket_makes_floodgate_push_the_first_its_half() {
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(dir.path(), "edge.yaml", RULES, &[]);
    runtime().block_on(async {
        let url = floodgate.grpc_url();
        let (mut first, _first_open) = open_stream(&url, report("edge", &["a"])).await;
        // Alone: the whole 20/s, as 200 tokens every 10 s.
        assert_eq!(next_tokens_per_fill(&mut first).await, 200);
        let (mut second, _second_open) = open_stream(&url, report("edge", &["a"])).await;
        assert_eq!(next_tokens_per_fill(&mut second).await, 100);
        // The first stream reported nothing since: its half comes pushed.
        assert_eq!(next_tokens_per_fill(&mut first).await, 100);
        let metrics = scrape(floodgate.debug_port);
        assert_eq!(
            metrics.value("floodgate_rlqs_assignments_pushed_total", &[]),
            1.0
        );
        assert_eq!(metrics.value("floodgate_rlqs_reports_total", &[]), 2.0);
    });
}

#[test]
fn a_report_without_a_domain_closes_its_stream_and_floodgate_serves_on() {
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(dir.path(), "edge.yaml", RULES, &[]);
    runtime().block_on(async {
        let (answer, _open) = first_answer(&floodgate.grpc_url(), report("", &["a"])).await;
        refused(answer, tonic::Code::InvalidArgument, "domain");
        let closed = scrape(floodgate.debug_port).value(
            "floodgate_rlqs_streams_closed_total",
            &[("reason", "invalid_argument")],
        );
        assert_eq!(closed, 1.0);
        let (again, _open) = first_answer(&floodgate.grpc_url(), report("edge", &["a"])).await;
        assert!(matches!(again, Ok(Some(_))), "{again:?}");
    });
}

#[test]
fn too_many_buckets_or_streams_are_refused_with_resource_exhausted() {
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(
        dir.path(),
        "edge.yaml",
        RULES,
        &[
            "--rlqs-max-buckets-per-stream",
            "2",
            "--rlqs-max-streams",
            "1",
        ],
    );
    runtime().block_on(async {
        let url = floodgate.grpc_url();
        let (answer, _gone) = first_answer(&url, report("edge", &["a", "b", "c"])).await;
        refused(
            answer,
            tonic::Code::ResourceExhausted,
            "--rlqs-max-buckets-per-stream",
        );
        // The stream that was closed no longer counts: one may open, a second may not.
        let mut open = None;
        for _ in 0..50 {
            let (answer, sender) = first_answer(&url, report("edge", &["a"])).await;
            if answer.is_ok() {
                open = Some(sender);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            open.is_some(),
            "no stream opened after the refused one closed"
        );
        let (second, _) = first_answer(&url, report("edge", &["b"])).await;
        refused(second, tonic::Code::ResourceExhausted, "--rlqs-max-streams");
    });
}

#[test]
fn streams_beyond_the_bound_of_one_connection_are_refused_and_another_connection_opens() {
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(
        dir.path(),
        "edge.yaml",
        RULES,
        &["--rlqs-max-streams-per-connection", "2"],
    );
    runtime().block_on(async {
        let url = floodgate.grpc_url();
        let mut client = RateLimitQuotaServiceClient::connect(url.clone())
            .await
            .unwrap_or_else(|error| panic!("cannot connect to {url}: {error}"));
        let mut open = Vec::new();
        for tenant in ["a", "b"] {
            let (answer, sender) = first_answer_on(&mut client, report("edge", &[tenant])).await;
            assert!(answer.is_ok(), "{answer:?}");
            open.push(sender);
        }
        let (third, _) = first_answer_on(&mut client, report("edge", &["c"])).await;
        refused(
            third,
            tonic::Code::ResourceExhausted,
            "--rlqs-max-streams-per-connection",
        );
        let (elsewhere, _kept) = first_answer(&url, report("edge", &["c"])).await;
        assert!(elsewhere.is_ok(), "another connection: {elsewhere:?}");
        // A stream that ends gives its slot back to its connection.
        open.pop();
        let mut reopened = false;
        for _ in 0..50 {
            let (answer, sender) = first_answer_on(&mut client, report("edge", &["d"])).await;
            if answer.is_ok() {
                open.push(sender);
                reopened = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            reopened,
            "no stream reopened on the connection after one ended"
        );
    });
}

#[test]
fn shutdown_ends_open_streams_with_unavailable_and_the_process_exits() {
    let dir = tempdir();
    let mut floodgate = Floodgate::start_with_rules(dir.path(), "edge.yaml", RULES, &[]);
    let url = floodgate.grpc_url();
    runtime().block_on(async {
        let mut client = RateLimitQuotaServiceClient::connect(url.clone())
            .await
            .unwrap_or_else(|error| panic!("cannot connect to {url}: {error}"));
        let (sender, receiver) = mpsc::channel(4);
        let _ = sender.send(report("edge", &["a"])).await;
        let mut answers = client
            .stream_rate_limit_quotas(ReceiverStream::new(receiver))
            .await
            .unwrap_or_else(|status| panic!("{status}"))
            .into_inner();
        let first = answers.message().await;
        assert!(matches!(first, Ok(Some(_))), "{first:?}");
        // SIGTERM while the stream is open (and its Envoy still sending).
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(floodgate.process.pid().to_string())
            .status();
        let ended = tokio::time::timeout(Duration::from_secs(20), answers.message())
            .await
            .unwrap_or_else(|_| panic!("the stream stayed open 20 s after SIGTERM"));
        refused(ended, tonic::Code::Unavailable, "shutting down");
        drop(sender);
    });
    assert!(
        floodgate
            .process
            .exit_within(Duration::from_secs(20))
            .is_some(),
        "floodgate did not exit within 20 s of SIGTERM with an RLQS stream open"
    );
}

/// With `--store redis` each floodgate exchanges its Envoys' demand through Redis every
/// `--rlqs-exchange-ms`, and counts each exchange by result: ok while Redis answers, error
/// while it does not (each bucket then stays divided as the last exchange left it).
#[test]
fn exchanges_with_other_floodgates_are_counted_ok_or_error() {
    use floodgate_testkit::redis::{store_flags, RedisServer};

    let redis = RedisServer::start();
    let url = redis.url();
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(
        dir.path(),
        "edge.yaml",
        RULES,
        &store_flags(&url, &["--rlqs-exchange-ms", "100"]),
    );
    let exchanges = |result: &str| {
        scrape(floodgate.debug_port)
            .get("floodgate_rlqs_exchanges_total", &[("result", result)])
            .unwrap_or(0.0)
    };
    let wait_for = |result: &str, above: f64| {
        let started = std::time::Instant::now();
        while exchanges(result) <= above {
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "no exchange counted {result} past {above} within 15 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    runtime().block_on(async {
        // A bucket to publish: the stream stays open while the test runs.
        let (answer, _open) = first_answer(&floodgate.grpc_url(), report("edge", &["a"])).await;
        assert!(answer.is_ok(), "{answer:?}");
        wait_for("ok", 0.0);
        redis.pause();
        wait_for("error", 0.0);
        redis.resume();
        let ok = exchanges("ok");
        wait_for("ok", ok);
    });
}
