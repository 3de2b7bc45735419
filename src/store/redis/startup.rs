//! The first connection, as envoyproxy/ratelimit makes it: a Redis that is not up yet (a pod
//! scheduled before its Redis, a Redis restarting) is retried with a growing, jittered delay
//! instead of ending the process, so that an orchestrator sees a pod that is not ready rather
//! than one that crashes in a loop. Settings that cannot work are said at once.

use std::future::Future;
use std::time::{Duration, Instant};

use rand::Rng;

use super::options::RedisOptions;
use super::RedisStore;
use crate::store::StoreError;

/// How the first connection is retried (the reference's `REDIS_STARTUP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartupRetry {
    /// The first wait (`REDIS_STARTUP_INITIAL_INTERVAL`, 1 s).
    pub initial: Duration,
    /// The longest wait, which the doubling stops at (`REDIS_STARTUP_MAX_INTERVAL`, 30 s).
    pub max: Duration,
    /// How long to keep trying before giving up; `None` is for ever
    /// (`REDIS_STARTUP_MAX_ELAPSED_TIME`, 0 = for ever).
    pub give_up_after: Option<Duration>,
}

impl Default for StartupRetry {
    fn default() -> Self {
        Self {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(30),
            give_up_after: None,
        }
    }
}

impl StartupRetry {
    /// The wait before attempt `attempt + 1` (0-based): doubling from `initial` up to `max`,
    /// drawn between half of that and all of it so that replicas started together do not retry
    /// in step.
    pub fn delay(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let full = self
            .initial
            .saturating_mul(2_u32.saturating_pow(attempt.min(31)))
            .min(self.max.max(self.initial));
        let half = full / 2;
        let spread = u64::try_from((full - half).as_millis()).unwrap_or(u64::MAX);
        half + Duration::from_millis(rng.random_range(0..=spread))
    }
}

/// Why the first connection was not made.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "gave up connecting to Redis after {elapsed:?} (REDIS_STARTUP_MAX_ELAPSED_TIME): {last}"
    )]
    GaveUp { elapsed: Duration, last: StoreError },
    #[error("stopped while waiting for Redis to answer")]
    Stopped,
}

impl RedisStore {
    /// Connects, retrying an unreachable Redis as `retry` says until it answers, `retry` gives
    /// up, or `stop` completes (a SIGTERM while waiting). Misconfigured settings fail at once.
    pub async fn connect_at_start(
        options: &RedisOptions,
        retry: StartupRetry,
        stop: impl Future<Output = ()>,
    ) -> Result<Self, StartupError> {
        let started = Instant::now();
        let mut stop = std::pin::pin!(stop);
        let mut attempt = 0_u32;
        loop {
            let last = match Self::connect(options).await {
                Ok(store) => return Ok(store),
                Err(error @ StoreError::Misconfigured { .. }) => return Err(error.into()),
                Err(error) => error,
            };
            let elapsed = started.elapsed();
            if retry.give_up_after.is_some_and(|limit| elapsed >= limit) {
                return Err(StartupError::GaveUp { elapsed, last });
            }
            let wait = retry.delay(attempt, &mut rand::rng());
            tracing::warn!(
                attempt = attempt + 1,
                "{last}; retrying in {wait:.1?} ({elapsed:.1?} since start; REDIS_STARTUP_* say \
                 how long, as in envoyproxy/ratelimit)"
            );
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = &mut stop => return Err(StartupError::Stopped),
            }
            attempt = attempt.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn the_wait_doubles_up_to_the_cap_with_jitter_below_it() {
        let retry = StartupRetry::default();
        let mut rng = StdRng::seed_from_u64(7);
        for (attempt, full) in [(0, 1), (1, 2), (2, 4), (3, 8), (4, 16), (5, 30), (40, 30)] {
            let full = Duration::from_secs(full);
            for _ in 0..50 {
                let wait = retry.delay(attempt, &mut rng);
                assert!(
                    wait >= full / 2 && wait <= full,
                    "attempt {attempt}: {wait:?} not in [{:?}, {full:?}]",
                    full / 2
                );
            }
        }
    }

    #[test]
    fn a_cap_below_the_first_wait_keeps_the_first_wait() {
        let retry = StartupRetry {
            initial: Duration::from_millis(200),
            max: Duration::from_millis(50),
            give_up_after: None,
        };
        let wait = retry.delay(3, &mut StdRng::seed_from_u64(1));
        assert!(wait >= Duration::from_millis(100) && wait <= Duration::from_millis(200));
    }
}
