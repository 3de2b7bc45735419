//! `envoy.service.auth.v3.Authorization/Check` on the gRPC port: Envoy's ext_authz filter, and
//! Istio's `envoyExtAuthzGrpc` provider behind an `AuthorizationPolicy` of action CUSTOM.
//!
//! A call that cannot be decided gets a gRPC error, and Envoy then applies its own failure
//! policy: `failure_mode_allow: true` (Istio: the provider's `failOpen`) lets the request
//! through, otherwise the client gets `status_on_error` (403 by default, Istio's too). Which
//! store failures are errors at all is floodgate's failure policy: under `fail_open` or
//! `fail_closed` the limiter answers, and only under `error` does Envoy's policy apply.

use std::sync::Arc;

use envoy_types::pb::envoy::service::auth::v3::authorization_server::{
    Authorization, AuthorizationServer,
};
use envoy_types::pb::envoy::service::auth::v3::{CheckRequest, CheckResponse};
use tonic::{Request, Response, Status};

use super::answer::Answer;
use super::convert::{answer_to_wire, attributes_from_wire};
use super::plan::{plan, Plan};
use crate::core::decision::overload::{overload_reply, OverloadReply};
use crate::engine::limiter::{LimitError, Limiter};
use crate::server::admission::{expired_status, overloaded_status, Admission, Admitted};
use crate::store::Store;
use crate::telemetry::paced_log::{ClientText, PacedLog};
use crate::telemetry::traces::RemoteParent;

/// Lines about calls not answered: at most one per interval (`telemetry::paced_log`).
static NOT_ANSWERED: PacedLog = PacedLog::every(std::time::Duration::from_secs(10));

pub struct AuthorizationGrpc<S> {
    limiter: Arc<Limiter<S>>,
    admission: Admission,
}

impl<S: Store> AuthorizationGrpc<S> {
    /// The service behind the in-flight bound it shares with RLS and the HTTP checks.
    pub fn admitted_server(
        limiter: Arc<Limiter<S>>,
        admission: &Admission,
    ) -> AuthorizationServer<Self> {
        AuthorizationServer::new(Self {
            limiter,
            admission: admission.clone(),
        })
    }
}

#[tonic::async_trait]
impl<S: Store> Authorization for AuthorizationGrpc<S> {
    async fn check(
        &self,
        request: Request<CheckRequest>,
    ) -> Result<Response<CheckResponse>, Status> {
        let admitted = Admitted::check(&self.admission);
        let metadata = request.metadata();
        let parent = RemoteParent::from_headers(|name| metadata.get(name)?.to_str().ok());
        self.answer(request.get_ref(), &admitted, parent).await
    }
}

impl<S: Store> AuthorizationGrpc<S> {
    async fn answer(
        &self,
        check: &CheckRequest,
        admitted: &Admitted<'_>,
        parent: RemoteParent,
    ) -> Result<Response<CheckResponse>, Status> {
        let (named, attributes) = attributes_from_wire(check);
        let (request, deny_body) = match plan(&self.limiter.rules(), named, &attributes) {
            Plan::Decide { request, deny_body } => (request, deny_body),
            Plan::Allow => {
                return Ok(answered(Answer::Allowed {
                    headers: Vec::new(),
                }))
            }
            Plan::UnknownProfile(message) => return Err(not_answered(Status::not_found(message))),
            Plan::Refuse(error) => {
                return Err(not_answered(Status::invalid_argument(error.to_string())))
            }
        };
        let decision = match admitted {
            Admitted::Decide { .. } => self.limiter.decide_traced(&request, parent).await,
            Admitted::Expired => return Err(expired_status()),
            Admitted::Overloaded(overload) => {
                match overload_reply(*overload, request.descriptors.len()) {
                    OverloadReply::Answer(decision) => Ok(decision),
                    OverloadReply::Unavailable => return Err(overloaded_status()),
                }
            }
        };
        match decision {
            Ok(decision) => Ok(answered(Answer::of(&decision, &deny_body))),
            Err(error) => Err(not_answered(error_status(&error))),
        }
    }
}

fn answered(answer: Answer) -> Response<CheckResponse> {
    Response::new(answer_to_wire(answer))
}

/// The status of a call not decided: UNAVAILABLE when the store failed (under the `error`
/// failure policy) or floodgate is overloaded, INVALID_ARGUMENT when the rules cannot decide
/// the request.
fn error_status(error: &LimitError) -> Status {
    match (error.undecided(), error) {
        (None, _) => overloaded_status(),
        (Some(_), LimitError::Store(store)) => {
            Status::unavailable(format!("rate limit not decided: {store}"))
        }
        (Some(_), _) => Status::invalid_argument(error.to_string()),
    }
}

/// Logs `status` (paced: Envoy only counts errors, so this is where they are explained).
fn not_answered(status: Status) -> Status {
    if let Some(suppressed) = NOT_ANSWERED.allow() {
        tracing::warn!(
            code = ?status.code(),
            error = %ClientText(status.message()),
            suppressed,
            "ext_authz check not answered"
        );
    }
    status
}
