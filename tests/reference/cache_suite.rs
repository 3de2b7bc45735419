//! envoyproxy/ratelimit's cache tests, `test/redis/fixed_cache_impl_test.go` and
//! `test/limiter/base_limiter_test.go`, ported as behaviour: each Go test drives the
//! reference's cache (`DoLimit`) with a mocked clock and mocked Redis replies; each port drives
//! floodgate's limiter over the memory store and over a real `redis-server` with a manual clock
//! at the same instants, brings each counter to the count the mock replied, and checks the same
//! statuses and, where floodgate has a metric for it, the same stats.
//!
//! The reference charges every descriptor whatever the verdict
//! (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false`); a port runs in that mode
//! (`--charge every-descriptor`) where the Go test needs a count past the limit, and in
//! floodgate's default (all or nothing) where the answer is the same either way.
//! `docs/reference-suite.md` lists every Go test with its port and result.

mod base_limiter;
mod fixed_cache_impl;
mod harness;
