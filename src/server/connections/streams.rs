//! Long-lived streams of one connection (RLQS's bidirectional stream), counted so a handler
//! can bound them per connection: every request of an HTTP/2 connection to a method that may
//! stay open ([`may_stay_open`]) carries the connection's [`ConnectionStreams`] in its
//! extensions, and a handler that keeps a stream open holds a [`StreamSlot`] from it until the
//! stream ends. Other requests go without: an extension map is made for the first extension,
//! which a unary call would pay for and never read. HTTP/2's
//! `max_concurrent_streams` bounds every stream alike, unary calls included, so it cannot be
//! set low for long-lived ones alone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::SERVICE_NAME as RLQS;

/// Whether a call to `path` may stay open (RLQS's stream), and so is handed the connection's
/// [`ConnectionStreams`].
pub fn may_stay_open(path: &str) -> bool {
    path.strip_prefix('/')
        .and_then(|path| path.strip_prefix(RLQS))
        .is_some_and(|method| method == "/StreamRateLimitQuotas")
}

/// The long-lived streams open on one connection. Clones count together.
#[derive(Debug, Clone, Default)]
pub struct ConnectionStreams(Arc<AtomicUsize>);

impl ConnectionStreams {
    /// A slot for one more stream, unless `max` are open: then how many are.
    pub fn open(&self, max: usize) -> Result<StreamSlot, usize> {
        let mut open = self.0.load(Ordering::Acquire);
        loop {
            if open >= max {
                return Err(open);
            }
            match self
                .0
                .compare_exchange_weak(open, open + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Ok(StreamSlot(Arc::clone(&self.0))),
                Err(now) => open = now,
            }
        }
    }
}

/// One stream counted in its connection's [`ConnectionStreams`] until dropped.
#[derive(Debug)]
pub struct StreamSlot(Arc<AtomicUsize>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_rlqs_streams_may_stay_open() {
        assert!(may_stay_open(
            "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas"
        ));
        assert!(!may_stay_open(
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
        ));
        assert!(!may_stay_open(
            "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/Other"
        ));
    }

    #[test]
    fn slots_are_refused_at_the_bound_and_come_back_when_dropped() {
        let streams = ConnectionStreams::default();
        let first = streams.open(2);
        let second = streams.clone().open(2);
        assert!(first.is_ok() && second.is_ok());
        assert_eq!(streams.open(2).err(), Some(2));
        drop(first);
        assert!(streams.open(2).is_ok());
        assert_eq!(ConnectionStreams::default().open(0).err(), Some(0));
    }
}
