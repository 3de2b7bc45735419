//! 200 reloads of a ConfigMap-style directory, good and bad alternating, while clients call
//! ShouldRateLimit: no call fails, every answer comes from one whole valid version, each good
//! version is live within a second, each bad one is rejected whole, one log line per reload.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate::proto::RateLimitRequest;
use floodgate_testkit::ops::{self, descriptor, limit_of, request, ConfigMapDir};

const GOOD_RELOADS: usize = 100;
const BAD_RELOADS: usize = 100;
/// Bounds on the background traffic.
const MAX_CALLS: u64 = 400_000;
const CLIENTS: usize = 2;

/// Both descriptors carry the version's name and limit: an answer that mixed two versions
/// would show two different names.
fn good(name: &str, limit: u32) -> String {
    format!(
        "domain: reload\n\
         descriptors:\n\
         \x20 - key: first\n\
         \x20   rate_limit: {{unit: hour, requests_per_unit: {limit}, name: {name}}}\n\
         \x20 - key: second\n\
         \x20   rate_limit: {{unit: hour, requests_per_unit: {limit}, name: {name}}}\n"
    )
}

const VERSIONS: [(&str, u32); 2] = [("version_a", 1_000_000), ("version_b", 2_000_000)];

/// Four ways to be wrong; each would change the `first` descriptor if applied in part.
fn bad(index: usize) -> Vec<(&'static str, String)> {
    let half_new = good("version_c", 3_000_000);
    match index % 4 {
        0 => vec![("rules.yaml", format!("{half_new}  - key: [\n"))],
        1 => vec![(
            "rules.yaml",
            "domain: reload\n\
             descriptors:\n\
             \x20 - key: first\n\
             \x20   rate_limit: {unit: hour, requests_per_unit: 3000000, name: version_c}\n\
             \x20 - key: second\n\
             \x20   rate_limit: {unit: fortnight, requests_per_unit: 3000000, name: version_c}\n"
                .to_owned(),
        )],
        2 => vec![("rules.yaml", format!("{half_new}  - key: first\n"))],
        _ => vec![
            ("rules.yaml", half_new),
            ("zz-duplicate.yaml", "domain: reload\n".to_owned()),
        ],
    }
}

#[derive(Debug, Default)]
struct Traffic {
    calls: u64,
    failures: u64,
    mixed: u64,
    per_version: [u64; 2],
    first_problem: Option<String>,
}

fn traffic_request() -> RateLimitRequest {
    // hits_addend 0: check only, so the counters never fill up however many calls are made.
    request(
        "reload",
        vec![
            descriptor(&[("first", "x")], Some(0)),
            descriptor(&[("second", "x")], Some(0)),
        ],
    )
}

/// Calls in a loop from `CLIENTS` concurrent clients until `stop` (or `MAX_CALLS`).
fn drive(url: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Traffic> {
    std::thread::spawn(move || {
        ops::runtime().block_on(async move {
            let mut clients = Vec::new();
            for _ in 0..CLIENTS {
                let url = url.clone();
                let stop = Arc::clone(&stop);
                clients.push(tokio::spawn(async move {
                    let mut traffic = Traffic::default();
                    let mut client = match RateLimitServiceClient::connect(url).await {
                        Ok(client) => client,
                        Err(error) => {
                            traffic.failures += 1;
                            traffic.first_problem = Some(format!("connect: {error}"));
                            return traffic;
                        }
                    };
                    while !stop.load(Ordering::Relaxed) && traffic.calls < MAX_CALLS / 2 {
                        traffic.calls += 1;
                        let response = match client.should_rate_limit(traffic_request()).await {
                            Ok(response) => response.into_inner(),
                            Err(status) => {
                                traffic.failures += 1;
                                traffic.first_problem.get_or_insert(format!("{status:?}"));
                                continue;
                            }
                        };
                        let limits: Vec<_> = response.statuses.iter().map(limit_of).collect();
                        let version = VERSIONS.iter().position(|(name, limit)| {
                            limits
                                .iter()
                                .all(|found| found == &Some(((*name).to_owned(), *limit)))
                        });
                        match version {
                            Some(index)
                                if limits.len() == 2
                                    && response.overall_code == Code::Ok as i32 =>
                            {
                                traffic.per_version[index] += 1;
                            }
                            _ => {
                                traffic.mixed += 1;
                                traffic.first_problem.get_or_insert(format!("{response:?}"));
                            }
                        }
                    }
                    traffic
                }));
            }
            let mut total = Traffic::default();
            for client in clients {
                let Ok(traffic) = client.await else {
                    total.failures += 1;
                    continue;
                };
                total.calls += traffic.calls;
                total.failures += traffic.failures;
                total.mixed += traffic.mixed;
                total.per_version[0] += traffic.per_version[0];
                total.per_version[1] += traffic.per_version[1];
                total.first_problem = total.first_problem.or(traffic.first_problem);
            }
            total
        })
    })
}

/// The version that answers a fresh call now.
fn live_version(
    runtime: &tokio::runtime::Runtime,
    client: &mut RateLimitServiceClient<tonic::transport::Channel>,
) -> Option<&'static str> {
    let response = runtime
        .block_on(client.should_rate_limit(traffic_request()))
        .ok()?
        .into_inner();
    let limit = response.statuses.first().and_then(limit_of)?;
    VERSIONS
        .iter()
        .find(|(name, requests)| limit == ((*name).to_owned(), *requests))
        .map(|(name, _)| *name)
}

#[test]
fn two_hundred_reloads_under_traffic_are_each_whole() {
    let temp = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let mut configmap = ConfigMapDir::new(&temp.path().join("configmap"));
    configmap.publish(&[("rules.yaml", &good(VERSIONS[0].0, VERSIONS[0].1))]);
    let dir = configmap.dir.display().to_string();
    let mut server = ops::start(&["--config", &dir], &[], temp.path());

    let runtime = ops::runtime();
    let mut probe = runtime
        .block_on(RateLimitServiceClient::connect(server.grpc_url()))
        .unwrap_or_else(|error| panic!("connect: {error}"));
    assert_eq!(live_version(&runtime, &mut probe), Some("version_a"));

    let stop = Arc::new(AtomicBool::new(false));
    let traffic = drive(server.grpc_url(), Arc::clone(&stop));
    let started = Instant::now();
    let mut good_latencies = Vec::with_capacity(GOOD_RELOADS);
    let mut bad_latencies = Vec::with_capacity(BAD_RELOADS);
    for round in 0..GOOD_RELOADS.max(BAD_RELOADS) {
        if round < BAD_RELOADS {
            let Some((version, failures)) = ops::reload_headers(server.debug_port) else {
                panic!("no reload headers on the debug port");
            };
            let files = bad(round);
            let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
            configmap.publish(&files);
            bad_latencies.push(ops::wait_for(
                Duration::from_secs(2),
                "a bad configuration is rejected",
                || ops::reload_headers(server.debug_port) == Some((version, failures + 1)),
            ));
        }
        if round < GOOD_RELOADS {
            let (name, limit) = VERSIONS[(round + 1) % 2];
            configmap.publish(&[("rules.yaml", &good(name, limit))]);
            good_latencies.push(ops::wait_for(
                Duration::from_secs(2),
                "a good configuration is live",
                || live_version(&runtime, &mut probe) == Some(name),
            ));
        }
    }
    let reloading = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let Ok(traffic) = traffic.join() else {
        panic!("the traffic thread panicked");
    };
    let log = server.process.log_text();
    let _ = server.process.terminate(Duration::from_secs(5));

    let max = |latencies: &[Duration]| latencies.iter().max().copied().unwrap_or_default();
    let mean = |latencies: &[Duration]| {
        latencies.iter().sum::<Duration>() / u32::try_from(latencies.len().max(1)).unwrap_or(1)
    };
    eprintln!(
        "{} good + {} bad reloads in {reloading:?}; live after: mean {:?}, max {:?}; rejected \
         after: mean {:?}, max {:?}; traffic: {} calls ({} version_a, {} version_b), {} failed, \
         {} mixed",
        GOOD_RELOADS,
        BAD_RELOADS,
        mean(&good_latencies),
        max(&good_latencies),
        mean(&bad_latencies),
        max(&bad_latencies),
        traffic.calls,
        traffic.per_version[0],
        traffic.per_version[1],
        traffic.failures,
        traffic.mixed
    );
    assert_eq!(
        traffic.failures, 0,
        "first problem: {:?}",
        traffic.first_problem
    );
    assert_eq!(
        traffic.mixed, 0,
        "first problem: {:?}",
        traffic.first_problem
    );
    assert!(
        traffic.per_version.iter().all(|&calls| calls > 0),
        "{traffic:?}"
    );
    assert!(
        max(&good_latencies) < Duration::from_secs(1),
        "a good version took {:?} to be live",
        max(&good_latencies)
    );

    // One line per reload: info for each good one, error (naming file and path) for each bad.
    let reloaded = log.matches("configuration reloaded").count();
    let rejected: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("configuration reload rejected"))
        .collect();
    assert_eq!(reloaded, GOOD_RELOADS, "{log}");
    assert_eq!(rejected.len(), BAD_RELOADS, "{log}");
    assert!(rejected
        .iter()
        .all(|line| line.contains("rules.yaml") || line.contains("zz-duplicate.yaml")));
    assert!(rejected
        .iter()
        .any(|line| line.contains("reload.first") || line.contains("reload.second")));
    // Nothing per call at info.
    assert!(
        log.lines().count() < GOOD_RELOADS + BAD_RELOADS + 20,
        "{log}"
    );
}
