//! floodgate behind real proxies: Envoy 1.40 end to end, logging floodgate's dynamic metadata
//! and on the money path, charging usage after the response, AI Gateway's token budgets as
//! Envoy Gateway renders them; floodgate as Istio's CUSTOM authorization, Envoy's HTTP ext_authz
//! and Caddy's forward_auth; nginx auth_request and limit_req parity.

mod ai_gateway_token_budgets;
mod envoy_concurrency;
mod envoy_concurrency_headers;
mod envoy_dynamic_metadata;
mod envoy_e2e;
mod envoy_ext_authz;
mod envoy_limitador;
mod envoy_queue;
mod envoy_usage_after_response;
mod money_path_envoy;
mod nginx_auth_request;
mod nginx_limit_req_parity;
mod nginx_limit_req_queue;
