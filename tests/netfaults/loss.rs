//! Packet loss on the veth pair, each way, at random (`numgen random mod 100 < P drop`): TCP
//! retransmits after 200 ms at the least, so a lost segment holds every call behind it past
//! the deadline.

use std::time::Duration;

use crate::harness::Path;
use crate::verdicts::{survive, Effect};

const FAULT: Duration = Duration::from_secs(3);

async fn lossy(percent: u8) {
    survive(
        &format!("{percent} % loss"),
        Path::Direct,
        FAULT,
        |setup| setup.netns.lose(percent),
        |setup| setup.netns.heal(),
        Effect::Disturbed,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_percent_loss_keeps_every_policy_and_bound() {
    lossy(5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_percent_loss_keeps_every_policy_and_bound() {
    lossy(50).await;
}
