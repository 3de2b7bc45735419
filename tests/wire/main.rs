//! The wire protocols: gRPC ShouldRateLimit and ext_authz, the HTTP JSON, /check and /authz endpoints, TLS, hostile
//! clients and the worker threads that serve them.

mod ext_authz;
mod grpc_api;
mod grpc_leases;
mod hostile_clients;
mod http_check;
mod http_json;
mod http_leases;
mod http_shedding;
mod kuadrant;
mod kuadrant_wire;
mod limitador_http;
mod queue;
mod tls_client_san;
mod tls_grpc;
mod worker_threads;
