//! The load a fault test runs through its fault: LOAD_TASKS clients calling every domain in
//! turn, each call recorded (when it started, how long it took, what it got), while the test
//! breaks the network and mends it; then until every domain whose answers show it has been
//! decided by Redis again, and a little longer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::RateLimitResponse;
use floodgate_testkit::rls;

use crate::harness::{Policy, Setup, DOMAINS};

const LOAD_TASKS: usize = 4;
/// Between two calls of one client.
const PAUSE: Duration = Duration::from_millis(2);
/// The load before the fault.
const BEFORE: Duration = Duration::from_millis(500);
/// The load once every domain is decided by Redis again.
const AFTER: Duration = Duration::from_secs(1);
/// How long the test waits for Redis's decisions to come back before it gives up (a failure).
const RECOVERY_WAIT: Duration = Duration::from_secs(15);

/// What one call got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// OK; `limited`: the answer shows a limit (a store decided; `fail_open` shows none).
    Ok {
        limited: bool,
    },
    OverLimit {
        unavailable_header: bool,
    },
    Grpc(tonic::Code),
}

impl Outcome {
    fn of(result: Result<RateLimitResponse, tonic::Status>) -> Outcome {
        match result {
            Ok(response) => match Code::try_from(response.overall_code) {
                Ok(Code::Ok) => Outcome::Ok {
                    limited: response
                        .statuses
                        .first()
                        .is_some_and(|status| status.current_limit.is_some()),
                },
                Ok(Code::OverLimit) => Outcome::OverLimit {
                    unavailable_header: response
                        .response_headers_to_add
                        .iter()
                        .any(|header| header.key == "x-floodgate-unavailable"),
                },
                other => panic!("unexpected overall code {other:?}"),
            },
            Err(status) => Outcome::Grpc(status.code()),
        }
    }
}

/// Whether a call's answer came from Redis, from the failure policy, or cannot be told
/// (`local` decides with counters of its own that answer alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Redis,
    Policy,
    Unknown,
}

/// What `outcome` says of where the answer came from under `policy`; `None` for an answer the
/// policy never gives (a failed call where it promises one, a wrong code).
pub fn source(policy: Policy, outcome: &Outcome) -> Option<Source> {
    // The counters are never over their limit: OVER_LIMIT only ever comes from `fail_closed`.
    match (policy, outcome) {
        (Policy::Error, Outcome::Ok { limited: true }) => Some(Source::Redis),
        (Policy::Error, Outcome::Grpc(tonic::Code::Unavailable)) => Some(Source::Policy),
        (Policy::FailOpen, Outcome::Ok { limited: true }) => Some(Source::Redis),
        (Policy::FailOpen, Outcome::Ok { limited: false }) => Some(Source::Policy),
        (Policy::FailClosed, Outcome::Ok { limited: true }) => Some(Source::Redis),
        (
            Policy::FailClosed,
            Outcome::OverLimit {
                unavailable_header: true,
            },
        ) => Some(Source::Policy),
        (Policy::Local, Outcome::Ok { limited: true }) => Some(Source::Unknown),
        _ => None,
    }
}

pub struct Sample {
    pub started: Instant,
    pub elapsed: Duration,
    pub domain: usize,
    pub outcome: Outcome,
}

impl Sample {
    pub fn ended(&self) -> Instant {
        self.started + self.elapsed
    }

    pub fn policy(&self) -> Policy {
        DOMAINS[self.domain].1
    }

    pub fn source(&self) -> Option<Source> {
        source(self.policy(), &self.outcome)
    }
}

/// A run through one fault.
pub struct Run {
    pub samples: Vec<Sample>,
    pub fault_began: Instant,
    pub fault_ended: Instant,
    /// Per domain, from the end of the fault to the end of the first call begun after it that
    /// Redis decided; `None` where answers do not tell (`local`) or none came in time.
    pub recovered_after: [Option<Duration>; 4],
}

/// Warms every domain, then runs the load: BEFORE, `inject`, `fault`, `heal`, then until
/// every domain that can tell has a call decided by Redis again (at most RECOVERY_WAIT), then
/// AFTER.
pub async fn run_through(
    setup: &Setup,
    fault: Duration,
    inject: impl FnOnce(&Setup),
    heal: impl FnOnce(&Setup),
) -> Run {
    let url = setup.floodgate.grpc_url();
    let mut warm = rls::connect(&url).await;
    let samples = Arc::new(Mutex::new(Vec::new()));
    for (index, (domain, _)) in DOMAINS.iter().enumerate() {
        let started = Instant::now();
        let outcome = Outcome::of(rls::call(&mut warm, request(domain)).await);
        assert_eq!(
            outcome,
            Outcome::Ok { limited: true },
            "warm-up of {domain}"
        );
        record(&samples, started, index, outcome);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for task in 0..LOAD_TASKS {
        let mut client = rls::connect(&url).await;
        let samples = Arc::clone(&samples);
        let stop = Arc::clone(&stop);
        tasks.push(tokio::spawn(async move {
            let mut turn = task;
            while !stop.load(Ordering::Relaxed) {
                let domain = turn % DOMAINS.len();
                turn += 1;
                let started = Instant::now();
                let outcome = Outcome::of(rls::call(&mut client, request(DOMAINS[domain].0)).await);
                record(&samples, started, domain, outcome);
                tokio::time::sleep(PAUSE).await;
            }
        }));
    }

    tokio::time::sleep(BEFORE).await;
    inject(setup);
    let fault_began = Instant::now();
    tokio::time::sleep(fault).await;
    heal(setup);
    let fault_ended = Instant::now();
    let waiting = Instant::now();
    while !recovered(&lock(&samples), fault_ended)
        .iter()
        .all(|(done, _)| *done)
    {
        if waiting.elapsed() > RECOVERY_WAIT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(AFTER).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await
            .unwrap_or_else(|error| panic!("load task: {error}"));
    }
    let samples = std::mem::take(&mut *lock(&samples));
    let recovered_after = recovered(&samples, fault_ended).map(|(_, after)| after);
    Run {
        samples,
        fault_began,
        fault_ended,
        recovered_after,
    }
}

/// Per domain: whether it needs no more waiting, and when it was decided by Redis again.
fn recovered(samples: &[Sample], fault_ended: Instant) -> [(bool, Option<Duration>); 4] {
    std::array::from_fn(|domain| {
        if DOMAINS[domain].1 == Policy::Local {
            return (true, None);
        }
        let after = samples
            .iter()
            .filter(|sample| {
                sample.domain == domain
                    && sample.started >= fault_ended
                    && sample.source() == Some(Source::Redis)
            })
            .map(|sample| sample.ended().duration_since(fault_ended))
            .min();
        (after.is_some(), after)
    })
}

fn request(domain: &str) -> floodgate::proto::RateLimitRequest {
    rls::request(domain, &[&[("user", "netfault")]])
}

fn record(samples: &Mutex<Vec<Sample>>, started: Instant, domain: usize, outcome: Outcome) {
    lock(samples).push(Sample {
        started,
        elapsed: started.elapsed(),
        domain,
        outcome,
    });
}

fn lock(samples: &Mutex<Vec<Sample>>) -> std::sync::MutexGuard<'_, Vec<Sample>> {
    samples
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
