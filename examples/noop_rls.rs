//! The floor of any external rate-limit call: a gRPC server implementing Envoy's
//! `RateLimitService/ShouldRateLimit` that answers OK to every descriptor and does nothing
//! else. `scripts/bench-load.sh` drives it with the same load as floodgate, so the
//! difference between the two is what floodgate itself costs.
//!
//! ```text
//! cargo run --release --example noop_rls -- --addr 127.0.0.1:18081
//! ```
//!
//! The server is built as floodgate builds its gRPC listener (a default
//! `tonic::transport::Server::builder().tcp_nodelay(true)` on the runtime floodgate would pick
//! for the same `--worker-threads`), so the only difference is the decision. tonic ignores the
//! builder's `tcp_nodelay` for a listener bound beforehand, so it is set on the incoming stream
//! here.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use floodgate::proto::rate_limit_response::{Code, DescriptorStatus};
use floodgate::proto::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use floodgate::proto::{RateLimitRequest, RateLimitResponse};
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
}

struct Noop;

#[tonic::async_trait]
impl RateLimitService for Noop {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
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
    let runtime = match floodgate::runtime::build(args.worker_threads, None) {
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
        eprintln!("noop_rls: serving RateLimitService on {}", args.addr);
        let served = tonic::transport::Server::builder()
            .tcp_nodelay(args.tcp_nodelay)
            .add_service(RateLimitServiceServer::new(Noop))
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
