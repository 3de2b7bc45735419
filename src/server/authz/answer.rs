//! What a check answers the proxy, whatever the wire: allowed with the rate-limit headers for
//! the client, or refused with 429, the same headers (`Retry-After` among them) and a body.

use crate::core::decision::headers::{response_headers, HeaderMode};
use crate::core::decision::response::Response as Decision;
use crate::core::decision::status::Code;

/// The HTTP status a client gets when over its limits.
pub(crate) const TOO_MANY_REQUESTS: u16 = 429;

/// The answer for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Answer {
    Allowed {
        headers: Vec<(String, String)>,
    },
    Denied {
        headers: Vec<(String, String)>,
        body: String,
    },
}

impl Answer {
    /// The answer to `decision`; a refusal says `deny_body`.
    pub(crate) fn of(decision: &Decision, deny_body: &str) -> Self {
        let headers = check_headers(decision);
        match decision.overall_code {
            Code::Ok => Answer::Allowed { headers },
            Code::OverLimit => Answer::Denied {
                headers,
                body: deny_body.to_owned(),
            },
        }
    }
}

/// The headers of a check answer: those `--response-headers` asked for (already in the
/// decision), then the IETF and draft-03 ones, each name once. Always all of them, whatever
/// `--response-headers` says: a proxy that asks over a check has no other way to learn them.
pub(crate) fn check_headers(decision: &Decision) -> Vec<(String, String)> {
    let mut headers = decision.response_headers.clone();
    for mode in [HeaderMode::Ietf, HeaderMode::Draft03] {
        for (name, value) in response_headers(mode, &decision.statuses) {
            if !headers
                .iter()
                .any(|(present, _)| present.eq_ignore_ascii_case(&name))
            {
                headers.push((name, value));
            }
        }
    }
    headers
}
