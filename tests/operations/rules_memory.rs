//! What the rules cost in memory, on the real binary, and the caps that bound it: 20 000
//! generated rules (`floodgate_testkit::generated_rules`, the configurations of
//! `scripts/bench-rules-memory.sh`) against a configuration without rules started in the same
//! test, and configurations over `--max-config-bytes` or `--max-rules` refused at start, at
//! reload and by `floodgate validate`, each with the cap, the measured value and the flag.
//!
//! The tests run the debug binary. Its data are the same as the release binary's (the same
//! allocations), so the difference per rule holds; the binary itself and its code are larger,
//! a constant that the difference cancels. The reload peak is asserted as an increment over
//! the RSS at rest before the reload, for the same reason. At rest is read as soon as each
//! process listens and again 3 s later, both processes at the same moments after they listen:
//! a process that starts slowly is still faulting in its binary's code (file-backed pages, up
//! to about 3 MiB on a busy host) when it first listens, and the baseline, which starts at once,
//! is not. The bounds leave room for the allocator and for those pages: how much of a load's
//! freed memory is still resident when it is read depends on mimalloc's purge timing.
//! docs/benchmarks.md has the release figures.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use floodgate_testkit as common;
use floodgate_testkit::generated_rules::{
    describe_kib, reloads_logged, reset_peak, status_kib, traffic, write_generated,
};
use floodgate_testkit::rls;
use floodgate_testkit::{floodgate_bin, serve_command, subdir, tempdir, wait_for_port, Running};

const RULES: usize = 20_000;
const DOMAINS: usize = 4;
/// Long enough for a debug build to load 20 000 rules on a busy machine.
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long RSS is watched for its settled value: past both moments floodgate hands a load's
/// scratch memory back (1.5 s and 3 s after it), with room for a busy machine.
const SETTLE: Duration = Duration::from_millis(6000);
/// The second reading at rest, after the first: what grows by itself without traffic shows
/// between the two.
const REST_LATER: Duration = Duration::from_secs(3);

/// A floodgate serving `config` with `extra` flags, logging at info level.
struct Server {
    process: Running,
    grpc_port: u16,
    debug_port: u16,
}

impl Server {
    fn start(config: &Path, extra: &[&str], log_dir: &Path) -> Server {
        let (mut command, (grpc_port, _, debug_port)) = serve_command();
        command
            .arg("--config")
            .arg(config)
            .args(extra)
            .env("LOG_LEVEL", "info")
            .env_remove("RUST_LOG");
        let process = Running::spawn("floodgate", &mut command, log_dir);
        wait_for_port(grpc_port, START_TIMEOUT, "floodgate");
        Server {
            process,
            grpc_port,
            debug_port,
        }
    }

    /// The lowest RSS over [`SETTLE`]: what stays once the load's scratch memory is handed
    /// back, which takes longer on a busy machine.
    async fn settled_rss(&self) -> u64 {
        let until = Instant::now() + SETTLE;
        let mut lowest = self.kib("VmRSS");
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(250)).await;
            lowest = lowest.min(self.kib("VmRSS"));
        }
        lowest
    }

    /// `VmRSS` as soon as the server listens, and [`REST_LATER`] after that without traffic.
    async fn rest_rss(&self) -> (u64, u64) {
        let at_once = self.kib("VmRSS");
        tokio::time::sleep(REST_LATER).await;
        (at_once, self.kib("VmRSS"))
    }

    fn kib(&self, field: &str) -> u64 {
        status_kib(self.process.pid(), field)
            .unwrap_or_else(|| panic!("cannot read {field} of floodgate"))
    }

    /// Every rule of the generated configuration hit once.
    async fn touch_every_rule(&self, rules: usize) {
        let mut client = rls::connect(&format!("http://127.0.0.1:{}", self.grpc_port)).await;
        for request in traffic(rules, DOMAINS, 64) {
            rls::call(&mut client, request)
                .await
                .unwrap_or_else(|status| panic!("ShouldRateLimit: {status:?}"));
        }
    }

    /// Until the log reports `swapped` reloads swapped in and `rejected` refused.
    fn wait_for_reloads(&self, swapped: usize, rejected: usize) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let log = self.process.log_text();
            let (done, refused) = reloads_logged(&log);
            if done >= swapped && refused >= rejected {
                assert_eq!((done, refused), (swapped, rejected), "{log}");
                return;
            }
            assert!(Instant::now() < deadline, "no reload logged:\n{log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn generated(dir: &Path, name: &str, rules: usize) -> std::path::PathBuf {
    let config = subdir(dir, name);
    write_generated(&config, rules, DOMAINS, 0);
    config
}

#[tokio::test]
async fn rules_cost_little_at_rest_and_a_reload_of_20000_frees_the_old_ones() {
    let dir = tempdir();
    let small = Server::start(
        &generated(dir.path(), "none", 0),
        &[],
        &subdir(dir.path(), "a"),
    );
    let (small_at_once, small_rest) = small.rest_rss().await;
    drop(small);

    let config = generated(dir.path(), "many", RULES);
    // 2.5 MB of YAML and 20 000 rules: within the default caps.
    let server = Server::start(&config, &[], &subdir(dir.path(), "b"));
    let (at_once, rest) = server.rest_rss().await;
    let (rest_anon, rest_file) = (server.kib("RssAnon"), server.kib("RssFile"));
    let per_rule = |with: u64, without: u64| with.saturating_sub(without) * 1024 / RULES as u64;
    let (per_rule_at_once, per_rule_later) =
        (per_rule(at_once, small_at_once), per_rule(rest, small_rest));
    server.touch_every_rule(RULES).await;
    let after_traffic = server.settled_rss().await;

    assert!(
        reset_peak(server.process.pid()),
        "cannot reset VmHWM (/proc/PID/clear_refs)"
    );
    let before_reload = server.kib("VmRSS");
    write_generated(&config, RULES, DOMAINS, 1);
    server.wait_for_reloads(1, 0);
    let reload_peak = server.kib("VmHWM");
    let after_reload = server.settled_rss().await;
    let readings = describe_kib(&[
        ("no rules, at once", small_at_once),
        ("no rules, 3 s later", small_rest),
        ("20 000 rules, at once", at_once),
        ("20 000 rules, 3 s later", rest),
        ("  of which anonymous", rest_anon),
        ("  of which file-backed (the binary's pages)", rest_file),
        ("after traffic on every rule", after_traffic),
        ("before the reload", before_reload),
        ("reload peak", reload_peak),
        ("after the reload", after_reload),
    ]);

    // 5.7 KB before the rule tree was made compact.
    for (when, per_rule) in [("at once", per_rule_at_once), ("3 s later", per_rule_later)] {
        assert!(
            per_rule <= 1024,
            "{per_rule} bytes per rule at rest, {when}:\n{readings}"
        );
    }
    // At most 96 MiB during the reload for a process that takes 12 MiB without rules (the
    // release binary), so at most 84 MiB above the 0-rule process (193 MiB in all before the rule
    // tree was made compact; about 50 above it now).
    let above_empty = reload_peak.saturating_sub(small_rest);
    assert!(
        above_empty <= 84 * 1024,
        "the reload peaked {above_empty} KiB above the process without rules:\n{readings}"
    );
    // The old rules are freed, not kept beside the new ones (8 MiB of heap).
    assert!(
        after_reload <= after_traffic + 16 * 1024,
        "the reload kept memory:\n{readings}"
    );
}

/// `floodgate serve` with `config` and `extra`, expected to exit at start: its log.
fn refused_at_start(config: &Path, extra: &[&str], dir: &Path) -> String {
    let (mut command, _) = serve_command();
    command
        .arg("--config")
        .arg(config)
        .args(extra)
        .env("LOG_LEVEL", "info");
    Running::spawn("floodgate", &mut command, dir).log_of_a_refused_start(START_TIMEOUT)
}

#[test]
fn a_configuration_over_the_byte_cap_is_refused_at_start_without_being_read() {
    let dir = tempdir();
    let config = generated(dir.path(), "config", 800);
    let bytes: u64 = std::fs::read_dir(&config)
        .unwrap_or_else(|error| panic!("{error}"))
        .filter_map(Result::ok)
        .filter_map(|entry| entry.metadata().ok())
        .map(|metadata| metadata.len())
        .sum();
    let log = refused_at_start(&config, &["--max-config-bytes", "64KiB"], dir.path());
    for expected in [
        format!("hold {bytes} bytes, over the cap of 65536 bytes"),
        "--max-config-bytes".to_owned(),
        "FLOODGATE_MAX_CONFIG_BYTES".to_owned(),
    ] {
        assert!(log.contains(&expected), "{expected:?} missing:\n{log}");
    }
}

#[test]
fn a_configuration_over_the_rule_cap_is_refused_at_start() {
    let dir = tempdir();
    let config = generated(dir.path(), "config", 800);
    let log = refused_at_start(&config, &["--max-rules", "100"], dir.path());
    for expected in [
        "over the cap of 100 rules",
        "--max-rules",
        "FLOODGATE_MAX_RULES",
    ] {
        assert!(log.contains(expected), "{expected:?} missing:\n{log}");
    }
}

#[test]
fn a_reload_over_a_cap_is_a_failure_and_the_rules_stay() {
    let dir = tempdir();
    let config = generated(dir.path(), "config", 80);
    let server = Server::start(&config, &["--max-rules", "100"], dir.path());
    // A change written before the watch is set is not seen: write again until one is.
    let mut generation = 1;
    while reloads_logged(&server.process.log_text()).1 == 0 {
        assert!(generation < 60, "no reload seen");
        write_generated(&config, 160, DOMAINS, generation);
        generation += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(reloads_logged(&server.process.log_text()).0, 0);
    let log = server.process.log_text();
    assert!(
        log.contains("over the cap of 100 rules") && log.contains("keeping version 1"),
        "{log}"
    );
    let response = common::http::get(server.debug_port, "/rlconfig", &[])
        .unwrap_or_else(|error| panic!("/rlconfig: {error}"));
    let failures = response.header("floodgate-config-reload-failures");
    assert!(
        failures.and_then(|count| count.parse::<u64>().ok()) >= Some(1),
        "{failures:?}"
    );
    assert!(
        response.body.contains("80 rules"),
        "the first rules stay:\n{}",
        response.body.lines().next().unwrap_or_default()
    );
}

#[test]
fn validate_refuses_what_is_over_a_cap() {
    let dir = tempdir();
    let config = generated(dir.path(), "config", 80);
    let validate = |flags: &[&str]| {
        let output = Command::new(floodgate_bin())
            .arg("validate")
            .args(flags)
            .arg(&config)
            .output()
            .unwrap_or_else(|error| panic!("floodgate validate: {error}"));
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        (output.status.success(), text)
    };
    let (ok, text) = validate(&[]);
    assert!(ok, "{text}");
    let (ok, text) = validate(&["--max-config-bytes", "1000"]);
    assert!(!ok && text.contains("over the cap of 1000 bytes"), "{text}");
    let (ok, text) = validate(&["--max-rules", "10"]);
    assert!(!ok && text.contains("over the cap of 10 rules"), "{text}");
}
