//! `deploy/kubernetes/overlays/under-envoy-gateway` and `docs/envoy-gateway.md` against Envoy
//! Gateway (envoyproxy/gateway): the EnvoyGateway configuration in the ConfigMap
//! `envoy-gateway-config` parses, names floodgate's image where Envoy Gateway takes the
//! rate-limit image from, gives a Redis URL that is the overlay's Service, and adds variables
//! floodgate reads; Redis admits the pods Envoy Gateway labels; the BackendTrafficPolicy's global
//! rules are well-formed by the API's own limits; every key of these objects (and of the guide's
//! YAML) is a field of Envoy Gateway's API; and the guide's table lists the variables Envoy
//! Gateway renders, each as floodgate treats it.
//!
//! Envoy Gateway's source is not read here (CI runs on a clean clone): what is needed of it is
//! written out below, read from envoyproxy/gateway at [`ENVOY_GATEWAY_COMMIT`]. Re-read it there
//! (`api/v1alpha1/*.go`, `internal/infrastructure/kubernetes/ratelimit/resource.go`) when moving
//! to a newer Envoy Gateway.

use std::collections::{BTreeMap, BTreeSet};

use floodgate::cmd::reference_env::{Treatment, NOT_READ_BY_THE_REFERENCE, REFERENCE_VARIABLES};
use floodgate::core::arithmetic::failure::FailurePolicy;
use serde::Deserialize;
use serde_yaml::Value;

use crate::deploy_manifests::{
    find, help, names_in_binary, read, render, service_ports, UNDER_ENVOY_GATEWAY,
};

/// The envoyproxy/gateway commit (2026-08-21, after v1.9.0) every fact below was read from.
const ENVOY_GATEWAY_COMMIT: &str = "d32f28294245e454d20f81d323d626a90e660c1e";

/// Where Envoy Gateway runs, and renders its rate-limit Deployment (its default namespace).
const NAMESPACE: &str = "envoy-gateway-system";

/// The overlay's EnvoyGateway configuration, the file its ConfigMap is generated from.
const CONFIG_FILE: &str =
    "deploy/kubernetes/overlays/under-envoy-gateway/envoy-gateway-system/envoy-gateway.yaml";

const GUIDE: &str = "docs/envoy-gateway.md";

/// The key paths of an EnvoyGateway configuration the API has: `api/v1alpha1/envoygateway_types.go`
/// (EnvoyGateway, EnvoyGatewaySpec, EnvoyGatewayProvider, EnvoyGatewayKubernetesProvider and its
/// two inline structs, RateLimit and what it holds) and `api/v1alpha1/shared_types.go`
/// (KubernetesDeploymentSpec, KubernetesPodSpec, KubernetesContainerSpec), by their json tags.
/// A path is a key per segment, `[]` for the items of a list; `*` is any one key (a map),
/// `{a,b}` either key, a final `**` anything below (a Kubernetes type, or a part of the API the
/// overlay does not use, not looked into); a pattern also allows every path leading to it.
const ENVOY_GATEWAY_KEYS: &[&str] = &[
    "{apiVersion,kind}",
    "gateway.controllerName",
    "logging.level.*",
    "logging.encoder",
    "provider.type",
    "provider.custom.**",
    "provider.kubernetes.{rateLimitHpa,rateLimitPDB,deploy,shutdownManager,proxyTopologyInjector}.**",
    "provider.kubernetes.{watch,leaderElection,client,cacheSyncPeriod}.**",
    "provider.kubernetes.rateLimitDeployment.{replicas,name}",
    "provider.kubernetes.rateLimitDeployment.{patch,strategy,initContainers}.**",
    "provider.kubernetes.rateLimitDeployment.pod.{annotations,labels,nodeSelector}.*",
    "provider.kubernetes.rateLimitDeployment.pod.{securityContext,affinity,tolerations,volumes}.**",
    "provider.kubernetes.rateLimitDeployment.pod.{imagePullSecrets,topologySpreadConstraints}.**",
    "provider.kubernetes.rateLimitDeployment.pod.priorityClassName",
    "provider.kubernetes.rateLimitDeployment.container.{image,imageRepository}",
    "provider.kubernetes.rateLimitDeployment.container.{resources,securityContext,volumeMounts}.**",
    // corev1.EnvVar, and the SecretKeySelector of its valueFrom.
    "provider.kubernetes.rateLimitDeployment.container.env[].{name,value}",
    "provider.kubernetes.rateLimitDeployment.container.env[].valueFrom.secretKeyRef.{name,key,optional}",
    "provider.kubernetes.rateLimitDeployment.container.env[].valueFrom.{configMapKeyRef,fieldRef,resourceFieldRef}.**",
    "rateLimit.{timeout,failClosed}",
    "rateLimit.backend.type",
    "rateLimit.backend.redis.url",
    "rateLimit.backend.redis.urlRef.secretKeyRef.{name,key,optional}",
    "rateLimit.backend.redis.tls.certificateRef.**",
    "rateLimit.telemetry.metrics.prometheus.disable",
    "rateLimit.telemetry.tracing.samplingRate",
    "rateLimit.telemetry.tracing.provider.{type,url}",
    "{admin,telemetry,xdsServer,extensionManager,extensionManagers,extensionApis}.**",
    "{gatewayAPI,runtimeFlags,envoyProxy}.**",
];

/// The Helm chart's values for the rate-limit image (`charts/gateway-helm/values.tmpl.yaml`);
/// `config.envoyGateway` is an EnvoyGateway configuration ([`ENVOY_GATEWAY_KEYS`]).
const HELM_GLOBAL_KEYS: &[&str] = &[
    "global.{imageRegistry,imagePullSecrets}.**",
    "global.images.ratelimit.{image,pullPolicy,pullSecrets}.**",
];

/// BackendTrafficPolicy: `api/v1alpha1/backendtrafficpolicy_types.go` and
/// `api/v1alpha1/ratelimit_types.go` (RateLimitSpec and below); `targetRefs` as the generated CRD
/// (`charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_backendtrafficpolicies.yaml`)
/// spells Gateway API's LocalPolicyTargetReferenceWithSectionName. Only the parts of the spec
/// that a rate limit needs.
const BACKEND_TRAFFIC_POLICY_KEYS: &[&str] = &[
    "{apiVersion,kind}",
    "metadata.**",
    "spec.targetRefs[].{group,kind,name,sectionName}",
    "spec.rateLimit.type",
    "spec.rateLimit.{global,local}.rules[].clientSelectors[].headers[].{type,name,value,invert}",
    "spec.rateLimit.{global,local}.rules[].clientSelectors[].methods[].{value,invert}",
    "spec.rateLimit.{global,local}.rules[].clientSelectors[].{path,sourceCIDR}.{type,value,invert}",
    "spec.rateLimit.{global,local}.rules[].clientSelectors[].queryParams[].{type,name,value,invert}",
    "spec.rateLimit.{global,local}.rules[].limit.{requests,unit}",
    "spec.rateLimit.{global,local}.rules[].limit.fromMetadata.{namespace,key}",
    "spec.rateLimit.{global,local}.rules[].cost.{request,response}.{from,number}",
    "spec.rateLimit.{global,local}.rules[].cost.{request,response}.metadata.{namespace,key}",
    "spec.rateLimit.{global,local}.rules[].{shared,shadowMode,xRateLimitHeaders}",
];

/// HTTPRoute, as Gateway API v1.6.1 defines it (the CRD Envoy Gateway bundles,
/// `charts/gateway-helm/charts/crds/crds/gatewayapi-crds.yaml`); the parts a route to a Service
/// uses.
const HTTP_ROUTE_KEYS: &[&str] = &[
    "{apiVersion,kind}",
    "metadata.**",
    "spec.parentRefs[].{group,kind,name,namespace,port,sectionName}",
    "spec.hostnames[]",
    "spec.rules[].matches[].path.{type,value}",
    "spec.rules[].matches[].{headers,queryParams,method}.**",
    "spec.rules[].backendRefs[].{group,kind,name,namespace,port,weight}",
    "spec.rules[].{filters,timeouts,name}.**",
];

/// The labels Envoy Gateway gives its rate-limit pods (`resource.go`, `rateLimitLabels`).
const RATE_LIMIT_POD_LABELS: [(&str, &str); 3] = [
    ("app.kubernetes.io/name", "envoy-ratelimit"),
    ("app.kubernetes.io/component", "ratelimit"),
    ("app.kubernetes.io/managed-by", "envoy-gateway"),
];

/// Every variable Envoy Gateway sets on the rate-limit container (`resource.go`,
/// `expectedRateLimitContainerEnv`): always, with Redis, with Redis TLS (and a client
/// certificate), with Prometheus (the default), with tracing.
const RENDERED_VARIABLES: &[&str] = &[
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_IGNOREDOTFILES",
    "RUNTIME_WATCH_ROOT",
    "LOG_LEVEL",
    "USE_STATSD",
    "CONFIG_TYPE",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_NODE_ID",
    "GRPC_SERVER_USE_TLS",
    "GRPC_SERVER_TLS_CERT",
    "GRPC_SERVER_TLS_KEY",
    "GRPC_SERVER_TLS_CA_CERT",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "FORCE_START_WITHOUT_INITIAL_CONFIG",
    "REDIS_SOCKET_TYPE",
    "REDIS_URL",
    "REDIS_TLS",
    "REDIS_TLS_CLIENT_CERT",
    "REDIS_TLS_CLIENT_KEY",
    "USE_PROMETHEUS",
    "PROMETHEUS_ADDR",
    "PROMETHEUS_MAPPER_YAML",
    "TRACING_ENABLED",
    "TRACING_SERVICE_NAME",
    "TRACING_SERVICE_NAMESPACE",
    "TRACING_SERVICE_INSTANCE_ID",
    "TRACING_SAMPLING_RATE",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// `KubernetesContainerSpec.image`'s validation (`shared_types.go`): "Image must include a tag".
const IMAGE_PATTERN: &str =
    r"^[a-zA-Z0-9._-]+(:[0-9]+)?(/[a-zA-Z0-9._/-]+)?(:[a-zA-Z0-9._-]+)?(@sha256:[a-z0-9]+)?$";

/// The API's limits on a rule (`ratelimit_types.go` and the generated CRD): units, header match
/// types, rules per policy, selectors per rule, headers per selector, a header name's length.
const UNITS: [&str; 7] = ["Second", "Minute", "Hour", "Day", "Week", "Month", "Year"];
const HEADER_MATCH_TYPES: [&str; 3] = ["Exact", "RegularExpression", "Distinct"];
const MAX_RULES: usize = 256;
const MAX_CLIENT_SELECTORS: usize = 8;
const MAX_HEADERS: usize = 128;
const MAX_HEADER_NAME: usize = 256;

/// The kinds a BackendTrafficPolicy may target (its CEL rule on `targetRefs[*].kind`).
const TARGET_KINDS: [&str; 7] = [
    "Gateway",
    "ListenerSet",
    "HTTPRoute",
    "GRPCRoute",
    "UDPRoute",
    "TCPRoute",
    "TLSRoute",
];

/// Every key path of `value`: one per mapping key and per list item (`[]`).
fn key_paths(value: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match value {
        Value::Mapping(mapping) => {
            for (key, child) in mapping {
                let key = match key {
                    Value::String(key) => key.clone(),
                    other => format!("{other:?}"),
                };
                prefix.push(key);
                out.push(prefix.clone());
                key_paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Sequence(items) => {
            for item in items {
                prefix.push("[]".to_owned());
                out.push(prefix.clone());
                key_paths(item, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

/// The items of a YAML list (none when it is absent).
fn items(value: &Value) -> Vec<Value> {
    value.as_sequence().cloned().unwrap_or_default()
}

fn shown(path: &[String]) -> String {
    path.join(".").replace(".[]", "[]")
}

fn segment_matches(segment: &str, key: &str) -> bool {
    if segment == "*" {
        return key != "[]";
    }
    match segment
        .strip_prefix('{')
        .and_then(|rest| rest.strip_suffix('}'))
    {
        Some(choices) => choices.split(',').any(|choice| choice == key),
        None => segment == key,
    }
}

/// Whether `path` is `pattern`'s, below its `**`, or on the way to it.
fn matches(pattern: &[&str], path: &[String]) -> bool {
    match (pattern.split_first(), path.split_first()) {
        (_, None) => true,
        (Some((&"**", _)), Some(_)) => true,
        (None, Some(_)) => false,
        (Some((segment, pattern_rest)), Some((key, path_rest))) => {
            segment_matches(segment, key) && matches(pattern_rest, path_rest)
        }
    }
}

/// The key paths of `value` (under `under`, which is not checked) that no pattern allows.
pub(crate) fn unknown_keys(value: &Value, under: &[&str], patterns: &[&str]) -> Vec<String> {
    let patterns: Vec<String> = patterns
        .iter()
        .map(|pattern| pattern.replace("[]", ".[]"))
        .collect();
    let patterns: Vec<Vec<&str>> = patterns
        .iter()
        .map(|pattern| pattern.split('.').collect())
        .collect();
    let mut paths = Vec::new();
    key_paths(value, &mut Vec::new(), &mut paths);
    paths
        .iter()
        .filter(|path| !patterns.iter().any(|pattern| matches(pattern, path)))
        .map(|path| {
            let mut whole: Vec<String> =
                under.iter().map(|segment| (*segment).to_owned()).collect();
            whole.extend(path.iter().cloned());
            shown(&whole)
        })
        .collect()
}

fn overlay() -> Vec<Value> {
    render(UNDER_ENVOY_GATEWAY)
}

fn in_namespace<'a>(documents: &'a [Value], kind: &str, name: &str, namespace: &str) -> &'a Value {
    documents
        .iter()
        .find(|document| {
            document["kind"].as_str() == Some(kind)
                && document["metadata"]["name"].as_str() == Some(name)
                && document["metadata"]["namespace"].as_str() == Some(namespace)
        })
        .unwrap_or_else(|| {
            panic!("{UNDER_ENVOY_GATEWAY}: no {kind} {name} in namespace {namespace} is rendered")
        })
}

/// The EnvoyGateway configuration in the rendered ConfigMap, which must be the overlay's file.
fn envoy_gateway_config(documents: &[Value]) -> Value {
    let config_map = in_namespace(documents, "ConfigMap", "envoy-gateway-config", NAMESPACE);
    let text = config_map["data"]["envoy-gateway.yaml"]
        .as_str()
        .unwrap_or_else(|| panic!("ConfigMap envoy-gateway-config has no key envoy-gateway.yaml"));
    assert_eq!(
        text,
        read(CONFIG_FILE),
        "the ConfigMap must hold {CONFIG_FILE} as it is"
    );
    serde_yaml::from_str(text)
        .unwrap_or_else(|error| panic!("{CONFIG_FILE}: not YAML Envoy Gateway can parse: {error}"))
}

fn labels(value: &Value) -> BTreeMap<String, String> {
    value
        .as_mapping()
        .into_iter()
        .flatten()
        .filter_map(|(key, value)| Some((key.as_str()?.to_owned(), value.as_str()?.to_owned())))
        .collect()
}

fn is_subset(part: &BTreeMap<String, String>, whole: &BTreeMap<String, String>) -> bool {
    part.iter()
        .all(|(key, value)| whole.get(key) == Some(value))
}

/// Whether `floodgate serve` reads variable `name`: its help names it, or the binary holds it.
fn floodgate_reads(serve_help: &str, name: &str) -> bool {
    serve_help.contains(&format!("[env: {name}="))
        || serve_help.contains(&format!("[env: {name}]"))
        || !names_in_binary(&BTreeSet::from([name.to_owned()])).is_empty()
}

fn image_has_a_tag(image: &str) -> bool {
    let pattern =
        regex::Regex::new(IMAGE_PATTERN).unwrap_or_else(|error| panic!("IMAGE_PATTERN: {error}"));
    let last = image.rsplit('/').next().unwrap_or(image);
    pattern.is_match(image) && last.contains(':')
}

#[test]
fn envoy_gateway_config_runs_floodgates_image_on_the_overlays_redis() {
    let documents = overlay();
    let config = envoy_gateway_config(&documents);
    assert_eq!(
        (config["apiVersion"].as_str(), config["kind"].as_str()),
        (Some("gateway.envoyproxy.io/v1alpha1"), Some("EnvoyGateway"))
    );
    assert_eq!(config["provider"]["type"].as_str(), Some("Kubernetes"));

    // The image: floodgate's, named as the other overlays name it, where Envoy Gateway takes
    // the rate-limit image from (`*rateLimitDeployment.Container.Image`).
    let deployment = &config["provider"]["kubernetes"]["rateLimitDeployment"];
    let container = &deployment["container"];
    let image = container["image"].as_str().unwrap_or_else(|| {
        panic!("{CONFIG_FILE}: no provider.kubernetes.rateLimitDeployment.container.image")
    });
    let redis_overlay = render("redis");
    let floodgate = find(&redis_overlay, "Deployment", "floodgate")
        .unwrap_or_else(|| panic!("redis: no Deployment floodgate"));
    let floodgate_image = floodgate["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        image, floodgate_image,
        "the rate-limit image must be floodgate's, as the other overlays name it"
    );
    assert!(image_has_a_tag(image), "Envoy Gateway wants a tag: {image}");
    assert!(
        container["imageRepository"].is_null(),
        "image and imageRepository are mutually exclusive"
    );

    // The backend: Redis, at the overlay's Service `redis`, on one of its ports.
    let backend = &config["rateLimit"]["backend"];
    assert_eq!(backend["type"].as_str(), Some("Redis"));
    let url = backend["redis"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("{CONFIG_FILE}: no rateLimit.backend.redis.url"));
    let address = url.strip_prefix("redis://").unwrap_or(url);
    assert!(!address.contains(','), "one Redis, not a list: {url}");
    let (host, port) = address
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("REDIS_URL {url} has no port"));
    let mut parts = host.splitn(3, '.');
    let service_name = parts.next().unwrap_or_default();
    let namespace = parts.next().unwrap_or(NAMESPACE);
    let domain = parts.next().unwrap_or("svc");
    assert!(
        ["svc", "svc.cluster.local"].contains(&domain),
        "{url}: not a Service's name"
    );
    let service = in_namespace(&documents, "Service", service_name, namespace);
    let ports = service_ports(service);
    assert!(
        ports.iter().any(|p| p == port),
        "{url}: Service {service_name} has ports {ports:?}"
    );
    let redis = in_namespace(&documents, "StatefulSet", "redis", namespace);
    let redis_pod = labels(&redis["spec"]["template"]["metadata"]["labels"]);
    assert!(
        is_subset(&labels(&service["spec"]["selector"]), &redis_pod),
        "Service {service_name} must select the Redis pods"
    );

    // Redis admits the pods Envoy Gateway makes.
    let network_policy = in_namespace(&documents, "NetworkPolicy", "redis", namespace);
    assert!(is_subset(
        &labels(&network_policy["spec"]["podSelector"]["matchLabels"]),
        &redis_pod
    ));
    let rate_limit_pod: BTreeMap<String, String> = RATE_LIMIT_POD_LABELS
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect();
    let peers: Vec<BTreeMap<String, String>> = network_policy["spec"]["ingress"]
        .as_sequence()
        .into_iter()
        .flatten()
        .flat_map(|rule| items(&rule["from"]))
        .map(|peer| labels(&peer["podSelector"]["matchLabels"]))
        .collect();
    assert!(
        !peers.is_empty()
            && peers
                .iter()
                .all(|peer| !peer.is_empty() && is_subset(peer, &rate_limit_pod)),
        "NetworkPolicy redis must admit Envoy Gateway's rate-limit pods ({rate_limit_pod:?}), \
         and only them: {peers:?}"
    );

    // What the overlay adds to Envoy Gateway's environment, floodgate reads.
    let serve_help = help("serve");
    let env: BTreeMap<String, Value> = container["env"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|variable| {
            let name = variable["name"].as_str().unwrap_or_default().to_owned();
            (name, variable.clone())
        })
        .collect();
    for name in env.keys() {
        assert!(
            floodgate_reads(&serve_help, name),
            "{CONFIG_FILE}: container.env sets {name}, which floodgate does not read"
        );
    }
    // The password Redis requires (the StatefulSet's REDIS_PASSWORD) is the one REDIS_AUTH gives.
    let auth = &env
        .get("REDIS_AUTH")
        .unwrap_or_else(|| panic!("{CONFIG_FILE}: Redis asks for a password: set REDIS_AUTH"))
        ["valueFrom"]["secretKeyRef"];
    let secret_name = auth["name"].as_str().unwrap_or_default();
    let key = auth["key"].as_str().unwrap_or_default();
    let secret = in_namespace(&documents, "Secret", secret_name, NAMESPACE);
    assert!(
        !secret["data"][key].is_null(),
        "Secret {secret_name} has no key {key}"
    );
    let redis_password = redis["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|variable| variable["name"].as_str() == Some("REDIS_PASSWORD"))
        .map(|variable| variable["valueFrom"]["secretKeyRef"].clone())
        .unwrap_or_else(|| panic!("the Redis StatefulSet has no REDIS_PASSWORD"));
    assert_eq!(
        &redis_password, auth,
        "REDIS_AUTH must be Redis' own password"
    );
    // While Redis is down floodgate answers as Envoy would treat a failed call: what
    // `rateLimit.failClosed` asks (false, the default: let the request through).
    let policy = env
        .get("FLOODGATE_FAILURE_POLICY")
        .and_then(|variable| variable["value"].as_str())
        .unwrap_or_else(|| panic!("{CONFIG_FILE}: set FLOODGATE_FAILURE_POLICY (failClosed)"));
    let parsed = FailurePolicy::parse(policy)
        .unwrap_or_else(|| panic!("FLOODGATE_FAILURE_POLICY={policy} is not a failure policy"));
    let fail_closed = config["rateLimit"]["failClosed"].as_bool().unwrap_or(false);
    let expected = if fail_closed {
        FailurePolicy::FailClosed
    } else {
        FailurePolicy::FailOpen
    };
    assert_eq!(
        parsed, expected,
        "rateLimit.failClosed: {fail_closed} asks FLOODGATE_FAILURE_POLICY={expected}"
    );
}

#[test]
fn every_key_is_a_field_of_envoy_gateways_api() {
    let documents = overlay();
    let mut problems = Vec::new();
    let mut check = |what: &str, value: &Value, under: &[&str], patterns: &[&str]| {
        for key in unknown_keys(value, under, patterns) {
            problems.push(format!("{what}: {key}"));
        }
    };
    check(
        CONFIG_FILE,
        &envoy_gateway_config(&documents),
        &[],
        ENVOY_GATEWAY_KEYS,
    );
    for document in &documents {
        let name = document["metadata"]["name"].as_str().unwrap_or_default();
        match document["kind"].as_str() {
            Some("BackendTrafficPolicy") => check(
                &format!("BackendTrafficPolicy {name}"),
                document,
                &[],
                BACKEND_TRAFFIC_POLICY_KEYS,
            ),
            Some("HTTPRoute") => {
                check(&format!("HTTPRoute {name}"), document, &[], HTTP_ROUTE_KEYS)
            }
            _ => {}
        }
    }

    // The guide's YAML: the ConfigMap, the Helm values, any policy it shows.
    let guide = read(GUIDE);
    let mut checked = 0;
    for block in yaml_blocks(&guide) {
        for document in serde_yaml::Deserializer::from_str(&block) {
            let value = Value::deserialize(document)
                .unwrap_or_else(|error| panic!("{GUIDE}: a YAML block does not parse: {error}"));
            if value["kind"].as_str() == Some("ConfigMap") {
                let text = value["data"]["envoy-gateway.yaml"]
                    .as_str()
                    .unwrap_or_default();
                let config: Value = serde_yaml::from_str(text)
                    .unwrap_or_else(|error| panic!("{GUIDE}: envoy-gateway.yaml: {error}"));
                check(
                    &format!("{GUIDE} (ConfigMap)"),
                    &config,
                    &[],
                    ENVOY_GATEWAY_KEYS,
                );
                checked += 1;
            } else if value["kind"].as_str() == Some("BackendTrafficPolicy") {
                check(
                    &format!("{GUIDE} (BackendTrafficPolicy)"),
                    &value,
                    &[],
                    BACKEND_TRAFFIC_POLICY_KEYS,
                );
                checked += 1;
            } else if !value["config"]["envoyGateway"].is_null() {
                let mut global = serde_yaml::Mapping::new();
                global.insert("global".into(), value["global"].clone());
                check(
                    &format!("{GUIDE} (Helm values)"),
                    &Value::Mapping(global),
                    &[],
                    HELM_GLOBAL_KEYS,
                );
                check(
                    &format!("{GUIDE} (Helm values)"),
                    &value["config"]["envoyGateway"],
                    &["config", "envoyGateway"],
                    ENVOY_GATEWAY_KEYS,
                );
                // The chart splits the image at its first `/` (`eg.ratelimit.image`).
                let image = value["global"]["images"]["ratelimit"]["image"]
                    .as_str()
                    .unwrap_or_default();
                assert!(
                    image.contains('/') && image_has_a_tag(image),
                    "{GUIDE}: global.images.ratelimit.image {image:?}: registry/repository:tag"
                );
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 2,
        "{GUIDE}: expected its ConfigMap and Helm values among its YAML blocks"
    );
    assert!(
        problems.is_empty(),
        "keys Envoy Gateway's API (envoyproxy/gateway {ENVOY_GATEWAY_COMMIT}) does not have, \
         as this test lists it:\n  {}",
        problems.join("\n  ")
    );
}

/// The fenced blocks of `text` labelled `yaml`.
fn yaml_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in text.lines() {
        match current.as_mut() {
            None if line.trim_start() == "```yaml" => current = Some(Vec::new()),
            None => {}
            Some(lines) if line.trim_start() == "```" => {
                blocks.push(lines.join("\n"));
                current = None;
            }
            Some(lines) => lines.push(line),
        }
    }
    blocks
}

#[test]
fn backend_traffic_policy_sets_well_formed_global_limits_on_the_example_route() {
    let documents = overlay();
    let policies: Vec<&Value> = documents
        .iter()
        .filter(|document| document["kind"].as_str() == Some("BackendTrafficPolicy"))
        .collect();
    assert_eq!(policies.len(), 1, "one example BackendTrafficPolicy");
    let policy = policies[0];
    let name = policy["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = policy["metadata"]["namespace"]
        .as_str()
        .unwrap_or_else(|| panic!("BackendTrafficPolicy {name} has no namespace"));
    assert_eq!(
        policy["apiVersion"].as_str(),
        Some("gateway.envoyproxy.io/v1alpha1")
    );
    let mut problems = Vec::new();

    // Its targets: the rendered HTTPRoute, in its own namespace (policies attach locally).
    let targets = items(&policy["spec"]["targetRefs"]);
    if targets.is_empty() {
        problems.push("no targetRefs".to_owned());
    }
    for target in &targets {
        let kind = target["kind"].as_str().unwrap_or_default();
        let target_name = target["name"].as_str().unwrap_or_default();
        if target["group"].as_str() != Some("gateway.networking.k8s.io")
            || !TARGET_KINDS.contains(&kind)
        {
            problems.push(format!(
                "targetRef {target:?}: not a Gateway API kind it may target"
            ));
        }
        if kind == "HTTPRoute" {
            let route = in_namespace(&documents, "HTTPRoute", target_name, namespace);
            if route["spec"]["parentRefs"]
                .as_sequence()
                .is_none_or(Vec::is_empty)
            {
                problems.push(format!("HTTPRoute {target_name} has no parentRefs"));
            }
        }
    }

    let rate_limit = &policy["spec"]["rateLimit"];
    if !matches!(rate_limit["type"].as_str(), None | Some("Global")) {
        problems.push(format!(
            "rateLimit.type {:?}: not Global",
            rate_limit["type"]
        ));
    }
    if !rate_limit["local"].is_null() {
        problems.push("rateLimit.local: the example is a global limit".to_owned());
    }
    let rules = items(&rate_limit["global"]["rules"]);
    if rules.is_empty() || rules.len() > MAX_RULES {
        problems.push(format!(
            "rateLimit.global.rules: {} rules, 1 to {MAX_RULES}",
            rules.len()
        ));
    }
    for (index, rule) in rules.iter().enumerate() {
        let at = format!("rules[{index}]");
        let limit = &rule["limit"];
        match limit["requests"].as_u64() {
            Some(requests) if requests > 0 && requests <= u64::from(u32::MAX) => {}
            other => problems.push(format!("{at}.limit.requests {other:?}: 1 to {}", u32::MAX)),
        }
        let unit = limit["unit"].as_str().unwrap_or_default();
        if !UNITS.contains(&unit) {
            problems.push(format!("{at}.limit.unit {unit:?}: one of {UNITS:?}"));
        }
        let selectors = items(&rule["clientSelectors"]);
        if selectors.len() > MAX_CLIENT_SELECTORS {
            problems.push(format!(
                "{at}: more than {MAX_CLIENT_SELECTORS} clientSelectors"
            ));
        }
        for (number, selector) in selectors.iter().enumerate() {
            let at = format!("{at}.clientSelectors[{number}]");
            if ["headers", "methods", "path", "sourceCIDR", "queryParams"]
                .iter()
                .all(|field| selector[*field].is_null())
            {
                problems.push(format!("{at}: selects nothing"));
            }
            let headers = items(&selector["headers"]);
            if headers.len() > MAX_HEADERS {
                problems.push(format!("{at}: more than {MAX_HEADERS} headers"));
            }
            for header in &headers {
                let header_name = header["name"].as_str().unwrap_or_default();
                let kind = header["type"].as_str().unwrap_or("Exact");
                let well_formed = (1..=MAX_HEADER_NAME).contains(&header_name.len())
                    && HEADER_MATCH_TYPES.contains(&kind)
                    && if kind == "Distinct" {
                        // "Do not set this field when Type=Distinct" (value and invert).
                        header["value"].is_null() && header["invert"].is_null()
                    } else {
                        header["value"].is_string()
                    };
                if !well_formed {
                    problems.push(format!("{at}: header match {header:?}"));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "BackendTrafficPolicy {name}:\n  {}",
        problems.join("\n  ")
    );
}

/// The third cell of each row of the guide's table whose first cell is a variable.
fn guide_variables(guide: &str) -> BTreeMap<String, String> {
    guide
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let is_variable = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
            let cell = cells.get(3)?;
            is_variable.then(|| (name.to_owned(), (*cell).to_owned()))
        })
        .collect()
}

#[test]
fn the_guide_lists_every_variable_envoy_gateway_sets_as_floodgate_treats_it() {
    let guide = read(GUIDE);
    assert!(
        guide.contains(&ENVOY_GATEWAY_COMMIT[..7]),
        "{GUIDE} must name the envoyproxy/gateway commit it was written from ({})",
        &ENVOY_GATEWAY_COMMIT[..7]
    );
    let rows = guide_variables(&guide);
    let listed: BTreeSet<&str> = rows.keys().map(String::as_str).collect();
    let rendered: BTreeSet<&str> = RENDERED_VARIABLES.iter().copied().collect();
    assert_eq!(
        listed, rendered,
        "{GUIDE}'s table must list exactly the variables Envoy Gateway renders"
    );
    let table: BTreeMap<&str, Treatment> = REFERENCE_VARIABLES.iter().copied().collect();
    let serve_help = help("serve");
    let mut problems = Vec::new();
    for (name, cell) in &rows {
        let expected = match table.get(name.as_str()) {
            Some(Treatment::Honoured) => "honoured",
            Some(Treatment::NotSupported(_)) => "not supported (logged at start)",
            Some(Treatment::NotSupportedWhenOn(_)) => "not supported (logged at start when on)",
            // Set by Envoy Gateway, read by neither: named in the binary only to be said so.
            None if NOT_READ_BY_THE_REFERENCE
                .iter()
                .any(|(ignored, _)| ignored == name) =>
            {
                "not read"
            }
            // Not one of the reference's own settings.
            None if floodgate_reads(&serve_help, name) => "honoured",
            None => "not read",
        };
        let agrees = cell.starts_with(expected)
            && !(expected == "not supported (logged at start)" && cell.contains("when on"));
        if !agrees {
            problems.push(format!(
                "{name}: the guide says {cell:?}, the code: {expected}"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{GUIDE} (\"What stays the same\") disagrees with src/cmd/reference_env.rs and the binary:\n  {}",
        problems.join("\n  ")
    );
}
