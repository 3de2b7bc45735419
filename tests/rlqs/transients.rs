//! One limit of 100/s held by two Envoys whose loads start, join, swap and outlive a floodgate
//! restart, counted where the requests arrive (an upstream behind both Envoys): every 5 s
//! window from the first request on admits at most 1.10 of the limit, the steady total is at
//! least 0.97 of it, and the light Envoy gets at least 90 % of what it offers.
//!
//! The tenant bucket's `no_assignment_behavior` is DENY_ALL here, so what a bucket admits
//! before floodgate's first assignment cannot hide what floodgate assigns.

use std::path::Path;
use std::time::{Duration, Instant};

use floodgate_testkit::envoy::Envoy;
use floodgate_testkit::redis::{store_flags, RedisServer};
use floodgate_testkit::{free_port, tempdir, Running};

use crate::harness::{sleep_until, start_envoy_with, start_floodgate, tenant_rules, Load};
use crate::upstream::CountingUpstream;

const LIMIT: f64 = 100.0;
/// The window Envoy 1.40 reports on: every 5 s.
const WINDOW: Duration = Duration::from_secs(5);
/// Every window after the load begins stays within this part of the limit.
const MOST: f64 = 1.10;
/// Steady, the Envoys together admit at least this part of the limit...
const LEAST_STEADY: f64 = 0.97;
/// ...and the light one at least this part of what it offers.
const LIGHT_SERVED: f64 = 0.90;
/// Two reports of each Envoy and a margin: by then a change has been divided and assigned.
const SETTLE: Duration = Duration::from_secs(12);
/// Longer than Envoy 1.40's report interval: every Envoy reports while a floodgate is away.
const OUTAGE: Duration = Duration::from_secs(6);
const STEADY: Duration = Duration::from_secs(10);

/// The guide's bootstrap routing to `upstream` instead of answering itself, with the tenant
/// bucket denying all until floodgate's first assignment.
fn counted_envoy(dir: &Path, name: &str, grpc: u16, upstream: u16) -> Envoy {
    start_envoy_with(dir, name, grpc, |bootstrap| {
        route_to_upstream(bootstrap, upstream)
    })
    .0
}

fn route_to_upstream(bootstrap: String, upstream: u16) -> String {
    let answer = "                direct_response:\n                  status: 200\n                  body: {inline_string: \"ok\\n\"}\n";
    let no_assignment = "no_assignment_behavior:\n                            fallback_rate_limit: {blanket_rule: ALLOW_ALL}";
    assert!(
        bootstrap.contains(answer) && bootstrap.contains(no_assignment),
        "deploy/envoy/rlqs.yaml no longer has the route and tenant bucket this test changes"
    );
    let cluster = format!(
        "  clusters:
  - name: counted
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: counted
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {{address: 127.0.0.1, port_value: {upstream}}}
"
    );
    bootstrap
        .replace(answer, "                route: {cluster: counted}\n")
        .replacen(
            no_assignment,
            &no_assignment.replace("ALLOW_ALL", "DENY_ALL"),
            1,
        )
        .replace("  clusters:\n", &cluster)
}

/// One tenant's requests through one Envoy at a set rate, spread over a few kept-alive
/// connections (one could not keep up with 170/s on a loaded host), each marked `x-load:
/// <source>` for the upstream.
struct Offered {
    loads: Vec<Load>,
}

const CONNECTIONS: usize = 4;

impl Offered {
    fn start(port: u16, source: &str, per_second: f64) -> Offered {
        let headers = [("x-tenant", "acme-corp"), ("x-load", source)];
        Offered {
            loads: (0..CONNECTIONS)
                .map(|_| Load::with_headers(port, &headers, per_second / CONNECTIONS as f64))
                .collect(),
        }
    }

    fn set_rate(&self, per_second: f64) {
        for load in &self.loads {
            load.set_rate(per_second / CONNECTIONS as f64);
        }
    }

    fn offered_rate(&self, from: Instant, to: Instant) -> f64 {
        self.loads.iter().map(|l| l.offered_rate(from, to)).sum()
    }
}

/// What was measured over a stretch of a scenario.
struct Figures {
    worst_window: f64,
    steady_total: f64,
    light_served: f64,
}

/// The largest 5 s window (sliding by 0.5 s) from `from` to `to`, as a part of the limit.
fn worst_window(upstream: &CountingUpstream, from: Instant, to: Instant) -> f64 {
    let mut worst: f64 = 0.0;
    let mut start = from;
    while start + WINDOW <= to {
        worst = worst.max(upstream.rate(start, start + WINDOW, None) / LIMIT);
        start += Duration::from_millis(500);
    }
    worst
}

/// Windows from `transient` (when the load or its change began) to `steady`, then the steady
/// stretch from `steady` for [`STEADY`]: worst window, steady total and how much of its
/// offer the `light` load got.
fn measure(
    what: &str,
    upstream: &CountingUpstream,
    (transient, steady): (Instant, Instant),
    (light_name, light): (&str, &Offered),
) -> Figures {
    let end = steady + STEADY;
    sleep_until(end);
    let worst = worst_window(upstream, transient, end);
    let total = upstream.rate(steady, end, None);
    let served = upstream.rate(steady, end, Some(light_name));
    let offered = light.offered_rate(steady, end);
    let seconds: Vec<usize> = (0..(end - transient).as_secs())
        .map(|s| {
            let at = transient + Duration::from_secs(s);
            upstream.count(at, at + Duration::from_secs(1), None)
        })
        .collect();
    eprintln!("{what}: admitted each second from the change on: {seconds:?}");
    eprintln!(
        "{what}: worst 5 s window {worst:.3} L; steady {total:.1}/s = {:.3} L; light {light_name} \
         {served:.1} of {offered:.1}/s offered",
        total / LIMIT
    );
    Figures {
        worst_window: worst,
        steady_total: total / LIMIT,
        light_served: served / offered.max(1e-9),
    }
}

fn check(what: &str, figures: &Figures) {
    assert!(
        figures.worst_window <= MOST,
        "{what}: a 5 s window admitted {:.3} of the limit",
        figures.worst_window
    );
    assert!(
        figures.steady_total >= LEAST_STEADY,
        "{what}: steady, {:.3} of the limit admitted",
        figures.steady_total
    );
    assert!(
        figures.light_served >= LIGHT_SERVED,
        "{what}: the light Envoy got {:.3} of its demand",
        figures.light_served
    );
}

/// Envoy `a` offered 170/s from the start, Envoy `b` 30/s from 10 s later: the figures from
/// the first request on, and the loads, which go on.
fn b_joins(
    upstream: &CountingUpstream,
    a: &Envoy,
    b: &Envoy,
    what: &str,
) -> (Figures, Offered, Offered) {
    let begun = Instant::now();
    let heavy = Offered::start(a.port, "a", 170.0);
    let joined = begun + Duration::from_secs(10);
    sleep_until(joined);
    let light = Offered::start(b.port, "b", 30.0);
    let figures = measure(what, upstream, (begun, joined + SETTLE), ("b", &light));
    (figures, heavy, light)
}

#[test]
fn a_second_envoy_joins_and_the_loads_swap_without_passing_the_limit() {
    let dir = tempdir();
    let grpc = free_port();
    let upstream = CountingUpstream::start();
    let _floodgate = start_floodgate(dir.path(), &tenant_rules(100), grpc, &[]);
    let a = counted_envoy(dir.path(), "a", grpc, upstream.port);
    let b = counted_envoy(dir.path(), "b", grpc, upstream.port);
    let (joining, heavy, light) = b_joins(&upstream, &a, &b, "170/30, b joining");
    let swapped = Instant::now();
    heavy.set_rate(30.0);
    light.set_rate(170.0);
    let swap = measure(
        "170/30 swapped",
        &upstream,
        (swapped, swapped + SETTLE),
        ("a", &heavy),
    );
    check("170/30, b joining", &joining);
    check("170/30 swapped", &swap);
}

#[test]
fn a_floodgate_restart_under_load_does_not_pass_the_limit() {
    let dir = tempdir();
    let grpc = free_port();
    let upstream = CountingUpstream::start();
    let floodgate = start_floodgate(dir.path(), &tenant_rules(100), grpc, &[]);
    let a = counted_envoy(dir.path(), "a", grpc, upstream.port);
    let b = counted_envoy(dir.path(), "b", grpc, upstream.port);
    let begun = Instant::now();
    let _heavy = Offered::start(a.port, "a", 150.0);
    let light = Offered::start(b.port, "b", 50.0);
    let before = measure("150/50", &upstream, (begun, begun + SETTLE), ("b", &light));
    drop(floodgate);
    let restarted = Instant::now();
    let _floodgate: Running = start_floodgate(dir.path(), &tenant_rules(100), grpc, &[]);
    let after = measure(
        "150/50 after a restart",
        &upstream,
        (restarted, restarted + SETTLE),
        ("b", &light),
    );
    check("150/50", &before);
    check("150/50 after a restart", &after);
}

#[test]
fn two_floodgates_sharing_a_redis_hold_one_limit_as_an_envoy_joins() {
    let redis = RedisServer::start();
    let url = redis.url();
    let flags = store_flags(&url, &["--rlqs-exchange-ms", "500"]);
    let (a_dir, b_dir) = (tempdir(), tempdir());
    let (a_grpc, b_grpc) = (free_port(), free_port());
    let upstream = CountingUpstream::start();
    let _a_floodgate = start_floodgate(a_dir.path(), &tenant_rules(100), a_grpc, &flags);
    let b_floodgate = start_floodgate(b_dir.path(), &tenant_rules(100), b_grpc, &flags);
    let a = counted_envoy(a_dir.path(), "a", a_grpc, upstream.port);
    let b = counted_envoy(b_dir.path(), "b", b_grpc, upstream.port);
    let what = "two floodgates over Redis, 170/30, b joining";
    let (joining, _heavy, light) = b_joins(&upstream, &a, &b, what);
    // The light Envoy's floodgate is gone for a report interval of the heavy Envoy, then
    // back: the heavy one's floodgate must not hand its Envoy the part the light one still
    // enforces meanwhile.
    drop(b_floodgate);
    let restarted = Instant::now();
    sleep_until(restarted + OUTAGE);
    let _b_floodgate = start_floodgate(b_dir.path(), &tenant_rules(100), b_grpc, &flags);
    let after = measure(
        "two floodgates over Redis, 170/30, b's restarted",
        &upstream,
        (restarted, restarted + OUTAGE + SETTLE),
        ("b", &light),
    );
    check(what, &joining);
    check("two floodgates over Redis, b's restarted", &after);
}
