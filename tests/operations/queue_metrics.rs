//! The queue's metrics on the real binary's `/metrics`: answers waiting now (in all and per
//! rule), each admitted request's wait and each refusal per rule, and the requests that found `--max-waiting`
//! answers held; and, on SIGTERM, the held answers sent at once.

use std::time::{Duration, Instant};

use floodgate_testkit::http::get;
use floodgate_testkit::prom::{promtool_check, scrape};
use floodgate_testkit::{tempdir, Floodgate};

const RULES: &str = "domain: queue
descriptors:
  - key: client
    rate_limit: {algorithm: leaky_bucket, unit: second, requests_per_unit: 2, burst: 3,
                 queue: true}
  - key: slow
    rate_limit: {algorithm: leaky_bucket, unit: minute, requests_per_unit: 1, burst: 1,
                 queue: true}
";

/// `count` `/check` calls for `descriptor` (`key=value`) at once.
fn burst(port: u16, descriptor: &str, count: usize) -> Vec<std::thread::JoinHandle<u16>> {
    (0..count)
        .map(|_| {
            let descriptor = descriptor.to_owned();
            std::thread::spawn(move || {
                get(
                    port,
                    "/check",
                    &[
                        ("X-RateLimit-Domain", "queue"),
                        ("X-RateLimit-Descriptor", &descriptor),
                    ],
                )
                .map(|answer| answer.status)
                .unwrap_or_else(|error| panic!("/check: {error}"))
            })
        })
        .collect()
}

/// The calls' statuses, sorted.
fn statuses(calls: Vec<std::thread::JoinHandle<u16>>) -> Vec<u16> {
    let mut statuses: Vec<u16> = calls
        .into_iter()
        .map(|call| call.join().unwrap_or_else(|_| panic!("a call panicked")))
        .collect();
    statuses.sort_unstable();
    statuses
}

#[test]
fn waits_refusals_and_the_full_room_are_counted_per_rule() {
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(dir.path(), "queue.yaml", RULES, &[]);
    // 2 per second, a queue of 3: four fit (waits 0, 0.5, 1 and 1.5 s), two are refused.
    let calls = burst(floodgate.http_port, "client=alice", 6);
    std::thread::sleep(Duration::from_millis(300));
    let during = scrape(floodgate.debug_port);
    let rule = [("domain", "queue"), ("rule", "queue.client")];
    assert_eq!(during.value("floodgate_queue_waiting", &[]), 3.0);
    assert_eq!(during.value("floodgate_queue_rule_waiting", &rule), 3.0);
    assert_eq!(statuses(calls), [200, 200, 200, 200, 403, 403]);
    let after = scrape(floodgate.debug_port);
    assert_eq!(after.value("floodgate_queue_waiting", &[]), 0.0);
    assert_eq!(after.value("floodgate_queue_rule_waiting", &rule), 0.0);
    assert_eq!(
        after.value("floodgate_queue_wait_seconds_count", &rule),
        4.0
    );
    // 0 + 0.5 + 1 + 1.5 s, less what drained while the burst's calls arrived.
    let waited = after.value("floodgate_queue_wait_seconds_sum", &rule);
    assert!((2.8..=3.0).contains(&waited), "{waited}");
    assert_eq!(after.value("floodgate_queue_refused_total", &rule), 2.0);
    assert_eq!(after.value("floodgate_queue_refused_full_total", &[]), 0.0);
    let text = get(floodgate.debug_port, "/metrics", &[])
        .unwrap_or_else(|error| panic!("/metrics: {error}"))
        .body;
    promtool_check(&text);
}

#[test]
fn past_max_waiting_requests_are_refused_and_sigterm_answers_the_held_at_once() {
    let dir = tempdir();
    let mut floodgate =
        Floodgate::start_with_rules(dir.path(), "queue.yaml", RULES, &["--max-waiting", "1"]);
    let first = burst(floodgate.http_port, "client=bob", 1);
    std::thread::sleep(Duration::from_millis(200));
    // bob's first took its turn at once; the next waits 0.5 s in the only seat.
    let held = burst(floodgate.http_port, "client=bob", 1);
    std::thread::sleep(Duration::from_millis(100));
    let refused = burst(floodgate.http_port, "client=bob", 1);
    assert_eq!(statuses(first), [200]);
    assert_eq!(statuses(refused), [403]);
    assert_eq!(statuses(held), [200]);
    let metrics = scrape(floodgate.debug_port);
    assert_eq!(
        metrics.value("floodgate_queue_refused_full_total", &[]),
        1.0
    );

    // A held answer is sent when the process stops, a minute before its turn.
    let first = burst(floodgate.http_port, "slow=one", 1);
    assert_eq!(statuses(first), [200]);
    let held = burst(floodgate.http_port, "slow=one", 1);
    std::thread::sleep(Duration::from_millis(300));
    let stopping = Instant::now();
    floodgate.process.terminate(Duration::from_secs(10));
    assert_eq!(statuses(held), [200]);
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopping.elapsed()
    );
}
