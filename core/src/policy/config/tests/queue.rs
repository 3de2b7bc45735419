//! `queue`, `delay` and `max_wait_ms`: a leaky bucket that holds answers, and every way to
//! write one wrong.

use super::*;
use crate::arithmetic::algorithm::{Queue, Quota, MAX_QUEUE_WAIT};
use crate::ground::unit::Unit;

fn one_limit(limit: &str) -> String {
    format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{{limit}}}\n")
}

fn quota_of(limit: &str) -> Quota {
    rule_at(&loaded(&one_limit(limit)), "d", "d.k").limits[0].clone()
}

const NGINX: &str = "unit: second, requests_per_unit: 10, algorithm: leaky_bucket, burst: 20";

#[test]
fn queue_delay_and_max_wait_land_in_the_quota() {
    let bucket = Quota::new(10, Unit::Second)
        .with_algorithm(Algorithm::LeakyBucket)
        .with_burst(20);
    assert_eq!(quota_of(NGINX), bucket);
    assert_eq!(
        quota_of(&format!("{NGINX}, queue: true")),
        bucket.clone().with_queue(Queue::new(0, MAX_QUEUE_WAIT))
    );
    assert_eq!(
        quota_of(&format!(
            "{NGINX}, queue: true, delay: 5, max_wait_ms: 1500"
        )),
        bucket.with_queue(Queue::new(5, 1_500_000))
    );
}

#[test]
fn a_queue_only_on_a_leaky_bucket_without_nodelay() {
    let error = single_error(&one_limit(
        "unit: second, requests_per_unit: 10, algorithm: token_bucket, queue: true",
    ));
    assert_error(
        &error,
        "d.k",
        "`queue` only applies to leaky_bucket, but this limit uses token_bucket",
        &["algorithm: leaky_bucket"],
    );
    let error = single_error(&one_limit(&format!("{NGINX}, queue: true, nodelay: true")));
    assert_error(
        &error,
        "d.k",
        "`queue: true` holds answers",
        &["remove one"],
    );
}

#[test]
fn delay_and_max_wait_need_a_queue() {
    let error = single_error(&one_limit(&format!("{NGINX}, delay: 5")));
    assert_error(
        &error,
        "d.k",
        "`delay` shapes a queue",
        &["add `queue: true`"],
    );
    let error = single_error(&one_limit(&format!("{NGINX}, max_wait_ms: 100")));
    assert_error(
        &error,
        "d.k",
        "`max_wait_ms` shapes a queue",
        &["queue: true"],
    );
}

#[test]
fn a_delay_past_the_burst_is_refused() {
    let error = single_error(&one_limit(&format!("{NGINX}, queue: true, delay: 21")));
    assert_error(
        &error,
        "d.k",
        "`delay: 21` lets more requests through at once than the burst of 20 holds",
        &["at most `burst`"],
    );
}

#[test]
fn a_wait_longer_than_a_minute_is_refused_at_load() {
    let error = single_error(&one_limit(&format!(
        "{NGINX}, queue: true, max_wait_ms: 60001"
    )));
    assert_error(
        &error,
        "d.k",
        "`max_wait_ms: 60001` is over 60000",
        &["raise the proxy's rate limit timeout"],
    );
    let slow = "unit: minute, requests_per_unit: 10, algorithm: leaky_bucket, burst: 20";
    let error = single_error(&one_limit(&format!("{slow}, queue: true")));
    assert_error(
        &error,
        "d.k",
        "this queue holds requests for up to 120 s",
        &["set `max_wait_ms` (at most 60000)"],
    );
    let capped = quota_of(&format!("{slow}, queue: true, max_wait_ms: 60000"));
    assert_eq!(capped.queue, Some(Queue::new(0, MAX_QUEUE_WAIT)));
}
