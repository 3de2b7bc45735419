//! The check endpoint for nginx's `auth_request`, over a socket against the real binary:
//! `/check` (descriptors in `X-RateLimit-*` headers) and `/check/<profile>` (descriptors built by
//! a check profile from the headers nginx sets). 200 to allow, 403 (or 401) to reject, never
//! 429; the rate-limit headers always; 400 with a message for bad headers.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;

use floodgate_testkit::http::{request, HttpResponse};
use floodgate_testkit::{tempdir, Floodgate};

const RULES: &str = r#"
domain: edge
descriptors:
  # 2 per hour per client, one back every 30 minutes.
  - key: client_id
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: token_bucket, name: per_client}
  - key: generic_key
    value: api
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 3, algorithm: token_bucket}
check_profiles:
  api:
    descriptors:
      - entries:
          - {key: generic_key, value: api}
          - {key: user, header: X-Api-Key}
    hits_header: X-Cost
  by_client:
    descriptors:
      - entries:
          - {key: client_id, header: X-Client, default: anonymous}
  optional:
    descriptors:
      - entries:
          - {key: client_id, header: X-Client}
"#;

fn start(dir: &Path, extra: &[&str]) -> Floodgate {
    Floodgate::start_with_rules(dir, "edge.yaml", RULES, extra)
}

fn check(floodgate: &Floodgate, path: &str, headers: &[(&str, &str)]) -> HttpResponse {
    request(floodgate.http_port, "GET", path, headers, "")
        .unwrap_or_else(|error| panic!("GET {path} failed: {error}"))
}

fn by_headers(floodgate: &Floodgate, descriptors: &[&str]) -> HttpResponse {
    let mut headers = vec![("X-RateLimit-Domain", "edge")];
    headers.extend(descriptors.iter().map(|d| ("X-RateLimit-Descriptor", *d)));
    check(floodgate, "/check", &headers)
}

fn retry_after(response: &HttpResponse) -> u64 {
    response
        .header("retry-after")
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After: {response:?}"))
}

#[test]
fn allowed_then_403_with_every_header_even_without_response_headers() {
    let dir = tempdir();
    // No --response-headers: the check endpoint still sends what nginx needs.
    let floodgate = start(dir.path(), &[]);

    let first = by_headers(&floodgate, &["client_id=alice"]);
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.body, "OK\n");
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"per_client\";q=2;w=3600")
    );
    assert_eq!(first.header("ratelimit"), Some("\"per_client\";r=1;t=1800"));
    assert_eq!(
        first.header("x-ratelimit-limit"),
        Some("2, 2;w=3600;name=\"per_client\"")
    );
    assert_eq!(first.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(first.header("x-ratelimit-reset"), Some("1800"));
    assert_eq!(first.header("retry-after"), None);

    assert_eq!(by_headers(&floodgate, &["client_id=alice"]).status, 200);
    let denied = by_headers(&floodgate, &["client_id=alice"]);
    assert_eq!(denied.status, 403, "{denied:?}");
    assert_eq!(denied.body, "OVER_LIMIT\n");
    assert!((1799..=1800).contains(&retry_after(&denied)), "{denied:?}");
    assert_eq!(denied.header("x-ratelimit-remaining"), Some("0"));
    assert!(
        denied
            .header("ratelimit")
            .is_some_and(|state| state.starts_with("\"per_client\";r=0;t=")),
        "{denied:?}"
    );

    // Any method: nginx's subrequest is a GET, but a POST from elsewhere works too.
    let post = request(
        floodgate.http_port,
        "POST",
        "/check",
        &[
            ("X-RateLimit-Domain", "edge"),
            ("X-RateLimit-Descriptor", "client_id=bob"),
        ],
        "",
    )
    .unwrap_or_else(|error| panic!("POST /check: {error}"));
    assert_eq!(post.status, 200, "{post:?}");
}

#[test]
fn several_descriptors_hits_and_check_only() {
    let dir = tempdir();
    let floodgate = start(dir.path(), &["--response-headers", "ratelimit"]);

    // One header per descriptor; the most restrictive drives the headers, all are listed.
    let both = by_headers(&floodgate, &["generic_key=api, user=u1", "client_id=carol"]);
    assert_eq!(both.status, 200, "{both:?}");
    assert_eq!(
        both.header("ratelimit-policy"),
        Some("\"edge.generic_key_api.user\";q=3;w=3600, \"per_client\";q=2;w=3600")
    );
    assert_eq!(both.header("x-ratelimit-remaining"), Some("1"));
    // --response-headers ratelimit adds its own set on top.
    assert_eq!(both.header("ratelimit-limit"), Some("2"));
    assert_eq!(both.header("ratelimit-remaining"), Some("1"));

    // X-RateLimit-Hits: 0 checks without charging.
    let mut peek = vec![
        ("X-RateLimit-Domain", "edge"),
        ("X-RateLimit-Descriptor", "client_id=dave"),
        ("X-RateLimit-Hits", "0"),
    ];
    for _ in 0..3 {
        let response = check(&floodgate, "/check", &peek);
        assert_eq!(response.status, 200, "{response:?}");
        assert_eq!(response.header("x-ratelimit-remaining"), Some("2"));
    }
    // 2 hits at once use the whole budget; the next single hit is refused.
    peek[2] = ("X-RateLimit-Hits", "2");
    assert_eq!(check(&floodgate, "/check", &peek).status, 200);
    let denied = by_headers(&floodgate, &["client_id=dave"]);
    assert_eq!(denied.status, 403, "{denied:?}");
}

#[test]
fn deny_status_401_when_configured() {
    let dir = tempdir();
    let floodgate = start(dir.path(), &["--http-deny-status", "401"]);
    for expected in [200, 200, 401] {
        let response = by_headers(&floodgate, &["client_id=erin"]);
        assert_eq!(response.status, expected, "{response:?}");
    }
}

#[test]
fn bad_check_headers_get_400_with_a_message() {
    let dir = tempdir();
    let floodgate = start(dir.path(), &[]);
    let cases: [(&[(&str, &str)], &str); 6] = [
        (
            &[("X-RateLimit-Descriptor", "client_id=a")],
            "missing X-RateLimit-Domain header",
        ),
        (
            &[("X-RateLimit-Domain", "edge")],
            "no X-RateLimit-Descriptor header",
        ),
        (
            &[
                ("X-RateLimit-Domain", "edge"),
                ("X-RateLimit-Descriptor", "client_id"),
            ],
            "no '=' between key and value",
        ),
        (
            &[
                ("X-RateLimit-Domain", "edge"),
                ("X-RateLimit-Descriptor", "=a"),
            ],
            "the key is empty",
        ),
        (
            &[
                ("X-RateLimit-Domain", "edge"),
                ("X-RateLimit-Descriptor", "client_id=a"),
                ("X-RateLimit-Hits", "lots"),
            ],
            "is not a whole number of hits",
        ),
        (
            &[
                ("X-RateLimit-Domain", "edge"),
                ("X-RateLimit-Descriptor", "client_id=a"),
                ("X-RateLimit-Descriptor", "a=1,b=2,c=3"),
                ("X-RateLimit-Hits", "-1"),
            ],
            "is not a whole number of hits",
        ),
    ];
    for (headers, expected) in cases {
        let response = check(&floodgate, "/check", headers);
        assert_eq!(response.status, 400, "{headers:?}: {response:?}");
        assert!(
            response.body.contains(expected),
            "{headers:?}: expected {expected:?} in {:?}",
            response.body
        );
    }
}

#[test]
fn profiles_map_headers_to_descriptors() {
    let dir = tempdir();
    let floodgate = start(dir.path(), &[]);

    // api: [generic_key=api, user=<X-Api-Key>], 3 per hour; hits from X-Cost only.
    let key = [("X-Api-Key", "k1")];
    let first = check(&floodgate, "/check/api", &key);
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"edge.generic_key_api.user\";q=3;w=3600")
    );
    assert_eq!(first.header("x-ratelimit-remaining"), Some("2"));
    let peek = check(
        &floodgate,
        "/check/api",
        &[("X-Api-Key", "k1"), ("X-Cost", "0")],
    );
    assert_eq!(peek.header("x-ratelimit-remaining"), Some("2"), "{peek:?}");
    let statuses: Vec<u16> = (0..3)
        .map(|_| check(&floodgate, "/check/api", &key).status)
        .collect();
    assert_eq!(statuses, [200, 200, 403]);

    // No X-Api-Key: the descriptor is left out, nothing to limit, allowed without headers.
    let anonymous = check(&floodgate, "/check/optional", &[]);
    assert_eq!(anonymous.status, 200, "{anonymous:?}");
    assert_eq!(anonymous.header("ratelimit"), None);

    // A client's own X-RateLimit-Hits: 0 does not make it free: by_client names no hits header.
    let sneaky = [("X-Client", "mallory"), ("X-RateLimit-Hits", "0")];
    let statuses: Vec<u16> = (0..3)
        .map(|_| check(&floodgate, "/check/by_client", &sneaky).status)
        .collect();
    assert_eq!(statuses, [200, 200, 403]);

    // The default fills in for a missing header.
    let defaulted = check(&floodgate, "/check/by_client", &[]);
    assert_eq!(
        defaulted.header("x-ratelimit-remaining"),
        Some("1"),
        "{defaulted:?}"
    );

    let unknown = check(&floodgate, "/check/nope", &[]);
    assert_eq!(unknown.status, 404, "{unknown:?}");
    assert_eq!(
        unknown.body,
        "no check profile \"nope\": the profiles are api, by_client, optional\n"
    );
}

#[test]
fn header_bytes_that_are_not_utf8_are_counted_not_refused() {
    let dir = tempdir();
    let floodgate = start(dir.path(), &[]);
    // A client-controlled value nginx passes on as is: a 400 here would be a 500 in nginx, which
    // a fail-open location serves unlimited. So it is read lossily and counted.
    let raw = |value: &[u8]| -> u16 {
        let mut stream = TcpStream::connect(("127.0.0.1", floodgate.http_port))
            .unwrap_or_else(|error| panic!("connect: {error}"));
        let mut head =
            b"GET /check/by_client HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Client: ".to_vec();
        head.extend_from_slice(value);
        head.extend_from_slice(b"\r\n\r\n");
        stream
            .write_all(&head)
            .unwrap_or_else(|error| panic!("write: {error}"));
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status in {answer:?}"))
    };
    let statuses: Vec<u16> = (0..3).map(|_| raw(b"\xff\xfeme")).collect();
    assert_eq!(statuses, [200, 200, 403]);
}
