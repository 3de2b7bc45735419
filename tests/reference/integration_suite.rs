//! envoyproxy/ratelimit's `test/integration/integration_test.go` and `mtls_test.go`, ported as
//! behaviour: the real floodgate binary, started from the reference's environment (as
//! `floodgate serve` and as `ratelimit`), over gRPC, against the memory store and real
//! redis-server processes (one, with a password, over TLS, behind a Sentinel, as a Cluster),
//! with the reference's runtime tree of `tests/reference/fixtures/integration/`. One file per
//! concern; docs/reference-suite.md maps every Go test and row to its test here.

mod basic_sequence;
mod grpc_tls;
mod redis_setups;
mod reload;
mod settings;
mod share_threshold;
