//! nginx `limit_req` and floodgate's `leaky_bucket` admit the same requests.
//!
//! For several rate/burst pairs (r/s and r/m), one client thread per pair replays a timed
//! sequence (200 requests, seeded random gaps, about 20 s) against a real nginx (`limit_req …
//! nodelay`, `limit_req_status 429`) and floodgate's check endpoint (a `leaky_bucket` rule with
//! the same numbers), one key each. Every request is written to nginx and then at once to
//! floodgate, before either answer is read, so both see it within some tens of microseconds.
//! The two admit/reject sequences must be the same, except where a decision was within about a
//! millisecond of the instant the bucket had room.
//!
//! How that is made precise. Both are the same GCRA: admit iff `t ≥ TAT − τ`, then
//! `TAT = max(TAT, t) + T`, with `T = 1/rate` and `τ = burst · T`, rejected requests changing
//! nothing (`/work/shared/reference/envoy-and-nginx.md` §4.4: nginx's `excess` is
//! `(TAT − t)·rate − 1` in milli-requests). The test notes when each request was sent and each
//! answer read, so the instant each server read its clock lies in a known window:
//!
//! * nginx: `[sent − 1 ms, answered]`: its clock is whole milliseconds (truncated), read when its
//!   event loop wakes up;
//! * floodgate: `[sent, answered]`: microseconds, read while deciding;
//!
//! each widened by 0.2 ms, as floodgate reads the wall clock and the test a monotonic one. A model
//! of each server, fed with that server's own decisions, tracks the interval TAT must lie in (the
//! earliest and the latest possible clock readings give its bounds, as TAT only grows with
//! them). For each request the model then says "certainly admitted", "certainly rejected", or
//! "either": the boundary falls inside the window. The test requires:
//!
//! 1. every decision of each server agrees with its model unless the model says "either";
//! 2. the servers disagree only on boundary requests: the instant the bucket had room lies, in
//!    one of the two models, between nginx's earliest and floodgate's latest possible reading
//!    (about 1–2 ms apart: nginx's truncation plus the round trips);
//! 3. that happens rarely (at most 5% of a pair's requests).
//!
//! After a disagreement the two buckets differ by one request, which would show up later as
//! disagreements that are not at a boundary themselves (and, without a burst, for as long as the
//! bucket never empties: the admissions are shifted in phase). Rather than let that play out,
//! the pair moves on to a fresh key on both servers, so every comparison starts from equal
//! buckets.
//!
//! One inexactness of nginx is modelled too: it stores `rate=30r/m` as 500 milli-requests per
//! second and computes the leak as `rate * ms / 1000` in integers, losing up to half a
//! milli-request (1 ms of leak at this rate) per admitted request while the bucket stays
//! non-empty; the model lets nginx's TAT run that much later. Rates of whole requests per second
//! (`10r/s`, `120r/m` = 2000 milli-requests/s) have exact integer arithmetic. (`rate=7r/m` would
//! also be stored rounded down, 116 instead of 116.67: avoid such rates when comparing.)

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use floodgate_testkit::nginx::{KeepAliveClient, Nginx};
use floodgate_testkit::{free_port, wait_for_port, Floodgate};

/// One nginx `limit_req` setting and the floodgate rule it maps to.
struct Pair {
    name: &'static str,
    /// nginx's `rate=` (`10r/s`, `30r/m`).
    nginx_rate: &'static str,
    burst: u32,
    /// floodgate: `unit` and `requests_per_unit`.
    unit: &'static str,
    requests_per_unit: u32,
    /// Gaps between requests are up to this long (3/4 of them; the rest are 0–3 ms, bursts).
    max_gap_ms: u64,
}

const PAIRS: [Pair; 5] = [
    Pair {
        name: "r10s_b20",
        nginx_rate: "10r/s",
        burst: 20,
        unit: "second",
        requests_per_unit: 10,
        max_gap_ms: 150,
    },
    Pair {
        name: "r8s_b12",
        nginx_rate: "8r/s",
        burst: 12,
        unit: "second",
        requests_per_unit: 8,
        max_gap_ms: 200,
    },
    Pair {
        name: "r3s_b0",
        nginx_rate: "3r/s",
        burst: 0,
        unit: "second",
        requests_per_unit: 3,
        max_gap_ms: 200,
    },
    Pair {
        name: "r120m_b4",
        nginx_rate: "120r/m",
        burst: 4,
        unit: "minute",
        requests_per_unit: 120,
        max_gap_ms: 200,
    },
    Pair {
        name: "r30m_b2",
        nginx_rate: "30r/m",
        burst: 2,
        unit: "minute",
        requests_per_unit: 30,
        max_gap_ms: 200,
    },
];

const REQUESTS: usize = 200;
/// No pair sends after this, whatever the gaps added up to.
const DEADLINE: Duration = Duration::from_secs(25);
const SEED: u64 = 0x5eed_f100_d6a7;
/// Clock-domain slack on every window (wall vs monotonic clocks, scheduling of the reading).
const MARGIN_US: f64 = 200.0;
/// nginx's clock is whole milliseconds.
const NGINX_CLOCK_US: f64 = 1000.0;

fn nginx_config(port: u16) -> String {
    let mut zones = String::new();
    let mut locations = String::new();
    for pair in &PAIRS {
        let _ = writeln!(
            zones,
            "    limit_req_zone $http_x_client_id zone={}:1m rate={};",
            pair.name, pair.nginx_rate
        );
        // nginx refuses `burst=0`: no burst is written as none.
        let burst = if pair.burst > 0 {
            format!(" burst={}", pair.burst)
        } else {
            String::new()
        };
        // empty_gif answers in the content phase; `return` would run in the rewrite phase,
        // before limit_req (preaccess), and bypass it.
        let _ = writeln!(
            locations,
            "        location = /{} {{ limit_req zone={}{burst} nodelay; empty_gif; }}",
            pair.name, pair.name
        );
    }
    format!(
        "worker_processes 1;
error_log error.log warn;
events {{ worker_connections 256; }}
http {{
    client_body_temp_path client_body_temp;
    proxy_temp_path proxy_temp;
    fastcgi_temp_path fastcgi_temp;
    uwsgi_temp_path uwsgi_temp;
    scgi_temp_path scgi_temp;
    access_log off;
    keepalive_requests 100000;
    limit_req_status 429;
{zones}    server {{
        listen 127.0.0.1:{port};
{locations}    }}
}}
"
    )
}

/// One rule per pair, counted per `client` (a fresh client is a fresh bucket).
fn floodgate_config() -> String {
    let mut text = String::from("domain: parity\ndescriptors:\n");
    for pair in &PAIRS {
        let _ = write!(
            text,
            "  - key: pair
    value: {}
    descriptors:
      - key: client
        rate_limit:
          algorithm: leaky_bucket
          unit: {}
          requests_per_unit: {}
          burst: {}
          nodelay: true
",
            pair.name, pair.unit, pair.requests_per_unit, pair.burst
        );
    }
    text
}

/// splitmix64: a fixed, seeded sequence that no library upgrade can change.
struct Gaps(u64);

impl Gaps {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn next_gap(&mut self, max_ms: u64) -> Duration {
        let bursty = self.next_u64().is_multiple_of(4);
        let max_us = if bursty { 3_000 } else { max_ms * 1000 };
        Duration::from_micros(self.next_u64() % (max_us + 1))
    }
}

/// One request of a replay: when it was sent and the answers read (µs since the start), what
/// each server decided, and the key generation it was sent with.
#[derive(Debug, Clone, Copy)]
struct Sample {
    sent: f64,
    nginx_answered: f64,
    floodgate_answered: f64,
    nginx_admitted: bool,
    floodgate_admitted: bool,
    generation: u32,
}

fn expect_status(
    pair: &Pair,
    index: usize,
    server: &str,
    answer: std::io::Result<u16>,
    admitted: u16,
    rejected: u16,
) -> bool {
    match answer {
        Ok(status) if status == admitted => true,
        Ok(status) if status == rejected => false,
        other => panic!("{} #{index}: {server} answered {other:?}", pair.name),
    }
}

/// Runs one pair's sequence against both servers.
fn replay(
    pair: &Pair,
    seed: u64,
    nginx_port: u16,
    floodgate_port: u16,
    start: Instant,
) -> Vec<Sample> {
    let micros = |at: Instant| at.duration_since(start).as_secs_f64() * 1e6;
    let mut gaps = Gaps(seed);
    let mut nginx = KeepAliveClient::new(nginx_port);
    let mut floodgate = KeepAliveClient::new(floodgate_port);
    let connected = nginx.connect().and_then(|()| floodgate.connect());
    if let Err(error) = connected {
        panic!("{}: cannot connect: {error}", pair.name);
    }
    let nginx_path = format!("/{}", pair.name);
    let mut generation = 0;
    let mut samples = Vec::with_capacity(REQUESTS);
    for index in 0..REQUESTS {
        std::thread::sleep(gaps.next_gap(pair.max_gap_ms));
        if start.elapsed() > DEADLINE {
            break;
        }
        let client = format!("client-{generation}");
        let descriptor = format!("pair={},client={client}", pair.name);
        let sent = Instant::now();
        let to_nginx = nginx.send(&nginx_path, &[("X-Client-Id", &client)]);
        let to_floodgate = floodgate.send(
            "/check",
            &[
                ("X-RateLimit-Domain", "parity"),
                ("X-RateLimit-Descriptor", &descriptor),
            ],
        );
        let from_nginx = to_nginx.and_then(|()| nginx.receive());
        let nginx_answered = Instant::now();
        let from_floodgate = to_floodgate.and_then(|()| floodgate.receive());
        let floodgate_answered = Instant::now();
        let nginx_admitted =
            expect_status(pair, index, "nginx", from_nginx.map(|a| a.status), 200, 429);
        let floodgate_admitted = expect_status(
            pair,
            index,
            "floodgate",
            from_floodgate.map(|a| a.status),
            200,
            403,
        );
        samples.push(Sample {
            sent: micros(sent),
            nginx_answered: micros(nginx_answered),
            floodgate_answered: micros(floodgate_answered),
            nginx_admitted,
            floodgate_admitted,
            generation,
        });
        if nginx_admitted != floodgate_admitted {
            generation += 1;
        }
    }
    samples
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Admit,
    Reject,
    /// The boundary lies inside the window: either decision is right.
    Either,
}

/// GCRA with uncertain clock readings: TAT is known to lie in `[tat.0, tat.1]`.
#[derive(Debug, Clone, Copy)]
struct Model {
    /// T: µs per request.
    period: f64,
    /// τ = burst · T.
    tolerance: f64,
    /// Extra µs of TAT per admitted request that integer arithmetic may add (nginx, r/m).
    arithmetic_slack: f64,
    /// `None`: a fresh key.
    tat: Option<(f64, f64)>,
}

impl Model {
    fn new(period: f64, burst: u32, arithmetic_slack: f64) -> Model {
        Model {
            period,
            tolerance: f64::from(burst) * period,
            arithmetic_slack,
            tat: None,
        }
    }

    /// The decision for a request whose clock reading lies in `[early, late]`.
    fn judge(&self, early: f64, late: f64) -> Verdict {
        match self.tat {
            None => Verdict::Admit,
            Some((tat_early, tat_late)) => {
                if early >= tat_late - self.tolerance {
                    Verdict::Admit
                } else if late < tat_early - self.tolerance {
                    Verdict::Reject
                } else {
                    Verdict::Either
                }
            }
        }
    }

    fn record(&mut self, admitted: bool, early: f64, late: f64) {
        if !admitted {
            return;
        }
        let (tat_early, tat_late) = self.tat.unwrap_or((f64::MIN, f64::MIN));
        self.tat = Some((
            tat_early.max(early) + self.period,
            tat_late.max(late) + self.period + self.arithmetic_slack,
        ));
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// nginx's stored rate in milli-requests per second (`ngx_http_limit_req_zone`).
fn nginx_milli_rate(pair: &Pair) -> u64 {
    let per_unit = u64::from(pair.requests_per_unit) * 1000;
    match pair.unit {
        "second" => per_unit,
        _ => per_unit / 60,
    }
}

#[derive(Debug, Default)]
struct Findings {
    requests: usize,
    nginx_admitted: usize,
    floodgate_admitted: usize,
    /// Requests whose window held the boundary, per server's model.
    nginx_undecided: usize,
    floodgate_undecided: usize,
    /// Request indexes where the servers disagreed at a boundary.
    boundary_disagreements: Vec<usize>,
    /// Decisions a model said were certainly wrong: (server, request index, verdict).
    violations: Vec<(&'static str, usize, Verdict)>,
    /// Disagreements away from any boundary.
    unexplained: Vec<usize>,
}

fn examine(pair: &Pair, samples: &[Sample]) -> Findings {
    let window_us = match pair.unit {
        "second" => 1e6,
        _ => 60e6,
    };
    let floodgate_period = window_us / f64::from(pair.requests_per_unit);
    let milli_rate = nginx_milli_rate(pair);
    let nginx_period = 1e9 / milli_rate as f64;
    // Up to (1000 − gcd)/1000 of a milli-request lost per admission, each worth 1e6/rate µs.
    let nginx_slack = (1000 - gcd(milli_rate, 1000)) as f64 / 1000.0 * 1e6 / milli_rate as f64;
    let fresh = || {
        (
            Model::new(nginx_period, pair.burst, nginx_slack),
            Model::new(floodgate_period, pair.burst, 0.0),
        )
    };
    let (mut nginx, mut floodgate) = fresh();
    let mut generation = 0;
    let mut findings = Findings {
        requests: samples.len(),
        ..Findings::default()
    };
    for (index, sample) in samples.iter().enumerate() {
        if sample.generation != generation {
            generation = sample.generation;
            (nginx, floodgate) = fresh();
        }
        let nginx_window = (
            sample.sent - NGINX_CLOCK_US - MARGIN_US,
            sample.nginx_answered + MARGIN_US,
        );
        let floodgate_window = (
            sample.sent - MARGIN_US,
            sample.floodgate_answered + MARGIN_US,
        );
        let nginx_verdict = nginx.judge(nginx_window.0, nginx_window.1);
        let floodgate_verdict = floodgate.judge(floodgate_window.0, floodgate_window.1);
        for (server, verdict, admitted, undecided) in [
            (
                "nginx",
                nginx_verdict,
                sample.nginx_admitted,
                &mut findings.nginx_undecided,
            ),
            (
                "floodgate",
                floodgate_verdict,
                sample.floodgate_admitted,
                &mut findings.floodgate_undecided,
            ),
        ] {
            match (verdict, admitted) {
                (Verdict::Either, _) => *undecided += 1,
                (Verdict::Admit, true) | (Verdict::Reject, false) => {}
                _ => findings.violations.push((server, index, verdict)),
            }
        }
        if sample.nginx_admitted != sample.floodgate_admitted {
            // From nginx's earliest to floodgate's latest possible reading of this request.
            let (early, late) = (nginx_window.0, floodgate_window.1);
            let at_boundary = nginx.judge(early, late) == Verdict::Either
                || floodgate.judge(early, late) == Verdict::Either;
            if at_boundary {
                findings.boundary_disagreements.push(index);
            } else {
                findings.unexplained.push(index);
            }
        }
        nginx.record(sample.nginx_admitted, nginx_window.0, nginx_window.1);
        floodgate.record(
            sample.floodgate_admitted,
            floodgate_window.0,
            floodgate_window.1,
        );
        findings.nginx_admitted += usize::from(sample.nginx_admitted);
        findings.floodgate_admitted += usize::from(sample.floodgate_admitted);
    }
    findings
}

fn sequence(samples: &[Sample], pick: impl Fn(&Sample) -> bool) -> String {
    samples
        .iter()
        .map(|sample| if pick(sample) { '+' } else { '.' })
        .collect()
}

#[test]
fn nginx_limit_req_and_floodgate_leaky_bucket_admit_the_same_requests() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let config = dir.path().join("parity.yaml");
    std::fs::write(&config, floodgate_config())
        .unwrap_or_else(|error| panic!("write config: {error}"));
    let floodgate = Floodgate::start(&config, &[], dir.path());
    wait_for_port(
        floodgate.http_port,
        Duration::from_secs(10),
        "floodgate HTTP",
    );
    let prefix = dir.path().join("nginx");
    std::fs::create_dir_all(&prefix).unwrap_or_else(|error| panic!("nginx prefix: {error}"));
    let nginx_port = free_port();
    let nginx = Nginx::start(&nginx_config(nginx_port), Path::new(&prefix), nginx_port);

    let start = Instant::now();
    let results: Vec<(&Pair, Vec<Sample>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = PAIRS
            .iter()
            .enumerate()
            .map(|(index, pair)| {
                let seed = SEED ^ (index as u64);
                let floodgate_port = floodgate.http_port;
                scope.spawn(move || (pair, replay(pair, seed, nginx_port, floodgate_port, start)))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| panic!("a replay thread panicked\n{}", nginx.logs()))
            })
            .collect()
    });

    let mut report = String::new();
    let mut failures = Vec::new();
    for (pair, samples) in &results {
        let findings = examine(pair, samples);
        let _ = writeln!(
            report,
            "{:9} rate={:6} burst={:2}: {} requests; admitted nginx {} floodgate {}; \
             disagreements {}, each at the boundary; windows holding the boundary \
             nginx {} floodgate {}",
            pair.name,
            pair.nginx_rate,
            pair.burst,
            findings.requests,
            findings.nginx_admitted,
            findings.floodgate_admitted,
            findings.boundary_disagreements.len(),
            findings.nginx_undecided,
            findings.floodgate_undecided,
        );
        let details = format!(
            "{}: findings {findings:?}\n  nginx     {}\n  floodgate {}",
            pair.name,
            sequence(samples, |s| s.nginx_admitted),
            sequence(samples, |s| s.floodgate_admitted),
        );
        let rejected = findings.requests - findings.nginx_admitted;
        if findings.requests < REQUESTS / 2 || findings.nginx_admitted < 5 || rejected < 5 {
            failures.push(format!(
                "too little to compare (want ≥ {} requests, ≥ 5 admitted and rejected): {details}",
                REQUESTS / 2
            ));
        }
        if !findings.violations.is_empty() {
            failures.push(format!("a decision its model rules out: {details}"));
        }
        if !findings.unexplained.is_empty() {
            failures.push(format!("disagreement away from any boundary: {details}"));
        }
        if findings.boundary_disagreements.len() * 20 > findings.requests.max(1) {
            failures.push(format!("too many boundary disagreements: {details}"));
        }
    }
    eprintln!("nginx limit_req vs floodgate leaky_bucket:\n{report}");
    assert!(
        failures.is_empty(),
        "{}\n{report}\n{}",
        failures.join("\n"),
        nginx.logs()
    );
}
