//! The gRPC shell of Limitador's limits: `kuadrant.service.ratelimit.v1.RateLimitService`
//! (CheckRateLimit, Report, Reserve, Commit), and Envoy's `ShouldRateLimit` for a domain that
//! is a Limitador namespace. Each call is decoded, asked of `engine::limitador`, and encoded as
//! Limitador answers it: an empty domain is `UNKNOWN`, a failure `UNAVAILABLE`.

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use crate::engine::limitador::expression::Bindings;
use crate::engine::limitador::{descriptor_maps, Answer, Limitador, LimitadorError};
use crate::server::proto::kuadrant::service::ratelimit::v1::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use crate::server::proto::kuadrant::service::ratelimit::v1::{
    CommitRequest, CommitResponse, ReserveRequest, ReserveResponse,
};
use crate::server::proto::rate_limit_response::Code;
use crate::server::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};

/// `kuadrant.service.ratelimit.v1.RateLimitService` over Limitador's limits.
pub struct KuadrantGrpc {
    limitador: Arc<Limitador>,
}

impl KuadrantGrpc {
    pub fn server(limitador: Arc<Limitador>) -> RateLimitServiceServer<Self> {
        RateLimitServiceServer::new(Self { limitador })
    }
}

/// A call's descriptors as Limitador binds them.
fn bindings(descriptors: &[RateLimitDescriptor]) -> Bindings {
    Bindings::descriptors(descriptor_maps(descriptors.iter().map(|descriptor| {
        descriptor
            .entries
            .iter()
            .map(|entry| (entry.key.as_str(), entry.value.as_str()))
    })))
}

/// A hold's ttl as Limitador reads it: a negative or unset Duration asks for the maximum.
fn hold_ttl(ttl: Option<prost_types::Duration>) -> Option<Duration> {
    ttl.and_then(|ttl| Duration::try_from(ttl).ok())
}

/// `hits_addend`, 1 when unset (protobuf's 0).
fn hits(request: &RateLimitRequest) -> u64 {
    match request.hits_addend {
        0 => 1,
        hits => u64::from(hits),
    }
}

/// The request when it names a namespace (Limitador answers `UNKNOWN` to an empty domain).
fn with_namespace(request: Request<RateLimitRequest>) -> Option<RateLimitRequest> {
    Some(request.into_inner()).filter(|request| !request.domain.is_empty())
}

fn response(code: Code) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: code as i32,
        ..RateLimitResponse::default()
    }
}

fn code_of(answer: &Answer) -> Code {
    if answer.limited {
        Code::OverLimit
    } else {
        Code::Ok
    }
}

/// What Envoy and the wasm-shim are told of a call that failed: Limitador's `UNAVAILABLE`, so
/// `failure_mode_deny` applies.
fn unavailable(error: &LimitadorError) -> Status {
    tracing::error!(%error, "a Limitador-format call failed");
    Status::unavailable("Service unavailable")
}

/// Envoy's `ShouldRateLimit` against Limitador's limits: the domain is the namespace, the
/// request's `hits_addend` is checked and, when admitted, counted.
pub async fn should_rate_limit(
    limitador: &Limitador,
    request: RateLimitRequest,
) -> Result<RateLimitResponse, Status> {
    if request.domain.is_empty() {
        return Ok(response(Code::Unknown));
    }
    let answer = limitador
        .check(
            &request.domain,
            bindings(&request.descriptors),
            hits(&request),
            true,
        )
        .await
        .map_err(|error| unavailable(&error))?;
    Ok(response(code_of(&answer)))
}

#[tonic::async_trait]
impl RateLimitService for KuadrantGrpc {
    async fn check_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let Some(request) = with_namespace(request) else {
            return Ok(Response::new(response(Code::Unknown)));
        };
        // As Limitador's CheckRateLimit: is one more within every limit.
        let answer = self
            .limitador
            .check(&request.domain, bindings(&request.descriptors), 1, false)
            .await
            .map_err(|error| unavailable(&error))?;
        Ok(Response::new(response(code_of(&answer))))
    }

    async fn report(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let Some(request) = with_namespace(request) else {
            return Ok(Response::new(response(Code::Unknown)));
        };
        self.limitador
            .report(
                &request.domain,
                bindings(&request.descriptors),
                hits(&request),
            )
            .await
            .map_err(|error| unavailable(&error))?;
        Ok(Response::new(response(Code::Ok)))
    }

    async fn reserve(
        &self,
        request: Request<ReserveRequest>,
    ) -> Result<Response<ReserveResponse>, Status> {
        let request = request.into_inner();
        if request.domain.is_empty() {
            return Ok(Response::new(ReserveResponse {
                code: Code::Unknown as i32,
                reservation_id: String::new(),
            }));
        }
        // The amount as given, 0 included (Limitador reads it so; hits_addend's "0 means 1"
        // is Envoy's rule for its own field).
        let answer = self
            .limitador
            .reserve(
                &request.domain,
                bindings(&request.descriptors),
                request.amount,
                hold_ttl(request.ttl),
            )
            .await
            .map_err(|error| unavailable(&error))?;
        Ok(Response::new(ReserveResponse {
            code: code_of(&answer) as i32,
            reservation_id: answer.reservation_id.unwrap_or_default(),
        }))
    }

    async fn commit(
        &self,
        request: Request<CommitRequest>,
    ) -> Result<Response<CommitResponse>, Status> {
        let request = request.into_inner();
        // Limitador answers an empty domain with nothing counted and nothing released.
        if request.domain.is_empty() {
            return Ok(Response::new(CommitResponse {
                reservation_released: false,
            }));
        }
        let id = Some(request.reservation_id.as_str()).filter(|id| !id.is_empty());
        let released = self
            .limitador
            .commit(
                &request.domain,
                bindings(&request.descriptors),
                id,
                request.actual_amount,
            )
            .await
            .map_err(|error| unavailable(&error))?;
        Ok(Response::new(CommitResponse {
            reservation_released: released,
        }))
    }
}
