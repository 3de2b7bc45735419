//! floodgate as an authorization check behind real proxies, the client seeing 429 with
//! `Retry-After` once over the limit:
//! * Envoy 1.40 with the filters Istio renders for an `envoyExtAuthzGrpc` provider and an
//!   `AuthorizationPolicy` of action CUSTOM (Istio's builder testdata
//!   `custom-grpc-provider-out1.yaml`/`-out2.yaml`): a shadow RBAC filter whose DENY rules mark
//!   the requests the policy covers (`istio_ext_authz_shadow_effective_policy_id`), then ext_authz
//!   over gRPC, enabled only for those;
//! * Envoy's HTTP ext_authz (`/authz/<profile>` + the original path);
//! * Caddy 2.6's `forward_auth` (`X-Forwarded-Uri`).

use floodgate_testkit::caddy::Caddy;
use floodgate_testkit::envoy::Envoy;
use floodgate_testkit::http::{get, HttpResponse};
use floodgate_testkit::{free_port, tempdir, Floodgate};

/// 3 per hour per client address under `/api/`, whoever asks.
const RULES: &str = r#"
domain: mesh
descriptors:
  - key: source
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: token_bucket, name: per_source}
check_profiles:
  default:
    descriptors:
      - entries:
          - {key: source, header: ":source-address"}
"#;

/// What Istio renders (names as Istio makes them: the policy `floodgate-ratelimit` in namespace
/// `shop`, the provider's service `floodgate.floodgate.svc.cluster.local:8081`), on a listener
/// `EDGE` that routes to a direct 200 on `DIRECT`; floodgate's gRPC port is `FLOODGATE`. The
/// provider's `timeout` is 0.5 s (Istio's example 2 ms is for a service on the same node; a
/// debug build under test needs more), `failOpen: false`, `includeRequestBodyInCheck` 4 KiB.
const ISTIO_BOOTSTRAP: &str = r#"
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: ADMIN}}
static_resources:
  listeners:
  - name: edge
    address: {socket_address: {address: 127.0.0.1, port_value: EDGE}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: edge
          route_config:
            virtual_hosts:
            - name: shop
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route: {cluster: direct}
          http_filters:
          - name: envoy.filters.http.rbac
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC
              shadowRules:
                action: DENY
                policies:
                  istio-ext-authz-ns[shop]-policy[floodgate-ratelimit]-rule[0]:
                    permissions:
                    - andRules:
                        rules:
                        - orRules:
                            rules:
                            - urlPath:
                                path:
                                  prefix: /api/
                    principals:
                    - andIds:
                        ids:
                        - any: true
              shadowRulesStatPrefix: istio_ext_authz_
          - name: envoy.filters.http.ext_authz
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
              clearRouteCache: true
              failureModeAllow: false
              filterEnabledMetadata:
                filter: envoy.filters.http.rbac
                path:
                - key: istio_ext_authz_shadow_effective_policy_id
                value:
                  stringMatch:
                    prefix: istio-ext-authz
              grpcService:
                envoyGrpc:
                  authority: outbound_.8081_._.floodgate.floodgate.svc.cluster.local
                  clusterName: outbound|8081||floodgate.floodgate.svc.cluster.local
                timeout: 0.5s
              statusOnError:
                code: Forbidden
              transportApiVersion: V3
              withRequestBody:
                allowPartialMessage: true
                maxRequestBytes: 4096
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  - name: direct
    address: {socket_address: {address: 127.0.0.1, port_value: DIRECT}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: direct
          route_config:
            virtual_hosts:
            - name: direct
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                direct_response: {status: 200, body: {inline_string: "ok\n"}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: outbound|8081||floodgate.floodgate.svc.cluster.local
    type: STATIC
    connect_timeout: 0.25s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: floodgate
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: FLOODGATE}}}
  - name: direct
    type: STATIC
    connect_timeout: 0.25s
    load_assignment:
      cluster_name: direct
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: DIRECT}}}
"#;

/// `ISTIO_BOOTSTRAP` with its ext_authz filter calling over HTTP instead (`envoyExtAuthzHttp`
/// renders the same shape): `/authz/default` + the original path, on floodgate's HTTP port.
/// The client's address travels in `X-Forwarded-For`, which Envoy sets with
/// `use_remote_address` and sends when allowed; the rate-limit headers of an allowed request
/// are passed on to the client.
const HTTP_EXT_AUTHZ: &str = r#"              httpService:
                serverUri:
                  uri: http://floodgate/
                  cluster: outbound|8081||floodgate.floodgate.svc.cluster.local
                  timeout: 0.5s
                pathPrefix: /authz/default
                authorizationRequest:
                  allowedHeaders:
                    patterns:
                    - {exact: x-forwarded-for}
                authorizationResponse:
                  allowedClientHeadersOnSuccess:
                    patterns:
                    - {prefix: ratelimit, ignore_case: true}
                    - {prefix: x-ratelimit, ignore_case: true}
"#;

struct Mesh {
    envoy: Envoy,
    floodgate: Floodgate,
    _dir: tempfile::TempDir,
}

/// floodgate and Envoy on `bootstrap`, the ext_authz cluster pointed at floodgate's gRPC port
/// (`over_http`: its HTTP port, over HTTP/1).
fn start_mesh(bootstrap: &str, over_http: bool) -> Mesh {
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(dir.path(), "mesh.yaml", RULES, &[]);
    let (edge, direct, admin) = (free_port(), free_port(), free_port());
    let target = if over_http {
        floodgate.http_port
    } else {
        floodgate.grpc_port
    };
    let bootstrap = bootstrap
        .replace("port_value: ADMIN", &format!("port_value: {admin}"))
        .replace("port_value: EDGE", &format!("port_value: {edge}"))
        .replace("port_value: DIRECT", &format!("port_value: {direct}"))
        .replace("port_value: FLOODGATE", &format!("port_value: {target}"));
    let envoy = Envoy::start(&bootstrap, "envoy.yaml", dir.path(), &[edge, direct]);
    Mesh {
        envoy,
        floodgate,
        _dir: dir,
    }
}

fn call(port: u16, path: &str) -> HttpResponse {
    get(port, path, &[]).unwrap_or_else(|error| panic!("GET {path} failed: {error}"))
}

/// Three 200s with the remaining count falling, then a 429 with Retry-After (one token back
/// every 1200 s) and the rate-limit headers; `with_headers_on_success`: the 200s carry them too.
fn assert_three_then_429(port: u16, floodgate: &Floodgate, with_headers_on_success: bool) {
    for remaining in ["2", "1", "0"] {
        let allowed = call(port, "/api/orders");
        assert_eq!(
            allowed.status,
            200,
            "{allowed:?}\nfloodgate log:\n{}",
            floodgate.process.log_text()
        );
        if with_headers_on_success {
            assert_eq!(
                allowed.header("x-ratelimit-remaining"),
                Some(remaining),
                "{allowed:?}"
            );
            assert_eq!(
                allowed.header("ratelimit-policy"),
                Some("\"per_source\";q=3;w=3600")
            );
        }
    }
    let denied = call(port, "/api/orders");
    assert_eq!(denied.status, 429, "{denied:?}");
    assert_eq!(denied.header("retry-after"), Some("1200"), "{denied:?}");
    assert_eq!(
        denied.header("x-ratelimit-remaining"),
        Some("0"),
        "{denied:?}"
    );
    assert!(
        denied
            .header("ratelimit")
            .is_some_and(|value| value.starts_with("\"per_source\";r=0;t=")),
        "{denied:?}"
    );
    assert_eq!(denied.body, "Too Many Requests\n");
}

#[test]
fn istio_custom_authorization_over_grpc_gives_429_with_retry_after() {
    let mesh = start_mesh(ISTIO_BOOTSTRAP, false);
    assert_three_then_429(mesh.envoy.port, &mesh.floodgate, true);
    // Outside the policy's paths the shadow rule does not match: ext_authz never runs.
    let elsewhere = call(mesh.envoy.port, "/health");
    assert_eq!(elsewhere.status, 200, "{elsewhere:?}");
    assert_eq!(
        elsewhere.header("x-ratelimit-remaining"),
        None,
        "{elsewhere:?}"
    );
}

#[test]
fn istio_custom_authorization_fails_closed_with_forbidden_when_floodgate_errs() {
    // floodgate gone: the check fails, and with `failOpen: false` Envoy answers
    // `status_on_error`.
    let mesh = start_mesh(ISTIO_BOOTSTRAP, false);
    let Mesh {
        envoy, floodgate, ..
    } = mesh;
    drop(floodgate);
    let refused = call(envoy.port, "/api/orders");
    assert_eq!(refused.status, 403, "{refused:?}");
}

#[test]
fn envoy_http_ext_authz_gives_429_with_retry_after() {
    let start = ISTIO_BOOTSTRAP
        .find("              grpcService:")
        .unwrap_or_else(|| panic!("no grpcService in the bootstrap"));
    let end = ISTIO_BOOTSTRAP
        .find("              statusOnError:")
        .unwrap_or_else(|| panic!("no statusOnError in the bootstrap"));
    let bootstrap = format!(
        "{}{HTTP_EXT_AUTHZ}{}",
        &ISTIO_BOOTSTRAP[..start],
        &ISTIO_BOOTSTRAP[end..]
    )
    .replace(
        "        explicit_http_config: {http2_protocol_options: {}}",
        "        explicit_http_config: {http_protocol_options: {}}",
    )
    .replace(
        "          stat_prefix: edge\n",
        "          stat_prefix: edge\n          use_remote_address: true\n",
    );
    let mesh = start_mesh(&bootstrap, true);
    assert_three_then_429(mesh.envoy.port, &mesh.floodgate, true);
}

#[test]
fn caddy_forward_auth_gives_429_with_retry_after() {
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(dir.path(), "mesh.yaml", RULES, &[]);
    let port = free_port();
    let caddyfile = format!(
        "{{\n\tadmin off\n\tauto_https off\n}}\n\
         http://127.0.0.1:{port} {{\n\
         \troute {{\n\
         \t\tforward_auth 127.0.0.1:{http} {{\n\
         \t\t\turi /authz/default\n\
         \t\t}}\n\
         \t\trespond \"ok\" 200\n\
         \t}}\n}}\n",
        http = floodgate.http_port
    );
    let caddy = Caddy::start(&caddyfile, dir.path(), port);
    // Caddy passes an allowed check's headers to the upstream, not to the client: only the
    // refusal shows them.
    assert_three_then_429(caddy.port, &floodgate, false);
}
