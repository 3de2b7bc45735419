//! A Redis that accepts connections and never answers: the one in the namespace stopped
//! (SIGSTOP: its kernel still takes connections and bytes), or replaced, as seen through the
//! proxy, by a server that takes connections and reads without a word (the open connections
//! closed, as when a server goes away, so floodgate must connect to the silent one).

use std::time::Duration;

use floodgate_testkit::delay_proxy::Mode;

use crate::harness::Path;
use crate::verdicts::{survive, Effect};

const FAULT: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_redis_keeps_every_policy_and_bound() {
    survive(
        "SIGSTOP'd Redis",
        Path::Direct,
        FAULT,
        |setup| setup.redis.pause(),
        |setup| setup.redis.resume(),
        Effect::Disturbed,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_that_never_answers_keeps_every_policy_and_bound() {
    survive(
        "a server that never answers",
        Path::Proxy,
        FAULT,
        |setup| setup.proxy().set(Mode::Silent),
        |setup| setup.proxy().set(Mode::Delay(Duration::ZERO)),
        Effect::Disturbed,
    )
    .await;
}
