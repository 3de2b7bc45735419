//! Adaptive concurrency (`core::arithmetic::gradient`): floodgate moves a concurrency rule's
//! `max_in_flight` from how long its own leases are held. The upstream is a pool of workers
//! that each spend a fixed service time per request, behind more clients than it can serve;
//! each client takes a lease over `/lease/acquire` (a refused one retries shortly after),
//! waits for a worker, works, and gives the lease back over `/lease/release`. With the SLO at
//! 3× the service time, the limit must settle within ±25 % of the pool size, and follow when
//! the pool grows: where AIMD on the p95 would let twice the pool or more into the queue. In
//! memory, and with two instances over one Redis.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use floodgate_testkit::http::request;
use floodgate_testkit::prom::scrape;
use floodgate_testkit::redis::{store_flags, RedisServer};
use floodgate_testkit::{subdir, tempdir, Floodgate};

const SERVICE: Duration = Duration::from_millis(250);
const CLIENTS: usize = 22;
/// A refused client tries again after this: short beside the service time, so a freed slot is
/// taken again almost at once.
const RETRY: Duration = Duration::from_millis(20);
/// Long enough for the limit to climb from where it starts (or from the old pool) to the new
/// pool at one or two a second.
const SETTLE: Duration = Duration::from_secs(16);
const WATCH: Duration = Duration::from_secs(8);

const RULES: &str = r#"
domain: backend
descriptors:
  - key: backend
    value: slow
    concurrency:
      max_in_flight: 4
      lease: request_id
      release: {key: phase, value: done}
      ttl: 30s
    adaptive:
      min: 2
      max: 64
      slo: 750ms
      interval: 1s
      probe_every: 10m
"#;

const LABELS: [(&str, &str); 2] = [("domain", "backend"), ("rule", "backend.backend_slow")];

/// A pool of workers: `work` waits for a free one, holds it for the service time.
struct Pool {
    free: Mutex<usize>,
    freed: Condvar,
}

impl Pool {
    fn new(workers: usize) -> Pool {
        Pool {
            free: Mutex::new(workers),
            freed: Condvar::new(),
        }
    }

    fn work(&self) {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
        drop(free);
        thread::sleep(SERVICE);
        *self.free.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.freed.notify_one();
    }

    fn grow(&self, workers: usize) {
        *self.free.lock().unwrap_or_else(|e| e.into_inner()) += workers;
        self.freed.notify_all();
    }
}

fn lease(http_port: u16, action: &str, id: &str) -> Option<u16> {
    let body = format!(
        r#"{{"domain": "backend", "entries": [{{"key": "backend", "value": "slow"}}], "lease": "{id}"}}"#
    );
    request(http_port, "POST", &format!("/lease/{action}"), &[], &body)
        .ok()
        .map(|answer| answer.status)
}

fn client(http_port: u16, index: usize, pool: &Pool, stop: &AtomicBool) {
    let mut call = 0u64;
    while !stop.load(Ordering::Relaxed) {
        call += 1;
        let id = format!("c{index}-{call}");
        match lease(http_port, "acquire", &id) {
            Some(200) => {
                pool.work();
                lease(http_port, "release", &id);
            }
            _ => thread::sleep(RETRY),
        }
    }
}

fn limit(debug_port: u16) -> Option<f64> {
    scrape(debug_port).get("floodgate_adaptive_limit", &LABELS)
}

/// The limits seen every 250 ms for `WATCH`, after `SETTLE`.
fn settled_limits(debug_port: u16) -> Vec<f64> {
    thread::sleep(SETTLE);
    let until = Instant::now() + WATCH;
    let mut seen = Vec::new();
    while Instant::now() < until {
        if let Some(limit) = limit(debug_port) {
            seen.push(limit);
        }
        thread::sleep(Duration::from_millis(250));
    }
    seen
}

/// The median within ±25 % of `pool`, and 80 % of the samples too (a host that stalls for a
/// moment makes every lease of that moment slow, and the limit dips for a step).
fn assert_settled_near(limits: &[f64], pool: f64) {
    assert!(limits.len() >= 10, "too few samples: {limits:?}");
    let mut sorted = limits.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let near = |limit: f64| (limit - pool).abs() <= pool * 0.25;
    let within = limits.iter().filter(|limit| near(**limit)).count();
    assert!(
        near(median) && within * 5 >= limits.len() * 4,
        "the limit should settle within ±25% of the pool of {pool}: median {median}, {within} \
         of {} samples within: {limits:?}",
        limits.len()
    );
}

/// One of these tests at a time: each keeps 22 clients and a pool busy, and a host too loaded
/// to answer on time shows up as a slower backend, which the limit rightly follows.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn the_limit_settles_at_the_pool_size_and_follows_when_it_grows() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(dir.path(), "backend.yaml", RULES, &[]);
    settles_and_follows(&[&floodgate]);
    let config = request(floodgate.debug_port, "GET", "/rlconfig", &[], "")
        .map(|answer| answer.body)
        .unwrap_or_default();
    assert!(
        config.contains(
            "adaptive 2..64 every 1s, slo 750ms, leases, gradient probing every 600 intervals"
        ),
        "/rlconfig shows the adaptive concurrency rule:\n{config}"
    );
}

/// Two floodgates over one Redis, the clients split between them: one leads (and measures
/// the releases it decides), both enforce the limit it writes, on one shared counter.
#[test]
fn two_instances_over_redis_share_one_adaptive_limit() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempdir();
    let redis = RedisServer::start();
    let url = redis.url();
    let flags = store_flags(&url, &[]);
    let first =
        Floodgate::start_with_rules(&subdir(dir.path(), "a"), "backend.yaml", RULES, &flags);
    let second =
        Floodgate::start_with_rules(&subdir(dir.path(), "b"), "backend.yaml", RULES, &flags);
    settles_and_follows(&[&first, &second]);
    let (a, b) = (limit(first.debug_port), limit(second.debug_port));
    assert!(
        a.zip(b).is_some_and(|(a, b)| (a - b).abs() <= 2.0),
        "both instances enforce about the same limit: {a:?} and {b:?}"
    );
}

/// Runs the clients against `instances` (in turn), a pool of 8 and then 16 workers; the limit
/// is read from the first instance.
fn settles_and_follows(instances: &[&Floodgate]) {
    let pool = Arc::new(Pool::new(8));
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|index| {
            let (pool, stop) = (Arc::clone(&pool), Arc::clone(&stop));
            let port = instances[index % instances.len()].http_port;
            thread::spawn(move || client(port, index, &pool, &stop))
        })
        .collect();
    let debug_port = instances[0].debug_port;
    let at_eight = settled_limits(debug_port);
    pool.grow(8);
    let at_sixteen = settled_limits(debug_port);
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        let _ = client.join();
    }
    eprintln!("limits with 8 workers: {at_eight:?}\nlimits with 16 workers: {at_sixteen:?}");
    assert_settled_near(&at_eight, 8.0);
    assert_settled_near(&at_sixteen, 16.0);
    // Only the instance that leads measures.
    let latency = instances.iter().find_map(|instance| {
        scrape(instance.debug_port)
            .get("floodgate_adaptive_latency_seconds", &LABELS)
            .filter(|seconds| seconds.is_finite())
    });
    assert!(
        latency.is_some_and(
            |latency| latency >= SERVICE.as_secs_f64() && latency < SERVICE.as_secs_f64() * 3.0
        ),
        "the p95 held should be the service time and a little queueing: {latency:?}s"
    );
}
