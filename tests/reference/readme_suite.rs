//! The examples of envoyproxy/ratelimit's README ("Configuration" → "Examples", 1 to 11, and
//! its "Global ShadowMode"), each configuration as the README gives it, loaded by a floodgate on
//! the memory store, and each outcome the README states asserted over gRPC. The stats keys the
//! README names are checked where floodgate has the metric label (detailed_metric), and those
//! made by `value_to_metric` on the reference's own names (`USE_PROMETHEUS`).

use floodgate::proto::rate_limit_response::rate_limit::Unit;
use floodgate::proto::rate_limit_response::Code;

use crate::harness::{
    assert_response, call, clear_of_a_minute_boundary, counted, limited, request, start, Entry,
    Expected, Reference, RuntimeTree, NO_LIMIT,
};

/// floodgate on the memory store with `rules` (one file) and `env`.
/// The reference's stats (`USE_PROMETHEUS`) on `port`: the environment for [`serve`].
fn reference_stats_env(addr: &str) -> [(&str, &str); 2] {
    [("USE_PROMETHEUS", "true"), ("PROMETHEUS_ADDR", addr)]
}

/// `ratelimit_service_rate_limit_total_hits` of the stats key `domain.key1.key2…`, scraped from
/// the reference-stats listener on `port`.
fn total_hits(port: u16, domain: &str, key1: &str, key2: &str) -> f64 {
    let response = floodgate_testkit::http::get(port, "/metrics", &[])
        .unwrap_or_else(|error| panic!("cannot scrape the reference's stats: {error}"));
    let scrape = floodgate_testkit::prom::Scrape::parse(&response.body);
    counted(
        &scrape,
        "ratelimit_service_rate_limit_total_hits",
        &[("domain", domain), ("key1", key1), ("key2", key2)],
    )
}

fn serve(example: &str, rules: &str, env: &[(&str, &str)]) -> (Reference, RuntimeTree) {
    serve_at(Entry::Serve, example, rules, env)
}

/// [`serve`], started through `entry`.
fn serve_at(
    entry: Entry,
    example: &str,
    rules: &str,
    env: &[(&str, &str)],
) -> (Reference, RuntimeTree) {
    let tree = RuntimeTree::with_rules(&[(format!("{example}.yaml").as_str(), rules)]);
    let mut all = vec![("BACKEND_TYPE", "memory")];
    all.extend_from_slice(env);
    (start(entry, &tree, example, &all), tree)
}

/// The status of an unlimited rule: OK, the largest remaining, no limit.
const UNLIMITED: Expected = Expected {
    code: Code::Ok,
    limit: None,
    remaining: u32::MAX,
};

const EXAMPLE_1: &str = "
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_1_two_values_of_one_key() {
    let (server, _tree) = serve("example1", EXAMPLE_1, &[]);
    let mut client = server.client().await;
    for value in ["users", "default"] {
        let response = call(
            &mut client,
            request("mongo_cps", &[&[("database", value)]], 1),
        )
        .await;
        assert_response(
            &response,
            Code::Ok,
            &[limited(Code::Ok, 500, Unit::Second, 499)],
            value,
        );
    }
    let response = call(
        &mut client,
        request("mongo_cps", &[&[("database", "other")]], 1),
    )
    .await;
    assert_response(&response, Code::Ok, &[NO_LIMIT], "a value with no rule");
}

const EXAMPLE_2: &str = "
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_2_nested_descriptors_and_several_in_one_request() {
    for entry in [Entry::Serve, Entry::Ratelimit] {
        example_2_at(entry).await;
    }
}

async fn example_2_at(entry: Entry) {
    let (server, _tree) = serve_at(entry, &format!("example2{entry:?}"), EXAMPLE_2, &[]);
    let mut client = server.client().await;
    let complete = |number: &str| {
        request(
            "messaging",
            &[
                &[("message_type", "marketing"), ("to_number", number)],
                &[("to_number", number)],
            ],
            1,
        )
    };
    // 5 marketing messages a day to one number, 100 messages a day to it.
    for sent in 1..=5u32 {
        let response = call(&mut client, complete("2061111111")).await;
        assert_response(
            &response,
            Code::Ok,
            &[
                limited(Code::Ok, 5, Unit::Day, 5 - sent),
                limited(Code::Ok, 100, Unit::Day, 100 - sent),
            ],
            &format!("marketing message {sent}"),
        );
    }
    // The aggregate is a logical OR: the sixth is over. Started as `ratelimit` the per-number
    // descriptor is charged all the same, as the reference charges it (94 left); `floodgate
    // serve` charges no descriptor of a rejected request (95 left).
    let per_number_left = match entry {
        Entry::Serve => 95,
        Entry::Ratelimit => 94,
    };
    let response = call(&mut client, complete("2061111111")).await;
    assert_response(
        &response,
        Code::OverLimit,
        &[
            limited(Code::OverLimit, 5, Unit::Day, 0),
            limited(Code::Ok, 100, Unit::Day, per_number_left),
        ],
        &format!("{entry:?}: marketing message 6"),
    );
    // Each number gets its own 5 and its own 100.
    let response = call(&mut client, complete("2062222222")).await;
    assert_response(
        &response,
        Code::Ok,
        &[
            limited(Code::Ok, 5, Unit::Day, 4),
            limited(Code::Ok, 100, Unit::Day, 99),
        ],
        "another number",
    );
    let response = call(
        &mut client,
        request("messaging", &[&[("to_number", "2061111111")]], 1),
    )
    .await;
    assert_response(
        &response,
        Code::Ok,
        &[limited(Code::Ok, 100, Unit::Day, per_number_left - 1)],
        "a message that is not marketing",
    );
}

const EXAMPLE_3: &str = "
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_3_the_most_specific_match_first() {
    let (server, _tree) = serve("example3", EXAMPLE_3, &[]);
    let mut client = server.client().await;
    let ip = |address: &str| request("edge_proxy_per_ip", &[&[("remote_address", address)]], 1);
    let response = call(&mut client, ip("50.0.0.1")).await;
    assert_response(
        &response,
        Code::Ok,
        &[limited(Code::Ok, 10, Unit::Second, 9)],
        "any address",
    );
    let response = call(&mut client, ip("50.0.0.5")).await;
    assert_response(
        &response,
        Code::OverLimit,
        &[limited(Code::OverLimit, 0, Unit::Second, 0)],
        "the black-listed address",
    );
}

const EXAMPLE_4_FLAT: &str = "
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
";

const EXAMPLE_4_NESTED: &str = "
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_4_a_request_matches_rules_of_its_own_depth() {
    let two_entries = || {
        request(
            "example4",
            &[&[("key", "value"), ("subkey", "subvalue")]],
            1,
        )
    };
    let (flat, _flat_tree) = serve("example4-flat", EXAMPLE_4_FLAT, &[]);
    let mut client = flat.client().await;
    let response = call(&mut client, two_entries()).await;
    assert_response(
        &response,
        Code::Ok,
        &[NO_LIMIT],
        "two entries, a one-level rule",
    );
    let response = call(&mut client, request("example4", &[&[("key", "value")]], 1)).await;
    assert_response(
        &response,
        Code::Ok,
        &[limited(Code::Ok, 300, Unit::Second, 299)],
        "one entry, a one-level rule",
    );

    let (nested, _nested_tree) = serve("example4-nested", EXAMPLE_4_NESTED, &[]);
    let mut client = nested.client().await;
    let response = call(&mut client, two_entries()).await;
    assert_response(
        &response,
        Code::Ok,
        &[limited(Code::Ok, 300, Unit::Second, 299)],
        "two entries, a two-level rule",
    );
}

const EXAMPLE_5: &str = "
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_5_unlimited() {
    let (server, _tree) = serve("example5", EXAMPLE_5, &[]);
    let mut client = server.client().await;
    for _ in 0..3 {
        let response = call(&mut client, request("internal", &[&[("ldap", "any")]], 1)).await;
        assert_response(&response, Code::Ok, &[UNLIMITED], "ldap");
    }
    let response = call(&mut client, request("internal", &[&[("azure", "any")]], 1)).await;
    assert_response(
        &response,
        Code::Ok,
        &[limited(Code::Ok, 100, Unit::Minute, 99)],
        "azure",
    );
}

const EXAMPLE_6: &str = "
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_6_shadow_mode() {
    let (server, _tree) = serve("example6", EXAMPLE_6, &[]);
    let mut client = server.client().await;
    let user = |name: &str, hits: u32| {
        request(
            "example6",
            &[&[("service", "auth-service"), ("user", name)]],
            hits,
        )
    };
    // More than 10 in one second, in one call (so no second can pass in between): user-a is
    // never limited, but the breach is counted.
    let response = call(&mut client, user("user-a", 11)).await;
    assert_response(
        &response,
        Code::Ok,
        &[limited(Code::Ok, 10, Unit::Second, 0)],
        "user-a over its shadow limit",
    );
    assert_eq!(
        counted(
            &server.metrics(),
            "floodgate_requests_rejected_total",
            &[("domain", "example6"), ("reason", "shadow")],
        ),
        1.0,
        "the shadow_mode stat"
    );
    let response = call(&mut client, user("user-b", 21)).await;
    assert_response(
        &response,
        Code::OverLimit,
        &[limited(Code::OverLimit, 20, Unit::Second, 0)],
        "user-b over 20 per second",
    );
}

const EXAMPLE_7: &str = "
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_7_replaces() {
    let (server, _tree) = serve("example7", EXAMPLE_7, &[]);
    let mut client = server.client().await;
    let first: &[(&str, &str)] = &[("key_1", "value_1"), ("user", "bkthomps")];
    let second: &[(&str, &str)] = &[("key_2", "value_2"), ("user", "bkthomps")];
    // Both in one request: 10 per second, the 5 per second rule replaced. Six hits pass.
    let response = call(&mut client, request("example7", &[first, second], 6)).await;
    assert_eq!(crate::harness::overall(&response), Code::Ok, "{response:?}");
    let limits: Vec<_> = response
        .statuses
        .iter()
        .filter_map(|status| status.current_limit.as_ref())
        .map(|limit| limit.requests_per_unit)
        .collect();
    assert_eq!(
        limits,
        [10],
        "only the replacing limit applies: {response:?}"
    );
    // ... and it did not touch the 5 per second limit: five hits still fit, a sixth does not.
    let response = call(&mut client, request("example7", &[first], 5)).await;
    assert_response(
        &response,
        Code::Ok,
        &[limited(Code::Ok, 5, Unit::Second, 0)],
        "(key_1, value_1), (user, bkthomps) alone",
    );
    let response = call(&mut client, request("example7", &[second], 1)).await;
    assert_eq!(crate::harness::overall(&response), Code::Ok, "{response:?}");
}

const EXAMPLE_8: &str = "
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_8_detailed_metric() {
    let (server, _tree) = serve("example8", EXAMPLE_8, &[]);
    let mut client = server.client().await;
    // The README's text says "/ sec"; its configuration says minute, which is what applies.
    for (value, limit) in [
        ("unspecified_value", 10),
        ("unspecified_value2", 10),
        ("value1", 20),
    ] {
        let response = call(&mut client, request("example8", &[&[("key1", value)]], 1)).await;
        assert_response(
            &response,
            Code::Ok,
            &[limited(Code::Ok, limit, Unit::Minute, limit - 1)],
            value,
        );
    }
    let scrape = server.metrics();
    for label in [
        "example8.key1_unspecified_value",
        "example8.key1_unspecified_value2",
        "example8.key1_value1",
    ] {
        assert_eq!(
            counted(
                &scrape,
                "floodgate_requests_allowed_total",
                &[("domain", "example8"), ("rule", label)],
            ),
            1.0,
            "the stats key {label}\n{}",
            scrape.text
        );
    }
    assert_eq!(
        counted(
            &scrape,
            "floodgate_requests_allowed_total",
            &[("domain", "example8"), ("rule", "example8.key1")],
        ),
        0.0,
        "rather than the rolled-up key1"
    );
}

const EXAMPLE_9_TRAILING: &str = "
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

const EXAMPLE_9_MIDDLE: &str = "
domain: example9
descriptors:
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

const EXAMPLE_9_MULTIPLE: &str = "
domain: example9
descriptors:
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_9_wildcards() {
    for (name, rules, key, matching, not_matching) in [
        (
            "example9-trailing",
            EXAMPLE_9_TRAILING,
            "key1",
            &["value1", "value2", "valueXYZ"][..],
            "other",
        ),
        (
            "example9-middle",
            EXAMPLE_9_MIDDLE,
            "path",
            &["/api/123/action", "/api/user-id/action"][..],
            "/api/123/other",
        ),
        (
            "example9-multiple",
            EXAMPLE_9_MULTIPLE,
            "route",
            &["/api/v1/resource/123/action", "/api/v2/resource/456/action"][..],
            "/api/v1/resource/123/other",
        ),
    ] {
        let (server, _tree) = serve(name, rules, &[]);
        let mut client = server.client().await;
        for value in matching {
            // Each value its own counter (no share_threshold).
            let response = call(&mut client, request("example9", &[&[(key, value)]], 1)).await;
            assert_response(
                &response,
                Code::Ok,
                &[limited(Code::Ok, 20, Unit::Minute, 19)],
                &format!("{name}: {value}"),
            );
        }
        let response = call(
            &mut client,
            request("example9", &[&[(key, not_matching)]], 1),
        )
        .await;
        assert_response(
            &response,
            Code::Ok,
            &[NO_LIMIT],
            &format!("{name}: {not_matching}"),
        );
    }
}

const EXAMPLE_10: &str = "
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
";

const EXAMPLE_10_WILDCARD: &str = "
domain: example10_wildcard
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit:
              unit: minute
              requests_per_unit: 100
";

/// Example 10: the limits, and the metric keys the README gives
/// (`example10.route_api.http_method_GET.subject_id`, …) on the reference's names, where the
/// default mapping makes the first two levels `key1` and `key2`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_10_value_to_metric_limits() {
    let port = floodgate_testkit::free_port();
    let addr = format!("127.0.0.1:{port}");
    let (server, _tree) = serve("example10", EXAMPLE_10, &reference_stats_env(&addr));
    floodgate_testkit::wait_for_port(port, std::time::Duration::from_secs(10), "stats");
    let mut client = server.client().await;
    for (route, method, subject) in [("api", "GET", "123"), ("web", "POST", "456")] {
        let response = call(
            &mut client,
            request(
                "example10",
                &[&[
                    ("route", route),
                    ("http_method", method),
                    ("subject_id", subject),
                ]],
                1,
            ),
        )
        .await;
        assert_response(
            &response,
            Code::Ok,
            &[limited(Code::Ok, 60, Unit::Minute, 59)],
            &format!("{route} {method} {subject}"),
        );
    }
    for (key1, key2) in [
        ("route_api", "http_method_GET"),
        ("route_web", "http_method_POST"),
    ] {
        assert_eq!(
            total_hits(port, "example10", key1, key2),
            1.0,
            "{key1} {key2}"
        );
    }
    let port = floodgate_testkit::free_port();
    let addr = format!("127.0.0.1:{port}");
    let (server, _tree) = serve(
        "example10_wildcard",
        EXAMPLE_10_WILDCARD,
        &reference_stats_env(&addr),
    );
    floodgate_testkit::wait_for_port(port, std::time::Duration::from_secs(10), "stats");
    let mut client = server.client().await;
    let response = call(
        &mut client,
        request(
            "example10_wildcard",
            &[&[
                ("user", "alice"),
                ("action", "readfile"),
                ("resource", "documents"),
            ]],
            1,
        ),
    )
    .await;
    assert_response(
        &response,
        Code::Ok,
        &[limited(Code::Ok, 100, Unit::Minute, 99)],
        "alice readfile documents",
    );
    // `example10_wildcard.user_alice.action_readfile.resource`.
    assert_eq!(
        total_hits(port, "example10_wildcard", "user_alice", "action_readfile"),
        1.0
    );
}

const EXAMPLE_11: &str = "
domain: example11
descriptors:
  # With share_threshold: true, all files/* matches share the same threshold
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10

  # Without share_threshold, each files_no_share/* match has its own isolated threshold
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
";

const EXAMPLE_11_METRICS: &str = "
domain: example11_metrics
descriptors:
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit:
          unit: minute
          requests_per_unit: 60
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_11_share_threshold() {
    let (server, _tree) = serve("example11", EXAMPLE_11, &[]);
    let mut client = server.client().await;
    let file = |key: &str, value: &str| request("example11", &[&[(key, value)]], 1);
    for value in ["files/a.pdf", "files/b.csv"] {
        for _ in 0..5 {
            let response = call(&mut client, file("files", value)).await;
            assert_eq!(crate::harness::overall(&response), Code::Ok, "{value}");
        }
    }
    let response = call(&mut client, file("files", "files/c.txt")).await;
    assert_response(
        &response,
        Code::OverLimit,
        &[limited(Code::OverLimit, 10, Unit::Hour, 0)],
        "files/c.txt after 5 + 5 others",
    );
    for sent in 1..=10u32 {
        let response = call(&mut client, file("files_no_share", "files_no_share/a.pdf")).await;
        assert_response(
            &response,
            Code::Ok,
            &[limited(Code::Ok, 10, Unit::Hour, 10 - sent)],
            "files_no_share/a.pdf",
        );
    }
    let response = call(&mut client, file("files_no_share", "files_no_share/b.csv")).await;
    assert_response(
        &response,
        Code::Ok,
        &[limited(Code::Ok, 10, Unit::Hour, 9)],
        "files_no_share/b.csv, its own threshold",
    );

    // With value_to_metric: api/* routes share one threshold. The README gives the key as
    // `example11_metrics.route_api.method_GET`; the reference's code (share_threshold wins
    // over value_to_metric, and `method` has no value_to_metric) and its tests make it
    // `example11_metrics.route_api/*.method`, which floodgate follows.
    let port = floodgate_testkit::free_port();
    let addr = format!("127.0.0.1:{port}");
    let (server, _tree) = serve(
        "example11_metrics",
        EXAMPLE_11_METRICS,
        &reference_stats_env(&addr),
    );
    floodgate_testkit::wait_for_port(port, std::time::Duration::from_secs(10), "stats");
    let mut client = server.client().await;
    clear_of_a_minute_boundary().await;
    for (route, left) in [("api/v1", 59), ("api/v2", 58)] {
        let response = call(
            &mut client,
            request(
                "example11_metrics",
                &[&[("route", route), ("method", "GET")]],
                1,
            ),
        )
        .await;
        assert_response(
            &response,
            Code::Ok,
            &[limited(Code::Ok, 60, Unit::Minute, left)],
            route,
        );
    }
    assert_eq!(
        total_hits(port, "example11_metrics", "route_api/*", "method"),
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_shadow_mode() {
    // SHADOW_MODE=true: whatever the rules decide, the answer is OK.
    let (server, _tree) = serve("global-shadow", EXAMPLE_3, &[("SHADOW_MODE", "true")]);
    let mut client = server.client().await;
    let response = call(
        &mut client,
        request("edge_proxy_per_ip", &[&[("remote_address", "50.0.0.5")]], 1),
    )
    .await;
    assert_eq!(crate::harness::overall(&response), Code::Ok, "{response:?}");
    assert_eq!(
        counted(
            &server.metrics(),
            "floodgate_requests_rejected_total",
            &[("domain", "edge_proxy_per_ip"), ("reason", "shadow")],
        ),
        1.0,
        "the global shadow mode stat"
    );
}
