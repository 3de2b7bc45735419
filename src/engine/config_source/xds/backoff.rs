//! The pauses between attempts, computed as the reference computes them, with the randomness
//! passed in so they can be tested.
//!
//! * After a stream ends: jpillora/backoff's `Backoff{Min, Max, Factor, Jitter}.Duration()`
//!   with `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`, `_MAX_INTERVAL`, `_RANDOM_FACTOR` and `_JITTER`.
//!   The reference hands `RANDOM_FACTOR` over as the *multiplier*, so with its default of 0.5
//!   the pause shrinks below `Min` and is clamped back to it: every pause is the initial
//!   interval. A factor above 1 grows the pauses up to the maximum.
//! * While the server cannot be reached: `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`,
//!   ±50 % (go-grpc-middleware's `BackoffLinearWithJitter(interval, 0.5)`).

use std::time::Duration;

use super::settings::BackoffSettings;

/// jpillora/backoff's defaults for a `Min` or `Max` of zero.
const DEFAULT_MIN: Duration = Duration::from_millis(100);
const DEFAULT_MAX: Duration = Duration::from_secs(10);

/// A backoff's attempt count; [`Backoff::next`] is `Duration()`.
#[derive(Debug, Clone)]
pub struct Backoff {
    settings: BackoffSettings,
    attempt: u32,
}

impl Backoff {
    pub fn new(settings: BackoffSettings) -> Self {
        Self {
            settings,
            attempt: 0,
        }
    }

    /// The next pause; `random` is uniform in [0, 1).
    pub fn next(&mut self, random: f64) -> Duration {
        let pause = for_attempt(&self.settings, f64::from(self.attempt), random);
        self.attempt = self.attempt.saturating_add(1);
        pause
    }

    /// Starts over (a stream delivered a response: the server is back).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// jpillora/backoff's `ForAttempt`.
pub fn for_attempt(settings: &BackoffSettings, attempt: f64, random: f64) -> Duration {
    let min = if settings.initial.is_zero() {
        DEFAULT_MIN
    } else {
        settings.initial
    };
    let max = if settings.max.is_zero() {
        DEFAULT_MAX
    } else {
        settings.max
    };
    if min >= max {
        return max;
    }
    let factor = if settings.factor > 0.0 {
        settings.factor
    } else {
        2.0
    };
    let min_seconds = min.as_secs_f64();
    let mut seconds = min_seconds * factor.powf(attempt);
    if settings.jitter {
        seconds = random * (seconds - min_seconds) + min_seconds;
    }
    match Duration::try_from_secs_f64(seconds) {
        Ok(pause) => pause.clamp(min, max),
        // Past what a duration holds (or NaN): jpillora returns Max for an overflow.
        Err(_) => max,
    }
}

/// `interval` ±50 %: go-grpc-middleware's `JitterUp(interval, 0.5)`; `random` in [0, 1).
pub fn connect_retry_pause(interval: Duration, random: f64) -> Duration {
    let multiplier = 0.5 * (random * 2.0 - 1.0);
    // Not `mul_f64`, which panics past what a duration holds (an interval of years, say).
    Duration::try_from_secs_f64(interval.as_secs_f64() * (1.0 + multiplier).max(0.0))
        .unwrap_or(interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(initial_ms: u64, max_ms: u64, factor: f64, jitter: bool) -> BackoffSettings {
        BackoffSettings {
            initial: Duration::from_millis(initial_ms),
            max: Duration::from_millis(max_ms),
            factor,
            jitter,
        }
    }

    fn pauses(settings: BackoffSettings, random: f64, count: usize) -> Vec<u128> {
        let mut backoff = Backoff::new(settings);
        (0..count)
            .map(|_| backoff.next(random).as_millis())
            .collect()
    }

    #[test]
    fn the_reference_defaults_wait_the_initial_interval_every_time() {
        // Factor 0.5 multiplies the pause by less than one: clamped to Min.
        for random in [0.0, 0.5, 0.99] {
            assert_eq!(
                pauses(BackoffSettings::default(), random, 4),
                vec![10_000; 4]
            );
        }
    }

    #[test]
    fn a_factor_above_one_grows_to_the_maximum() {
        assert_eq!(
            pauses(settings(100, 1_000, 2.0, false), 0.3, 6),
            vec![100, 200, 400, 800, 1_000, 1_000]
        );
        // Jitter: uniform between Min and the grown pause.
        assert_eq!(
            pauses(settings(100, 1_000, 2.0, true), 0.5, 4),
            vec![100, 150, 250, 450]
        );
        let mut backoff = Backoff::new(settings(100, 1_000, 2.0, false));
        backoff.next(0.0);
        backoff.next(0.0);
        backoff.reset();
        assert_eq!(backoff.next(0.0), Duration::from_millis(100));
    }

    #[test]
    fn jpillora_defaults_and_edges() {
        // Zero Min and Max are jpillora's 100 ms and 10 s; Min ≥ Max is Max.
        assert_eq!(pauses(settings(0, 0, 2.0, false), 0.0, 2), vec![100, 200]);
        assert_eq!(
            pauses(settings(5_000, 1_000, 2.0, false), 0.0, 1),
            vec![1_000]
        );
        // A factor of zero or less is jpillora's 2.
        assert_eq!(
            pauses(settings(100, 1_000, 0.0, false), 0.0, 2),
            vec![100, 200]
        );
        assert_eq!(
            for_attempt(&settings(100, 1_000, 10.0, false), 400.0, 0.0),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn the_connect_retry_interval_is_jittered_by_half() {
        let interval = Duration::from_secs(3);
        assert_eq!(
            connect_retry_pause(interval, 0.0),
            Duration::from_millis(1_500)
        );
        assert_eq!(connect_retry_pause(interval, 0.5), interval);
        assert!(connect_retry_pause(interval, 0.999_999) < Duration::from_millis(4_500));
        assert_eq!(connect_retry_pause(Duration::MAX, 0.9), Duration::MAX);
    }
}
