//! The reference's tests of single settings: `TestBasicConfig_ExtraTags` (statsd tags: the
//! stats are asserted as a statsd listener receives them, tagged as gostats tags them, and in
//! floodgate's Prometheus names), the Memcached tests (`TestBasicConfigMemcache`,
//! `TestConfigMemcacheWithMaxIdleConns`, `TestMultiNodeMemcache`: no Memcached store, so
//! `BACKEND_TYPE=memcache` refuses to start), and over the same fixtures the request fields and
//! settings its integration tests only pass through: a request's `hits_addend`, the near-limit
//! stat (`NEAR_LIMIT_RATIO`) and the `LIMIT_*` response headers (the README's "Custom headers").

use std::io::Read as _;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use floodgate::proto::rate_limit_response::rate_limit::Unit;
use floodgate::proto::rate_limit_response::Code;
use floodgate_testkit::free_port;
use floodgate_testkit::redis::RedisServer;

use super::redis_setups::address;
use crate::harness::{
    assert_response, call, counted, fresh_value, limited, request, start, Entry, RuntimeTree,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_config_extra_tags() {
    let redis = RedisServer::start();
    let tree = RuntimeTree::integration(&["basic.yaml", "another.yaml"]);
    // A statsd that only listens, to read what the reference's runner store would hold.
    let statsd = TcpListener::bind(("127.0.0.1", 0))
        .unwrap_or_else(|error| panic!("cannot listen for statsd: {error}"));
    let statsd_port = statsd
        .local_addr()
        .unwrap_or_else(|error| panic!("{error}"))
        .port()
        .to_string();
    let server = start(
        Entry::Ratelimit,
        &tree,
        "ExtraTags",
        &[
            ("REDIS_URL", &address(redis.port())),
            ("EXTRA_TAGS", "foo:bar,a:b"),
            ("USE_STATSD", "true"),
            ("STATSD_HOST", "127.0.0.1"),
            ("STATSD_PORT", &statsd_port),
            ("STATS_FLUSH_INTERVAL", "100ms"),
        ],
    );
    let mut client = server.client().await;
    call(&mut client, request("basic", &[&[("key1", "foo")]], 1)).await;
    let scrape = server.metrics();
    assert_eq!(
        counted(
            &scrape,
            "floodgate_requests_allowed_total",
            &[("domain", "basic"), ("rule", "basic.key1")]
        ),
        1.0,
        "key1 total_hits\n{}",
        scrape.text
    );
    assert_eq!(
        scrape.value("floodgate_config_load_success_total", &[]),
        1.0,
        "config_load_success"
    );
    // The reference's NewCounterWithTags(name, ExtraTags): the tags in the name, by key.
    let received = statsd_lines_until(
        &statsd,
        &[
            "ratelimit.service.rate_limit.basic.key1.total_hits.__a=b.__foo=bar:1|c",
            "ratelimit.service.config_load_success.__a=b.__foo=bar:1|c",
        ],
    );
    let log = server.process.log_text();
    assert!(
        !log.contains("EXTRA_TAGS is set, but floodgate does not support it"),
        "{log}\n--- statsd ---\n{received}"
    );
}

/// What the first connection to `listener` sends, once it holds every one of `lines` (bounded).
fn statsd_lines_until(listener: &TcpListener, lines: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    listener
        .set_nonblocking(true)
        .unwrap_or_else(|error| panic!("{error}"));
    let mut stream = loop {
        match listener.accept() {
            Ok((stream, _)) => break stream,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(error) => panic!("floodgate did not connect to statsd: {error}"),
        }
    };
    stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(Some(Duration::from_millis(200))))
        .unwrap_or_else(|error| panic!("{error}"));
    let mut received = String::new();
    let mut buffer = [0u8; 4096];
    while !lines
        .iter()
        .all(|line| received.lines().any(|got| got == *line))
    {
        assert!(
            Instant::now() < deadline,
            "statsd did not receive {lines:?}:\n{received}"
        );
        if let Ok(read) = stream.read(&mut buffer) {
            received.push_str(&String::from_utf8_lossy(&buffer[..read]));
        }
    }
    received
}

#[test]
fn memcache_refuses_to_start() {
    let tree = RuntimeTree::integration(&["basic.yaml", "another.yaml"]);
    let memcache = [("127.0.0.1", free_port()), ("127.0.0.1", free_port())]
        .map(|(host, port)| format!("{host}:{port}"))
        .join(",");
    for (name, env) in [
        ("Memcache", vec![]),
        (
            "MemcacheWithSpecifiedMaxIdleConns",
            vec![("MEMCACHE_MAX_IDLE_CONNS", "100")],
        ),
    ] {
        let mut env = env;
        env.extend([
            ("BACKEND_TYPE", "memcache"),
            ("MEMCACHE_HOST_PORT", memcache.as_str()),
        ]);
        let mut process = crate::harness::spawn(Entry::Ratelimit, &tree, name, &env);
        let status = process
            .exit_within(Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{name}: still running:\n{}", process.log_text()));
        let log = process.log_text();
        assert_eq!(status.code(), Some(64), "{name}: {log}");
        assert!(log.contains("no Memcached store"), "{name}: {log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_addend_near_limit_and_limit_headers() {
    for entry in [Entry::Serve, Entry::Ratelimit] {
        hits_addend_near_limit_and_limit_headers_at(entry).await;
    }
}

async fn hits_addend_near_limit_and_limit_headers_at(entry: Entry) {
    let tree = RuntimeTree::integration(&["basic.yaml", "another.yaml"]);
    let server = start(
        entry,
        &tree,
        &format!("LimitHeaders{entry:?}"),
        &[
            ("BACKEND_TYPE", "memory"),
            ("NEAR_LIMIT_RATIO", "0.8"),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "true"),
            ("LIMIT_LIMIT_HEADER", "X-Limit"),
            ("LIMIT_REMAINING_HEADER", "X-Remaining"),
            ("LIMIT_RESET_HEADER", "X-Reset"),
        ],
    );
    let mut client = server.client().await;
    let value = fresh_value();
    // key3: 10 per hour. Nine hits in one call.
    let response = call(&mut client, request("another", &[&[("key3", &value)]], 9)).await;
    assert_response(
        &response,
        Code::Ok,
        &[limited(Code::Ok, 10, Unit::Hour, 1)],
        "hits_addend 9",
    );
    let header = |name: &str| {
        response
            .response_headers_to_add
            .iter()
            .find(|header| header.key.eq_ignore_ascii_case(name))
            .map(|header| header.value.clone())
    };
    assert_eq!(header("X-Limit").as_deref(), Some("10"), "{response:?}");
    assert_eq!(header("X-Remaining").as_deref(), Some("1"), "{response:?}");
    let reset: i64 = header("X-Reset")
        .and_then(|reset| reset.parse().ok())
        .unwrap_or_else(|| panic!("no X-Reset: {response:?}"));
    assert!((1..=3_600).contains(&reset), "{response:?}");

    // near_limit: the threshold is floor(10 × 0.8) = 8; of the nine hits, the ninth is past it.
    let near_limit = || {
        counted(
            &server.metrics(),
            "floodgate_near_limit_total",
            &[("domain", "another"), ("rule", "another.key3")],
        )
    };
    assert_eq!(near_limit(), 1.0);

    // Two more do not fit: OVER_LIMIT. Started as `ratelimit` they are counted, as the
    // reference's INCRBY counts them (11 of 10), so the last hit is refused too; `floodgate
    // serve` charges a refused request nothing, so the last one still fits.
    let response = call(&mut client, request("another", &[&[("key3", &value)]], 2)).await;
    assert_response(
        &response,
        Code::OverLimit,
        &[limited(Code::OverLimit, 10, Unit::Hour, 0)],
        "hits_addend 2 over the limit",
    );
    let response = call(&mut client, request("another", &[&[("key3", &value)]], 1)).await;
    let last = match entry {
        Entry::Serve => Code::Ok,
        Entry::Ratelimit => Code::OverLimit,
    };
    assert_response(
        &response,
        last,
        &[limited(last, 10, Unit::Hour, 0)],
        &format!("{entry:?}: the last hit"),
    );
}
