//! Settings read as envoyproxy/ratelimit reads them: every boolean variable as Go's
//! `strconv.ParseBool` (1, t, T, TRUE, true, True and their false twins, nothing else) and
//! `LOG_LEVEL` as logrus's `ParseLevel`. A value they refuse stops the start (exit 64) naming the
//! variable, instead of running with a setting nobody asked for; started as `ratelimit`, the log
//! level is the reference's default, warn.

use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use floodgate_testkit::{
    ratelimit_command, serve_command, subdir, tempdir, wait_for_port, Running,
};

use crate::front_door::{reference_layout, RULES};

/// Every boolean variable floodgate reads: envoyproxy/ratelimit's, then floodgate's own.
const BOOLEAN_VARIABLES: &[&str] = &[
    "GRPC_SERVER_USE_TLS",
    "FORCE_START_WITHOUT_INITIAL_CONFIG",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "XDS_CLIENT_BACKOFF_JITTER",
    "USE_DOG_STATSD",
    "USE_STATSD",
    "USE_PROMETHEUS",
    "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
    "RUNTIME_IGNOREDOTFILES",
    "RUNTIME_WATCH_ROOT",
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    "LIMIT_RESPONSE_HEADERS_ENABLED",
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    "REDIS_TLS",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
    "SHADOW_MODE",
    "QUOTA_MODE",
    "RESPONSE_DYNAMIC_METADATA",
    "MERGE_DOMAIN_CONFIG",
    "USE_CALENDAR_MONTH_RATE_LIMIT",
    "FLOODGATE_GRPC_REFLECTION",
    "FLOODGATE_RESPONSE_DYNAMIC_METADATA",
    "FLOODGATE_TRACE_DESCRIPTOR_VALUES",
];

/// Go's false spellings, handed out in turn.
const GO_FALSE: [&str; 6] = ["0", "f", "F", "FALSE", "false", "False"];

/// A start that fails does so before the listeners open; one that is not refused serves, and
/// is stopped (killed) when this bound has passed.
const START_BOUND: Duration = Duration::from_secs(20);

/// The binary started as `ratelimit` in `dir` (the rules laid out there), counting in memory,
/// with none of the test environment's own settings; and its gRPC port.
fn reference_door(dir: &Path) -> (Command, u16) {
    reference_layout(dir);
    let (mut command, (grpc, _, _)) = ratelimit_command(dir);
    clean(&mut command);
    command.env("BACKEND_TYPE", "memory");
    (command, grpc)
}

/// Leaves out the settings the test's own environment may carry.
fn clean(command: &mut Command) {
    for variable in BOOLEAN_VARIABLES.iter().chain(&[
        "LOG_LEVEL",
        "RUST_LOG",
        "BACKEND_TYPE",
        "FLOODGATE_STORE",
        "REDIS_URL",
    ]) {
        command.env_remove(variable);
    }
}

/// How the process ended within [`START_BOUND`] (`None`: it was still running), and its log.
fn start(name: &str, command: &mut Command, dir: &Path) -> (Option<ExitStatus>, String) {
    let mut process = Running::spawn(name, command, dir);
    let status = process.exit_within(START_BOUND);
    (status, process.log_text())
}

/// `floodgate check` of one client against `grpc_port`: its exit code (0 OK, 2 OVER_LIMIT).
fn check(grpc_port: u16) -> Option<i32> {
    crate::front_door::check(grpc_port, "ada")
}

#[test]
fn a_boolean_variable_that_is_not_a_go_boolean_stops_the_start_naming_it() {
    let root = tempdir();
    // `yes` and `on` were read as true by some readers and as false by others; envoyproxy's
    // envconfig hands an empty value to strconv.ParseBool too, which refuses it.
    for (index, variable) in BOOLEAN_VARIABLES.iter().enumerate() {
        let value = ["yes", "", "on"][index % 3];
        let dir = subdir(root.path(), variable);
        let (mut command, _) = reference_door(&dir);
        command.env(variable, value);
        let (status, log) = start(variable, &mut command, &dir);
        assert_eq!(
            status.and_then(|status| status.code()),
            Some(64),
            "{variable}={value:?} must stop the start:\n{log}"
        );
        assert!(
            log.contains(variable) && log.contains("is not a boolean"),
            "{variable}={value:?}:\n{log}"
        );
        assert!(
            log.contains("1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False"),
            "{variable}: the accepted spellings are said:\n{log}"
        );
    }
}

#[test]
fn every_go_spelling_is_taken_from_the_environment() {
    let root = tempdir();
    let dir = subdir(root.path(), "false");
    let (mut command, grpc) = reference_door(&dir);
    for (index, variable) in BOOLEAN_VARIABLES.iter().enumerate() {
        command.env(variable, GO_FALSE[index % GO_FALSE.len()]);
    }
    let _server = Running::spawn("false", &mut command, &dir);
    wait_for_port(grpc, START_BOUND, "ratelimit with every boolean false");
    assert_eq!(check(grpc), Some(0));
    assert_eq!(check(grpc), Some(2), "the limit of 1 per hour");

    // Shadow mode on, spelled as Go spells true: the answer over the limit is OK.
    for (index, spelling) in ["1", "t", "T", "TRUE", "true", "True"].iter().enumerate() {
        let dir = subdir(root.path(), &format!("shadow-{index}"));
        let (mut command, grpc) = reference_door(&dir);
        command.env("SHADOW_MODE", spelling);
        command.env("RUNTIME_WATCH_ROOT", spelling);
        let _server = Running::spawn("shadow", &mut command, &dir);
        wait_for_port(grpc, START_BOUND, "ratelimit in shadow mode");
        assert_eq!(check(grpc), Some(0), "SHADOW_MODE={spelling}");
        assert_eq!(
            check(grpc),
            Some(0),
            "SHADOW_MODE={spelling}: over, answered OK"
        );
    }
}

/// The process's log once it has served one call and stopped.
fn log_of_a_served_call(name: &str, command: &mut Command, grpc: u16, dir: &Path) -> String {
    // Said at warn at start: an unsupported variable of the reference.
    command.env("GRPC_MAX_CONNECTION_AGE", "24h");
    let mut server = Running::spawn(name, command, dir);
    wait_for_port(grpc, START_BOUND, name);
    assert_eq!(check(grpc), Some(0), "{name}");
    let stopped = server.terminate(START_BOUND);
    assert!(stopped.is_some(), "{name} did not stop");
    server.log_text()
}

const WARN_LINE: &str = "GRPC_MAX_CONNECTION_AGE is set, but floodgate does not support it";
const INFO_LINE: &str = "floodgate serving";

#[test]
fn started_as_ratelimit_the_log_level_is_the_references_default_warn() {
    let root = tempdir();
    let dir = subdir(root.path(), "ratelimit");
    let (mut command, grpc) = reference_door(&dir);
    let log = log_of_a_served_call("ratelimit", &mut command, grpc, &dir);
    assert!(log.contains(WARN_LINE), "{log}");
    assert!(
        !log.contains(INFO_LINE),
        "info lines are not logged at warn:\n{log}"
    );

    // floodgate's own default stays info.
    let dir = subdir(root.path(), "serve");
    let (mut command, (grpc, _, _)) = serve_command();
    clean(&mut command);
    command.arg("--config").arg(write_rules(&dir));
    let log = log_of_a_served_call("serve", &mut command, grpc, &dir);
    assert!(log.contains(WARN_LINE) && log.contains(INFO_LINE), "{log}");
}

fn write_rules(dir: &Path) -> std::path::PathBuf {
    let file = dir.join("edge.yaml");
    std::fs::write(&file, RULES).unwrap_or_else(|error| panic!("write config: {error}"));
    file
}

#[test]
fn log_level_takes_logrus_levels_in_any_case() {
    let root = tempdir();
    // `warning` was taken for a log target, and silenced every line.
    for (name, level, info_too) in [
        ("warning", "warning", false),
        ("warn", "WARN", false),
        ("info", "Info", true),
        ("debug", "DEBUG", true),
    ] {
        let dir = subdir(root.path(), name);
        let (mut command, grpc) = reference_door(&dir);
        command.env("LOG_LEVEL", level);
        let log = log_of_a_served_call(name, &mut command, grpc, &dir);
        assert!(log.contains(WARN_LINE), "LOG_LEVEL={level}:\n{log}");
        assert_eq!(
            log.contains(INFO_LINE),
            info_too,
            "LOG_LEVEL={level}:\n{log}"
        );
    }
    // fatal and panic, which tracing does not have, log errors only.
    for level in ["fatal", "PANIC", "error"] {
        let dir = subdir(root.path(), level);
        let (mut command, grpc) = reference_door(&dir);
        command.env("LOG_LEVEL", level);
        let log = log_of_a_served_call(level, &mut command, grpc, &dir);
        assert!(!log.contains(WARN_LINE), "LOG_LEVEL={level}:\n{log}");
    }
}

#[test]
fn tls_asked_for_without_its_files_stops_the_start_as_a_usage_error() {
    let root = tempdir();
    let (mut command, _) = reference_door(root.path());
    command
        .env("GRPC_SERVER_USE_TLS", "true")
        .env_remove("GRPC_SERVER_TLS_CERT")
        .env_remove("GRPC_SERVER_TLS_KEY");
    let (status, log) = start("ratelimit", &mut command, root.path());
    assert_eq!(
        status.and_then(|status| status.code()),
        Some(64),
        "GRPC_SERVER_USE_TLS=true without its files:\n{log}"
    );
    assert!(
        log.contains("GRPC_SERVER_TLS_CERT") && log.contains("GRPC_SERVER_TLS_KEY"),
        "the missing settings are named:\n{log}"
    );
}

#[test]
fn a_log_level_logrus_does_not_know_stops_the_start_naming_the_variable() {
    let root = tempdir();
    for (index, level) in ["verbose", "", "floodgate=debug", "warnings"]
        .iter()
        .enumerate()
    {
        let dir = subdir(root.path(), &format!("level-{index}"));
        let (mut command, _) = reference_door(&dir);
        command.env("LOG_LEVEL", level);
        let (status, log) = start("ratelimit", &mut command, &dir);
        assert_eq!(
            status.and_then(|status| status.code()),
            Some(64),
            "LOG_LEVEL={level:?}:\n{log}"
        );
        assert!(
            log.contains(&format!("LOG_LEVEL={level:?} is not a log level"))
                && log.contains("trace, debug, info, warn, warning, error, fatal, panic"),
            "LOG_LEVEL={level:?}:\n{log}"
        );
    }
}
