//! A request whose quota the scripts cannot compute exactly (`check_quota`: here an Envoy limit
//! override of a 100-year window, which no configuration check sees) is refused on its own,
//! with the reason: it is not a Redis failure, so it does not open the circuit breaker for
//! every other request. Found by the `redis_lua` fuzz target (docs/fuzzing.md). Through the
//! service, such a request is an invalid argument: its failure policy does not answer it.

use floodgate::core::arithmetic::algorithm::{Algorithm, Hits, Quota};
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::store::redis::{check_quota, RedisStore};
use floodgate::store::Store;

use floodgate::proto::rate_limit_descriptor::RateLimitOverride;
use floodgate::proto::{RateLimitRequest, RateLimitUnit};
use floodgate_testkit::redis::{counter, store_flags, RedisServer};
use floodgate_testkit::{descriptor, rls, tempdir, Floodgate};

#[tokio::test]
async fn unsupported_quotas_do_not_open_the_circuit_breaker() {
    let server = RedisServer::start();
    let options = server.options(None);
    let threshold = options.breaker_threshold;
    assert!(threshold > 0, "the default options open the breaker");
    let store = RedisStore::connect(&options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect the store: {error}"));
    let century = Quota::new(5, Unit::Year)
        .with_algorithm(Algorithm::FixedWindow)
        .with_multiplier(100);
    let Err(unsupported) = check_quota(&century) else {
        panic!("a 100-year window is within what the scripts compute");
    };
    let refused = [counter(
        0,
        b"fuzz:century",
        &century,
        Hits::Charge(1),
        Role::Enforced,
    )];
    for attempt in 0..threshold * 3 {
        match store.decide(&refused, false).await {
            Err(error) => assert!(
                error.to_string().contains(&unsupported.to_string()),
                "attempt {attempt}: refused for another reason than {unsupported}: {error}"
            ),
            Ok(decided) => panic!("attempt {attempt}: decided {decided:?}"),
        }
    }
    let minute = Quota::new(5, Unit::Minute);
    let fine = [counter(
        0,
        b"fuzz:minute",
        &minute,
        Hits::Charge(1),
        Role::Enforced,
    )];
    let decided = store
        .decide(&fine, false)
        .await
        .unwrap_or_else(|error| panic!("a supported quota after the refusals: {error}"));
    assert!(decided.outcomes[0].admitted, "{decided:?}");
}

const RULES: &str = r#"
domain: fuzz
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 5}
"#;

/// Through the service: such an override is the request's fault, so it is answered
/// INVALID_ARGUMENT with the reason, not by the failure policy (which would admit it here,
/// uncounted), and the next request is decided as usual.
#[tokio::test]
async fn an_override_the_scripts_cannot_count_is_an_invalid_argument() {
    let server = RedisServer::start();
    let dir = tempdir();
    let url = server.url();
    let flags = store_flags(&url, &["--redis-failure-policy", "fail_open"]);
    let floodgate = Floodgate::start_with_rules(dir.path(), "fuzz.yaml", RULES, &flags);
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    let mut century = descriptor(&[("user", "ann")]);
    century.limit = Some(RateLimitOverride {
        requests_per_unit: 5,
        unit: RateLimitUnit::Year as i32,
        unit_multiplier: Some(100),
    });
    let request = |descriptor| RateLimitRequest {
        domain: "fuzz".to_owned(),
        descriptors: vec![descriptor],
        hits_addend: 0,
    };
    let refused = match rls::call(&mut client, request(century)).await {
        Err(status) => status,
        Ok(answer) => panic!("answered {answer:?}, not INVALID_ARGUMENT"),
    };
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("cannot count this limit exactly")
            && refused.message().contains("limit override"),
        "{}",
        refused.message()
    );
    let fine = rls::call(&mut client, request(descriptor(&[("user", "ann")])))
        .await
        .unwrap_or_else(|status| panic!("a configured limit after it: {status:?}"));
    assert_eq!(rls::first_outcome(&fine).1, 4);
}
