//! ShouldRateLimit over a real socket: the server from the library on port 0, a tonic client,
//! and a manual clock so every number is exact.

use std::sync::Arc;
use std::time::Duration;

use floodgate::core::decision::headers::{HeaderMode, PlainHeaderNames};
use floodgate::core::ground::time::{ManualClock, MICROS_PER_SECOND};
use floodgate::core::policy::config::{load, LoadOptions, SourceFile};
use floodgate::engine::limiter::{Limiter, LimiterSettings};
use floodgate::engine::shutdown;
use floodgate::proto::rate_limit_descriptor::RateLimitOverride;
use floodgate::proto::rate_limit_response::{rate_limit::Unit, Code, DescriptorStatus};
use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitUnit};
use floodgate::store::memory::MemoryStore;
use floodgate_testkit::descriptor;
use tonic::transport::Channel;

use floodgate_testkit::in_process::{serve_limiter, Served};

const RULES: &str = r#"
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per_user}
  - key: login
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_log}
  - key: health
    rate_limit: {unlimited: true}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: api
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: hour, requests_per_unit: 3}
  - key: reports
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: leaky_bucket, burst: 1}
  - key: half_minute
    rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 5}
  - key: pool
    concurrency: {name: pool_in_flight, max_in_flight: 2, lease: request_id,
                  release: {key: phase, value: done}, ttl: 30s}
    priority: {key: class, classes: {critical: 100%, batch: 50%}, default: critical}
  - key: render
    concurrency: {max_in_flight: 100, shed_above: 1, lease: request_id,
                  release: {key: phase, value: done}, ttl: 30s}
"#;

/// 2026-11-30 00:00:10 UTC: 10 s into a minute, so fixed windows have 50 s left.
const START: i64 = 1_796_083_210 * MICROS_PER_SECOND;

struct Server {
    client: RateLimitServiceClient<Channel>,
    clock: Arc<ManualClock>,
    trigger: shutdown::ShutdownTrigger,
    task: tokio::task::JoinHandle<()>,
}

async fn start(settings: LimiterSettings) -> Server {
    let rules = load(
        &[SourceFile {
            name: "shop.yaml".into(),
            text: RULES.into(),
        }],
        &LoadOptions::default(),
    )
    .unwrap_or_else(|errors| panic!("test rules do not load: {errors}"));
    let clock = Arc::new(ManualClock::new(START));
    let store = MemoryStore::new(1000, clock.clone());
    let limiter = Arc::new(Limiter::new(rules, store, settings));
    let Served {
        client,
        trigger,
        task,
        ..
    } = serve_limiter(limiter).await;
    Server {
        client,
        clock,
        trigger,
        task,
    }
}

fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "shop".into(),
        descriptors,
        hits_addend: 0,
    }
}

impl Server {
    async fn call(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.client
            .should_rate_limit(request)
            .await
            .unwrap_or_else(|status| panic!("call failed: {status:?}"))
            .into_inner()
    }

    async fn refused(&mut self, request: RateLimitRequest) -> tonic::Status {
        match self.client.should_rate_limit(request).await {
            Ok(response) => panic!("expected an error, got {response:?}"),
            Err(status) => status,
        }
    }

    async fn stop(self) {
        self.trigger.fire();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

fn code(status: &DescriptorStatus) -> Code {
    Code::try_from(status.code).unwrap_or(Code::Unknown)
}

fn overall(response: &RateLimitResponse) -> Code {
    Code::try_from(response.overall_code).unwrap_or(Code::Unknown)
}

fn reset_seconds(status: &DescriptorStatus) -> i64 {
    status
        .duration_until_reset
        .as_ref()
        .map_or(-1, |d| d.seconds)
}

#[tokio::test]
async fn fixed_window_counts_and_reports_like_the_reference() {
    let mut server = start(LimiterSettings::default()).await;
    let user = || request(vec![descriptor(&[("user", "alice")])]);
    let first = server.call(user()).await;
    assert_eq!(overall(&first), Code::Ok);
    let status = &first.statuses[0];
    assert_eq!(code(status), Code::Ok);
    assert_eq!(status.limit_remaining, 1);
    assert_eq!(reset_seconds(status), 50);
    let limit = status.current_limit.clone().unwrap_or_default();
    assert_eq!(
        (limit.requests_per_unit, limit.unit, limit.name.as_str()),
        (2, Unit::Minute as i32, "per_user")
    );
    assert_eq!(limit.unit_multiplier, None);

    server.clock.advance(500_000); // 49.5 s left: Envoy truncates, so floodgate rounds up
    let second = server.call(user()).await;
    assert_eq!(
        (overall(&second), second.statuses[0].limit_remaining),
        (Code::Ok, 0)
    );
    assert_eq!(reset_seconds(&second.statuses[0]), 50);
    let third = server.call(user()).await;
    assert_eq!(overall(&third), Code::OverLimit);
    assert_eq!(code(&third.statuses[0]), Code::OverLimit);

    server.clock.advance(50 * MICROS_PER_SECOND); // next minute
    assert_eq!(overall(&server.call(user()).await), Code::Ok);
    server.stop().await;
}

#[tokio::test]
async fn a_rejected_request_charges_none_of_its_descriptors() {
    let mut server = start(LimiterSettings::default()).await;
    // Exhaust bob's per-user limit.
    for _ in 0..2 {
        server
            .call(request(vec![descriptor(&[("user", "bob")])]))
            .await;
    }
    // Bob's login is fresh (3/min) but the request is rejected by the user limit ...
    for _ in 0..5 {
        let both = server
            .call(request(vec![
                descriptor(&[("login", "bob")]),
                descriptor(&[("user", "bob")]),
            ]))
            .await;
        assert_eq!(overall(&both), Code::OverLimit);
        assert_eq!(code(&both.statuses[0]), Code::Ok);
        assert_eq!(
            both.statuses[0].limit_remaining, 3,
            "login must not be charged"
        );
    }
    // ... so all three logins are still there.
    for remaining in [2, 1, 0] {
        let login = server
            .call(request(vec![descriptor(&[("login", "bob")])]))
            .await;
        assert_eq!(
            (overall(&login), login.statuses[0].limit_remaining),
            (Code::Ok, remaining)
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn unknown_domain_no_match_unlimited_and_shadow() {
    let mut server = start(LimiterSettings::default()).await;
    let mut unknown = request(vec![descriptor(&[("user", "x")])]);
    unknown.domain = "nowhere".into();
    let response = server.call(unknown).await;
    assert_eq!(overall(&response), Code::Ok);
    assert_eq!(response.statuses.len(), 1);
    assert!(response.statuses[0].current_limit.is_none());

    let response = server
        .call(request(vec![
            descriptor(&[("nothing", "here")]),
            descriptor(&[("health", "probe")]),
        ]))
        .await;
    assert_eq!(overall(&response), Code::Ok);
    assert!(response.statuses[0].current_limit.is_none());
    assert_eq!(response.statuses[1].limit_remaining, u32::MAX);
    assert!(response.statuses[1].current_limit.is_none());

    let shadowed = || request(vec![descriptor(&[("shadowed", "s")])]);
    assert_eq!(overall(&server.call(shadowed()).await), Code::Ok);
    let over = server.call(shadowed()).await;
    assert_eq!(overall(&over), Code::Ok, "shadow mode never rejects");
    assert_eq!(code(&over.statuses[0]), Code::Ok);
    assert_eq!(over.statuses[0].limit_remaining, 0);
    assert!(over.statuses[0].current_limit.is_some());
    server.stop().await;
}

#[tokio::test]
async fn several_limits_report_the_most_restrictive() {
    let mut server = start(LimiterSettings::default()).await;
    let api = || request(vec![descriptor(&[("api", "k")])]);
    let first = server.call(api()).await;
    let limit = first.statuses[0].current_limit.clone().unwrap_or_default();
    assert_eq!(
        (limit.requests_per_unit, first.statuses[0].limit_remaining),
        (3, 2)
    );
    server.call(api()).await;
    server.call(api()).await;
    let over = server.call(api()).await;
    assert_eq!(overall(&over), Code::OverLimit);
    let limit = over.statuses[0].current_limit.clone().unwrap_or_default();
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (3, Unit::Hour as i32)
    );
    server.stop().await;
}

#[tokio::test]
async fn hits_addend_check_only_refunds_and_overrides() {
    let mut server = start(LimiterSettings::default()).await;
    let mut heavy = request(vec![descriptor(&[("login", "eve")])]);
    heavy.hits_addend = 2;
    assert_eq!(
        server.call(heavy.clone()).await.statuses[0].limit_remaining,
        1
    );
    assert_eq!(overall(&server.call(heavy.clone()).await), Code::OverLimit);

    let mut check = descriptor(&[("login", "eve")]);
    check.hits_addend = Some(0);
    let checked = server.call(request(vec![check.clone()])).await;
    assert_eq!(
        (overall(&checked), checked.statuses[0].limit_remaining),
        (Code::Ok, 1)
    );

    let mut refund = descriptor(&[("login", "eve")]);
    refund.hits_addend = Some(5);
    refund.is_negative_hits = true;
    let refunded = server.call(request(vec![refund])).await;
    assert_eq!(
        refunded.statuses[0].limit_remaining, 3,
        "never beyond the limit"
    );

    let mut huge = descriptor(&[("login", "eve")]);
    huge.hits_addend = Some(u64::MAX);
    let rejected = server.call(request(vec![huge])).await;
    assert_eq!(overall(&rejected), Code::OverLimit);

    let mut overridden = descriptor(&[("user", "frank")]);
    overridden.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: RateLimitUnit::Hour as i32,
        unit_multiplier: None,
    });
    let first = server.call(request(vec![overridden.clone()])).await;
    let limit = first.statuses[0].current_limit.clone().unwrap_or_default();
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (1, Unit::Hour as i32)
    );
    assert_eq!(
        overall(&server.call(request(vec![overridden])).await),
        Code::OverLimit
    );
    server.stop().await;
}

#[tokio::test]
async fn windows_that_are_multiples_of_a_unit_say_so() {
    let mut server = start(LimiterSettings::default()).await;
    let response = server
        .call(request(vec![descriptor(&[("half_minute", "x")])]))
        .await;
    let limit = response.statuses[0]
        .current_limit
        .clone()
        .unwrap_or_default();
    assert_eq!(
        (limit.unit, limit.unit_multiplier),
        (Unit::Second as i32, Some(30))
    );
    // 00:00:10 is 10 s into a 30 s window aligned to the epoch.
    assert_eq!(reset_seconds(&response.statuses[0]), 20);
    server.stop().await;
}

#[tokio::test]
async fn leaky_bucket_admits_burst_plus_one_then_the_rate() {
    let mut server = start(LimiterSettings::default()).await;
    let reports = || request(vec![descriptor(&[("reports", "r")])]);
    assert_eq!(overall(&server.call(reports()).await), Code::Ok);
    assert_eq!(overall(&server.call(reports()).await), Code::Ok);
    let over = server.call(reports()).await;
    assert_eq!(overall(&over), Code::OverLimit);
    assert_eq!(
        reset_seconds(&over.statuses[0]),
        1,
        "retry after half a second, rounded up"
    );
    server.clock.advance(500_000);
    assert_eq!(overall(&server.call(reports()).await), Code::Ok);
    server.stop().await;
}

#[tokio::test]
async fn headers_and_global_shadow_mode() {
    let settings = LimiterSettings {
        header_mode: HeaderMode::RateLimit(PlainHeaderNames::REFERENCE),
        global_shadow: true,
        ..LimiterSettings::default()
    };
    let mut server = start(settings).await;
    let user = || request(vec![descriptor(&[("user", "gil")])]);
    server.call(user()).await;
    server.call(user()).await;
    let over = server.call(user()).await;
    assert_eq!(overall(&over), Code::Ok, "global shadow mode answers OK");
    assert_eq!(
        code(&over.statuses[0]),
        Code::OverLimit,
        "but the status says what happened"
    );
    let headers: Vec<(String, String)> = over
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert!(
        headers.contains(&("RateLimit-Limit".into(), "2".into())),
        "{headers:?}"
    );
    assert!(
        headers.contains(&("RateLimit-Remaining".into(), "0".into())),
        "{headers:?}"
    );
    assert!(
        headers.iter().any(|(k, _)| k == "Retry-After"),
        "{headers:?}"
    );
    server.stop().await;
}

/// One acquire of a concurrency rule: the rule's entries, the lease id, then the priority
/// class entry if any (it ends the descriptor).
fn acquire(entries: &[(&str, &str)], lease: &str) -> RateLimitRequest {
    let (class, mut entries): (Vec<_>, Vec<_>) =
        entries.iter().partition(|(key, _)| *key == "class");
    entries.push(("request_id", lease));
    entries.extend(class);
    request(vec![descriptor(&entries)])
}

/// Acquires new leases of the shedding rule until one is shed: each admitted one deepens the
/// queue (survival 1 / depth), so twenty tries all surviving has odds of 1 in 20!.
async fn until_shed(server: &mut Server) -> RateLimitResponse {
    for attempt in 0..20 {
        let answer = server
            .call(acquire(&[("render", "r")], &format!("job-{attempt}")))
            .await;
        if overall(&answer) == Code::OverLimit {
            return answer;
        }
    }
    panic!("twenty new leases past shed_above 1 and none shed");
}

fn header_pairs(response: &RateLimitResponse) -> Vec<(&str, &str)> {
    response
        .response_headers_to_add
        .iter()
        .map(|header| (header.key.as_str(), header.value.as_str()))
        .collect()
}

#[tokio::test]
async fn every_concurrency_refusal_carries_retry_after_and_the_mode_headers() {
    let cases = [
        (HeaderMode::None, ["Retry-After"].as_slice()),
        (
            HeaderMode::Draft03,
            &[
                "X-RateLimit-Limit",
                "X-RateLimit-Remaining",
                "X-RateLimit-Reset",
                "Retry-After",
            ],
        ),
        (
            HeaderMode::Ietf,
            &["RateLimit-Policy", "RateLimit", "Retry-After"],
        ),
    ];
    for (header_mode, names) in cases {
        let settings = LimiterSettings {
            header_mode,
            ..LimiterSettings::default()
        };
        let mut server = start(settings).await;
        let critical = [("pool", "full")];
        server.call(acquire(&critical, "a")).await;
        server.call(acquire(&critical, "b")).await;
        let full = server.call(acquire(&critical, "c")).await;
        // batch may hold 1 of the 2 slots: its second lease is kept out for critical.
        let batch = [("pool", "shared"), ("class", "batch")];
        server.call(acquire(&batch, "a")).await;
        let over_share = server.call(acquire(&batch, "b")).await;
        let shed = until_shed(&mut server).await;
        for (refusal, answer, wait) in [
            ("full", &full, "1"),
            ("class over its share", &over_share, "1"),
            ("shed", &shed, "1"),
        ] {
            let headers = header_pairs(answer);
            let context = format!("{header_mode:?}, {refusal}: {headers:?}");
            assert_eq!(overall(answer), Code::OverLimit, "{context}");
            let status = &answer.statuses[0];
            assert_eq!(status.current_limit, None, "{context}");
            assert_eq!(reset_seconds(status).to_string(), wait, "{context}");
            let sent: Vec<&str> = headers
                .iter()
                .map(|(name, _)| *name)
                .filter(|name| *name != "x-floodgate-priority")
                .collect();
            assert_eq!(sent, names, "{context}");
            assert!(headers.contains(&("Retry-After", wait)), "{context}");
        }
        if header_mode == HeaderMode::Ietf {
            assert_eq!(
                header_pairs(&over_share)[..2],
                [
                    (
                        "RateLimit-Policy",
                        "\"pool_in_flight\";q=1;qu=\"concurrent-requests\""
                    ),
                    ("RateLimit", "\"pool_in_flight\";r=0;t=1"),
                ]
            );
        }
        server.stop().await;
    }
}

#[tokio::test]
async fn bad_requests_get_invalid_argument_with_a_message() {
    let mut server = start(LimiterSettings::default()).await;
    let mut no_domain = request(vec![descriptor(&[("user", "a")])]);
    no_domain.domain.clear();
    let cases = vec![
        (no_domain, "domain"),
        (request(vec![]), "descriptor list"),
        (request(vec![descriptor(&[("", "v")])]), "key is empty"),
        (
            request(vec![descriptor(&[("user", "a")]); 65]),
            "--max-descriptors",
        ),
        (
            request(vec![descriptor(&[("k", "v"); 33])]),
            "--max-entries",
        ),
    ];
    for (bad, expected) in cases {
        let status = server.refused(bad).await;
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains(expected),
            "{:?} lacks {expected:?}",
            status.message()
        );
    }
    let mut unknown_unit = descriptor(&[("user", "a")]);
    unknown_unit.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: RateLimitUnit::Unknown as i32,
        unit_multiplier: None,
    });
    let status = server.refused(request(vec![unknown_unit])).await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("UNKNOWN"));
    // The server is still fine afterwards.
    assert_eq!(
        overall(
            &server
                .call(request(vec![descriptor(&[("user", "a")])]))
                .await
        ),
        Code::Ok
    );
    server.stop().await;
}

#[tokio::test]
async fn empty_values_are_accepted() {
    let mut server = start(LimiterSettings::default()).await;
    let response = server
        .call(request(vec![descriptor(&[("user", "")])]))
        .await;
    assert_eq!(overall(&response), Code::Ok);
    assert_eq!(response.statuses[0].limit_remaining, 1);
    server.stop().await;
}
