//! The gRPC shell: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`.

use std::sync::Arc;
use std::time::Instant;

use tonic::{Request, Response, Status};
use tracing::{Instrument as _, Span};

use super::admission::{expired_status, overloaded_status, Admission, Admitted};
use super::convert::{request_from_wire, response_to_wire};
use super::kuadrant;
use crate::core::decision::error_codes::GrpcCode;
use crate::core::decision::overload::{overload_reply, OverloadReply};
use crate::core::decision::semantics::Traces;
use crate::engine::limitador::Limitador;
use crate::engine::limiter::{LimitError, Limiter};
use crate::server::proto::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use crate::server::proto::{RateLimitRequest, RateLimitResponse};
use crate::store::Store;
use crate::telemetry::reference::stats as reference_stats;
use crate::telemetry::traces::{self, RemoteParent};

pub struct RateLimitGrpc<S> {
    limiter: Arc<Limiter<S>>,
    admission: Admission,
    /// Limitador's limits: a domain that is one of its namespaces is answered from them.
    limitador: Option<Arc<Limitador>>,
}

impl<S: Store> RateLimitGrpc<S> {
    /// The service behind its admission control (`server::admission`).
    pub fn admitted_server(
        limiter: Arc<Limiter<S>>,
        limitador: Option<Arc<Limitador>>,
        admission: &Admission,
    ) -> RateLimitServiceServer<Self> {
        RateLimitServiceServer::new(Self {
            limiter,
            limitador,
            admission: admission.clone(),
        })
    }
}

#[tonic::async_trait]
impl<S: Store> RateLimitService for RateLimitGrpc<S> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        // The reference's gRPC server stats count every call, answered or failed; without
        // them no clock is read here.
        let Some(stats) = reference_stats::global() else {
            return self.answer(request).await;
        };
        let started = Instant::now();
        let answer = self.answer(request).await;
        stats.grpc_call(started.elapsed().as_secs_f64());
        answer
    }
}

impl<S: Store> RateLimitGrpc<S> {
    async fn answer(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let admitted = Admitted::check(&self.admission);
        let start = match admitted {
            Admitted::Decide { start, .. } => start,
            Admitted::Expired => return Err(expired_status()),
            Admitted::Overloaded(answer) => {
                let descriptors = request.get_ref().descriptors.len();
                return match overload_reply(answer, descriptors) {
                    OverloadReply::Unavailable => Err(overloaded_status()),
                    OverloadReply::Answer(response) => {
                        Ok(Response::new(response_to_wire(response)))
                    }
                };
            }
        };
        if let Some(limitador) = self.limitador_of(request.get_ref()) {
            let answer = kuadrant::should_rate_limit(&limitador, request.into_inner()).await;
            return answer.map(Response::new);
        }
        // Envoy sends its trace context (W3C `traceparent` or B3) as metadata when tracing
        // is on; the decision's span continues that trace.
        let metadata = request.metadata();
        let parent = RemoteParent::from_headers(|name| metadata.get(name)?.to_str().ok());
        let (parent, server_span) = self.server_span(parent);
        let request = request_from_wire(request.into_inner());
        // Never past the call's deadline: `server::grpc_deadline` drops this future then, and
        // counts the call as a deadline rejection.
        let deciding = self.limiter.decide_within(&request, parent, start);
        // Without a span, the decision's future is awaited where it is made: wrapped, it
        // would be moved into the wrapper first, a copy of it on every call.
        let decided = if server_span.is_disabled() {
            deciding.await
        } else {
            deciding.instrument(server_span.clone()).await
        };
        let answer = match decided {
            Ok(response) => Ok(Response::new(response_to_wire(response))),
            Err(error) => Err(self.error_status(&error)),
        };
        let code = answer
            .as_ref()
            .map_or_else(Status::code, |_| tonic::Code::Ok);
        traces::record_grpc_code(&server_span, code as i32);
        answer
    }

    /// Limitador's limits when the request's domain is one of their namespaces.
    fn limitador_of(&self, request: &RateLimitRequest) -> Option<Arc<Limitador>> {
        self.limitador
            .as_ref()
            .filter(|limitador| limitador.has_namespace(&request.domain))
            .cloned()
    }

    /// Under the reference's traces, the server span its `otelgrpc` interceptor makes of the
    /// call, continuing the caller's trace, with the decision's span inside it; else no span
    /// here (the decision's span is the server span, and continues the caller's trace).
    fn server_span(&self, parent: RemoteParent) -> (RemoteParent, Span) {
        if self.limiter.settings().traces != Traces::AsTheReference {
            return (parent, Span::none());
        }
        let span = traces::reference_grpc_span();
        parent.adopt(&span);
        (RemoteParent::none(), span)
    }

    /// The status of a call not decided: its code as `--error-codes` says, its message the
    /// error's.
    fn error_status(&self, error: &LimitError) -> Status {
        let Some(why) = error.undecided() else {
            return overloaded_status();
        };
        let code = match self.limiter.settings().error_codes.answer(why).grpc {
            GrpcCode::Unknown => tonic::Code::Unknown,
            GrpcCode::InvalidArgument => tonic::Code::InvalidArgument,
            GrpcCode::Unavailable => tonic::Code::Unavailable,
        };
        Status::new(code, error.to_string())
    }
}
