//! The floor of any external rate-limit call: a gRPC server implementing Envoy's
//! `RateLimitService/ShouldRateLimit` that answers OK to every descriptor and does nothing
//! else. `scripts/bench-load.sh` drives it with the same load as floodgate, so the
//! difference between the two is what floodgate itself costs.
//!
//! With `--redis-url` it is the floor of a Redis-backed decision instead
//! (`scripts/bench-redis.sh`): each call also runs floodgate's decision script once, as the
//! Redis store sends it (`EVALSHA` of one fixed-window counter keyed by the first descriptor,
//! on one multiplexed connection), and the answer is OK whatever the script said. A Redis error
//! is answered UNAVAILABLE, so the load generator counts it.
//!
//! ```text
//! cargo run --release --example noop_rls -- --addr 127.0.0.1:18081
//! cargo run --release --example noop_rls -- --addr 127.0.0.1:18081 --redis-url redis://127.0.0.1:6379/0
//! ```
//!
//! The server is a plain tonic server (a default
//! `tonic::transport::Server::builder().tcp_nodelay(true)` on the runtime floodgate would pick
//! for the same `--worker-threads`, and floodgate's allocator, mimalloc), each call a task of its
//! own as tonic runs them. floodgate's gRPC listener differs in one way besides the decision:
//! with several worker threads it runs a connection's calls on the connection's task
//! (`server::connections::CallTasks`), so on two workers floodgate can outrun this floor; its
//! `--grpc-call-tasks=true` runs calls as this server does. tonic ignores the builder's
//! `tcp_nodelay` for a listener bound beforehand, so it is set on the incoming stream here.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use floodgate::core::arithmetic::algorithm::{Algorithm, Hits, Quota, Share};
use floodgate::core::decision::key::counter_key;
use floodgate::core::decision::plan::Counter;
use floodgate::core::ground::unit::Unit;
use floodgate::core::ground::verdict::Role;
use floodgate::core::policy::request::Entry;
use floodgate::core::policy::rules::MatchedLevel;
use floodgate::proto::rate_limit_response::{Code, DescriptorStatus};
use floodgate::proto::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use floodgate::proto::{RateLimitRequest, RateLimitResponse};
use floodgate::store::redis::{script_call, KeyLayout, DEFAULT_PREFIX, SCRIPT_SOURCE};
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

#[derive(Debug, Parser)]
#[command(
    name = "noop_rls",
    about = "A RateLimitService that answers OK to everything (the benchmark floor)"
)]
struct Args {
    /// Where to listen for gRPC (h2c).
    #[arg(long, env = "NOOP_RLS_ADDR", default_value = "127.0.0.1:18081")]
    addr: SocketAddr,
    /// Set TCP_NODELAY on accepted connections (`false` to see what Nagle's algorithm costs).
    #[arg(long, env = "NOOP_RLS_TCP_NODELAY", default_value_t = true, action = clap::ArgAction::Set)]
    tcp_nodelay: bool,
    /// Threads that serve calls, as floodgate's flag [default: one per CPU; 1: the
    /// single-threaded scheduler].
    #[arg(long, env = "NOOP_RLS_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    worker_threads: Option<u16>,
    /// Also run floodgate's decision script once per call on this Redis (EVALSHA of a
    /// fixed window keyed by the first descriptor), then answer OK whatever it said.
    #[arg(long, env = "NOOP_RLS_REDIS_URL")]
    redis_url: Option<String>,
}

// As in src/main.rs, so that the allocator is no part of the difference.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Noop {
    redis: Option<RedisFloor>,
}

/// One script call per request on one multiplexed connection, as the Redis store sends it.
struct RedisFloor {
    connection: redis::aio::MultiplexedConnection,
    script: redis::Script,
    layout: KeyLayout,
}

impl RedisFloor {
    async fn connect(url: &str) -> Result<Self, String> {
        let client =
            redis::Client::open(url).map_err(|error| format!("bad --redis-url: {error}"))?;
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|error| format!("cannot connect to Redis: {error}"))?;
        let script = redis::Script::new(SCRIPT_SOURCE);
        script
            .prepare_invoke()
            .load_async(&mut connection)
            .await
            .map_err(|error| format!("cannot load the script: {error}"))?;
        let layout = KeyLayout::new(DEFAULT_PREFIX).map_err(|error| error.to_string())?;
        Ok(Self {
            connection,
            script,
            layout,
        })
    }

    async fn decide(&self, request: &RateLimitRequest) -> Result<(), Status> {
        let entries: Vec<Entry> = request
            .descriptors
            .first()
            .map(|descriptor| {
                descriptor
                    .entries
                    .iter()
                    .map(|entry| Entry::new(entry.key.as_str(), entry.value.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        let levels = vec![MatchedLevel::Exact; entries.len()];
        let quota = Quota::new(1_000_000, Unit::Minute).with_algorithm(Algorithm::FixedWindow);
        let key = counter_key(&request.domain, "floor", 0, &quota, &entries, &levels);
        let counter = Counter {
            descriptor: 0,
            key,
            quota,
            hits: Hits::Charge(1),
            role: Role::Enforced,
            share: Share::FULL,
        };
        let call = script_call(&[counter], false, &self.layout);
        let invocation = call.invocation(&self.script);
        let mut connection = self.connection.clone();
        invocation
            .invoke_async::<Vec<i64>>(&mut connection)
            .await
            .map(drop)
            .map_err(|error| Status::unavailable(error.to_string()))
    }
}

#[tonic::async_trait]
impl RateLimitService for Noop {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        if let Some(redis) = &self.redis {
            redis.decide(request.get_ref()).await?;
        }
        let ok = Code::Ok as i32;
        let statuses = request
            .get_ref()
            .descriptors
            .iter()
            .map(|_| DescriptorStatus {
                code: ok,
                ..Default::default()
            })
            .collect();
        Ok(Response::new(RateLimitResponse {
            overall_code: ok,
            statuses,
            ..Default::default()
        }))
    }
}

/// Resolves on Ctrl-C or SIGTERM (the benchmark script stops servers by pid).
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match floodgate::cmd::runtime::build(args.worker_threads, None) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("noop_rls: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(args.addr).await {
            Ok(listener) => listener,
            Err(error) => {
                eprintln!("noop_rls: cannot listen on {}: {error}", args.addr);
                return ExitCode::FAILURE;
            }
        };
        let redis = match &args.redis_url {
            Some(url) => match RedisFloor::connect(url).await {
                Ok(floor) => Some(floor),
                Err(error) => {
                    eprintln!("noop_rls: {error}");
                    return ExitCode::FAILURE;
                }
            },
            None => None,
        };
        eprintln!("noop_rls: serving RateLimitService on {}", args.addr);
        let served = tonic::transport::Server::builder()
            .tcp_nodelay(args.tcp_nodelay)
            .add_service(RateLimitServiceServer::new(Noop { redis }))
            .serve_with_incoming_shutdown(
                TcpIncoming::from(listener).with_nodelay(Some(args.tcp_nodelay)),
                shutdown_signal(),
            )
            .await;
        match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("noop_rls: gRPC server failed: {error}");
                ExitCode::FAILURE
            }
        }
    })
}
