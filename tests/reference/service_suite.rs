//! `test/service/ratelimit_test.go`: ShouldRateLimit as a client sees it, against the real
//! binary over gRPC. The reference's tests hand its service mocked limits and mocked cache
//! answers; here the same limits are rules in a file, and each counter is brought to the state
//! the mock reports by spending it first (one call per hit). A config update of the reference's
//! provider is a rewritten rules file. The quota-mode cases are in `quota`; the three metadata
//! cases are ported with dynamic metadata.
//!
//! The limits count with `--default-algorithm sliding-log`: a counter spent stays spent for a
//! minute after, so no window boundary can pass between spending a limit and asking (the
//! reference's mocks answer without a clock). A status's limit, remaining and code are the fixed
//! window's for these requests.

mod quota;

use std::time::Duration;

use floodgate::proto::rate_limit_response::{rate_limit::Unit, Code};
use floodgate::proto::RateLimitResponse;
use floodgate_testkit::otlp::OtlpReceiver;
use floodgate_testkit::redis::{scan_keys, store_flags, RedisServer};
use floodgate_testkit::{ops, rls, serve_command, tempdir, Running};
use tonic_health::pb::health_check_response::ServingStatus;

use crate::serving::{counted, overall, statuses, Door, Limit, Served, BOTH_DOORS};

/// The memory store, and limits that no window boundary resets while a test runs.
const SERVICE: &[&str] = &["--store", "memory", "--default-algorithm", "sliding-log"];

/// The limit of the reference's mocks, `NewRateLimit(10, MINUTE, …, "key_name")`, on foo=bar.
const DIFFERENT_DOMAIN: &str = "
domain: different-domain
descriptors:
  - key: foo
    value: bar
    rate_limit: {unit: minute, requests_per_unit: 10, name: key_name}
";

/// The reference's request of two descriptors: foo=bar, then hello=world, which no rule matches.
const FOO_HELLO: [&[(&str, &str)]; 2] = [&[("foo", "bar")], &[("hello", "world")]];

fn key_name_limit() -> Option<Limit> {
    Some((10, Unit::Minute, "key_name".to_owned()))
}

/// A rules file no load accepts (a unit that does not exist).
const BROKEN: &str =
    "domain: different-domain\ndescriptors:\n  - key: foo\n    rate_limit: {unit: fortnight}\n";

fn calls(served: &Served, decision: &str) -> f64 {
    counted(
        &served.metrics(),
        "floodgate_calls_total",
        &[("decision", decision)],
    )
}

#[test]
fn service_test_service() {
    let first_rules = "domain: test-domain\ndescriptors:\n  - key: other\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    let mut served = Served::start(Some(first_rules), SERVICE, &[]);
    let first = served.answer("test-domain", &[&[("hello", "world")]]);
    assert_eq!(overall(&first), Code::Ok);
    assert_eq!(statuses(&first), [(Code::Ok, None, 0)]);

    // A config update from the provider.
    served.reload(Some(DIFFERENT_DOMAIN));
    served.spend(10, "different-domain", &[("foo", "bar")]);
    let over = served.answer("different-domain", &FOO_HELLO);
    assert_eq!(overall(&over), Code::OverLimit);
    assert_eq!(
        statuses(&over),
        [(Code::OverLimit, key_name_limit(), 0), (Code::Ok, None, 0)]
    );

    // An update that fails to load: the configuration in force stays. Statuses follow the
    // order of the descriptors.
    served.reload(Some(BROKEN));
    let reordered = served.answer("different-domain", &[FOO_HELLO[1], FOO_HELLO[0]]);
    assert_eq!(overall(&reordered), Code::OverLimit);
    assert_eq!(
        statuses(&reordered),
        [(Code::Ok, None, 0), (Code::OverLimit, key_name_limit(), 0)]
    );

    let metrics = served.metrics();
    assert_eq!(
        counted(&metrics, "floodgate_config_load_success_total", &[]),
        2.0
    );
    assert_eq!(
        counted(&metrics, "floodgate_config_load_error_total", &[]),
        1.0
    );
    assert_eq!(calls(&served, "shadow"), 0.0);
}

/// `SHADOW_MODE`: OK overall, each status as it is. The reference counts `global_shadow_mode`;
/// floodgate counts the call under `decision="shadow"`.
#[test]
fn service_test_service_global_shadow_mode() {
    let mut served = Served::start(Some(DIFFERENT_DOMAIN), SERVICE, &[("SHADOW_MODE", "true")]);
    served.spend(10, "different-domain", &[("foo", "bar")]);
    let answer = served.answer("different-domain", &FOO_HELLO);
    assert_eq!(overall(&answer), Code::Ok);
    assert_eq!(
        statuses(&answer),
        [(Code::OverLimit, key_name_limit(), 0), (Code::Ok, None, 0)]
    );
    assert_eq!(calls(&served, "shadow"), 1.0);
    let metrics = served.metrics();
    assert_eq!(
        counted(&metrics, "floodgate_config_load_success_total", &[]),
        1.0
    );
    assert_eq!(
        counted(&metrics, "floodgate_config_load_error_total", &[]),
        0.0
    );
}

/// foo=bar and hello=world, 10 a minute each and each in `shadow_mode` or not, both spent, then
/// asked together: the floodgate and its answer.
fn both_spent(foo_shadow: bool, hello_shadow: bool) -> (Served, RateLimitResponse) {
    let rules = format!(
        "domain: different-domain\n\
         descriptors:\n\
         \x20 - key: foo\n\
         \x20   value: bar\n\
         \x20   shadow_mode: {foo_shadow}\n\
         \x20   rate_limit: {{unit: minute, requests_per_unit: 10}}\n\
         \x20 - key: hello\n\
         \x20   value: world\n\
         \x20   shadow_mode: {hello_shadow}\n\
         \x20   rate_limit: {{unit: minute, requests_per_unit: 10}}\n"
    );
    let mut served = Served::start(Some(&rules), SERVICE, &[]);
    for entries in FOO_HELLO {
        served.spend(10, "different-domain", entries);
    }
    let answer = served.answer("different-domain", &FOO_HELLO);
    (served, answer)
}

fn per_minute(requests_per_unit: u32) -> Option<Limit> {
    Some((requests_per_unit, Unit::Minute, String::new()))
}

/// Both limits in `shadow_mode`, both over: OK, each status OK with its limit. The reference's
/// `shadow_mode` stat per rule is `floodgate_requests_rejected_total{reason="shadow"}`.
#[test]
fn service_test_rule_shadow_mode() {
    let (served, answer) = both_spent(true, true);
    assert_eq!(overall(&answer), Code::Ok);
    assert_eq!(
        statuses(&answer),
        [(Code::Ok, per_minute(10), 0), (Code::Ok, per_minute(10), 0)]
    );
    let metrics = served.metrics();
    for rule in ["different-domain.foo_bar", "different-domain.hello_world"] {
        let labels = [
            ("domain", "different-domain"),
            ("rule", rule),
            ("reason", "shadow"),
            ("class", ""),
        ];
        assert_eq!(
            counted(&metrics, "floodgate_requests_rejected_total", &labels),
            1.0,
            "{rule}"
        );
    }
}

#[test]
fn service_test_mixed_rule_shadow_mode() {
    let (_, answer) = both_spent(true, false);
    assert_eq!(overall(&answer), Code::OverLimit);
    assert_eq!(
        statuses(&answer),
        [
            (Code::Ok, per_minute(10), 0),
            (Code::OverLimit, per_minute(10), 0)
        ]
    );
}

/// The headers of the over-limit descriptor, under the names `env` gives: the limit, 0
/// remaining, and the seconds until it resets (the reference's mocked clock makes it 58; here
/// it is the status's own `duration_until_reset`) — and nothing more, at the `ratelimit` door;
/// `floodgate serve` adds `Retry-After` (docs/envoy.md).
fn assert_headers(env: &[(&str, &str)], names: [&str; 3]) {
    for door in BOTH_DOORS {
        assert_headers_at(door, env, names);
    }
}

fn assert_headers_at(door: Door, env: &[(&str, &str)], names: [&str; 3]) {
    let mut served = Served::start_at(door, Some(DIFFERENT_DOMAIN), SERVICE, env);
    served.spend(10, "different-domain", &[("foo", "bar")]);
    let answer = served.answer("different-domain", &FOO_HELLO);
    assert_eq!(overall(&answer), Code::OverLimit);
    assert_eq!(
        statuses(&answer),
        [(Code::OverLimit, key_name_limit(), 0), (Code::Ok, None, 0)]
    );
    let reset = answer.statuses[0]
        .duration_until_reset
        .as_ref()
        .map_or(0, |duration| duration.seconds);
    assert!((1..=60).contains(&reset), "{reset}");
    let headers: Vec<(String, String)> = answer
        .response_headers_to_add
        .iter()
        .map(|header| (header.key.clone(), header.value.clone()))
        .collect();
    let retry_after = (door == Door::Serve).then(|| ("Retry-After".to_owned(), reset.to_string()));
    let expected: Vec<(String, String)> = names
        .iter()
        .zip(["10".to_owned(), "0".to_owned(), reset.to_string()])
        .map(|(name, value)| ((*name).to_owned(), value))
        .chain(retry_after)
        .collect();
    assert_eq!(headers, expected, "{door:?}");
}

/// The code of a call not decided: the reference's UNKNOWN at its door; `floodgate serve`'s
/// own, `distinct`, tells a bad request from a failed store (docs/envoy.md).
fn error_code(door: Door, distinct: tonic::Code) -> tonic::Code {
    match door {
        Door::Serve => distinct,
        Door::Ratelimit => tonic::Code::Unknown,
    }
}

#[test]
fn service_test_service_with_custom_ratelimit_headers() {
    assert_headers(
        &[
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LIMIT_LIMIT_HEADER", "A-Ratelimit-Limit"),
            ("LIMIT_REMAINING_HEADER", "A-Ratelimit-Remaining"),
            ("LIMIT_RESET_HEADER", "A-Ratelimit-Reset"),
        ],
        [
            "A-Ratelimit-Limit",
            "A-Ratelimit-Remaining",
            "A-Ratelimit-Reset",
        ],
    );
}

#[test]
fn service_test_service_with_default_ratelimit_headers() {
    assert_headers(
        &[("LIMIT_RESPONSE_HEADERS_ENABLED", "true")],
        ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"],
    );
}

/// A request the service refuses: the reference's words start the message; the code is the
/// reference's UNKNOWN at its door, INVALID_ARGUMENT for `floodgate serve`
/// (migrating-from-envoy-ratelimit.md, "What answers differently").
/// `call.should_rate_limit.service_error` is `floodgate_calls_total{decision="error"}`.
fn assert_refused(domain: &str, descriptors: &[&[(&str, &str)]], message: &str) {
    for door in BOTH_DOORS {
        let mut served = Served::start_at(door, Some(DIFFERENT_DOMAIN), SERVICE, &[]);
        let refused = served.refused(rls::request(domain, descriptors));
        let expected = error_code(door, tonic::Code::InvalidArgument);
        assert_eq!(refused.code(), expected, "{door:?}: {refused:?}");
        assert!(refused.message().starts_with(message), "{refused:?}");
        assert_eq!(calls(&served, "error"), 1.0);
    }
}

#[test]
fn service_test_empty_domain() {
    assert_refused(
        "",
        &[&[("hello", "world")]],
        "rate limit domain must not be empty",
    );
}

#[test]
fn service_test_empty_descriptors() {
    assert_refused(
        "test-domain",
        &[],
        "rate limit descriptor list must not be empty",
    );
}

/// The store cannot decide: the call fails, UNKNOWN with the store's error at the reference's
/// door, UNAVAILABLE for `floodgate serve` (either way Envoy's `failure_mode_deny` decides,
/// migrating-from-envoy-ratelimit.md, "Failures"). `call.should_rate_limit.redis_error` is
/// `floodgate_store_errors_total{backend}`. The memory store fails when it is full of counters
/// it may not forget (`--max-keys`); Redis when it is gone.
#[test]
fn service_test_cache_error() {
    for door in BOTH_DOORS {
        cache_error_at(door);
    }
}

fn cache_error_at(door: Door) {
    let unavailable = error_code(door, tonic::Code::Unavailable);
    let rules = "domain: different-domain\ndescriptors:\n  - key: foo\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    let flags = [SERVICE, &["--max-keys", "1"]].concat();
    let mut memory = Served::start_at(door, Some(rules), &flags, &[]);
    memory.spend(1, "different-domain", &[("foo", "bar")]);
    let full = memory.refused(rls::request("different-domain", &[&[("foo", "baz")]]));
    assert_eq!(full.code(), unavailable, "{door:?}: {full:?}");
    assert!(full.message().contains("memory store"), "{full:?}");
    let metrics = memory.metrics();
    let backend = [("backend", "memory")];
    assert_eq!(
        counted(&metrics, "floodgate_store_full_total", &backend),
        1.0
    );
    assert_eq!(
        counted(&metrics, "floodgate_store_errors_total", &backend),
        1.0
    );
    assert_eq!(calls(&memory, "error"), 1.0);

    let mut redis = RedisServer::start();
    let url = redis.url();
    let mut served = Served::start_at(door, Some(rules), &store_flags(&url, &[]), &[]);
    served.answer("different-domain", &[&[("foo", "bar")]]);
    redis.kill();
    let failed = served.refused(rls::request("different-domain", &[&[("foo", "bar")]]));
    assert_eq!(failed.code(), unavailable, "{door:?}: {failed:?}");
    let errors = counted(
        &served.metrics(),
        "floodgate_store_errors_total",
        &[("backend", "redis")],
    );
    assert!(errors >= 1.0, "{errors}");
    assert!(calls(&served, "error") >= 1.0);
}

/// No configuration could be loaded at start: every call fails with the reference's message
/// and code, as started under the reference's name (`ratelimit`) or with its
/// `FORCE_START_WITHOUT_INITIAL_CONFIG`; `floodgate serve` alone refuses to start instead.
#[test]
fn service_test_initial_load_error() {
    let assert_no_configuration = |served: &mut Served| {
        let refused = served.refused(rls::request("test-domain", &[&[("hello", "world")]]));
        assert_eq!(refused.code(), tonic::Code::Unknown, "{refused:?}");
        assert_eq!(refused.message(), "no rate limit configuration loaded");
        assert_eq!(calls(served, "error"), 1.0);
    };

    assert_no_configuration(&mut Served::at_the_door(
        Some(BROKEN),
        &["--store", "memory"],
        &[],
    ));

    let env = [("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")];
    assert_no_configuration(&mut Served::start(Some(BROKEN), SERVICE, &env));

    let dir = tempdir();
    let file = dir.path().join("config.yaml");
    ops::write_atomically(&file, BROKEN.as_bytes());
    let (mut command, _) = serve_command();
    command
        .arg("--config")
        .arg(&file)
        .args(SERVICE)
        .env_remove("FORCE_START_WITHOUT_INITIAL_CONFIG");
    let mut refusing = Running::spawn("floodgate", &mut command, dir.path());
    let status = refusing.exit_within(Duration::from_secs(10));
    assert!(
        status.is_some_and(|status| !status.success()),
        "{status:?}\n{}",
        refusing.log_text()
    );
}

/// An unlimited descriptor: OK with the largest remaining, and no counter in the store (the
/// reference does not hand it to the cache). On Redis, one key is written: foo's.
#[test]
fn service_test_unlimited() {
    let rules = "
domain: some-domain
descriptors:
  - key: foo
    value: bar
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: baz
    value: qux
    rate_limit: {unlimited: true}
";
    let request: [&[(&str, &str)]; 3] =
        [&[("foo", "bar")], &[("hello", "world")], &[("baz", "qux")]];
    let expected = [
        (Code::Ok, per_minute(10), 9),
        (Code::Ok, None, 0),
        (Code::Ok, None, u32::MAX),
    ];
    let mut memory = Served::start(Some(rules), SERVICE, &[]);
    let answer = memory.answer("some-domain", &request);
    assert_eq!(
        (overall(&answer), statuses(&answer)),
        (Code::Ok, expected.to_vec())
    );

    let redis = RedisServer::start();
    let url = redis.url();
    let mut served = Served::start(Some(rules), &store_flags(&url, &[]), &[]);
    let answer = served.answer("some-domain", &request);
    assert_eq!(
        (overall(&answer), statuses(&answer)),
        (Code::Ok, expected.to_vec())
    );
    let keys = ops::runtime().block_on(async {
        let mut connection = redis.inspector().await;
        scan_keys(&mut connection, "*").await
    });
    assert_eq!(keys.len(), 1, "{keys:?}");
}

/// One call, one span of the decision, with the store call as its child: started as
/// `ratelimit`, the reference's `ShouldRateLimit Execution`, exported as its `TRACING_*`
/// settings say; `floodgate serve`'s `ShouldRateLimit`, exported by OTLP (`--otlp-endpoint`).
#[test]
fn service_test_service_tracer() {
    let runtime = floodgate_testkit::runtime();
    for door in BOTH_DOORS {
        let receiver = runtime.block_on(OtlpReceiver::start());
        let endpoint = receiver.endpoint();
        let (flags, env, name) = match door {
            Door::Serve => (
                [SERVICE, &["--otlp-endpoint", &endpoint]].concat(),
                Vec::new(),
                "ShouldRateLimit",
            ),
            Door::Ratelimit => (
                SERVICE.to_vec(),
                vec![
                    ("TRACING_ENABLED", "true"),
                    ("TRACING_EXPORTER_PROTOCOL", "grpc"),
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
                ],
                "ShouldRateLimit Execution",
            ),
        };
        let mut served = Served::start_at(door, Some(DIFFERENT_DOMAIN), &flags, &env);
        let answer = served.answer("test-domain", &[&[("hello", "world")]]);
        assert_eq!(overall(&answer), Code::Ok);
        let spans = runtime.block_on(receiver.wait_for(Duration::from_secs(10), |spans| {
            spans.iter().any(|span| span.span.name == "store.decide")
        }));
        let decisions: Vec<_> = spans.iter().filter(|span| span.span.name == name).collect();
        assert_eq!(decisions.len(), 1, "{door:?}: {spans:#?}");
        let children = spans
            .iter()
            .filter(|span| span.parent_span_id_hex() == decisions[0].span_id_hex())
            .count();
        assert_eq!(children, 1, "{door:?}: {spans:#?}");
    }
}

/// Without `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`, healthy from the start, even before any
/// configuration loaded (here: the first one fails to, with
/// `FORCE_START_WITHOUT_INITIAL_CONFIG`).
#[test]
fn service_test_service_health_status() {
    let env = [("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")];
    let served = Served::start(Some(BROKEN), SERVICE, &env);
    assert_eq!(served.health("ratelimit"), Some(ServingStatus::Serving));
    assert_eq!(served.healthcheck(), 200);
}

/// With `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true`: NOT_SERVING until a configuration with a
/// domain is loaded, and again after a reload leaves none.
#[test]
fn service_test_service_health_status_at_least_one_config_loaded() {
    let env = [("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true")];
    let served = Served::start(None, SERVICE, &env);
    assert_eq!(served.health("ratelimit"), Some(ServingStatus::NotServing));
    served.reload(Some(DIFFERENT_DOMAIN));
    served.health_becomes("ratelimit", ServingStatus::Serving);
    served.reload(None);
    served.health_becomes("ratelimit", ServingStatus::NotServing);
}
