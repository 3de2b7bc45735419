use std::process::ExitCode;

use clap::Parser;
use floodgate::app;
use floodgate::cli::{Cli, Command};
use floodgate::telemetry;

// Every request allocates many small, short-lived buffers (HTTP/2 frames, protobuf, the Redis
// call); glibc malloc took 13 % of floodgate's CPU in Redis mode, and mimalloc raised Redis-mode
// throughput by 12 % and memory-mode throughput by 7 % on the same machine (docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The most the exit waits for spans to be sent and for tasks to stop.
const FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (threads, default_threads) = match &cli.command {
        Command::Serve(args) => (
            args.worker_threads,
            floodgate::runtime::default_threads(args.store),
        ),
        Command::Validate(_) | Command::Check(_) => (None, None),
    };
    let runtime = match floodgate::runtime::build(threads, default_threads) {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("floodgate: {error}");
            return ExitCode::FAILURE;
        }
    };
    let trace_options = match &cli.command {
        Command::Serve(args) => Some(args.telemetry.trace_options()),
        Command::Validate(_) | Command::Check(_) => None,
    };
    // Inside the runtime: the OTLP exporter's gRPC channel is spawned on it.
    let telemetry = match runtime.block_on(async { telemetry::init(trace_options.as_ref()) }) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("floodgate: {error}");
            return ExitCode::FAILURE;
        }
    };
    let code = match cli.command {
        Command::Serve(args) => match runtime.block_on(app::serve(*args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!("{error}");
                eprintln!("floodgate: {error}");
                ExitCode::FAILURE
            }
        },
        Command::Validate(args) => app::validate(args),
        Command::Check(args) => runtime.block_on(app::check(*args)),
    };
    // The flush blocks until the exporter's connection (a task on the runtime) has sent the
    // spans, so it runs on its own thread while this one drives the runtime: a
    // single-threaded runtime runs tasks only inside `block_on`.
    let (flushed, on_flushed) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        telemetry.shutdown();
        let _ = flushed.send(());
    });
    // Bounded: an exporter that cannot reach its collector must not hold the exit.
    let _ = runtime.block_on(async { tokio::time::timeout(FLUSH_TIMEOUT, on_flushed).await });
    // Tasks still running (background loops, a blocking read) are dropped, not waited for.
    runtime.shutdown_timeout(FLUSH_TIMEOUT);
    code
}
