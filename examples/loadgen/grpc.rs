//! ShouldRateLimit over plain HTTP/2 (the `h2` crate), without tonic's client stack.
//!
//! The generator shares the CPUs with the server it measures, so every microsecond it spends
//! per call is taken from the server and shows up in the latencies it reports. tonic's
//! channel hands each call through a buffer task and hyper's dispatcher, and its request body
//! leaves in a write of its own (1.8 `writev` per call). This client queues the headers and
//! the one-message body together, so the connection writes them at once (0.9 per call), and
//! the call's task is the only one it wakes. Against the no-op server on one thread, closed
//! loop: 7–8.5 µs of CPU per call instead of 13–15, and 88–109k calls/s instead of 61–70k.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use floodgate::proto::{RateLimitRequest, RateLimitResponse};
use h2::client::SendRequest;
use prost::Message as _;
use tokio::net::TcpStream;
use tonic::codegen::http;

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// The flag byte and big-endian length before every gRPC message.
const FRAME_HEADER_LEN: usize = 5;
/// Flow-control windows big enough that a run never waits on a WINDOW_UPDATE.
const WINDOW: u32 = 16 << 20;

/// Why a call failed, as loadgen's error breakdown names it.
#[derive(Debug)]
pub enum CallError {
    /// The HTTP/2 layer failed (connection lost, stream reset).
    Transport(h2::Error),
    /// An answer with a gRPC status other than OK.
    Status(tonic::Code),
    /// An answer that is not a gRPC response (HTTP status, framing, protobuf).
    Malformed(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transport(error) if error.is_io() => f.write_str("transport io"),
            Self::Transport(error) => match error.reason() {
                Some(reason) => write!(f, "transport {reason:?}"),
                None => f.write_str("transport"),
            },
            Self::Status(code) => write!(f, "grpc {code:?}"),
            Self::Malformed(what) => write!(f, "malformed answer: {what}"),
        }
    }
}

impl From<h2::Error> for CallError {
    fn from(error: h2::Error) -> Self {
        Self::Transport(error)
    }
}

/// One HTTP/2 connection; cheap to clone (calls on clones share it).
#[derive(Clone)]
pub struct Connection {
    send: SendRequest<Bytes>,
    /// ShouldRateLimit's URI on this server, built once: every call clones it.
    uri: http::Uri,
}

impl Connection {
    /// Connects to `address` (h2c) and drives the connection on a task of its own.
    pub async fn open(address: SocketAddr, timeout: Duration) -> Result<Self, String> {
        let uri = http::Uri::builder()
            .scheme("http")
            .authority(address.to_string())
            .path_and_query(PATH)
            .build()
            .map_err(|error| format!("bad target {address}: {error}"))?;
        let tcp = tokio::time::timeout(timeout, TcpStream::connect(address))
            .await
            .map_err(|_| format!("cannot connect to {address}: no answer within {timeout:?}"))?
            .map_err(|error| format!("cannot connect to {address}: {error}"))?;
        tcp.set_nodelay(true)
            .map_err(|error| format!("cannot set TCP_NODELAY on {address}: {error}"))?;
        let (send, connection) = h2::client::Builder::new()
            .initial_window_size(WINDOW)
            .initial_connection_window_size(WINDOW)
            .handshake(tcp)
            .await
            .map_err(|error| format!("HTTP/2 handshake with {address} failed: {error}"))?;
        tokio::spawn(async move {
            // A lost connection fails the calls on it, which count it as their error.
            let _ = connection.await;
        });
        Ok(Self { send, uri })
    }

    /// One unary ShouldRateLimit call.
    pub async fn should_rate_limit(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, CallError> {
        let head = http::Request::post(self.uri.clone())
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .map_err(|error| CallError::Malformed(format!("request head: {error}")))?;
        let mut send = self.send.clone().ready().await?;
        let (response, mut body) = send.send_request(head, false)?;
        body.send_data(frame(request), true)?;

        let response = response.await?;
        if response.status() != http::StatusCode::OK {
            return Err(CallError::Malformed(format!("HTTP {}", response.status())));
        }
        // A call that fails before answering comes trailers-only: its status in the headers.
        match grpc_status(response.headers())? {
            None => {}
            Some(tonic::Code::Ok) => {
                return Err(CallError::Malformed(
                    "an OK status without a message".to_owned(),
                ))
            }
            Some(code) => return Err(CallError::Status(code)),
        }
        let mut body = response.into_body();
        let mut message = BytesMut::new();
        while let Some(data) = body.data().await {
            let data = data?;
            let _ = body.flow_control().release_capacity(data.len());
            message.extend_from_slice(&data);
        }
        let trailers = body.trailers().await?.unwrap_or_default();
        match grpc_status(&trailers)? {
            Some(tonic::Code::Ok) => {}
            Some(code) => return Err(CallError::Status(code)),
            None => return Err(CallError::Malformed("no grpc-status".to_owned())),
        }
        unframe(&message)
    }
}

/// The request as one gRPC message: uncompressed flag, length, protobuf.
fn frame(request: &RateLimitRequest) -> Bytes {
    let length = request.encoded_len();
    let mut frame = BytesMut::with_capacity(FRAME_HEADER_LEN + length);
    frame.put_u8(0);
    // A request is far below 4 GiB; saturate rather than wrap if one were not.
    frame.put_u32(u32::try_from(length).unwrap_or(u32::MAX));
    // Encoding into a buffer with the room reserved above cannot fail.
    let _ = request.encode(&mut frame);
    frame.freeze()
}

/// The one message of a unary answer.
fn unframe(message: &[u8]) -> Result<RateLimitResponse, CallError> {
    let Some((header, payload)) = message.split_at_checked(FRAME_HEADER_LEN) else {
        return Err(CallError::Malformed(format!(
            "{} bytes, shorter than a gRPC frame header",
            message.len()
        )));
    };
    if header[0] != 0 {
        return Err(CallError::Malformed("a compressed message".to_owned()));
    }
    let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if length != payload.len() {
        return Err(CallError::Malformed(format!(
            "frame of {length} bytes with {} after its header",
            payload.len()
        )));
    }
    RateLimitResponse::decode(payload).map_err(|error| CallError::Malformed(error.to_string()))
}

/// The `grpc-status` in `headers`, if any.
fn grpc_status(headers: &http::HeaderMap) -> Result<Option<tonic::Code>, CallError> {
    let Some(value) = headers.get("grpc-status") else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|text| text.parse::<i32>().ok())
        .map(|code| Some(tonic::Code::from(code)))
        .ok_or_else(|| CallError::Malformed(format!("grpc-status {value:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::proto::rate_limit_response::Code;
    use floodgate::proto::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
    use floodgate::proto::RateLimitDescriptor;
    use tonic::{Request, Response, Status};

    /// Answers OVER_LIMIT when the request's domain is "over", fails with UNAVAILABLE when
    /// it is "down", and echoes the number of descriptors as that many statuses.
    struct Scripted;

    #[tonic::async_trait]
    impl RateLimitService for Scripted {
        async fn should_rate_limit(
            &self,
            request: Request<RateLimitRequest>,
        ) -> Result<Response<RateLimitResponse>, Status> {
            let request = request.into_inner();
            let code = match request.domain.as_str() {
                "down" => return Err(Status::unavailable("redis is down")),
                "over" => Code::OverLimit,
                _ => Code::Ok,
            };
            Ok(Response::new(RateLimitResponse {
                overall_code: code as i32,
                statuses: request
                    .descriptors
                    .iter()
                    .map(|_| Default::default())
                    .collect(),
                ..Default::default()
            }))
        }
    }

    async fn serve() -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|error| panic!("bind: {error}"));
        let address = listener
            .local_addr()
            .unwrap_or_else(|error| panic!("local address: {error}"));
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RateLimitServiceServer::new(Scripted))
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        address
    }

    fn request(domain: &str, descriptors: usize) -> RateLimitRequest {
        RateLimitRequest {
            domain: domain.to_owned(),
            descriptors: vec![RateLimitDescriptor::default(); descriptors],
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn calls_get_the_servers_answers_and_statuses() {
        let connection = Connection::open(serve().await, Duration::from_secs(3))
            .await
            .unwrap_or_else(|error| panic!("{error}"));
        let answer = connection
            .should_rate_limit(&request("edge", 3))
            .await
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(answer.overall_code, Code::Ok as i32);
        assert_eq!(answer.statuses.len(), 3);
        let answer = connection
            .should_rate_limit(&request("over", 1))
            .await
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(answer.overall_code, Code::OverLimit as i32);
        match connection.should_rate_limit(&request("down", 1)).await {
            Err(error @ CallError::Status(tonic::Code::Unavailable)) => {
                assert_eq!(error.to_string(), "grpc Unavailable");
            }
            other => panic!("expected UNAVAILABLE, got {other:?}"),
        }
        // Calls on clones share the connection, concurrently.
        let calls: Vec<_> = (0..50)
            .map(|index| {
                let connection = connection.clone();
                tokio::spawn(async move {
                    connection
                        .should_rate_limit(&request("edge", index % 4))
                        .await
                })
            })
            .collect();
        for (index, call) in calls.into_iter().enumerate() {
            let answer = call
                .await
                .unwrap_or_else(|error| panic!("call {index}: {error}"))
                .unwrap_or_else(|error| panic!("call {index}: {error}"));
            assert_eq!(answer.statuses.len(), index % 4);
        }
    }

    #[tokio::test]
    async fn a_closed_port_is_a_clear_error() {
        let unused = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .and_then(|listener| listener.local_addr())
            .unwrap_or_else(|error| panic!("{error}"));
        let error = match Connection::open(unused, Duration::from_secs(3)).await {
            Err(error) => error,
            Ok(_) => panic!("connected to a closed port"),
        };
        assert!(
            error.starts_with(&format!("cannot connect to {unused}: ")),
            "{error}"
        );
    }

    #[test]
    fn frames_round_trip_and_bad_frames_are_named() {
        let answer = RateLimitResponse {
            overall_code: Code::OverLimit as i32,
            ..Default::default()
        };
        let mut framed = vec![0u8];
        framed.extend_from_slice(&(answer.encoded_len() as u32).to_be_bytes());
        framed.extend_from_slice(&answer.encode_to_vec());
        assert_eq!(unframe(&framed).ok(), Some(answer));

        let sent = frame(&request("edge", 2));
        assert_eq!(sent[0], 0);
        assert_eq!(
            u32::from_be_bytes([sent[1], sent[2], sent[3], sent[4]]) as usize,
            sent.len() - FRAME_HEADER_LEN
        );

        for (bad, expected) in [
            (vec![0u8, 0, 0], "3 bytes, shorter than a gRPC frame header"),
            (vec![1u8, 0, 0, 0, 0], "a compressed message"),
            (
                vec![0u8, 0, 0, 0, 9, 1],
                "frame of 9 bytes with 1 after its header",
            ),
        ] {
            match unframe(&bad) {
                Err(CallError::Malformed(what)) => assert_eq!(what, expected),
                other => panic!("{bad:?}: expected a malformed answer, got {other:?}"),
            }
        }
    }

    #[test]
    fn grpc_status_is_read_from_headers() {
        let mut headers = http::HeaderMap::new();
        assert!(matches!(grpc_status(&headers), Ok(None)));
        headers.insert("grpc-status", http::HeaderValue::from_static("8"));
        assert!(matches!(
            grpc_status(&headers),
            Ok(Some(tonic::Code::ResourceExhausted))
        ));
        headers.insert("grpc-status", http::HeaderValue::from_static("eight"));
        assert!(matches!(
            grpc_status(&headers),
            Err(CallError::Malformed(_))
        ));
    }
}
