//! Quota mode, global (`QUOTA_MODE`) and per rule (`quota_mode: true`), alone and under
//! `SHADOW_MODE`: the request is over its limits when any other descriptor is, or when every
//! quota descriptor is.
//!
//! Where a descriptor within its limit sits in a request that is refused, the reference charges
//! it, and so does floodgate started as `ratelimit`; `floodgate serve` charges all or nothing
//! (migrating-from-envoy-ratelimit.md, "What answers differently": rejected request), so its
//! `limit_remaining` is the whole limit there.

use floodgate::proto::rate_limit_response::{rate_limit::Unit, Code};

use super::SERVICE;
use crate::serving::{counted, overall, statuses, Door, Served, BOTH_DOORS};

/// The reference's quota tests' limits: `regular` 5 a minute, `quota` 3 in quota mode, and
/// `quota1`, `quota2` (5 and 3) both in quota mode.
const QUOTA_DOMAIN: &str = "
domain: quota-domain
descriptors:
  - key: regular
    value: limit
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: quota
    value: limit
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: quota1
    value: limit
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: quota2
    value: limit
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 3}
";

const REGULAR: &[(&str, &str)] = &[("regular", "limit")];
const QUOTA: &[(&str, &str)] = &[("quota", "limit")];
const QUOTA1: &[(&str, &str)] = &[("quota1", "limit")];
const QUOTA2: &[(&str, &str)] = &[("quota2", "limit")];

/// The answer to `[first, second]` in a floodgate on `rules` with `env`, after `spent` hits of
/// each: the floodgate, the overall code and per status (code, limit a minute, remaining).
fn after_spending(
    rules: &str,
    env: &[(&str, &str)],
    first: (&[(&str, &str)], u32),
    second: (&[(&str, &str)], u32),
) -> (Served, Code, Vec<(Code, u32, u32)>) {
    after_spending_at(Door::Serve, rules, env, first, second)
}

/// [`after_spending`] in a floodgate started through `door`.
fn after_spending_at(
    door: Door,
    rules: &str,
    env: &[(&str, &str)],
    (first, spent_first): (&[(&str, &str)], u32),
    (second, spent_second): (&[(&str, &str)], u32),
) -> (Served, Code, Vec<(Code, u32, u32)>) {
    let mut served = Served::start_at(door, Some(rules), SERVICE, env);
    served.spend(spent_first, "quota-domain", first);
    served.spend(spent_second, "quota-domain", second);
    let answer = served.answer("quota-domain", &[first, second]);
    let statuses = statuses(&answer)
        .into_iter()
        .map(|(code, limit, remaining)| match limit {
            Some((requests, Unit::Minute, name)) if name.is_empty() => (code, requests, remaining),
            other => panic!("a limit a minute without a name, not {other:?}"),
        })
        .collect();
    (served, overall(&answer), statuses)
}

fn shadow_calls(served: &Served) -> f64 {
    counted(
        &served.metrics(),
        "floodgate_calls_total",
        &[("decision", "shadow")],
    )
}

/// `QUOTA_MODE`: every limit is a quota; both over, so the request is.
#[test]
fn service_test_service_global_quota_mode() {
    let rules = "
domain: quota-domain
descriptors:
  - key: foo
    value: bar
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: hello
    value: world
    rate_limit: {unit: minute, requests_per_unit: 5}
";
    let (_, code, statuses) = after_spending(
        rules,
        &[("QUOTA_MODE", "true")],
        (&[("foo", "bar")], 10),
        (&[("hello", "world")], 5),
    );
    let over = Code::OverLimit;
    assert_eq!((code, statuses), (over, vec![(over, 10, 0), (over, 5, 0)]));
}

/// What the descriptor within its limit has left after the refused request: the reference
/// (and its door) charged it one hit; `floodgate serve` charged nothing.
fn left_by_the_refused_request(door: Door, limit: u32) -> u32 {
    match door {
        Door::Serve => limit,
        Door::Ratelimit => limit - 1,
    }
}

/// A regular limit over rejects, whatever the quota says.
#[test]
fn service_test_service_per_descriptor_quota_mode() {
    for door in BOTH_DOORS {
        let (_, code, statuses) =
            after_spending_at(door, QUOTA_DOMAIN, &[], (REGULAR, 5), (QUOTA, 0));
        let over = Code::OverLimit;
        let left = left_by_the_refused_request(door, 3);
        assert_eq!(
            (code, statuses),
            (over, vec![(over, 5, 0), (Code::Ok, 3, left)]),
            "{door:?}"
        );
    }
}

/// The only quota descriptor is over: all of them are, so the request is.
#[test]
fn service_test_service_mixed_per_descriptor_modes() {
    for door in BOTH_DOORS {
        let (_, code, statuses) =
            after_spending_at(door, QUOTA_DOMAIN, &[], (REGULAR, 0), (QUOTA, 3));
        let over = Code::OverLimit;
        let left = left_by_the_refused_request(door, 5);
        assert_eq!(
            (code, statuses),
            (over, vec![(Code::Ok, 5, left), (over, 3, 0)]),
            "{door:?}"
        );
    }
}

#[test]
fn service_test_service_mixed_per_descriptor_modes_under_limit() {
    let (_, code, statuses) = after_spending(QUOTA_DOMAIN, &[], (REGULAR, 0), (QUOTA, 0));
    let ok = Code::Ok;
    assert_eq!((code, statuses), (ok, vec![(ok, 5, 4), (ok, 3, 2)]));
}

#[test]
fn service_test_service_quota_mode_only_all_over_the_limit() {
    let (_, code, statuses) = after_spending(QUOTA_DOMAIN, &[], (QUOTA1, 5), (QUOTA2, 3));
    let over = Code::OverLimit;
    assert_eq!((code, statuses), (over, vec![(over, 5, 0), (over, 3, 0)]));
}

/// One quota over, one within: the request passes (and charges the one within).
#[test]
fn service_test_service_quota_mode_only_some_over_the_limit() {
    let (_, code, statuses) = after_spending(QUOTA_DOMAIN, &[], (QUOTA1, 5), (QUOTA2, 0));
    let ok = Code::Ok;
    assert_eq!(
        (code, statuses),
        (ok, vec![(Code::OverLimit, 5, 0), (ok, 3, 2)])
    );
}

/// Both over under `SHADOW_MODE`, both quotas or a regular limit and a quota: OK, each status
/// as it is; the reference's `global_shadow_mode` is the call's `decision="shadow"`.
fn assert_shadowed(first: &[(&str, &str)], second: &[(&str, &str)]) {
    let shadow = [("SHADOW_MODE", "true")];
    let (served, code, statuses) = after_spending(QUOTA_DOMAIN, &shadow, (first, 5), (second, 3));
    let over = Code::OverLimit;
    assert_eq!(
        (code, statuses),
        (Code::Ok, vec![(over, 5, 0), (over, 3, 0)])
    );
    assert_eq!(shadow_calls(&served), 1.0);
}

#[test]
fn service_test_service_quota_mode_with_shadow_mode() {
    assert_shadowed(QUOTA1, QUOTA2);
}

#[test]
fn service_test_service_mixed_mode_with_shadow_mode() {
    assert_shadowed(REGULAR, QUOTA);
}
