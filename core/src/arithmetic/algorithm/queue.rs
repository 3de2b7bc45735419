//! A leaky bucket that queues (`queue: true`), as nginx's `limit_req` without `nodelay`: the
//! bucket's burst is the queue, and a request that fits is answered OK when its turn comes
//! rather than at once. GCRA already knows the turn: the debt ahead of the request drains at
//! the rate, so the request waits until that debt (less the `delay` hits let through at once)
//! has drained, and admitting it reserves its turn for the next one.
//!
//!   wait  = ceil(max(0, debt − delay·W) / L)        µs, the debt before this request
//!   admit ⇔ the bucket admits  and  wait ≤ max_wait
//!   retry = max(the bucket's retry, ceil((debt − delay·W − max_wait·L) / L))
//!
//! nginx's excess after a request is exactly this debt in hits (`debt / W`), and its delay
//! `(excess − delay) / rate`: the same wait, in µs instead of ms.

use crate::ground::time::{Micros, MICROS_PER_SECOND};

/// The longest any queue may hold an answer: past a minute no proxy's timeout would wait for
/// it (Envoy's route timeout defaults to 15 s, nginx's `proxy_read_timeout` to 60 s).
pub const MAX_QUEUE_WAIT: Micros = 60 * MICROS_PER_SECOND;

/// How a queueing leaky bucket holds its answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Queue {
    /// nginx's `delay=N`: the first N excess hits of a burst pass at once, the rest wait.
    pub delay: u32,
    /// A request that would wait longer is refused at once, its turn not taken (µs, ≥ 0).
    pub max_wait: Micros,
}

impl Queue {
    pub fn new(delay: u32, max_wait: Micros) -> Self {
        Self {
            delay,
            max_wait: max_wait.clamp(0, MAX_QUEUE_WAIT),
        }
    }

    /// This queue for a request that cannot wait longer than `longest` (its deadline, or 0
    /// when the process holds all the waiting requests it may): a longer wait is refused.
    pub fn within(self, longest: Micros) -> Self {
        Self {
            max_wait: self.max_wait.min(longest.max(0)),
            ..self
        }
    }
}
