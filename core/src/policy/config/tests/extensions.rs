//! floodgate's additions: algorithms, burst, unit_multiplier, nodelay, `rate_limits`,
//! `default_algorithm`.

use super::*;
use crate::arithmetic::algorithm::{Counting, Overflow, Quota};
use crate::ground::unit::Unit;

fn one_limit(limit: &str) -> String {
    format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{{limit}}}\n")
}

fn quota_of(text: &str, options: &LoadOptions) -> Quota {
    let rules = loaded_with(text, options);
    rule_at(&rules, "d", "d.k").limits[0].clone()
}

#[test]
fn algorithm_burst_and_multiplier_land_in_the_quota() {
    let quota = quota_of(
        &one_limit("unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20"),
        &LoadOptions::default(),
    );
    assert_eq!(
        quota,
        Quota::new(10, Unit::Second)
            .with_algorithm(Algorithm::TokenBucket)
            .with_burst(20)
    );
    let quota = quota_of(
        &one_limit(
            "unit: second, unit_multiplier: 30, requests_per_unit: 100, algorithm: sliding_window",
        ),
        &LoadOptions::default(),
    );
    assert_eq!(quota.window_seconds(), 30);
    assert_eq!(quota.algorithm, Algorithm::SlidingWindow);
}

/// `--calendar-months`.
fn calendar_months() -> LoadOptions {
    LoadOptions {
        calendar_months: true,
        ..LoadOptions::default()
    }
}

#[test]
fn calendar_months_reach_month_limits_only() {
    let calendar = calendar_months();
    let month = one_limit("unit: month, requests_per_unit: 10");
    assert!(quota_of(&month, &calendar).calendar_months);
    assert!(!quota_of(&month, &LoadOptions::default()).calendar_months);
    let rules = loaded_with(&month, &calendar);
    assert!(rules.warnings().is_empty(), "{:?}", rules.warnings());
    assert!(domain(&rules, "d").calendar_months, "for request overrides");
    let day = one_limit("unit: day, requests_per_unit: 10");
    assert!(!quota_of(&day, &calendar).calendar_months);
}

#[test]
fn an_envoy_limit_override_in_months_follows_the_calendar_too() {
    use crate::decision::plan::{plan, PlanSettings};
    use crate::policy::request::{Descriptor, LimitOverride, Request};
    let calendar = calendar_months();
    let rules = loaded_with(&one_limit("unit: second, requests_per_unit: 1"), &calendar);
    let mut descriptor = Descriptor::new(vec![crate::policy::request::Entry::new("k", "v")]);
    descriptor.limit_override = Some(LimitOverride {
        requests_per_unit: 5,
        unit: Some(Unit::Month),
        unit_multiplier: None,
    });
    let request = Request {
        domain: "d".to_owned(),
        descriptors: vec![descriptor],
        hits_addend: 0,
    };
    let planned = plan(&request, rules.domain("d"), PlanSettings::default());
    let quotas: Vec<&Quota> = planned.counters.iter().map(|c| &c.quota).collect();
    assert_eq!(
        quotas,
        [&Quota::new(5, Unit::Month).with_calendar_months(true)]
    );
}

#[test]
fn a_monthly_bucket_under_calendar_months_is_warned_about() {
    let calendar = calendar_months();
    let bucket = one_limit("unit: month, requests_per_unit: 10, algorithm: token_bucket");
    let rules = loaded_with(&bucket, &calendar);
    let warnings = rules.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].message.contains("refills over 30 days"),
        "{warnings:?}"
    );
    assert!(loaded_with(&bucket, &LoadOptions::default())
        .warnings()
        .is_empty());
}

#[test]
fn the_algorithm_defaults_to_the_file_then_to_the_options() {
    let leaky = options_with_algorithm(Algorithm::LeakyBucket);
    let plain = one_limit("unit: second, requests_per_unit: 1");
    assert_eq!(
        quota_of(&plain, &LoadOptions::default()).algorithm,
        Algorithm::FixedWindow
    );
    assert_eq!(quota_of(&plain, &leaky).algorithm, Algorithm::LeakyBucket);
    let with_file_default = format!("default_algorithm: sliding_window\n{plain}");
    assert_eq!(
        quota_of(&with_file_default, &leaky).algorithm,
        Algorithm::SlidingWindow
    );
    let rules = loaded_with(&with_file_default, &leaky);
    assert_eq!(
        domain(&rules, "d").default_algorithm,
        Algorithm::SlidingWindow
    );
    let explicit = format!(
        "default_algorithm: sliding_window\n{}",
        one_limit("unit: second, requests_per_unit: 1, algorithm: fixed_window")
    );
    assert_eq!(
        quota_of(&explicit, &leaky).algorithm,
        Algorithm::FixedWindow
    );
}

#[test]
fn the_domain_default_algorithm_comes_from_the_options_without_a_file_default() {
    let rules = loaded_with(
        "domain: d\n",
        &options_with_algorithm(Algorithm::TokenBucket),
    );
    assert_eq!(
        domain(&rules, "d").default_algorithm,
        Algorithm::TokenBucket
    );
}

#[test]
fn unknown_algorithms_get_a_suggestion() {
    let error = single_error(&one_limit(
        "unit: second, requests_per_unit: 1, algorithm: token-bucket",
    ));
    assert_error(
        &error,
        "d.k",
        "unknown algorithm 'token-bucket' in `algorithm`",
        &[
            "did you mean 'token_bucket'?",
            "fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket",
        ],
    );
    let error = single_error("domain: d\ndefault_algorithm: gcra\n");
    assert_error(
        &error,
        "d",
        "unknown algorithm 'gcra' in `default_algorithm`",
        &["use one of"],
    );
}

#[test]
fn burst_only_for_buckets() {
    let error = single_error(&one_limit("unit: second, requests_per_unit: 1, burst: 5"));
    assert_error(
        &error,
        "d.k",
        "`burst` only applies to token_bucket and leaky_bucket, but this limit uses fixed_window (the default from --default-algorithm)",
        &["algorithm: token_bucket"],
    );
    let error = single_error(&format!(
        "default_algorithm: sliding_log\n{}",
        one_limit("unit: second, requests_per_unit: 1, burst: 5")
    ));
    assert!(
        error
            .message
            .contains("(the default from this file's `default_algorithm`)"),
        "{error}"
    );
    let quota = quota_of(
        &one_limit("unit: second, requests_per_unit: 2, burst: 5, algorithm: leaky_bucket"),
        &LoadOptions::default(),
    );
    assert_eq!(quota.burst, Some(5));
    let quota = quota_of(
        &one_limit("unit: second, requests_per_unit: 2, burst: 0, algorithm: leaky_bucket"),
        &LoadOptions::default(),
    );
    assert_eq!(
        quota.burst,
        Some(0),
        "leaky bucket burst 0 is nginx's default"
    );
}

#[test]
fn a_token_bucket_needs_room() {
    let error = single_error(&one_limit(
        "unit: second, requests_per_unit: 2, burst: 0, algorithm: token_bucket",
    ));
    assert!(
        error
            .message
            .starts_with("`burst: 0` leaves the token bucket no room"),
        "{error}"
    );
}

#[test]
fn unit_multiplier_must_be_positive() {
    let error = single_error(&one_limit(
        "unit: second, requests_per_unit: 1, unit_multiplier: 0",
    ));
    assert_error(
        &error,
        "d.k",
        "`unit_multiplier` must be at least 1",
        &["30-second window"],
    );
}

#[test]
fn nodelay_only_for_leaky_buckets_and_changes_nothing() {
    let error = single_error(&one_limit(
        "unit: second, requests_per_unit: 1, nodelay: true, algorithm: token_bucket",
    ));
    assert_error(
        &error,
        "d.k",
        "`nodelay` only applies to leaky_bucket, but this limit uses token_bucket:",
        &["algorithm: leaky_bucket"],
    );
    let with = quota_of(
        &one_limit("unit: second, requests_per_unit: 1, nodelay: yes, algorithm: leaky_bucket"),
        &LoadOptions::default(),
    );
    let without = quota_of(
        &one_limit("unit: second, requests_per_unit: 1, algorithm: leaky_bucket"),
        &LoadOptions::default(),
    );
    assert_eq!(with, without);
}

#[test]
fn overflow_owe_lands_in_the_quota_of_a_window_only() {
    for algorithm in ["fixed_window", "sliding_window"] {
        let quota = quota_of(
            &one_limit(&format!(
                "unit: day, requests_per_unit: 100000, algorithm: {algorithm}, overflow: owe"
            )),
            &LoadOptions::default(),
        );
        assert_eq!(quota.overflow, Overflow::Owe, "{algorithm}");
    }
    let quota = quota_of(
        &one_limit("unit: day, requests_per_unit: 1, overflow: refuse"),
        &LoadOptions::default(),
    );
    assert_eq!(quota, Quota::new(1, Unit::Day), "refuse is the default");
    for algorithm in ["token_bucket", "leaky_bucket", "sliding_log"] {
        let error = single_error(&one_limit(&format!(
            "unit: second, requests_per_unit: 1, algorithm: {algorithm}, overflow: owe"
        )));
        assert_error(
            &error,
            "d.k",
            "`overflow: owe` needs a count that can pass the limit, but this limit uses",
            &[algorithm, "fixed_window", "remove `overflow`"],
        );
    }
    let error = single_error(&one_limit(
        "unit: second, requests_per_unit: 1, overflow: debt",
    ));
    assert_error(&error, "d.k", "", &["overflow", "debt", "owe", "refuse"]);
    let errors = errors_of(&one_limit("unlimited: true, overflow: owe"));
    assert!(
        errors.iter().any(|e| e
            .message
            .starts_with("`overflow` has no effect on an unlimited rule")),
        "{}",
        lines(&errors)
    );
}

#[test]
fn counting_lands_in_the_quota_and_a_bucket_counted_hybrid_is_warned_about() {
    for (written, counting) in [("exact", Counting::Exact), ("hybrid", Counting::Hybrid)] {
        for algorithm in ["fixed_window", "sliding_window"] {
            let text = one_limit(&format!(
                "unit: day, requests_per_unit: 100, algorithm: {algorithm}, counting: {written}"
            ));
            let rules = loaded_with(&text, &LoadOptions::default());
            assert!(rules.warnings().is_empty(), "{:?}", rules.warnings());
            let quota = rule_at(&rules, "d", "d.k").limits[0].clone();
            assert_eq!(quota.counting, Some(counting), "{algorithm}");
        }
    }
    assert_eq!(
        quota_of(
            &one_limit("unit: day, requests_per_unit: 1"),
            &LoadOptions::default()
        )
        .counting,
        None,
        "unset: as the store counts"
    );
    for algorithm in ["token_bucket", "leaky_bucket", "sliding_log"] {
        let rules = loaded_with(
            &one_limit(&format!(
                "unit: second, requests_per_unit: 5, algorithm: {algorithm}, counting: hybrid"
            )),
            &LoadOptions::default(),
        );
        let warnings = rules.warnings();
        assert_eq!(warnings.len(), 1, "{algorithm}: {warnings:?}");
        let message = &warnings[0].message;
        assert!(
            message.starts_with("`counting: hybrid` is decided exactly")
                && message.contains(algorithm)
                && message.contains("fixed_window and sliding_window"),
            "{message}"
        );
        // Still hybrid as written: the store decides it exactly.
        assert_eq!(
            rule_at(&rules, "d", "d.k").limits[0].counting,
            Some(Counting::Hybrid)
        );
    }
    let error = single_error(&one_limit(
        "unit: second, requests_per_unit: 1, counting: hybird",
    ));
    assert_error(
        &error,
        "d.k",
        "",
        &["counting", "hybird", "hybrid", "exact"],
    );
    let errors = errors_of(&one_limit("unlimited: true, counting: hybrid"));
    assert!(
        errors.iter().any(|e| e
            .message
            .starts_with("`counting` has no effect on an unlimited rule")),
        "{}",
        lines(&errors)
    );
}

#[test]
fn sliding_log_is_for_small_limits() {
    let error = single_error(&one_limit(
        "unit: minute, requests_per_unit: 10001, algorithm: sliding_log",
    ));
    assert_error(
        &error,
        "d.k",
        "a sliding_log limit of 10001 per window is above the maximum of 10000",
        &["memory grows with the limit", "sliding_window"],
    );
    let quota = quota_of(
        &one_limit("unit: minute, requests_per_unit: 10000, algorithm: sliding_log"),
        &LoadOptions::default(),
    );
    assert_eq!(quota.requests_per_unit, 10_000);
}

#[test]
fn floodgate_options_on_an_unlimited_rule_are_errors() {
    let errors = errors_of(&one_limit(
        "unlimited: true, algorithm: token_bucket, burst: 3",
    ));
    assert_eq!(errors.len(), 2, "{}", lines(&errors));
    assert!(errors[0]
        .message
        .starts_with("`algorithm` has no effect on an unlimited rule"));
    assert!(errors[1]
        .message
        .starts_with("`burst` has no effect on an unlimited rule"));
}

const SEVERAL: &str = "domain: d\n\
    descriptors:\n\
    \x20 - key: api_key\n\
    \x20   rate_limits:\n\
    \x20     - unit: second\n\
    \x20       requests_per_unit: 10\n\
    \x20       name: api_budget\n\
    \x20     - unit: hour\n\
    \x20       requests_per_unit: 1000\n\
    \x20       algorithm: sliding_window\n\
    \x20       replaces: [{name: anonymous}]\n\
    \x20 - key: anonymous\n\
    \x20   rate_limit: {unit: second, requests_per_unit: 1, name: anonymous}\n";

#[test]
fn rate_limits_holds_several_limits_for_one_rule() {
    let rules = loaded(SEVERAL);
    let rule = rule_at(&rules, "d", "d.api_key");
    assert_eq!(
        rule.limits,
        vec![
            Quota::new(10, Unit::Second),
            Quota::new(1000, Unit::Hour).with_algorithm(Algorithm::SlidingWindow),
        ]
    );
    assert_eq!(rule.name.as_deref(), Some("api_budget"));
    assert_eq!(rule.replaces, vec!["anonymous".to_owned()]);
    assert!(!rule.unlimited);
}

#[test]
fn rate_limits_needs_at_least_one_map() {
    for empty in ["[]", "", "{unit: second}"] {
        let error = single_error(&format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limits: {empty}\n"
        ));
        assert!(
            error.message.starts_with(
                "error checking config: `rate_limits` must be a list of at least one limit"
            ),
            "{error}"
        );
    }
    let error = single_error("domain: d\ndescriptors:\n  - key: k\n    rate_limits: [second]\n");
    assert!(error
        .message
        .starts_with("config error, yaml file contains list of type other than map: second"));
}

#[test]
fn rate_limit_and_rate_limits_together_is_an_error() {
    let error = single_error(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: k\n\
         \x20   rate_limit: {unit: second, requests_per_unit: 1}\n\
         \x20   rate_limits: [{unit: hour, requests_per_unit: 10}]\n",
    );
    assert_error(
        &error,
        "d.k",
        "a descriptor has either `rate_limit` or `rate_limits`, not both",
        &["move"],
    );
}

#[test]
fn rate_limits_entries_are_checked_like_rate_limit_and_named_by_index() {
    let errors = errors_of(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: k\n\
         \x20   rate_limits:\n\
         \x20     - {unit: second, requests_per_unit: 1}\n\
         \x20     - {unit: sec0nd, requests_per_unit: 1, burst: 2}\n",
    );
    assert_eq!(errors.len(), 2, "{}", lines(&errors));
    assert!(
        errors[0].message.starts_with(
            "invalid rate limit unit 'sec0nd' in `rate_limits[1]`: did you mean 'second'?"
        ),
        "{}",
        errors[0]
    );
    assert!(
        errors[1]
            .message
            .contains("`rate_limits[1].burst` only applies"),
        "{}",
        errors[1]
    );
}

#[test]
fn name_and_replaces_once_per_rule_and_no_unlimited_in_rate_limits() {
    let errors = errors_of(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: k\n\
         \x20   rate_limits:\n\
         \x20     - {unit: second, requests_per_unit: 1, name: a, replaces: [{name: x}]}\n\
         \x20     - {unit: hour, requests_per_unit: 9, name: b, replaces: [{name: a}]}\n\
         \x20     - {unlimited: true}\n",
    );
    let starts: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(errors.len(), 3, "{}", lines(&errors));
    assert!(
        starts[0].starts_with("`name` is written in rate_limits[0] and rate_limits[1]"),
        "{}",
        starts[0]
    );
    assert!(
        starts[1].starts_with("`replaces` is written in rate_limits[0] and rate_limits[1]"),
        "{}",
        starts[1]
    );
    assert!(
        starts[2].starts_with("`rate_limits[2].unlimited` cannot be used inside `rate_limits`"),
        "{}",
        starts[2]
    );
}

#[test]
fn replaces_own_name_across_rate_limits_entries() {
    let error = single_error(
        "domain: d\n\
         descriptors:\n\
         \x20 - key: k\n\
         \x20   rate_limits:\n\
         \x20     - {unit: second, requests_per_unit: 1, name: me}\n\
         \x20     - {unit: hour, requests_per_unit: 9, replaces: [{name: me}]}\n",
    );
    assert!(error
        .message
        .starts_with("replaces should not contain name of same descriptor"));
}

#[test]
fn floodgate_keys_in_the_wrong_place_are_errors() {
    let error = single_error(
        "domain: d\ndescriptors:\n  - key: k\n    burst: 3\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: token_bucket}\n",
    );
    assert_error(
        &error,
        "d.k",
        "'burst' cannot be used on a descriptor",
        &["inside `rate_limit`"],
    );
    let error = single_error("domain: d\nalgorithm: token_bucket\n");
    assert!(
        error
            .message
            .starts_with("'algorithm' cannot be used at the top level"),
        "{error}"
    );
    let error =
        single_error("domain: d\ndescriptors:\n  - key: k\n    default_algorithm: token_bucket\n");
    assert!(
        error.message.contains("move it to the top level"),
        "{error}"
    );
}
