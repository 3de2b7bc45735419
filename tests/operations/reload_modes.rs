//! What triggers a reload (a renamed file, SIGHUP, envoyproxy/ratelimit's RUNTIME_WATCH_ROOT
//! modes, a ConfigMap app directory) and what a reload keeps (counters of unchanged rules).

use std::path::Path;
use std::time::Duration;

use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate::proto::RateLimitResponse;
use floodgate_testkit::ops::{self, descriptor, limit_of, request, ConfigMapDir, Server};

/// Within a second by contract; the extra is for a busy test machine.
const LIVE_WITHIN: Duration = Duration::from_secs(3);

fn rules(domain: &str, name: &str) -> String {
    format!(
        "domain: {domain}\n\
         descriptors:\n\
         \x20 - key: probe\n\
         \x20   rate_limit: {{unit: hour, requests_per_unit: 100, name: {name}}}\n"
    )
}

fn call(server: &Server, domain: &str, key: &str, hits: Option<u64>) -> RateLimitResponse {
    let runtime = ops::runtime();
    runtime.block_on(async {
        let mut client = RateLimitServiceClient::connect(server.grpc_url())
            .await
            .unwrap_or_else(|error| panic!("connect: {error}"));
        client
            .should_rate_limit(request(domain, vec![descriptor(&[(key, "x")], hits)]))
            .await
            .unwrap_or_else(|status| panic!("call failed: {status:?}"))
            .into_inner()
    })
}

/// The name of the rule that answers `probe` in `domain` now (check only, nothing charged).
fn probe_name(server: &Server, domain: &str) -> Option<String> {
    let response = call(server, domain, "probe", Some(0));
    response
        .statuses
        .first()
        .and_then(limit_of)
        .map(|(name, _)| name)
}

fn wait_for_name(server: &Server, domain: &str, name: &str) {
    ops::wait_for(LIVE_WITHIN, &format!("rule {name} live"), || {
        probe_name(server, domain).as_deref() == Some(name)
    });
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"))
}

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|error| panic!("mkdir: {error}"));
    }
    std::fs::write(path, text).unwrap_or_else(|error| panic!("write {}: {error}", path.display()));
}

#[test]
fn counters_of_unchanged_rules_survive_a_reload() {
    let temp = temp_dir();
    let file = temp.path().join("rules.yaml");
    let version = |other_limit: u32, kept_limit: u32| {
        format!(
            "domain: keep\n\
             descriptors:\n\
             \x20 - key: kept\n\
             \x20   rate_limit: {{unit: hour, requests_per_unit: {kept_limit}}}\n\
             \x20 - key: other\n\
             \x20   rate_limit: {{unit: hour, requests_per_unit: {other_limit}}}\n"
        )
    };
    write(&file, &version(1, 5));
    let server = ops::start(&["--config", &file.display().to_string()], &[], temp.path());
    for expected_remaining in [4, 3, 2] {
        let response = call(&server, "keep", "kept", None);
        assert_eq!(response.statuses[0].limit_remaining, expected_remaining);
    }
    // Another rule changes: `kept` goes on counting where it was.
    ops::write_atomically(&file, version(7, 5).as_bytes());
    ops::wait_for(LIVE_WITHIN, "version 2", || {
        ops::reload_headers(server.debug_port).is_some_and(|(version, _)| version == 2)
    });
    assert_eq!(
        call(&server, "keep", "kept", None).statuses[0].limit_remaining,
        1
    );
    // Its own limit changes: the count stays (4 used, 5 with this call), the limit is new.
    ops::write_atomically(&file, version(7, 10).as_bytes());
    ops::wait_for(LIVE_WITHIN, "version 3", || {
        ops::reload_headers(server.debug_port).is_some_and(|(version, _)| version == 3)
    });
    assert_eq!(
        call(&server, "keep", "kept", None).statuses[0].limit_remaining,
        5
    );
}

#[test]
fn sighup_reloads_even_unchanged_files_and_a_rename_reloads() {
    let temp = temp_dir();
    let file = temp.path().join("rules.yaml");
    write(&file, &rules("hup", "first"));
    let server = ops::start(&["--config", &file.display().to_string()], &[], temp.path());
    server.send_signal("HUP");
    ops::wait_for(LIVE_WITHIN, "SIGHUP reload", || {
        ops::reload_headers(server.debug_port) == Some((2, 0))
    });
    assert!(server.process.log_text().contains("SIGHUP"));
    // An editor's save: a new file renamed over the old one.
    ops::write_atomically(&file, rules("hup", "second").as_bytes());
    wait_for_name(&server, "hup", "second");
    // Still running after SIGHUP.
    assert_eq!(probe_name(&server, "hup").as_deref(), Some("second"));
}

#[test]
fn runtime_watch_root_reloads_when_the_root_symlink_is_swapped() {
    let temp = temp_dir();
    let data = temp.path().join("runtime_data");
    write(
        &data.join("v1/ratelimit/config/rules.yaml"),
        &rules("rt", "v1"),
    );
    let current = data.join("current");
    ops::swap_symlink(&data.join("v1"), &current);
    let root = current.display().to_string();
    let server = ops::start(
        &[],
        &[
            ("RUNTIME_ROOT", root.as_str()),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_WATCH_ROOT", "true"),
        ],
        temp.path(),
    );
    assert_eq!(probe_name(&server, "rt").as_deref(), Some("v1"));
    write(
        &data.join("v2/ratelimit/config/nested/rules.yaml"),
        &rules("rt", "v2"),
    );
    ops::swap_symlink(&data.join("v2"), &current);
    wait_for_name(&server, "rt", "v2");
    // The app directory is watched where the root points now: an edit there reloads too (the
    // reference only reacts to the swap).
    ops::write_atomically(
        &data.join("v2/ratelimit/config/nested/rules.yaml"),
        rules("rt", "v2_edited").as_bytes(),
    );
    wait_for_name(&server, "rt", "v2_edited");
}

#[test]
fn runtime_directory_mode_reloads_a_configmap_app_directory() {
    let temp = temp_dir();
    let root = temp.path().join("srv");
    let mut configmap = ConfigMapDir::new(&root.join("ratelimit/config"));
    configmap.publish(&[("rules.yaml", &rules("cm", "one"))]);
    let root_text = root.display().to_string();
    let server = ops::start(
        &[],
        &[
            ("RUNTIME_ROOT", root_text.as_str()),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("RUNTIME_WATCH_ROOT", "false"),
            ("RUNTIME_IGNOREDOTFILES", "true"),
        ],
        temp.path(),
    );
    assert_eq!(probe_name(&server, "cm").as_deref(), Some("one"));
    configmap.publish(&[("rules.yaml", &rules("cm", "two"))]);
    wait_for_name(&server, "cm", "two");
    // A second domain appears in the ConfigMap.
    configmap.publish(&[
        ("rules.yaml", &rules("cm", "two")),
        ("more.yaml", &rules("cm2", "three")),
    ]);
    wait_for_name(&server, "cm2", "three");
    // ...and goes away again.
    configmap.publish(&[("rules.yaml", &rules("cm", "four"))]);
    wait_for_name(&server, "cm", "four");
    assert_eq!(probe_name(&server, "cm2"), None);
    let log = server.process.log_text();
    assert!(!log.contains("reload failed"), "{log}");
}
