//! Arguments at the `ratelimit` door: envoyproxy/ratelimit reads none, so a manifest may pass
//! anything (Envoy AI Gateway's QuotaPolicy Deployment runs `/bin/ratelimit
//! --quotaRateLimitServiceAddr=…`). Started under that name, floodgate keeps its own `serve`
//! flags, warns once about each other argument and serves; a known flag with a bad value still
//! stops it (exit 64), and `floodgate serve` still refuses an unknown flag.

use std::time::Duration;

use floodgate_testkit::{ratelimit_command, serve_command, tempdir, wait_for_port, Running};

use super::front_door::{check, reference_layout, RULES};

/// AI Gateway's argument, a bare word, a flag with its value apart, a Go-style single-dash flag
/// and repeats; `--store memory` is floodgate's own.
const ARGUMENTS: [&str; 10] = [
    "--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system",
    "extra",
    "--foo",
    "bar",
    "-v",
    "--foo",
    "bar",
    "--store",
    "memory",
    "--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system",
];

#[test]
fn started_as_ratelimit_unknown_arguments_are_warned_about_once_and_ignored() {
    let dir = tempdir();
    reference_layout(dir.path());
    let (mut command, (grpc, _, _)) = ratelimit_command(dir.path());
    // No Redis anywhere: were `--store memory` dropped with the rest, the reference's default
    // store (Redis) could not answer.
    command
        .args(ARGUMENTS)
        .env_remove("LOG_LEVEL")
        .env_remove("RUST_LOG")
        .env_remove("BACKEND_TYPE")
        .env_remove("FLOODGATE_STORE")
        .env_remove("REDIS_URL");
    let server = Running::spawn("ratelimit", &mut command, dir.path());
    wait_for_port(grpc, Duration::from_secs(10), "ratelimit");
    assert_eq!(check(grpc, "ada"), Some(0), "{}", server.log_text());
    assert_eq!(check(grpc, "ada"), Some(2), "the limit of 1 per hour");
    let log = server.log_text();
    for ignored in [
        "`--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system` ignored",
        "`--foo bar` ignored",
        "`-v` ignored",
        "`extra` ignored",
    ] {
        assert_eq!(log.matches(ignored).count(), 1, "{ignored}:\n{log}");
    }
    assert!(!log.contains("`--store"), "a flag of its own:\n{log}");
}

#[test]
fn started_as_ratelimit_a_known_flag_with_a_bad_value_is_still_a_usage_error() {
    for (flag, said) in [
        (&["--store", "etcd"][..], "--store"),
        (&["--grpc-reflection=maybe"][..], "--grpc-reflection"),
    ] {
        let dir = tempdir();
        reference_layout(dir.path());
        let (mut command, _) = ratelimit_command(dir.path());
        let refused = command
            .args(flag)
            .arg("--unknown-too")
            .output()
            .unwrap_or_else(|error| panic!("cannot run ratelimit: {error}"));
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(64), "{flag:?}: {stderr}");
        assert!(stderr.contains(said), "{flag:?}: {stderr}");
    }
}

#[test]
fn floodgate_serve_still_refuses_an_argument_it_does_not_know() {
    let dir = tempdir();
    let config = dir.path().join("edge.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write config: {error}"));
    let (mut command, _) = serve_command();
    let refused = command
        .arg("--config")
        .arg(&config)
        .arg(ARGUMENTS[0])
        .output()
        .unwrap_or_else(|error| panic!("cannot run floodgate: {error}"));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("unexpected argument '--quotaRateLimitServiceAddr"),
        "{stderr}"
    );
}
