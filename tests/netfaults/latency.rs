//! Latency through the delaying proxy, every chunk held D each way (a round trip gains 2·D):
//! below the Redis timeout Redis keeps deciding; above it every call is the policy's, within
//! the bound, and decisions come back once the delay is gone.

use std::time::Duration;

use floodgate_testkit::delay_proxy::Mode;

use crate::harness::{Path, TIMEOUT_MS};
use crate::verdicts::{survive, Effect};

const FAULT: Duration = Duration::from_secs(3);

async fn delayed(name: &str, each_way: Duration, effect: Effect) {
    survive(
        name,
        Path::Proxy,
        FAULT,
        |setup| setup.proxy().set(Mode::Delay(each_way)),
        |setup| setup.proxy().set(Mode::Delay(Duration::ZERO)),
        effect,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn latency_below_the_timeout_is_decided_by_redis() {
    // 2 × 15 ms of 100: the rest is floodgate's, Redis's and the machine's.
    let each_way = Duration::from_millis(TIMEOUT_MS * 15 / 100);
    delayed(
        "latency below the timeout",
        each_way,
        // Not all: a debug build on 2 shared cores misses a deadline now and then.
        Effect::Undisturbed {
            min_redis_share: 0.9,
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn latency_above_the_timeout_keeps_every_policy_and_bound() {
    let each_way = Duration::from_millis(TIMEOUT_MS * 3 / 2);
    delayed("latency above the timeout", each_way, Effect::Disturbed).await;
}
