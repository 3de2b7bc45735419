//! The reference's `TestBasicReloadConfig`: with `RUNTIME_WATCH_ROOT=false` the basic sequence
//! holds (`BasicWithoutWatchRoot`), and a file copied into the runtime's config directory is
//! loaded without a restart, its limits applied, and its removal loads again
//! (`ReloadWithoutWatchRoot`). The reference waits for its `config_load_success` stat to grow;
//! floodgate's is `floodgate_config_load_success_total`.

use std::time::{Duration, Instant};

use floodgate::proto::rate_limit_response::rate_limit::Unit;
use floodgate::proto::rate_limit_response::Code;
use floodgate_testkit::redis::RedisServer;

use super::basic_sequence::Keys;
use super::redis_setups::{address, owned, run_rows, Row};
use crate::harness::{
    assert_response, call, limited, request, start, Entry, Reference, RuntimeTree, NO_LIMIT,
};

/// The reference waits up to 120 s; floodgate reloads within a second (docs/operations.md).
const RELOAD_TIMEOUT: Duration = Duration::from_secs(30);

fn loads(server: &Reference) -> f64 {
    server
        .metrics()
        .value("floodgate_config_load_success_total", &[])
}

/// The reference's `waitForConfigReload`: the count of successful loads once it passed `before`.
fn wait_for_reload(server: &Reference, before: f64, what: &str) -> f64 {
    let deadline = Instant::now() + RELOAD_TIMEOUT;
    loop {
        let now = loads(server);
        if now > before {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no reload within {RELOAD_TIMEOUT:?}\n{}",
            server.process.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_reload_config() {
    let redis = RedisServer::start();
    let env = owned(&[
        ("REDIS_URL", &address(redis.port())),
        ("RUNTIME_WATCH_ROOT", "false"),
    ]);
    let basic = Row {
        name: "BasicWithoutWatchRoot".to_owned(),
        entry: Entry::Ratelimit,
        keys: Keys::Plain,
        env: env.clone(),
        ignored: Vec::new(),
        refused: None,
    };
    run_rows("TestBasicReloadConfig", &[basic]).await;

    let context = "TestBasicReloadConfig/ReloadWithoutWatchRoot";
    let tree = RuntimeTree::integration(&["basic.yaml", "another.yaml"]);
    let env: Vec<(&str, &str)> = env
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let server = start(Entry::Serve, &tree, "ReloadWithoutWatchRoot", &env);
    let mut client = server.client().await;
    let block = || request("reload", &[&[("block", "foo")]], 1);
    let key1 = || request("reload", &[&[("key1", "foo")]], 1);

    // Domain `reload` is not configured yet.
    let response = call(&mut client, block()).await;
    assert_response(&response, Code::Ok, &[NO_LIMIT], context);

    let before = loads(&server);
    // The reference copies the file in place; a copy can be read half-written (an empty file is
    // a configuration without the domain, and loads), so the copy is made beside the config
    // directory and renamed into it, as an editor or `mv` does.
    let copied = tree.config_dir().join("reload.yaml");
    let staged = tree.subdirectory().join("reload.yaml.copy");
    std::fs::copy(tree.subdirectory().join("reload.yaml"), &staged)
        .unwrap_or_else(|error| panic!("copy reload.yaml: {error}"));
    std::fs::rename(&staged, &copied).unwrap_or_else(|error| panic!("rename: {error}"));
    let after = wait_for_reload(&server, before, "reload.yaml copied in");
    let response = call(&mut client, key1()).await;
    assert_response(
        &response,
        Code::Ok,
        &[limited(Code::Ok, 50, Unit::Second, 49)],
        context,
    );

    // Removing the file must reload too, and the domain is gone with it.
    std::fs::remove_file(&copied).unwrap_or_else(|error| panic!("remove reload.yaml: {error}"));
    wait_for_reload(&server, after, "reload.yaml removed");
    let response = call(&mut client, key1()).await;
    assert_response(&response, Code::Ok, &[NO_LIMIT], context);
}
