//! Adaptive limits driven by values pushed to the admin API (`POST /v1/signals/{name}`): the
//! route is authenticated and checks what it gets; the limit falls while the pushed latency is
//! high, holds once the pushes stop (a stale value is no signal), climbs when it is low. With
//! Redis, a value pushed to one instance steers one limit that every instance enforces.

use std::path::Path;
use std::time::Duration;

use floodgate::proto::rate_limit_response::Code;

use floodgate_testkit as common;
use floodgate_testkit::adaptive::{
    self, charge, client, effective_limit, push, wait_for_holds, wait_for_limit, wait_until,
    ADMIN_TOKEN, DOMAIN, LABELS,
};
use floodgate_testkit::prom::scrape;
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::rls;
use floodgate_testkit::{subdir, tempdir, wait_for_port, Floodgate};

const SIGNAL: &str = "checkout_p95";
/// 20 → 10 is 5 steps of one second.
const PHASE_TIMEOUT: Duration = Duration::from_secs(30);

const RULES: &str = r#"
domain: shop
descriptors:
  - key: pool
    value: checkout
    descriptors:
      - key: client
        rate_limit: {unit: hour, requests_per_unit: 20, algorithm: token_bucket}
        adaptive:
          min: 10
          max: 40
          interval: 1s
          slo: 250ms
          signal_unit: ms
          signal: {pushed: checkout_p95}
"#;

/// floodgate with the admin API on a free port; returns it and the admin port.
fn start(dir: &Path, name: &str, extra: &[&str]) -> (Floodgate, u16) {
    let (admin, admin_port) = common::admin_api(dir, ADMIN_TOKEN);
    let mut args: Vec<&str> = admin.iter().map(String::as_str).collect();
    args.extend_from_slice(extra);
    let floodgate = Floodgate::start_with_rules(&subdir(dir, name), "shop.yaml", RULES, &args);
    wait_for_port(admin_port, Duration::from_secs(10), "floodgate admin API");
    (floodgate, admin_port)
}

/// Replaces the rules file in one rename, so the reload never reads half of it.
fn rewrite(config: &Path, rules: &str) {
    let temporary = config.with_extension("tmp-write");
    std::fs::write(&temporary, rules).unwrap_or_else(|error| panic!("write the rules: {error}"));
    std::fs::rename(&temporary, config).unwrap_or_else(|error| panic!("rename the rules: {error}"));
}

fn push_ok(admin_port: u16, body: &str) {
    let answer = push(admin_port, Some(ADMIN_TOKEN), SIGNAL, body);
    assert_eq!(answer.status, 200, "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushed_values_move_the_limit_and_a_stale_one_holds_it() {
    let dir = tempdir();
    let (floodgate, admin_port) = start(dir.path(), "one", &[]);
    let mut grpc = rls::connect(&floodgate.grpc_url()).await;
    assert_eq!(
        effective_limit(&mut grpc, DOMAIN, &client("watch")).await,
        20
    );

    // The route is behind the admin token and checks what it gets.
    assert_eq!(push(admin_port, None, SIGNAL, "900").status, 401);
    assert_eq!(push(admin_port, Some("wrong"), SIGNAL, "900").status, 401);
    let unknown = push(admin_port, Some(ADMIN_TOKEN), "checkout_p59", "900");
    assert_eq!(unknown.status, 404, "{unknown:?}");
    assert!(
        unknown.body.contains("checkout_p95"),
        "names the known signals: {unknown:?}"
    );
    for bad in ["fast", "-1", "NaN", r#"{"value": "900"}"#] {
        let refused = push(admin_port, Some(ADMIN_TOKEN), SIGNAL, bad);
        assert_eq!(refused.status, 400, "{bad}: {refused:?}");
    }

    // 900 ms > 250 ms, pushed faster than it goes stale: down to min.
    let mut seen = Vec::new();
    wait_for_limit(
        &grpc,
        PHASE_TIMEOUT,
        "the limit falls to min while high latency is pushed",
        || push_ok(admin_port, "900"),
        |limit| {
            seen.push(*limit);
            *limit == 10
        },
    )
    .await;
    assert!(seen.windows(2).all(|pair| pair[1] <= pair[0]), "{seen:?}");
    assert_eq!(charge(&mut grpc, DOMAIN, &client("a"), 10).await, Code::Ok);
    assert_eq!(
        charge(&mut grpc, DOMAIN, &client("a"), 1).await,
        Code::OverLimit
    );

    // One low value (100 ms < 0.7 × 250 ms) and then no pushes: the limit may grow while the
    // value is fresh, but after 2 intervals it is stale, so no signal, and the limit holds.
    push_ok(admin_port, r#"{"value": 100}"#);
    wait_until(
        PHASE_TIMEOUT,
        "the pushed value goes stale",
        || async { scrape(floodgate.debug_port) },
        |metrics| {
            metrics
                .get("floodgate_adaptive_latency_seconds", &LABELS)
                .is_some_and(f64::is_nan)
        },
    )
    .await;
    let held = effective_limit(&mut grpc, DOMAIN, &client("watch")).await;
    wait_for_holds(
        floodgate.debug_port,
        PHASE_TIMEOUT,
        "the controller holds on the stale value",
        2.0,
    )
    .await;
    assert_eq!(
        effective_limit(&mut grpc, DOMAIN, &client("watch")).await,
        held
    );
    let log = floodgate.process.log_text();
    assert!(
        log.contains("older than 2 intervals"),
        "the hold says why:\n{log}"
    );

    // Low latency pushed: +1 a second (5 % of 10-ish rounds down), up to above 12.
    wait_for_limit(
        &grpc,
        PHASE_TIMEOUT,
        "the limit climbs while low latency is pushed",
        || push_ok(admin_port, "20"),
        |limit| *limit >= held + 2,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_every_instance_enforces_the_limit_one_of_them_steps() {
    let redis = RedisServer::start();
    let dir = tempdir();
    let url = redis.url();
    let store = ["--store", "redis", "--redis-url", url.as_str()];
    let (first, admin_port) = start(dir.path(), "first", &store);
    let (second, _) = start(dir.path(), "second", &store);
    let mut grpc_first = rls::connect(&first.grpc_url()).await;
    let mut grpc_second = rls::connect(&second.grpc_url()).await;

    // Pushed to the first instance only: both reach min.
    for grpc in [&grpc_first, &grpc_second] {
        wait_for_limit(
            grpc,
            PHASE_TIMEOUT,
            "every instance enforces the shared limit",
            || push_ok(admin_port, "900"),
            |limit| *limit == 10,
        )
        .await;
    }
    let mut inspector = redis.inspector().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("floodgate:{adaptive}:*")
        .query_async(&mut inspector)
        .await
        .unwrap_or_else(|error| panic!("KEYS: {error}"));
    let value_key = keys
        .iter()
        .find(|key| !key.ends_with(":lead") && !key.contains(":signal:"))
        .unwrap_or_else(|| panic!("no shared limit in Redis: {keys:?}"));
    let stored: String = redis::cmd("GET")
        .arg(value_key)
        .query_async(&mut inspector)
        .await
        .unwrap_or_else(|error| panic!("GET {value_key}: {error}"));
    assert_eq!(stored, "10");

    // One limit and one counter: a fresh client gets 10 in all, across both instances.
    assert_eq!(
        charge(&mut grpc_first, DOMAIN, &client("a"), 6).await,
        Code::Ok
    );
    assert_eq!(
        charge(&mut grpc_second, DOMAIN, &client("a"), 4).await,
        Code::Ok
    );
    assert_eq!(
        charge(&mut grpc_first, DOMAIN, &client("a"), 1).await,
        Code::OverLimit
    );
    assert_eq!(
        charge(&mut grpc_second, DOMAIN, &client("a"), 1).await,
        Code::OverLimit
    );

    // Steps happen once per interval across both instances: together they logged each change
    // 20 → 18 → … → 10 once as the stepping instance.
    let stepped = |log: String| {
        log.lines()
            .filter(|line| {
                line.contains("adaptive limit of") && line.contains("shared through Redis")
            })
            .count()
    };
    let steps = stepped(first.process.log_text()) + stepped(second.process.log_text());
    assert_eq!(steps, 5, "20 18 16 14 12 10 is five steps");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_follow_reloads() {
    let dir = tempdir();
    let (floodgate, admin_port) = start(dir.path(), "one", &[]);
    let config = dir.path().join("one").join("shop.yaml");
    let grpc = rls::connect(&floodgate.grpc_url()).await;
    let limit_is = |expected: u32, what: &'static str, pushing: bool| {
        let grpc = grpc.clone();
        async move {
            wait_for_limit(
                &grpc,
                PHASE_TIMEOUT,
                what,
                || {
                    if pushing {
                        push_ok(admin_port, "900");
                    }
                },
                |limit| *limit == expected,
            )
            .await;
        }
    };
    limit_is(10, "the limit falls to min", true).await;

    // New bounds: the controller restarts from the limit it reached, brought within them.
    rewrite(&config, &RULES.replace("min: 10", "min: 12"));
    limit_is(12, "the limit is raised to the new min", false).await;
    let log = floodgate.process.log_text();
    assert!(
        log.contains("settings changed, controller restarted from 10"),
        "{log}"
    );

    // No longer adaptive: back to the configured limit, and nothing reads the signal.
    let plain: String = RULES
        .lines()
        .take_while(|line| !line.contains("adaptive:"))
        .map(|line| format!("{line}\n"))
        .collect();
    rewrite(&config, &plain);
    limit_is(20, "the configured limit is back", false).await;
    assert_eq!(
        push(admin_port, Some(ADMIN_TOKEN), SIGNAL, "900").status,
        404
    );
    let metrics = scrape(floodgate.debug_port);
    assert_eq!(
        metrics.get("floodgate_adaptive_limit", &LABELS),
        None,
        "the series of a rule that is no longer adaptive is gone"
    );
    let rules = adaptive::rlconfig(floodgate.debug_port);
    assert!(!rules.contains("by adaptive"), "{rules}");
}
