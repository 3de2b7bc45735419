//! A charge that overflows, on limits that come from elsewhere than a file: a rule pushed over
//! xDS (which has no field for `overflow:`) and Envoy's per-descriptor `limit` override (Envoy
//! Gateway's `limit.fromMetadata`). AI Gateway charges an LLM call's tokens when the response is
//! done: 20 tokens, then a report of 10 000 against the 80 left. `floodgate serve` refuses and
//! forgets that report unless told to owe it (`--overflow owe`, `FLOODGATE_OVERFLOW`); started as
//! `ratelimit` it counts it, as the reference's `INCRBY` does. Counted, the next call is refused.

use floodgate::proto::rate_limit_descriptor::RateLimitOverride;
use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::{RateLimitDescriptor, RateLimitUnit};
use floodgate_testkit::rls;
use floodgate_testkit::xds::XdsServer;

use crate::harness::{
    bounded, decide, hourly, resource, start, start_at_the_door, XdsFloodgate, NODE, STEP,
};

/// The domain both kinds of limits are in; its only pushed rule is `tokens`, 100 an hour.
const DOMAIN: &str = "llm";

/// A budget of the pushed rule: `tokens=user-a`, charged `hits`.
fn pushed_rule(hits: u64) -> RateLimitDescriptor {
    let mut descriptor = rls::request(DOMAIN, &[&[("tokens", "user-a")]]).descriptors[0].clone();
    descriptor.hits_addend = Some(hits);
    descriptor
}

/// A budget Envoy sends with the request: `tenant=acme`, 100 an hour, charged `hits`.
fn limit_override(hits: u64) -> RateLimitDescriptor {
    let mut descriptor = rls::request(DOMAIN, &[&[("tenant", "acme")]]).descriptors[0].clone();
    descriptor.hits_addend = Some(hits);
    descriptor.limit = Some(RateLimitOverride {
        requests_per_unit: 100,
        unit: RateLimitUnit::Hour as i32,
        unit_multiplier: None,
    });
    descriptor
}

/// The overall code of one call of `descriptor` to `floodgate`.
async fn code_of(floodgate: &XdsFloodgate, descriptor: RateLimitDescriptor) -> Code {
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    let mut request = rls::request(DOMAIN, &[]);
    request.descriptors = vec![descriptor];
    let response = rls::call(&mut client, request)
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", floodgate.log()));
    Code::try_from(response.overall_code).unwrap_or(Code::Unknown)
}

/// Waits until `floodgate` decides with the pushed rules (the door starts before they arrive
/// and answers errors until then).
async fn serving_the_pushed_rules(floodgate: &XdsFloodgate) {
    let url = floodgate.grpc_url();
    let deadline = std::time::Instant::now() + STEP;
    while decide(&url, DOMAIN, "other", "x").await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "no rules within {STEP:?}\n{}",
            floodgate.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// AI Gateway's calls against `budget`: 20 tokens, then 10 000 reported against the 80 left
/// (refused either way: more than is left), then the check before the next call (`hits_addend:
/// 0`), whose code says whether the report was counted.
async fn next_call_after_an_overflowing_report(
    floodgate: &XdsFloodgate,
    budget: fn(u64) -> RateLimitDescriptor,
) -> Code {
    assert_eq!(code_of(floodgate, budget(20)).await, Code::Ok);
    assert_eq!(code_of(floodgate, budget(10_000)).await, Code::OverLimit);
    code_of(floodgate, budget(0)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflowing_report_on_a_pushed_rule_or_an_override_is_owed_when_asked_or_at_the_door() {
    bounded(async {
        let server = XdsServer::start(None).await;
        server.set_snapshot(
            NODE,
            "v1",
            vec![resource("llm-budgets", DOMAIN, vec![hourly("tokens", 100)])],
        );
        let owing = start(server.port(), &[("FLOODGATE_OVERFLOW", "owe")]);
        let refusing = start(server.port(), &[]);
        let door = start_at_the_door(server.port(), &[]);
        for floodgate in [&owing, &refusing, &door] {
            serving_the_pushed_rules(floodgate).await;
        }
        for (budget, what) in [
            (pushed_rule as fn(u64) -> RateLimitDescriptor, "pushed rule"),
            (limit_override, "limit override"),
        ] {
            assert_eq!(
                next_call_after_an_overflowing_report(&owing, budget).await,
                Code::OverLimit,
                "{what}: --overflow owe counts the report, so the next call is refused"
            );
            assert_eq!(
                next_call_after_an_overflowing_report(&door, budget).await,
                Code::OverLimit,
                "{what}: started as ratelimit the report is counted, as the reference counts it"
            );
            assert_eq!(
                next_call_after_an_overflowing_report(&refusing, budget).await,
                Code::Ok,
                "{what}: floodgate serve alone refuses the report and counts nothing of it"
            );
        }
    })
    .await;
}
