//! The wire protocols: gRPC ShouldRateLimit, the HTTP JSON and /check endpoints, TLS, hostile
//! clients and the worker threads that serve them.

mod grpc_api;
mod grpc_leases;
mod hostile_clients;
mod http_check;
mod http_json;
mod http_leases;
mod http_shedding;
mod in_process;
mod queue;
mod tls_client_san;
mod tls_grpc;
mod worker_threads;
