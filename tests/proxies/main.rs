//! floodgate behind real proxies: Envoy 1.40 end to end, logging floodgate's dynamic metadata
//! and on the money path, nginx auth_request and limit_req parity.

mod envoy_dynamic_metadata;
mod envoy_e2e;
mod money_path_envoy;
mod nginx_auth_request;
mod nginx_limit_req_parity;
