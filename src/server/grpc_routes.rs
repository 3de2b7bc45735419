//! The gRPC listener's routes: `ShouldRateLimit`, the call floodgate exists for and nearly every
//! call it gets, goes straight to its service; every other path goes through tonic's router.
//! That router is axum's: path matching, a boxed service and URL parameters stored in a
//! request extension map made for the purpose. Together they cost each call more than a
//! decision in the memory store spends on its counters, to find a service one string compare
//! finds. The service is also registered in the router, so a method of its that does not exist
//! still gets the router's UNIMPLEMENTED.

use std::convert::Infallible;
use std::task::{Context, Poll};

use futures_util::future::Either;
use hyper::{Request, Response};

use crate::server::proto::rate_limit_service_server::SERVICE_NAME;

/// `hot` for its one path, `routes` for the rest.
#[derive(Clone)]
pub struct GrpcRoutes<H, R> {
    hot: H,
    routes: R,
}

impl<H, R> GrpcRoutes<H, R> {
    /// `rls` (RateLimitService's server) answers `ShouldRateLimit`, `routes` everything else.
    pub fn with_rls_first(rls: H, routes: R) -> Self {
        Self { hot: rls, routes }
    }
}

/// Whether `path` is `/<RateLimitService>/ShouldRateLimit`, compared in place: the routes are
/// cloned for every request, and a path of their own would be a string copied with them.
fn is_should_rate_limit(path: &str) -> bool {
    path.strip_prefix('/')
        .and_then(|path| path.strip_prefix(SERVICE_NAME))
        == Some("/ShouldRateLimit")
}

impl<H, R, B, Answer> tower::Service<Request<B>> for GrpcRoutes<H, R>
where
    H: tower::Service<Request<B>, Response = Response<Answer>, Error = Infallible>,
    R: tower::Service<Request<B>, Response = Response<Answer>, Error = Infallible>,
{
    type Response = Response<Answer>;
    type Error = Infallible;
    type Future = Either<H::Future, R::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Both are always ready (tonic's servers and axum's router never push back).
        match self.hot.poll_ready(cx) {
            Poll::Ready(Ok(())) => self.routes.poll_ready(cx),
            pending_or_error => pending_or_error,
        }
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if is_should_rate_limit(request.uri().path()) {
            Either::Left(self.hot.call(request))
        } else {
            Either::Right(self.routes.call(request))
        }
    }
}

#[cfg(test)]
mod tests {
    use tower::ServiceExt as _;

    use super::*;

    /// A service that answers with its own name.
    fn named(
        name: &'static str,
    ) -> impl tower::Service<
        Request<()>,
        Response = Response<&'static str>,
        Error = Infallible,
        Future = std::future::Ready<Result<Response<&'static str>, Infallible>>,
    > + Clone {
        tower::service_fn(move |_: Request<()>| std::future::ready(Ok(Response::new(name))))
    }

    async fn answered_by(path: &str) -> &'static str {
        let routes = GrpcRoutes::with_rls_first(named("rls"), named("router"));
        let request = Request::post(path)
            .body(())
            .unwrap_or_else(|error| panic!("request: {error}"));
        match routes.oneshot(request).await {
            Ok(response) => response.into_body(),
            Err(never) => match never {},
        }
    }

    #[tokio::test]
    async fn should_rate_limit_goes_to_rls_and_every_other_path_to_the_router() {
        assert_eq!(
            answered_by("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit").await,
            "rls"
        );
        for path in [
            "/envoy.service.ratelimit.v3.RateLimitService/Other",
            "/grpc.health.v1.Health/Check",
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimitX",
            "/envoy.service.ratelimit.v3.RateLimitServiceX/ShouldRateLimit",
            "/envoy.service.ratelimit.v3.RateLimitService//ShouldRateLimit",
        ] {
            assert_eq!(answered_by(path).await, "router", "{path}");
        }
    }
}
