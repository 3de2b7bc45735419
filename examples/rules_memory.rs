//! What the rules cost in memory: starts a floodgate binary with a generated configuration of
//! `--rules` rules and with one of no rules (the baseline, same binary, same run), and reads
//! each process's resident memory (`/proc/PID/status`: `VmRSS` with its anonymous and
//! file-backed parts, and `VmHWM` for the peak) at rest, after traffic that touches every rule
//! once, and across reloads that replace every file with new limits. Prints a Markdown report
//! with the bytes per rule: the difference to the baseline divided by the rule count.
//! `scripts/bench-rules-memory.sh` builds and runs it.
//!
//! At rest is read twice, as soon as the process answers a connection and 3 s later without
//! traffic, each process at the same moments after it answers: a process that starts slowly
//! (many rules, a busy host) is still faulting in its binary's code when it first answers, and
//! reading it earlier in its life than the baseline would count those pages as the rules'. A
//! third process with half the rules gives the slope, what a further rule costs, in which
//! everything a process holds whatever its rule count cancels.
//!
//! ```text
//! cargo run --release --example rules_memory -- --floodgate target/release/floodgate --rules 20000
//! ```
//!
//! The peak of a reload is read after resetting `VmHWM` just before it (`clear_refs`), so it
//! is the reload's own peak, not the start-up's. The configurations are those of
//! `floodgate_testkit::generated_rules` (`testkit/src/generated_rules.rs`), which
//! `tests/operations/rules_memory.rs` asserts on.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;

use floodgate_testkit::generated_rules::{
    self, reloads_logged, reset_peak, status_kib, traffic, write_generated,
};

#[derive(Debug, Parser)]
#[command(
    name = "rules_memory",
    about = "Resident memory of floodgate per configured rule, against a 0-rule baseline"
)]
struct Args {
    /// The floodgate binary to measure.
    #[arg(long, default_value = "target/release/floodgate")]
    floodgate: PathBuf,
    /// Rules in the measured configuration (rounded up to a multiple of 8).
    #[arg(long, default_value_t = 20_000)]
    rules: usize,
    /// Domains (one file each) the rules are spread over.
    #[arg(long, default_value_t = 4)]
    domains: usize,
    /// Reloads after the traffic, each replacing every file with new limits.
    #[arg(long, default_value_t = 3)]
    reloads: u32,
    /// How long RSS is watched before a reading after traffic and after a reload; the reading is
    /// its lowest value in that time, once the allocator has handed freed memory back.
    #[arg(long, default_value = "5000")]
    settle_ms: u64,
    /// More `floodgate serve` flags, e.g. `--extra=--store --extra=memory`.
    #[arg(long, allow_hyphen_values = true)]
    extra: Vec<String>,
}

/// How long after the first reading at rest the second is taken: memory that grows by itself
/// once the process is up (background tasks' first ticks, threads started late, the
/// allocator's delayed purges) shows between the two.
const REST_LATER: Duration = Duration::from_secs(3);

/// One reading of `/proc/PID/status`, in KiB: the resident set and its two parts.
#[derive(Debug, Default, Clone, Copy)]
struct Resident {
    /// `VmRSS`.
    total: u64,
    /// `RssAnon`: the process's own memory (heap, stacks), what the rules take.
    anon: u64,
    /// `RssFile`: the pages of the binary and its libraries touched so far.
    file: u64,
}

impl Resident {
    fn read(pid: u32) -> Self {
        let kib = |field: &str| status_kib(pid, field).unwrap_or(0);
        Self {
            total: kib("VmRSS"),
            anon: kib("RssAnon"),
            file: kib("RssFile"),
        }
    }
}

/// Readings of one process, in KiB.
#[derive(Debug, Default, Clone)]
struct Readings {
    config_bytes: usize,
    /// Peak of the start-up (loading the rules included).
    start_peak: u64,
    /// At rest, as soon as the server answers a connection.
    rest_at_once: Resident,
    /// At rest, [`REST_LATER`] after that, no traffic in between.
    rest_later: Resident,
    after_traffic: u64,
    /// Each reload's own peak, and the RSS once it settled.
    reload_peaks: Vec<u64>,
    after_reloads: Vec<u64>,
}

impl Readings {
    fn max_reload_peak(&self) -> u64 {
        self.reload_peaks.iter().copied().max().unwrap_or(0)
    }

    fn last_after_reload(&self) -> u64 {
        self.after_reloads.last().copied().unwrap_or(0)
    }
}

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("{0}")]
    Io(String),
    #[error("floodgate ({rules} rules): {message}; its log:\n{log}")]
    Server {
        rules: usize,
        message: String,
        log: String,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("rules_memory: tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("rules_memory: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<String, BenchError> {
    let work = tempfile::tempdir().map_err(|error| BenchError::Io(format!("tempdir: {error}")))?;
    let baseline = measure(args, work.path(), 0, Span::Whole).await?;
    let half = measure(args, work.path(), args.rules / 2, Span::AtRest).await?;
    let measured = measure(args, work.path(), args.rules, Span::Whole).await?;
    Ok(report(args, &baseline, &half, &measured))
}

/// How far a process is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Span {
    /// Its two readings at rest, then it stops.
    AtRest,
    /// From start to its last reload.
    Whole,
}

/// One process with `rules` rules, over `span`.
async fn measure(
    args: &Args,
    work: &Path,
    rules: usize,
    span: Span,
) -> Result<Readings, BenchError> {
    let dir = work.join(format!("rules-{rules}"));
    let config = dir.join("config");
    std::fs::create_dir_all(&config)
        .map_err(|error| BenchError::Io(format!("mkdir {}: {error}", config.display())))?;
    let mut readings = Readings {
        config_bytes: write_generated(&config, rules, args.domains, 0),
        ..Readings::default()
    };
    let log = dir.join("floodgate.log");
    let mut server = Server::start(args, &config, &log)?;
    let fail = |message: String| BenchError::Server {
        rules,
        message,
        log: std::fs::read_to_string(&log).unwrap_or_default(),
    };
    let settle = Duration::from_millis(args.settle_ms);
    let mut client = server.connect().await.map_err(&fail)?;
    let pid = server.pid();
    let kib = |field: &str| status_kib(pid, field).unwrap_or(0);
    readings.rest_at_once = Resident::read(pid);
    tokio::time::sleep(REST_LATER).await;
    readings.rest_later = Resident::read(pid);
    readings.start_peak = kib("VmHWM");
    if span == Span::AtRest {
        server.stop();
        return Ok(readings);
    }

    for request in traffic(rules, args.domains, 64) {
        client
            .should_rate_limit(request)
            .await
            .map_err(|status| fail(format!("ShouldRateLimit failed: {status}")))?;
    }
    readings.after_traffic = settled_rss(pid, settle).await;

    for generation in 1..=args.reloads {
        if !reset_peak(pid) {
            return Err(fail("cannot reset VmHWM (/proc/PID/clear_refs)".to_owned()));
        }
        write_generated(&config, rules, args.domains, generation);
        wait_for_reload(&log, usize::try_from(generation).unwrap_or(usize::MAX)).map_err(&fail)?;
        let after = settled_rss(pid, settle).await;
        readings.reload_peaks.push(kib("VmHWM"));
        readings.after_reloads.push(after);
    }
    server.stop();
    Ok(readings)
}

/// The lowest RSS of `pid` over `settle`, in KiB.
async fn settled_rss(pid: u32, settle: Duration) -> u64 {
    let until = Instant::now() + settle;
    let mut lowest = status_kib(pid, "VmRSS").unwrap_or(0);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(250)).await;
        lowest = lowest.min(status_kib(pid, "VmRSS").unwrap_or(u64::MAX));
    }
    lowest
}

/// Until the log reports `count` reloads swapped in; an error when one is rejected.
fn wait_for_reload(log: &Path, count: usize) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        match reloads_logged(&text) {
            (_, rejected) if rejected > 0 => return Err("a reload was rejected".to_owned()),
            (swapped, _) if swapped >= count => return Ok(()),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    Err(format!("reload {count} not logged within 120 s"))
}

/// A `floodgate serve` on free loopback ports, killed when dropped.
struct Server {
    child: Child,
    grpc_port: u16,
}

impl Server {
    fn start(args: &Args, config: &Path, log: &Path) -> Result<Self, BenchError> {
        let port = || {
            TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .map(|addr| addr.port())
                .map_err(|error| BenchError::Io(format!("no free port: {error}")))
        };
        let (grpc_port, http_port, debug_port) = (port()?, port()?, port()?);
        let log_file = std::fs::File::create(log)
            .map_err(|error| BenchError::Io(format!("create {}: {error}", log.display())))?;
        let log_err = log_file
            .try_clone()
            .map_err(|error| BenchError::Io(format!("log file: {error}")))?;
        let child = Command::new(&args.floodgate)
            .arg("serve")
            .arg("--config")
            .arg(config)
            .arg("--grpc-addr")
            .arg(format!("127.0.0.1:{grpc_port}"))
            .arg("--http-addr")
            .arg(format!("127.0.0.1:{http_port}"))
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{debug_port}"))
            .args(&args.extra)
            .env("LOG_LEVEL", "info")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .spawn()
            .map_err(|error| {
                BenchError::Io(format!("start {}: {error}", args.floodgate.display()))
            })?;
        Ok(Self { child, grpc_port })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A gRPC client, once the server answers (start-up reads the rules first).
    async fn connect(
        &mut self,
    ) -> Result<RateLimitServiceClient<tonic::transport::Channel>, String> {
        let url = format!("http://127.0.0.1:{}", self.grpc_port);
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exited during start-up ({status})"));
            }
            if let Ok(client) = RateLimitServiceClient::connect(url.clone()).await {
                return Ok(client);
            }
            if Instant::now() > deadline {
                return Err("did not listen within 120 s".to_owned());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `path` as a report shows it: relative to the working directory (the checkout, when the
/// script runs it) when it lies below it, else its file name alone, so that no report carries
/// the layout of the machine it was made on.
fn shown_path(path: &Path) -> String {
    let relative = std::env::current_dir()
        .ok()
        .and_then(|dir| path.strip_prefix(dir).ok().map(Path::to_path_buf));
    match relative {
        Some(relative) => relative.display().to_string(),
        None if path.is_relative() => path.display().to_string(),
        None => path
            .file_name()
            .map_or_else(String::new, |name| name.to_string_lossy().into_owned()),
    }
}

/// The rules a configuration of `requested` rules holds: whole groups.
fn generated_count(requested: usize) -> usize {
    requested.div_ceil(generated_rules::RULES_PER_GROUP) * generated_rules::RULES_PER_GROUP
}

/// What one more rule costs at rest: the difference between two rule counts over the rules
/// between them, for the whole resident set and for its anonymous part, at once and 3 s later.
/// Whatever a process holds whatever its rule count (the binary's pages, thread stacks, the
/// runtime) cancels, even where the two processes reached it at different moments.
fn slope_text(half_rules: usize, rules: usize, half: &Readings, measured: &Readings) -> String {
    let between = i128::try_from(rules.saturating_sub(half_rules).max(1)).unwrap_or(1);
    let slope = |with: u64, without: u64| (i128::from(with) - i128::from(without)) * 1024 / between;
    format!(
        "\nPer rule as the slope between {half_rules} and {rules} rules (the same readings of a \
         third process with {half_rules} rules): at once {} bytes (anonymous part {}), 3 s \
         later {} bytes (anonymous part {}).\n",
        slope(measured.rest_at_once.total, half.rest_at_once.total),
        slope(measured.rest_at_once.anon, half.rest_at_once.anon),
        slope(measured.rest_later.total, half.rest_later.total),
        slope(measured.rest_later.anon, half.rest_later.anon),
    )
}

fn report(args: &Args, baseline: &Readings, half: &Readings, measured: &Readings) -> String {
    let rules = generated_count(args.rules);
    let per_rule = |with: u64, without: u64| {
        let bytes = (i128::from(with) - i128::from(without)) * 1024;
        let rules = i128::try_from(rules.max(1)).unwrap_or(1);
        bytes / rules
    };
    let mib = |kib: u64| format!("{:.1}", kib as f64 / 1024.0);
    let rows = [
        (
            "start-up peak (VmHWM)",
            baseline.start_peak,
            measured.start_peak,
        ),
        (
            "at rest, at once (VmRSS)",
            baseline.rest_at_once.total,
            measured.rest_at_once.total,
        ),
        (
            "— of which anonymous (RssAnon)",
            baseline.rest_at_once.anon,
            measured.rest_at_once.anon,
        ),
        (
            "— of which file-backed (RssFile)",
            baseline.rest_at_once.file,
            measured.rest_at_once.file,
        ),
        (
            "at rest, 3 s later (VmRSS)",
            baseline.rest_later.total,
            measured.rest_later.total,
        ),
        (
            "— of which anonymous (RssAnon)",
            baseline.rest_later.anon,
            measured.rest_later.anon,
        ),
        (
            "— of which file-backed (RssFile)",
            baseline.rest_later.file,
            measured.rest_later.file,
        ),
        (
            "after traffic touching every rule",
            baseline.after_traffic,
            measured.after_traffic,
        ),
        (
            "reload peak (VmHWM reset before each)",
            baseline.max_reload_peak(),
            measured.max_reload_peak(),
        ),
        (
            "after the last reload (VmRSS)",
            baseline.last_after_reload(),
            measured.last_after_reload(),
        ),
    ];
    let mut text = format!(
        "{rules} rules in {} domains ({:.2} MB of YAML), {} reloads, floodgate `{}`\n\n\
         | reading | 0 rules, MiB | {rules} rules, MiB | bytes per rule |\n|---|---|---|---|\n",
        args.domains,
        measured.config_bytes as f64 / 1e6,
        args.reloads,
        shown_path(&args.floodgate),
    );
    for (label, without, with) in rows {
        text.push_str(&format!(
            "| {label} | {} | {} | {} |\n",
            mib(without),
            mib(with),
            per_rule(with, without)
        ));
    }
    let list = |readings: &[u64]| {
        readings
            .iter()
            .map(|kib| mib(*kib))
            .collect::<Vec<_>>()
            .join(", ")
    };
    text.push_str(&format!(
        "\nEach reload's peak, MiB: {}\nRSS after each reload, MiB: {}\n",
        list(&measured.reload_peaks),
        list(&measured.after_reloads),
    ));
    text.push_str(&slope_text(
        generated_count(args.rules / 2),
        rules,
        half,
        measured,
    ));
    text
}
