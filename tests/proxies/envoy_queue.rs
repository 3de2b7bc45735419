//! A burst through the real Envoy 1.40 to a queueing leaky bucket: with the ratelimit filter's
//! timeout raised above the longest wait, a burst of 50 at 10/s reaches the upstream spaced
//! at about 100 ms, none refused, and Envoy counts no rate limit error and no request let
//! through by `failure_mode_deny: false`. Real time: generous bounds only.

use std::time::{Duration, Instant};

use floodgate_testkit::http::get;
use floodgate_testkit::{free_port, tempdir, Floodgate};

use super::envoy_e2e::start_envoy;

/// 10 per second with a queue of 49: a burst of 50 fits, the last waits 4.9 s.
const RULES: &str = r#"
domain: edge
descriptors:
  - key: generic_key
    value: api
    descriptors:
      - key: client_id
        rate_limit: {algorithm: leaky_bucket, unit: second, requests_per_unit: 10, burst: 49,
                     queue: true}
"#;

const BURST: usize = 50;

/// Envoy's counters whose name contains `ratelimit.`, from its admin `/stats`.
fn ratelimit_stats(admin: u16) -> Vec<(String, u64)> {
    let stats = get(admin, "/stats?filter=ratelimit", &[])
        .unwrap_or_else(|error| panic!("envoy admin /stats: {error}"));
    stats
        .body
        .lines()
        .filter_map(|line| line.split_once(": "))
        .filter_map(|(name, value)| Some((name.to_owned(), value.trim().parse().ok()?)))
        .collect()
}

fn stat(stats: &[(String, u64)], suffix: &str) -> u64 {
    stats
        .iter()
        .filter(|(name, _)| name.ends_with(suffix))
        .map(|(_, value)| value)
        .sum()
}

#[test]
fn a_burst_through_envoy_reaches_the_upstream_at_the_rate_and_none_is_refused() {
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(dir.path(), "edge.yaml", RULES, &[]);
    let admin = free_port();
    // The filter waits up to 10 s for floodgate's answer (its default, 20 ms, would time out
    // every held answer); it fails open (`failure_mode_deny: false`), so a timed-out call
    // would pass as a 200 and show in `failure_mode_allowed`.
    let envoy = start_envoy(
        floodgate.grpc_port,
        dir.path(),
        |text| {
            text.replace("timeout: 0.1s", "timeout: 10s")
                .replace("port_value: 9901", &format!("port_value: {admin}"))
        },
        &[],
    );
    let started = Instant::now();
    let calls: Vec<_> = (0..BURST)
        .map(|_| {
            let port = envoy.port;
            std::thread::spawn(move || {
                let answer = get(port, "/", &[("x-client-id", "queued")])
                    .unwrap_or_else(|error| panic!("request through envoy: {error}"));
                (answer.status, started.elapsed())
            })
        })
        .collect();
    let mut answers: Vec<(u16, Duration)> = calls
        .into_iter()
        .map(|call| call.join().unwrap_or_else(|_| panic!("a call panicked")))
        .collect();
    let log = || floodgate.process.log_text();
    assert!(
        answers.iter().all(|(status, _)| *status == 200),
        "{answers:?}\n{}",
        log()
    );
    answers.sort_by_key(|(_, at)| *at);
    let times: Vec<Duration> = answers.iter().map(|(_, at)| *at).collect();
    // 49 turns of 100 ms between the first and the last: 4.9 s, within ±50 %.
    let span = times[BURST - 1] - times[0];
    assert!(
        span >= Duration::from_millis(2_450) && span <= Duration::from_millis(7_350),
        "{times:?}"
    );
    let mut gaps: Vec<Duration> = times.windows(2).map(|pair| pair[1] - pair[0]).collect();
    gaps.sort();
    let median = gaps[gaps.len() / 2];
    assert!(
        median >= Duration::from_millis(50) && median <= Duration::from_millis(150),
        "{times:?}"
    );
    let stats = ratelimit_stats(admin);
    assert_eq!(stat(&stats, "ratelimit.ok"), BURST as u64, "{stats:?}");
    assert_eq!(stat(&stats, "ratelimit.error"), 0, "{stats:?}");
    assert_eq!(
        stat(&stats, "ratelimit.failure_mode_allowed"),
        0,
        "{stats:?}"
    );
    assert_eq!(stat(&stats, "ratelimit.over_limit"), 0, "{stats:?}");
}
