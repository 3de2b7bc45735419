//! Priority classes through RLQS: an Envoy whose buckets name the class (`x-priority`) beside
//! the tenant meets the tenant's rule in that class, and the rule's limit is divided higher
//! class first (`core::policy::rlqs::class_totals`): `low` (50 %) gets at most half, and what
//! `critical` asks comes first.

use std::time::{Duration, Instant};

use floodgate_testkit::{free_port, tempdir};

use crate::harness::{sleep_until, start_envoy_with, start_floodgate, Load};

const RULES: &str = "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 30}\n    priority: {key: priority, classes: {critical: 100%, low: 50%}, default: low}\n";

/// One `bucket_id_builder` entry: bucket key `key` from request header `header`, as the
/// guide's bootstrap indents it.
fn header_key(key: &str, header: &str) -> String {
    format!(
        "                              {key}:
                                custom_value:
                                  name: {key}_header
                                  typed_config:
                                    \"@type\": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput
                                    header_name: {header}
"
    )
}

/// The tenant bucket of the guide's bootstrap, with a `priority` key from `x-priority`.
fn with_priority_key(bootstrap: String) -> String {
    let tenant = header_key("tenant", "x-tenant");
    assert!(
        bootstrap.contains(&tenant),
        "deploy/envoy/rlqs.yaml no longer has the tenant bucket this test extends"
    );
    bootstrap.replace(
        &tenant,
        &format!("{tenant}{}", header_key("priority", "x-priority")),
    )
}

/// Two reports of Envoy 1.40 (every 5 s) and a margin.
const CONVERGENCE: Duration = Duration::from_secs(13);
const MEASURE: Duration = Duration::from_secs(10);

#[test]
fn the_low_class_gets_at_most_its_share_and_critical_what_it_asks() {
    let dir = tempdir();
    let grpc = free_port();
    let _floodgate = start_floodgate(dir.path(), RULES, grpc, &[]);
    let (envoy, _) = start_envoy_with(dir.path(), "envoy", grpc, with_priority_key);
    let started = Instant::now();
    let critical = Load::with_headers(
        envoy.port,
        &[("x-tenant", "acme-corp"), ("x-priority", "critical")],
        10.0,
    );
    let low = Load::with_headers(
        envoy.port,
        &[("x-tenant", "acme-corp"), ("x-priority", "low")],
        60.0,
    );
    let from = started + CONVERGENCE;
    let to = from + MEASURE;
    sleep_until(to);
    let (critical_rate, low_rate) = (
        critical.admitted_rate(from, to),
        low.admitted_rate(from, to),
    );
    eprintln!(
        "classes, limit 30/s: critical offered {:.1} admitted {critical_rate:.1}, low offered {:.1} \
         admitted {low_rate:.1}, total {:.1}/s",
        critical.offered_rate(from, to),
        low.offered_rate(from, to),
        critical_rate + low_rate
    );
    assert!(
        critical_rate >= 0.9 * critical.offered_rate(from, to),
        "critical did not get what it asked: {critical_rate:.1}/s"
    );
    assert!(
        (10.0..=16.5).contains(&low_rate),
        "low admitted {low_rate:.1}/s: its cap is 15/s (50 % of 30)"
    );
    assert!(
        critical_rate + low_rate <= 31.5,
        "together {:.1}/s against a limit of 30/s",
        critical_rate + low_rate
    );
}
