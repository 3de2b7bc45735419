//! The reference's `testBasicBaseConfig`: the sequence every store setup of its
//! `TestBasicConfig`, `TestBasicAuthConfig`, `TestBasicTLSConfig`, Cluster and Sentinel tests runs,
//! over the fixtures `basic.yaml` and `another.yaml`: a domain with no rules, a per-second rule,
//! a per-minute rule taken over its limit, a per-minute and a per-hour rule in one request, and a
//! per-day rule whose `duration_until_reset` counts down.
//!
//! The per-minute descriptor of a request that the per-hour one rejects is charged as the row's
//! charging says: started as `ratelimit`, or with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`,
//! as the reference's default rows expect (its count goes on falling); with `=true` it keeps
//! its count, as the reference's rows of that setting expect; and so it does for `floodgate
//! serve`, whose all-or-nothing charges a rejected request nothing.

use std::time::Duration;

use floodgate::core::decision::charging::Charging;
use floodgate::proto::rate_limit_response::rate_limit::Unit;
use floodgate::proto::rate_limit_response::Code;
use floodgate_testkit::prom::Scrape;

use crate::harness::{
    assert_response, call, clear_of_a_minute_boundary, counted, fresh_value, limited, request,
    reset_seconds, Reference, NO_LIMIT,
};

/// The reference's `getCacheKey`: its rows with a local cache use the fixtures' `*_local` keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    Plain,
    Local,
}

impl Keys {
    pub fn key(self, name: &str) -> String {
        match self {
            Keys::Plain => name.to_owned(),
            Keys::Local => format!("{name}_local"),
        }
    }
}

/// Runs the sequence against `server`, which charges as `charging` says, `context` naming the
/// row in failures.
pub async fn run(server: &Reference, keys: Keys, charging: Charging, context: &str) {
    let mut client = server.client().await;
    let key = |name: &str| keys.key(name);

    // A domain with no configuration: OK, one status without a limit.
    let response = call(
        &mut client,
        request("foo", &[&[(&key("hello"), "world")]], 1),
    )
    .await;
    assert_response(&response, Code::Ok, &[NO_LIMIT], &format!("{context}: foo"));

    let response = call(
        &mut client,
        request("basic", &[&[(&key("key1"), "foo")]], 1),
    )
    .await;
    assert_response(
        &response,
        Code::Ok,
        &[limited(Code::Ok, 50, Unit::Second, 49)],
        &format!("{context}: basic key1"),
    );

    // A fresh value, 25 calls against 20 per minute; then the two-descriptor step, whose key2 is
    // per minute too. Both within one minute.
    clear_of_a_minute_boundary().await;
    let value = fresh_value();
    for call_index in 0..25u32 {
        let response = call(
            &mut client,
            request("another", &[&[(&key("key2"), &value)]], 1),
        )
        .await;
        let (code, remaining) = if call_index >= 20 {
            (Code::OverLimit, 0)
        } else {
            (Code::Ok, 20 - (call_index + 1))
        };
        assert_response(
            &response,
            code,
            &[limited(code, 20, Unit::Minute, remaining)],
            &format!("{context}: key2 call {call_index}"),
        );
    }

    // Two descriptors of one domain in each call: 20 per minute and 10 per hour.
    let value = fresh_value();
    for call_index in 0..15u32 {
        let response = call(
            &mut client,
            request(
                "another",
                &[&[(&key("key2"), &value)], &[(&key("key3"), &value)]],
                1,
            ),
        )
        .await;
        let (code, per_minute_left, per_hour_left) = if call_index >= 10 {
            // Rejected by the per-hour rule: the per-minute descriptor is charged only when
            // every descriptor is (the reference's default), else its count stays.
            let per_minute_left = match charging {
                Charging::EveryDescriptor => 20 - (call_index + 1),
                Charging::AllOrNothing | Charging::AllOrRefused => 10,
            };
            (Code::OverLimit, per_minute_left, 0)
        } else {
            (Code::Ok, 20 - (call_index + 1), 10 - (call_index + 1))
        };
        assert_response(
            &response,
            code,
            &[
                limited(Code::Ok, 20, Unit::Minute, per_minute_left),
                limited(code, 10, Unit::Hour, per_hour_left),
            ],
            &format!("{context}: key2 and key3 call {call_index}"),
        );
    }

    // duration_until_reset counts down: the same per-day counter a little later. floodgate
    // rounds it up to whole seconds, so a wait just over one second shows.
    let duration_test = || request("another", &[&[(&key("key4"), "durTest")]], 1);
    let first = call(&mut client, duration_test()).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let second = call(&mut client, duration_test()).await;
    assert!(
        reset_seconds(&second.statuses[0]) < reset_seconds(&first.statuses[0]),
        "{context}: the reset did not count down: {first:?} then {second:?}"
    );

    assert_stats(&server.metrics(), keys, context);
}

/// The reference's stats after the sequence, in floodgate's metric names (docs/operations.md:
/// `total_hits` ≈ allowed + rejected, `over_limit` ≈ rejected with reason `limit`).
fn assert_stats(scrape: &Scrape, keys: Keys, context: &str) {
    let rule = |domain: &str, name: &str| format!("{domain}.{}", keys.key(name));
    let allowed = |domain: &str, name: &str| {
        counted(
            scrape,
            "floodgate_requests_allowed_total",
            &[("domain", domain), ("rule", &rule(domain, name))],
        )
    };
    let over_limit = |domain: &str, name: &str| {
        counted(
            scrape,
            "floodgate_requests_rejected_total",
            &[
                ("domain", domain),
                ("rule", &rule(domain, name)),
                ("reason", "limit"),
            ],
        )
    };
    assert_eq!(allowed("basic", "key1"), 1.0, "{context}: key1 total_hits");
    // key2: 20 admitted, 5 over alone; then 10 admitted with key3, and 5 calls that key3
    // rejected, in which key2 itself was within its limit.
    assert_eq!(
        over_limit("another", "key2"),
        5.0,
        "{context}: key2 over_limit"
    );
    assert_eq!(
        allowed("another", "key2") + over_limit("another", "key2"),
        40.0,
        "{context}: key2 total_hits\n{}",
        scrape.text
    );
    assert_eq!(
        over_limit("another", "key3"),
        5.0,
        "{context}: key3 over_limit"
    );
    assert_eq!(
        allowed("another", "key3") + over_limit("another", "key3"),
        15.0,
        "{context}: key3 total_hits"
    );
}
