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
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Command::Serve(args) = &cli.command {
        if let Some(threads) = args.worker_threads {
            builder.worker_threads(usize::from(threads));
        }
    }
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start the async runtime: {error}");
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
    // Outside `block_on`, with the runtime still running the exporter's connection.
    telemetry.shutdown();
    code
}
