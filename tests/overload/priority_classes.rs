//! Priority classes end to end over gRPC, against the real binary, in memory and in Redis:
//! three classes share one token bucket of 10 per hour (one unit refills every 360 s); low
//! may use half, normal 80 %, critical all of it. Low is cut off first, then normal, then
//! critical; each refusal carries `x-floodgate-priority`, a Retry-After that is when the class's
//! hit fits above its reserve, and a `class` label on the rejection counter.

use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::RateLimitResponse;
use floodgate_testkit as common;
use floodgate_testkit::prom::scrape;
use floodgate_testkit::redis::{self as redis_support, RedisServer};
use floodgate_testkit::rls;
use floodgate_testkit::{tempdir, Floodgate};

const RULES: &str = r#"
domain: shop
descriptors:
  - key: pool
    value: checkout
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: token_bucket}
    priority:
      key: priority
      classes: {critical: 100%, normal: 80%, low: 50%}
      default: low
"#;

const RULE: &str = "shop.pool_checkout";

/// Seconds for one unit of the bucket to refill.
const UNIT_SECONDS: u64 = 360;

struct Answer {
    code: Code,
    remaining: u32,
    limit: Option<u32>,
    headers: Vec<(String, String)>,
}

impl Answer {
    fn from(response: RateLimitResponse) -> Answer {
        let code = Code::try_from(response.overall_code).unwrap_or(Code::Unknown);
        let status = response.statuses.first();
        Answer {
            code,
            remaining: status.map_or(0, |status| status.limit_remaining),
            limit: status
                .and_then(|status| status.current_limit.as_ref())
                .map(|limit| limit.requests_per_unit),
            headers: response
                .response_headers_to_add
                .into_iter()
                .map(|header| (header.key.to_ascii_lowercase(), header.value))
                .collect(),
        }
    }

    fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
            .collect()
    }

    fn retry_after(&self) -> u64 {
        let values = self.header("retry-after");
        assert_eq!(values.len(), 1, "one Retry-After: {:?}", self.headers);
        values[0]
            .parse()
            .unwrap_or_else(|error| panic!("Retry-After {:?}: {error}", values[0]))
    }
}

async fn ask(client: &mut rls::Client, class: Option<&str>) -> Answer {
    let mut entries = vec![("pool", "checkout")];
    if let Some(class) = class {
        entries.push(("priority", class));
    }
    let request = rls::request("shop", &[&entries]);
    let response = rls::call(client, request)
        .await
        .unwrap_or_else(|status| panic!("ShouldRateLimit: {status:?}"));
    Answer::from(response)
}

/// Asks `times` times in `class` and asserts each is admitted.
async fn admitted(client: &mut rls::Client, class: Option<&str>, times: usize) -> Answer {
    let mut last = None;
    for attempt in 0..times {
        let answer = ask(client, class).await;
        assert_eq!(answer.code, Code::Ok, "{class:?} attempt {attempt}");
        assert!(answer.header("x-floodgate-priority").is_empty());
        last = Some(answer);
    }
    last.unwrap_or_else(|| panic!("no attempt"))
}

async fn refused(client: &mut rls::Client, class: &str, priority_header: &str) -> Answer {
    let answer = ask(client, Some(class)).await;
    assert_eq!(answer.code, Code::OverLimit, "{class}");
    assert_eq!(answer.header("x-floodgate-priority"), [priority_header]);
    assert_eq!(answer.remaining, 0);
    answer
}

/// The whole scenario against a running floodgate.
async fn classes_are_shed_in_order(floodgate: &Floodgate) {
    let mut client = rls::connect(&floodgate.grpc_url()).await;

    // Without a class entry: the default, low. Low sees its half of the limit and of the room.
    let first = admitted(&mut client, None, 1).await;
    assert_eq!(first.limit, Some(5), "low's share of 10");
    assert_eq!(first.remaining, 4, "9 left, 5 of them kept for the others");
    admitted(&mut client, Some("low"), 4).await;

    let low = refused(
        &mut client,
        "low",
        "low;reason=reserved;reserved-for=\"normal critical\"",
    )
    .await;
    // One unit above the reserve of 5: at most one refill away.
    assert!((1..=UNIT_SECONDS).contains(&low.retry_after()));
    // An unknown class is the default one.
    refused(
        &mut client,
        "platinum",
        "low;reason=reserved;reserved-for=\"normal critical\"",
    )
    .await;

    let normal = admitted(&mut client, Some("normal"), 3).await;
    assert_eq!(normal.limit, Some(8));
    assert_eq!(normal.remaining, 0, "2 left, both kept for critical");
    refused(
        &mut client,
        "normal",
        "normal;reason=reserved;reserved-for=\"critical\"",
    )
    .await;

    let critical = admitted(&mut client, Some("critical"), 2).await;
    assert_eq!((critical.limit, critical.remaining), (Some(10), 0));
    let critical = refused(&mut client, "critical", "critical;reason=full").await;
    let critical_wait = critical.retry_after();
    assert!((1..=UNIT_SECONDS).contains(&critical_wait));

    // Now the bucket is empty: low waits for six units (one plus its reserve of five).
    let low = refused(
        &mut client,
        "low",
        "low;reason=full;reserved-for=\"normal critical\"",
    )
    .await;
    let low_wait = low.retry_after();
    assert!(
        low_wait > 5 * UNIT_SECONDS - 60 && low_wait <= 6 * UNIT_SECONDS,
        "low retries after {low_wait} s, critical after {critical_wait} s"
    );

    let scrape = scrape(floodgate.debug_port);
    let rejected = |class: &str| {
        scrape.value(
            "floodgate_requests_rejected_total",
            &[
                ("domain", "shop"),
                ("rule", RULE),
                ("reason", "limit"),
                ("class", class),
            ],
        )
    };
    assert_eq!(rejected("low"), 3.0);
    assert_eq!(rejected("normal"), 1.0);
    assert_eq!(rejected("critical"), 1.0);
    assert_eq!(rejected(""), 0.0, "no rejection without its class");
    assert_eq!(
        scrape.value(
            "floodgate_requests_allowed_total",
            &[("domain", "shop"), ("rule", RULE)]
        ),
        10.0
    );
}

#[tokio::test]
async fn classes_share_one_counter_in_memory() {
    let dir = tempdir();
    // No rate-limit headers asked for: a refused class still gets Retry-After.
    let floodgate = Floodgate::start_with_rules(dir.path(), "shop.yaml", RULES, &[]);
    classes_are_shed_in_order(&floodgate).await;
}

#[tokio::test]
async fn classes_share_one_counter_in_redis() {
    let redis = RedisServer::start();
    let dir = tempdir();
    let url = redis.url();
    let floodgate = Floodgate::start_with_rules(
        dir.path(),
        "shop.yaml",
        RULES,
        &[
            "--store",
            "redis",
            "--redis-url",
            &url,
            "--redis-timeout-ms",
            "1000",
            "--response-headers",
            "ietf",
        ],
    );
    classes_are_shed_in_order(&floodgate).await;
    // Every class charged the same key: one counter in Redis.
    let mut inspector = redis.inspector().await;
    let keys = redis_support::scan_keys(&mut inspector, "*").await;
    assert_eq!(keys.len(), 1, "{keys:?}");
}

#[test]
fn check_explain_names_the_class_of_each_descriptor() {
    let dir = tempdir();
    let config = dir.path().join("shop.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write config: {error}"));
    let output = std::process::Command::new(common::floodgate_bin())
        .args(["check", "--explain", "--config"])
        .arg(&config)
        .args([
            "--domain",
            "shop",
            "pool=checkout,priority=normal",
            "pool=checkout,priority=platinum",
        ])
        .output()
        .unwrap_or_else(|error| panic!("floodgate check --explain: {error}"));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    for expected in [
        "priority class normal (named by the last entry; may use 80% of the capacity)",
        "priority class low (the default: the last entry names no class; may use 50% of the \
         capacity)",
        "=> limited by shop.pool_checkout",
    ] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }
    assert!(!text.contains("matches nothing"), "{text}");
}
