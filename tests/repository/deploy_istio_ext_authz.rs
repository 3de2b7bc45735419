//! `deploy/kubernetes/overlays/istio-ext-authz` against Istio's API and the real binary: the
//! AuthorizationPolicy is of action CUSTOM and names a provider that `mesh-config.yaml` declares,
//! at the overlay's floodgate Service and its gRPC port; every key of both is a field of Istio's
//! API; and floodgate, on the overlay's rules, answers the checks the policy sends.
//!
//! Istio's source is not read here (CI runs on a clean clone): the fields below are those of
//! istio/api at [`ISTIO_API_COMMIT`] (`security/v1beta1/authorization.proto`,
//! `type/v1beta1/selector.proto`, `mesh/v1alpha1/config.proto`). Re-read them there when
//! Istio's API moves.

use std::collections::HashMap;

use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::{Address, SocketAddress};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Peer, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, CheckRequest};
use floodgate_testkit::{runtime, tempdir, Floodgate};
use serde_yaml::Value;

use crate::deploy_manifests::{find, read, render, service_ports};
use crate::deploy_under_envoy_gateway::unknown_keys;

/// The istio/api commit (2025) the fields below were read from.
const ISTIO_API_COMMIT: &str = "0040fb30e9c09ad32d76fe59e3bdbb3da7f0aabb";

const OVERLAY: &str = "istio-ext-authz";
const MESH_CONFIG: &str = "deploy/kubernetes/overlays/istio-ext-authz/mesh-config.yaml";

/// AuthorizationPolicy: its spec (selector, targetRef(s), rules with from/to/when, action,
/// provider), with the Kubernetes object's own keys.
const AUTHORIZATION_POLICY_KEYS: &[&str] = &[
    "{apiVersion,kind}",
    "metadata.{name,namespace}",
    "metadata.{labels,annotations}.*",
    "spec.selector.matchLabels.*",
    "spec.{targetRef,targetRefs}.**",
    "spec.action",
    "spec.provider.name",
    "spec.rules[].from[].source.{principals,notPrincipals,requestPrincipals,notRequestPrincipals}[]",
    "spec.rules[].from[].source.{namespaces,notNamespaces,serviceAccounts,notServiceAccounts}[]",
    "spec.rules[].from[].source.{ipBlocks,notIpBlocks,remoteIpBlocks,notRemoteIpBlocks}[]",
    "spec.rules[].to[].operation.{hosts,notHosts,ports,notPorts,methods,notMethods,paths,notPaths}[]",
    "spec.rules[].when[].{key,values,notValues}",
];

/// MeshConfig's extension providers of the ext_authz kinds (EnvoyExternalAuthorizationGrpcProvider
/// and EnvoyExternalAuthorizationHttpProvider).
const MESH_CONFIG_KEYS: &[&str] = &[
    "meshConfig.extensionProviders[].name",
    "meshConfig.extensionProviders[].envoyExtAuthzGrpc.{service,port,timeout,failOpen,statusOnError}",
    "meshConfig.extensionProviders[].{envoyExtAuthzGrpc,envoyExtAuthzHttp}.includeRequestBodyInCheck.{maxRequestBytes,allowPartialMessage,packAsBytes}",
    "meshConfig.extensionProviders[].envoyExtAuthzHttp.{service,port,timeout,pathPrefix,failOpen,statusOnError}",
    "meshConfig.extensionProviders[].envoyExtAuthzHttp.{includeRequestHeadersInCheck,headersToUpstreamOnAllow,headersToDownstreamOnDeny,headersToDownstreamOnAllow}[]",
    "meshConfig.extensionProviders[].envoyExtAuthzHttp.includeAdditionalHeadersInCheck.*",
];

fn policy(documents: &[Value]) -> &Value {
    find(documents, "AuthorizationPolicy", "floodgate-ratelimit")
        .unwrap_or_else(|| panic!("{OVERLAY}: no AuthorizationPolicy floodgate-ratelimit"))
}

fn mesh_config() -> Value {
    serde_yaml::from_str(&read(MESH_CONFIG))
        .unwrap_or_else(|error| panic!("{MESH_CONFIG} is not YAML: {error}"))
}

#[test]
fn the_policy_asks_a_declared_provider_at_floodgates_grpc_port() {
    let documents = render(OVERLAY);
    let policy = policy(&documents);
    assert_eq!(policy["apiVersion"].as_str(), Some("security.istio.io/v1"));
    assert_eq!(policy["spec"]["action"].as_str(), Some("CUSTOM"));
    let provider_name = policy["spec"]["provider"]["name"]
        .as_str()
        .unwrap_or_default();
    let config = mesh_config();
    let providers = config["meshConfig"]["extensionProviders"]
        .as_sequence()
        .unwrap_or_else(|| panic!("{MESH_CONFIG}: no meshConfig.extensionProviders"));
    let provider = providers
        .iter()
        .find(|provider| provider["name"].as_str() == Some(provider_name))
        .unwrap_or_else(|| panic!("{MESH_CONFIG} declares no provider {provider_name:?}"));
    let grpc = &provider["envoyExtAuthzGrpc"];
    let service = find(&documents, "Service", "floodgate")
        .unwrap_or_else(|| panic!("{OVERLAY}: no Service floodgate"));
    let namespace = service["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        grpc["service"].as_str(),
        Some(format!("floodgate.{namespace}.svc.cluster.local").as_str()),
        "{provider:?}"
    );
    let grpc_port = service["spec"]["ports"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|port| port["name"].as_str() == Some("grpc"))
        .and_then(|port| port["port"].as_u64());
    assert!(grpc_port.is_some_and(|port| service_ports(service).contains(&port.to_string())));
    assert_eq!(grpc["port"].as_u64(), grpc_port, "{provider:?}");
}

#[test]
fn every_key_is_a_field_of_istios_api() {
    let documents = render(OVERLAY);
    let unknown = unknown_keys(policy(&documents), &[], AUTHORIZATION_POLICY_KEYS);
    assert!(
        unknown.is_empty(),
        "AuthorizationPolicy keys Istio ({ISTIO_API_COMMIT}) does not have: {unknown:?}"
    );
    let unknown = unknown_keys(&mesh_config(), &[], MESH_CONFIG_KEYS);
    assert!(
        unknown.is_empty(),
        "{MESH_CONFIG} keys Istio ({ISTIO_API_COMMIT}) does not have: {unknown:?}"
    );
}

/// A check as Istio's sidecar sends it: the request and its peer.
fn sidecar_check(path: &str, headers: &[(&str, &str)]) -> CheckRequest {
    let headers: HashMap<String, String> = headers
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                address: Some(Address {
                    address: Some(AddressKind::SocketAddress(SocketAddress {
                        address: "10.1.2.3".to_owned(),
                        ..SocketAddress::default()
                    })),
                }),
                ..Peer::default()
            }),
            request: Some(Request {
                http: Some(HttpRequest {
                    method: "GET".to_owned(),
                    path: path.to_owned(),
                    host: "productpage:9080".to_owned(),
                    headers,
                    ..HttpRequest::default()
                }),
                ..Request::default()
            }),
            ..AttributeContext::default()
        }),
    }
}

#[test]
fn floodgate_on_the_overlays_rules_answers_the_policys_checks() {
    let documents = render(OVERLAY);
    let config_map = find(&documents, "ConfigMap", "floodgate-config")
        .unwrap_or_else(|| panic!("{OVERLAY}: no ConfigMap floodgate-config"));
    let dir = tempdir();
    let config = dir.path().join("config");
    std::fs::create_dir(&config).unwrap_or_else(|error| panic!("mkdir: {error}"));
    let files = config_map["data"].as_mapping().cloned().unwrap_or_default();
    assert!(
        files.contains_key("mesh.yaml"),
        "{OVERLAY}: the ConfigMap has no mesh.yaml"
    );
    for (name, text) in files {
        let (Some(name), Some(text)) = (name.as_str(), text.as_str()) else {
            panic!("{OVERLAY}: a ConfigMap entry that is not text");
        };
        std::fs::write(config.join(name), text).unwrap_or_else(|error| panic!("write: {error}"));
    }
    let floodgate = Floodgate::start(&config, &["--store", "memory"], dir.path());
    let policies = runtime().block_on(async {
        let mut client = AuthorizationClient::connect(floodgate.grpc_url())
            .await
            .unwrap_or_else(|error| panic!("connect: {error}"));
        let mut policies = Vec::new();
        for check in [
            sidecar_check("/productpage", &[]),
            sidecar_check("/api/v1/products", &[("x-api-key", "k1")]),
        ] {
            let answer = client
                .check(check)
                .await
                .unwrap_or_else(|status| panic!("{status:?}\n{}", floodgate.process.log_text()))
                .into_inner();
            let Some(HttpResponse::OkResponse(ok)) = answer.http_response else {
                panic!("not allowed: {answer:?}");
            };
            let limits: Vec<String> = ok
                .response_headers_to_add
                .iter()
                .filter_map(|option| option.header.as_ref())
                .filter(|header| header.key.eq_ignore_ascii_case("x-ratelimit-limit"))
                .map(|header| header.value.clone())
                .collect();
            policies.push(limits.join(" | "));
        }
        policies
    });
    // The default profile for the page, the `api` profile (by path_prefix) for the API.
    assert_eq!(policies[0], "10, 10;w=1;name=\"per_source\"");
    assert_eq!(
        policies[1],
        "10, 10;w=1;name=\"per_source\", 1000;w=3600;name=\"per_api_key\""
    );
}
