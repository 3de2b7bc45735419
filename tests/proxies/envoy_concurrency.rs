//! Concurrency rules through the real Envoy 1.40 with the guide's bootstrap
//! (`deploy/envoy/concurrency.yaml`: a start call that acquires a lease named by x-request-id,
//! a stream-end call that releases it, `failure_mode_deny: true`) and rules
//! (`deploy/envoy/concurrency-rules/`: 4 in flight). A slow upstream written here counts the
//! requests it is serving at once; with clients pushing far more than 4 at a time through two
//! Envoys, it never serves more than 4, whether the Envoys share one floodgate (memory) or
//! each has its own over one Redis. Releases free the slots at once; a lease whose release is
//! lost (acquired, then its proxy gone) frees itself after its TTL.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floodgate_testkit::envoy::Envoy;
use floodgate_testkit::http::{get, request};
use floodgate_testkit::redis::{store_flags, RedisServer};
use floodgate_testkit::{free_port, repo_file, Floodgate};

const LIMIT: usize = 4;
/// How long the upstream takes per request: long enough that the clients' requests overlap.
const SERVICE_TIME: Duration = Duration::from_millis(250);
const CLIENTS: usize = 12;
const REQUESTS_PER_CLIENT: usize = 4;
/// Well under the guide's 30 s TTL: slots that come back sooner were released.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// An HTTP/1.1 upstream that sleeps SERVICE_TIME per request and counts how many it serves at
/// once (the count drops before the answer is written, so it never lags a lease's release).
struct SlowUpstream {
    port: u16,
    most_in_flight: Arc<AtomicUsize>,
    served: Arc<AtomicUsize>,
    /// The x-request-id of each request served, as Envoy forwarded it.
    request_ids: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

/// What `serve` counts and keeps, shared by every connection.
#[derive(Clone)]
struct Tally {
    in_flight: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    served: Arc<AtomicUsize>,
    request_ids: Arc<Mutex<Vec<String>>>,
}

impl SlowUpstream {
    fn start() -> SlowUpstream {
        let port = free_port();
        let listener = TcpListener::bind(("127.0.0.1", port))
            .unwrap_or_else(|error| panic!("bind the upstream: {error}"));
        listener
            .set_nonblocking(true)
            .unwrap_or_else(|error| panic!("nonblocking: {error}"));
        let tally = Tally {
            in_flight: Arc::new(AtomicUsize::new(0)),
            most: Arc::new(AtomicUsize::new(0)),
            served: Arc::new(AtomicUsize::new(0)),
            request_ids: Arc::new(Mutex::new(Vec::new())),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let upstream = SlowUpstream {
            port,
            most_in_flight: Arc::clone(&tally.most),
            served: Arc::clone(&tally.served),
            request_ids: Arc::clone(&tally.request_ids),
            stop: Arc::clone(&stop),
        };
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let tally = tally.clone();
                        std::thread::spawn(move || serve(stream, tally));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        upstream
    }
}

impl Drop for SlowUpstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Serves one keep-alive connection: request heads in, a short 200 out.
fn serve(mut stream: TcpStream, tally: Tally) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut pending = Vec::new();
    let mut buffer = [0_u8; 4096];
    loop {
        while !pending.windows(4).any(|window| window == b"\r\n\r\n") {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => return,
                Ok(read) => pending.extend_from_slice(&buffer[..read]),
            }
        }
        let end = pending
            .windows(4)
            .position(|window| window == b"\r\n\r\n")
            .map_or(pending.len(), |at| at + 4);
        let head: Vec<u8> = pending.drain(..end).collect();
        if let Some(id) = request_id(&head) {
            if let Ok(mut ids) = tally.request_ids.lock() {
                ids.push(id);
            }
        }
        let now = tally.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        tally.most.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(SERVICE_TIME);
        tally.in_flight.fetch_sub(1, Ordering::SeqCst);
        tally.served.fetch_add(1, Ordering::SeqCst);
        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n";
        if stream.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// The x-request-id header of a request head, if it has one.
fn request_id(head: &[u8]) -> Option<String> {
    String::from_utf8_lossy(head).lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("x-request-id")
            .then(|| value.trim().to_owned())
    })
}

pub(super) fn guide_rules() -> String {
    let path = repo_file("deploy/envoy/concurrency-rules/backend.yaml");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()))
}

pub(super) fn start_envoy(rls_port: u16, upstream: u16, dir: &Path, name: &str) -> Envoy {
    let path = repo_file("deploy/envoy/concurrency.yaml");
    let template = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    let (edge, admin) = (free_port(), free_port());
    // A debug-built floodgate on a shared machine may take longer than the guide's 0.5 s to
    // answer; with failure_mode_deny that is a 500, which this test counts as floodgate failing.
    let bootstrap = template
        .replace("timeout: 0.5s", "timeout: 5s")
        .replace("port_value: 10000", &format!("port_value: {edge}"))
        .replace("port_value: 10001", &format!("port_value: {upstream}"))
        .replace("port_value: 9903", &format!("port_value: {admin}"))
        .replace("port_value: 8081", &format!("port_value: {rls_port}"));
    Envoy::start(&bootstrap, name, dir, &[edge])
}

/// CLIENTS threads, each sending REQUESTS_PER_CLIENT requests one after the other through the
/// Envoys in turn: every status seen.
fn push_through(envoys: &[u16]) -> Vec<u16> {
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let envoys = envoys.to_vec();
            std::thread::spawn(move || {
                (0..REQUESTS_PER_CLIENT)
                    .map(|turn| {
                        let port = envoys[(client + turn) % envoys.len()];
                        get(port, "/", &[])
                            .unwrap_or_else(|error| panic!("request through envoy: {error}"))
                            .status
                    })
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    clients
        .into_iter()
        .flat_map(|client| {
            client
                .join()
                .unwrap_or_else(|_| panic!("a client thread panicked"))
        })
        .collect()
}

/// Waits until LIMIT requests at once all pass: every lease of the burst was released.
fn wait_until_every_slot_is_free(envoys: &[u16], logs: &dyn Fn() -> String) {
    let started = Instant::now();
    loop {
        let round: Vec<_> = (0..LIMIT)
            .map(|index| {
                let port = envoys[index % envoys.len()];
                std::thread::spawn(move || get(port, "/", &[]).map(|response| response.status))
            })
            .collect();
        let statuses: Vec<u16> = round
            .into_iter()
            .map(|thread| match thread.join() {
                Ok(Ok(status)) => status,
                _ => 0,
            })
            .collect();
        if statuses.iter().all(|status| *status == 200) {
            return;
        }
        assert!(
            started.elapsed() < RELEASE_TIMEOUT,
            "after {RELEASE_TIMEOUT:?} {LIMIT} requests at once still get {statuses:?}: the \
             stream-end calls did not release the leases\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn assert_never_above_the_limit(
    upstream: &SlowUpstream,
    envoys: &[u16],
    logs: &dyn Fn() -> String,
) {
    let statuses = push_through(envoys);
    let passed = statuses.iter().filter(|status| **status == 200).count();
    let refused = statuses.iter().filter(|status| **status == 429).count();
    assert_eq!(
        passed + refused,
        statuses.len(),
        "only 200 and 429 (a 500 is floodgate failing, with failure_mode_deny): {statuses:?}\n{}",
        logs()
    );
    let most = upstream.most_in_flight.load(Ordering::SeqCst);
    assert!(
        most <= LIMIT,
        "the upstream served {most} requests at once, above the limit of {LIMIT}"
    );
    assert!(
        passed >= LIMIT && refused > 0,
        "{passed} passed, {refused} refused"
    );
    assert_eq!(upstream.served.load(Ordering::SeqCst), passed);
    wait_until_every_slot_is_free(envoys, logs);
}

#[test]
fn two_envoys_on_one_floodgate_never_exceed_the_limit_in_memory() {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let floodgate = Floodgate::start_with_rules(dir.path(), "backend.yaml", &guide_rules(), &[]);
    let upstream = SlowUpstream::start();
    let first = start_envoy(floodgate.grpc_port, upstream.port, dir.path(), "first.yaml");
    let second = start_envoy(
        floodgate.grpc_port,
        upstream.port,
        dir.path(),
        "second.yaml",
    );
    let logs = || floodgate.process.log_text();
    assert_never_above_the_limit(&upstream, &[first.port, second.port], &logs);
}

#[test]
fn two_envoys_on_two_floodgates_over_redis_never_exceed_the_limit() {
    let redis = RedisServer::start();
    let url = redis.url();
    // A generous Redis deadline: on a loaded host the default 25 ms is missed, the circuit
    // opens and Envoy (failure_mode_deny) answers 500, which says nothing about the leases.
    let flags = store_flags(&url, &[]);
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    for place in [&one, &two] {
        std::fs::create_dir_all(place).unwrap_or_else(|error| panic!("mkdir: {error}"));
    }
    let first_floodgate = Floodgate::start_with_rules(&one, "backend.yaml", &guide_rules(), &flags);
    let second_floodgate =
        Floodgate::start_with_rules(&two, "backend.yaml", &guide_rules(), &flags);
    let upstream = SlowUpstream::start();
    let first = start_envoy(first_floodgate.grpc_port, upstream.port, &one, "envoy.yaml");
    let second = start_envoy(
        second_floodgate.grpc_port,
        upstream.port,
        &two,
        "envoy.yaml",
    );
    let logs = || {
        format!(
            "first floodgate:\n{}\nsecond floodgate:\n{}",
            first_floodgate.process.log_text(),
            second_floodgate.process.log_text()
        )
    };
    assert_never_above_the_limit(&upstream, &[first.port, second.port], &logs);
}

#[test]
fn a_lease_whose_release_is_lost_frees_after_its_ttl() {
    let rules = guide_rules()
        .replace("max_in_flight: 4", "max_in_flight: 1")
        .replace("ttl: 30s", "ttl: 2s");
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let floodgate = Floodgate::start_with_rules(dir.path(), "backend.yaml", &rules, &[]);
    let upstream = SlowUpstream::start();
    let envoy = start_envoy(floodgate.grpc_port, upstream.port, dir.path(), "envoy.yaml");
    // A proxy that acquired the one slot and was gone before its stream ended.
    let start_call = r#"{"domain":"backend","descriptors":[{"entries":[{"key":"backend","value":"slow"},{"key":"request_id","value":"lost-release"}]}]}"#;
    let acquired = request(floodgate.http_port, "POST", "/json", &[], start_call)
        .unwrap_or_else(|error| panic!("POST /json: {error}"));
    assert!(
        acquired.body.contains(r#""overallCode":"OK""#),
        "{acquired:?}"
    );
    let first = get(envoy.port, "/", &[]).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(
        first.status, 429,
        "the lost lease still holds the slot: {first:?}"
    );
    let started = Instant::now();
    loop {
        let status = get(envoy.port, "/", &[])
            .unwrap_or_else(|error| panic!("{error}"))
            .status;
        if status == 200 {
            break;
        }
        assert_eq!(status, 429);
        assert!(
            started.elapsed() < RELEASE_TIMEOUT,
            "the lost lease never freed\n{}",
            floodgate.process.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(upstream.served.load(Ordering::SeqCst), 1);
}

/// A client that names its own requests cannot make them share a slot: 10 requests in
/// flight together, all carrying one x-request-id the client chose, put at most the limit in
/// the backend. They start 20 ms apart, well within the upstream's 250 ms, so that the
/// stream-end calls of the first ones refused come before the last ones start: were the id
/// kept, those calls would free the slots of requests still in the backend. The guide's Envoy
/// (`use_remote_address: true`) gives every external request an x-request-id of its own
/// instead, so each request's lease is its own and its stream-end call frees only that one.
#[test]
fn requests_carrying_one_client_chosen_request_id_never_exceed_the_limit() {
    const PARALLEL: usize = 10;
    const FORGED: &str = "one-id-for-every-request";
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("tempdir: {error}"));
    let floodgate = Floodgate::start_with_rules(dir.path(), "backend.yaml", &guide_rules(), &[]);
    let upstream = SlowUpstream::start();
    let envoy = start_envoy(floodgate.grpc_port, upstream.port, dir.path(), "envoy.yaml");
    let clients: Vec<_> = (0..PARALLEL)
        .map(|_| {
            let port = envoy.port;
            let client = std::thread::spawn(move || {
                get(port, "/", &[("x-request-id", FORGED)])
                    .unwrap_or_else(|error| panic!("request through envoy: {error}"))
                    .status
            });
            std::thread::sleep(Duration::from_millis(20));
            client
        })
        .collect();
    let statuses: Vec<u16> = clients
        .into_iter()
        .map(|client| {
            client
                .join()
                .unwrap_or_else(|_| panic!("a client thread panicked"))
        })
        .collect();
    let logs = || floodgate.process.log_text();
    let passed = statuses.iter().filter(|status| **status == 200).count();
    let refused = statuses.iter().filter(|status| **status == 429).count();
    assert_eq!(passed + refused, PARALLEL, "{statuses:?}\n{}", logs());
    let most = upstream.most_in_flight.load(Ordering::SeqCst);
    assert!(
        most <= LIMIT,
        "{PARALLEL} requests with one x-request-id: the upstream served {most} at once, above \
         the limit of {LIMIT} ({statuses:?})"
    );
    assert!(passed >= 1 && refused >= 1, "{statuses:?}");
    assert_eq!(upstream.served.load(Ordering::SeqCst), passed);
    let ids = upstream
        .request_ids
        .lock()
        .map(|ids| ids.clone())
        .unwrap_or_default();
    assert!(
        ids.len() == passed && !ids.iter().any(|id| id == FORGED),
        "Envoy forwarded the client's x-request-id: {ids:?}"
    );
    wait_until_every_slot_is_free(&[envoy.port], &logs);
}
