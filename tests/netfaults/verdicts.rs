//! What a fault test demands of a run, printed before it is asserted:
//!
//! * **bounded calls**: no call took longer than the Redis timeout plus 200 ms (a product
//!   guarantee, so asserted; p50, p99 and max printed, over the whole run and during the
//!   fault);
//! * **answers**: every call got what its domain's policy promises (`fail_open`, `fail_closed`
//!   and `local` never fail a call; `error` fails one with UNAVAILABLE and nothing else);
//! * **recovery**: after the fault, each domain is decided by Redis again within
//!   RECOVERY_BOUND (printed);
//! * **counters**, as docs/redis.md says: "a request answered by the failure policy can still
//!   have been counted. Limits err towards counting too much, never too little": each domain's
//!   count in Redis is at least the calls Redis answered and at most the calls made; and
//!   `floodgate_failure_policy_calls_total` counts exactly the answers the policy gave.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use floodgate_testkit::redis::scan_keys;

use crate::harness::{Path, Policy, Setup, DOMAINS, TIMEOUT_MS};
use crate::load::{run_through, Run, Sample, Source};

/// The bound on one call: the Redis timeout plus 200 ms.
pub const MAX_CALL: Duration = Duration::from_millis(TIMEOUT_MS + 200);
/// After the fault ends, each domain is decided by Redis again within this. The circuit
/// breaker probes every 500 ms; a connection lost in the fault is made again at once.
pub const RECOVERY_BOUND: Duration = Duration::from_secs(3);

/// What the fault should have done to the answers while it lasted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Effect {
    /// Decisions failed: the policies answered some calls.
    Disturbed,
    /// Redis kept deciding (latency below the timeout): at least this share of the `error`
    /// domain's calls during the fault were decided by Redis.
    Undisturbed { min_redis_share: f64 },
}

/// Prints the run's figures, then asserts every demand above.
pub async fn judge(name: &str, setup: &Setup, run: &Run, effect: Effect) {
    let during: Vec<&Sample> = run
        .samples
        .iter()
        .filter(|sample| sample.started >= run.fault_began && sample.started < run.fault_ended)
        .collect();
    let all: Vec<&Sample> = run.samples.iter().collect();
    println!(
        "{name}: {} calls; all: {}; during the fault ({:?}): {} calls, {}",
        all.len(),
        latencies(&all),
        run.fault_ended.duration_since(run.fault_began),
        during.len(),
        latencies(&during),
    );
    let counts = redis_counts(setup, run).await;
    let policy_calls = policy_calls(setup).await;
    let mut failures = Vec::new();
    for (domain, (name_of_domain, policy)) in DOMAINS.iter().enumerate() {
        let mine: Vec<&Sample> = all.iter().copied().filter(|s| s.domain == domain).collect();
        let in_fault = during.iter().filter(|s| s.domain == domain).count();
        let by = |wanted: Source| mine.iter().filter(|s| s.source() == Some(wanted)).count();
        let (redis, by_policy, unknown) =
            (by(Source::Redis), by(Source::Policy), by(Source::Unknown));
        let wrong: Vec<&&Sample> = mine.iter().filter(|s| s.source().is_none()).collect();
        let counted = counts[domain];
        let metric = policy_calls[domain];
        // `local` answers alike from Redis and from its own counters: the metric tells apart.
        let redis_decided = match policy {
            Policy::Local => unknown.saturating_sub(metric as usize),
            _ => redis,
        };
        println!(
            "  {name_of_domain} ({}): {} calls, {in_fault} in the fault; from Redis {}, from the \
             policy {}, wrong {}; decided by Redis again {} after the fault; Redis counted {}, \
             floodgate_failure_policy_calls_total {metric}",
            policy.name(),
            mine.len(),
            if *policy == Policy::Local {
                format!("{redis_decided} (metric)")
            } else {
                redis.to_string()
            },
            if *policy == Policy::Local {
                format!("{metric} (metric)")
            } else {
                by_policy.to_string()
            },
            wrong.len(),
            run.recovered_after[domain].map_or_else(
                || "(not told by answers)".to_owned(),
                |after| format!("{after:?}")
            ),
            counted.map_or_else(
                || "(window turned: not judged)".to_owned(),
                |count| count.to_string()
            ),
        );
        if let Some(first) = wrong.first() {
            failures.push(format!(
                "{name_of_domain}: {} calls got what `{}` never answers, e.g. {:?}",
                wrong.len(),
                policy.name(),
                first.outcome
            ));
        }
        if *policy != Policy::Local {
            match run.recovered_after[domain] {
                Some(after) if after <= RECOVERY_BOUND => {}
                Some(after) => failures.push(format!(
                    "{name_of_domain}: decided by Redis again only {after:?} after the fault"
                )),
                None => failures.push(format!(
                    "{name_of_domain}: no decision by Redis after the fault"
                )),
            }
            if metric as usize != by_policy {
                failures.push(format!(
                    "{name_of_domain}: floodgate_failure_policy_calls_total{{policy=\"{}\"}} is \
                     {metric}, the policy answered {by_policy} calls",
                    policy.name()
                ));
            }
        }
        if let Some(counted) = counted {
            let made = mine.len() as u64;
            if counted > made {
                failures.push(format!(
                    "{name_of_domain}: Redis counted {counted}, more than the {made} calls made"
                ));
            }
            if counted < redis_decided as u64 {
                failures.push(format!(
                    "{name_of_domain}: Redis counted {counted}, fewer than the {redis_decided} \
                     calls it decided"
                ));
            }
        }
    }
    match effect {
        Effect::Disturbed => {
            let answered_by_policy = during
                .iter()
                .filter(|s| s.source() == Some(Source::Policy))
                .count();
            if answered_by_policy == 0 {
                failures.push("the fault changed nothing: no policy answer during it".to_owned());
            }
        }
        Effect::Undisturbed { min_redis_share } => {
            let error_domain: Vec<&&Sample> = during
                .iter()
                .filter(|s| s.policy() == Policy::Error)
                .collect();
            let redis = error_domain
                .iter()
                .filter(|s| s.source() == Some(Source::Redis))
                .count();
            let share = redis as f64 / error_domain.len().max(1) as f64;
            println!(
                "  Redis decided {:.1} % of the error domain's calls during the fault",
                share * 100.0
            );
            if share < min_redis_share {
                failures.push(format!(
                    "Redis decided only {:.1} % of the error domain's calls during a latency \
                     below the timeout",
                    share * 100.0
                ));
            }
        }
    }
    if let Some(slowest) = all.iter().max_by_key(|s| s.elapsed) {
        if slowest.elapsed > MAX_CALL {
            failures.push(format!(
                "a call took {:?} (bound {MAX_CALL:?}), begun {} the fault: {} got {:?}",
                slowest.elapsed,
                phase(run, slowest.started),
                DOMAINS[slowest.domain].0,
                slowest.outcome
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{name}:\n  {}\nfloodgate's log:\n{}",
        failures.join("\n  "),
        tail(&setup.floodgate.process.log_text(), 40)
    );
}

fn phase(run: &Run, at: Instant) -> String {
    if at < run.fault_began {
        format!("{:?} before", run.fault_began.duration_since(at))
    } else if at < run.fault_ended {
        format!("{:?} into", at.duration_since(run.fault_began))
    } else {
        format!("{:?} after", at.duration_since(run.fault_ended))
    }
}

fn latencies(samples: &[&Sample]) -> String {
    let mut sorted: Vec<Duration> = samples.iter().map(|s| s.elapsed).collect();
    sorted.sort();
    let at = |fraction: f64| {
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        sorted[((sorted.len() - 1) as f64 * fraction).round() as usize]
    };
    format!(
        "p50 {:?} p99 {:?} max {:?}",
        at(0.5),
        at(0.99),
        sorted.last().copied().unwrap_or_default()
    )
}

/// Per domain, the count Redis holds for its one counter; `None` when its window began after
/// the run did (a month turned meanwhile: the count restarted, nothing to compare).
async fn redis_counts(setup: &Setup, run: &Run) -> [Option<u64>; 4] {
    let first = run
        .samples
        .iter()
        .map(|sample| sample.started)
        .min()
        .unwrap_or_else(Instant::now);
    let run_began_us = SystemTime::now()
        .checked_sub(first.elapsed())
        .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |since| since.as_micros());
    let mut inspector = setup.redis.inspector().await;
    let mut counts = [None; 4];
    for (index, (domain, _)) in DOMAINS.iter().enumerate() {
        let keys = scan_keys(&mut inspector, &format!("floodgate:{{{domain}}}:*")).await;
        assert_eq!(
            keys.len(),
            1,
            "{domain}: one counter expected, found {keys:?}"
        );
        let state: String = redis::cmd("GET")
            .arg(&keys[0])
            .query_async(&mut inspector)
            .await
            .unwrap_or_else(|error| panic!("GET {}: {error}", keys[0]));
        // "F <expires_at> <window_start> <count>" (src/store/redis/lua/fixed_window.lua).
        let fields: Vec<&str> = state.split(' ').collect();
        let (start, count) = match fields.as_slice() {
            ["F", _, start, count] => (
                start
                    .parse::<i128>()
                    .unwrap_or_else(|_| panic!("{domain}: state {state}")),
                count
                    .parse::<u64>()
                    .unwrap_or_else(|_| panic!("{domain}: state {state}")),
            ),
            _ => panic!("{domain}: unexpected fixed-window state {state:?}"),
        };
        counts[index] = (start <= run_began_us as i128).then_some(count);
    }
    counts
}

/// `floodgate_failure_policy_calls_total` of each domain's policy (one domain per policy).
async fn policy_calls(setup: &Setup) -> [u64; 4] {
    let port = setup.floodgate.debug_port;
    let metrics =
        tokio::task::spawn_blocking(move || floodgate_testkit::http::get(port, "/metrics", &[]))
            .await
            .unwrap_or_else(|error| panic!("metrics task: {error}"))
            .unwrap_or_else(|error| panic!("GET /metrics: {error}"));
    std::array::from_fn(|domain| {
        let prefix = format!(
            "floodgate_failure_policy_calls_total{{policy=\"{}\"}} ",
            DOMAINS[domain].1.name()
        );
        metrics
            .body
            .lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .map_or(0, |value| value.trim().parse::<f64>().unwrap_or(0.0) as u64)
    })
}

/// floodgate's own last `lines` lines (not the HTTP/2 framing a debug log is full of).
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("floodgate"))
        .collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A whole fault test: the processes (`path`), the load through `fault` (`inject`, then
/// `heal` after `length`), and the verdict. Returns at once, after saying why, where network
/// namespaces cannot be made outside CI.
pub async fn survive(
    name: &str,
    path: Path,
    length: Duration,
    inject: impl FnOnce(&Setup),
    heal: impl FnOnce(&Setup),
    effect: Effect,
) {
    let Some(setup) = Setup::start(path).await else {
        return;
    };
    let run = run_through(&setup, length, inject, heal).await;
    judge(name, &setup, &run, effect).await;
}
