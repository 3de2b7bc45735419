//! The listeners' services without their sockets: the same routers the gRPC, HTTP and admin
//! listeners serve, for a caller in this process to send requests to with tower's `oneshot`.
//! The fuzz targets (`fuzz/`) drive them so: every byte goes through the decoding a connection's
//! would (tonic's gRPC framing and protobuf, axum's routing, the JSON and header parsers), with
//! no socket, no TLS and no connection bounds in the way.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;

use super::admission::{Admission, AdmissionSettings};
use super::{admin, grpc, http, HttpSettings};
use crate::engine::adaptive::signals::PushedSignals;
use crate::engine::limiter::Limiter;
use crate::store::memory::MemoryStore;
use crate::store::Store;

/// `envoy.service.ratelimit.v3.RateLimitService`, as the gRPC listener serves it (behind the
/// default admission control, without health and reflection).
pub fn grpc_routes<S: Store>(limiter: Arc<Limiter<S>>) -> Router {
    let admission = Admission::new(AdmissionSettings::default());
    tonic::service::Routes::new(grpc::RateLimitGrpc::admitted_server(
        limiter, None, &admission,
    ))
    .into_axum_router()
}

/// `/json`, `/check`, `/check/<profile>` and `/authz…`, as the HTTP listener serves them.
pub fn http_routes<S: Store>(limiter: Arc<Limiter<S>>, settings: HttpSettings) -> Router {
    let admission = Admission::new(AdmissionSettings::default());
    http::main_routes(limiter, settings, admission)
}

/// The admin API's routes (`/v1/overrides`, `/v1/counters/…`, `/v1/signals/{name}`) past authentication, with
/// the memory store: overrides are this process's own. `signals` are the pushed signals'
/// names that adaptive rules would read (a push to another name is refused, as when serving).
pub fn admin_routes(limiter: Arc<Limiter<MemoryStore>>, signals: &[&str]) -> Router {
    let pushed = Arc::new(PushedSignals::default());
    let fresh = Duration::from_secs(30);
    pushed.set_known(
        signals
            .iter()
            .map(|name| ((*name).to_owned(), fresh))
            .collect::<HashMap<_, _>>(),
    );
    admin::with_fallback(
        admin::override_routes(Arc::clone(&limiter), None)
            .merge(admin::counters::routes(Arc::clone(&limiter)))
            .merge(admin::signals::routes(pushed, limiter)),
    )
}
