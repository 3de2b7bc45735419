//! `/metrics` on the debug port of the real binary: drive allowed, rejected, shadow, unknown
//! and invalid calls over gRPC, scrape, check every number, and let `promtool` lint the text.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use floodgate_testkit as common;
use floodgate_testkit::prom::{self, promtool_check, Scrape};
use floodgate_testkit::rls;
use floodgate_testkit::{tempdir, Floodgate};

const RULES: &str = r#"
domain: edge
descriptors:
  - key: generic_key
    value: api
    descriptors:
      - key: client_id
        rate_limit: {unit: hour, requests_per_unit: 5}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: user
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: health
    rate_limit: {unlimited: true}
"#;

fn write_rules(dir: &Path) -> PathBuf {
    let path = dir.join("edge.yaml");
    std::fs::write(&path, RULES).unwrap_or_else(|error| panic!("cannot write rules: {error}"));
    path
}

fn scrape(floodgate: &Floodgate) -> Scrape {
    let response = common::http::get(floodgate.debug_port, "/metrics", &[])
        .unwrap_or_else(|error| panic!("cannot scrape /metrics: {error}"));
    assert_eq!(response.status, 200, "{}", response.body);
    assert!(
        response
            .header("content-type")
            .is_some_and(|value| value.starts_with("text/plain; version=0.0.4")),
        "{:?}",
        response.headers
    );
    Scrape::parse(&response.body)
}

const CLIENT: &[(&str, &str)] = &[("generic_key", "api"), ("client_id", "alice")];

#[tokio::test]
async fn every_kind_of_decision_is_counted_and_promtool_accepts_the_scrape() {
    let dir = tempdir();
    let config = write_rules(dir.path());
    let before_start = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default();
    let floodgate = Floodgate::start(&config, &[], dir.path());
    let mut client = rls::connect(&floodgate.grpc_url()).await;

    // 5 per hour: five pass, two are over. Near limit (80 % of 5 = 4): only the fifth hit.
    for _ in 0..7 {
        let _ = rls::call(&mut client, rls::request("edge", &[CLIENT]))
            .await
            .unwrap_or_else(|status| panic!("{status:?}"));
    }
    // Shadow mode, 1 per hour: the first passes, the second would be rejected.
    for _ in 0..2 {
        let response = rls::call(&mut client, rls::request("edge", &[&[("shadowed", "x")]]))
            .await
            .unwrap_or_else(|status| panic!("{status:?}"));
        assert_eq!(response.overall_code, 1, "shadow mode answers OK");
    }
    // Unknown domain, and a known domain where nothing matches.
    for request in [
        rls::request("nowhere", &[&[("k", "v")]]),
        rls::request("edge", &[&[("foo", "bar")]]),
    ] {
        rls::call(&mut client, request)
            .await
            .unwrap_or_else(|status| panic!("{status:?}"));
    }
    // Invalid: an empty domain (not a label), a known domain without descriptors.
    for request in [rls::request("", &[CLIENT]), rls::request("edge", &[])] {
        let status = rls::call(&mut client, request)
            .await
            .err()
            .unwrap_or_else(|| panic!("an invalid request was answered"));
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
    }
    // detailed_metric: the value becomes part of the label. Unlimited counts as allowed.
    for entries in [&[("user", "bob")][..], &[("health", "")][..]] {
        rls::call(&mut client, rls::request("edge", &[entries]))
            .await
            .unwrap_or_else(|status| panic!("{status:?}"));
    }

    let scrape = scrape(&floodgate);
    promtool_check(&scrape.text);

    let calls = |decision: &str| scrape.value("floodgate_calls_total", &[("decision", decision)]);
    assert_eq!(calls("ok"), 8.0);
    assert_eq!(calls("over_limit"), 2.0);
    assert_eq!(calls("shadow"), 1.0);
    assert_eq!(calls("unknown"), 2.0);
    assert_eq!(calls("error"), 2.0);

    let rule = "edge.generic_key_api.client_id";
    let per_rule = [("domain", "edge"), ("rule", rule)];
    assert_eq!(
        scrape.value("floodgate_requests_allowed_total", &per_rule),
        5.0
    );
    let rejected = |rule: &str, reason: &str| {
        scrape.value(
            "floodgate_requests_rejected_total",
            &[
                ("domain", "edge"),
                ("rule", rule),
                ("reason", reason),
                ("class", ""),
            ],
        )
    };
    assert_eq!(rejected(rule, "limit"), 2.0);
    assert_eq!(rejected(rule, "shadow"), 0.0);
    assert_eq!(rejected(rule, "failure_policy"), 0.0);
    assert_eq!(scrape.value("floodgate_near_limit_total", &per_rule), 1.0);

    let shadowed = [("domain", "edge"), ("rule", "edge.shadowed")];
    assert_eq!(
        scrape.value("floodgate_requests_allowed_total", &shadowed),
        1.0
    );
    assert_eq!(rejected("edge.shadowed", "shadow"), 1.0);
    assert_eq!(rejected("edge.shadowed", "limit"), 0.0);
    // 80 % of 1 is 0: the first hit is already past it, as in the reference.
    assert_eq!(scrape.value("floodgate_near_limit_total", &shadowed), 1.0);

    assert_eq!(
        scrape.value(
            "floodgate_requests_allowed_total",
            &[("domain", "edge"), ("rule", "edge.user_bob")]
        ),
        1.0
    );
    assert_eq!(
        scrape.get(
            "floodgate_requests_allowed_total",
            &[("domain", "edge"), ("rule", "edge.user")]
        ),
        None,
        "series are made at a rule's first decision, and a detailed_metric rule decides under \
         its per-value labels"
    );
    assert_eq!(
        scrape.value(
            "floodgate_requests_allowed_total",
            &[("domain", "edge"), ("rule", "edge.health")]
        ),
        1.0
    );
    let invalid = |domain: &str| {
        scrape.value(
            "floodgate_requests_rejected_total",
            &[
                ("domain", domain),
                ("rule", "none"),
                ("reason", "invalid_request"),
                ("class", ""),
            ],
        )
    };
    assert_eq!(invalid("unknown"), 1.0);
    assert_eq!(invalid("edge"), 1.0);
    // Request text never becomes a label otherwise.
    for value in ["nowhere", "alice", "foo", "bar"] {
        assert!(
            !scrape.text.contains(&format!("\"{value}\"")),
            "{value} leaked into a label:\n{}",
            scrape.text
        );
    }

    assert_eq!(
        scrape.value("floodgate_decision_duration_seconds_count", &[]),
        15.0
    );
    assert!(scrape.value("floodgate_decision_duration_seconds_sum", &[]) > 0.0);
    assert_eq!(
        scrape.value(
            "floodgate_decision_duration_seconds_bucket",
            &[("le", "+Inf")]
        ),
        15.0
    );
    let memory = [("backend", "memory")];
    // Calls whose descriptors have no counter (unknown domain, no rule, unlimited) never reach
    // the store; invalid requests neither.
    assert_eq!(
        scrape.value("floodgate_store_duration_seconds_count", &memory),
        10.0
    );
    assert_eq!(scrape.value("floodgate_store_errors_total", &memory), 0.0);
    assert_eq!(scrape.value("floodgate_store_up", &memory), 1.0);
    assert_eq!(scrape.value("floodgate_calls_in_flight", &[]), 0.0);
    assert_eq!(scrape.value("floodgate_rules_loaded", &[]), 4.0);
    assert_eq!(
        scrape.value("floodgate_config_load_success_total", &[]),
        1.0
    );
    assert_eq!(scrape.value("floodgate_config_load_error_total", &[]), 0.0);
    let loaded_at = scrape.value("floodgate_config_last_load_success_timestamp_seconds", &[]);
    assert!(
        loaded_at >= before_start - 1.0 && loaded_at < before_start + 60.0,
        "loaded at {loaded_at}, started at {before_start}"
    );
    assert_eq!(
        scrape.value("floodgate_metric_labels_folded_total", &[]),
        0.0
    );
    assert_eq!(
        scrape.value(
            "floodgate_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
}

#[tokio::test]
async fn the_near_limit_ratio_is_configurable() {
    let dir = tempdir();
    let config = write_rules(dir.path());
    let floodgate = Floodgate::start(&config, &["--near-limit-ratio", "0.5"], dir.path());
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    for _ in 0..5 {
        rls::call(&mut client, rls::request("edge", &[CLIENT]))
            .await
            .unwrap_or_else(|status| panic!("{status:?}"));
    }
    // 50 % of 5 is 2: the third, fourth and fifth hits.
    let scrape = scrape(&floodgate);
    assert_eq!(
        scrape.value(
            "floodgate_near_limit_total",
            &[
                ("domain", "edge"),
                ("rule", "edge.generic_key_api.client_id")
            ]
        ),
        3.0
    );
}

#[tokio::test]
async fn detailed_metric_labels_are_bounded() {
    let dir = tempdir();
    let config = write_rules(dir.path());
    let floodgate = Floodgate::start(&config, &[], dir.path());
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    // 4 configured rules + 1 000 values: more than the 1 000 labels allowed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for index in 0..1000 {
        assert!(tokio::time::Instant::now() < deadline, "too slow");
        let value = format!("u{index}");
        rls::call(&mut client, rls::request("edge", &[&[("user", &value)]]))
            .await
            .unwrap_or_else(|status| panic!("{status:?}"));
    }
    let scrape = scrape(&floodgate);
    promtool_check(&scrape.text);
    let allowed = scrape.all("floodgate_requests_allowed_total");
    let labels: std::collections::BTreeSet<&str> = allowed
        .iter()
        .filter_map(|sample| sample.labels.get("rule").map(String::as_str))
        .collect();
    assert!(labels.len() <= 1001, "{} rule labels", labels.len());
    assert!(labels.contains("other"));
    let total: f64 = allowed.iter().map(|sample| sample.value).sum();
    assert_eq!(total, 1000.0, "folding loses no call");
    let other = scrape.value(
        "floodgate_requests_allowed_total",
        &[("domain", "edge"), ("rule", "other")],
    );
    assert_eq!(other, 4.0, "996 values fit beside the 4 rules");
    assert_eq!(
        scrape.value("floodgate_metric_labels_folded_total", &[]),
        4.0
    );
}

/// `count` rules in domain `churn`, each keyed `g<generation>_<index>`.
fn churn_rules(generation: usize, count: usize) -> String {
    let mut text = String::from("domain: churn\ndescriptors:\n");
    for index in 0..count {
        text.push_str(&format!(
            "  - {{key: g{generation}_{index}, rate_limit: {{unit: hour, requests_per_unit: 9}}}}\n"
        ));
    }
    text
}

#[tokio::test]
async fn the_rule_label_budget_follows_the_rules_in_force_across_reloads() {
    // 4 generations of 600 rules: 2 400 labels over time, more than the 1 000 allowed.
    const RULES: usize = 600;
    let dir = tempdir();
    let config = dir.path().join("churn.yaml");
    std::fs::write(&config, churn_rules(0, RULES))
        .unwrap_or_else(|error| panic!("cannot write rules: {error}"));
    let floodgate = Floodgate::start(&config, &[], dir.path());
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    for generation in 0..4 {
        if generation > 0 {
            let text = churn_rules(generation, RULES);
            let temporary = dir.path().join("churn.yaml.tmp");
            std::fs::write(&temporary, text).unwrap_or_else(|error| panic!("write: {error}"));
            std::fs::rename(&temporary, &config).unwrap_or_else(|error| panic!("{error}"));
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            let loaded = format!("g{generation}_0");
            while !common::http::get(floodgate.debug_port, "/rlconfig", &[])
                .is_ok_and(|response| response.body.contains(&loaded))
            {
                assert!(
                    std::time::Instant::now() < deadline,
                    "reload {generation} not live"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let keys: Vec<String> = (0..RULES)
            .map(|index| format!("g{generation}_{index}"))
            .collect();
        for chunk in keys.chunks(64) {
            let descriptors: Vec<[(&str, &str); 1]> =
                chunk.iter().map(|key| [(key.as_str(), "x")]).collect();
            let entries: Vec<&[(&str, &str)]> = descriptors.iter().map(|d| &d[..]).collect();
            rls::call(&mut client, rls::request("churn", &entries))
                .await
                .unwrap_or_else(|status| panic!("{status:?}"));
        }
    }
    let scrape = scrape(&floodgate);
    let allowed = scrape.all("floodgate_requests_allowed_total");
    let rule_label = |sample: &&prom::Sample| sample.labels.get("rule").cloned();
    let labels: std::collections::BTreeSet<String> =
        allowed.iter().filter_map(rule_label).collect();
    for index in [0, RULES / 2, RULES - 1] {
        let newest = format!("churn.g3_{index}");
        assert!(labels.contains(&newest), "{newest} has no label of its own");
    }
    assert!(
        !labels.contains("other"),
        "no rule of the newest rules was folded"
    );
    assert!(
        !labels.iter().any(|label| label.starts_with("churn.g0_")),
        "the first rules' series were removed"
    );
    assert_eq!(labels.len(), RULES, "{labels:?}");
    assert_eq!(
        scrape.value("floodgate_metric_labels_folded_total", &[]),
        0.0
    );
}
