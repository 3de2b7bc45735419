//! Reserve and Commit in Limitador's own wire form: its kuadrantrls.proto's messages, written
//! out here field number by field number (independently of floodgate's
//! `proto/kuadrant/service/ratelimit/v1/ratelimit.proto`), are encoded, decoded and sent over a
//! real socket, so a client built from Limitador's proto (Kuadrant's wasm-shim) is understood
//! and answered by floodgate.

use floodgate::proto::kuadrant::service::ratelimit::v1 as ours;
use floodgate::proto::rate_limit_response::Code;
use prost::Message;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

use crate::kuadrant::{rls_channel, start};

/// Limitador's kuadrantrls.proto, `kuadrant.service.ratelimit.v1`, and the Envoy descriptor
/// it carries: these tags and types are what the wasm-shim puts on the wire.
mod limitador {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Entry {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RateLimitDescriptor {
        #[prost(message, repeated, tag = "1")]
        pub entries: Vec<Entry>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ReserveRequest {
        #[prost(string, tag = "1")]
        pub domain: String,
        #[prost(message, repeated, tag = "2")]
        pub descriptors: Vec<RateLimitDescriptor>,
        #[prost(uint64, tag = "3")]
        pub amount: u64,
        #[prost(message, optional, tag = "4")]
        pub ttl: Option<prost_types::Duration>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ReserveResponse {
        /// envoy.service.ratelimit.v3.RateLimitResponse.Code
        #[prost(int32, tag = "1")]
        pub code: i32,
        #[prost(string, tag = "2")]
        pub reservation_id: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CommitRequest {
        #[prost(string, tag = "1")]
        pub domain: String,
        #[prost(message, repeated, tag = "2")]
        pub descriptors: Vec<RateLimitDescriptor>,
        #[prost(string, tag = "3")]
        pub reservation_id: String,
        #[prost(uint64, tag = "4")]
        pub actual_amount: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CommitResponse {
        #[prost(bool, tag = "1")]
        pub reservation_released: bool,
    }
}

fn ann_small() -> Vec<limitador::RateLimitDescriptor> {
    let entry = |key: &str, value: &str| limitador::Entry {
        key: key.into(),
        value: value.into(),
    };
    vec![limitador::RateLimitDescriptor {
        entries: vec![entry("model", "small"), entry("user", "ann")],
    }]
}

fn reserve_request(amount: u64) -> limitador::ReserveRequest {
    limitador::ReserveRequest {
        domain: "llm".into(),
        descriptors: ann_small(),
        amount,
        ttl: Some(prost_types::Duration {
            seconds: 30,
            nanos: 5,
        }),
    }
}

fn commit_request(reservation_id: &str, actual_amount: u64) -> limitador::CommitRequest {
    limitador::CommitRequest {
        domain: "llm".into(),
        descriptors: ann_small(),
        reservation_id: reservation_id.into(),
        actual_amount,
    }
}

/// `from` encoded, decoded as `To` and encoded again. prost drops the fields a message does not
/// know, so the bytes come back unchanged only when `To` has a field at every number `from`
/// set, of the same wire type.
fn reencoded<To: Message + Default>(from: &impl Message) -> Vec<u8> {
    let bytes = from.encode_to_vec();
    let decoded = To::decode(bytes.as_slice())
        .unwrap_or_else(|error| panic!("Limitador's bytes do not decode as ours: {error}"));
    decoded.encode_to_vec()
}

#[test]
fn every_message_keeps_limitador_s_field_numbers_and_types() {
    let reserve = reserve_request(7);
    assert_eq!(
        reencoded::<ours::ReserveRequest>(&reserve),
        reserve.encode_to_vec()
    );
    let commit = commit_request("an-id", 3);
    assert_eq!(
        reencoded::<ours::CommitRequest>(&commit),
        commit.encode_to_vec()
    );
    let reserved = limitador::ReserveResponse {
        code: Code::OverLimit as i32,
        reservation_id: "an-id".into(),
    };
    assert_eq!(
        reencoded::<ours::ReserveResponse>(&reserved),
        reserved.encode_to_vec()
    );
    let committed = limitador::CommitResponse {
        reservation_released: true,
    };
    assert_eq!(
        reencoded::<ours::CommitResponse>(&committed),
        committed.encode_to_vec()
    );
}

/// One unary call of `method` on Kuadrant's service, in Limitador's messages.
async fn call<Request, Response>(
    channel: &Channel,
    method: &'static str,
    request: Request,
) -> Response
where
    Request: Message + Send + Sync + 'static,
    Response: Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .unwrap_or_else(|error| panic!("{method}: not ready: {error}"));
    let path = PathAndQuery::from_static(method);
    let codec = tonic_prost::ProstCodec::<Request, Response>::default();
    grpc.unary(tonic::Request::new(request), path, codec)
        .await
        .unwrap_or_else(|status| panic!("{method} failed: {status:?}"))
        .into_inner()
}

const RESERVE: &str = "/kuadrant.service.ratelimit.v1.RateLimitService/Reserve";
const COMMIT: &str = "/kuadrant.service.ratelimit.v1.RateLimitService/Commit";

#[tokio::test]
async fn a_client_built_from_limitador_s_proto_reserves_and_commits() {
    let server = start().await;
    let channel = rls_channel(&server.url).await;
    let held: limitador::ReserveResponse = call(&channel, RESERVE, reserve_request(6)).await;
    assert_eq!(held.code, Code::Ok as i32);
    assert!(
        !held.reservation_id.is_empty(),
        "an admitted hold has an id"
    );
    // The limit is 10: 6 held, 6 more do not fit.
    let refused: limitador::ReserveResponse = call(&channel, RESERVE, reserve_request(6)).await;
    assert_eq!(
        (refused.code, refused.reservation_id.as_str()),
        (Code::OverLimit as i32, "")
    );
    let committed: limitador::CommitResponse =
        call(&channel, COMMIT, commit_request(&held.reservation_id, 2)).await;
    assert!(committed.reservation_released);
    // 2 counted, nothing held: 8 fits, 9 would not.
    let refused: limitador::ReserveResponse = call(&channel, RESERVE, reserve_request(9)).await;
    assert_eq!(refused.code, Code::OverLimit as i32);
    let admitted: limitador::ReserveResponse = call(&channel, RESERVE, reserve_request(8)).await;
    assert_eq!(admitted.code, Code::Ok as i32);
    server.trigger.fire();
}
