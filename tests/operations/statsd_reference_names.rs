//! envoyproxy/ratelimit's stats sent to a real statsd (the npm `statsd` daemon that
//! scripts/install-peers.sh puts in `.npm-peers/`, which logs every line it receives with
//! `dumpMessages`): calls over gRPC, then the reference's statsd names and values as statsd
//! received them; and with statsd down, floodgate keeps deciding and counts the failed sends.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use floodgate_testkit as common;
use floodgate_testkit::prom::Scrape;
use floodgate_testkit::rls;
use floodgate_testkit::{tempdir, Floodgate, Running};

/// A member of the gold plan may make 5 an hour; a trial rule only watches (shadow mode).
const RULES: &str = r#"
domain: store
descriptors:
  - key: trial
    rate_limit:
      unit: hour
      requests_per_unit: 1
    shadow_mode: true
  - key: plan
    value: gold
    descriptors:
      - key: member
        rate_limit: {unit: hour, requests_per_unit: 5}
  - key: region
    value: eu
    descriptors:
      - key: shop
        value: berlin
        descriptors:
          - key: member
            rate_limit: {unit: hour, requests_per_unit: 5}
"#;

const PREFIX: &str = "ratelimit.service.rate_limit.store.";

fn statsd_script() -> PathBuf {
    let script = common::repo_file(".npm-peers/node_modules/statsd/stats.js");
    assert!(
        script.exists(),
        "no statsd daemon at {}: run scripts/install-peers.sh",
        script.display()
    );
    script
}

/// The statsd daemon on a free loopback port (`server`: `tcp` or `udp`), logging what it
/// receives, and that port.
fn start_statsd(dir: &Path, server: &str) -> (Running, u16) {
    let port = common::free_port();
    // Its management interface too, off its default 8126 that another test's statsd may hold.
    let management = common::free_port();
    let config = dir.join("statsd-config.js");
    std::fs::write(
        &config,
        format!(
            "{{ servers: [{{ server: \"./servers/{server}\", address: \"127.0.0.1\", port: {port} }}], \
             mgmt_address: \"127.0.0.1\", mgmt_port: {management}, \
             dumpMessages: true, backends: [], flushInterval: 3600000 }}\n"
        ),
    )
    .unwrap_or_else(|error| panic!("write statsd config: {error}"));
    let script = statsd_script();
    let mut command = Command::new("node");
    command
        .arg(&script)
        .arg(&config)
        .current_dir(script.parent().unwrap_or(dir));
    let statsd = Running::spawn("statsd", &mut command, dir);
    let log = statsd.log_once_it_says("server is up", Duration::from_secs(10));
    assert!(log.contains("server is up"), "statsd did not start:\n{log}");
    (statsd, port)
}

/// Each counter statsd received (`DEBUG: name:value|c[|#tags]` in its log), summed by name
/// (with `|#tags` after it when tagged).
fn received_counters(log: &str) -> HashMap<String, u64> {
    let mut sums = HashMap::new();
    for line in log.lines() {
        let Some((_, message)) = line.split_once("DEBUG: ") else {
            continue;
        };
        let Some((name, rest)) = message.split_once(':') else {
            continue;
        };
        let mut parts = rest.split('|');
        let (Some(value), Some("c")) = (parts.next(), parts.next()) else {
            continue;
        };
        let key = match parts.next() {
            Some(tags) => format!("{name}|{tags}"),
            None => name.to_owned(),
        };
        if let Ok(value) = value.parse::<u64>() {
            *sums.entry(key).or_insert(0) += value;
        }
    }
    sums
}

/// floodgate sending to statsd at `statsd_port` every 100 ms, with `env` besides.
fn start_floodgate(dir: &Path, statsd_port: u16, env: &[(&str, &str)]) -> Floodgate {
    let config = dir.join("store.yaml");
    std::fs::write(&config, RULES).unwrap_or_else(|error| panic!("write rules: {error}"));
    let port = statsd_port.to_string();
    let mut all = vec![
        ("USE_STATSD", "true"),
        ("STATSD_HOST", "127.0.0.1"),
        ("STATSD_PORT", port.as_str()),
        ("STATS_FLUSH_INTERVAL", "100ms"),
    ];
    all.extend_from_slice(env);
    Floodgate::start_with_env(&config, &[], &all, dir)
}

#[tokio::test]
async fn the_reference_stats_reach_statsd_under_its_names() {
    let dir = tempdir();
    let (mut statsd, statsd_port) = start_statsd(dir.path(), "tcp");
    let floodgate = start_floodgate(dir.path(), statsd_port, &[("STATSD_PROTOCOL", "tcp")]);
    let mut client = rls::connect(&floodgate.grpc_url()).await;

    // 5 per hour, near from 4 (80 %): 2 + 2 within (OK); 2 more refused with 4 used (1 over,
    // 1 near); 1 more within and near (OK).
    let member: &[(&str, &str)] = &[("plan", "gold"), ("member", "ada")];
    for (hits, code) in [(2, 1), (2, 1), (2, 2), (1, 1)] {
        let mut request = rls::request("store", &[member]);
        request.hits_addend = hits;
        let response = rls::call(&mut client, request).await;
        assert_eq!(response.map(|answer| answer.overall_code).ok(), Some(code));
    }
    // Shadow mode, 1 per hour: one within, one over in shadow, both answered OK.
    for _ in 0..2 {
        let response = rls::call(&mut client, rls::request("store", &[&[("trial", "t")]])).await;
        assert_eq!(response.map(|answer| answer.overall_code).ok(), Some(1));
    }

    // A key of four pieces reaches statsd whole (the Prometheus mapping keeps three).
    let deep: &[(&str, &str)] = &[("region", "eu"), ("shop", "berlin"), ("member", "ada")];
    let response = rls::call(&mut client, rls::request("store", &[deep])).await;
    assert_eq!(response.map(|answer| answer.overall_code).ok(), Some(1));

    let member_total = format!("{PREFIX}plan_gold.member.total_hits");
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut received = received_counters(&statsd.log_text());
    while received.get(&member_total) != Some(&7)
        || received.get("ratelimit_server.ShouldRateLimit.total_requests") != Some(&7)
    {
        assert!(
            Instant::now() < deadline,
            "statsd did not receive the stats:\n{}",
            statsd.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
        received = received_counters(&statsd.log_text());
    }
    let log = statsd.log_text();
    for (name, value) in [
        ("plan_gold.member.total_hits", 7),
        ("plan_gold.member.within_limit", 5),
        ("plan_gold.member.over_limit", 1),
        ("plan_gold.member.near_limit", 2),
        ("trial.total_hits", 2),
        ("trial.within_limit", 1),
        ("trial.over_limit", 1),
        ("trial.shadow_mode", 1),
        ("region_eu.shop_berlin.member.total_hits", 1),
        ("region_eu.shop_berlin.member.within_limit", 1),
    ] {
        assert_eq!(
            received.get(&format!("{PREFIX}{name}")),
            Some(&value),
            "{name} in\n{log}"
        );
    }
    assert_eq!(
        received.get(&format!("{PREFIX}plan_gold.member.shadow_mode")),
        None,
        "a counter that did not move is not sent:\n{log}"
    );
    assert_eq!(
        received.get("ratelimit.service.config_load_success"),
        Some(&1),
        "{log}"
    );
    assert!(
        log.contains("DEBUG: ratelimit_server.ShouldRateLimit.response_time:")
            && log.contains("|ms"),
        "{log}"
    );
    statsd.terminate(Duration::from_secs(5));
}

fn send_errors(floodgate: &Floodgate) -> f64 {
    let response = common::http::get(floodgate.debug_port, "/metrics", &[])
        .unwrap_or_else(|error| panic!("cannot scrape /metrics: {error}"));
    Scrape::parse(&response.body).value("floodgate_statsd_send_errors_total", &[])
}

#[tokio::test]
async fn with_statsd_down_floodgate_keeps_deciding_and_counts_the_failed_sends() {
    let dir = tempdir();
    // Nothing listens there: every connect is refused.
    let floodgate = start_floodgate(dir.path(), common::free_port(), &[]);
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    let member: &[(&str, &str)] = &[("plan", "gold"), ("member", "bob")];

    let deadline = Instant::now() + Duration::from_secs(15);
    let mut answered = 0;
    while send_errors(&floodgate) < 2.0 {
        assert!(
            Instant::now() < deadline,
            "no send errors counted:\n{}",
            floodgate.process.log_text()
        );
        // Something to send at each flush.
        let response = rls::call(&mut client, rls::request("store", &[member]))
            .await
            .unwrap_or_else(|status| panic!("{status:?}"));
        answered += 1;
        let expected = if answered <= 5 { 1 } else { 2 };
        assert_eq!(response.overall_code, expected, "call {answered}");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let log = floodgate.process.log_text();
    assert_eq!(
        log.matches("statsd did not take the stats").count(),
        1,
        "one log line a minute, however many flushes fail:\n{log}"
    );
}

/// Waits (bounded) until statsd has received `want` for `name`; what it received.
fn wait_for_counter(statsd: &Running, name: &str, want: u64) -> HashMap<String, u64> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let received = received_counters(&statsd.log_text());
        if received.get(name) == Some(&want) {
            return received;
        }
        assert!(
            Instant::now() < deadline,
            "statsd did not receive {name}:{want}:\n{}",
            statsd.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test]
async fn dogstatsd_over_udp_carries_the_extra_tags_as_tags() {
    let dir = tempdir();
    let (mut statsd, statsd_port) = start_statsd(dir.path(), "udp");
    let floodgate = start_floodgate(
        dir.path(),
        statsd_port,
        &[
            ("USE_STATSD", "false"),
            ("USE_DOG_STATSD", "true"),
            ("STATSD_PROTOCOL", "udp"),
            ("EXTRA_TAGS", "zone:eu,app:edge"),
            // The reference README's mogrifier: a shadow-mode key's stats as one tagged metric.
            ("USE_DOG_STATSD_MOGRIFIERS", "TRIAL"),
            (
                "DOG_STATSD_MOGRIFIER_TRIAL_PATTERN",
                r"^ratelimit\.service\.rate_limit\.([^.]+)\.(trial)\.([^.]+)$",
            ),
            (
                "DOG_STATSD_MOGRIFIER_TRIAL_NAME",
                "ratelimit.service.rate_limit.$3",
            ),
            ("DOG_STATSD_MOGRIFIER_TRIAL_TAGS", "domain:$1,descriptor:$2"),
        ],
    );
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    let response = rls::call(&mut client, rls::request("store", &[&[("trial", "t")]])).await;
    assert_eq!(response.map(|answer| answer.overall_code).ok(), Some(1));
    let mut request = rls::request("store", &[&[("plan", "gold"), ("member", "cy")]]);
    request.hits_addend = 3;
    let response = rls::call(&mut client, request).await;
    assert_eq!(response.map(|answer| answer.overall_code).ok(), Some(1));

    let tags = "|#app:edge,zone:eu";
    let total = format!("{PREFIX}plan_gold.member.total_hits{tags}");
    let received = wait_for_counter(&statsd, &total, 3);
    let log = statsd.log_text();
    assert_eq!(
        received.get(&format!("{PREFIX}plan_gold.member.within_limit{tags}")),
        Some(&3),
        "{log}"
    );
    assert_eq!(
        received.get(&format!("ratelimit.service.config_load_success{tags}")),
        Some(&1),
        "{log}"
    );
    assert!(
        !log.contains(".__app="),
        "DogStatsD keeps the names bare:\n{log}"
    );
    assert_eq!(
        received.get(
            "ratelimit.service.rate_limit.total_hits|#app:edge,zone:eu,domain:store,descriptor:trial"
        ),
        Some(&1),
        "the mogrifier's name and tags, after EXTRA_TAGS:\n{log}"
    );
    assert!(
        !log.contains("store.trial."),
        "a mogrified name is not sent as well:\n{log}"
    );
    statsd.terminate(Duration::from_secs(5));
}

#[tokio::test]
async fn plain_statsd_puts_the_extra_tags_into_the_names_as_gostats_does() {
    let dir = tempdir();
    let (mut statsd, statsd_port) = start_statsd(dir.path(), "tcp");
    let floodgate = start_floodgate(dir.path(), statsd_port, &[("EXTRA_TAGS", "app:edge")]);
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    let response = rls::call(&mut client, rls::request("store", &[&[("trial", "t")]])).await;
    assert_eq!(response.map(|answer| answer.overall_code).ok(), Some(1));

    let received = wait_for_counter(&statsd, &format!("{PREFIX}trial.total_hits.__app=edge"), 1);
    assert_eq!(
        received.get("ratelimit_server.ShouldRateLimit.total_requests.__app=edge"),
        Some(&1),
        "{}",
        statsd.log_text()
    );
    statsd.terminate(Duration::from_secs(5));
}
