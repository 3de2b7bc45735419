//! One test per target: each corpus file is replayed in turn, and a panic (the target found
//! floodgate doing what it must not) fails the test with the file's name.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use floodgate_fuzz::redis_lua::Harness;
use floodgate_testkit::redis::RedisServer;

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", dir.display()))
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} is empty", dir.display());
    files
}

/// Runs `run` on every file of `target`'s corpus; the files that made it panic, named.
fn replay(target: &str, run: impl Fn(&[u8])) {
    let mut failed = Vec::new();
    let files = corpus(target);
    for path in &files {
        let data = std::fs::read(path)
            .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
        if catch_unwind(AssertUnwindSafe(|| run(&data))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} {target} inputs failed (the panics are above):\n{}",
        failed.len(),
        files.len(),
        failed.join("\n")
    );
}

#[test]
fn every_target_has_a_corpus() {
    for target in floodgate_fuzz::TARGETS {
        corpus(target);
    }
}

#[test]
fn config_loader_corpus() {
    replay("config_loader", floodgate_fuzz::config_loader::run);
}

#[test]
fn grpc_request_corpus() {
    replay("grpc_request", floodgate_fuzz::grpc_request::run);
}

#[test]
fn http_endpoints_corpus() {
    replay("http_endpoints", floodgate_fuzz::http_endpoints::run);
}

#[test]
fn admin_api_corpus() {
    replay("admin_api", floodgate_fuzz::admin_api::run);
}

#[test]
fn algorithms_corpus() {
    replay("algorithms", floodgate_fuzz::algorithms::run);
}

#[test]
fn redis_lua_corpus() {
    let server = RedisServer::start();
    let harness = Harness::connect(&server.url());
    replay("redis_lua", |data| harness.run(data));
}
