//! A `unit: month` limit across the end of a month, end to end: the real floodgate binary, on
//! the memory store and on a real redis-server, with every process's wall clock set by
//! libfaketime (`floodgate_testkit::faketime`). With `USE_CALENDAR_MONTH_RATE_LIMIT=true` the
//! limit runs out in the last seconds of February 2028 (a 29-day month), `duration_until_reset`
//! is the time left until March 1st, and right after midnight the allowance is whole again;
//! without it, a MONTH is 30 days from the epoch, and March 1st changes nothing.
//!
//! The clock is frozen at each instant (the test moves it between calls), so every answer is
//! exact. On the Redis store the script reads "now" from Redis `TIME`, so it is redis-server
//! that must run on the fake clock (floodgate does too, and its own clock decides nothing there);
//! the key it writes shows the window (February 1st to March 1st) and expires with it.

use std::path::{Path, PathBuf};

use floodgate::proto::rate_limit_response::Code;

use floodgate_testkit as common;
use floodgate_testkit::faketime::FakeClock;
use floodgate_testkit::redis::{scan_keys, store_flags, RedisServer};
use floodgate_testkit::rls;
use floodgate_testkit::{subdir, Floodgate};

const LIMIT: u32 = 3;

/// Two seconds before March 2028, and two seconds after.
const LAST_SECONDS_OF_FEBRUARY: &str = "2028-02-29 23:59:58";
const FIRST_SECONDS_OF_MARCH: &str = "2028-03-01 00:00:02";

/// Those two instants, and the 1st of the months around them (`date -u -d … +%s`).
const IN_FEBRUARY: i64 = 1_835_481_598;
const IN_MARCH: i64 = 1_835_481_602;
const FEBRUARY_1ST: i64 = 1_832_976_000;
const MARCH_1ST: i64 = 1_835_481_600;
const APRIL_1ST: i64 = 1_838_160_000;

/// 30-day windows from the epoch: 2028-02-29 23:59:58 lies in the one from 1 835 136 000 to
/// 1 837 728 000 (2028-03-26T00:00:00Z), which March 1st does not end.
const THIRTY_DAY_WINDOW_END: i64 = 1_837_728_000;

fn write_rules(dir: &Path) -> PathBuf {
    let config = dir.join("billing.yaml");
    let rules = format!(
        "domain: billing\ndescriptors:\n  - key: tenant\n    rate_limit: {{unit: month, \
         requests_per_unit: {LIMIT}}}\n"
    );
    std::fs::write(&config, rules).unwrap_or_else(|error| panic!("write rules: {error}"));
    config
}

async fn call(client: &mut rls::Client) -> (Code, u32, i64) {
    let response = rls::call(client, rls::request("billing", &[&[("tenant", "acme")]]))
        .await
        .unwrap_or_else(|status| panic!("call failed: {status}"));
    rls::first_outcome(&response)
}

/// What floodgate answered: LIMIT + 1 calls two seconds before March, then one call two
/// seconds after.
struct MonthEnd {
    february: Vec<(Code, u32, i64)>,
    march: (Code, u32, i64),
}

/// Starts floodgate (with `extra` flags and `env`) on `clock`, frozen in the last seconds of
/// February, spends the limit, moves the clock past midnight and calls once more. `between`
/// runs while the clock still reads February, after the calls.
async fn across_the_month_end<F: std::future::Future<Output = ()>>(
    dir: &Path,
    clock: &FakeClock,
    (extra, env): (&[&str], &[(&str, &str)]),
    between: impl FnOnce() -> F,
) -> MonthEnd {
    let config = write_rules(dir);
    let mut process_env: Vec<(String, String)> = clock.env();
    process_env.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let borrowed: Vec<(&str, &str)> = process_env
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let server = Floodgate::start_with_env(&config, extra, &borrowed, &subdir(dir, "floodgate"));
    let mut client = rls::connect(&server.grpc_url()).await;
    let mut february = Vec::new();
    for _ in 0..=LIMIT {
        february.push(call(&mut client).await);
    }
    between().await;
    clock.freeze_at(FIRST_SECONDS_OF_MARCH);
    let march = call(&mut client).await;
    MonthEnd { february, march }
}

/// February's answers when the window ends in `reset` seconds: LIMIT calls pass, counting
/// down, and the next is refused.
fn spent(reset: i64) -> Vec<(Code, u32, i64)> {
    let mut expected: Vec<(Code, u32, i64)> = (0..LIMIT)
        .rev()
        .map(|remaining| (Code::Ok, remaining, reset))
        .collect();
    expected.push((Code::OverLimit, 0, reset));
    expected
}

/// With calendar months: every answer of February resets at March 1st (2 s away); at 00:00:02
/// the allowance is whole, until April 1st.
fn assert_calendar_months(observed: &MonthEnd) {
    assert_eq!(
        observed.february,
        spent(MARCH_1ST - IN_FEBRUARY),
        "the last seconds of February"
    );
    assert_eq!(
        observed.march,
        (Code::Ok, LIMIT - 1, APRIL_1ST - IN_MARCH),
        "two seconds into March: a fresh allowance until April 1st"
    );
}

/// Without: the same calls count in the 30-day window, which March 1st does not end.
fn assert_thirty_day_months(observed: &MonthEnd) {
    assert_eq!(
        observed.february,
        spent(THIRTY_DAY_WINDOW_END - IN_FEBRUARY),
        "the last seconds of February"
    );
    assert_eq!(
        observed.march,
        (Code::OverLimit, 0, THIRTY_DAY_WINDOW_END - IN_MARCH),
        "two seconds into March: still the same 30-day window, still spent"
    );
}

const CALENDAR: (&str, &str) = ("USE_CALENDAR_MONTH_RATE_LIMIT", "true");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_months_are_calendar_months_with_use_calendar_month_rate_limit() {
    let dir = common::tempdir();
    let clock = FakeClock::frozen_at(dir.path(), LAST_SECONDS_OF_FEBRUARY);
    let observed = across_the_month_end(dir.path(), &clock, (&[], &[CALENDAR]), || async {}).await;
    assert_calendar_months(&observed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_months_are_thirty_days_without_it() {
    let dir = common::tempdir();
    let clock = FakeClock::frozen_at(dir.path(), LAST_SECONDS_OF_FEBRUARY);
    let observed = across_the_month_end(dir.path(), &clock, (&[], &[]), || async {}).await;
    assert_thirty_day_months(&observed);
}

/// The one counter key on `redis`: its record (`F <expires_at µs> <window_start µs> <count>`)
/// and its PTTL in ms.
async fn the_counter(redis: &RedisServer) -> (Vec<i64>, i64) {
    let mut inspector = redis.inspector().await;
    let keys = scan_keys(&mut inspector, "*").await;
    assert_eq!(keys.len(), 1, "one counter key: {keys:?}");
    let record: String = redis::cmd("GET")
        .arg(&keys[0])
        .query_async(&mut inspector)
        .await
        .unwrap_or_else(|error| panic!("GET failed: {error}"));
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&keys[0])
        .query_async(&mut inspector)
        .await
        .unwrap_or_else(|error| panic!("PTTL failed: {error}"));
    let fields = record
        .strip_prefix("F ")
        .unwrap_or_else(|| panic!("not a fixed window record: {record:?}"))
        .split(' ')
        .map(|field| {
            field
                .parse()
                .unwrap_or_else(|_| panic!("{record:?}: {field}"))
        })
        .collect();
    (fields, pttl)
}

const MICROS: i64 = 1_000_000;

/// A directory, a clock frozen in the last seconds of February, and a redis-server on it.
fn on_a_fake_clock() -> (tempfile::TempDir, FakeClock, RedisServer) {
    let dir = common::tempdir();
    let clock = FakeClock::frozen_at(dir.path(), LAST_SECONDS_OF_FEBRUARY);
    let redis = RedisServer::start_with_env(&clock.env());
    (dir, clock, redis)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_months_are_calendar_months_on_redis_time() {
    let (dir, clock, redis) = on_a_fake_clock();
    let url = redis.url();
    let flags = store_flags(&url, &[]);
    let observed = across_the_month_end(dir.path(), &clock, (&flags, &[CALENDAR]), || async {
        // February's window, full, expiring when it ends: 2 s from now on Redis's clock.
        let (record, pttl) = the_counter(&redis).await;
        assert_eq!(
            record,
            [MARCH_1ST * MICROS, FEBRUARY_1ST * MICROS, i64::from(LIMIT)]
        );
        assert_eq!(
            pttl,
            (MARCH_1ST - IN_FEBRUARY) * 1_000,
            "the key expires at March 1st"
        );
    })
    .await;
    assert_calendar_months(&observed);
    let (record, pttl) = the_counter(&redis).await;
    assert_eq!(record, [APRIL_1ST * MICROS, MARCH_1ST * MICROS, 1]);
    assert_eq!(pttl, (APRIL_1ST - IN_MARCH) * 1_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_months_are_thirty_days_without_it() {
    let (dir, clock, redis) = on_a_fake_clock();
    let url = redis.url();
    let flags = store_flags(&url, &[]);
    let observed = across_the_month_end(dir.path(), &clock, (&flags, &[]), || async {}).await;
    assert_thirty_day_months(&observed);
    let (record, pttl) = the_counter(&redis).await;
    let window_start = THIRTY_DAY_WINDOW_END - 30 * 86_400;
    assert_eq!(
        record,
        [
            THIRTY_DAY_WINDOW_END * MICROS,
            window_start * MICROS,
            i64::from(LIMIT)
        ]
    );
    // Written in February (March's call was refused), counting down on Redis's clock.
    assert_eq!(pttl, (THIRTY_DAY_WINDOW_END - IN_MARCH) * 1_000);
}
