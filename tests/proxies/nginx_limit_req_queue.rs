//! nginx's `limit_req` without `nodelay` holds the excess of a burst and serves it at the rate;
//! floodgate's `queue: true` holds its `/check` answer the same way. The same arrival sequence
//! goes to a real nginx `limit_req zone=… rate=10r/s burst=20;` (and with `delay=5`) and to the
//! same nginx's `auth_request` → floodgate's mirror rule: the same requests must be admitted
//! and refused, and each admitted one answered as long after it was sent as nginx answers it,
//! within 25 ms.
//!
//! The sequence keeps every decision at least 30 ms (0.3 of a request's turn) from the instant
//! the bucket has room, so the machine's scheduling cannot tip one, and its requests 15 ms
//! apart, so that both servers see them in the order sent: a burst of 25 (24 fit: the 25th
//! finds 20.4 turns queued), then 9 more from 1 050 ms on (8 fit: the 9th finds 20.3).

use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use floodgate_testkit::nginx::{KeepAliveClient, Nginx};
use floodgate_testkit::{free_port, tempdir, Floodgate};

const RULES: &str = "domain: queue
descriptors:
  - key: mode
    value: b20
    descriptors:
      - key: client
        rate_limit: {algorithm: leaky_bucket, unit: second, requests_per_unit: 10, burst: 20,
                     queue: true}
  - key: mode
    value: d5
    descriptors:
      - key: client
        rate_limit: {algorithm: leaky_bucket, unit: second, requests_per_unit: 10, burst: 20,
                     queue: true, delay: 5}
";

/// One `limit_req` as nginx writes it, and the mode of floodgate's mirror rule.
const MODES: [(&str, &str); 2] = [("b20", "burst=20"), ("d5", "burst=20 delay=5")];

/// A native location and a mirrored one per mode, on one key (the X-Client-Id header).
fn nginx_config(port: u16, floodgate_port: u16) -> String {
    let mut zones = String::new();
    let mut locations = String::new();
    for (mode, limit) in MODES {
        zones.push_str(&format!(
            "    limit_req_zone $http_x_client_id zone={mode}:1m rate=10r/s;\n"
        ));
        // empty_gif answers in the content phase, after limit_req (preaccess) and
        // auth_request (access).
        locations.push_str(&format!(
            "        location = /native/{mode} {{ limit_req zone={mode} {limit}; empty_gif; }}
        location = /mirror/{mode} {{ auth_request /_check/{mode}; empty_gif; }}
        location = /_check/{mode} {{
            internal;
            proxy_pass http://127.0.0.1:{floodgate_port}/check;
            proxy_pass_request_body off;
            proxy_set_header Content-Length \"\";
            proxy_set_header X-RateLimit-Domain queue;
            proxy_set_header X-RateLimit-Descriptor \"mode={mode},client=$http_x_client_id\";
            proxy_read_timeout 10s;
        }}
"
        ));
    }
    format!(
        "worker_processes 1;
error_log error.log warn;
events {{ worker_connections 512; }}
http {{
    client_body_temp_path client_body_temp;
    proxy_temp_path proxy_temp;
    fastcgi_temp_path fastcgi_temp;
    uwsgi_temp_path uwsgi_temp;
    scgi_temp_path scgi_temp;
    access_log off;
    limit_req_status 429;
{zones}    server {{
        listen 127.0.0.1:{port};
{locations}    }}
}}
"
    )
}

/// When each request of the sequence is sent, from its start.
fn arrivals() -> Vec<Duration> {
    let burst = (0..25).map(|index| Duration::from_millis(15 * index));
    let second = (0..9).map(|index| Duration::from_millis(1_050 + 15 * index));
    burst.chain(second).collect()
}

/// One request's answer: admitted or not, and how long after it was sent it came.
#[derive(Debug, Clone, Copy)]
struct Answer {
    admitted: bool,
    after: Duration,
}

/// The sequence sent to `path` with client id `client`, each request on a connection of its
/// own, all opened beforehand and written to in order, so that the servers see the requests
/// in the order sent; the answers in that order.
fn replay(port: u16, path: &str, client: &str) -> Vec<Answer> {
    let arrivals = arrivals();
    let mut connections: Vec<KeepAliveClient> = arrivals
        .iter()
        .map(|_| {
            let mut connection = KeepAliveClient::new(port);
            connection
                .connect()
                .unwrap_or_else(|error| panic!("{path}: cannot connect: {error}"));
            connection
        })
        .collect();
    let start = Instant::now();
    let calls: Vec<JoinHandle<Answer>> = arrivals
        .into_iter()
        .zip(connections.drain(..))
        .map(|(at, mut connection)| {
            std::thread::sleep(at.saturating_sub(start.elapsed()));
            let sent = Instant::now();
            connection
                .send(path, &[("X-Client-Id", client)])
                .unwrap_or_else(|error| panic!("{path}: cannot send: {error}"));
            let path = path.to_owned();
            std::thread::spawn(move || {
                let answer = connection
                    .receive()
                    .unwrap_or_else(|error| panic!("{path}: {error}"));
                let admitted = match answer.status {
                    200 => true,
                    403 | 429 => false,
                    other => panic!("{path}: status {other}"),
                };
                Answer {
                    admitted,
                    after: sent.elapsed(),
                }
            })
        })
        .collect();
    calls
        .into_iter()
        .map(|call| {
            call.join()
                .unwrap_or_else(|_| panic!("{path}: a call panicked"))
        })
        .collect()
}

fn start_stack(dir: &Path) -> (Floodgate, Nginx) {
    let floodgate = Floodgate::start_with_rules(dir, "queue.yaml", RULES, &[]);
    let port = free_port();
    let prefix = dir.join("nginx");
    std::fs::create_dir_all(&prefix)
        .unwrap_or_else(|error| panic!("cannot create the nginx prefix: {error}"));
    let nginx = Nginx::start(&nginx_config(port, floodgate.http_port), &prefix, port);
    (floodgate, nginx)
}

fn admitted(answers: &[Answer]) -> Vec<bool> {
    answers.iter().map(|answer| answer.admitted).collect()
}

#[test]
fn a_queueing_leaky_bucket_holds_each_answer_until_nginxs_time() {
    let dir = tempdir();
    let (_floodgate, nginx) = start_stack(dir.path());
    for (mode, _) in MODES {
        // The first request on a path is slower (nginx's first upstream connection, floodgate's
        // first decision of a rule); on the sequence's own key it would set back the turns of all
        // that follow.
        for side in ["native", "mirror"] {
            let mut warm = KeepAliveClient::new(nginx.port);
            warm.send(&format!("/{side}/{mode}"), &[("X-Client-Id", "warm-up")])
                .and_then(|()| warm.receive())
                .unwrap_or_else(|error| panic!("{side}/{mode}: warm-up: {error}"));
        }
        let native = replay(
            nginx.port,
            &format!("/native/{mode}"),
            &format!("{mode}-native"),
        );
        let mirror = replay(
            nginx.port,
            &format!("/mirror/{mode}"),
            &format!("{mode}-mirror"),
        );
        assert_eq!(
            admitted(&mirror),
            admitted(&native),
            "{mode}: floodgate (left) and nginx (right) admit differently\nnginx: {native:?}\n\
             floodgate: {mirror:?}\n{}",
            nginx.logs()
        );
        let mut expected = vec![true; 24];
        expected.push(false);
        expected.extend([true; 8]);
        expected.push(false);
        assert_eq!(admitted(&native), expected, "{native:?}");
        for (index, (theirs, ours)) in native.iter().zip(&mirror).enumerate() {
            if theirs.admitted {
                let apart = theirs.after.abs_diff(ours.after);
                assert!(
                    apart <= Duration::from_millis(25),
                    "{mode} #{index}: nginx answered after {:?}, floodgate after {:?}\nnginx: {native:?}\nfloodgate: {mirror:?}",
                    theirs.after,
                    ours.after
                );
            }
        }
        // The last of the burst waited its turn: about 2 s (1.5 s with delay=5).
        let longest = native.iter().map(|answer| answer.after).max();
        assert!(longest > Some(Duration::from_millis(1_200)), "{native:?}");
    }
}
