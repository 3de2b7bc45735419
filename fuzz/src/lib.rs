//! floodgate's fuzz targets. Each is a plain function from bytes to nothing that panics when
//! floodgate does something it must not (panics itself, or breaks an invariant the target
//! checks); `src/bin/<target>.rs` hands it to AFL++ (`scripts/fuzz.sh`), and the main
//! workspace's `tests/fuzz_corpus` replays every file of `corpus/<target>/` through the same
//! function as an ordinary test.
//!
//! | target | input | what must hold |
//! |---|---|---|
//! | `config_loader` | YAML files | rules or typed errors that name a given file |
//! | `grpc_request` | a `RateLimitRequest` in protobuf | a decision, INVALID_ARGUMENT, or INTERNAL for bytes that are no message |
//! | `http_endpoints` | `/json` bodies, `/check` headers | 200/429/400 (`/json`), 200/403/400/404 (`/check`) |
//! | `admin_api` | admin API requests | 2xx or 4xx with a JSON body, never 5xx |
//! | `algorithms` | quotas, clocks, hits | the verdict invariants and the bounds on admitted hits |
//! | `redis_lua` | counters, hits, clocks | the Redis store's Lua decides as the memory store |

mod input;
mod service;

pub mod admin_api;
pub mod algorithms;
pub mod config_loader;
pub mod grpc_request;
pub mod http_endpoints;
pub mod redis_lua;

/// Every target, by the name of its corpus directory and its AFL++ binary.
pub const TARGETS: [&str; 6] = [
    "config_loader",
    "grpc_request",
    "http_endpoints",
    "admin_api",
    "algorithms",
    "redis_lua",
];
