use std::process::ExitCode;

use clap::Parser;
use floodgate::app;
use floodgate::cli::{Cli, Command};
use floodgate::telemetry;

fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Command::Serve(args) => match runtime.block_on(app::serve(args)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!("{error}");
                eprintln!("floodgate: {error}");
                ExitCode::FAILURE
            }
        },
        Command::Validate(args) => app::validate(args),
        Command::Check(args) => runtime.block_on(app::check(args)),
    }
}
