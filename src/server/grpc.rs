//! The gRPC shell: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::convert::{request_from_wire, response_to_wire};
use crate::limiter::{LimitError, Limiter};
use crate::proto::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use crate::proto::{RateLimitRequest, RateLimitResponse};
use crate::store::Store;
use crate::telemetry::traces::RemoteParent;

pub struct RateLimitGrpc<S> {
    limiter: Arc<Limiter<S>>,
}

impl<S: Store> RateLimitGrpc<S> {
    pub fn server(limiter: Arc<Limiter<S>>) -> RateLimitServiceServer<Self> {
        RateLimitServiceServer::new(Self { limiter })
    }
}

#[tonic::async_trait]
impl<S: Store> RateLimitService for RateLimitGrpc<S> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        // Envoy sends its trace context (W3C `traceparent` or B3) as metadata when tracing
        // is on; the decision's span continues that trace.
        let metadata = request.metadata();
        let parent = RemoteParent::from_headers(|name| metadata.get(name)?.to_str().ok());
        let request = request_from_wire(request.into_inner());
        match self.limiter.decide_traced(&request, parent).await {
            Ok(response) => Ok(Response::new(response_to_wire(response))),
            Err(LimitError::InvalidRequest(invalid)) => {
                Err(Status::invalid_argument(invalid.to_string()))
            }
            Err(LimitError::Store(error)) => Err(Status::unavailable(error.to_string())),
        }
    }
}
