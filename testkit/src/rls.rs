//! A ShouldRateLimit client for tests that run the floodgate binary.

use std::time::Duration;

use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate::proto::{RateLimitRequest, RateLimitResponse};
use tonic::transport::{Channel, Endpoint};

/// How long one call may take before the test fails instead of hanging.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

pub type Client = RateLimitServiceClient<Channel>;

/// A client for `url` (`http://127.0.0.1:PORT`), every call bounded by [`CALL_TIMEOUT`].
pub async fn connect(url: &str) -> Client {
    let endpoint = Endpoint::from_shared(url.to_owned())
        .unwrap_or_else(|error| panic!("bad url {url}: {error}"))
        .connect_timeout(CALL_TIMEOUT)
        .timeout(CALL_TIMEOUT);
    let channel = endpoint
        .connect()
        .await
        .unwrap_or_else(|error| panic!("cannot connect to {url}: {error}"));
    RateLimitServiceClient::new(channel)
}

/// A request for `domain` with one descriptor per entry list.
pub fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: descriptors
            .iter()
            .map(|entries| crate::descriptor(entries))
            .collect(),
        hits_addend: 0,
    }
}

/// One call; the gRPC status on failure.
pub async fn call(
    client: &mut Client,
    request: RateLimitRequest,
) -> Result<RateLimitResponse, tonic::Status> {
    client
        .should_rate_limit(request)
        .await
        .map(tonic::Response::into_inner)
}

/// The overall code, and the first descriptor's `limit_remaining` and `duration_until_reset`
/// (whole seconds) of a one-descriptor answer.
pub fn first_outcome(response: &RateLimitResponse) -> (Code, u32, i64) {
    let code = Code::try_from(response.overall_code)
        .unwrap_or_else(|_| panic!("unknown code {}", response.overall_code));
    let status = response
        .statuses
        .first()
        .unwrap_or_else(|| panic!("no status in {response:?}"));
    let reset = status
        .duration_until_reset
        .as_ref()
        .map(|reset| reset.seconds)
        .unwrap_or_else(|| panic!("no duration_until_reset in {response:?}"));
    (code, status.limit_remaining, reset)
}
