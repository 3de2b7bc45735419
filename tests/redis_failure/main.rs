//! The Redis store failing under load (paused, killed and restarted): failure policies, the
//! circuit breaker's bound on each call, recovery. Apart from `tests/redis/`: its latency bounds
//! hold only while no other test runs in the process (its tests take turns on a lock of their
//! own; sharing the `redis` binary, the slowest call with the breaker open went from 29 ms to
//! 52 ms against a bound of 45 ms).

mod redis_failure;
