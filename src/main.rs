use std::process::ExitCode;

use clap::Parser as _;
use floodgate::cmd::cli::{Cli, Command};
use floodgate::cmd::front_door::{choose_store, FrontDoor};
use floodgate::cmd::serve;
use floodgate::cmd::trace_settings::TraceSetup;
use floodgate::engine::{set_freed_pages_switch, FreedPages};
use floodgate::telemetry;
use tokio::runtime::Runtime;

// Every request allocates many small, short-lived buffers (HTTP/2 frames, protobuf, the Redis
// call); glibc malloc took 13 % of floodgate's CPU in Redis mode, and mimalloc raised Redis-mode
// throughput by 12 % and memory-mode throughput by 7 % on the same machine (docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its place in `mi_option_e`, which libmimalloc-sys does
/// not name; the test below checks it against the default).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays resident before mimalloc returns it, in ms, while a load runs:
/// mimalloc v2's default. With v3's 1 000, what one file's parse freed stayed resident while
/// the next allocations took new pages: reloads of 20 000 rules peaked at 116 to 132 MiB,
/// against 72 to 77 with 10 ms (docs/benchmarks.md, "Memory per rule").
const RETURN_SOON_MS: std::ffi::c_long = 10;

/// The same while serving: v3's default. With 10 ms, pages the requests freed went back to the
/// system and were faulted in again, about 4 % of the CPU at peak (docs/benchmarks.md, "Freed
/// pages kept while serving").
const KEEP_FOR_REUSE_MS: std::ffi::c_long = 1_000;

/// The allocator's settings, unless the operator set mimalloc's own variable: loads switch the
/// purge delay (`engine/reload/trim.rs`).
fn tune_allocator() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        set_freed_pages_switch(set_purge_delay);
    }
}

#[allow(unsafe_code)] // the process's only FFI calls, explained below
fn set_purge_delay(pages: FreedPages) {
    match pages {
        FreedPages::ReturnSoon => {
            // SAFETY: mi_option_set stores a number in mimalloc's option table, which mimalloc
            // reads atomically whenever it schedules a purge; it may be called at any time from
            // any thread.
            unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, RETURN_SOON_MS) };
            // A purge scheduled while serving is due a second after it, and the pages a load
            // frees would wait for it: run it now, so theirs are due in milliseconds.
            // SAFETY: mi_collect frees what this thread's heap holds unused and purges what
            // is scheduled; it may be called at any time from any thread.
            unsafe { libmimalloc_sys::mi_collect(true) };
        }
        // SAFETY: as above.
        FreedPages::KeepForReuse => unsafe {
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, KEEP_FOR_REUSE_MS);
        },
    }
}

/// The most the exit waits for spans to be sent and for tasks to stop.
const FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

fn main() -> ExitCode {
    tune_allocator();
    let door = FrontDoor::of(std::env::args_os().next().as_deref());
    let command_line = door.command_line(std::env::args_os().collect());
    let (cli, runtime, telemetry) = match start(door, &command_line.line) {
        Ok(started) => started,
        Err(code) => return code,
    };
    command_line.warn_ignored();
    let code = run(cli.command, door, &runtime);
    stop(runtime, telemetry);
    code
}

/// The command line parsed, and what every command runs in: the runtime, logs and traces; or
/// the exit code of a command line that cannot start.
fn start(
    door: FrontDoor,
    line: &[std::ffi::OsString],
) -> Result<(Cli, Runtime, telemetry::Telemetry), ExitCode> {
    let cli = parse(line)?;
    // Printed, not logged: there is no log before its level is known.
    let log_filter = floodgate::cmd::setting_values::log_filter(door.default_log_level(), |name| {
        std::env::var(name).ok()
    })
    .map_err(|error| usage_error(&error))?;
    let runtime = runtime(&cli.command, door)?;
    let trace_setup = trace_setup(&cli.command, door)?;
    let trace_options = trace_setup.as_ref().map(|setup| &setup.options);
    // Inside the runtime: the OTLP exporter's connections are spawned on it.
    let telemetry = runtime
        .block_on(async { telemetry::init(trace_options, log_filter) })
        .map_err(|error| {
            eprintln!("floodgate: {error}");
            ExitCode::FAILURE
        })?;
    if let Some(note) = trace_setup.and_then(|setup| setup.note) {
        tracing::warn!("{note}");
    }
    Ok((cli, runtime, telemetry))
}

/// `--help` and `--version` print to stdout and succeed; anything else wrong is a usage error.
fn parse(line: &[std::ffi::OsString]) -> Result<Cli, ExitCode> {
    Cli::try_parse_from(line).map_err(|error| {
        let _ = error.print();
        if error.use_stderr() {
            ExitCode::from(floodgate::cmd::EXIT_USAGE)
        } else {
            ExitCode::SUCCESS
        }
    })
}

fn usage_error(error: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("floodgate: {error}");
    ExitCode::from(floodgate::cmd::EXIT_USAGE)
}

/// The runtime, its threads as `--worker-threads` or the store says.
fn runtime(command: &Command, door: FrontDoor) -> Result<Runtime, ExitCode> {
    let (threads, default_threads) = match command {
        // The store decides the default thread count; a store that cannot be chosen is
        // reported by `serve` itself.
        Command::Serve(args) => (
            args.worker_threads,
            choose_store(args.store, door, |name| std::env::var(name).ok())
                .ok()
                .and_then(|store| floodgate::cmd::runtime::default_threads(store.kind)),
        ),
        Command::Validate(_) | Command::Check(_) | Command::Counters(_) => (None, None),
    };
    floodgate::cmd::runtime::build(threads, default_threads).map_err(|error| {
        eprintln!("floodgate: {error}");
        ExitCode::FAILURE
    })
}

/// Where `serve` sends its traces, if anywhere.
fn trace_setup(command: &Command, door: FrontDoor) -> Result<Option<TraceSetup>, ExitCode> {
    let Command::Serve(args) = command else {
        return Ok(None);
    };
    let traces = floodgate::cmd::semantics_settings::traces(args, door);
    let env = |name: &str| std::env::var(name).ok();
    floodgate::cmd::trace_settings::trace_setup(traces, &args.telemetry, env)
        .map(Some)
        .map_err(|error| usage_error(&error))
}

/// Runs the command to its end: its exit code.
fn run(command: Command, door: FrontDoor, runtime: &Runtime) -> ExitCode {
    match command {
        Command::Serve(args) => match runtime.block_on(serve::serve(*args, door)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                // Once, through the log (stderr): the log format the operator chose, JSON
                // included, and not a second plain copy.
                tracing::error!("{error}");
                if error.is_usage() {
                    ExitCode::from(floodgate::cmd::EXIT_USAGE)
                } else {
                    ExitCode::FAILURE
                }
            }
        },
        Command::Validate(args) => runtime.block_on(floodgate::cmd::validate::main(*args)),
        Command::Check(args) => runtime.block_on(floodgate::cmd::check::main(*args)),
        Command::Counters(args) => runtime.block_on(floodgate::cmd::counters::main(*args)),
    }
}

/// Sends the spans still buffered and stops the runtime, each bounded by [`FLUSH_TIMEOUT`].
fn stop(runtime: Runtime, telemetry: telemetry::Telemetry) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(unsafe_code)]
    fn the_purge_delay_option_is_where_it_is_set() {
        // SAFETY: reads a number from mimalloc's option table.
        let read = || unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // mimalloc v3's default: no other option starts at 1 000 this early in the table.
            assert_eq!(read(), 1_000);
        }
        set_purge_delay(FreedPages::ReturnSoon);
        assert_eq!(read(), RETURN_SOON_MS);
        set_purge_delay(FreedPages::KeepForReuse);
        assert_eq!(read(), KEEP_FOR_REUSE_MS);
    }
}
