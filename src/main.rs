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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let threads = match &cli.command {
        Command::Serve(args) => args.worker_threads,
        Command::Validate(_) | Command::Check(_) => None,
    };
    let runtime = match runtime(threads) {
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
    let _ = runtime.block_on(on_flushed);
    code
}

/// One thread serving everything when one thread is all there is to use: the single-threaded
/// scheduler batches work the multi-threaded one spreads out (several answers in one write, several
/// Redis calls in one packet) and cost 40 % less CPU per decision on the same machine
/// (docs/benchmarks-redis.md). More threads share the work through tokio's work-stealing
/// scheduler.
fn runtime(threads: Option<u16>) -> Result<tokio::runtime::Runtime, String> {
    let threads = match threads {
        Some(threads) => usize::from(threads),
        None => threads_from_environment()?.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        }),
    };
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(threads);
        builder
    };
    builder
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the async runtime: {error}"))
}

/// TOKIO_WORKER_THREADS, which tokio's own builder would read (and panic on when malformed).
fn threads_from_environment() -> Result<Option<usize>, String> {
    let Ok(value) = std::env::var("TOKIO_WORKER_THREADS") else {
        return Ok(None);
    };
    match value.trim().parse::<usize>() {
        Ok(threads) if threads > 0 => Ok(Some(threads)),
        _ => Err(format!(
            "TOKIO_WORKER_THREADS={value:?} is not a number of threads; set it to 1 or more, \
             or unset it for one thread per CPU"
        )),
    }
}
