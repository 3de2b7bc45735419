//! One limit held by one, two and three Envoys: after convergence, what all of them admit
//! together is close to the rule's limit (never well over it), a light Envoy gets all it asks,
//! and after a demand shift the shares follow within a few reports.

use std::time::{Duration, Instant};

use floodgate_testkit::redis::{store_flags, RedisServer};
use floodgate_testkit::{free_port, tempdir};

use crate::harness::{one_envoy, sleep_until, start_envoy, start_floodgate, tenant_rules, Load};

/// Two reports of Envoy 1.40 (every 5 s) and a margin: by then every Envoy's demand is known
/// and every share assigned from it.
const CONVERGENCE: Duration = Duration::from_secs(13);
const MEASURE: Duration = Duration::from_secs(10);

/// One Envoy offering 60/s against 20/s, with floodgate started with `extra`.
fn one_envoy_held_to_its_assignment(extra: &[&str], store: &str) {
    let dir = tempdir();
    let (_floodgate, envoy, _) = one_envoy(dir.path(), 20, extra);
    let started = Instant::now();
    let load = Load::start(envoy.port, ("x-tenant", "acme-corp"), 60.0);
    // The first assignment comes with the first request; past the first second's burst the
    // bucket admits its fill rate.
    let from = started + Duration::from_secs(3);
    let to = from + MEASURE;
    sleep_until(to);
    let admitted = load.admitted_rate(from, to);
    let offered = load.offered_rate(from, to);
    eprintln!("one Envoy ({store}): limit 20/s, offered {offered:.1}/s, admitted {admitted:.1}/s");
    assert!(
        offered > 35.0,
        "the load did not reach the limit: {offered:.1}/s"
    );
    assert!(
        (16.0..=22.0).contains(&admitted),
        "admitted {admitted:.1}/s against a limit of 20/s"
    );
}

/// A light (8/s) and a heavy (60/s) load on one tenant through two Envoys, measured after
/// convergence: the light one gets what it asks, together they admit about the limit of 30/s.
/// The loads go on, for what the caller does next.
fn light_and_heavy(light_port: u16, heavy_port: u16, what: &str) -> (Load, Load) {
    let started = Instant::now();
    let light = Load::start(light_port, ("x-tenant", "acme-corp"), 8.0);
    let heavy = Load::start(heavy_port, ("x-tenant", "acme-corp"), 60.0);
    let from = started + CONVERGENCE;
    let to = from + MEASURE;
    sleep_until(to);
    let (light_rate, heavy_rate) = (light.admitted_rate(from, to), heavy.admitted_rate(from, to));
    let total = light_rate + heavy_rate;
    eprintln!(
        "{what}, limit 30/s: light offered {:.1} admitted {light_rate:.1}, heavy offered {:.1} \
         admitted {heavy_rate:.1}, total {total:.1}/s ({:.3} of the limit)",
        light.offered_rate(from, to),
        heavy.offered_rate(from, to),
        total / 30.0
    );
    assert!(
        light_rate >= 0.9 * light.offered_rate(from, to),
        "the light Envoy did not get what it asked: {light_rate:.1}/s"
    );
    assert!(
        (24.0..=31.5).contains(&total),
        "together {total:.1}/s against a limit of 30/s"
    );
    (light, heavy)
}

#[test]
fn one_envoy_admits_what_its_assignment_allows() {
    one_envoy_held_to_its_assignment(&[], "memory store");
}

/// With `--store redis` one floodgate alone divides as it does with the memory store (its
/// exchange with other floodgates finds none).
#[test]
fn one_envoy_admits_what_its_assignment_allows_with_the_redis_store() {
    let redis = RedisServer::start();
    let url = redis.url();
    one_envoy_held_to_its_assignment(&["--store", "redis", "--redis-url", &url], "redis store");
}

#[test]
fn two_envoys_with_unequal_load_share_the_limit_and_follow_a_demand_shift() {
    let dir = tempdir();
    let grpc = free_port();
    let _floodgate = start_floodgate(dir.path(), &tenant_rules(30), grpc, &[]);
    let (light_envoy, _) = start_envoy(dir.path(), "light", grpc);
    let (heavy_envoy, _) = start_envoy(dir.path(), "heavy", grpc);
    let (light, heavy) = light_and_heavy(light_envoy.port, heavy_envoy.port, "two Envoys");

    // The demand shifts: the light Envoy becomes the heavy one and the other way round.
    let shifted = Instant::now();
    light.set_rate(60.0);
    heavy.set_rate(8.0);
    let mut converged = None;
    while shifted.elapsed() < Duration::from_secs(40) {
        std::thread::sleep(Duration::from_millis(500));
        let now = Instant::now();
        let window = now - Duration::from_secs(3);
        if window > shifted && light.admitted_rate(window, now) >= 16.0 {
            converged = Some(now - shifted);
            break;
        }
    }
    let Some(converged) = converged else {
        panic!(
            "the newly heavy Envoy never reached 16/s of its ~20/s share within 40 s of the shift"
        );
    };
    eprintln!("two Envoys: the shares followed the demand shift within {converged:?}");
    let from = Instant::now() + Duration::from_secs(6);
    let to = from + MEASURE;
    sleep_until(to);
    let total = light.admitted_rate(from, to) + heavy.admitted_rate(from, to);
    eprintln!("two Envoys after the shift: total {total:.1}/s");
    assert!(
        (24.0..=31.5).contains(&total),
        "after the shift, together {total:.1}/s against a limit of 30/s"
    );
}

#[test]
fn three_envoys_with_unequal_load_share_the_limit() {
    let dir = tempdir();
    let grpc = free_port();
    let _floodgate = start_floodgate(dir.path(), &tenant_rules(30), grpc, &[]);
    let envoys: Vec<_> = ["small", "medium", "large"]
        .into_iter()
        .map(|name| start_envoy(dir.path(), name, grpc).0)
        .collect();
    let started = Instant::now();
    let loads: Vec<Load> = envoys
        .iter()
        .zip([4.0, 12.0, 60.0])
        .map(|(envoy, rate)| Load::start(envoy.port, ("x-tenant", "acme-corp"), rate))
        .collect();
    let from = started + CONVERGENCE;
    let to = from + MEASURE;
    sleep_until(to);
    let rates: Vec<f64> = loads.iter().map(|l| l.admitted_rate(from, to)).collect();
    let offered: Vec<f64> = loads.iter().map(|l| l.offered_rate(from, to)).collect();
    let total: f64 = rates.iter().sum();
    eprintln!(
        "three Envoys, limit 30/s: offered {offered:.1?}, admitted {rates:.1?}, total \
         {total:.1}/s ({:.3} of the limit)",
        total / 30.0
    );
    assert!(
        rates[0] >= 0.9 * offered[0],
        "the small Envoy did not get what it asked: {rates:.1?}"
    );
    assert!(
        (24.0..=31.5).contains(&total),
        "together {total:.1}/s against a limit of 30/s"
    );
}

/// Two floodgates sharing one Redis, each with its own Envoy: the light Envoy's floodgate and
/// the heavy one's exchange their demands (`--rlqs-exchange-ms`), so the two Envoys share one
/// limit of 30/s as if they were connected to one floodgate. Alone, each floodgate would give
/// its Envoy the whole limit (together about 38/s).
#[test]
fn two_floodgates_sharing_a_redis_divide_one_limit_between_their_envoys() {
    let redis = RedisServer::start();
    let url = redis.url();
    let flags = store_flags(&url, &["--rlqs-exchange-ms", "500"]);
    let (light_dir, heavy_dir) = (tempdir(), tempdir());
    let (light_grpc, heavy_grpc) = (free_port(), free_port());
    let _light_floodgate = start_floodgate(light_dir.path(), &tenant_rules(30), light_grpc, &flags);
    let _heavy_floodgate = start_floodgate(heavy_dir.path(), &tenant_rules(30), heavy_grpc, &flags);
    let (light_envoy, _) = start_envoy(light_dir.path(), "light", light_grpc);
    let (heavy_envoy, _) = start_envoy(heavy_dir.path(), "heavy", heavy_grpc);
    light_and_heavy(
        light_envoy.port,
        heavy_envoy.port,
        "two floodgates sharing one Redis",
    );
}
