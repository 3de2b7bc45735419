//! Rate limits as an authorization check, for proxies that ask before each request rather than
//! speak RLS: Envoy's ext_authz over gRPC ([`grpc`], and Istio's CUSTOM authorization) and over
//! HTTP, Caddy's `forward_auth`, Traefik's `forwardAuth` (the HTTP form is served by
//! `server::http::forward_auth`). Both read the request's attributes ([`attributes`]), choose a
//! check profile and build its descriptors ([`plan`]), ask the limiter, and answer 429 with the
//! rate-limit headers when over ([`answer`]).

pub(crate) mod answer;
pub(crate) mod attributes;
mod convert;
pub(crate) mod grpc;
pub(crate) mod plan;
