//! Load generator for Envoy's `RateLimitService/ShouldRateLimit` (gRPC, h2c), to loopback
//! targets only.
//!
//! ```text
//! # peak throughput: closed loop at full concurrency
//! cargo run --release --example loadgen -- --addr http://127.0.0.1:8081 --max-rate \
//!     --concurrency 64 --duration 10s
//! # k6-style ramps of the target rate, open loop, concurrency as the cap
//! cargo run --release --example loadgen -- --addr http://127.0.0.1:8081 \
//!     --stages 30s:200,1m:1000,30s:0 --concurrency 256 --json out.json
//! # a constant rate with bot bursts every 10 s
//! cargo run --release --example loadgen -- --addr http://127.0.0.1:8081 --rate 2000 \
//!     --duration 30s --bot-burst 5000:2s:10s --bot-keys 5
//! # a mix of priority classes: one critical request for two low ones, each reported apart
//! cargo run --release --example loadgen -- --addr http://127.0.0.1:8081 --rate 600 \
//!     --domain shop --mix critical:1:pool=shop,priority=critical \
//!     --mix low:2:pool=shop,priority=low
//! ```
//!
//! Requests are spread round robin over `--connections` HTTP/2 connections, each call a
//! plain `h2` stream (`loadgen/grpc.rs`: cheaper than tonic's client on shared CPUs; a lost
//! connection is not reopened, so the calls after it count as errors). Latency is measured
//! per call, from handing the request to the client to the complete answer, in an
//! HdrHistogram at µs precision; errors are counted but not put in the histogram. In the
//! open loop, a request due while all `--concurrency` slots are busy is not sent and
//! counts as `shed` (so a slow server shows up as shed instead of hiding behind a queue).
//! The open loop sends each request when it is due (a timerfd, finer than tokio's 1 ms
//! timer, so requests do not leave in per-millisecond bursts): evenly spaced, or with
//! `--arrivals poisson` at independent random times, as from many callers.
//! Bot traffic (`--bot-burst`) shares the connections and the slots and is reported apart.
//! A `--mix` splits the legitimate traffic into classes, each with its own descriptors, taking
//! turns by weight (deterministically, so every second holds the mix); each class is also
//! reported apart.

mod cli;
mod grpc;
mod run;
mod schedule;
mod stats;
mod timer;
mod workload;

use std::process::ExitCode;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use serde::Serialize;

use cli::{check_mix, parse_target, Args};
use run::{Budget, RunEnd, Shared};
use schedule::{Bursts, Plan};
use stats::{Recorder, Report};
use workload::{KeyPicker, Mix, Workload};

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Closed loop (peak throughput) or open loop (arrivals on a schedule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Open,
    Closed,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Closed => "closed",
        }
    }
}

/// What `--json` writes: the run's settings and its figures.
#[derive(Debug, Serialize)]
struct JsonReport<'a> {
    label: &'a str,
    target: String,
    mode: &'static str,
    /// Open loop only: how requests were spaced.
    arrivals: Option<&'static str>,
    domain: &'a str,
    descriptors: Vec<&'a str>,
    /// The `--mix` classes as given (empty without a mix).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    mix: Vec<&'a str>,
    keys: u64,
    zipf: Option<f64>,
    bot_burst: Option<String>,
    bot_keys: u64,
    concurrency: u32,
    connections: u32,
    threads: u16,
    warmup_s: f64,
    timeout_s: f64,
    max_requests: u64,
    /// Why the run stopped before its plan ended, if it did.
    stopped_early: Option<String>,
    /// Requests still unanswered when the final drain gave up.
    abandoned_in_flight: u64,
    /// CPU time (user + system) loadgen itself used, where /proc tells it.
    loadgen_cpu_s: Option<f64>,
    #[serde(flatten)]
    report: &'a Report,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("loadgen: error: {message}");
            ExitCode::from(2)
        }
    }
}

/// The plan the flags ask for, after the checks clap cannot make.
fn plan(args: &Args) -> Result<(Plan, Mode), String> {
    let (plan, mode) = match (&args.stages, args.rate, args.max_rate) {
        (Some(stages), None, false) => (
            Plan::ramps(args.start_rate.unwrap_or(0.0), &stages.0),
            Mode::Open,
        ),
        (None, Some(rate), false) => (Plan::constant(rate, args.duration), Mode::Open),
        (None, None, true) => (Plan::closed(args.duration), Mode::Closed),
        _ => return Err("choose one load: --stages, --rate or --max-rate".to_owned()),
    };
    if args.start_rate.is_some() && args.stages.is_none() {
        return Err("--start-rate goes with --stages".to_owned());
    }
    if plan.total().is_zero() {
        return Err("the run lasts 0s: give a --duration above 0".to_owned());
    }
    if mode == Mode::Closed && args.bot_burst.is_some() {
        return Err(
            "--bot-burst needs an open-loop run (--stages or --rate): a closed loop keeps \
             every slot busy, so bursts would have no room"
                .to_owned(),
        );
    }
    let planned = args.warmup + plan.total();
    if planned > args.max_time {
        return Err(format!(
            "the run would last {:.0}s (warm-up plus stages), over --max-time {:.0}s",
            planned.as_secs_f64(),
            args.max_time.as_secs_f64()
        ));
    }
    if args.domain.is_empty() {
        return Err("--domain must not be empty".to_owned());
    }
    if args.descriptors.is_empty() {
        return Err("give at least one --descriptor".to_owned());
    }
    check_mix(&args.mix)?;
    Ok((plan, mode))
}

/// The one-line summary printed (to stderr) before the run.
fn describe(args: &Args, uri: &str, plan: &Plan, mode: Mode) -> String {
    let descriptors: Vec<&str> = if args.mix.is_empty() {
        args.descriptors.iter().map(|d| d.source.as_str()).collect()
    } else {
        args.mix.iter().map(|class| class.source.as_str()).collect()
    };
    let uses_key = args
        .descriptors
        .iter()
        .chain(args.mix.iter().flat_map(|class| &class.descriptors))
        .any(cli::DescriptorTemplate::uses_key);
    let keys = match (uses_key, args.zipf) {
        (false, _) => " (unused: no {key} in the descriptors)".to_owned(),
        (true, Some(s)) => format!(" zipf({s})"),
        (true, None) => " uniform".to_owned(),
    };
    let load = match mode {
        Mode::Closed => format!("closed loop for {:.1}s", plan.total().as_secs_f64()),
        Mode::Open => format!(
            "open loop ({} arrivals), {} stage(s) over {:.1}s{}",
            args.arrivals.name(),
            plan.stages.len(),
            plan.total().as_secs_f64(),
            args.bot_burst.map_or_else(String::new, |b| format!(
                ", bots {}/s for {:.1}s every {:.1}s from {} keys",
                b.rate,
                b.duration.as_secs_f64(),
                b.every.as_secs_f64(),
                args.bot_keys
            ))
        ),
    };
    format!(
        "loadgen: {uri} domain {} {} [{}] keys {}{keys} | {load} | concurrency {} over \
         {} connections | warm-up {:.1}s",
        args.domain,
        if args.mix.is_empty() {
            "descriptors"
        } else {
            "mix"
        },
        descriptors.join("] ["),
        args.keys,
        args.concurrency,
        args.connections,
        args.warmup.as_secs_f64(),
    )
}

/// CPU time this process has used, from `/proc/self/stat` (Linux; `None` elsewhere). The
/// fields count USER_HZ ticks, which is 100 on every Linux ABI.
fn own_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) start at field 3.
    let (_, after) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

fn run(args: &Args) -> Result<(), String> {
    let target = parse_target(&args.addr)?;
    let (plan, mode) = plan(args)?;
    let workload = Workload {
        domain: args.domain.clone(),
        templates: args.descriptors.clone(),
        hits_addend: args.hits_addend,
        keys: KeyPicker::new(args.keys, args.zipf)?,
        bot_keys: args.bot_keys,
        mix: Mix::new(args.mix.clone()),
    };
    let recorder = Recorder::new(plan.stages.len(), args.mix.len())?;
    let bursts = args.bot_burst.map(|burst| Bursts {
        burst,
        end: plan.total(),
    });
    let runtime = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(usize::from(args.threads))
            .enable_all()
            .build()
    }
    .map_err(|error| format!("cannot start the async runtime: {error}"))?;

    let uri = target.uri();
    eprintln!("{}", describe(args, &uri, &plan, mode));
    let (end, shared) = runtime.block_on(async {
        let connections =
            run::connect(target.socket_addr(), args.connections, CONNECT_TIMEOUT).await?;
        let shared = Arc::new(Shared {
            connections,
            next_connection: AtomicUsize::new(0),
            workload,
            recorder,
            timeout: args.timeout,
            budget: Budget::new(args.max_requests),
        });
        // A watchdog on top of the plan: whatever happens, the run ends.
        let limit = args.warmup + plan.total() + args.timeout * 2 + Duration::from_secs(10);
        let body = async {
            run::warm_up(&shared, args.warmup).await;
            match mode {
                Mode::Closed => Ok(run::closed_loop(&shared, plan.total(), args.concurrency).await),
                Mode::Open => {
                    run::open_loop(&shared, &plan, bursts, args.arrivals, args.concurrency).await
                }
            }
        };
        let end: RunEnd = tokio::time::timeout(limit, body)
            .await
            .map_err(|_| format!("the run overran its {:.0}s limit", limit.as_secs_f64()))??;
        Ok::<_, String>((end, shared))
    })?;

    let mix: Vec<(String, u32)> = args
        .mix
        .iter()
        .map(|class| (class.name.clone(), class.weight))
        .collect();
    let report = shared
        .recorder
        .report(&plan.stages, end.elapsed, bursts.is_some(), &mix);
    let stopped_early = shared.budget.exhausted().then(|| {
        format!(
            "--max-requests {} reached: the last stages are short",
            args.max_requests
        )
    });
    print!("{}", report.table());
    if let Some(reason) = &stopped_early {
        println!("stopped early: {reason}");
    }
    if end.abandoned > 0 {
        println!(
            "{} requests were still in flight when the run ended",
            end.abandoned
        );
    }
    if let Some(path) = &args.json {
        let json = JsonReport {
            label: &args.label,
            target: uri.clone(),
            mode: mode.name(),
            arrivals: (mode == Mode::Open).then(|| args.arrivals.name()),
            domain: &args.domain,
            descriptors: args.descriptors.iter().map(|d| d.source.as_str()).collect(),
            mix: args.mix.iter().map(|class| class.source.as_str()).collect(),
            keys: args.keys,
            zipf: args.zipf,
            bot_burst: args.bot_burst.map(|b| {
                format!(
                    "{}:{}s:{}s",
                    b.rate,
                    b.duration.as_secs_f64(),
                    b.every.as_secs_f64()
                )
            }),
            bot_keys: args.bot_keys,
            concurrency: args.concurrency,
            connections: args.connections,
            threads: args.threads,
            warmup_s: args.warmup.as_secs_f64(),
            timeout_s: args.timeout.as_secs_f64(),
            max_requests: args.max_requests,
            stopped_early,
            abandoned_in_flight: end.abandoned,
            loadgen_cpu_s: own_cpu_seconds(),
            report: &report,
        };
        let text = serde_json::to_string_pretty(&json)
            .map_err(|error| format!("cannot encode the JSON report: {error}"))?;
        std::fs::write(path, text + "\n")
            .map_err(|error| format!("cannot write {}: {error}", path.display()))?;
    }
    Ok(())
}
