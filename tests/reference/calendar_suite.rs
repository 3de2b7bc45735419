//! The reference's calendar-month cases (`USE_CALENDAR_MONTH_RATE_LIMIT`), from its
//! `test/utils/utilities_test.go` as envoyproxy/ratelimit's PR #1206 added them (after the
//! commit the rest of the suite is pinned to), each as behaviour: what floodgate answers at the
//! case's instant with `--calendar-months` on or off. `CalculateReset` is a descriptor's
//! `duration_until_reset`, `MonthStartUnix` which requests share a counter, `ExpirationSeconds`
//! the TTL of the counter's Redis key, read from a real redis-server whose clock libfaketime
//! holds at the instant (the script reads "now" from Redis `TIME`).

use std::sync::Arc;

use floodgate::core::decision::status::{Code, DescriptorStatus};
use floodgate::core::ground::time::{ManualClock, Micros, MICROS_PER_SECOND};
use floodgate::core::policy::config::{load, LoadOptions, SourceFile};
use floodgate::core::policy::request::Entry;
use floodgate::core::policy::request::{Descriptor, Request};
use floodgate::engine::limiter::{Limiter, LimiterSettings};
use floodgate::store::memory::MemoryStore;
use floodgate::store::Store;
use floodgate_testkit::faketime::FakeClock;
use floodgate_testkit::redis::{scan_keys, RedisServer};

const HOUR: i64 = 3_600;
const DAY: i64 = 24 * HOUR;
const THIRTY_DAYS: i64 = 30 * DAY;

/// The reference's instants (`date -u -d … +%s`).
const JANUARY_31_2024_2300: i64 = 1_706_742_000;
const FEBRUARY_28_2024: i64 = 1_709_078_400;
/// The same instant as libfaketime reads it (in UTC: the processes get `TZ=UTC`).
const FEBRUARY_28_2024_UTC: &str = "2024-02-28 00:00:00";
const JANUARY_15_2024_1230: i64 = 1_705_321_800;
/// 2024-02-01T05:00:00+09:00 (JST), which is still January in UTC.
const FEBRUARY_1_2024_0500_JST: i64 = 1_706_731_200;
const FEBRUARY_1_2024: i64 = 1_706_745_600;

/// One `unit` limit of `limit` per window, loaded with calendar months on or off.
fn rules(unit: &str, limit: u32, calendar_months: bool) -> floodgate::core::policy::rules::RuleSet {
    let text = format!(
        "domain: billing\ndescriptors:\n  - key: tenant\n    rate_limit: {{unit: {unit}, \
         requests_per_unit: {limit}}}\n"
    );
    let options = LoadOptions {
        calendar_months,
        ..LoadOptions::default()
    };
    load(
        &[SourceFile {
            name: "billing.yaml".into(),
            text,
        }],
        &options,
    )
    .unwrap_or_else(|errors| panic!("the rules do not load: {errors}"))
}

fn request() -> Request {
    Request {
        domain: "billing".to_owned(),
        descriptors: vec![Descriptor::new(vec![Entry::new("tenant", "acme")])],
        hits_addend: 0,
    }
}

async fn decide<S: Store>(limiter: &Limiter<S>) -> DescriptorStatus {
    let response = limiter
        .decide(&request())
        .await
        .unwrap_or_else(|error| panic!("decide: {error}"));
    response
        .statuses
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no status"))
}

/// A limiter on the memory store, its clock at `seconds`.
fn at(
    seconds: i64,
    unit: &str,
    limit: u32,
    calendar_months: bool,
) -> (Limiter<MemoryStore>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(seconds * MICROS_PER_SECOND));
    let store = MemoryStore::new(1_000, clock.clone());
    let limiter = Limiter::new(
        rules(unit, limit, calendar_months),
        store,
        LimiterSettings::default(),
    );
    (limiter, clock)
}

/// `duration_until_reset` at `seconds` of a fresh MONTH limit, in whole seconds.
async fn reset_at(seconds: i64, calendar_months: bool) -> i64 {
    let (limiter, _) = at(seconds, "month", 5, calendar_months);
    let status = decide(&limiter).await;
    status
        .duration_until_reset
        .map(|reset: Micros| reset / MICROS_PER_SECOND)
        .unwrap_or_else(|| panic!("no reset in {status:?}"))
}

/// TestCalculateResetMonthEndOfMonth: an hour before the February rollover, an hour to go.
#[tokio::test]
async fn calculate_reset_month_end_of_month() {
    assert_eq!(reset_at(JANUARY_31_2024_2300, true).await, HOUR);
}

/// TestCalculateResetMonthDisabledUsesLegacyDivider: off, the fixed 30-day divider.
#[tokio::test]
async fn calculate_reset_month_disabled_uses_legacy_divider() {
    let now = JANUARY_31_2024_2300;
    assert_eq!(reset_at(now, false).await, THIRTY_DAYS - now % THIRTY_DAYS);
}

/// TestCalculateResetMonthLeapYear: 2024-02-28 00:00 is two days before March (a 29-day
/// February).
#[tokio::test]
async fn calculate_reset_month_leap_year() {
    assert_eq!(reset_at(FEBRUARY_28_2024, true).await, 2 * DAY);
}

/// TestMonthStartUnix: keys are bucketed by the UTC calendar month: mid-January and an instant
/// that is February in Tokyo but January in UTC share one counter; February 1st UTC starts
/// another.
#[tokio::test]
async fn month_start_unix() {
    let (limiter, clock) = at(JANUARY_15_2024_1230, "month", 1, true);
    assert_eq!(decide(&limiter).await.code, Code::Ok);
    clock.set(FEBRUARY_1_2024_0500_JST * MICROS_PER_SECOND);
    let same_month = decide(&limiter).await;
    assert_eq!(same_month.code, Code::OverLimit, "still January's counter");
    assert_eq!(
        same_month.duration_until_reset,
        Some((FEBRUARY_1_2024 - FEBRUARY_1_2024_0500_JST) * MICROS_PER_SECOND)
    );
    clock.set(FEBRUARY_1_2024 * MICROS_PER_SECOND);
    assert_eq!(decide(&limiter).await.code, Code::Ok, "February's counter");
}

/// The TTL (ms) of the one key a request leaves on a redis-server frozen at `utc`, for a
/// `unit` limit loaded with calendar months on or off.
async fn key_ttl_at(utc: &str, unit: &str, calendar_months: bool) -> i64 {
    let dir = floodgate_testkit::tempdir();
    let clock = FakeClock::frozen_at(dir.path(), utc);
    let redis = RedisServer::start_with_env(&clock.env());
    let store = redis.store(None).await;
    let limiter = Limiter::new(
        rules(unit, 5, calendar_months),
        store,
        LimiterSettings::default(),
    );
    assert_eq!(decide(&limiter).await.code, Code::Ok);
    let mut inspector = redis.inspector().await;
    let keys = scan_keys(&mut inspector, "*").await;
    assert_eq!(keys.len(), 1, "one counter key: {keys:?}");
    redis::cmd("PTTL")
        .arg(&keys[0])
        .query_async(&mut inspector)
        .await
        .unwrap_or_else(|error| panic!("PTTL failed: {error}"))
}

/// TestExpirationSecondsMonth: the key lives until the month ends, two days.
#[tokio::test]
async fn expiration_seconds_month() {
    assert_eq!(
        key_ttl_at(FEBRUARY_28_2024_UTC, "month", true).await,
        2 * DAY * 1_000
    );
}

/// TestExpirationSecondsMonthDisabledUsesLegacyDivider: off, a MONTH is the 30-day window. A
/// difference: the reference's key lives a whole divider (30 days) after its last hit, floodgate's
/// until its window ends (what it means no longer counts), here 19 days.
#[tokio::test]
async fn expiration_seconds_month_disabled_uses_legacy_divider() {
    let now = FEBRUARY_28_2024;
    assert_eq!(
        key_ttl_at(FEBRUARY_28_2024_UTC, "month", false).await,
        (THIRTY_DAYS - now % THIRTY_DAYS) * 1_000
    );
}

/// TestExpirationSecondsNonMonthDoesNotUseTimeSource: calendar months change only MONTH; a DAY
/// key lives a day (the reference's divider; floodgate's rest of the day, a whole day at 00:00).
#[tokio::test]
async fn expiration_seconds_non_month_does_not_use_time_source() {
    assert_eq!(
        key_ttl_at(FEBRUARY_28_2024_UTC, "day", true).await,
        DAY * 1_000
    );
}
