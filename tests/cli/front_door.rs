//! The binary under envoyproxy/ratelimit's name: started as `ratelimit` (a link, as `/bin/ratelimit`
//! in the image), with no subcommand and the reference's environment only, it serves with the
//! reference's default store (Redis). Started as `floodgate serve`, `REDIS_URL` alone is enough to
//! count in Redis: three replicas that share a Redis must not each count on their own.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::{
    floodgate_bin, free_port, ratelimit_command, serve_command, subdir, tempdir, wait_for_port,
    Running,
};

pub(crate) const RULES: &str = "
domain: edge
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 1}
";

/// `dir/config/config.yaml`: the reference's layout under `RUNTIME_ROOT=dir`,
/// `RUNTIME_SUBDIRECTORY=.`.
pub(crate) fn reference_layout(dir: &Path) {
    let config = subdir(dir, "config");
    std::fs::write(config.join("config.yaml"), RULES)
        .unwrap_or_else(|error| panic!("write config: {error}"));
}

/// `floodgate check` against `grpc_port`: its exit code.
pub(crate) fn check(grpc_port: u16, client: &str) -> Option<i32> {
    check_clients(grpc_port, &[client])
}

#[test]
fn started_as_ratelimit_it_serves_the_reference_environment_from_redis() {
    let dir = tempdir();
    reference_layout(dir.path());
    let redis = RedisServer::start();
    let (mut command, (grpc, _, _)) = ratelimit_command(dir.path());
    command
        .env("REDIS_SOCKET_TYPE", "tcp")
        .env("REDIS_URL", format!("127.0.0.1:{}", redis.port()))
        .env("REDIS_PIPELINE_WINDOW", "150us")
        .env("REDIS_PERSECOND_PIPELINE_WINDOW", "150us")
        // What this test reads is said at info; started as `ratelimit` the default is warn.
        .env("LOG_LEVEL", "info")
        .env_remove("BACKEND_TYPE")
        .env_remove("FLOODGATE_STORE");
    let server = Running::spawn("ratelimit", &mut command, dir.path());
    wait_for_port(grpc, Duration::from_secs(10), "ratelimit");
    let log = server.log_once_it_says("connected to Redis", Duration::from_secs(10));
    assert!(
        log.contains("connected to Redis") && log.contains("envoyproxy/ratelimit's default"),
        "{log}"
    );
    assert_eq!(check(grpc, "ada"), Some(0));
    assert_eq!(check(grpc, "ada"), Some(2), "the limit of 1 per hour");
    // The reference's settings floodgate does not read are said, once each, not refused.
    for variable in ["REDIS_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_WINDOW"] {
        let said = format!("{variable} is set, but floodgate does not support it");
        assert_eq!(log.matches(&said).count(), 1, "{variable}:\n{log}");
    }
}

#[test]
fn redis_url_alone_counts_in_redis_and_every_replica_shares_the_count() {
    let dir = tempdir();
    let config = dir.path().join("edge.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write config: {error}"));
    let redis = RedisServer::start();
    let start = |name: &str| {
        let (mut command, (grpc, _, _)) = serve_command();
        command
            .arg("--config")
            .arg(&config)
            .env("REDIS_URL", redis.url())
            .env_remove("BACKEND_TYPE")
            .env_remove("FLOODGATE_STORE");
        let process = Running::spawn(name, &mut command, &subdir(dir.path(), name));
        wait_for_port(grpc, Duration::from_secs(10), name);
        (process, grpc)
    };
    let (first, first_port) = start("first");
    let (_second, second_port) = start("second");
    let log = first.log_once_it_says("connected to Redis", Duration::from_secs(10));
    assert!(log.contains("REDIS_URL is set"), "{log}");
    assert_eq!(check(first_port, "ada"), Some(0));
    assert_eq!(
        check(second_port, "ada"),
        Some(2),
        "the second replica sees the first one's hit"
    );
}

#[test]
fn an_explicit_store_or_backend_type_wins_over_redis_url() {
    let dir = tempdir();
    let config = dir.path().join("edge.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write config: {error}"));
    // Nothing listens there: a store that tried Redis would fail every call.
    let nowhere = format!("redis://127.0.0.1:{}", free_port());
    for (name, flags, backend) in [
        ("flag", &["--store", "memory"][..], None),
        ("backend", &[][..], Some("memory")),
    ] {
        let (mut command, (grpc, _, _)) = serve_command();
        command
            .arg("--config")
            .arg(&config)
            .args(flags)
            .env("REDIS_URL", &nowhere)
            .env_remove("FLOODGATE_STORE");
        match backend {
            Some(backend) => command.env("BACKEND_TYPE", backend),
            None => command.env_remove("BACKEND_TYPE"),
        };
        let _server = Running::spawn(name, &mut command, &subdir(dir.path(), name));
        wait_for_port(grpc, Duration::from_secs(10), name);
        assert_eq!(check(grpc, "ada"), Some(0), "{name}");
        assert_eq!(check(grpc, "ada"), Some(2), "{name}: counted in memory");
    }

    let (mut command, _) = serve_command();
    let memcache = command
        .arg("--config")
        .arg(&config)
        .env("BACKEND_TYPE", "memcache")
        .env_remove("FLOODGATE_STORE")
        .output()
        .unwrap_or_else(|error| panic!("cannot run floodgate: {error}"));
    assert_eq!(memcache.status.code(), Some(64));
    let said = String::from_utf8_lossy(&memcache.stderr);
    assert!(said.contains("no Memcached store"), "{said}");
}

#[test]
fn the_reference_header_switch_uses_the_header_names_its_variables_give() {
    let dir = tempdir();
    let config = dir.path().join("edge.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write config: {error}"));
    let (mut command, (grpc, _, _)) = serve_command();
    command
        .arg("--config")
        .arg(&config)
        .env("LIMIT_RESPONSE_HEADERS_ENABLED", "true")
        .env("LIMIT_REMAINING_HEADER", "X-Left")
        .env_remove("REDIS_URL")
        .env_remove("BACKEND_TYPE")
        .env_remove("FLOODGATE_STORE");
    let _server = Running::spawn("floodgate", &mut command, dir.path());
    wait_for_port(grpc, Duration::from_secs(10), "floodgate");
    let answer = Command::new(floodgate_bin())
        .args(["check", "--addr", &format!("127.0.0.1:{grpc}")])
        .args(["--domain", "edge", "client=ada"])
        .output()
        .unwrap_or_else(|error| panic!("cannot run floodgate check: {error}"));
    let said = String::from_utf8_lossy(&answer.stdout);
    assert!(
        said.contains("header RateLimit-Limit: 1")
            && said.contains("header X-Left: 0")
            && said.contains("header RateLimit-Reset: "),
        "{said}"
    );
}

#[test]
fn with_the_reference_switch_health_waits_for_a_configuration_with_a_domain() {
    let dir = tempdir();
    let rules = subdir(dir.path(), "rules");
    let start = |name: &str, switch: Option<&str>| {
        let (mut command, (_, http, _)) = serve_command();
        command
            .arg("--config")
            .arg(&rules)
            .env_remove("REDIS_URL")
            .env_remove("BACKEND_TYPE")
            .env_remove("FLOODGATE_STORE");
        match switch {
            Some(value) => command.env("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", value),
            None => command.env_remove("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"),
        };
        let process = Running::spawn(name, &mut command, &subdir(dir.path(), name));
        wait_for_port(http, Duration::from_secs(10), name);
        (process, http)
    };
    let status = |port: u16| {
        floodgate_testkit::http::get(port, "/healthcheck", &[]).map_or(0, |answer| answer.status)
    };
    let (_plain, plain_port) = start("plain", None);
    let (_waiting, waiting_port) = start("waiting", Some("true"));
    assert_eq!(
        status(plain_port),
        200,
        "an empty configuration is still loaded"
    );
    assert_eq!(status(waiting_port), 500, "no domain yet");
    std::fs::write(rules.join("edge.yaml"), RULES)
        .unwrap_or_else(|error| panic!("write config: {error}"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while status(waiting_port) != 200 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        status(waiting_port),
        200,
        "serving once a reload brought a domain"
    );
}

#[test]
fn started_as_ratelimit_a_broken_configuration_answers_errors_until_it_is_fixed() {
    let dir = tempdir();
    let config = subdir(dir.path(), "config");
    let broken = "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: fortnight}\n";
    std::fs::write(config.join("config.yaml"), broken)
        .unwrap_or_else(|error| panic!("write config: {error}"));
    let (mut command, (grpc, _, _)) = ratelimit_command(dir.path());
    command.args(["--store", "memory"]);
    let _server = Running::spawn("ratelimit", &mut command, dir.path());
    wait_for_port(grpc, Duration::from_secs(10), "ratelimit");
    let ask = || {
        Command::new(floodgate_bin())
            .args(["check", "--addr", &format!("127.0.0.1:{grpc}")])
            .args(["--domain", "edge", "client=ada"])
            .output()
            .unwrap_or_else(|error| panic!("cannot run floodgate check: {error}"))
    };
    let refused = ask();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains("no rate limit configuration loaded"),
        "{said}"
    );

    std::fs::write(config.join("config.yaml"), RULES)
        .unwrap_or_else(|error| panic!("write config: {error}"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut answer = ask();
    while answer.status.code() != Some(0) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        answer = ask();
    }
    assert_eq!(answer.status.code(), Some(0), "{answer:?}");
}

#[test]
fn the_reference_key_prefix_keeps_deployments_on_one_redis_apart() {
    let dir = tempdir();
    let config = dir.path().join("edge.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write config: {error}"));
    let redis = RedisServer::start();
    let (mut command, (grpc, _, _)) = serve_command();
    command
        .arg("--config")
        .arg(&config)
        .env("REDIS_URL", redis.url())
        .env("CACHE_KEY_PREFIX", "team-a_")
        .env_remove("FLOODGATE_REDIS_PREFIX")
        .env_remove("BACKEND_TYPE")
        .env_remove("FLOODGATE_STORE");
    let _server = Running::spawn("floodgate", &mut command, dir.path());
    wait_for_port(grpc, Duration::from_secs(10), "floodgate");
    assert_eq!(check(grpc, "ada"), Some(0));
    let keys = Command::new("redis-cli")
        .args(["-p", &redis.port().to_string(), "--scan"])
        .output()
        .unwrap_or_else(|error| panic!("cannot run redis-cli: {error}"));
    let keys = String::from_utf8_lossy(&keys.stdout);
    assert!(!keys.trim().is_empty(), "no key written");
    assert!(
        keys.lines().all(|key| key.starts_with("team-a_")),
        "every key starts with CACHE_KEY_PREFIX:\n{keys}"
    );
}

/// `floodgate check` against `grpc_port` with one descriptor per client: its exit code (0 OK,
/// 2 OVER_LIMIT); what it said when it failed is printed, for the failing test's output.
fn check_clients(grpc_port: u16, clients: &[&str]) -> Option<i32> {
    let output = Command::new(floodgate_bin())
        .args(["check", "--addr", &format!("127.0.0.1:{grpc_port}")])
        .args(["--domain", "edge"])
        .args(clients.iter().map(|client| format!("client={client}")))
        .output()
        .unwrap_or_else(|error| panic!("cannot run floodgate check: {error}"));
    let code = output.status.code();
    if !matches!(code, Some(0 | 2)) {
        eprintln!(
            "floodgate check {clients:?} on port {grpc_port} exited {code:?}:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    code
}

/// `floodgate serve` charges all or nothing by default, the `ratelimit` door every descriptor,
/// as the reference; `--charge` says otherwise at either door, and so does the reference's
/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` (`false` charges as the reference, `true` is all
/// or nothing). A request naming an exhausted client and a fresh one is rejected either way;
/// only every-descriptor charges the fresh one, which then has nothing left (1 an hour).
#[test]
fn charging_is_the_doors_unless_the_flag_or_the_reference_variable_says() {
    let dir = tempdir();
    reference_layout(dir.path());
    let config = dir.path().join("config").join("config.yaml");
    let doors = [
        Door::serve("serve", &[], false),
        Door::serve("serve_flag", &["--charge", "every-descriptor"], true),
        Door::serve_stop("serve_stop_false", "false", true),
        Door::serve_stop("serve_stop_true", "true", false),
        Door::reference("ratelimit", &[], None, true),
        Door::reference("ratelimit_flag", &["--charge=all-or-nothing"], None, false),
        Door::reference(
            "ratelimit_floodgate",
            &["--semantics=floodgate"],
            None,
            false,
        ),
        Door::reference("ratelimit_stop_false", &[], Some("false"), true),
        Door::reference("ratelimit_stop_true", &[], Some("true"), false),
    ];
    for door in doors {
        let Door {
            name,
            as_reference,
            flags,
            stop,
            every_descriptor,
        } = door;
        let home = subdir(dir.path(), name);
        let (mut command, grpc) = if as_reference {
            let config_dir = subdir(&home, "config");
            std::fs::copy(&config, config_dir.join("config.yaml"))
                .unwrap_or_else(|error| panic!("copy config: {error}"));
            let (command, (grpc, _, _)) = ratelimit_command(&home);
            (command, grpc)
        } else {
            let (mut command, (grpc, _, _)) = serve_command();
            command.arg("--config").arg(&config);
            (command, grpc)
        };
        command
            .args(flags)
            .env("BACKEND_TYPE", "memory")
            .env_remove("FLOODGATE_STORE")
            .env_remove("FLOODGATE_CHARGE")
            .env_remove("REDIS_URL");
        match stop {
            Some(value) => command.env("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", value),
            None => command.env_remove("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"),
        };
        let _server = Running::spawn(name, &mut command, &home);
        wait_for_port(grpc, Duration::from_secs(10), name);
        assert_eq!(check_clients(grpc, &["spent"]), Some(0), "{name}");
        assert_eq!(check_clients(grpc, &["fresh", "spent"]), Some(2), "{name}");
        let fresh = check_clients(grpc, &["fresh"]);
        let expected = if every_descriptor { 2 } else { 0 };
        assert_eq!(
            fresh,
            Some(expected),
            "{name}: was the fresh client charged?"
        );
    }
}

/// How one server of the charging test is started, and whether it charges every descriptor.
struct Door {
    name: &'static str,
    /// Started as `ratelimit` (else `floodgate serve`).
    as_reference: bool,
    flags: &'static [&'static str],
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, when set.
    stop: Option<&'static str>,
    every_descriptor: bool,
}

impl Door {
    fn serve(name: &'static str, flags: &'static [&'static str], every_descriptor: bool) -> Self {
        Self {
            name,
            as_reference: false,
            flags,
            stop: None,
            every_descriptor,
        }
    }

    fn serve_stop(name: &'static str, stop: &'static str, every_descriptor: bool) -> Self {
        Self {
            stop: Some(stop),
            ..Self::serve(name, &[], every_descriptor)
        }
    }

    fn reference(
        name: &'static str,
        flags: &'static [&'static str],
        stop: Option<&'static str>,
        every_descriptor: bool,
    ) -> Self {
        Self {
            name,
            as_reference: true,
            flags,
            stop,
            every_descriptor,
        }
    }
}
