//! The status page on the debug port, against the real binary with `--heavy-hitters`:
//! `/status.json` shows a rule's admitted and refused hits and, on top, the key it refused
//! most (raw where the rule says so, hashed otherwise), the numbers move as hits arrive, and
//! `/status` renders the same in a real headless Chromium (Debian's `chromium`), which also
//! writes the screenshot `docs/status-page.png` when `FLOODGATE_STATUS_SCREENSHOT` is set;
//! kept open there, the page shows new hits within 2 s by itself; a banning rule lists the
//! values it bans.

use std::path::Path;
use std::time::{Duration, Instant};

use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate_testkit as common;
use floodgate_testkit::chromium::{self, OpenPage};
use floodgate_testkit::http;
use floodgate_testkit::ops::{self, descriptor, request, Server};
use floodgate_testkit::status::{rule, status_json};
use serde_json::Value;

const RULES: &str = "domain: shop\n\
                     descriptors:\n\
                     \x20 - key: remote_address\n\
                     \x20   rate_limit: {unit: minute, requests_per_unit: 5}\n\
                     \x20   heavy_hitters: raw\n\
                     \x20 - key: api_key\n\
                     \x20   rate_limit: {unit: minute, requests_per_unit: 100}\n\
                     \x20 - key: user\n\
                     \x20   rate_limit: {unit: hour, requests_per_unit: 2}\n\
                     \x20   ban: {after: 2, within: 1m, for: 5m, max: 1h}\n\
                     \x20   heavy_hitters: raw\n";

fn start(dir: &Path) -> Server {
    let config = dir.join("rules.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write: {error}"));
    let config = config.display().to_string();
    ops::start(&["--config", &config, "--heavy-hitters"], &[], dir)
}

/// `calls` calls of one hit with descriptor `key=value`.
fn hit(server: &Server, key: &str, value: &str, calls: usize) {
    ops::runtime().block_on(async {
        let mut client = RateLimitServiceClient::connect(server.grpc_url())
            .await
            .unwrap_or_else(|error| panic!("connect: {error}"));
        for _ in 0..calls {
            client
                .should_rate_limit(request("shop", vec![descriptor(&[(key, value)], None)]))
                .await
                .unwrap_or_else(|status| panic!("call failed: {status:?}"));
        }
    });
}

fn status(server: &Server) -> Value {
    status_json(server.debug_port)
}

#[test]
fn the_status_shows_who_is_refused_and_moves_with_the_traffic() {
    let dir = common::tempdir();
    let server = start(dir.path());
    within_one_minute();
    for client in 0..30 {
        hit(&server, "remote_address", &format!("10.0.1.{client}"), 1);
    }
    hit(&server, "remote_address", "10.0.0.7", 25);
    hit(&server, "api_key", "secret-key-1", 3);

    let first = status(&server);
    let ip = rule(&first, "shop.remote_address");
    let top = &ip["last_minute"]["top"][0];
    assert_eq!(top["value"], "10.0.0.7", "{ip}");
    assert_eq!(
        (top["admitted"].as_u64(), top["refused"].as_u64()),
        (Some(5), Some(20)),
        "{ip}"
    );
    assert_eq!(ip["last_minute"]["refused"], 20, "{ip}");
    assert_eq!(ip["last_minute"]["admitted"], 35, "{ip}");
    // A rule that does not say `heavy_hitters: raw` shows its values hashed.
    let key = rule(&first, "shop.api_key");
    let shown = key["last_minute"]["top"][0]["value"]
        .as_str()
        .unwrap_or_default();
    assert!(shown.starts_with('#') && !shown.contains("secret"), "{key}");
    assert!(
        first["heavy_hitters"]["bytes"].as_u64().unwrap_or(0) <= 2 * 16 * 1024,
        "{first}"
    );

    hit(&server, "remote_address", "10.0.0.7", 5);
    let moved = status(&server);
    assert_eq!(
        rule(&moved, "shop.remote_address")["last_minute"]["top"][0]["refused"],
        25
    );

    let page = chromium(&server, &["--dump-dom"]);
    assert!(
        page.contains("shop.remote_address") && page.contains("10.0.0.7"),
        "{page}"
    );
    assert!(
        page.contains(">25<"),
        "the refused count of 10.0.0.7: {page}"
    );
    // The sparkline of refusals: none in the nine minutes before, all in this one.
    assert!(page.contains("refused ·········█"), "{page}");
    let minutes = &rule(&moved, "shop.remote_address")["last_ten_minutes"]["per_minute"];
    assert_eq!(minutes[9]["refused"], 25, "{minutes}");
    if std::env::var_os("FLOODGATE_STATUS_SCREENSHOT").is_some() {
        let shot = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/status-page.png");
        chromium(
            &server,
            &[
                &format!("--screenshot={}", shot.display()),
                "--window-size=900,900",
            ],
        );
        assert!(shot.is_file(), "no screenshot at {}", shot.display());
    }
}

#[test]
fn a_banned_value_is_listed_with_the_end_and_level_of_its_ban() {
    let dir = common::tempdir();
    let server = start(dir.path());
    // Two admitted, two refused by the limit (strikes: the second starts a ban), one by the ban.
    hit(&server, "user", "mallory", 5);
    hit(&server, "user", "alice", 3);
    let seen = status(&server);
    let banned = rule(&seen, "shop.user")["banned"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(banned.len(), 1, "only mallory reached two strikes: {seen}");
    assert_eq!(banned[0]["value"], "mallory", "{seen}");
    assert_eq!(banned[0]["level"], 1, "{seen}");
    let left = banned[0]["ends_in_seconds"].as_f64().unwrap_or(0.0);
    assert!(left > 200.0 && left <= 300.0, "a 5-minute ban: {seen}");
    assert!(
        banned[0]["until"]
            .as_str()
            .is_some_and(|until| until.ends_with('Z')),
        "{seen}"
    );
    // A rule without `ban:` lists nothing.
    assert!(rule(&seen, "shop.api_key")["banned"].is_null(), "{seen}");
    let page = http::get(server.debug_port, "/status", &[])
        .unwrap_or_else(|error| panic!("/status: {error}"));
    assert!(
        page.body.contains("banned value") && page.body.contains("<td>mallory</td>"),
        "{}",
        page.body
    );
}

/// The page open in a browser moves by itself: a value that appears after it loaded shows
/// (its script reloads it every 2 s; nothing here does), which fails without the script. The
/// bound is four of those periods, not one: a headless Chromium reloading on two cores the
/// whole suite shares can take more than a second to show the page again.
#[test]
fn the_open_page_shows_new_hits_by_itself() {
    let dir = common::tempdir();
    let server = start(dir.path());
    hit(&server, "remote_address", "10.0.3.1", 2);
    let mut page = OpenPage::open(&page_url(&server));
    let loaded = Instant::now() + Duration::from_secs(20);
    let first = loop {
        match page.text() {
            Some(text) if text.contains("10.0.3.1") => break text,
            seen => assert!(Instant::now() < loaded, "the page never loaded: {seen:?}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!first.contains("10.0.3.99"), "{first}");

    hit(&server, "remote_address", "10.0.3.99", 3);
    let sent = Instant::now();
    let mut seen = None;
    while sent.elapsed() < Duration::from_secs(8) {
        seen = page.text();
        if seen.as_ref().is_some_and(|text| text.contains("10.0.3.99")) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the open page did not show the new value within 8 s (four refreshes): {seen:?}");
}

/// Waits, if the minute is near its end, for the next one: the counts below are asserted
/// exactly, and hits split across two one-minute buckets would weigh the older one less.
fn within_one_minute() {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let into_minute = since_epoch.as_secs() % 60;
    if into_minute >= 40 {
        std::thread::sleep(Duration::from_secs(61 - into_minute));
    }
}

/// Runs headless Chromium on `/status` with `args`: its stdout.
fn chromium(server: &Server, args: &[&str]) -> String {
    chromium::run_once(&page_url(server), args)
}

fn page_url(server: &Server) -> String {
    format!("http://127.0.0.1:{}/status", server.debug_port)
}
