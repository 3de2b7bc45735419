//! How a call that cannot be decided is answered, on gRPC and on `/json` (`--error-codes`).
//! floodgate tells a bad request from a failed store; envoyproxy/ratelimit answers every error
//! with gRPC UNKNOWN (its errors are plain Go errors) and its `/json` handler answers every error
//! `400 Bad Request`. Either way Envoy's `failure_mode_deny` decides what the client gets.

/// Why a call was not decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undecided {
    /// The request cannot be decided (an empty domain, no descriptors…).
    InvalidRequest,
    /// The store failed, under the failure policy `error`.
    StoreUnavailable,
    /// No configuration has loaded since a start without one.
    NoConfiguration,
}

/// The gRPC status codes an undecided call gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrpcCode {
    Unknown,
    InvalidArgument,
    Unavailable,
}

/// What the body of an HTTP error says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpErrorBody {
    /// Why the call was not decided, and what to change.
    Reason,
    /// The status's own text (`Bad Request`), as Go's `http.Error` writes it.
    StatusText,
}

/// The answer to an undecided call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorAnswer {
    pub grpc: GrpcCode,
    pub http_status: u16,
    pub http_body: HttpErrorBody,
}

/// `--error-codes`: which answers undecided calls get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ErrorCodes {
    /// A bad request is INVALID_ARGUMENT (HTTP 400 with the reason), a failed store UNAVAILABLE
    /// (HTTP 503), no configuration UNKNOWN (HTTP 500): a client or a dashboard can tell them
    /// apart. floodgate's.
    #[default]
    Distinct,
    /// Every error is gRPC UNKNOWN with its message, and `/json` answers `400 Bad Request`:
    /// envoyproxy/ratelimit's.
    Unknown,
}

impl ErrorCodes {
    pub const ALL: [ErrorCodes; 2] = [ErrorCodes::Distinct, ErrorCodes::Unknown];

    /// The name `--error-codes` takes.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCodes::Distinct => "distinct",
            ErrorCodes::Unknown => "unknown",
        }
    }

    /// What a call not decided for `why` gets.
    pub fn answer(self, why: Undecided) -> ErrorAnswer {
        match self {
            ErrorCodes::Distinct => match why {
                Undecided::InvalidRequest => ErrorAnswer {
                    grpc: GrpcCode::InvalidArgument,
                    http_status: 400,
                    http_body: HttpErrorBody::Reason,
                },
                Undecided::StoreUnavailable => ErrorAnswer {
                    grpc: GrpcCode::Unavailable,
                    http_status: 503,
                    http_body: HttpErrorBody::Reason,
                },
                // The reference's own gRPC answer until a load succeeds.
                Undecided::NoConfiguration => ErrorAnswer {
                    grpc: GrpcCode::Unknown,
                    http_status: 500,
                    http_body: HttpErrorBody::Reason,
                },
            },
            ErrorCodes::Unknown => ErrorAnswer {
                grpc: GrpcCode::Unknown,
                http_status: 400,
                http_body: HttpErrorBody::StatusText,
            },
        }
    }
}

impl std::fmt::Display for ErrorCodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY_CAUSE: [Undecided; 3] = [
        Undecided::InvalidRequest,
        Undecided::StoreUnavailable,
        Undecided::NoConfiguration,
    ];

    #[test]
    fn distinct_codes_tell_a_bad_request_from_a_failed_store() {
        let answer = |why| ErrorCodes::Distinct.answer(why);
        assert_eq!(
            answer(Undecided::InvalidRequest).grpc,
            GrpcCode::InvalidArgument
        );
        assert_eq!(
            answer(Undecided::StoreUnavailable).grpc,
            GrpcCode::Unavailable
        );
        assert_eq!(answer(Undecided::StoreUnavailable).http_status, 503);
        assert_eq!(answer(Undecided::NoConfiguration).grpc, GrpcCode::Unknown);
        assert!(EVERY_CAUSE
            .iter()
            .all(|&why| answer(why).http_body == HttpErrorBody::Reason));
    }

    #[test]
    fn the_references_codes_are_unknown_and_bad_request_whatever_the_cause() {
        for why in EVERY_CAUSE {
            assert_eq!(
                ErrorCodes::Unknown.answer(why),
                ErrorAnswer {
                    grpc: GrpcCode::Unknown,
                    http_status: 400,
                    http_body: HttpErrorBody::StatusText,
                },
                "{why:?}"
            );
        }
    }
}
