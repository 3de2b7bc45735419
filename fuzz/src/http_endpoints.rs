//! `http_endpoints`: the HTTP listener's decision endpoints, through axum's routing into the
//! limiter on the memory store. The first byte picks the endpoint:
//!
//! * even: `POST /json`, the rest is the body (a `RateLimitRequest` in proto3 JSON);
//! * 1 mod 4: `GET /check`, the rest is header lines (`name: value`);
//! * 3 mod 4: `GET /check/<profile>`, the first line is the profile's name, then header lines.
//!
//! Header lines that are no valid header are left out, and a path too long for a URI ends the
//! input (no client could send them).
//!
//! Must hold: `/json` answers 200 or 429 with a JSON object, or 400 with a reason; `/check`
//! answers 200, 403 (over the limit), 400 with a reason or 404 (no such profile). Never a 5xx:
//! the rules are loaded and the memory store cannot fail. No panic.

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Request, StatusCode};
use floodgate::server::in_process::http_routes;
use floodgate::server::HttpSettings;

use crate::input::percent_encoded;
use crate::service::{block_on, limiter, send, Answer};

pub fn run(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let router = http_routes(limiter(), HttpSettings::default());
    if selector.is_multiple_of(2) {
        let request = Request::post("/json")
            .header("content-type", "application/json")
            .body(Body::from(rest.to_vec()))
            .unwrap_or_else(|error| panic!("cannot build the request: {error}"));
        check_json(&block_on(send(&router, request)));
        return;
    }
    let (path, header_lines) = if selector % 4 == 1 {
        ("/check".to_owned(), rest)
    } else {
        let (name, lines) = split_line(rest);
        (format!("/check/{}", percent_encoded(name)), lines)
    };
    let mut request = Request::get(path.as_str());
    let mut lines = header_lines;
    while !lines.is_empty() {
        let (line, more) = split_line(lines);
        lines = more;
        if let Some((name, value)) = header(line) {
            request = request.header(name, value);
        }
    }
    // A path over the 65 534 bytes an HTTP request's URI may have: no client can send it
    // (hyper answers 414 before any router).
    let Ok(request) = request.body(Body::empty()) else {
        return;
    };
    check_check(&block_on(send(&router, request)), &path);
}

fn check_json(answer: &Answer) {
    match answer.status {
        StatusCode::OK | StatusCode::TOO_MANY_REQUESTS => {
            let value: serde_json::Value = serde_json::from_slice(&answer.body)
                .unwrap_or_else(|error| panic!("/json answered no JSON ({error})"));
            assert!(value.is_object(), "/json answered {value}");
        }
        StatusCode::BAD_REQUEST => {
            assert!(
                !answer.body_text().trim().is_empty(),
                "a 400 without a reason"
            );
        }
        status => panic!("/json answered {status}: {}", answer.body_text()),
    }
}

fn check_check(answer: &Answer, path: &str) {
    match answer.status {
        StatusCode::OK | StatusCode::FORBIDDEN | StatusCode::NOT_FOUND => {}
        StatusCode::BAD_REQUEST => {
            assert!(
                !answer.body_text().trim().is_empty(),
                "a 400 without a reason"
            );
        }
        status => panic!("{path} answered {status}: {}", answer.body_text()),
    }
}

/// The first line (without its `\n`) and the rest.
fn split_line(bytes: &[u8]) -> (&[u8], &[u8]) {
    match bytes.iter().position(|&byte| byte == b'\n') {
        Some(end) => (&bytes[..end], &bytes[end + 1..]),
        None => (bytes, &[]),
    }
}

fn header(line: &[u8]) -> Option<(HeaderName, HeaderValue)> {
    let colon = line.iter().position(|&byte| byte == b':')?;
    let name = HeaderName::from_bytes(&line[..colon]).ok()?;
    let value = line[colon + 1..].trim_ascii();
    Some((name, HeaderValue::from_bytes(value).ok()?))
}
