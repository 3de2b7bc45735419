//! Self-protection, as pure decisions: what an overloaded floodgate answers instead of queueing
//! a call, and whether a caller's deadline (`grpc-timeout`) leaves any time to decide. The
//! shell (`server::admission`) counts calls in flight and reads the clock.

use std::fmt;
use std::time::Duration;

use crate::decision::response::Response;
use crate::decision::status::{Code, DescriptorStatus};

/// The answer to a call refused because floodgate is at its in-flight bound
/// (`--overload-answer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OverloadAnswer {
    /// gRPC UNAVAILABLE: Envoy's `failure_mode_deny` decides, as for any error of
    /// envoyproxy/ratelimit. The default, for that reason.
    #[default]
    Unavailable,
    /// Admit: OK, one status per descriptor, without a limit (fail open).
    Ok,
    /// Reject: OVER_LIMIT, with `Retry-After` and [`OVERLOADED_HEADER`] (fail closed).
    OverLimit,
}

/// The response header an OVER_LIMIT overload answer carries (value `true`), so a rejection
/// floodgate made to protect itself is told apart from one a limit made.
pub const OVERLOADED_HEADER: &str = "x-floodgate-overloaded";

/// Seconds an OVER_LIMIT overload answer asks the client to wait: overload is momentary.
pub const OVERLOADED_RETRY_AFTER_SECONDS: u32 = 1;

impl OverloadAnswer {
    pub const ALL: [OverloadAnswer; 3] = [
        OverloadAnswer::Unavailable,
        OverloadAnswer::Ok,
        OverloadAnswer::OverLimit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OverloadAnswer::Unavailable => "unavailable",
            OverloadAnswer::Ok => "ok",
            OverloadAnswer::OverLimit => "over_limit",
        }
    }
}

impl fmt::Display for OverloadAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown `--overload-answer`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown overload answer '{0}': use unavailable, ok or over_limit")]
pub struct UnknownOverloadAnswer(pub String);

impl std::str::FromStr for OverloadAnswer {
    type Err = UnknownOverloadAnswer;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|answer| answer.name() == text)
            .ok_or_else(|| UnknownOverloadAnswer(text.to_owned()))
    }
}

/// What the shell sends for a refused call.
#[derive(Debug, Clone, PartialEq)]
pub enum OverloadReply {
    /// A gRPC UNAVAILABLE status.
    Unavailable,
    /// A rate-limit answer, decided without counting anything.
    Answer(Response),
}

/// The reply to a call of `descriptor_count` descriptors refused under `answer`.
pub fn overload_reply(answer: OverloadAnswer, descriptor_count: usize) -> OverloadReply {
    let code = match answer {
        OverloadAnswer::Unavailable => return OverloadReply::Unavailable,
        OverloadAnswer::Ok => Code::Ok,
        OverloadAnswer::OverLimit => Code::OverLimit,
    };
    let status = DescriptorStatus {
        code,
        current_limit: None,
        in_flight_limit: None,
        limit_remaining: 0,
        duration_until_reset: None,
        rule_path: None,
        shadowed: false,
        quota: false,
    };
    let response_headers = match answer {
        OverloadAnswer::OverLimit => vec![
            (
                "retry-after".to_owned(),
                OVERLOADED_RETRY_AFTER_SECONDS.to_string(),
            ),
            (OVERLOADED_HEADER.to_owned(), "true".to_owned()),
        ],
        OverloadAnswer::Ok | OverloadAnswer::Unavailable => Vec::new(),
    };
    OverloadReply::Answer(Response {
        overall_code: code,
        statuses: vec![status; descriptor_count],
        response_headers,
        // Nothing was decided, so there is nothing to tell a log about.
        dynamic_metadata: None,
    })
}

/// A `grpc-timeout` value that is not `<1-8 digits><H|M|S|m|u|n>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid grpc-timeout {0:?}: expected 1 to 8 digits and a unit (H, M, S, m, u, n)")]
pub struct InvalidGrpcTimeout(pub String);

/// Parses a `grpc-timeout` header value (gRPC over HTTP/2: `TimeoutValue TimeoutUnit`, at most
/// 8 digits, which also keeps every product below `u64::MAX`).
pub fn parse_grpc_timeout(text: &str) -> Result<Duration, InvalidGrpcTimeout> {
    let invalid = || InvalidGrpcTimeout(text.to_owned());
    let unit_at = text.len().checked_sub(1).ok_or_else(invalid)?;
    let (digits, unit) = (text.get(..unit_at), text.get(unit_at..));
    let (Some(digits), Some(unit)) = (digits, unit) else {
        return Err(invalid());
    };
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    let value: u64 = digits.parse().map_err(|_| invalid())?;
    Ok(match unit {
        "H" => Duration::from_secs(value * 3600),
        "M" => Duration::from_secs(value * 60),
        "S" => Duration::from_secs(value),
        "m" => Duration::from_millis(value),
        "u" => Duration::from_micros(value),
        "n" => Duration::from_nanos(value),
        _ => return Err(invalid()),
    })
}

/// How much of a caller's time budget is left when the call is picked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// The caller set no deadline.
    Unbounded,
    /// This much time is left to decide.
    Remaining(Duration),
    /// The caller has given up already: deciding would be wasted work.
    Expired,
}

/// The budget of a call with `timeout` (from `grpc-timeout`) that has waited `waited` since it
/// arrived.
pub fn remaining_budget(timeout: Option<Duration>, waited: Duration) -> Budget {
    match timeout {
        None => Budget::Unbounded,
        Some(timeout) => match timeout.checked_sub(waited) {
            Some(left) if !left.is_zero() => Budget::Remaining(left),
            _ => Budget::Expired,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_by_name() {
        for answer in OverloadAnswer::ALL {
            assert_eq!(answer.name().parse::<OverloadAnswer>(), Ok(answer));
        }
        assert!("deny".parse::<OverloadAnswer>().is_err());
        assert_eq!(OverloadAnswer::default(), OverloadAnswer::Unavailable);
    }

    #[test]
    fn unavailable_is_a_status_not_an_answer() {
        assert_eq!(
            overload_reply(OverloadAnswer::Unavailable, 3),
            OverloadReply::Unavailable
        );
    }

    #[test]
    fn ok_admits_every_descriptor_without_a_limit_or_headers() {
        let OverloadReply::Answer(response) = overload_reply(OverloadAnswer::Ok, 2) else {
            panic!("ok must be an answer");
        };
        assert_eq!(response.overall_code, Code::Ok);
        assert_eq!(response.statuses.len(), 2);
        assert!(response
            .statuses
            .iter()
            .all(|status| status.code == Code::Ok && status.current_limit.is_none()));
        assert!(response.response_headers.is_empty());
    }

    #[test]
    fn over_limit_rejects_with_retry_after_and_the_overloaded_header() {
        let OverloadReply::Answer(response) = overload_reply(OverloadAnswer::OverLimit, 1) else {
            panic!("over_limit must be an answer");
        };
        assert_eq!(response.overall_code, Code::OverLimit);
        assert_eq!(response.statuses[0].code, Code::OverLimit);
        assert_eq!(
            response.response_headers,
            vec![
                ("retry-after".to_owned(), "1".to_owned()),
                ("x-floodgate-overloaded".to_owned(), "true".to_owned()),
            ]
        );
    }

    #[test]
    fn grpc_timeouts_parse_in_every_unit() {
        for (text, expected) in [
            ("2H", Duration::from_secs(7200)),
            ("3M", Duration::from_secs(180)),
            ("1S", Duration::from_secs(1)),
            ("20m", Duration::from_millis(20)),
            ("250u", Duration::from_micros(250)),
            ("1n", Duration::from_nanos(1)),
            ("99999999H", Duration::from_secs(99_999_999 * 3600)),
        ] {
            assert_eq!(parse_grpc_timeout(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn malformed_grpc_timeouts_are_refused() {
        for text in [
            "",
            "m",
            "20",
            "20x",
            "-1m",
            "+1m",
            "123456789m",
            "1.5S",
            " 1S",
            "é",
            "1é",
        ] {
            assert!(parse_grpc_timeout(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn the_budget_is_what_is_left_of_the_timeout() {
        let ms = Duration::from_millis;
        assert_eq!(remaining_budget(None, ms(500)), Budget::Unbounded);
        assert_eq!(
            remaining_budget(Some(ms(20)), ms(5)),
            Budget::Remaining(ms(15))
        );
        assert_eq!(remaining_budget(Some(ms(20)), ms(20)), Budget::Expired);
        assert_eq!(remaining_budget(Some(ms(20)), ms(25)), Budget::Expired);
        assert_eq!(
            remaining_budget(Some(Duration::from_nanos(1)), Duration::ZERO),
            Budget::Remaining(Duration::from_nanos(1))
        );
    }
}
