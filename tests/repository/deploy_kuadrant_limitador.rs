//! `deploy/kubernetes/overlays/kuadrant-limitador` puts floodgate where Kuadrant's Limitador
//! operator puts Limitador: its pods are what the operator's Service `limitador-limitador`
//! selects (labels and named ports, written out below from limitador-operator's source), it
//! reads the operator's limits ConfigMap at the path Limitador reads it, and that container,
//! run with the overlay's arguments, answers Limitador's HTTP API from such a limits file.
//! (The flags, variables and probes are checked with every overlay's in deploy_manifests.)

use std::collections::BTreeMap;
use std::time::Duration;

use floodgate_testkit::http::request;
use floodgate_testkit::{free_port, tempdir, wait_for_port, Floodgate};
use serde_yaml::Value;

use crate::deploy_manifests::{find, health_check, render, strings, SERVING};

const OVERLAY: &str = "kuadrant-limitador";

/// The selector of the Limitador operator's Service for Kuadrant's `Limitador` resource
/// (`limitador`): `SelectorLabels` in limitador-operator's pkg/limitador/k8s_objects.go.
const SERVICE_SELECTOR: [(&str, &str); 2] =
    [("app", "limitador"), ("limitador-resource", "limitador")];

/// The Service's ports and the container ports they send to, by name.
const SERVICE_PORTS: [(&str, u64); 2] = [("http", 8080), ("grpc", 8081)];

/// The operator's limits ConfigMap (`LimitsConfigMapName`), its key and where Limitador's
/// container mounts it (`LimitadorConfigFileName`, `LimitadorCMMountPath`).
const LIMITS_CONFIG_MAP: &str = "limitador-limits-config-limitador";
const LIMITS_FILE: &str = "limitador-config.yaml";
const LIMITS_MOUNT: &str = "/home/limitador/etc";

/// A limits file as the operator writes it from a RateLimitPolicy (one limit of 2 a minute).
const OPERATOR_LIMITS: &str = r#"- conditions:
  - descriptors[0]['limit.per_user__4f5e6b7a'] == '1'
  max_value: 2
  name: per-user
  namespace: default/toystore
  seconds: 60
  variables:
  - descriptors[0]['auth.identity.userid']
"#;

fn deployment(documents: &[Value]) -> &Value {
    find(documents, "Deployment", "floodgate")
        .unwrap_or_else(|| panic!("{OVERLAY}: no Deployment floodgate"))
}

fn container(documents: &[Value]) -> &Value {
    &deployment(documents)["spec"]["template"]["spec"]["containers"][0]
}

/// `--flag=value` arguments of the container, by flag.
fn flags(container: &Value) -> BTreeMap<String, String> {
    strings(&container["args"])
        .iter()
        .filter_map(|arg| arg.split_once('='))
        .map(|(flag, value)| (flag.to_owned(), value.to_owned()))
        .collect()
}

#[test]
fn the_overlay_s_pod_is_what_limitador_s_service_selects_and_reads_its_limits() {
    let documents = render(OVERLAY);
    let deployment = deployment(&documents);
    assert_eq!(
        deployment["metadata"]["namespace"].as_str(),
        Some("kuadrant-system")
    );
    assert_eq!(
        deployment["spec"]["replicas"].as_u64(),
        Some(1),
        "counts are per pod"
    );
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (label, value) in SERVICE_SELECTOR {
        assert_eq!(labels[label].as_str(), Some(value), "pod label {label}");
    }
    for kind in ["Namespace", "HorizontalPodAutoscaler"] {
        assert!(
            documents
                .iter()
                .all(|document| document["kind"].as_str() != Some(kind)),
            "{OVERLAY}: renders a {kind}"
        );
    }

    let container = container(&documents);
    let ports: BTreeMap<&str, u64> = container["ports"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|port| Some((port["name"].as_str()?, port["containerPort"].as_u64()?)))
        .collect();
    for (name, port) in SERVICE_PORTS {
        assert_eq!(ports.get(name), Some(&port), "container port {name}");
    }
    let flags = flags(container);
    let port_of = |flag: &str| {
        flags
            .get(flag)
            .and_then(|addr| addr.rsplit_once(':'))
            .map(|(_, port)| port.to_owned())
    };
    assert_eq!(
        port_of("--limitador-http-addr").as_deref(),
        Some("8080"),
        "port `http` is Limitador's HTTP API"
    );
    assert!(
        port_of("--grpc-addr").is_none_or(|port| port == "8081"),
        "port `grpc` is floodgate's gRPC port: {flags:?}"
    );

    assert_eq!(
        flags.get("--limitador-limits").map(String::as_str),
        Some(format!("{LIMITS_MOUNT}/{LIMITS_FILE}").as_str())
    );
    let mount = container["volumeMounts"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|mount| mount["mountPath"].as_str() == Some(LIMITS_MOUNT))
        .unwrap_or_else(|| panic!("{OVERLAY}: nothing mounted at {LIMITS_MOUNT}"));
    assert!(
        mount["subPath"].is_null(),
        "a directory mount follows edits"
    );
    let volume_name = mount["name"].as_str().unwrap_or_default();
    let volume = deployment["spec"]["template"]["spec"]["volumes"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|volume| volume["name"].as_str() == Some(volume_name))
        .unwrap_or_else(|| panic!("{OVERLAY}: no volume {volume_name}"));
    assert_eq!(
        volume["configMap"]["name"].as_str(),
        Some(LIMITS_CONFIG_MAP)
    );
    assert!(
        find(&documents, "ConfigMap", LIMITS_CONFIG_MAP).is_none(),
        "the limits ConfigMap is the operator's, not the overlay's"
    );
}

/// Limitador's `POST /check_and_report` for user `ann`: its status.
fn check_and_report(port: u16) -> u16 {
    let body = r#"{"namespace": "default/toystore", "values": {"limit.per_user__4f5e6b7a": "1", "auth.identity.userid": "ann"}, "delta": 1}"#;
    request(port, "POST", "/check_and_report", &[], body)
        .unwrap_or_else(|error| panic!("POST /check_and_report: {error}"))
        .status
}

#[test]
fn the_overlay_s_container_answers_limitador_s_api_from_the_operator_s_limits() {
    let documents = render(OVERLAY);
    let dir = tempdir();
    let limits_dir = dir.path().join("limits");
    let rules_dir = dir.path().join("rules");
    for made in [&limits_dir, &rules_dir] {
        std::fs::create_dir_all(made).unwrap_or_else(|error| panic!("mkdir: {error}"));
    }
    let limits = limits_dir.join(LIMITS_FILE);
    std::fs::write(&limits, OPERATOR_LIMITS).unwrap_or_else(|error| panic!("write: {error}"));
    // The overlay's arguments, with the mount moved here and the listeners on free ports.
    let limitador_http = free_port();
    let mut args: Vec<String> = strings(&container(&documents)["args"])
        .into_iter()
        .skip(1)
        .filter(|arg| {
            !arg.ends_with("-addr") && !arg.contains("-addr=") && !arg.starts_with("--config")
        })
        .map(|arg| arg.replace(LIMITS_MOUNT, &limits_dir.display().to_string()))
        .collect();
    args.push(format!("--limitador-http-addr=127.0.0.1:{limitador_http}"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let floodgate = Floodgate::start(&rules_dir, &args, dir.path());
    wait_for_port(
        limitador_http,
        Duration::from_secs(10),
        "Limitador's HTTP API",
    );
    assert_eq!(
        check_and_report(limitador_http),
        200,
        "{}",
        floodgate.process.log_text()
    );
    assert_eq!(check_and_report(limitador_http), 200);
    assert_eq!(check_and_report(limitador_http), 429, "2 a minute");
    // Ready (the readiness probe's service) with Limitador's limits and no YAML rules.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|error| panic!("runtime: {error}"));
    let readiness = container(&documents)["readinessProbe"]["grpc"]["service"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let status = runtime.block_on(health_check(floodgate.grpc_port, &readiness));
    assert_eq!(status, Ok(SERVING), "readiness service {readiness:?}");
}
