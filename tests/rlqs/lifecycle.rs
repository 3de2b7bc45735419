//! An RLQS stream's life with real Envoys: floodgate lost and back under load, a bucket gone
//! idle abandoned, and what buckets without a rule get.

use std::time::{Duration, Instant};

use floodgate_testkit::http::get;
use floodgate_testkit::{free_port, tempdir};

use crate::harness::{
    one_envoy, sleep_until, start_envoy, start_floodgate, tenant_rules, wait_for_log, wait_until,
    Load,
};

fn status(port: u16, headers: &[(&str, &str)]) -> u16 {
    get(port, "/", headers).map_or(0, |response| response.status)
}

#[test]
fn envoy_keeps_its_assignment_while_floodgate_is_gone_and_takes_the_new_one_after() {
    let dir = tempdir();
    let grpc = free_port();
    let first = start_floodgate(dir.path(), &tenant_rules(20), grpc, &[]);
    let (envoy, _) = start_envoy(dir.path(), "envoy", grpc);
    let load = Load::start(envoy.port, ("x-tenant", "acme-corp"), 50.0);
    let from = Instant::now() + Duration::from_secs(3);
    sleep_until(from + Duration::from_secs(5));
    let before = load.admitted_rate(from, from + Duration::from_secs(5));
    assert!(
        (15.0..=23.0).contains(&before),
        "before: {before:.1}/s against 20/s"
    );

    // Lost without a word (SIGKILL): Envoy keeps the assignment for its time to live (15 s).
    // (Then Envoy 1.40 applies no_assignment_behavior: it does not implement
    // reuse_last_assignment.)
    drop(first);
    let lost = Instant::now();
    sleep_until(lost + Duration::from_secs(9));
    let during = load.admitted_rate(lost + Duration::from_secs(1), lost + Duration::from_secs(9));
    eprintln!("restart: admitted {before:.1}/s before, {during:.1}/s while floodgate was gone");
    assert!(
        (15.0..=23.0).contains(&during),
        "while floodgate was gone: {during:.1}/s, not the last assignment's 20/s"
    );

    // Back with a tighter rule: Envoy reopens its stream at its next report and takes the new
    // assignment.
    let second = start_floodgate(dir.path(), &tenant_rules(10), grpc, &[]);
    let back = Instant::now();
    second.log_once_it_says("RLQS stream opened", Duration::from_secs(20));
    wait_until(
        Duration::from_secs(30),
        "Envoy admitting the new floodgate's 10/s",
        || {
            let now = Instant::now();
            now - back > Duration::from_secs(3)
                && load.admitted_rate(now - Duration::from_secs(3), now) <= 12.5
        },
    );
    eprintln!(
        "restart: the new assignment held {:?} after floodgate came back",
        back.elapsed()
    );
    let from = Instant::now();
    sleep_until(from + Duration::from_secs(6));
    let after = load.admitted_rate(from, from + Duration::from_secs(6));
    assert!(
        (7.0..=12.5).contains(&after),
        "after: {after:.1}/s against 10/s"
    );
}

#[test]
fn a_bucket_gone_idle_is_abandoned_and_starts_afresh_on_its_next_request() {
    let dir = tempdir();
    let (_floodgate, envoy, log) =
        one_envoy(dir.path(), 20, &["--rlqs-abandon-after-seconds", "1"]);
    for _ in 0..5 {
        assert_eq!(status(envoy.port, &[("x-tenant", "brief")]), 200);
    }
    // Reports every 5 s: one with the requests, one with none (idle from then), one more
    // (idle for 5 s ≥ 1 s): abandoned.
    wait_for_log(
        &log,
        "Cached bucket wiped by abandon action",
        1,
        Duration::from_secs(40),
    );
    let created = "The bucket-specific usage report";
    let before = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .matches(created)
        .count();
    assert_eq!(status(envoy.port, &[("x-tenant", "brief")]), 200);
    // Envoy forgot the bucket: the request makes it anew, with its first report.
    wait_for_log(&log, created, before + 1, Duration::from_secs(10));
}

#[test]
fn buckets_without_a_rule_are_denied_with_deny_all() {
    let dir = tempdir();
    let (_floodgate, envoy, _) = one_envoy(dir.path(), 20, &["--rlqs-unmatched", "deny-all"]);
    // {name: anonymous} meets no rule here. Its first request passes on Envoy's
    // no_assignment_behavior (allow all); floodgate's deny-all follows at once.
    wait_until(
        Duration::from_secs(15),
        "an anonymous request denied",
        || status(envoy.port, &[]) == 429,
    );
    let denied = (0..10).filter(|_| status(envoy.port, &[]) == 429).count();
    assert_eq!(
        denied, 10,
        "deny-all let some of 10 anonymous requests through"
    );
    // A bucket with a rule is unaffected.
    assert_eq!(status(envoy.port, &[("x-tenant", "acme-corp")]), 200);
}

#[test]
fn buckets_without_a_rule_are_admitted_with_allow_all() {
    let dir = tempdir();
    let (floodgate, envoy, _) = one_envoy(dir.path(), 1, &[]);
    assert_eq!(status(envoy.port, &[]), 200);
    floodgate.log_once_it_says("RLQS stream opened", Duration::from_secs(15));
    let load = Load::start(envoy.port, ("x-other", "1"), 40.0);
    let from = Instant::now();
    sleep_until(from + Duration::from_secs(7));
    let (admitted, all) = load.count(from, from + Duration::from_secs(7), 200);
    assert!(all > 50, "the load did not run: {all} answers");
    assert_eq!(
        admitted, all,
        "allow-all denied some of {all} anonymous requests"
    );
}
