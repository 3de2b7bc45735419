//! Envoy's two calls per request over gRPC against the real binary, in memory and in Redis:
//! start calls that all carry one lease id each take a slot of their own, so the one past the
//! limit is refused, and as many stream-end calls give every slot back.

use floodgate::proto::rate_limit_response::Code;
use floodgate_testkit::redis::RedisServer;
use floodgate_testkit::rls::{self, Client};
use floodgate_testkit::{repo_file, tempdir, Floodgate};

/// The guide's rule (`deploy/envoy/concurrency-rules/backend.yaml`): 4 in flight.
const LIMIT: u32 = 4;

fn guide_rules() -> String {
    let path = repo_file("deploy/envoy/concurrency-rules/backend.yaml");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()))
}

/// Envoy's start call (`done: false`) or stream-end call for a request named `id`.
async fn lease_call(client: &mut Client, id: &str, done: bool) -> (Code, u32) {
    let start = [("backend", "slow"), ("request_id", id)];
    let end = [("backend", "slow"), ("request_id", id), ("phase", "done")];
    let entries: &[(&str, &str)] = if done { &end } else { &start };
    let response = rls::call(client, rls::request("backend", &[entries]))
        .await
        .unwrap_or_else(|status| panic!("ShouldRateLimit: {status}"));
    rls::code_and_remaining(&response)
}

async fn one_id_takes_a_slot_per_start_call(floodgate: &Floodgate) {
    let mut client = rls::connect(&floodgate.grpc_url()).await;
    for taken in 1..=LIMIT {
        let answer = lease_call(&mut client, "same", false).await;
        assert_eq!(answer, (Code::Ok, LIMIT - taken), "start call {taken}");
    }
    assert_eq!(
        lease_call(&mut client, "same", false).await.0,
        Code::OverLimit,
        "the id holds every slot: one more request with it is refused"
    );
    for left in (0..LIMIT).rev() {
        let answer = lease_call(&mut client, "same", true).await;
        assert_eq!(answer, (Code::Ok, LIMIT - left), "stream-end call");
    }
    // The id holds no slot any more: another stream-end call frees nothing.
    assert_eq!(
        lease_call(&mut client, "same", true).await,
        (Code::Ok, LIMIT)
    );
    assert_eq!(
        lease_call(&mut client, "other", false).await,
        (Code::Ok, LIMIT - 1)
    );
}

#[tokio::test]
async fn one_id_takes_a_slot_per_start_call_in_memory() {
    let dir = tempdir();
    let floodgate = Floodgate::start_with_rules(dir.path(), "backend.yaml", &guide_rules(), &[]);
    one_id_takes_a_slot_per_start_call(&floodgate).await;
}

#[tokio::test]
async fn one_id_takes_a_slot_per_start_call_in_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    let dir = tempdir();
    let flags = ["--store", "redis", "--redis-url", url.as_str()];
    let floodgate = Floodgate::start_with_rules(dir.path(), "backend.yaml", &guide_rules(), &flags);
    one_id_takes_a_slot_per_start_call(&floodgate).await;
}
