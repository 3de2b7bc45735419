//! Every gRPC call's deadline, from its headers to its answer: the caller's `grpc-timeout`
//! (which tonic's own server enforced before floodgate drove its connections itself), and for
//! unary calls that come without one, `--grpc-default-deadline-ms`. Without it a client could
//! open streams that send headers and never their message, and each would live until its
//! connection closed. Streams (health Watch, reflection, and later RLQS) get no default: they
//! are meant to stay open, watched by TCP keepalive (`server::connections`).
//!
//! The call's clock (when it arrived, how long it may take) is read once here, from its
//! headers, and lent to the call's task: admission (`server::admission`) reads it there
//! rather than from a request extension, which would cost each call a map of its own and
//! tonic's conversions around an interceptor. The timer is armed only when the answer is not
//! ready at the first poll: a decision the memory store makes at once never touches the
//! runtime's timer wheel.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::header::HeaderName;
use hyper::{HeaderMap, Request, Response};
use pin_project_lite::pin_project;
use tokio::task::futures::TaskLocalFuture;
use tokio::time::Sleep;
use tonic::Status;

use crate::core::decision::overload::parse_grpc_timeout;
use crate::telemetry::metrics::{self, OverloadReason};

tokio::task_local! {
    /// The clock of the call whose task this is (set by [`GrpcDeadline`]).
    static CALL_CLOCK: CallClock;
}

/// When a call arrived (its headers were read) and how long it may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallClock {
    pub arrived: Instant,
    /// `None`: no deadline (a stream that sent no `grpc-timeout`).
    pub timeout: Option<Duration>,
}

impl CallClock {
    /// The clock of the call being answered on this task; `None` outside a call that came
    /// through [`GrpcDeadline`] (a service driven in process, as the fuzz targets do).
    pub fn of_this_call() -> Option<Self> {
        CALL_CLOCK.try_with(|clock| *clock).ok()
    }

    /// Runs `f` as if it answered a call with this clock.
    #[cfg(test)]
    pub fn lend<R>(self, f: impl FnOnce() -> R) -> R {
        CALL_CLOCK.sync_scope(self, f)
    }
}

/// A unary method floodgate serves: its calls get `--grpc-default-deadline-ms` when they send
/// no `grpc-timeout` (streams, not listed, get none).
struct UnaryMethod {
    path: String,
    /// Under admission control (`--max-in-flight`, deadline rejections counted).
    admitted: bool,
}

/// The unary methods, by path.
fn unary_methods() -> Vec<UnaryMethod> {
    use crate::server::proto::rate_limit_service_server::SERVICE_NAME;
    use envoy_types::pb::envoy::service::auth::v3::authorization_server::SERVICE_NAME as AUTHZ;
    let method = |path: String, admitted| UnaryMethod { path, admitted };
    vec![
        method(format!("/{SERVICE_NAME}/ShouldRateLimit"), true),
        method(format!("/{AUTHZ}/Check"), true),
        method("/grpc.health.v1.Health/Check".to_owned(), false),
    ]
}

/// The header a gRPC caller sends its deadline in. A name made once: looked up by text, the
/// header map would parse and validate the name again on every call.
const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// A call's deadline: the caller's `grpc-timeout`, capped for unary calls by (and defaulting
/// to) `default_unary`.
pub fn call_deadline(
    headers: &HeaderMap,
    unary: bool,
    default_unary: Duration,
) -> Option<Duration> {
    let caller = headers
        .get(&GRPC_TIMEOUT)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| parse_grpc_timeout(text).ok());
    let default = unary.then_some(default_unary);
    match (caller, default) {
        (Some(caller), Some(default)) => Some(caller.min(default)),
        (caller, default) => caller.or(default),
    }
}

/// The gRPC routes, each call answered by its deadline (DEADLINE_EXCEEDED past it).
#[derive(Clone)]
pub struct GrpcDeadline<S> {
    inner: S,
    unary_methods: Arc<[UnaryMethod]>,
    default_unary: Duration,
}

impl<S> GrpcDeadline<S> {
    pub fn new(inner: S, default_unary: Duration) -> Self {
        Self {
            inner,
            unary_methods: unary_methods().into(),
            default_unary,
        }
    }
}

impl<S, B> tower::Service<Request<B>> for GrpcDeadline<S>
where
    S: tower::Service<Request<B>, Response = Response<tonic::body::Body>, Error = Infallible>,
{
    type Response = Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = WithinDeadline<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let arrived = Instant::now();
        let method = self
            .unary_methods
            .iter()
            .find(|method| method.path == request.uri().path());
        let timeout = call_deadline(request.headers(), method.is_some(), self.default_unary);
        let clock = CallClock { arrived, timeout };
        WithinDeadline {
            answering: CALL_CLOCK.scope(clock, self.inner.call(request)),
            deadline: timeout.and_then(|timeout| arrived.checked_add(timeout)),
            admitted: method.is_some_and(|method| method.admitted),
            timer: None,
        }
    }
}

pin_project! {
    /// A call's answer, or DEADLINE_EXCEEDED once its deadline passes first.
    pub struct WithinDeadline<F> {
        #[pin]
        answering: TaskLocalFuture<CallClock, F>,
        deadline: Option<Instant>,
        admitted: bool,
        // Armed at the first poll that finds no answer.
        #[pin]
        timer: Option<Sleep>,
    }
}

impl<F> Future for WithinDeadline<F>
where
    F: Future<Output = Result<Response<tonic::body::Body>, Infallible>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        if let Poll::Ready(answer) = this.answering.poll(cx) {
            return Poll::Ready(answer);
        }
        let Some(deadline) = *this.deadline else {
            return Poll::Pending;
        };
        if this.timer.is_none() {
            this.timer
                .set(Some(tokio::time::sleep_until(deadline.into())));
        }
        match this.timer.as_pin_mut().map(|timer| timer.poll(cx)) {
            Some(Poll::Ready(())) => {
                // Admitted calls answer before their deadline or not at all: one that had not
                // answered is a deadline rejection, whether it was still arriving or deciding.
                if *this.admitted {
                    metrics::overload_rejected(OverloadReason::Deadline);
                }
                Poll::Ready(Ok(Status::deadline_exceeded(
                    "no answer within the call's deadline (its grpc-timeout, or \
                     --grpc-default-deadline-ms for a unary call that sends none)",
                )
                .into_http()))
            }
            _ => Poll::Pending,
        }
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

    fn paths(keep: impl Fn(&UnaryMethod) -> bool) -> Vec<String> {
        unary_methods()
            .into_iter()
            .filter(|method| keep(method))
            .map(|method| method.path)
            .collect()
    }

    #[test]
    fn the_unary_methods_are_rls_authz_and_health_check() {
        let methods = paths(|_| true);
        assert!(methods
            .contains(&"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit".to_owned()));
        assert!(methods.contains(&"/envoy.service.auth.v3.Authorization/Check".to_owned()));
        assert!(methods.contains(&"/grpc.health.v1.Health/Check".to_owned()));
    }

    #[test]
    fn only_the_deciding_methods_are_under_admission() {
        assert_eq!(
            paths(|method| method.admitted),
            [
                "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                "/envoy.service.auth.v3.Authorization/Check"
            ]
        );
    }
}
