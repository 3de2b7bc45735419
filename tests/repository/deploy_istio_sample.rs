//! `deploy/kubernetes/overlays/istio-ratelimit-sample` is Istio's ratelimit sample with
//! floodgate's image: the sample's object names, ports, command and environment (those of
//! istio/istio `samples/ratelimit/rate-limit-service.yaml`, written out below), and that
//! container, run as the kubelet would run it, enforces the sample's rules from Redis.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::{floodgate_bin, free_port, subdir, tempdir, wait_for_port, Running};
use serde_yaml::Value;

use crate::deploy_manifests::{find, render, strings, ISTIO_SAMPLE};

/// The environment of the sample's `ratelimit` container.
const SAMPLE_ENV: [(&str, &str); 10] = [
    ("LOG_LEVEL", "debug"),
    ("REDIS_SOCKET_TYPE", "tcp"),
    ("REDIS_URL", "redis:6379"),
    ("USE_STATSD", "false"),
    ("RUNTIME_ROOT", "/data"),
    ("RUNTIME_SUBDIRECTORY", "ratelimit"),
    ("RUNTIME_WATCH_ROOT", "false"),
    ("RUNTIME_IGNOREDOTFILES", "true"),
    ("HOST", "::"),
    ("GRPC_HOST", "::"),
];

/// Where the sample mounts its ConfigMap `ratelimit-config`.
const SAMPLE_CONFIG_MOUNT: &str = "/data/ratelimit/config";

fn container(documents: &[Value]) -> &Value {
    let deployment = find(documents, "Deployment", "ratelimit")
        .unwrap_or_else(|| panic!("{ISTIO_SAMPLE}: no Deployment ratelimit"));
    deployment["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .and_then(|containers| {
            containers
                .iter()
                .find(|container| container["name"].as_str() == Some("ratelimit"))
        })
        .unwrap_or_else(|| panic!("{ISTIO_SAMPLE}: no container ratelimit"))
}

fn env_of(container: &Value) -> BTreeMap<String, String> {
    container["env"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|variable| {
            let name = variable["name"].as_str().unwrap_or_default().to_owned();
            let value = variable["value"]
                .as_str()
                .unwrap_or_else(|| panic!("{ISTIO_SAMPLE}: {name} has no plain value"))
                .to_owned();
            (name, value)
        })
        .collect()
}

/// The files of ConfigMap `ratelimit-config`.
fn sample_rules(documents: &[Value]) -> Vec<(String, String)> {
    let config_map = find(documents, "ConfigMap", "ratelimit-config")
        .unwrap_or_else(|| panic!("{ISTIO_SAMPLE}: no ConfigMap ratelimit-config (by that name)"));
    config_map["data"]
        .as_mapping()
        .into_iter()
        .flatten()
        .map(|(key, text)| match (key.as_str(), text.as_str()) {
            (Some(key), Some(text)) => (key.to_owned(), text.to_owned()),
            _ => panic!("{ISTIO_SAMPLE}: ratelimit-config data must be strings"),
        })
        .collect()
}

#[test]
fn the_istio_sample_overlay_has_the_samples_names_ports_command_and_environment() {
    let documents = render(ISTIO_SAMPLE);
    let service = find(&documents, "Service", "ratelimit")
        .unwrap_or_else(|| panic!("{ISTIO_SAMPLE}: no Service ratelimit"));
    let ports: Vec<(String, u64, u64)> = service["spec"]["ports"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|port| {
            (
                port["name"].as_str().unwrap_or_default().to_owned(),
                port["port"].as_u64().unwrap_or_default(),
                port["targetPort"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        ports,
        [
            ("http-port".to_owned(), 8080, 8080),
            ("grpc-port".to_owned(), 8081, 8081),
            ("http-debug".to_owned(), 6070, 6070),
        ],
        "Service ratelimit's ports, as the sample's (Istio's EnvoyFilter calls grpc-port 8081)"
    );
    assert_eq!(
        service["spec"]["selector"]["app"].as_str(),
        Some("ratelimit")
    );

    let container = container(&documents);
    assert_eq!(strings(&container["command"]), ["/bin/ratelimit"]);
    assert!(
        container["args"].is_null(),
        "the sample passes no arguments: {:?}",
        container["args"]
    );
    let image = container["image"].as_str().unwrap_or_default();
    assert!(image.starts_with("floodgate:"), "image {image:?}");
    let expected: BTreeMap<String, String> = SAMPLE_ENV
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    assert_eq!(
        env_of(container),
        expected,
        "the sample's environment, unchanged"
    );
    let mount = container["volumeMounts"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|mount| mount["mountPath"].as_str() == Some(SAMPLE_CONFIG_MOUNT))
        .unwrap_or_else(|| panic!("{ISTIO_SAMPLE}: nothing mounted at {SAMPLE_CONFIG_MOUNT}"));
    assert!(
        mount["subPath"].is_null(),
        "a directory mount follows ConfigMap edits"
    );
    let readiness = &container["readinessProbe"]["grpc"];
    assert_eq!(
        (readiness["port"].as_u64(), readiness["service"].as_str()),
        (Some(8081), Some("ratelimit")),
        "readiness asks floodgate's `ratelimit` health service"
    );

    let redis = find(&documents, "Service", "redis")
        .unwrap_or_else(|| panic!("{ISTIO_SAMPLE}: no Service redis (REDIS_URL=redis:6379)"));
    let redis_ports: Vec<u64> = redis["spec"]["ports"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|port| port["port"].as_u64())
        .collect();
    assert_eq!(redis_ports, [6379]);
    assert!(find(&documents, "Deployment", "redis").is_some());
    assert!(
        !sample_rules(&documents).is_empty(),
        "ratelimit-config holds the rules"
    );
}

/// `floodgate check` of `PATH=path` in the sample's domain: its exit code (0 OK, 2 over limit).
fn check(grpc_port: u16, path: &str) -> Option<i32> {
    Command::new(floodgate_bin())
        .args(["check", "--addr", &format!("127.0.0.1:{grpc_port}")])
        .args(["--domain", "echo-ratelimit", &format!("PATH={path}")])
        .output()
        .unwrap_or_else(|error| panic!("cannot run floodgate check: {error}"))
        .status
        .code()
}

/// The container's command line with the overlay's environment; only what a test on this
/// machine must move is moved: the mount root, Redis's address (the Service `redis` is a
/// redis-server here) and the ports (free ones, not the defaults).
fn container_command(documents: &[Value], dir: &Path, redis_port: u16) -> (Command, u16) {
    let container = container(documents);
    let command_line = strings(&container["command"]);
    let program = Path::new(&command_line[0]);
    let link = dir.join(program.file_name().unwrap_or_else(|| panic!("{program:?}")));
    std::os::unix::fs::symlink(floodgate_bin(), &link)
        .unwrap_or_else(|error| panic!("cannot link {}: {error}", link.display()));

    let root = subdir(dir, "data");
    let env = env_of(container);
    let mount = Path::new(SAMPLE_CONFIG_MOUNT)
        .strip_prefix(&env["RUNTIME_ROOT"])
        .unwrap_or_else(|_| panic!("the config mount is not under RUNTIME_ROOT"));
    let config = root.join(mount);
    std::fs::create_dir_all(&config).unwrap_or_else(|error| panic!("mkdir: {error}"));
    for (name, text) in sample_rules(documents) {
        std::fs::write(config.join(name), text).unwrap_or_else(|error| panic!("write: {error}"));
    }

    let (grpc, http, debug) = (free_port(), free_port(), free_port());
    let mut command = Command::new(&link);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    command.envs(&env);
    command
        .env("RUNTIME_ROOT", &root)
        .env("REDIS_URL", format!("127.0.0.1:{redis_port}"))
        .env("GRPC_PORT", grpc.to_string())
        .env("PORT", http.to_string())
        .env("DEBUG_PORT", debug.to_string());
    (command, grpc)
}

#[test]
fn the_istio_sample_container_enforces_the_samples_rules_from_redis() {
    let documents = render(ISTIO_SAMPLE);
    let dir = tempdir();
    let redis = RedisServer::start();
    let (mut command, grpc) = container_command(&documents, dir.path(), redis.port());
    let server = Running::spawn("ratelimit", &mut command, dir.path());
    wait_for_port(grpc, Duration::from_secs(10), "ratelimit");
    let log = server.log_once_it_says("connected to Redis", Duration::from_secs(10));

    // The sample's rules: 1 per minute to "/", 100 per minute to any other path.
    assert_eq!(check(grpc, "/"), Some(0), "{}", server.log_text());
    assert_eq!(
        check(grpc, "/"),
        Some(2),
        "the second `/` in a minute is over the limit"
    );
    for _ in 0..3 {
        assert_eq!(check(grpc, "/productpage"), Some(0));
    }
    // The counts are in the sample's Redis: every replica of the Deployment shares them.
    let keys = Command::new("redis-cli")
        .args(["-p", &redis.port().to_string(), "--scan"])
        .output()
        .unwrap_or_else(|error| panic!("redis-cli: {error}"));
    assert!(
        !String::from_utf8_lossy(&keys.stdout).trim().is_empty(),
        "no counter in Redis"
    );
    // Everything the sample sets is read: nothing is said to be unsupported.
    assert!(
        !log.contains("does not support") && !server.log_text().contains("REDIS_SOCKET_TYPE"),
        "the sample's variables are all honoured:\n{}",
        server.log_text()
    );
}
