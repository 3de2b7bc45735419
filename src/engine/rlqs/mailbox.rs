//! What one stream is to look at again: the buckets on which another Envoy joined, another's
//! demand moved, or the other floodgates' demand moved since it last answered, and the wake-up
//! of the task that pushes the new assignments (`QuotaStream::push_due`).

use std::collections::HashSet;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::core::policy::rlqs::BucketKey;

#[derive(Default)]
pub(super) struct Mailbox {
    pending: Mutex<HashSet<BucketKey>>,
    wake: Notify,
}

impl Mailbox {
    /// `bucket` may have a new assignment for this stream.
    pub(super) fn post(&self, bucket: &BucketKey) {
        if self.pending.lock().insert(bucket.clone()) {
            self.wake.notify_one();
        }
    }

    /// Every bucket posted since the last take.
    pub(super) fn take(&self) -> HashSet<BucketKey> {
        std::mem::take(&mut *self.pending.lock())
    }

    /// Until something is posted (at once if something is).
    pub(super) async fn posted(&self) {
        loop {
            let notified = self.wake.notified();
            tokio::pin!(notified);
            // Registered before looking, so a post between the look and the wait wakes it.
            notified.as_mut().enable();
            if !self.pending.lock().is_empty() {
                return;
            }
            notified.await;
        }
    }
}
