//! The Limitador side of `scripts/bench-hybrid.sh`: an Envoy RLS v3 `ShouldRateLimit` server on
//! the limitador crate's cached Redis storage (`CachedRedisStorage`, Limitador's `redis_cached`),
//! so floodgate's `--store hybrid` can be measured against the peer that makes the same trade
//! (count locally, flush to Redis in the background) on the same workload.
//!
//! It serves one limit equivalent to the benchmark's floodgate rule
//! `generic_key: VALUE → client_id: (any) → LIMIT per SECONDS`, mapped as limitador-server maps
//! a request (its `envoy_rls/server.rs`): the RLS domain is the namespace, the descriptors are
//! bound to the CEL variable `descriptors`, the rule's match is a condition and the per-value
//! key a variable. Like limitador-server, a request is limited when any of its counters is;
//! hits_addend 0 counts as 1.
//!
//! ```text
//! limitador-rls --addr 127.0.0.1:18081 --redis-url redis://127.0.0.1:6379/0 \
//!   --domain edge --generic-key api --limit 1000000 --seconds 3600 --flush-ms 100
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use limitador::limit::{Context, Expression, Limit, Predicate};
use limitador::storage::redis::CachedRedisStorageBuilder;
use limitador::AsyncRateLimiter;
use tonic::{Request, Response, Status};

/// The command line, `--name value` pairs.
struct Args {
    addr: SocketAddr,
    redis_url: String,
    domain: String,
    generic_key: String,
    limit: u64,
    seconds: u64,
    flush: Duration,
    worker_threads: usize,
}

const USAGE: &str = "usage: limitador-rls --addr HOST:PORT --redis-url URL [--domain edge] \
                     [--generic-key api] [--limit N] [--seconds S] [--flush-ms MS] \
                     [--worker-threads N]";

impl Args {
    fn parse(mut words: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut given: HashMap<String, String> = HashMap::new();
        while let Some(name) = words.next() {
            let Some(flag) = name.strip_prefix("--") else {
                return Err(format!("unexpected `{name}`\n{USAGE}"));
            };
            let value = words
                .next()
                .ok_or_else(|| format!("--{flag} needs a value\n{USAGE}"))?;
            given.insert(flag.to_owned(), value);
        }
        let mut take = |flag: &str, default: Option<&str>| {
            given
                .remove(flag)
                .or_else(|| default.map(str::to_owned))
                .ok_or_else(|| format!("--{flag} is needed\n{USAGE}"))
        };
        let number = |flag: &str, text: String| {
            text.parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("--{flag} must be a whole number above 0, not `{text}`"))
        };
        let addr = take("addr", None)?;
        let args = Self {
            addr: addr
                .parse()
                .map_err(|error| format!("--addr `{addr}`: {error}"))?,
            redis_url: take("redis-url", None)?,
            domain: take("domain", Some("edge"))?,
            generic_key: take("generic-key", Some("api"))?,
            limit: number("limit", take("limit", Some("1000000000"))?)?,
            seconds: number("seconds", take("seconds", Some("3600"))?)?,
            flush: Duration::from_millis(number("flush-ms", take("flush-ms", Some("1000"))?)?),
            worker_threads: usize::try_from(number(
                "worker-threads",
                take("worker-threads", Some("1"))?,
            )?)
            .map_err(|error| format!("--worker-threads: {error}"))?,
        };
        if let Some(flag) = given.keys().next() {
            return Err(format!("unknown flag --{flag}\n{USAGE}"));
        }
        Ok(args)
    }
}

struct Rls {
    limiter: AsyncRateLimiter,
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let request = request.into_inner();
        if request.domain.is_empty() {
            return Err(Status::invalid_argument("the domain is empty"));
        }
        let descriptors: Vec<HashMap<String, String>> = request
            .descriptors
            .iter()
            .map(|descriptor| {
                descriptor
                    .entries
                    .iter()
                    .map(|entry| (entry.key.clone(), entry.value.clone()))
                    .collect()
            })
            .collect();
        let count = descriptors.len();
        let mut context = Context::default();
        context.list_binding("descriptors".to_owned(), descriptors);
        let hits = u64::from(request.hits_addend.max(1));
        let namespace = request.domain.as_str().into();
        let checked = self
            .limiter
            .check_rate_limited_and_update(&namespace, &context, hits)
            .await
            // As limitador-server answers a storage error: UNAVAILABLE, which Envoy's
            // failure_mode_deny then decides.
            .map_err(|error| Status::unavailable(error.to_string()))?;
        let code = if checked.limited {
            Code::OverLimit
        } else {
            Code::Ok
        } as i32;
        Ok(Response::new(RateLimitResponse {
            overall_code: code,
            statuses: (0..count)
                .map(|_| DescriptorStatus {
                    code,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }))
    }
}

/// The benchmark's rule as a Limitador limit: in `namespace`, the first descriptor whose
/// `generic_key` is `value` is counted per `client_id`.
fn bench_limit(args: &Args) -> Result<Limit, String> {
    let condition = Predicate::parse(format!(
        "descriptors[0].generic_key == '{}'",
        args.generic_key
    ))
    .map_err(|error| format!("the condition: {error:?}"))?;
    let variable = Expression::parse("descriptors[0].client_id")
        .map_err(|error| format!("the variable: {error:?}"))?;
    Ok(Limit::new(
        args.domain.as_str(),
        args.limit,
        args.seconds,
        [condition],
        [variable],
    ))
}

async fn serve(args: Args) -> Result<(), String> {
    let storage = CachedRedisStorageBuilder::new(&args.redis_url)
        .flushing_period(args.flush)
        .build()
        .await
        .map_err(|error| format!("cannot reach Redis at {}: {error}", args.redis_url))?;
    let limiter = AsyncRateLimiter::new_with_storage(Box::new(storage));
    limiter.add_limit(bench_limit(&args)?);
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|error| format!("cannot listen on {}: {error}", args.addr))?;
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let service = RateLimitServiceServer::new(Rls { limiter });
    tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, stopped())
        .await
        .map_err(|error| format!("the server stopped: {error}"))
}

/// Resolves on SIGTERM or Ctrl-C: the bench script stops servers by pid.
async fn stopped() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(error) => {
            eprintln!("limitador-rls: {error}");
            return ExitCode::FAILURE;
        }
    };
    // As floodgate's --worker-threads: 1 is the single-threaded scheduler.
    let runtime = if args.worker_threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.worker_threads)
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("limitador-rls: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("limitador-rls: {error}");
            ExitCode::FAILURE
        }
    }
}
