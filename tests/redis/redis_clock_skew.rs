//! Instances whose clocks disagree still agree on every decision, because "now" is Redis `TIME`
//! read inside the script (`store::redis` module docs). Two floodgate processes share one
//! redis-server; one of them runs under libfaketime (`LD_PRELOAD`, Debian's `faketime`, installed
//! by `scripts/install-peers.sh`) with its wall clock SKEW ahead. The monotonic clock stays real
//! (`FAKETIME_DONT_FAKE_MONOTONIC`): only the wall clock decides, and tokio's timers need not be
//! disturbed to show it.
//!
//! The skew is shown to be real first: the skewed process reports its load time SKEW ahead, and
//! a skewed process on the memory store, which decides with its own clock, places its fixed
//! windows SKEW (mod a minute) apart from the machine's. SKEW is deliberately not a whole number
//! of minutes, so a process that decided with its own clock would disagree visibly on
//! per-minute windows, not only on bucket refills.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use floodgate::core::arithmetic::algorithm::Algorithm;
use floodgate::core::ground::unit::Unit;
use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::RateLimitResponse;

use floodgate_testkit as common;
use floodgate_testkit::redis::{every_algorithm_rules, store_flags, RedisServer};
use floodgate_testkit::rls;
use floodgate_testkit::{subdir, Floodgate};

/// The skewed process's clock is this far ahead: 10 min 25 s, i.e. 25 s into another minute.
const SKEW_SECONDS: u64 = 625;

/// Per minute, so a skewed clock used for deciding would show on every algorithm.
const LIMIT: u32 = 5;

/// Domain `skew`: LIMIT per minute, one descriptor per algorithm, keyed by its name.
fn write_rules(dir: &Path) -> PathBuf {
    let config = dir.join("skew.yaml");
    let rules = every_algorithm_rules("skew", LIMIT, Unit::Minute);
    std::fs::write(&config, rules).unwrap_or_else(|error| panic!("write rules: {error}"));
    config
}

/// Calls per algorithm, alternating between the two processes: enough for each to be refused
/// a few times after the limit is spent.
const CALLS: usize = 2 * LIMIT as usize + 2;

/// Seconds of tolerance when a reset is compared with the local clock: the clock is read just
/// before and after the call, and resets are rounded up to whole seconds.
const CLOCK_SLACK: u64 = 2;

/// Starts floodgate with its wall clock SKEW_SECONDS ahead of the machine's.
fn start_skewed(config: &Path, extra: &[&str], log_dir: &Path) -> Floodgate {
    let library = floodgate_testkit::faketime::library();
    let library = library.to_string_lossy();
    let offset = format!("+{SKEW_SECONDS}");
    let env = [
        ("LD_PRELOAD", library.as_ref()),
        ("FAKETIME", offset.as_str()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    Floodgate::start_with_env(config, extra, &env, log_dir)
}

fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// The `floodgate-config-loaded-at` header of the process's debug port: its wall clock when it
/// loaded the rules, to the second.
fn loaded_at(server: &Floodgate) -> String {
    let response = common::http::get(server.debug_port, "/rlconfig", &[])
        .unwrap_or_else(|error| panic!("/rlconfig: {error}"));
    response
        .header("floodgate-config-loaded-at")
        .unwrap_or_else(|| panic!("no floodgate-config-loaded-at in {response:?}"))
        .to_owned()
}

/// Whether `stamp` is `rfc3339(t + offset)` for a whole second t in `from..=to`.
fn stamped_within(stamp: &str, from: u64, to: u64, offset: u64) -> bool {
    (from..=to).any(|second| {
        floodgate::core::ground::calendar::rfc3339(
            UNIX_EPOCH + Duration::from_secs(second + offset),
        ) == stamp
    })
}

/// Distance between two seconds-of-the-minute, going round the minute.
fn minute_distance(a: u64, b: u64) -> u64 {
    let forward = (a + 60 - b % 60) % 60;
    forward.min(60 - forward)
}

/// A fixed per-minute window's `duration_until_reset` for a clock reading `now`: the rest of
/// that clock's minute, rounded up.
fn rest_of_minute(now: u64) -> u64 {
    60 - now % 60
}

/// Whether `reset` fits a clock that read `skew + t` for some t in `from..=to` (the local
/// clock before and after the call).
fn reset_fits_clock(reset: u64, from: u64, to: u64, skew: u64) -> bool {
    minute_distance(reset, rest_of_minute(from + skew)) <= CLOCK_SLACK
        || minute_distance(reset, rest_of_minute(to + skew)) <= CLOCK_SLACK
}

/// Waits past the next minute boundary when it is near, so one algorithm's calls fall in one
/// per-minute window (Redis and this test read the same machine clock).
async fn keep_clear_of_the_minute_boundary() {
    let into_minute = now_seconds() % 60;
    if into_minute >= 50 {
        tokio::time::sleep(Duration::from_secs(61 - into_minute)).await;
    }
}

async fn call(client: &mut rls::Client, key: &str) -> RateLimitResponse {
    rls::call(client, rls::request("skew", &[&[(key, "shared")]]))
        .await
        .unwrap_or_else(|status| panic!("call for {key} failed: {status}"))
}

/// Code, remaining and `duration_until_reset` (whole seconds) of the single descriptor.
fn outcome(response: &RateLimitResponse, key: &str) -> (Code, u32, u64) {
    let (code, remaining, reset) = rls::first_outcome(response);
    let reset = u64::try_from(reset)
        .unwrap_or_else(|_| panic!("{key}: a negative duration_until_reset in {response:?}"));
    (code, remaining, reset)
}

/// A skewed process on the memory store decides with its own clock: its fixed window ends SKEW
/// (mod a minute) away from the machine's. This is what Redis `TIME` protects against.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_skew_reaches_the_decision_clock_of_a_process_without_redis() {
    let dir = common::tempdir();
    let config = write_rules(dir.path());
    let before_start = now_seconds();
    let skewed = start_skewed(&config, &[], &subdir(dir.path(), "skewed-memory"));
    let stamp = loaded_at(&skewed);
    let after_read = now_seconds();
    assert!(
        stamped_within(&stamp, before_start, after_read, SKEW_SECONDS),
        "the process under libfaketime reports loading at {stamp}, not {SKEW_SECONDS} s ahead \
         of this clock: libfaketime did not take effect"
    );

    let mut client = rls::connect(&skewed.grpc_url()).await;
    let from = now_seconds();
    let response = call(&mut client, "fixed_window").await;
    let to = now_seconds();
    let (code, _, reset) = outcome(&response, "fixed_window");
    assert_eq!(code, Code::Ok);
    assert!(
        reset_fits_clock(reset, from, to, SKEW_SECONDS),
        "reset {reset} s does not fit a clock {SKEW_SECONDS} s ahead (local {from}..={to})"
    );
    assert!(
        !reset_fits_clock(reset, from, to, 0),
        "reset {reset} s fits the unskewed clock: the skew did not reach the decisions"
    );
}

/// Two processes, one SKEW ahead, alternate calls on one Redis: together they admit exactly the
/// limit, for every algorithm, and report the same resets, on Redis' (the machine's) clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_instances_sharing_redis_decide_alike_for_every_algorithm() {
    let redis = RedisServer::start();
    let dir = common::tempdir();
    let config = write_rules(dir.path());
    let url = redis.url();
    let extra = store_flags(&url, &[]);
    let before_start = now_seconds();
    let plain = Floodgate::start(&config, &extra, &subdir(dir.path(), "plain"));
    let skewed = start_skewed(&config, &extra, &subdir(dir.path(), "skewed"));
    let (plain_stamp, skewed_stamp) = (loaded_at(&plain), loaded_at(&skewed));
    let after_read = now_seconds();
    assert!(
        stamped_within(&plain_stamp, before_start, after_read, 0),
        "plain process loaded at {plain_stamp}"
    );
    assert!(
        stamped_within(&skewed_stamp, before_start, after_read, SKEW_SECONDS),
        "the process under libfaketime reports loading at {skewed_stamp}, not {SKEW_SECONDS} s \
         ahead of this clock: libfaketime did not take effect"
    );

    let mut clients = [
        rls::connect(&plain.grpc_url()).await,
        rls::connect(&skewed.grpc_url()).await,
    ];
    for key in Algorithm::ALL.map(Algorithm::name) {
        keep_clear_of_the_minute_boundary().await;
        let mut outcomes = Vec::with_capacity(CALLS);
        let from = now_seconds();
        for index in 0..CALLS {
            let response = call(&mut clients[index % 2], key).await;
            outcomes.push(outcome(&response, key));
        }
        let to = now_seconds();

        // One shared counter: the first LIMIT calls pass, from either process, counting down.
        let codes: Vec<Code> = outcomes.iter().map(|(code, _, _)| *code).collect();
        let mut expected = vec![Code::Ok; LIMIT as usize];
        expected.resize(CALLS, Code::OverLimit);
        assert_eq!(
            codes, expected,
            "{key}: codes, plain and skewed alternating"
        );
        let remaining: Vec<u32> = outcomes[..LIMIT as usize]
            .iter()
            .map(|(_, remaining, _)| *remaining)
            .collect();
        let counting_down: Vec<u32> = (0..LIMIT).rev().collect();
        assert_eq!(remaining, counting_down, "{key}: remaining after each pass");

        // Every refusal, from either process, names the same time to wait.
        let refused: Vec<u64> = outcomes[LIMIT as usize..]
            .iter()
            .map(|(_, _, reset)| *reset)
            .collect();
        let (shortest, longest) = (
            refused.iter().copied().min().unwrap_or_default(),
            refused.iter().copied().max().unwrap_or_default(),
        );
        assert!(
            longest - shortest <= 1,
            "{key}: the processes disagree on duration_until_reset: {refused:?}"
        );

        // And that time is the machine's (Redis') minute, not the skewed process's.
        if key == "fixed_window" {
            for (index, (_, _, reset)) in outcomes.iter().enumerate() {
                assert!(
                    reset_fits_clock(*reset, from, to, 0),
                    "fixed_window call {index}: reset {reset} s is not the rest of Redis' \
                     minute (local {from}..={to})"
                );
            }
        }
    }
}
