//! A ShouldRateLimit client for tests that run the floodgate binary.

use std::time::Duration;

use floodgate::proto::rate_limit_response::Code;
use floodgate::proto::rate_limit_service_client::RateLimitServiceClient;
use floodgate::proto::{RateLimitRequest, RateLimitResponse};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::testca::Pair;

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

/// The overall code and the first descriptor's `limit_remaining` of a one-descriptor answer.
pub fn code_and_remaining(response: &RateLimitResponse) -> (Code, u32) {
    let code = Code::try_from(response.overall_code)
        .unwrap_or_else(|_| panic!("unknown code {}", response.overall_code));
    let status = response
        .statuses
        .first()
        .unwrap_or_else(|| panic!("no status in {response:?}"));
    (code, status.limit_remaining)
}

/// The overall code, and the first descriptor's `limit_remaining` and `duration_until_reset`
/// (whole seconds) of a one-descriptor answer.
pub fn first_outcome(response: &RateLimitResponse) -> (Code, u32, i64) {
    let (code, remaining) = code_and_remaining(response);
    let reset = response
        .statuses
        .first()
        .and_then(|status| status.duration_until_reset.as_ref())
        .map(|reset| reset.seconds)
        .unwrap_or_else(|| panic!("no duration_until_reset in {response:?}"));
    (code, remaining, reset)
}

/// A TLS channel to 127.0.0.1:`port` that trusts `ca_pem` for the name `localhost`, presenting
/// `identity` (a client certificate) when given; why not, when the handshake or connection fails.
pub async fn tls_channel(
    port: u16,
    ca_pem: &str,
    identity: Option<&Pair>,
) -> Result<Channel, String> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca_pem))
        .domain_name("localhost");
    if let Some(pair) = identity {
        tls = tls.identity(Identity::from_pem(&pair.cert, &pair.key));
    }
    Endpoint::from_shared(format!("https://127.0.0.1:{port}"))
        .map_err(|error| error.to_string())?
        .tls_config(tls)
        .map_err(|error| error.to_string())?
        .connect_timeout(CALL_TIMEOUT)
        .timeout(CALL_TIMEOUT)
        .connect()
        .await
        .map_err(|error| format!("{error:?}"))
}
