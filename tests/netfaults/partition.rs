//! A partition (every packet across the pair dropped, both ways) and its healing: the socket
//! to Redis stays open on both ends and hears nothing, and once mended its retransmissions or
//! a new connection must bring decisions back soon.

use std::time::Duration;

use crate::harness::Path;
use crate::verdicts::{survive, Effect};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partition_and_its_healing_keep_every_policy_and_bound() {
    survive(
        "partition",
        Path::Direct,
        Duration::from_secs(4),
        |setup| setup.netns.partition(),
        |setup| setup.netns.heal(),
        Effect::Disturbed,
    )
    .await;
}

/// Long enough for TCP's retransmissions on the old socket to back off to seconds apart (the
/// timer doubles from 200 ms: the last one in 10 s of partition is at 6.2 s, the next at
/// 12.6 s): decisions must not wait for that timer once the network is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_partition_heals_without_waiting_for_tcp_backoff() {
    survive(
        "a 10 s partition",
        Path::Direct,
        Duration::from_secs(10),
        |setup| setup.netns.partition(),
        |setup| setup.netns.heal(),
        Effect::Disturbed,
    )
    .await;
}
