//! deploy/ against the real binary: what the Dockerfile and the rendered Kubernetes overlays ask
//! of floodgate (flags and their values, environment variables, the config directory, the
//! grpc.health.v1 services the probes call, the HEALTHCHECK command) must be what the binary
//! does, and the example gateway must send the descriptors of the README's Envoy bootstrap.
//! Schema and policy checks of the same manifests are in scripts/validate-deploy.sh.
//!
//! Needs kubectl (kustomize) like that script: `$KUBECTL`, `.venv/bin/kubectl` or `kubectl` on
//! PATH; `scripts/install-peers.sh` provides one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use floodgate_testkit::{floodgate_bin, repo_file, which, Floodgate};
use serde::Deserialize;
use serde_yaml::Value;

pub(crate) fn read(relative: &str) -> String {
    std::fs::read_to_string(repo_file(relative))
        .unwrap_or_else(|error| panic!("cannot read {relative}: {error}"))
}

fn kubectl() -> PathBuf {
    if let Ok(path) = std::env::var("KUBECTL") {
        return PathBuf::from(path);
    }
    let venv = repo_file(".venv/bin/kubectl");
    if venv.exists() {
        return venv;
    }
    which("kubectl").unwrap_or_else(|| {
        panic!("kubectl not found: run scripts/install-peers.sh (or set KUBECTL)")
    })
}

/// The overlay that replaces envoyproxy/ratelimit in Istio's sample: its objects carry the
/// sample's names and command, so `deploy_istio_sample` checks it instead of the tests here.
pub(crate) const ISTIO_SAMPLE: &str = "istio-ratelimit-sample";

/// The overlay that makes Envoy Gateway deploy floodgate: Envoy Gateway renders the Deployment
/// itself, so there is none here to check; `deploy_under_envoy_gateway` checks the overlay.
pub(crate) const UNDER_ENVOY_GATEWAY: &str = "under-envoy-gateway";

/// Every overlay directory name under deploy/kubernetes/overlays that runs `floodgate serve`.
fn overlays() -> Vec<String> {
    let dir = repo_file("deploy/kubernetes/overlays");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display()))
        .filter_map(Result::ok)
        .filter(|entry| entry.path().join("kustomization.yaml").exists())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name != ISTIO_SAMPLE && name != UNDER_ENVOY_GATEWAY)
        .collect();
    names.sort();
    assert!(
        names.len() >= 6,
        "expected the six overlays, found {names:?}"
    );
    names
}

/// `kubectl kustomize` of one overlay, as YAML documents.
pub(crate) fn render(overlay: &str) -> Vec<Value> {
    let dir = repo_file(&format!("deploy/kubernetes/overlays/{overlay}"));
    let output = Command::new(kubectl())
        .arg("kustomize")
        .arg(&dir)
        .output()
        .unwrap_or_else(|error| panic!("cannot run kubectl: {error}"));
    assert!(
        output.status.success(),
        "kubectl kustomize {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| {
            Value::deserialize(document)
                .unwrap_or_else(|error| panic!("{overlay}: bad YAML from kustomize: {error}"))
        })
        .filter(|document| !document.is_null())
        .collect()
}

/// The ports a Service listens on, as text (to compare with the port of an address).
pub(crate) fn service_ports(service: &Value) -> Vec<String> {
    service["spec"]["ports"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|p| p["port"].as_u64().map(|p| p.to_string()))
        .collect()
}

pub(crate) fn find<'a>(documents: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    documents.iter().find(|document| {
        document["kind"].as_str() == Some(kind)
            && document["metadata"]["name"].as_str() == Some(name)
    })
}

/// A ConfigMap or Secret made by a generator has a hash suffix unless told otherwise.
fn find_generated<'a>(documents: &'a [Value], kind: &str, prefix: &str) -> Option<&'a Value> {
    documents.iter().find(|document| {
        document["kind"].as_str() == Some(kind)
            && document["metadata"]["name"]
                .as_str()
                .is_some_and(|name| name == prefix || name.starts_with(&format!("{prefix}-")))
    })
}

fn floodgate_container<'a>(overlay: &str, documents: &'a [Value]) -> &'a Value {
    let deployment = find(documents, "Deployment", "floodgate")
        .unwrap_or_else(|| panic!("{overlay}: no Deployment floodgate"));
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .unwrap_or_else(|| panic!("{overlay}: floodgate has no containers"));
    containers
        .iter()
        .find(|container| container["name"].as_str() == Some("floodgate"))
        .unwrap_or_else(|| panic!("{overlay}: no container floodgate"))
}

pub(crate) fn strings(value: &Value) -> Vec<String> {
    value
        .as_sequence()
        .map(|items| {
            items
                .iter()
                .map(|item| match item {
                    Value::String(text) => text.clone(),
                    other => panic!("expected a string, got {other:?}"),
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn help(subcommand: &str) -> String {
    let output = Command::new(floodgate_bin())
        .args([subcommand, "--help"])
        .output()
        .unwrap_or_else(|error| panic!("cannot run floodgate {subcommand} --help: {error}"));
    assert!(
        output.status.success(),
        "floodgate {subcommand} --help failed"
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The part of clap's help about `--flag`, or None when the flag does not exist.
fn flag_help(help: &str, flag: &str) -> Option<String> {
    let is_flag_line = |line: &str| {
        let line = line.trim_start();
        line.starts_with("--") || (line.starts_with('-') && line.get(2..4) == Some(", "))
    };
    let names_flag = |line: &str| {
        line.trim_start()
            .split([' ', ',', '='])
            .any(|word| word == flag)
    };
    let lines: Vec<&str> = help.lines().collect();
    let start = lines
        .iter()
        .position(|line| is_flag_line(line) && names_flag(line))?;
    let section: Vec<&str> = std::iter::once(lines[start])
        .chain(
            lines[start + 1..]
                .iter()
                .copied()
                .take_while(|line| !is_flag_line(line)),
        )
        .collect();
    Some(section.join("\n"))
}

/// The values clap lists for a flag, if it lists any.
fn possible_values(section: &str) -> Option<Vec<String>> {
    if let Some(at) = section.find("[possible values: ") {
        let rest = &section[at + "[possible values: ".len()..];
        let list = &rest[..rest.find(']')?];
        return Some(list.split(", ").map(str::to_owned).collect());
    }
    let at = section.find("Possible values:")?;
    Some(
        section[at..]
            .lines()
            .skip(1)
            .map(str::trim)
            .take_while(|line| line.starts_with("- "))
            .map(|line| {
                line[2..]
                    .split(':')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_owned()
            })
            .collect(),
    )
}

/// Checks `args` (after the subcommand) against `floodgate <subcommand> --help`: every flag
/// exists, and a value clap enumerates is one of its values. Returns the flags and their values;
/// adds what is wrong to `problems`.
fn check_args(
    context: &str,
    subcommand: &str,
    args: &[String],
    problems: &mut Vec<String>,
) -> BTreeMap<String, String> {
    let help = help(subcommand);
    let mut seen = BTreeMap::new();
    let mut index = 0;
    while index < args.len() {
        let arg = &args[index];
        index += 1;
        if !arg.starts_with("--") {
            problems.push(format!(
                "{context}: unexpected argument {arg:?} in {args:?}"
            ));
            continue;
        }
        let (flag, value) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => {
                let value = args
                    .get(index)
                    .filter(|next| !next.starts_with("--"))
                    .cloned();
                if value.is_some() {
                    index += 1;
                }
                (arg.clone(), value)
            }
        };
        match flag_help(&help, &flag) {
            None => problems.push(format!(
                "{context}: `floodgate {subcommand}` has no flag {flag} (see `floodgate {subcommand} --help`)"
            )),
            Some(section) => {
                if let (Some(values), Some(value)) = (possible_values(&section), value.as_ref()) {
                    if !values.contains(value) {
                        problems.push(format!(
                            "{context}: {flag}={value} is not one of {values:?} (`floodgate {subcommand} --help`)"
                        ));
                    }
                }
            }
        }
        seen.insert(flag, value.unwrap_or_default());
    }
    seen
}

fn assert_no_problems(problems: &[String]) {
    assert!(problems.is_empty(), "\n  {}", problems.join("\n  "));
}

/// Which of `names` occur as bytes in the floodgate binary (variables read with std::env, or by
/// a library such as the OpenTelemetry SDK, are string literals there).
pub(crate) fn names_in_binary(names: &BTreeSet<String>) -> BTreeSet<String> {
    if names.is_empty() {
        return BTreeSet::new();
    }
    let mut command = Command::new("grep");
    command.args(["-a", "-o", "-F"]);
    for name in names {
        command.arg("-e").arg(name);
    }
    let output = command
        .arg(floodgate_bin())
        .output()
        .unwrap_or_else(|error| panic!("cannot run grep: {error}"));
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn kustomize_config_is_a_copy_of_the_config_directory() {
    let listing = |relative: &str| -> BTreeMap<String, String> {
        std::fs::read_dir(repo_file(relative))
            .unwrap_or_else(|error| panic!("cannot list {relative}: {error}"))
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".yaml") || name.ends_with(".yml"))
            .map(|name| {
                let text = read(&format!("{relative}/{name}"));
                (name, text)
            })
            .collect()
    };
    let config = listing("config");
    let copies = listing("deploy/kubernetes/base/config");
    assert_eq!(
        config.keys().collect::<Vec<_>>(),
        copies.keys().collect::<Vec<_>>(),
        "deploy/kubernetes/base/config/ must hold the files of config/: \
         cp config/*.yaml deploy/kubernetes/base/config/ (and list them in base/kustomization.yaml)"
    );
    for (name, text) in &config {
        assert!(
            copies[name] == *text,
            "deploy/kubernetes/base/config/{name} differs from config/{name}: \
             cp config/{name} deploy/kubernetes/base/config/"
        );
    }
    let kustomization: Value =
        serde_yaml::from_str(&read("deploy/kubernetes/base/kustomization.yaml"))
            .unwrap_or_else(|error| panic!("base/kustomization.yaml: {error}"));
    let generator = kustomization["configMapGenerator"]
        .as_sequence()
        .and_then(|generators| {
            generators
                .iter()
                .find(|generator| generator["name"].as_str() == Some("floodgate-config"))
        })
        .unwrap_or_else(|| panic!("base/kustomization.yaml has no floodgate-config generator"));
    let listed: BTreeSet<String> = strings(&generator["files"])
        .iter()
        .map(|file| file.trim_start_matches("config/").to_owned())
        .collect();
    assert_eq!(
        listed,
        config.keys().cloned().collect::<BTreeSet<_>>(),
        "base/kustomization.yaml's floodgate-config must list every file of config/"
    );
    assert_eq!(
        generator["options"]["disableNameSuffixHash"].as_bool(),
        Some(true),
        "floodgate-config must keep its name, so that an edit reloads in place"
    );
}

/// `floodgate validate` of the rules written to `dir` from `overlay`'s floodgate-config.
fn validate_rules(overlay: &str, dir: &std::path::Path, problems: &mut Vec<String>) {
    let validate = Command::new(floodgate_bin())
        .arg("validate")
        .arg(dir)
        .output()
        .unwrap_or_else(|error| panic!("floodgate validate: {error}"));
    if !validate.status.success() {
        problems.push(format!(
            "{overlay}: the rules in ConfigMap floodgate-config do not load:\n{}{}",
            String::from_utf8_lossy(&validate.stdout),
            String::from_utf8_lossy(&validate.stderr)
        ));
    }
}

#[test]
fn every_overlay_runs_flags_and_variables_the_binary_knows() {
    let serve_help = help("serve");
    // Variables set only for `$(VAR)` expansion in other values.
    let expansion_only: BTreeSet<&str> = ["POD_NAME", "POD_NAMESPACE"].into();
    let mut problems = Vec::new();
    for overlay in overlays() {
        let documents = render(&overlay);
        let container = floodgate_container(&overlay, &documents);
        let args = strings(&container["args"]);
        if args.first().map(String::as_str) != Some("serve") {
            problems.push(format!(
                "{overlay}: floodgate must run `serve`, not {args:?}"
            ));
            continue;
        }
        let flags = check_args(&overlay, "serve", &args[1..], &mut problems);

        // The config directory is the mounted ConfigMap (a directory mount: a subPath mount
        // does not follow ConfigMap updates), and its rules load.
        let config_dir = flags.get("--config").cloned().unwrap_or_default();
        let mount = container["volumeMounts"]
            .as_sequence()
            .into_iter()
            .flatten()
            .find(|mount| mount["mountPath"].as_str() == Some(config_dir.as_str()));
        match mount {
            None => problems.push(format!(
                "{overlay}: nothing is mounted at --config {config_dir:?}"
            )),
            Some(mount) if !mount["subPath"].is_null() => {
                problems.push(format!("{overlay}: the rules are a subPath mount"));
            }
            Some(_) => {}
        }
        let config_map = find(&documents, "ConfigMap", "floodgate-config")
            .unwrap_or_else(|| panic!("{overlay}: no ConfigMap floodgate-config"));
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
        let rules = config_map["data"].as_mapping().into_iter().flatten();
        let mut files = 0;
        for (key, text) in rules {
            let (Some(key), Some(text)) = (key.as_str(), text.as_str()) else {
                panic!("{overlay}: floodgate-config data must be strings");
            };
            std::fs::write(dir.path().join(key), text)
                .unwrap_or_else(|error| panic!("write {key}: {error}"));
            files += 1;
        }
        // Serving Limitador's limits alone (their file is another ConfigMap, the Limitador
        // operator's: deploy_kuadrant_limitador checks it) is the one reason for no rules.
        let limits_alone = files == 0 && flags.contains_key("--limitador-limits");
        if !limits_alone {
            validate_rules(&overlay, dir.path(), &mut problems);
        }

        // Longer than the drain, with room for the calls in flight.
        let drain: u64 = flags
            .get("--drain-seconds")
            .and_then(|value| value.parse().ok())
            .unwrap_or(0);
        let grace = find(&documents, "Deployment", "floodgate")
            .and_then(|deployment| {
                deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as_u64()
            })
            .unwrap_or(30);
        if grace < drain + 10 {
            problems.push(format!(
                "{overlay}: terminationGracePeriodSeconds {grace} leaves too little after --drain-seconds={drain}"
            ));
        }

        // Every variable is a documented one (`[env: NAME=]` in the help) or one the binary
        // reads by name.
        let names: BTreeSet<String> = container["env"]
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|variable| variable["name"].as_str().map(str::to_owned))
            .collect();
        let undocumented: BTreeSet<String> = names
            .iter()
            .filter(|name| !serve_help.contains(&format!("[env: {name}=")))
            .filter(|name| !expansion_only.contains(name.as_str()))
            .cloned()
            .collect();
        let known = names_in_binary(&undocumented);
        let unknown: Vec<&String> = undocumented.difference(&known).collect();
        if !unknown.is_empty() {
            problems.push(format!(
                "{overlay}: floodgate reads none of the variables {unknown:?}"
            ));
        }
    }
    assert_no_problems(&problems);
}

#[test]
fn services_the_overlays_point_floodgate_at_exist() {
    for overlay in overlays() {
        let documents = render(&overlay);
        let container = floodgate_container(&overlay, &documents);
        let env: BTreeMap<String, Value> = container["env"]
            .as_sequence()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|variable| {
                variable["name"]
                    .as_str()
                    .map(|name| (name.to_owned(), variable.clone()))
            })
            .collect();
        for (variable, secret_prefix) in [
            ("REDIS_AUTH", "redis-auth"),
            ("REDIS_SENTINEL_AUTH", "redis-auth"),
        ] {
            if let Some(value) = env.get(variable) {
                let reference = &value["valueFrom"]["secretKeyRef"];
                let name = reference["name"].as_str().unwrap_or_default();
                let key = reference["key"].as_str().unwrap_or_default();
                let secret = find(&documents, "Secret", name).unwrap_or_else(|| {
                    panic!("{overlay}: {variable} refers to Secret {name}, which is not rendered")
                });
                assert!(
                    name.starts_with(secret_prefix) && !secret["data"][key].is_null(),
                    "{overlay}: Secret {name} has no key {key}"
                );
            }
        }
        // An address of a Service this overlay deploys must name one of its ports.
        for variable in ["REDIS_URL", "OTEL_EXPORTER_OTLP_ENDPOINT"] {
            let Some(value) = env.get(variable).and_then(|v| v["value"].as_str()) else {
                continue;
            };
            let address = value.split_once("://").map_or(value, |(_, rest)| rest);
            let Some((host, port)) = address.trim_end_matches('/').rsplit_once(':') else {
                continue;
            };
            if host.contains('.') || host.contains(',') {
                continue; // an existing installation elsewhere (sentinel, cluster)
            }
            let service = find(&documents, "Service", host).unwrap_or_else(|| {
                panic!("{overlay}: {variable}={value} names Service {host}, which is not rendered")
            });
            let ports = service_ports(service);
            assert!(
                ports.iter().any(|p| p == port),
                "{overlay}: {variable}={value}: Service {host} has ports {ports:?}"
            );
        }
    }
}

#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    service: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    status: i32,
}

pub(crate) const SERVING: i32 = 1;

/// grpc.health.v1.Health/Check, as the kubelet's gRPC probe calls it.
pub(crate) async fn health_check(port: u16, service: &str) -> Result<i32, String> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .map_err(|error| error.to_string())?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .map_err(|error| error.to_string())?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.map_err(|error| error.to_string())?;
    let codec = tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/grpc.health.v1.Health/Check");
    let request = tonic::Request::new(HealthCheckRequest {
        service: service.to_owned(),
    });
    grpc.unary(request, path, codec)
        .await
        .map(|response| response.into_inner().status)
        .map_err(|status| format!("{status:?}"))
}

#[test]
fn probes_ask_health_services_floodgate_serves() {
    // (probe, port, service) of every overlay's floodgate container.
    let mut probes = BTreeSet::new();
    for overlay in overlays() {
        let documents = render(&overlay);
        let container = floodgate_container(&overlay, &documents);
        let ports: BTreeMap<String, u64> = container["ports"]
            .as_sequence()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter_map(|p| Some((p["name"].as_str()?.to_owned(), p["containerPort"].as_u64()?)))
            .collect();
        assert_eq!(
            (ports.get("grpc"), ports.get("http"), ports.get("metrics")),
            (Some(&8081), Some(&8080), Some(&6070)),
            "{overlay}: floodgate's ports (its defaults: gRPC 8081, HTTP 8080, metrics 6070)"
        );
        for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
            let grpc = &container[probe]["grpc"];
            assert!(!grpc.is_null(), "{overlay}: {probe} must be a gRPC probe");
            assert_eq!(grpc["port"].as_u64(), Some(8081), "{overlay}: {probe} port");
            let service = grpc["service"].as_str().unwrap_or_default().to_owned();
            probes.insert((probe, service));
        }
    }
    assert!(
        probes.contains(&("readinessProbe", "ratelimit".to_owned())),
        "readiness must ask the `ratelimit` service: {probes:?}"
    );

    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let floodgate = Floodgate::start(&repo_file("config"), &[], dir.path());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|error| panic!("runtime: {error}"));
    for (probe, service) in &probes {
        let mut last = String::new();
        let mut serving = false;
        for _ in 0..50 {
            match runtime.block_on(health_check(floodgate.grpc_port, service)) {
                Ok(SERVING) => {
                    serving = true;
                    break;
                }
                Ok(status) => last = format!("status {status}"),
                Err(error) => last = error,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(
            serving,
            "{probe} asks grpc.health.v1 service {service:?}, which floodgate does not report \
             SERVING ({last}); log:\n{}",
            floodgate.process.log_text()
        );
    }
}

/// The JSON array of a Dockerfile instruction (`CMD ["a", "b"]`), joining `\` continuations.
fn dockerfile_exec_form(dockerfile: &str, instruction: &str) -> Vec<String> {
    let joined = dockerfile.replace("\\\n", " ");
    let line = joined
        .lines()
        .find(|line| line.trim_start().starts_with(&format!("{instruction} ")))
        .unwrap_or_else(|| panic!("deploy/Dockerfile has no {instruction}"));
    let array = &line[line
        .find('[')
        .unwrap_or_else(|| panic!("{instruction} is not exec form"))..];
    serde_json::from_str(array.trim()).unwrap_or_else(|error| panic!("{instruction}: {error}"))
}

#[test]
fn dockerfile_runs_what_the_binary_accepts() {
    let dockerfile = read("deploy/Dockerfile");
    let entrypoint = dockerfile_exec_form(&dockerfile, "ENTRYPOINT");
    assert_eq!(entrypoint, ["/usr/local/bin/floodgate"]);
    assert!(
        dockerfile.contains("COPY --from=build /out/floodgate /usr/local/bin/floodgate"),
        "the entrypoint must be the binary the build stage made"
    );
    // `/bin/ratelimit`, the reference's entry, is the same binary under its name
    // (tests/cli/front_door.rs starts it so).
    assert!(
        dockerfile.contains("ln -s /usr/local/bin/floodgate /out/bin/ratelimit")
            && dockerfile.contains("COPY --from=build /out/bin/ /bin/"),
        "the image must answer to /bin/ratelimit"
    );
    let cmd = dockerfile_exec_form(&dockerfile, "CMD");
    assert_eq!(cmd.first().map(String::as_str), Some("serve"));
    let mut problems = Vec::new();
    let flags = check_args("deploy/Dockerfile CMD", "serve", &cmd[1..], &mut problems);
    // The baked-in default lives where the Kubernetes manifests mount the ConfigMap.
    let config_dir = flags.get("--config").cloned().unwrap_or_default();
    assert!(
        dockerfile.contains(&format!("COPY config/*.yaml {config_dir}/")),
        "the example rules must be copied to --config {config_dir}"
    );
    let documents = render("redis");
    let container = floodgate_container("redis", &documents);
    assert!(
        strings(&container["args"]).contains(&format!("--config={config_dir}")),
        "the manifests must mount the rules where the image has its default ({config_dir})"
    );

    // HEALTHCHECK: the same command, run against a live floodgate.
    let healthcheck = dockerfile_exec_form(&dockerfile, "HEALTHCHECK");
    let healthcheck: Vec<String> = healthcheck
        .iter()
        .skip_while(|word| *word != "/usr/local/bin/floodgate")
        .skip(1)
        .cloned()
        .collect();
    assert_eq!(healthcheck.first().map(String::as_str), Some("check"));
    check_args(
        "deploy/Dockerfile HEALTHCHECK",
        "check",
        &healthcheck[1..],
        &mut problems,
    );
    assert_no_problems(&problems);
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let floodgate = Floodgate::start(&repo_file("config"), &[], dir.path());
    let args: Vec<String> = healthcheck
        .iter()
        .map(|word| {
            word.replace(
                "127.0.0.1:8081",
                &format!("127.0.0.1:{}", floodgate.grpc_port),
            )
        })
        .collect();
    let mut passed = false;
    let mut output = None;
    for _ in 0..50 {
        let run = Command::new(floodgate_bin())
            .args(&args)
            .output()
            .unwrap_or_else(|error| panic!("floodgate {args:?}: {error}"));
        if run.status.success() {
            passed = true;
            break;
        }
        output = Some(run);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        passed,
        "the Dockerfile's HEALTHCHECK `floodgate {}` fails against a running floodgate: {:?}",
        args.join(" "),
        output.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
    );
}

fn envoy_bootstrap(relative: &str) -> Value {
    serde_yaml::from_str(&read(relative)).unwrap_or_else(|error| panic!("{relative}: {error}"))
}

fn edge_http_connection_manager(bootstrap: &Value, relative: &str) -> Value {
    let listeners = bootstrap["static_resources"]["listeners"]
        .as_sequence()
        .unwrap_or_else(|| panic!("{relative}: no listeners"));
    let edge = listeners
        .iter()
        .find(|listener| listener["name"].as_str() == Some("edge"))
        .unwrap_or_else(|| panic!("{relative}: no listener `edge`"));
    edge["filter_chains"][0]["filters"][0]["typed_config"].clone()
}

#[test]
fn gateway_example_sends_the_quick_start_descriptors_to_every_floodgate_pod() {
    let quick_start = "deploy/envoy/envoy.yaml";
    let gateway = "deploy/kubernetes/components/envoy-gateway/envoy.yaml";
    let a = edge_http_connection_manager(&envoy_bootstrap(quick_start), quick_start);
    let b = edge_http_connection_manager(&envoy_bootstrap(gateway), gateway);
    assert_eq!(
        a["route_config"]["virtual_hosts"][0]["rate_limits"],
        b["route_config"]["virtual_hosts"][0]["rate_limits"],
        "{gateway} must send the descriptors of {quick_start} (config/edge.yaml's)"
    );
    let ratelimit = |manager: &Value| {
        manager["http_filters"]
            .as_sequence()
            .and_then(|filters| {
                filters
                    .iter()
                    .find(|f| f["name"].as_str() == Some("envoy.filters.http.ratelimit"))
            })
            .cloned()
            .unwrap_or_else(|| panic!("no ratelimit filter"))
    };
    assert_eq!(
        ratelimit(&a),
        ratelimit(&b),
        "{gateway}'s ratelimit filter must be {quick_start}'s"
    );

    // The bootstrap in the rendered ConfigMap is this file, and its floodgate cluster is the
    // headless Service of the rendered namespace, health-checked on the `ratelimit` service.
    let documents = render("envoy-gateway-example");
    let config_map = find_generated(&documents, "ConfigMap", "envoy-config")
        .unwrap_or_else(|| panic!("envoy-gateway-example: no ConfigMap envoy-config"));
    assert_eq!(
        config_map["data"]["envoy.yaml"].as_str(),
        Some(read(gateway).as_str())
    );
    let namespace = config_map["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let headless = find(&documents, "Service", "floodgate-headless")
        .unwrap_or_else(|| panic!("no Service floodgate-headless"));
    assert_eq!(headless["spec"]["clusterIP"].as_str(), Some("None"));
    let clusters = envoy_bootstrap(gateway)["static_resources"]["clusters"].clone();
    let cluster = clusters
        .as_sequence()
        .and_then(|clusters| {
            clusters
                .iter()
                .find(|c| c["name"].as_str() == Some("floodgate"))
        })
        .cloned()
        .unwrap_or_else(|| panic!("{gateway}: no cluster floodgate"));
    let address = &cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
        ["address"]["socket_address"];
    assert_eq!(
        address["address"].as_str(),
        Some(format!("floodgate-headless.{namespace}.svc.cluster.local").as_str())
    );
    assert_eq!(address["port_value"].as_u64(), Some(8081));
    assert_eq!(
        cluster["health_checks"][0]["grpc_health_check"]["service_name"].as_str(),
        Some("ratelimit")
    );
    // Its pods may pass floodgate's NetworkPolicy.
    let envoy =
        find(&documents, "Deployment", "envoy").unwrap_or_else(|| panic!("no Deployment envoy"));
    assert_eq!(
        envoy["spec"]["template"]["metadata"]["labels"]["floodgate.io/client"].as_str(),
        Some("true")
    );
}

#[test]
fn prometheus_scrapes_every_floodgate_pod() {
    let documents = render("observability");
    let config_map = find_generated(&documents, "ConfigMap", "prometheus-config")
        .unwrap_or_else(|| panic!("observability: no ConfigMap prometheus-config"));
    let namespace = config_map["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let config: Value = serde_yaml::from_str(
        config_map["data"]["prometheus.yml"]
            .as_str()
            .unwrap_or_else(|| panic!("no prometheus.yml")),
    )
    .unwrap_or_else(|error| panic!("prometheus.yml: {error}"));
    let job = config["scrape_configs"]
        .as_sequence()
        .and_then(|jobs| {
            jobs.iter()
                .find(|job| job["job_name"].as_str() == Some("floodgate"))
        })
        .cloned()
        .unwrap_or_else(|| panic!("prometheus.yml has no job floodgate"));
    let discovery = &job["dns_sd_configs"][0];
    assert_eq!(
        strings(&discovery["names"]),
        [format!("floodgate-headless.{namespace}.svc.cluster.local")]
    );
    assert_eq!(discovery["port"].as_u64(), Some(6070));
    assert_eq!(job["metrics_path"].as_str(), Some("/metrics"));
    // Prometheus' pods carry the label floodgate's NetworkPolicy admits to :6070.
    let prometheus = find(&documents, "Deployment", "prometheus")
        .unwrap_or_else(|| panic!("no Deployment prometheus"));
    assert_eq!(
        prometheus["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"].as_str(),
        Some("prometheus")
    );
}
