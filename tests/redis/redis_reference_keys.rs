//! envoyproxy/ratelimit's counters on a real redis-server (`--redis-counters reference`): every
//! key floodgate writes for a fixed window is the one the reference's code writes, its commands
//! renew the key's expiry on every hit, and a reference pod and floodgate count together on one
//! Redis. The reference is at f2fb157 (`/work/.mirror` snapshot of envoyproxy/ratelimit); each
//! expected key cites the Go that writes it:
//!
//! - `src/limiter/cache_key.go` lines 62-82: `prefix + domain + "_"`, then `key + "_" + value +
//!   "_"` per entry (a `share_threshold` pattern in place of the value, lines 69-76), then
//!   `(now/divider)*divider`;
//! - `src/utils/utilities.go` lines 20-36: `UnitToDivider`, MONTH 30 days, YEAR 365 days;
//! - `src/redis/fixed_cache_impl.go` lines 35-38 (`INCRBY key hits`, `EXPIRE key seconds`) and
//!   168-171 (the seconds: the divider plus `JitterRand.Int63n(EXPIRATION_JITTER_MAX_SECONDS)`);
//! - its tests name the same keys: `test/limiter/base_limiter_test.go` (`TestGenerateCacheKeys*`)
//!   and `test/redis/fixed_cache_impl_test.go` (`TestRedis`, lines 70-119).

use std::sync::Arc;

use floodgate::core::arithmetic::algorithm::CheckRule;
use floodgate::core::decision::charging::Charging;
use floodgate::core::decision::plan::PlanSettings;
use floodgate::core::decision::response::Response;
use floodgate::core::decision::status::Code;
use floodgate::core::ground::time::{ManualClock, MICROS_PER_SECOND};
use floodgate::core::policy::config::{load, LoadOptions, SourceFile};
use floodgate::core::policy::request::Entry;
use floodgate::core::policy::request::{Descriptor, Request};
use floodgate::core::policy::rules::RuleSet;
use floodgate::engine::limiter::{Limiter, LimiterSettings};
use floodgate::store::redis::{RedisOptions, RedisStore, ReferenceCounters};
use floodgate::store::Store;
use floodgate_testkit::redis::{scan_keys, RedisServer};
use redis::aio::MultiplexedConnection;

/// The reference's divider of each unit, in seconds (`UnitToDivider`).
pub(crate) const MINUTE: i64 = 60;
pub(crate) const HOUR: i64 = 3_600;
const DAY: i64 = 86_400;
pub(crate) const WEEK: i64 = 7 * DAY;
const MONTH: i64 = 30 * DAY;
const YEAR: i64 = 365 * DAY;

/// The rules of `TestRedis` and `TestGenerateCacheKeysWithShareThreshold`, plus a rule per
/// longer unit and two whose keys meet at `_` (`d_a_b_c_…`).
const RULES: &str = r#"
domain: domain
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
  - key: weekly
    rate_limit: {unit: week, requests_per_unit: 10}
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 1000}
  - key: yearly
    rate_limit: {unit: year, requests_per_unit: 10}
  - key: files
    value: "files/*"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: parent
    value: value1
    descriptors:
      - key: files
        value: "nested/*"
        share_threshold: true
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: a_b
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token_bucket}
  - key: key4
    value: value4
    rate_limit: {unit: hour, requests_per_unit: 15}
  - key: key5
    value: value5
    rate_limit: {unit: hour, requests_per_unit: 14}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
"#;

/// 2024-02-28T00:00:00Z: February 2024 (29 days) began at 1 706 745 600.
const FEBRUARY_28_2024: i64 = 1_709_078_400;
const FEBRUARY_1_2024: i64 = 1_706_745_600;

pub(crate) struct Setup {
    pub prefix: &'static str,
    pub jitter: u64,
    pub calendar_months: bool,
}

pub(crate) const PLAIN: Setup = Setup {
    prefix: "",
    jitter: 0,
    calendar_months: false,
};

/// A limiter on `server` counting under the reference's keys, its clock at `seconds` (+0.25 s).
async fn limiter_on(
    server: &RedisServer,
    setup: &Setup,
    seconds: i64,
) -> (Limiter<RedisStore>, Arc<ManualClock>) {
    charging_on(server, setup, seconds, Charging::EveryDescriptor).await
}

/// [`limiter_on`], charging as `charging` says.
pub(crate) async fn charging_on(
    server: &RedisServer,
    setup: &Setup,
    seconds: i64,
    charging: Charging,
) -> (Limiter<RedisStore>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(seconds * MICROS_PER_SECOND + 250_000));
    let mut options = server.options(Some(clock.clone()));
    options.charging = charging;
    options.reference_counters = Some(ReferenceCounters {
        key_prefix: setup.prefix.to_owned(),
        expiration_jitter_max_seconds: setup.jitter,
        per_second: None,
    });
    let store = connect(&options).await;
    let limiter = Limiter::new(rules(setup.calendar_months), store, door_settings());
    (limiter, clock)
}

/// The door's check rule, which these keys come with: a check passes within the limit.
pub(crate) fn door_settings() -> LimiterSettings {
    LimiterSettings {
        plan: PlanSettings {
            check_only: CheckRule::WithinLimit,
            ..PlanSettings::default()
        },
        ..LimiterSettings::default()
    }
}

pub(crate) async fn connect(options: &RedisOptions) -> RedisStore {
    RedisStore::connect(options)
        .await
        .unwrap_or_else(|error| panic!("cannot connect the store: {error}"))
}

pub(crate) fn rules(calendar_months: bool) -> RuleSet {
    let options = LoadOptions {
        calendar_months,
        ..LoadOptions::default()
    };
    let file = SourceFile {
        name: "domain.yaml".into(),
        text: RULES.into(),
    };
    load(&[file], &options).unwrap_or_else(|errors| panic!("the rules do not load: {errors}"))
}

/// One descriptor of `entries` with `hits` (`hits_addend`).
pub(crate) fn descriptor(entries: &[(&str, &str)], hits: u64) -> Descriptor {
    Descriptor {
        hits_addend: Some(hits),
        ..Descriptor::new(
            entries
                .iter()
                .map(|(key, value)| Entry::new(*key, *value))
                .collect(),
        )
    }
}

pub(crate) async fn decide<S: Store>(
    limiter: &Limiter<S>,
    descriptors: Vec<Descriptor>,
) -> Response {
    let request = Request {
        domain: "domain".to_owned(),
        descriptors,
        hits_addend: 0,
    };
    limiter
        .decide(&request)
        .await
        .unwrap_or_else(|error| panic!("decide: {error}"))
}

/// The codes of one request of one descriptor per `(entries, hits)`.
pub(crate) async fn codes(
    limiter: &Limiter<RedisStore>,
    asked: &[(&[(&str, &str)], u64)],
) -> Vec<Code> {
    let descriptors = asked
        .iter()
        .map(|(entries, hits)| descriptor(entries, *hits))
        .collect();
    let response = decide(limiter, descriptors).await;
    response.statuses.iter().map(|status| status.code).collect()
}

pub(crate) async fn count_at(inspector: &mut MultiplexedConnection, key: &str) -> Option<i64> {
    redis::cmd("GET")
        .arg(key)
        .query_async(inspector)
        .await
        .unwrap_or_else(|error| panic!("GET {key}: {error}"))
}

pub(crate) async fn ttl_of(inspector: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("TTL")
        .arg(key)
        .query_async(inspector)
        .await
        .unwrap_or_else(|error| panic!("TTL {key}: {error}"))
}

/// A reference pod's call for one descriptor, as `pipelineAppend` sends it
/// (`fixed_cache_impl.go` lines 35-38: `INCRBY key hits`, then `EXPIRE key seconds`, in one
/// pipeline): the count `INCRBY` answered.
pub(crate) async fn reference_pod_hits(
    inspector: &mut MultiplexedConnection,
    key: &str,
    hits: u64,
    expiration_seconds: i64,
) -> i64 {
    let (count,): (i64,) = redis::pipe()
        .cmd("INCRBY")
        .arg(key)
        .arg(hits)
        .cmd("EXPIRE")
        .arg(key)
        .arg(expiration_seconds)
        .ignore()
        .query_async(inspector)
        .await
        .unwrap_or_else(|error| panic!("the reference pod's pipeline failed: {error}"));
    count
}

/// `TestRedis` (`fixed_cache_impl_test.go` lines 62-119) on a real Redis: at 1234 a SECOND
/// limit writes `domain_key_value_1234` (line 70) and a nested MINUTE limit
/// `domain_key2_value2_subkey2_subvalue2_1200` (line 87); at 1 000 000 an HOUR limit checked
/// with `hits_addend: 0` writes `domain_key3_value3_997200` (line 115, `INCRBY … 0`) and the
/// DAY limit below it `domain_key3_value3_subkey3_subvalue3_950400` (line 118). Each `EXPIRE`
/// is a whole divider (lines 71, 89, 117, 120: 1, 60, 3600, 86400).
#[tokio::test]
async fn keys_are_the_references_for_each_unit() {
    let server = RedisServer::start();
    let mut inspector = server.inspector().await;
    let (limiter, clock) = limiter_on(&server, &PLAIN, 1_234).await;
    let key_value: &[(&str, &str)] = &[("key", "value")];
    let nested: &[(&str, &str)] = &[("key2", "value2"), ("subkey2", "subvalue2")];
    assert_eq!(
        codes(&limiter, &[(key_value, 1), (nested, 1)]).await,
        [Code::Ok, Code::Ok]
    );
    clock.set(1_000_000 * MICROS_PER_SECOND);
    let hourly: &[(&str, &str)] = &[("key3", "value3")];
    let daily: &[(&str, &str)] = &[("key3", "value3"), ("subkey3", "subvalue3")];
    assert_eq!(
        codes(&limiter, &[(hourly, 0), (daily, 1)]).await,
        [Code::Ok, Code::Ok]
    );
    let now = FEBRUARY_28_2024;
    clock.set(now * MICROS_PER_SECOND);
    assert_eq!(
        codes(
            &limiter,
            &[
                (&[("weekly", "w")], 2),
                (&[("monthly", "m")], 3),
                (&[("yearly", "y")], 4),
            ]
        )
        .await,
        [Code::Ok; 3]
    );
    let expected = [
        (
            "domain_key2_value2_subkey2_subvalue2_1200".to_owned(),
            1,
            MINUTE,
        ),
        ("domain_key3_value3_997200".to_owned(), 0, HOUR),
        (
            "domain_key3_value3_subkey3_subvalue3_950400".to_owned(),
            1,
            DAY,
        ),
        (format!("domain_weekly_w_{}", now - now % WEEK), 2, WEEK),
        (format!("domain_monthly_m_{}", now - now % MONTH), 3, MONTH),
        (format!("domain_yearly_y_{}", now - now % YEAR), 4, YEAR),
    ];
    let mut keys = scan_keys(&mut inspector, "*").await;
    keys.sort();
    let mut names: Vec<String> = expected.iter().map(|(key, _, _)| key.clone()).collect();
    // The SECOND key (a 1 s TTL) may be gone already; it was written, its count is below.
    keys.retain(|key| key != "domain_key_value_1234");
    names.sort();
    assert_eq!(keys, names, "every key as the reference writes it");
    for (key, count, divider) in &expected {
        assert_eq!(count_at(&mut inspector, key).await, Some(*count), "{key}");
        let ttl = ttl_of(&mut inspector, key).await;
        assert!(
            (divider - 1..=*divider).contains(&ttl),
            "{key}: TTL {ttl}, the reference sets {divider}"
        );
    }
}

/// SECOND keys live a second of Redis's own time, too short to read back reliably; so a
/// reference pod counts first under the key the reference writes, and floodgate's answer shows
/// that it counted on top: `domain_key_value_1234` (`TestRedis` line 70) and, with
/// `CACHE_KEY_PREFIX=prefix:`, `prefix:domain_key_value_1234` (`TestGenerateCacheKeysPrefix`).
#[tokio::test]
async fn the_cache_key_prefix_comes_first() {
    let server = RedisServer::start();
    let mut inspector = server.inspector().await;
    for (prefix, key) in [
        ("", "domain_key_value_1234"),
        ("prefix:", "prefix:domain_key_value_1234"),
    ] {
        let setup = Setup { prefix, ..PLAIN };
        let (limiter, _) = limiter_on(&server, &setup, 1_234).await;
        reference_pod_hits(&mut inspector, key, 2, 60).await;
        let response = decide(&limiter, vec![descriptor(&[("key", "value")], 7)]).await;
        assert_eq!(response.statuses[0].limit_remaining, 1, "{key}: 10 - 2 - 7");
    }
}

/// `TestGenerateCacheKeysWithShareThreshold` (`base_limiter_test.go`): every value a
/// `share_threshold` wildcard matches counts under the pattern, `domain_files_files/*_1234`,
/// and nested `domain_parent_value1_files_nested/*_1234` (`cache_key.go` lines 69-76). A
/// reference pod counted 5 under each first (SECOND keys: see above).
#[tokio::test]
async fn shared_wildcards_count_under_their_pattern() {
    let server = RedisServer::start();
    let mut inspector = server.inspector().await;
    let (limiter, _) = limiter_on(&server, &PLAIN, 1_234).await;
    for key in [
        "domain_files_files/*_1234",
        "domain_parent_value1_files_nested/*_1234",
    ] {
        reference_pod_hits(&mut inspector, key, 5, 60).await;
    }
    let response = decide(
        &limiter,
        vec![
            descriptor(&[("files", "files/a.pdf")], 1),
            descriptor(&[("files", "files/b.csv")], 1),
            descriptor(&[("parent", "value1"), ("files", "nested/file1.txt")], 1),
            descriptor(&[("parent", "value1"), ("files", "nested/file2.csv")], 1),
        ],
    )
    .await;
    let remaining: Vec<u32> = response
        .statuses
        .iter()
        .map(|status| status.limit_remaining)
        .collect();
    assert_eq!(
        remaining,
        [4, 3, 4, 3],
        "two keys, each shared by two values"
    );
}

/// With `USE_CALENDAR_MONTH_RATE_LIMIT`, a MONTH key is named by the month's first second
/// (00:00 UTC on the 1st) and expires with the month (the reference's PR #1206:
/// `MonthStartUnix`, `MonthExpirationSeconds`): on 2024-02-28, two days.
#[tokio::test]
async fn calendar_months_name_the_month_and_expire_with_it() {
    let server = RedisServer::start();
    let mut inspector = server.inspector().await;
    let setup = Setup {
        calendar_months: true,
        ..PLAIN
    };
    let (limiter, _) = limiter_on(&server, &setup, FEBRUARY_28_2024).await;
    assert_eq!(
        codes(&limiter, &[(&[("monthly", "m")], 5)]).await,
        [Code::Ok]
    );
    let key = format!("domain_monthly_m_{FEBRUARY_1_2024}");
    assert_eq!(
        scan_keys(&mut inspector, "*").await,
        std::slice::from_ref(&key)
    );
    assert_eq!(count_at(&mut inspector, &key).await, Some(5));
    let ttl = ttl_of(&mut inspector, &key).await;
    assert!((2 * DAY - 1..=2 * DAY).contains(&ttl), "TTL {ttl}");
}

/// `EXPIRATION_JITTER_MAX_SECONDS`: each `EXPIRE` is the divider plus 0 to the jitter
/// (excluded), `fixed_cache_impl.go` lines 168-171, whatever the random draw.
#[tokio::test]
async fn expiry_jitter_stays_within_its_bound() {
    let server = RedisServer::start();
    let mut inspector = server.inspector().await;
    let setup = Setup {
        jitter: 300,
        ..PLAIN
    };
    let (limiter, _) = limiter_on(&server, &setup, 1_000_000).await;
    let values: Vec<String> = (0..20).map(|n| format!("v{n}")).collect();
    let descriptors = values
        .iter()
        .map(|value| descriptor(&[("weekly", value.as_str())], 1))
        .collect();
    decide(&limiter, descriptors).await;
    let start = 1_000_000 - 1_000_000 % WEEK;
    for value in &values {
        let ttl = ttl_of(&mut inspector, &format!("domain_weekly_{value}_{start}")).await;
        assert!(
            (WEEK - 1..WEEK + 300).contains(&ttl),
            "TTL {ttl}: a week plus less than 300 s"
        );
    }
}

/// A rolling swap: a reference pod and floodgate on one Redis see one count, each way, and a
/// monthly budget goes on where it stood. The reference pod is stood in for by its own
/// commands, `INCRBY` then `EXPIRE` in one pipeline (`fixed_cache_impl.go` lines 35-38).
#[tokio::test]
async fn a_reference_pod_and_floodgate_count_together() {
    let server = RedisServer::start();
    let mut inspector = server.inspector().await;
    let now = FEBRUARY_28_2024;
    let (limiter, _) = limiter_on(&server, &PLAIN, now).await;
    let key = format!("domain_monthly_tenant-1_{}", now - now % MONTH);
    // Before the swap the reference's pods have spent 900 of the month's 1000.
    assert_eq!(
        reference_pod_hits(&mut inspector, &key, 900, MONTH + 17).await,
        900
    );
    let tenant: &[(&str, &str)] = &[("monthly", "tenant-1")];
    assert_eq!(codes(&limiter, &[(tenant, 100)]).await, [Code::Ok]);
    assert_eq!(
        codes(&limiter, &[(tenant, 0)]).await,
        [Code::Ok],
        "at 1000: a check passes"
    );
    // floodgate's hits are the reference pod's count too: it is over with one more.
    let after = reference_pod_hits(&mut inspector, &key, 1, MONTH).await;
    assert_eq!(after, 1_001, "the reference's over: after > limit");
    assert_eq!(codes(&limiter, &[(tenant, 0)]).await, [Code::OverLimit]);
    assert_eq!(count_at(&mut inspector, &key).await, Some(1_001));
    // The other way: floodgate first, then a reference pod's INCRBY answers the sum.
    let fresh: &[(&str, &str)] = &[("monthly", "tenant-2")];
    assert_eq!(codes(&limiter, &[(fresh, 40)]).await, [Code::Ok]);
    let key2 = format!("domain_monthly_tenant-2_{}", now - now % MONTH);
    assert_eq!(
        reference_pod_hits(&mut inspector, &key2, 2, MONTH).await,
        42
    );
}

/// Every call renews the key's expiry, as the reference's `EXPIRE` on every `INCRBY`: also a
/// check (`hits_addend: 0`, `INCRBY key 0`, `TestRedis` line 115), which counts nothing.
#[tokio::test]
async fn every_hit_renews_the_expiry_checks_included() {
    let server = RedisServer::start();
    let mut inspector = server.inspector().await;
    let (limiter, _) = limiter_on(&server, &PLAIN, 1_000_000).await;
    let key = "domain_key3_value3_997200";
    let hourly: &[(&str, &str)] = &[("key3", "value3")];
    for hits in [1, 0] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(4)
            .arg("EX")
            .arg(5)
            .query_async(&mut inspector)
            .await
            .unwrap_or_else(|error| panic!("SET: {error}"));
        assert_eq!(codes(&limiter, &[(hourly, hits)]).await, [Code::Ok]);
        let ttl = ttl_of(&mut inspector, key).await;
        assert!((HOUR - 1..=HOUR).contains(&ttl), "hits {hits}: TTL {ttl}");
        assert_eq!(count_at(&mut inspector, key).await, Some(4 + hits as i64));
    }
}

/// The reference's arithmetic on its counts: over iff the count after the hits passes the
/// limit; a check at the limit passes, one beyond it does not; hits over the limit are
/// counted all the same (`base_limiter.go` line 104).
#[tokio::test]
async fn over_only_past_the_limit_and_every_hit_counted() {
    let server = RedisServer::start();
    let mut inspector = server.inspector().await;
    let (limiter, _) = limiter_on(&server, &PLAIN, 1_000_000).await;
    let hourly: &[(&str, &str)] = &[("key3", "value3")];
    assert_eq!(codes(&limiter, &[(hourly, 10)]).await, [Code::Ok]);
    assert_eq!(codes(&limiter, &[(hourly, 0)]).await, [Code::Ok]);
    assert_eq!(codes(&limiter, &[(hourly, 5)]).await, [Code::OverLimit]);
    assert_eq!(codes(&limiter, &[(hourly, 0)]).await, [Code::OverLimit]);
    assert_eq!(
        count_at(&mut inspector, "domain_key3_value3_997200").await,
        Some(15)
    );
}

/// The reference's keys join with `_`, so `("a_b", "c")` and `("a", "b_c")` both count under
/// `domain_a_b_c_<window>`: one limit of 3 for both. Sharing the reference's counters shares
/// this too; `--redis-counters floodgate` keeps them apart.
#[tokio::test]
async fn underscores_collide_as_in_the_reference() {
    let server = RedisServer::start();
    let mut inspector = server.inspector().await;
    let (limiter, _) = limiter_on(&server, &PLAIN, 1_000_000).await;
    let left: &[(&str, &str)] = &[("a_b", "c")];
    let right: &[(&str, &str)] = &[("a", "b_c")];
    assert_eq!(codes(&limiter, &[(left, 2)]).await, [Code::Ok]);
    assert_eq!(codes(&limiter, &[(right, 2)]).await, [Code::OverLimit]);
    let start = 1_000_000 - 1_000_000 % MINUTE;
    assert_eq!(
        scan_keys(&mut inspector, "*").await,
        [format!("domain_a_b_c_{start}")]
    );
}

/// A request whose descriptors mix a fixed window and a token bucket: the first counts under
/// the reference's key, the second under floodgate's (the reference has no buckets), and the
/// answer joins both.
#[tokio::test]
async fn rules_the_reference_cannot_have_keep_floodgates_keys() {
    let server = RedisServer::start();
    let mut inspector = server.inspector().await;
    let (limiter, _) = limiter_on(&server, &PLAIN, 1_000_000).await;
    let hourly: &[(&str, &str)] = &[("key3", "value3")];
    let bucket: &[(&str, &str)] = &[("bucket", "b")];
    assert_eq!(
        codes(&limiter, &[(hourly, 1), (bucket, 2)]).await,
        [Code::Ok, Code::Ok]
    );
    assert_eq!(
        codes(&limiter, &[(hourly, 1), (bucket, 1)]).await,
        [Code::Ok, Code::OverLimit]
    );
    let keys = scan_keys(&mut inspector, "*").await;
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert!(
        keys.contains(&"domain_key3_value3_997200".to_owned()),
        "{keys:?}"
    );
    assert!(
        keys.iter()
            .any(|key| key.starts_with("floodgate:{domain}:")),
        "{keys:?}"
    );
    assert_eq!(
        count_at(&mut inspector, "domain_key3_value3_997200").await,
        Some(2)
    );
}

/// `is_negative_hits` (floodgate's; the reference does not read it) gives hits back under the
/// reference's key, never below an empty count, and renews the expiry.
#[tokio::test]
async fn hits_given_back_stop_at_zero() {
    let server = RedisServer::start();
    let mut inspector = server.inspector().await;
    let (limiter, _) = limiter_on(&server, &PLAIN, 1_000_000).await;
    let key = "domain_key3_value3_997200";
    assert_eq!(
        reference_pod_hits(&mut inspector, key, 3, 20).await,
        3,
        "a short expiry, renewed below"
    );
    let give_back = |hits| Descriptor {
        is_negative_hits: true,
        ..descriptor(&[("key3", "value3")], hits)
    };
    let response = decide(&limiter, vec![give_back(2)]).await;
    assert_eq!(response.statuses[0].limit_remaining, 9);
    let response = decide(&limiter, vec![give_back(5)]).await;
    assert_eq!(response.statuses[0].limit_remaining, 10);
    assert_eq!(count_at(&mut inspector, key).await, Some(0));
    let ttl = ttl_of(&mut inspector, key).await;
    assert!((HOUR - 1..=HOUR).contains(&ttl), "TTL {ttl}");
}

/// `REDIS_PERSECOND`: SECOND limits count in the per-second Redis, the others in the main
/// one (`fixed_cache_impl.go` lines 173-186).
#[tokio::test]
async fn second_limits_count_in_the_per_second_redis() {
    let main = RedisServer::start();
    let per_second = RedisServer::start();
    let clock = Arc::new(ManualClock::new(1_234 * MICROS_PER_SECOND));
    let mut options = main.options(Some(clock.clone()));
    options.charging = Charging::EveryDescriptor;
    options.reference_counters = Some(ReferenceCounters {
        key_prefix: String::new(),
        expiration_jitter_max_seconds: 0,
        per_second: Some(Box::new(per_second.options(None))),
    });
    let limiter = Limiter::new(
        rules(false),
        connect(&options).await,
        LimiterSettings::default(),
    );
    let key_value: &[(&str, &str)] = &[("key", "value")];
    let nested: &[(&str, &str)] = &[("key2", "value2"), ("subkey2", "subvalue2")];
    let mut main_inspector = main.inspector().await;
    let mut per_second_inspector = per_second.inspector().await;
    // A reference pod counted 5 in the per-second Redis (SECOND keys: see above).
    reference_pod_hits(&mut per_second_inspector, "domain_key_value_1234", 5, 60).await;
    let response = decide(
        &limiter,
        vec![descriptor(key_value, 4), descriptor(nested, 1)],
    )
    .await;
    assert_eq!(response.statuses[0].limit_remaining, 1, "10 - 5 - 4");
    assert_eq!(
        scan_keys(&mut main_inspector, "*").await,
        ["domain_key2_value2_subkey2_subvalue2_1200"]
    );
}

/// The reference's keys cannot be charged all or nothing: such a store is refused, with what
/// to do.
#[tokio::test]
async fn all_or_nothing_is_refused_with_the_references_keys() {
    let server = RedisServer::start();
    let mut options = server.options(None);
    options.charging = Charging::AllOrNothing;
    options.reference_counters = Some(ReferenceCounters::new(""));
    let Err(error) = RedisStore::connect(&options).await else {
        panic!("a store counting under the reference's keys, all or nothing");
    };
    assert!(
        error.to_string().contains("--charge every-descriptor"),
        "{error}"
    );
}

/// On a Redis Cluster each key's `INCRBY` and `EXPIRE` go to the node that owns it (a pipeline
/// may not cross slots): a request whose keys live on several nodes counts each where it lives.
#[tokio::test]
async fn on_a_cluster_each_key_counts_on_its_own_node() {
    let cluster = floodgate_testkit::redis::RedisCluster::start(3);
    let clock = Arc::new(ManualClock::new(1_000_000 * MICROS_PER_SECOND));
    let mut options = cluster.options(Some(clock.clone()));
    options.charging = Charging::EveryDescriptor;
    options.reference_counters = Some(ReferenceCounters {
        expiration_jitter_max_seconds: 0,
        ..ReferenceCounters::new("")
    });
    let limiter = Limiter::new(
        rules(false),
        connect(&options).await,
        LimiterSettings::default(),
    );
    let values: Vec<String> = (0..12).map(|n| format!("tenant-{n}")).collect();
    for hits in [1, 2] {
        let descriptors = values
            .iter()
            .map(|value| descriptor(&[("weekly", value.as_str())], hits))
            .collect();
        let response = decide(&limiter, descriptors).await;
        assert!(response
            .statuses
            .iter()
            .all(|status| status.code == Code::Ok));
    }
    let start = 1_000_000 - 1_000_000 % WEEK;
    let per_node = cluster.keys_per_node("*").await;
    assert!(
        per_node.iter().filter(|keys| !keys.is_empty()).count() > 1,
        "the keys spread over the nodes: {per_node:?}"
    );
    for value in &values {
        let key = format!("domain_weekly_{value}_{start}");
        let owner = cluster.owner_of(cluster.slot_of(&key));
        let mut inspector = cluster.nodes[owner].inspector().await;
        assert_eq!(count_at(&mut inspector, &key).await, Some(3), "{key}");
    }
}

/// The reference's keys decide as the memory store does when it charges every descriptor (the
/// reference's charging): the same random charges, on one clock, get the same codes, remaining
/// counts and resets from both (checks: `redis_reference_stop.rs`, whose requests have them).
#[tokio::test]
async fn the_references_keys_decide_as_the_memory_store_charging_every_descriptor() {
    let choices: [&[(&str, &str)]; 5] = [
        &[("key3", "value3")],
        &[("key3", "value3"), ("subkey3", "subvalue3")],
        &[("a_b", "x")],
        &[("a", "x")],
        &[("key2", "value2"), ("subkey2", "subvalue2")],
    ];
    let draw = |next: &mut dyn FnMut(u64) -> u64| {
        let count = 1 + next(3);
        (0..count)
            .map(|_| descriptor(choices[next(5) as usize], 1 + next(4)))
            .collect()
    };
    decide_alike(Charging::EveryDescriptor, 0x9e37_79b9_7f4a_7c15, draw).await;
}

/// 300 requests, drawn by `draw` from a generator seeded with `seed`, decided on the
/// reference's keys and by the memory store, both charging as `charging` says, with the door's
/// check rule, on one clock: the same code and statuses from both, asserted step by step. Now
/// and then a minute passes (the MINUTE windows turn, the HOUR ones do not). The answers.
pub(crate) async fn decide_alike(
    charging: Charging,
    seed: u64,
    mut draw: impl FnMut(&mut dyn FnMut(u64) -> u64) -> Vec<Descriptor>,
) -> Vec<Response> {
    use floodgate::store::memory::MemoryStore;
    let server = RedisServer::start();
    let (redis_limiter, clock) = charging_on(&server, &PLAIN, 1_000_000, charging).await;
    let memory = MemoryStore::new(10_000, clock.clone()).charging(charging);
    let memory_limiter = Limiter::new(rules(false), memory, door_settings());
    let mut next = xorshift(seed);
    let mut answers = Vec::new();
    for step in 0..300 {
        let descriptors = draw(&mut next);
        let from_redis = decide(&redis_limiter, descriptors.clone()).await;
        let from_memory = decide(&memory_limiter, descriptors).await;
        assert_eq!(
            from_redis.overall_code, from_memory.overall_code,
            "step {step}"
        );
        assert_eq!(from_redis.statuses, from_memory.statuses, "step {step}");
        if next(25) == 0 {
            clock.advance(60 * MICROS_PER_SECOND);
        }
        answers.push(from_redis);
    }
    answers
}

/// A small deterministic generator from `seed`: each call a number below its bound.
pub(crate) fn xorshift(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |bound: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % bound
    }
}
