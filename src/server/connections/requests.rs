//! Each request on a connection: marked open while it lives (so the connection is not taken
//! for idle), its body bounded in time, its answer's body carrying the mark until written.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::{Request, Response};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower::util::Oneshot;
use tower::ServiceExt;

use super::activity::{Activity, InFlight};

/// A request body that has not arrived in full within `--body-timeout-ms`.
#[derive(Debug, thiserror::Error)]
#[error(
    "the request body did not arrive within {} ms (--body-timeout-ms)",
    .limit.as_millis()
)]
pub struct BodyTimeout {
    limit: Duration,
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error(transparent)]
    Timeout(#[from] BodyTimeout),
    #[error("the request body could not be read: {0}")]
    Transport(#[from] hyper::Error),
}

/// What a listener's service gets as a request body: hyper's, bounded in time when the
/// listener bounds bodies.
pub struct RequestBody {
    inner: Incoming,
    deadline: Option<(Instant, Duration)>,
    /// Made at the first wait only: most bodies are in (or empty) when first polled.
    timer: Option<Pin<Box<Sleep>>>,
}

impl RequestBody {
    fn new(inner: Incoming, limit: Option<Duration>) -> Self {
        Self {
            inner,
            deadline: limit.map(|limit| (Instant::now() + limit, limit)),
            timer: None,
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(BodyError::from)));
        }
        let Some((deadline, limit)) = this.deadline else {
            return Poll::Pending;
        };
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                this.deadline = None;
                Poll::Ready(Some(Err(BodyTimeout { limit }.into())))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Whether a body error (as a handler's extractor reports it) was the body deadline.
pub fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error.downcast_ref::<BodyTimeout>().is_some()
            || matches!(
                error.downcast_ref::<BodyError>(),
                Some(BodyError::Timeout(_))
            )
        {
            return true;
        }
        cause = error.source();
    }
    false
}

/// An answer's body; the request stays open until it has been written (or dropped).
pub struct TrackedBody<B> {
    inner: B,
    _in_flight: Option<InFlight>,
}

impl<B: Body + Unpin> Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What every request of one connection goes through on its way to the listener's service.
#[derive(Clone)]
pub struct TrackedService<S> {
    pub inner: S,
    pub activity: Arc<Activity>,
    /// `--body-timeout-ms` on HTTP/1 listeners; gRPC calls have deadlines of their own.
    pub body_timeout: Option<Duration>,
    /// Handed to handlers as axum's `ConnectInfo` (the admin API logs who called).
    pub peer: Option<SocketAddr>,
    /// On HTTP/2 connections: the connection's long-lived streams, handed to the requests that
    /// may become one.
    pub streams: Option<super::streams::ConnectionStreams>,
}

impl<S, B> hyper::service::Service<Request<Incoming>> for TrackedService<S>
where
    S: tower::Service<Request<RequestBody>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body + Unpin,
{
    type Response = Response<TrackedBody<B>>;
    type Error = Infallible;
    type Future = Answering<Oneshot<S, Request<RequestBody>>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let in_flight = self.activity.request_started();
        let mut request = request.map(|body| RequestBody::new(body, self.body_timeout));
        if let Some(peer) = self.peer {
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
        }
        if let Some(streams) = &self.streams {
            if super::streams::may_stay_open(request.uri().path()) {
                request.extensions_mut().insert(streams.clone());
            }
        }
        Answering {
            answering: self.inner.clone().oneshot(request),
            in_flight: Some(in_flight),
        }
    }
}

pin_project! {
    /// A request's answer, its body holding the request open (the connection busy) until sent.
    pub struct Answering<F> {
        #[pin]
        answering: F,
        in_flight: Option<InFlight>,
    }
}

impl<F, B> Future for Answering<F>
where
    F: Future<Output = Result<Response<B>, Infallible>>,
{
    type Output = Result<Response<TrackedBody<B>>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.answering.poll(cx))?;
        let in_flight = this.in_flight.take();
        Poll::Ready(Ok(response.map(|inner| TrackedBody {
            inner,
            _in_flight: in_flight,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_timeout_is_found_however_it_is_wrapped() {
        let limit = Duration::from_secs(10);
        let wrapped: Box<dyn std::error::Error + Send + Sync> =
            Box::new(BodyError::from(BodyTimeout { limit }));
        let axum_error = axum::Error::new(wrapped);
        assert!(is_body_timeout(&axum_error));
        assert!(is_body_timeout(&BodyTimeout { limit }));
        assert!(!is_body_timeout(&std::io::Error::other("reset")));
        assert_eq!(
            BodyTimeout { limit }.to_string(),
            "the request body did not arrive within 10000 ms (--body-timeout-ms)"
        );
    }
}
