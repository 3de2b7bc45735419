//! envoyproxy/ratelimit's stats on the real binary (`USE_PROMETHEUS`, `PROMETHEUS_ADDR`,
//! `PROMETHEUS_PATH`): calls over gRPC, then a scrape of the reference-names listener, with
//! the names and labels of the reference's default statsd → Prometheus mapping and the
//! reference's meanings (hits counted in hits, near, over, within, shadow), `detailed_metric`
//! and `value_to_metric` keys, and the label budget's overflow key.

use std::time::Duration;

use floodgate_testkit as common;
use floodgate_testkit::prom::{promtool_output, Scrape};
use floodgate_testkit::rls;
use floodgate_testkit::{tempdir, Floodgate};

const RULES: &str = r#"
domain: shop
descriptors:
  - key: service
    value: checkout
    descriptors:
      - key: customer
        rate_limit: {requests_per_unit: 5, unit: hour}
  - key: user
    detailed_metric: true
    rate_limit: {requests_per_unit: 100, unit: hour}
  - key: shadowed
    shadow_mode: true
    rate_limit: {requests_per_unit: 1, unit: hour}
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {requests_per_unit: 100, unit: hour}
  - key: tenant
    value_to_metric: true
    rate_limit: {requests_per_unit: 100, unit: hour}
"#;

const PATH: &str = "/reference-stats";

fn scrape(port: u16, path: &str) -> Scrape {
    let response = common::http::get(port, path, &[])
        .unwrap_or_else(|error| panic!("cannot scrape {path}: {error}"));
    assert_eq!(response.status, 200, "{}", response.body);
    Scrape::parse(&response.body)
}

/// `ratelimit_service_rate_limit_<stat>{domain, key1, key2}`; a key of two pieces has no
/// `key2` under the mapping (`key2` empty here).
fn stat(scrape: &Scrape, stat: &str, key1: &str, key2: &str) -> f64 {
    if key2.is_empty() {
        return scrape.value(
            &format!("ratelimit_service_rate_limit_{stat}"),
            &[("domain", "shop"), ("key1", key1)],
        );
    }
    scrape.value(
        &format!("ratelimit_service_rate_limit_{stat}"),
        &[("domain", "shop"), ("key1", key1), ("key2", key2)],
    )
}

/// promtool reads the whole exposition; the only lint it may report is the one the mapping's
/// names cannot avoid (the reference's counters have no `_total`).
fn promtool_reads(text: &str) {
    let (status, said) = promtool_output(text);
    let problems: Vec<&str> = said
        .lines()
        .filter(|line| !line.trim().is_empty())
        .filter(|line| !line.ends_with("counter metrics should have \"_total\" suffix"))
        .collect();
    assert!(
        problems.is_empty() && matches!(status.code(), Some(0 | 3)),
        "promtool ({status}): {problems:?}\n--- scrape ---\n{text}"
    );
}

/// floodgate on `rules` (written to `config`) with the reference's stats on a free port, and
/// that port, once it listens.
fn start(config: &std::path::Path, rules: &str, env: &[(&str, &str)]) -> (Floodgate, u16) {
    std::fs::write(config, rules).unwrap_or_else(|error| panic!("write rules: {error}"));
    let port = common::free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut all = vec![
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", addr.as_str()),
    ];
    all.extend_from_slice(env);
    let dir = config.parent().unwrap_or(config);
    let floodgate = Floodgate::start_with_env(config, &[], &all, dir);
    common::wait_for_port(
        port,
        Duration::from_secs(10),
        "the reference-stats listener",
    );
    (floodgate, port)
}

/// One gRPC call, counted.
async fn call(
    client: &mut rls::Client,
    calls: &mut f64,
    request: floodgate::proto::RateLimitRequest,
) -> Result<floodgate::proto::RateLimitResponse, tonic::Status> {
    *calls += 1.0;
    rls::call(client, request).await
}

#[tokio::test]
async fn the_reference_stats_are_served_under_its_default_mapping() {
    let dir = tempdir();
    let config = dir.path().join("shop.yaml");
    let (floodgate, port) = start(&config, RULES, &[("PROMETHEUS_PATH", PATH)]);
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    let mut calls = 0.0;

    // 5 per hour, near from 4 (80 %): 2 + 2 within; 2 more refused with 4 used (1 over, 1
    // near); 1 more within and near.
    let customer: &[(&str, &str)] = &[("service", "checkout"), ("customer", "alice")];
    for hits in [2, 2, 2, 1] {
        let mut request = rls::request("shop", &[customer]);
        request.hits_addend = hits;
        let _ = call(&mut client, &mut calls, request)
            .await
            .unwrap_or_else(|status| panic!("{status:?}"));
    }
    // Shadow mode, 1 per hour: one within, one over in shadow (answered OK).
    for _ in 0..2 {
        let response = call(
            &mut client,
            &mut calls,
            rls::request("shop", &[&[("shadowed", "x")]]),
        )
        .await
        .unwrap_or_else(|status| panic!("{status:?}"));
        assert_eq!(response.overall_code, 1, "shadow mode answers OK");
    }
    // detailed_metric and value_to_metric put request values in the key.
    let _ = call(
        &mut client,
        &mut calls,
        rls::request("shop", &[&[("user", "alice")]]),
    )
    .await;
    let _ = call(
        &mut client,
        &mut calls,
        rls::request("shop", &[&[("route", "api"), ("method", "GET")]]),
    )
    .await;
    // An invalid request (no descriptor): the reference's service_error.
    assert!(call(&mut client, &mut calls, rls::request("shop", &[]))
        .await
        .is_err());
    // 1000 distinct tenants, 50 to a call: more keys than the budget holds.
    let tenants: Vec<String> = (0..1000).map(|index| format!("t{index}")).collect();
    for chunk in tenants.chunks(50) {
        let entries: Vec<[(&str, &str); 1]> = chunk
            .iter()
            .map(|tenant| [("tenant", tenant.as_str())])
            .collect();
        let descriptors: Vec<&[(&str, &str)]> = entries.iter().map(|e| &e[..]).collect();
        let _ = call(&mut client, &mut calls, rls::request("shop", &descriptors))
            .await
            .unwrap_or_else(|status| panic!("{status:?}"));
    }

    let reference = scrape(port, PATH);
    // 5 per hour: 7 hits, 5 within, 1 over, 2 near. Shadow mode: over and shadow_mode both.
    let customer_key = ("service_checkout", "customer");
    for (name, (key1, key2), value) in [
        ("total_hits", customer_key, 7.0),
        ("within_limit", customer_key, 5.0),
        ("over_limit", customer_key, 1.0),
        ("near_limit", customer_key, 2.0),
        ("shadow_mode", customer_key, 0.0),
        ("total_hits", ("shadowed", ""), 2.0),
        ("within_limit", ("shadowed", ""), 1.0),
        ("over_limit", ("shadowed", ""), 1.0),
        ("shadow_mode", ("shadowed", ""), 1.0),
        ("total_hits", ("user_alice", ""), 1.0),
        ("total_hits", ("route_api", "method"), 1.0),
    ] {
        assert_eq!(
            stat(&reference, name, key1, key2),
            value,
            "{name} {key1} {key2}"
        );
    }

    // Every tenant is counted once, under its own key or, past the budget, under `other`.
    let tenant_series: Vec<f64> = reference
        .all("ratelimit_service_rate_limit_total_hits")
        .into_iter()
        .filter(|sample| {
            sample
                .labels
                .get("key1")
                .is_some_and(|key1| key1.starts_with("tenant_t"))
        })
        .map(|sample| sample.value)
        .collect();
    let folded = stat(&reference, "total_hits", "other", "");
    assert!(folded > 0.0, "some tenants fold into the overflow key");
    assert!(tenant_series.iter().all(|value| *value == 1.0));
    assert_eq!(tenant_series.len() as f64 + folded, 1000.0);
    assert!(
        reference
            .all("ratelimit_service_rate_limit_total_hits")
            .len()
            <= 1001,
        "at most the budget and the overflow key"
    );

    assert_eq!(
        reference.value("ratelimit_service_config_load_success", &[]),
        1.0
    );
    assert_eq!(
        reference.value("ratelimit_service_config_load_error", &[]),
        0.0
    );
    let err = |err_type| {
        reference.value(
            "ratelimit_service_should_rate_limit_error",
            &[("err_type", err_type)],
        )
    };
    assert_eq!(err("service_error"), 1.0);
    assert_eq!(err("redis_error"), 0.0);
    let method = [("grpc_method", "ShouldRateLimit")];
    assert_eq!(
        reference.value("ratelimit_service_total_requests", &method),
        calls
    );
    assert_eq!(
        reference.value("ratelimit_service_response_time_seconds_count", &method),
        calls
    );
    assert!(
        !reference.text.contains("floodgate_"),
        "floodgate's own metrics stay on the debug listener"
    );
    promtool_reads(&reference.text);

    let own = scrape(floodgate.debug_port, "/metrics");
    assert!(own.text.contains("floodgate_calls_total"));
    assert!(
        !own.text.contains("ratelimit_service_"),
        "the reference's names are on their own listener"
    );
}

#[test]
fn without_use_prometheus_nothing_listens_there() {
    let dir = tempdir();
    let config = dir.path().join("shop.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write rules: {error}"));
    let port = common::free_port();
    let addr = format!("127.0.0.1:{port}");
    let floodgate =
        Floodgate::start_with_env(&config, &[], &[("PROMETHEUS_ADDR", &addr)], dir.path());
    common::wait_for_port(floodgate.debug_port, Duration::from_secs(10), "debug");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "USE_PROMETHEUS is off by default"
    );
}

/// Replaces `config` whole (write, then rename), as a deploy does.
fn replace(config: &std::path::Path, text: &str) {
    let temporary = config.with_extension("yaml.tmp");
    std::fs::write(&temporary, text).unwrap_or_else(|error| panic!("write: {error}"));
    std::fs::rename(&temporary, config).unwrap_or_else(|error| panic!("rename: {error}"));
}

/// Scrapes until `ready` holds, for at most 30 s.
fn scrape_until(port: u16, what: &str, ready: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let scraped = scrape(port, "/metrics");
        if ready(&scraped) {
            return scraped;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}:\n{}",
            scraped.text
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn reloads_count_as_the_reference_counts_them_and_release_the_keys_of_rules_gone() {
    let dir = tempdir();
    let config = dir.path().join("shop.yaml");
    let both = "domain: shop\ndescriptors:\n  - key: a\n    value_to_metric: true\n    \
                rate_limit: {unit: hour, requests_per_unit: 9}\n  - key: b\n    \
                rate_limit: {unit: hour, requests_per_unit: 9}\n";
    let (floodgate, port) = start(&config, both, &[]);
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    let request = rls::request("shop", &[&[("a", "1")], &[("b", "x")]]);
    rls::call(&mut client, request)
        .await
        .unwrap_or_else(|status| panic!("{status:?}"));
    let first = scrape(port, "/metrics");
    assert_eq!(stat_in(&first, "shop", "a_1"), Some(1.0));
    assert_eq!(stat_in(&first, "shop", "b"), Some(1.0));

    // `a` goes: its key leaves the scrape; `b` keeps counting.
    replace(
        &config,
        "domain: shop\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 9}\n",
    );
    // The load is counted as it is made, its keys released as the rules are swapped in, just
    // after: wait for both.
    let reloaded = scrape_until(port, "the reload counted and a_1 released", |scraped| {
        scraped.get("ratelimit_service_config_load_success", &[]) == Some(2.0)
            && stat_in(scraped, "shop", "a_1").is_none()
    });
    assert_eq!(stat_in(&reloaded, "shop", "b"), Some(1.0));

    // A configuration that does not load: config_load_error, the rules stay.
    replace(&config, "domain: shop\ndescriptors: [not a descriptor\n");
    let refused = scrape_until(port, "the refusal counted", |scraped| {
        scraped.get("ratelimit_service_config_load_error", &[]) == Some(1.0)
    });
    assert_eq!(
        refused.value("ratelimit_service_config_load_success", &[]),
        2.0
    );
}

/// `total_hits` of the key `domain.key1`, if it has a series.
fn stat_in(scrape: &Scrape, domain: &str, key1: &str) -> Option<f64> {
    scrape.get(
        "ratelimit_service_rate_limit_total_hits",
        &[("domain", domain), ("key1", key1)],
    )
}

/// A mapping of one's own (`PROMETHEUS_MAPPER_YAML`): its names and labels, its drops, the
/// stats it does not take served under their statsd names escaped.
const CUSTOM_MAPPING: &str = r#"
mappings:
  - match: "ratelimit.service.rate_limit.*.*.*.total_hits"
    name: "shop_hits"
    labels:
      rule: "$2"
      detail: "$3"
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "shop_hits"
    labels:
      rule: "$2"
      detail: "none"
  - match: "ratelimit\\.service\\.rate_limit\\..*"
    match_type: regex
    action: drop
  - match: "ratelimit_server.*.response_time"
    name: "shop_call_milliseconds"
    timer_type: histogram
    histogram_options:
      buckets: [1, 1000]
    labels:
      method: "$1"
"#;

#[tokio::test]
async fn a_mapping_file_of_ones_own_names_labels_and_drops() {
    let dir = tempdir();
    let config = dir.path().join("shop.yaml");
    let mapping = dir.path().join("mapping.yaml");
    std::fs::write(&mapping, CUSTOM_MAPPING).unwrap_or_else(|error| panic!("write: {error}"));
    let mapping_path = mapping.display().to_string();
    let (floodgate, port) = start(
        &config,
        RULES,
        &[("PROMETHEUS_MAPPER_YAML", mapping_path.as_str())],
    );
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    let mut calls = 0.0;
    for _ in 0..3 {
        let request = rls::request("shop", &[&[("user", "alice")]]);
        let _ = call(&mut client, &mut calls, request).await;
    }
    let checkout: &[(&str, &str)] = &[("service", "checkout"), ("customer", "c1")];
    let _ = call(&mut client, &mut calls, rls::request("shop", &[checkout])).await;

    let scraped = scrape_until(port, "the custom mapping's series", |scraped| {
        scraped.get("shop_hits", &[("rule", "user_alice"), ("detail", "none")]) == Some(3.0)
    });
    assert_eq!(
        scraped.value(
            "shop_hits",
            &[("rule", "service_checkout"), ("detail", "customer")]
        ),
        1.0
    );
    let text = &scraped.text;
    assert!(
        !text.contains("ratelimit_service_rate_limit_"),
        "the rest of the per-key stats are dropped:\n{text}"
    );
    // Left unmapped by this file: the statsd name, escaped, as statsd_exporter serves it.
    assert_eq!(
        scraped.value("ratelimit_service_config_load_success", &[]),
        1.0
    );
    assert_eq!(
        scraped.value(
            "shop_call_milliseconds_count",
            &[("method", "ShouldRateLimit")]
        ),
        calls
    );
    assert!(
        text.contains("shop_call_milliseconds_bucket{method=\"ShouldRateLimit\",le=\"1000\"}"),
        "the mapping's buckets, in milliseconds (no scale):\n{text}"
    );
    assert!(
        scraped.value("process_resident_memory_bytes", &[]) > 0.0,
        "{text}"
    );
}

#[test]
fn a_mapping_file_that_is_wrong_stops_the_start_and_says_where() {
    let dir = tempdir();
    let config = dir.path().join("shop.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write rules: {error}"));
    let mapping = dir.path().join("mapping.yaml");
    std::fs::write(
        &mapping,
        "mappings:\n  - match: \"ratelimit.*.x\"\n    name: \"ok\"\n  - match: \"a.*\"\n    \
         name: \"bad\"\n    labels:\n      \"not a label\": \"$1\"\n",
    )
    .unwrap_or_else(|error| panic!("write: {error}"));
    let mapping_path = mapping.display().to_string();
    let addr = format!("127.0.0.1:{}", common::free_port());
    let (mut command, _) = common::serve_command();
    command.arg("--config").arg(&config).envs([
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", addr.as_str()),
        ("PROMETHEUS_MAPPER_YAML", mapping_path.as_str()),
    ]);
    let mut floodgate = common::Running::spawn("floodgate", &mut command, dir.path());
    let status = floodgate.exit_within(Duration::from_secs(20));
    let log = floodgate.log_text();
    assert!(
        status.is_some_and(|status| !status.success()),
        "a wrong mapping file refuses the start ({status:?}):\n{log}"
    );
    for said in [mapping_path.as_str(), "mapping 2", "a.*", "not a label"] {
        assert!(log.contains(said), "{said} in\n{log}");
    }
}

#[tokio::test]
async fn a_mapping_file_that_is_not_there_leaves_the_default_mapping() {
    let dir = tempdir();
    let config = dir.path().join("shop.yaml");
    let missing = dir.path().join("statsd-exporter/conf.yaml");
    let missing_path = missing.display().to_string();
    let (floodgate, port) = start(
        &config,
        RULES,
        &[("PROMETHEUS_MAPPER_YAML", missing_path.as_str())],
    );
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    let mut calls = 0.0;
    let _ = call(
        &mut client,
        &mut calls,
        rls::request("shop", &[&[("user", "bob")]]),
    )
    .await;
    let scraped = scrape_until(port, "the default mapping's series", |scraped| {
        scraped
            .get(
                "ratelimit_service_rate_limit_total_hits",
                &[("domain", "shop"), ("key1", "user_bob")],
            )
            .is_some()
    });
    assert!(scraped
        .text
        .contains("# TYPE ratelimit_service_response_time_seconds histogram"));
    let log = floodgate.process.log_text();
    assert!(log.contains("names no file"), "{log}");
}
