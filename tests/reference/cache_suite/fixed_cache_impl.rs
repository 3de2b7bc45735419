//! `test/redis/fixed_cache_impl_test.go`: the reference's Redis cache (`DoLimit` over mocked
//! `INCRBY` replies), ported as behaviour. A mocked reply of N after `INCRBY n` is a counter
//! that held N − n: each port raises the counter there first, then sends the Go test's
//! request at the Go test's mocked time. The local over-limit cache (`LOCAL_CACHE_SIZE_IN_BYTES`)
//! has no floodgate counterpart yet: the steps that hit it are ported for their answer only.

use floodgate::core::decision::charging::Charging;
use floodgate::core::decision::semantics::Semantics;
use floodgate::core::decision::status::Code;
use floodgate::core::ground::unit::Unit;

use super::harness::{assert_statuses, every_setup, Backend, Cache, Expected, Hit, Setup, Stats};

const RULES: &str = r#"
domain: "{domain}"
descriptors:
  - key: key
    value: value
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: key2
    value: value2
    descriptors:
      - key: subkey2
        value: subvalue2
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: key3
    value: value3
    rate_limit: {unit: hour, requests_per_unit: 10}
    descriptors:
      - key: subkey3
        value: subvalue3
        rate_limit: {unit: day, requests_per_unit: 10}
  - key: key4
    value: value4
    rate_limit: {unit: hour, requests_per_unit: 15}
  - key: key5
    value: value5
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: key6
    value: value6
    rate_limit: {unit: second, requests_per_unit: 8}
  - key: key7
    value: value7
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: key8
    value: value8
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: key9
    value: value9
    rate_limit: {unit: second, requests_per_unit: 20}
  - key: key10
    value: value10
    rate_limit: {unit: second, requests_per_unit: 10}
"#;

/// `key4` in shadow mode (`TestOverLimitWithLocalCacheShadowRule`).
const SHADOW_RULES: &str = r#"
domain: "{domain}"
descriptors:
  - key: key4
    value: value4
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 15}
"#;

/// `key4` at 15 and `key5` at 14 an hour
/// (`TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig`).
const STOP_RULES: &str = r#"
domain: "{domain}"
descriptors:
  - key: key4
    value: value4
    rate_limit: {unit: hour, requests_per_unit: 15}
  - key: key5
    value: value5
    rate_limit: {unit: hour, requests_per_unit: 14}
"#;

const KEY: &[(&str, &str)] = &[("key", "value")];
const KEY2: &[(&str, &str)] = &[("key2", "value2")];
const KEY2_SUB: &[(&str, &str)] = &[("key2", "value2"), ("subkey2", "subvalue2")];
const KEY3: &[(&str, &str)] = &[("key3", "value3")];
const KEY3_SUB: &[(&str, &str)] = &[("key3", "value3"), ("subkey3", "subvalue3")];
const KEY4: &[(&str, &str)] = &[("key4", "value4")];
const KEY5: &[(&str, &str)] = &[("key5", "value5")];

/// The reference's `CalculateReset` at its mocked instants: 1234 s is 34 s into a minute;
/// 1 000 000 s is 2800 s into an hour and 49 600 s into a day.
const SECOND_AT_1234: i64 = 1;
const MINUTE_AT_1234: i64 = 26;
const HOUR_AT_1000000: i64 = 800;
const DAY_AT_1000000: i64 = 36_800;

fn stats(allowed: u64, over_limit: u64, near_limit: u64) -> Stats {
    Stats {
        allowed,
        over_limit,
        shadow: 0,
        near_limit,
    }
}

/// `TestRedis` (both subtests: floodgate's own counters live in one Redis, so
/// "WithPerSecondRedis" is the same run; the per-second Redis of the reference's keys is
/// `tests/redis/redis_reference_keys.rs`): a limit within, a nested one over, and two counters
/// already past their limits (a check-only descriptor among them), in both charging modes.
#[tokio::test]
async fn test_redis_within_over_and_past_the_limit() {
    for setup in every_setup(1234) {
        let cache = Cache::start("test_redis", RULES, setup).await;
        let what = format!("{setup:?}");

        // INCRBY 1 → 5 of 10 a second.
        cache.raise(KEY, (0, 4), 10).await;
        let (response, added) = cache.measured(&[Hit::one(KEY)]).await;
        assert_statuses(
            &response,
            &[Expected::ok(10, Unit::Second, 5, SECOND_AT_1234)],
            &what,
        );
        assert_eq!(added[0], stats(1, 0, 0), "{what}");

        // No limit on key2 alone (hits 0); INCRBY 1 → 11 of 10 a minute on key2.subkey2.
        cache.raise(KEY2_SUB, (0, 10), 10).await;
        let (response, added) = cache
            .measured(&[Hit::new(KEY2, 0), Hit::new(KEY2_SUB, 1)])
            .await;
        assert_statuses(
            &response,
            &[
                Expected::no_limit(),
                Expected::over(10, Unit::Minute, MINUTE_AT_1234),
            ],
            &what,
        );
        assert_eq!(added[1], stats(0, 1, 0), "{what}");

        // At 1 000 000 s: INCRBY 0 → 11 of 10 an hour (check only), INCRBY 1 → 13 of 10 a day.
        cache.set_time(1_000_000);
        cache.raise(KEY3, (0, 11), 10).await;
        cache.raise(KEY3_SUB, (0, 12), 10).await;
        let (response, added) = cache
            .measured(&[Hit::new(KEY3, 0), Hit::new(KEY3_SUB, 1)])
            .await;
        assert_statuses(
            &response,
            &[
                Expected::over(10, Unit::Hour, HOUR_AT_1000000),
                Expected::over(10, Unit::Day, DAY_AT_1000000),
            ],
            &what,
        );
        // The reference counts the check's hits (none); floodgate counts the descriptor it
        // refused (issue 18: the reference's metric names).
        assert_eq!(added[0], stats(0, 1, 0), "{what}");
        assert_eq!(added[1], stats(0, 1, 0), "{what}");

        // What key3.subkey3 holds now: the reference's 13 with every-descriptor (the refused
        // hit counted), so 4 given back leave room for 1; all or nothing stopped at 10 and
        // charged nothing of the refused hit, so they leave room for 4.
        cache.do_limit(&[Hit::refund(KEY3_SUB, 4)]).await;
        let room = match setup.charging {
            Charging::EveryDescriptor | Charging::AllOrRefused => 1,
            Charging::AllOrNothing => 4,
        };
        let response = cache.do_limit(&[Hit::new(KEY3_SUB, 0)]).await;
        assert_statuses(
            &response,
            &[Expected::ok(10, Unit::Day, room, DAY_AT_1000000)],
            &what,
        );
    }
}

/// The first three steps of `TestNearLimit` and `TestOverLimitWithLocalCache`: 15 an hour at
/// 11, 13 and 16 after the hit. Returns the cache, its counter at 16 (15 all or nothing).
async fn near_then_over(test: &str, rules: &str, setup: Setup, shadow: bool) -> Cache {
    let cache = Cache::start(test, rules, setup).await;
    let what = format!("{test} {setup:?}");
    cache.raise(KEY4, (0, 10), 15).await;
    let (response, added) = cache.measured(&[Hit::one(KEY4)]).await;
    assert_statuses(
        &response,
        &[Expected::ok(15, Unit::Hour, 4, HOUR_AT_1000000)],
        &what,
    );
    assert_eq!(added[0], stats(1, 0, 0), "{what}");

    // At the near-limit ratio (floor(15 × 0.8) = 12), still OK.
    cache.raise(KEY4, (11, 12), 15).await;
    let (response, added) = cache.measured(&[Hit::one(KEY4)]).await;
    assert_statuses(
        &response,
        &[Expected::ok(15, Unit::Hour, 2, HOUR_AT_1000000)],
        &what,
    );
    assert_eq!(added[0], stats(1, 0, 1), "{what}");

    // Over: near_limit counts only hits below the limit, none here.
    cache.raise(KEY4, (13, 15), 15).await;
    let (response, added) = cache.measured(&[Hit::one(KEY4)]).await;
    let over = if shadow {
        Expected {
            code: Code::Ok,
            ..Expected::over(15, Unit::Hour, HOUR_AT_1000000)
        }
    } else {
        Expected::over(15, Unit::Hour, HOUR_AT_1000000)
    };
    assert_statuses(&response, std::slice::from_ref(&over), &what);
    let expected = if shadow {
        // The reference counts it in over_limit and in shadow_mode; floodgate under shadow.
        Stats {
            shadow: 1,
            ..stats(0, 0, 0)
        }
    } else {
        stats(0, 1, 0)
    };
    assert_eq!(added[0], expected, "{what}");
    cache
}

/// `TestOverLimitWithLocalCache`: near the limit, then over. Its last step answers from the
/// local over-limit cache without calling Redis; floodgate has none yet and asks the store,
/// which answers the same OVER_LIMIT (the local cache's own stats: not applicable).
#[tokio::test]
async fn over_limit_then_over_again_without_a_local_cache() {
    for setup in every_setup(1_000_000) {
        let cache = near_then_over("local_cache", RULES, setup, false).await;
        let (response, added) = cache.measured(&[Hit::one(KEY4)]).await;
        assert_statuses(
            &response,
            &[Expected::over(15, Unit::Hour, HOUR_AT_1000000)],
            &format!("{setup:?}"),
        );
        assert_eq!(added[0], stats(0, 1, 0), "{setup:?}");
    }
}

/// `TestNearLimit`: near-limit hits under, at and over the ratio, then hits_addend above 1
/// landing under the ratio, across it, all past it, across the limit, across both, and all
/// past the limit.
#[tokio::test]
async fn near_limit_hits_as_the_reference_counts_them() {
    for setup in every_setup(1_000_000) {
        let cache = near_then_over("near_limit", RULES, setup, false).await;
        cache.set_time(1234);
        let cases = [
            NearCase::new(
                ("key5", "value5"),
                20,
                (3, 5),
                Expected::ok(20, Unit::Second, 15, 1),
                0,
            ),
            NearCase::new(
                ("key6", "value6"),
                8,
                (2, 7),
                Expected::ok(8, Unit::Second, 1, 1),
                1,
            ),
            NearCase::new(
                ("key7", "value7"),
                20,
                (3, 19),
                Expected::ok(20, Unit::Second, 1, 1),
                3,
            ),
            NearCase::new(
                ("key8", "value8"),
                20,
                (3, 22),
                Expected::over(20, Unit::Second, 1),
                1,
            ),
            NearCase::new(
                ("key9", "value9"),
                20,
                (7, 22),
                Expected::over(20, Unit::Second, 1),
                4,
            ),
            NearCase::new(
                ("key10", "value10"),
                10,
                (3, 30),
                Expected::over(10, Unit::Second, 1),
                0,
            ),
        ];
        for case in cases {
            let NearCase {
                entry,
                limit,
                hits,
                after,
                expected,
                near,
            } = case;
            let entries = &[entry];
            let what = format!("{setup:?} {entries:?} {hits} → {after}");
            cache.raise(entries, (0, after - hits), limit).await;
            let (response, added) = cache.measured(&[Hit::new(entries, hits)]).await;
            let over = expected.code == Code::OverLimit;
            assert_statuses(&response, &[expected], &what);
            // The reference counts within_limit and over_limit in hits (3, 2…); floodgate
            // counts the descriptor once (issue 18: the reference's metric names).
            let (allowed, rejected) = if over { (0, 1) } else { (1, 0) };
            assert_eq!(added[0], stats(allowed, rejected, near), "{what}");
        }
    }
}

/// One case of `TestNearLimit` with `hits_addend` above 1.
struct NearCase {
    entry: (&'static str, &'static str),
    limit: u64,
    /// The descriptor's `hits_addend`.
    hits: u64,
    /// The count the mocked `INCRBY` replied.
    after: u64,
    expected: Expected,
    /// The reference's near_limit hits.
    near: u64,
}

impl NearCase {
    fn new(
        entry: (&'static str, &'static str),
        limit: u64,
        (hits, after): (u64, u64),
        expected: Expected,
        near: u64,
    ) -> Self {
        Self {
            entry,
            limit,
            hits,
            after,
            expected,
            near,
        }
    }
}

/// `TestRedisWithJitter`: the same answer; floodgate's own keys carry no jitter (a key lives
/// until its state means nothing, which spreads expiries by itself); the reference's keys do
/// (`EXPIRATION_JITTER_MAX_SECONDS`, `tests/redis/redis_reference_keys.rs`).
#[tokio::test]
async fn answers_without_expiration_jitter() {
    for setup in every_setup(1234) {
        let cache = Cache::start("jitter", RULES, setup).await;
        cache.raise(KEY, (0, 4), 10).await;
        let (response, added) = cache.measured(&[Hit::one(KEY)]).await;
        assert_statuses(
            &response,
            &[Expected::ok(10, Unit::Second, 5, SECOND_AT_1234)],
            &format!("{setup:?}"),
        );
        assert_eq!(added[0], stats(1, 0, 0), "{setup:?}");
    }
}

/// `TestOverLimitWithLocalCacheShadowRule`: a shadow-mode limit answers OK (0 remaining) when
/// over, and is counted as such; its local-cache step again without a local cache.
#[tokio::test]
async fn a_shadow_rule_over_its_limit_answers_ok() {
    for setup in every_setup(1_000_000) {
        let cache = near_then_over("shadow_local_cache", SHADOW_RULES, setup, true).await;
        let (response, added) = cache.measured(&[Hit::one(KEY4)]).await;
        let shadowed = Expected {
            code: Code::Ok,
            ..Expected::over(15, Unit::Hour, HOUR_AT_1000000)
        };
        assert_statuses(&response, &[shadowed], &format!("{setup:?}"));
        assert_eq!(added[0].shadow, 1, "{setup:?}");
    }
}

/// `TestOverLimitWithStopCacheKeyIncrementWhenOverlimitConfig` (lines 639-757): with
/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true` floodgate charges all or refused, as the
/// reference counts: when any descriptor goes over, only those are incremented. The answers,
/// the counts and the near-limit stats are the reference's at every step, in memory, under
/// floodgate's keys and under the reference's (its two round trips): in the last, `key4`
/// (within its limit) is left at 13, and its near-limit hit is counted as the reference counts
/// it, from 11 to 13 (its count less the hits it held back, lines 211-212), while `key5` (the
/// one that goes over) goes to 15. The local cache's stats: not applicable.
#[tokio::test]
async fn stop_increment_when_over_limit_charges_only_the_refused_hits() {
    let semantics = Semantics::REFERENCE.with_stop_increment_when_over_limit(true);
    assert_eq!(semantics.charging, Charging::AllOrRefused);
    for backend in Backend::WITH_REFERENCE_KEYS {
        let setup = Setup {
            backend,
            charging: semantics.charging,
            check_only: semantics.check_only,
            now_seconds: 1_000_000,
        };
        let what = format!("{setup:?}");
        let cache = Cache::start("stop_increment", STOP_RULES, setup).await;
        cache.raise(KEY4, (0, 10), 15).await;
        cache.raise(KEY5, (0, 10), 14).await;
        let (response, added) = cache
            .measured(&[Hit::new(KEY4, 1), Hit::new(KEY5, 1)])
            .await;
        assert_statuses(
            &response,
            &[
                Expected::ok(15, Unit::Hour, 4, HOUR_AT_1000000),
                Expected::ok(14, Unit::Hour, 3, HOUR_AT_1000000),
            ],
            &what,
        );
        assert_eq!(added, [stats(1, 0, 0), stats(1, 0, 0)], "{what}");

        // 11 → 13 each: near the limit (12 of 15, 11 of 14).
        let both_two = [Hit::new(KEY4, 2), Hit::new(KEY5, 2)];
        let (response, added) = cache.measured(&both_two).await;
        assert_statuses(
            &response,
            &[
                Expected::ok(15, Unit::Hour, 2, HOUR_AT_1000000),
                Expected::ok(14, Unit::Hour, 1, HOUR_AT_1000000),
            ],
            &what,
        );
        assert_eq!(added, [stats(1, 0, 1), stats(1, 0, 2)], "{what}");

        // key5 would go over (13 + 2 > 14): the request is rejected, key4 is shown as it was.
        let (response, added) = cache.measured(&both_two).await;
        assert_statuses(
            &response,
            &[
                Expected::ok(15, Unit::Hour, 2, HOUR_AT_1000000),
                Expected::over(14, Unit::Hour, HOUR_AT_1000000),
            ],
            &what,
        );
        // key4's near-limit hits: 1 (its NearLimit 1 → 2, line 751), from 13 − 2 to 13, the
        // count `INCRBY … 0` answered less the hits held back; key5's 1 (2 → 3, line 756).
        assert_eq!(added, [stats(1, 0, 1), stats(0, 1, 1)], "{what}");

        // key5 went over to 15, as the reference's increment of it: one more hit is refused;
        // key4 was left at 13 and still has 2.
        let response = cache.do_limit(&[Hit::new(KEY5, 1)]).await;
        assert_statuses(
            &response,
            &[Expected::over(14, Unit::Hour, HOUR_AT_1000000)],
            &what,
        );
        let response = cache.do_limit(&[Hit::new(KEY4, 2)]).await;
        assert_statuses(
            &response,
            &[Expected::ok(15, Unit::Hour, 0, HOUR_AT_1000000)],
            &what,
        );
    }
}
