//! `admin_api`: up to [`MAX_REQUESTS`] admin API requests (past authentication) on one limiter,
//! separated by NUL bytes, so that an override created by one can be listed or deleted by the
//! next. Each request's first byte picks it:
//!
//! * 0 mod 4: `POST /v1/overrides`, the rest is the body;
//! * 1 mod 4: `GET /v1/overrides`;
//! * 2 mod 4: `DELETE /v1/overrides/<the rest>`;
//! * 3 mod 4: `POST /v1/signals/<first line>` (the adaptive rule's signal when empty), then
//!   the body.
//!
//! Must hold: every answer is 2xx or 4xx (the memory store cannot fail), a JSON answer is
//! JSON, a 4xx says why, and `GET /v1/overrides` always answers 200. No panic.

use axum::body::Body;
use axum::http::{Method, Request};
use floodgate::server::in_process::admin_routes;

use crate::input::percent_encoded;
use crate::service::{block_on, limiter, send, SIGNAL};

const MAX_REQUESTS: usize = 8;

pub fn run(data: &[u8]) {
    let router = admin_routes(limiter(), &[SIGNAL]);
    block_on(async {
        for part in data.split(|&byte| byte == 0).take(MAX_REQUESTS) {
            let Some((&selector, rest)) = part.split_first() else {
                continue;
            };
            let (method, path, body) = match selector % 4 {
                0 => (Method::POST, "/v1/overrides".to_owned(), rest),
                1 => (Method::GET, "/v1/overrides".to_owned(), &[][..]),
                2 => (
                    Method::DELETE,
                    format!("/v1/overrides/{}", percent_encoded(rest)),
                    &[][..],
                ),
                _ => {
                    let (name, body) = match rest.iter().position(|&byte| byte == b'\n') {
                        Some(end) => (&rest[..end], &rest[end + 1..]),
                        None => (&rest[..0], rest),
                    };
                    let name = if name.is_empty() {
                        SIGNAL.to_owned()
                    } else {
                        percent_encoded(name)
                    };
                    (Method::POST, format!("/v1/signals/{name}"), body)
                }
            };
            let request = Request::builder()
                .method(method.clone())
                .uri(path.as_str())
                .header("content-type", "application/json")
                .body(Body::from(body.to_vec()));
            // A path over the 65 534 bytes a URI may have: no client can send it.
            let Ok(request) = request else {
                continue;
            };
            let answer = send(&router, request).await;
            let status = answer.status;
            let what = format!("{method} {path} answered {status}: {}", answer.body_text());
            assert!(status.is_success() || status.is_client_error(), "{what}");
            if method == Method::GET {
                assert!(status.is_success(), "{what}");
            }
            let is_json = answer
                .headers
                .get("content-type")
                .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
            if is_json {
                let parsed: Result<serde_json::Value, _> = serde_json::from_slice(&answer.body);
                assert!(parsed.is_ok(), "{what}: not JSON");
            }
            if status.is_client_error() {
                assert!(!answer.body_text().trim().is_empty(), "{what}: no reason");
            }
        }
    });
}
