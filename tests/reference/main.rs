//! envoyproxy/ratelimit's own test suite, ported case by case as behaviour
//! (docs/reference-suite.md lists every case and where it is held).

mod cache_suite;
