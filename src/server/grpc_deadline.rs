//! Every gRPC call's deadline, from its headers to its answer: the caller's `grpc-timeout`
//! (which tonic's own server enforced before floodgate drove its connections itself), and for
//! unary calls that come without one, `--grpc-default-deadline-ms`. Without it a client could
//! open streams that send headers and never their message, and each would live until its
//! connection closed. Streams (health Watch, reflection, and later RLQS) get no default: they
//! are meant to stay open, watched by TCP keepalive (`server::connections`).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::{HeaderMap, Request, Response};
use tonic::Status;

use crate::core::decision::overload::parse_grpc_timeout;

/// The unary methods floodgate serves, by path: the ones that get the default deadline.
pub fn unary_methods() -> Vec<String> {
    use crate::server::proto::rate_limit_service_server::SERVICE_NAME;
    vec![
        format!("/{SERVICE_NAME}/ShouldRateLimit"),
        "/grpc.health.v1.Health/Check".to_owned(),
    ]
}

/// The deadline of one call: the shorter of the caller's and, for a unary call, the default.
pub fn call_deadline(
    headers: &HeaderMap,
    unary: bool,
    default_unary: Duration,
) -> Option<Duration> {
    let caller = headers
        .get("grpc-timeout")
        .and_then(|value| value.to_str().ok())
        .and_then(|text| parse_grpc_timeout(text).ok());
    let default = unary.then_some(default_unary);
    match (caller, default) {
        (Some(caller), Some(default)) => Some(caller.min(default)),
        (caller, default) => caller.or(default),
    }
}

/// A gRPC service (tonic's `Routes`) whose calls end at their deadline with
/// DEADLINE_EXCEEDED.
#[derive(Clone)]
pub struct GrpcDeadline<S> {
    inner: S,
    unary: Arc<[String]>,
    default_unary: Duration,
}

impl<S> GrpcDeadline<S> {
    pub fn new(inner: S, default_unary: Duration) -> Self {
        Self {
            inner,
            unary: unary_methods().into(),
            default_unary,
        }
    }
}

impl<S, B> tower::Service<Request<B>> for GrpcDeadline<S>
where
    S: tower::Service<Request<B>, Response = Response<tonic::body::Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let unary = self.unary.iter().any(|path| path == request.uri().path());
        let deadline = call_deadline(request.headers(), unary, self.default_unary);
        let answering = self.inner.call(request);
        let Some(deadline) = deadline else {
            return Box::pin(answering);
        };
        Box::pin(async move {
            match tokio::time::timeout(deadline, answering).await {
                Ok(answered) => answered,
                Err(_elapsed) => Ok(Status::deadline_exceeded(
                    "no answer within the call's deadline (its grpc-timeout, or \
                     --grpc-default-deadline-ms for a unary call that sends none)",
                )
                .into_http()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(timeout: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(timeout) = timeout.and_then(|text| text.parse().ok()) {
            headers.insert("grpc-timeout", timeout);
        }
        headers
    }

    #[test]
    fn the_shorter_of_the_callers_deadline_and_the_default_applies_to_unary_calls() {
        let default = Duration::from_secs(10);
        assert_eq!(call_deadline(&headers(None), true, default), Some(default));
        assert_eq!(
            call_deadline(&headers(Some("20m")), true, default),
            Some(Duration::from_millis(20))
        );
        assert_eq!(
            call_deadline(&headers(Some("60S")), true, default),
            Some(default)
        );
    }

    #[test]
    fn streams_keep_only_the_callers_deadline() {
        let default = Duration::from_secs(10);
        assert_eq!(call_deadline(&headers(None), false, default), None);
        assert_eq!(
            call_deadline(&headers(Some("60S")), false, default),
            Some(Duration::from_secs(60))
        );
        assert_eq!(call_deadline(&headers(Some("bogus")), false, default), None);
    }

    #[test]
    fn the_unary_methods_are_rls_and_health_check() {
        let methods = unary_methods();
        assert!(methods
            .contains(&"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit".to_owned()));
        assert!(methods.contains(&"/grpc.health.v1.Health/Check".to_owned()));
    }
}
