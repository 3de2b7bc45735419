//! A backend of limited capacity behind a floodgate concurrency rule, driven beyond it: the
//! load of `scripts/bench-shedding.sh`. Loopback targets only.
//!
//! The backend is a pool of `--workers` that each serve one request at a time by sleeping
//! `--service-ms`, so its capacity is workers / service time whatever the CPU does (the
//! 2-vCPU client could not overload floodgate itself). Requests arrive open loop at `--rate`;
//! each one asks floodgate for a lease (ShouldRateLimit with the lease id and its class, as
//! Envoy's first call does), and if admitted waits for a worker, is served, and releases its
//! lease (the stream-end call). One in `--critical-every` is of class `critical`, the rest `low`.
//!
//! ```text
//! cargo run --release --example shedbench -- --addr http://127.0.0.1:8081 --rate 1200 \
//!     --duration-s 8 --json out.json
//! ```
//!
//! Latency of an answered request: from when it was due to its refusal, or to the end of its
//! service (its queue wait included). *Good* = served within `--slo-ms`; goodput = good per
//! second.
//!
//! `--mode decide` measures floodgate's own admission instead (`--max-in-flight`,
//! `--shed-above`): a request is one ShouldRateLimit of `pool` and its class, and the store
//! behind floodgate is what has the limited capacity (the script puts Redis behind a proxy that
//! holds each reply). A request is served when its decision comes back OK and refused when it
//! gets floodgate's overload answer, which the script sets to OVER_LIMIT
//! (`--overload-answer over_limit`) so that a store error (UNAVAILABLE) stays an error; shed
//! and refused at the bound get the same answer and are told apart by floodgate's metrics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate::proto::{RateLimitRequest, RateLimitResponse};
use floodgate_testkit::descriptor;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::sync::Semaphore;
use tonic::transport::Channel;

/// What one request is.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// A lease, a backend worker's service, a release: concurrency rules.
    Lease,
    /// One decision: floodgate's own admission in front of a store of limited capacity.
    Decide,
}

#[derive(Parser, Debug)]
struct Args {
    #[arg(long, value_enum, default_value_t = Mode::Lease)]
    mode: Mode,
    /// With `--mode decide`: the store's capacity in decisions per second, for the report.
    #[arg(long)]
    capacity_rps: Option<f64>,
    /// floodgate's gRPC address (loopback).
    #[arg(long)]
    addr: String,
    #[arg(long, default_value = "shedding")]
    domain: String,
    /// The `pool` entry value the concurrency rule matches.
    #[arg(long, default_value = "api")]
    pool: String,
    /// Backend workers, each serving one request at a time.
    #[arg(long, default_value_t = 8)]
    workers: usize,
    /// Each request's service time at a worker.
    #[arg(long, default_value_t = 20)]
    service_ms: u64,
    /// Requests per second offered, open loop.
    #[arg(long)]
    rate: f64,
    #[arg(long, default_value_t = 8)]
    duration_s: u64,
    /// One request in this many is `critical`; the rest are `low`.
    #[arg(long, default_value_t = 5)]
    critical_every: u64,
    /// A request served within this is good.
    #[arg(long, default_value_t = 100)]
    slo_ms: u64,
    /// Each floodgate call's timeout (an error past it).
    #[arg(long, default_value_t = 2000)]
    timeout_ms: u64,
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    #[arg(long, default_value = "run")]
    label: String,
}

/// What became of one request.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Served {
        micros: u64,
        released: bool,
    },
    Shed {
        micros: u64,
    },
    /// Refused at the bound (`reason=full` or `reserved`).
    Refused {
        micros: u64,
    },
    Error,
}

#[derive(Debug, Default, Serialize)]
struct ClassReport {
    offered: u64,
    served: u64,
    good: u64,
    shed: u64,
    refused: u64,
    errors: u64,
    /// served / offered.
    success_rate: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    label: String,
    offered_rps: f64,
    capacity_rps: f64,
    seconds: f64,
    served: u64,
    good: u64,
    goodput_rps: f64,
    shed: u64,
    refused: u64,
    errors: u64,
    release_errors: u64,
    answered_p50_us: u64,
    answered_p99_us: u64,
    served_p50_us: u64,
    served_p99_us: u64,
    refused_p99_us: u64,
    critical: ClassReport,
    low: ClassReport,
}

struct Shared {
    client: RateLimitServiceClient<Channel>,
    workers: Semaphore,
    args: Args,
}

impl Shared {
    async fn call(&self, entries: &[(&str, &str)]) -> Option<RateLimitResponse> {
        let request = RateLimitRequest {
            domain: self.args.domain.clone(),
            descriptors: vec![descriptor(entries)],
            hits_addend: 0,
        };
        let mut client = self.client.clone();
        let call = client.should_rate_limit(request);
        match tokio::time::timeout(Duration::from_millis(self.args.timeout_ms), call).await {
            Ok(Ok(response)) => Some(response.into_inner()),
            _ => None,
        }
    }

    /// `--mode decide`: one decision; OVER_LIMIT (the overload answer: the rule's limit is
    /// never reached) is a refusal, anything else but OK an error.
    async fn decide(&self, class: &str, due: Instant) -> Fate {
        let answer = self
            .call(&[("pool", self.args.pool.as_str()), ("priority", class)])
            .await;
        let micros = u64::try_from(due.elapsed().as_micros()).unwrap_or(u64::MAX);
        match answer.map(|response| response.overall_code) {
            Some(code) if code == Code::Ok as i32 => Fate::Served {
                micros,
                released: true,
            },
            Some(code) if code == Code::OverLimit as i32 => Fate::Refused { micros },
            _ => Fate::Error,
        }
    }

    async fn request(&self, id: u64, class: &str, due: Instant) -> Fate {
        if self.args.mode == Mode::Decide {
            return self.decide(class, due).await;
        }
        let lease = format!("r{id}");
        let pool = self.args.pool.as_str();
        let Some(answer) = self
            .call(&[("pool", pool), ("lease_id", &lease), ("priority", class)])
            .await
        else {
            return Fate::Error;
        };
        let micros = || u64::try_from(due.elapsed().as_micros()).unwrap_or(u64::MAX);
        if answer.overall_code != Code::Ok as i32 {
            let shed = answer.response_headers_to_add.iter().any(|header| {
                header.key == "x-floodgate-priority" && header.value.contains("reason=shed")
            });
            return if shed {
                Fate::Shed { micros: micros() }
            } else {
                Fate::Refused { micros: micros() }
            };
        }
        {
            let Ok(_worker) = self.workers.acquire().await else {
                return Fate::Error;
            };
            tokio::time::sleep(Duration::from_millis(self.args.service_ms)).await;
        }
        let micros = micros();
        let released = self
            .call(&[
                ("pool", pool),
                ("lease_id", &lease),
                ("phase", "done"),
                ("priority", class),
            ])
            .await
            .is_some_and(|answer| answer.overall_code == Code::Ok as i32);
        Fate::Served { micros, released }
    }
}

/// Latencies in µs, 1 µs to 60 s, 3 significant digits.
fn histogram() -> Result<Histogram<u64>, hdrhistogram::CreationError> {
    Histogram::new_with_bounds(1, 60_000_000, 3)
}

fn add(counts: &mut ClassReport, fate: Fate, slo_us: u64) {
    counts.offered += 1;
    match fate {
        Fate::Served { micros, .. } => {
            counts.served += 1;
            if micros <= slo_us {
                counts.good += 1;
            }
        }
        Fate::Shed { .. } => counts.shed += 1,
        Fate::Refused { .. } => counts.refused += 1,
        Fate::Error => counts.errors += 1,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if !(args.rate > 0.0 && args.rate.is_finite()) {
        return Err("--rate must be a positive number".into());
    }
    let channel = Channel::from_shared(args.addr.clone())?.connect().await?;
    let shared = Arc::new(Shared {
        client: RateLimitServiceClient::new(channel),
        workers: Semaphore::new(args.workers),
        args,
    });
    let args = &shared.args;
    let duration = Duration::from_secs(args.duration_s);
    let start = Instant::now();
    let mut calls = Vec::new();
    let mut sent: u64 = 0;
    while start.elapsed() < duration {
        // Request k is due at k / rate.
        let elapsed = start.elapsed().as_secs_f64();
        while sent as f64 / args.rate <= elapsed {
            let due = start + Duration::from_secs_f64(sent as f64 / args.rate);
            let class = if sent.is_multiple_of(args.critical_every.max(1)) {
                "critical"
            } else {
                "low"
            };
            let shared = Arc::clone(&shared);
            let id = sent;
            calls.push((
                class,
                tokio::spawn(async move { shared.request(id, class, due).await }),
            ));
            sent += 1;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    let slo_us = args.slo_ms * 1000;
    let (mut answered, mut served, mut refused) = (histogram()?, histogram()?, histogram()?);
    let (mut critical, mut low) = (ClassReport::default(), ClassReport::default());
    let mut release_errors = 0;
    for (class, call) in calls {
        let fate = call.await.unwrap_or(Fate::Error);
        match fate {
            Fate::Served { micros, released } => {
                let _ = answered.record(micros.max(1));
                let _ = served.record(micros.max(1));
                if !released {
                    release_errors += 1;
                }
            }
            Fate::Shed { micros } | Fate::Refused { micros } => {
                let _ = answered.record(micros.max(1));
                let _ = refused.record(micros.max(1));
            }
            Fate::Error => {}
        }
        add(
            if class == "critical" {
                &mut critical
            } else {
                &mut low
            },
            fate,
            slo_us,
        );
    }
    for counts in [&mut critical, &mut low] {
        counts.success_rate = counts.served as f64 / counts.offered.max(1) as f64;
    }
    let report = Report {
        label: args.label.clone(),
        offered_rps: sent as f64 / seconds,
        capacity_rps: args
            .capacity_rps
            .unwrap_or(args.workers as f64 * 1000.0 / args.service_ms.max(1) as f64),
        seconds,
        served: critical.served + low.served,
        good: critical.good + low.good,
        goodput_rps: (critical.good + low.good) as f64 / seconds,
        shed: critical.shed + low.shed,
        refused: critical.refused + low.refused,
        errors: critical.errors + low.errors,
        release_errors,
        answered_p50_us: answered.value_at_quantile(0.5),
        answered_p99_us: answered.value_at_quantile(0.99),
        served_p50_us: served.value_at_quantile(0.5),
        served_p99_us: served.value_at_quantile(0.99),
        refused_p99_us: refused.value_at_quantile(0.99),
        critical,
        low,
    };
    let text = serde_json::to_string_pretty(&report)?;
    println!("{text}");
    if let Some(path) = &args.json {
        std::fs::write(path, text)?;
    }
    Ok(())
}
