//! The reference's `TestShareThreshold` (`WithoutPerSecondRedis`) over the fixture
//! `share_threshold.yaml`: every value matching `files/*` (`share_threshold: true`) counts
//! against one threshold, while each value matching `files_no_share/*` has its own.
//!
//! The reference accepts OK or OVER_LIMIT for the first ten calls, because its Redis may hold the
//! hour's count from an earlier run; this Redis is new, so the ten are asserted exactly.

use floodgate::proto::rate_limit_response::rate_limit::Unit;
use floodgate::proto::rate_limit_response::Code;
use floodgate_testkit::redis::RedisServer;

use super::redis_setups::address;
use crate::harness::{
    assert_response, call, fresh_value, limited, request, start, Entry, RuntimeTree,
};

const DOMAIN: &str = "share-threshold-test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_threshold() {
    let context = "TestShareThreshold/WithoutPerSecondRedis";
    let redis = RedisServer::start();
    let tree = RuntimeTree::integration(&["share_threshold.yaml"]);
    let server = start(
        Entry::Ratelimit,
        &tree,
        "WithoutPerSecondRedis",
        &[("REDIS_URL", &address(redis.port()))],
    );
    let mut client = server.client().await;

    for call_index in 0..10u32 {
        let response = call(
            &mut client,
            request(DOMAIN, &[&[("files", "files/a.pdf")]], 1),
        )
        .await;
        assert_response(
            &response,
            Code::Ok,
            &[limited(Code::Ok, 10, Unit::Hour, 10 - (call_index + 1))],
            &format!("{context}: files/a.pdf call {call_index}"),
        );
    }
    // Another value under files/*: the same, spent, threshold.
    let response = call(
        &mut client,
        request(DOMAIN, &[&[("files", "files/b.csv")]], 1),
    )
    .await;
    assert_response(
        &response,
        Code::OverLimit,
        &[limited(Code::OverLimit, 10, Unit::Hour, 0)],
        &format!("{context}: files/b.csv"),
    );

    // files_no_share/*: each value its own threshold.
    for call_index in 0..10 {
        let value = format!("files_no_share/{}", fresh_value());
        let response = call(
            &mut client,
            request(DOMAIN, &[&[("files_no_share", &value)]], 1),
        )
        .await;
        assert_response(
            &response,
            Code::Ok,
            &[limited(Code::Ok, 10, Unit::Hour, 9)],
            &format!("{context}: {value} (call {call_index})"),
        );
    }
}
