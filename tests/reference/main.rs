//! envoyproxy/ratelimit's own test suite, ported case by case as behaviour
//! (docs/reference-suite.md lists every case and where it is held).

mod cache_suite;
mod calendar_suite;
mod config_suite;
mod harness;
mod integration_suite;
mod metadata_suite;
mod readme_suite;
mod scripts_suite;
mod server_suite;
mod service_suite;
mod serving;
