//! `test/limiter/base_limiter_test.go`: the reference's cache keys and its per-descriptor
//! status (`GetResponseDescriptorStatus`, given a count before and after the hits), ported as
//! behaviour: a key is a counter (which requests share one, under which prefix), and a status
//! is what a request gets from a counter at the Go test's count. The local over-limit cache
//! (`IsOverLimitWithLocalCache`, `LOCAL_CACHE_SIZE_IN_BYTES`) has no floodgate counterpart
//! yet: not applicable.

use floodgate::core::decision::status::Code;
use floodgate::core::ground::unit::Unit;
use floodgate_testkit::redis::scan_keys;

use super::harness::{assert_statuses, every_setup, Backend, Cache, Expected, Hit, Stats};

const RULES: &str = r#"
domain: "{domain}"
descriptors:
  - key: key
    value: value
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: five
    value: value
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: five_shadow
    value: value
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: ten_shadow
    value: value
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 10}
"#;

/// The Go test's share_threshold limits, as configuration: a wildcard at the first level, at
/// the second under a plain one, and at both.
const SHARE_THRESHOLD_RULES: &str = r#"
domain: "{domain}"
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: parent
    value: value1
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: files
    value: top/*
    share_threshold: true
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit: {unit: second, requests_per_unit: 10}
"#;

const KEY: &[(&str, &str)] = &[("key", "value")];

fn ok_second(limit: u32, remaining: u32) -> Expected {
    Expected::ok(limit, Unit::Second, remaining, 1)
}

/// `TestGenerateCacheKeys`: the reference's key `domain_key_value_1234` names one counter per
/// descriptor and window (floodgate's keys are length-prefixed instead, so values cannot
/// collide: a documented difference). As behaviour: two requests in one second share a
/// counter, the next second has a fresh one, and each hit is counted (`total_hits`).
#[tokio::test]
async fn one_descriptor_shares_one_counter_per_window() {
    for setup in every_setup(1234) {
        let what = format!("{setup:?}");
        let cache = Cache::start("cache_keys", RULES, setup).await;
        let (first, added) = cache.measured(&[Hit::one(KEY)]).await;
        assert_statuses(&first, &[ok_second(10, 9)], &what);
        assert_eq!(added[0].allowed, 1, "{what}");
        let second = cache.do_limit(&[Hit::one(KEY)]).await;
        assert_statuses(&second, &[ok_second(10, 8)], &what);
        cache.set_time(1235);
        let next_window = cache.do_limit(&[Hit::one(KEY)]).await;
        assert_statuses(&next_window, &[ok_second(10, 9)], &what);
    }
}

/// `TestGenerateCacheKeysPrefix`: with `CACHE_KEY_PREFIX=prefix:` every key floodgate writes
/// starts with it (Redis only: the memory store has no keys).
#[tokio::test]
async fn redis_keys_start_with_the_cache_key_prefix() {
    let prefix = floodgate::cmd::reference_env::redis_prefix(None, |name| {
        (name == "CACHE_KEY_PREFIX").then(|| "prefix:".to_owned())
    });
    for setup in every_setup(1234)
        .into_iter()
        .filter(|setup| setup.backend == Backend::Redis)
    {
        let cache = Cache::start_with_prefix("cache_key_prefix", RULES, setup, Some(&prefix)).await;
        let answer = cache.do_limit(&[Hit::one(KEY)]).await;
        assert_statuses(&answer, &[ok_second(10, 9)], &format!("{setup:?}"));
        let Some(server) = cache.redis() else {
            panic!("a Redis cache without its server");
        };
        let keys = scan_keys(&mut server.inspector().await, "*").await;
        assert!(!keys.is_empty(), "{setup:?}: the hit wrote no key");
        assert!(
            keys.iter().all(|key| key.starts_with("prefix:")),
            "{setup:?}: {keys:?}"
        );
    }
}

/// `TestGenerateCacheKeysWithShareThreshold`: every value a `share_threshold` wildcard matches
/// shares one counter, at the first level, at a nested one under a plain value, and at both.
#[tokio::test]
async fn share_threshold_values_share_one_counter() {
    for setup in every_setup(1234) {
        let what = format!("{setup:?}");
        let cache = Cache::start("share_threshold", SHARE_THRESHOLD_RULES, setup).await;
        let values = [
            "files/a.pdf",
            "files/b.csv",
            "files/c.txt",
            "files/d.json",
            "files/e.xml",
            "files/subdir/f.txt",
        ];
        for (taken, value) in (1..).zip(values) {
            let answer = cache.do_limit(&[Hit::one(&[("files", value)])]).await;
            assert_statuses(
                &answer,
                &[ok_second(10, 10 - taken)],
                &format!("{what} {value}"),
            );
        }
        for (taken, file) in (1..).zip(["nested/file1.txt", "nested/file2.csv"]) {
            let entries = [("parent", "value1"), ("files", file)];
            let answer = cache.do_limit(&[Hit::one(&entries)]).await;
            assert_statuses(
                &answer,
                &[ok_second(10, 10 - taken)],
                &format!("{what} {file}"),
            );
        }
        let pairs = [
            ("top/file1.txt", "nested/sub1.txt"),
            ("top/file2.pdf", "nested/sub2.csv"),
        ];
        for (taken, (top, nested)) in (1..).zip(pairs) {
            let entries = [("files", top), ("files", nested)];
            let answer = cache.do_limit(&[Hit::one(&entries)]).await;
            assert_statuses(
                &answer,
                &[ok_second(10, 10 - taken)],
                &format!("{what} {top}"),
            );
        }
    }
}

/// `TestGetResponseStatusEmptyKey`: a descriptor no limit applies to is OK, 0 remaining.
#[tokio::test]
async fn a_descriptor_without_a_limit_is_ok_with_nothing_remaining() {
    for setup in every_setup(1234) {
        let cache = Cache::start("empty_key", RULES, setup).await;
        let answer = cache.do_limit(&[Hit::one(&[("unknown", "value")])]).await;
        assert_statuses(&answer, &[Expected::no_limit()], &format!("{setup:?}"));
    }
}

/// A counter of 5 a second at 2, then 5 hits (to 7): the status and stats of
/// `TestGetResponseStatusOverLimit` and its shadow-mode twin.
async fn over_from_two_to_seven(test: &str, entries: &[(&str, &str)], shadow: bool) {
    for setup in every_setup(1234) {
        let what = format!("{test} {setup:?}");
        let cache = Cache::start(test, RULES, setup).await;
        cache.raise(entries, (0, 2), 5).await;
        let (answer, added) = cache.measured(&[Hit::new(entries, 5)]).await;
        let code = if shadow { Code::Ok } else { Code::OverLimit };
        let expected = Expected {
            code,
            ..Expected::over(5, Unit::Second, 1)
        };
        assert_statuses(&answer, &[expected], &what);
        // near_limit: the room between floor(5 × 0.8) = 4 and the limit. The reference's
        // over_limit counts hits past the limit (2); floodgate counts the descriptor (issue 18:
        // the reference's metric names), and a shadow-mode one under shadow only.
        let expected = Stats {
            allowed: 0,
            over_limit: u64::from(!shadow),
            shadow: u64::from(shadow),
            near_limit: 1,
        };
        assert_eq!(added[0], expected, "{what}");
    }
}

/// `TestGetResponseStatusOverLimit`: over the limit, OVER_LIMIT with nothing remaining and the
/// limit shown (the local cache the Go test also fills: not applicable).
#[tokio::test]
async fn over_the_limit_is_over_limit_with_nothing_remaining() {
    over_from_two_to_seven("status_over", &[("five", "value")], false).await;
}

/// `TestGetResponseStatusOverLimitShadowMode`: the same in shadow mode answers OK.
#[tokio::test]
async fn a_shadow_limit_over_answers_ok_with_nothing_remaining() {
    over_from_two_to_seven("status_over_shadow", &[("five_shadow", "value")], true).await;
}

/// A counter of 10 a second at 5, then 1 hit (to 6): the status and stats of
/// `TestGetResponseStatusBelowLimit` and its shadow-mode twin.
async fn below_from_five_to_six(test: &str, entries: &[(&str, &str)]) {
    for setup in every_setup(1234) {
        let what = format!("{test} {setup:?}");
        let cache = Cache::start(test, RULES, setup).await;
        cache.raise(entries, (0, 5), 10).await;
        let (answer, added) = cache.measured(&[Hit::one(entries)]).await;
        assert_statuses(&answer, &[ok_second(10, 4)], &what);
        let expected = Stats {
            allowed: 1,
            ..Stats::default()
        };
        assert_eq!(added[0], expected, "{what}");
    }
}

/// `TestGetResponseStatusBelowLimit`: OK with what remains, no near-limit hit (6 of 10 is
/// below floor(10 × 0.8) = 8).
#[tokio::test]
async fn below_the_limit_reports_what_remains() {
    below_from_five_to_six("status_below", KEY).await;
}

/// `TestGetResponseStatusBelowLimitShadowMode`: the same for a shadow-mode limit.
#[tokio::test]
async fn a_shadow_limit_below_reports_what_remains() {
    below_from_five_to_six("status_below_shadow", &[("ten_shadow", "value")]).await;
}
