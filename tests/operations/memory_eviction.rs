//! `--max-keys` is no way around a limit: flooding the memory store with unique counters makes
//! it forget counters to make room, but never one that is exhausted while another is not. A
//! victim's exhausted counter survives floods far larger than the store, over the real gRPC
//! API of the floodgate binary.

use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::RateLimitRequest;

use floodgate_testkit as common;
use floodgate_testkit::prom::scrape;
use floodgate_testkit::rls;
use floodgate_testkit::Floodgate;

const MAX_KEYS: usize = 2_000;
/// Unique counters per flood: 12.8 times the store.
const FLOOD: usize = 25_600;
/// Floods in a row: when eviction took the nearest expiry alone, each reset the victim (16
/// floods of 16 measured).
const FLOODS: usize = 6;
/// Descriptors per flood request (under the default `--max-descriptors` of 64).
const PER_REQUEST: usize = 50;
/// Flood requests in flight at once.
const CONCURRENCY: usize = 4;
const LIMIT: u32 = 3;

/// Fixed windows of ten 365-day years (epoch-aligned: the current one ends in December 2029), so
/// no window turns while the test runs. Every counter of a window expires at its end, the victim
/// as every flood counter: eviction by nearest expiry alone picks among them at random. A flood
/// counter takes one hit of three, so it is never exhausted.
const RULES: &str = "domain: flood\n\
                     descriptors:\n\
                     \x20 - key: user\n\
                     \x20   rate_limit: {unit: year, unit_multiplier: 10, requests_per_unit: 3}\n";

/// A request of `domain` with one `user` descriptor per name.
fn users(domain: &str, names: &[String]) -> RateLimitRequest {
    let entries: Vec<[(&str, &str); 1]> =
        names.iter().map(|name| [("user", name.as_str())]).collect();
    let descriptors: Vec<&[(&str, &str)]> = entries.iter().map(|entry| &entry[..]).collect();
    rls::request(domain, &descriptors)
}

async fn victim_code(client: &mut rls::Client) -> Code {
    rls::call(client, users("flood", &["victim".to_owned()]))
        .await
        .unwrap_or_else(|status| panic!("victim call: {status}"))
        .overall_code()
}

/// Charges the victim until it is over its limit.
async fn exhaust_victim(client: &mut rls::Client) {
    for _ in 0..=LIMIT {
        if victim_code(client).await == Code::OverLimit {
            return;
        }
    }
    panic!(
        "the victim is still under its limit after {} hits",
        LIMIT + 1
    );
}

/// `FLOOD` fresh unique counters, `PER_REQUEST` per call, `CONCURRENCY` calls at a time; every
/// call must be admitted (the flood counters are never exhausted).
async fn flood(client: &rls::Client, round: usize) {
    let batches: Vec<Vec<String>> = (0..FLOOD)
        .map(|index| format!("r{round}-u{index}"))
        .collect::<Vec<_>>()
        .chunks(PER_REQUEST)
        .map(<[String]>::to_vec)
        .collect();
    let mut lanes: Vec<Vec<Vec<String>>> = vec![Vec::new(); CONCURRENCY];
    for (index, batch) in batches.into_iter().enumerate() {
        lanes[index % CONCURRENCY].push(batch);
    }
    let tasks: Vec<_> = lanes
        .into_iter()
        .map(|lane| {
            let mut client = client.clone();
            tokio::spawn(async move {
                for batch in lane {
                    let response = rls::call(&mut client, users("flood", &batch))
                        .await
                        .unwrap_or_else(|status| panic!("flood call: {status}"));
                    assert_eq!(
                        response.overall_code(),
                        Code::Ok,
                        "a flood call was refused"
                    );
                }
            })
        })
        .collect();
    for task in tasks {
        task.await
            .unwrap_or_else(|error| panic!("flood task: {error}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_counter_survives_floods_of_unique_counters() {
    let dir = common::tempdir();
    let max_keys = MAX_KEYS.to_string();
    let floodgate = Floodgate::start_with_rules(
        dir.path(),
        "flood.yaml",
        RULES,
        &["--store", "memory", "--max-keys", &max_keys],
    );
    let mut client = rls::connect(&floodgate.grpc_url()).await;

    let mut resets = 0;
    for round in 0..FLOODS {
        exhaust_victim(&mut client).await;
        flood(&client, round).await;
        if victim_code(&mut client).await != Code::OverLimit {
            resets += 1;
        }
    }
    assert_eq!(
        resets, 0,
        "the victim's exhausted counter was forgotten in {resets} of {FLOODS} floods of {FLOOD} \
         unique counters (--max-keys {MAX_KEYS})"
    );

    let metrics = scrape(floodgate.debug_port);
    let evicted = metrics.value("floodgate_store_evictions_total", &[("backend", "memory")]);
    assert!(
        evicted >= (FLOODS * FLOOD - MAX_KEYS) as f64,
        "{evicted} evictions counted"
    );
}

/// The store holds `--max-keys` counters, all exhausted: a request that needs a new counter is
/// answered by its domain's failure policy (`fail_closed` here, `error` by default), counted,
/// and logged once for many; the counters held still decide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_full_of_exhausted_counters_answers_new_ones_by_the_failure_policy() {
    const FULL_KEYS: usize = 50;
    let dir = common::tempdir();
    let config = common::subdir(dir.path(), "config");
    let rule = "descriptors:\n  - key: user\n    rate_limit: {unit: year, unit_multiplier: 10, requests_per_unit: 1}\n";
    for (domain, policy) in [("closed", "failure_policy: fail_closed\n"), ("plain", "")] {
        std::fs::write(
            config.join(format!("{domain}.yaml")),
            format!("domain: {domain}\n{policy}{rule}"),
        )
        .unwrap_or_else(|error| panic!("cannot write rules: {error}"));
    }
    let max_keys = FULL_KEYS.to_string();
    let floodgate = Floodgate::start(&config, &["--max-keys", &max_keys], dir.path());
    common::wait_for_port(
        floodgate.http_port,
        std::time::Duration::from_secs(10),
        "floodgate HTTP",
    );
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    let spent: Vec<String> = (0..FULL_KEYS).map(|index| format!("s{index}")).collect();
    for batch in spent.chunks(PER_REQUEST) {
        let response = rls::call(&mut client, users("closed", batch))
            .await
            .unwrap_or_else(|status| panic!("filling call: {status}"));
        assert_eq!(response.overall_code(), Code::Ok);
    }

    let refusals = 5;
    for index in 0..refusals {
        let user = format!("new{index}");
        let closed = rls::call(&mut client, rls::request("closed", &[&[("user", &user)]]))
            .await
            .unwrap_or_else(|status| panic!("fail_closed answer: {status}"));
        assert_eq!(closed.overall_code(), Code::OverLimit);
        assert!(
            closed
                .response_headers_to_add
                .iter()
                .any(|header| header.key == "x-floodgate-unavailable" && header.value == "memory"),
            "{closed:?}"
        );
        let plain = rls::call(&mut client, rls::request("plain", &[&[("user", &user)]])).await;
        assert_eq!(
            plain.map_err(|status| status.code()).err(),
            Some(tonic::Code::Unavailable)
        );
    }
    // A counter held is decided as ever: over its limit, by the limit, not the policy.
    let held = rls::call(&mut client, rls::request("closed", &[&[("user", "s7")]]))
        .await
        .unwrap_or_else(|status| panic!("held counter: {status}"));
    assert_eq!(held.overall_code(), Code::OverLimit);
    assert!(held.response_headers_to_add.is_empty(), "{held:?}");

    let metrics = scrape(floodgate.debug_port);
    assert_eq!(
        metrics.value("floodgate_store_full_total", &[("backend", "memory")]),
        f64::from(2 * refusals)
    );
    assert_eq!(
        metrics.value("floodgate_store_evictions_total", &[("backend", "memory")]),
        0.0
    );
    let log = floodgate.process.log_text();
    assert_eq!(
        log.matches("the memory store holds only exhausted counters")
            .count(),
        1,
        "one line for {} refusals:\n{log}",
        2 * refusals
    );
}
