//! When a socket to Redis has gone silent and must be replaced. A call that misses its
//! deadline is dropped, which tells the socket nothing: the connection stays open and, across
//! a partition, TCP retransmits on it with a timer that doubles from 200 ms. Once the network
//! heals, that socket hears again only at its next retransmission: 3.4 s after a 10 s
//! partition here (`tests/netfaults/partition.rs`), tens of seconds after a minute. So a
//! socket whose calls time out and that has answered nothing for [`SILENCE`] is replaced by
//! a new connection, made in the background (bounded by the connect timeout) and swapped in
//! once it is up; while none can be made (the partition lasts) the next late call tries again.
//! A new connection's SYN goes out at once, so decisions resume within about one circuit
//! breaker probe of the network healing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a socket whose calls time out may stay without any answer before it is replaced.
/// Longer than any deadline that makes sense for a rate limiter, so a Redis that is only slow
/// is not reconnected at every late call; short beside TCP's backoff after a partition.
pub(super) const SILENCE: Duration = Duration::from_secs(1);

/// One socket's last answer, and whether a replacement is being made for it.
pub(super) struct Watch {
    /// Milliseconds after `Watches::epoch`.
    heard_ms: AtomicU64,
    replacing: AtomicBool,
}

/// The watches of a pool's sockets, by position.
pub(super) struct Watches {
    epoch: Instant,
    sockets: Vec<Watch>,
}

impl Watches {
    /// `count` sockets (at least one), each heard from now.
    pub(super) fn new(count: usize) -> Self {
        Self {
            epoch: Instant::now(),
            sockets: (0..count.max(1))
                .map(|_| Watch {
                    heard_ms: AtomicU64::new(0),
                    replacing: AtomicBool::new(false),
                })
                .collect(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn at(&self, position: usize) -> &Watch {
        &self.sockets[position % self.sockets.len()]
    }

    /// The socket at `position` answered (a reply, an error reply: it is alive), or is new.
    pub(super) fn heard(&self, position: usize) {
        self.at(position)
            .heard_ms
            .store(self.now_ms(), Ordering::Relaxed);
    }

    /// A call on the socket at `position` missed its deadline: `Some(how long it has been
    /// silent)` when it must be replaced and no replacement is under way (the caller then
    /// makes one and calls [`Watches::replaced`] however that ends), else `None`.
    pub(super) fn should_replace(&self, position: usize) -> Option<Duration> {
        let watch = self.at(position);
        let silent_for = Duration::from_millis(
            self.now_ms()
                .saturating_sub(watch.heard_ms.load(Ordering::Relaxed)),
        );
        if silent_for < SILENCE || watch.replacing.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(silent_for)
    }

    /// The replacement for `position` is over; when it `succeeded`, the new socket gets
    /// [`SILENCE`] of its own before it may be replaced in turn.
    pub(super) fn replaced(&self, position: usize, succeeded: bool) {
        if succeeded {
            self.heard(position);
        }
        self.at(position).replacing.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_is_replaced_only_after_silence_and_once_at_a_time() {
        let watches = Watches::new(2);
        // Fresh: heard at creation.
        assert_eq!(watches.should_replace(0), None);
        let later = Watches {
            epoch: Instant::now() - SILENCE - Duration::from_millis(10),
            sockets: Watches::new(2).sockets,
        };
        let silent_for = later.should_replace(1);
        assert!(silent_for.is_some_and(|silent| silent >= SILENCE));
        // One replacement at a time, and per socket: 3 is 1 modulo 2.
        assert_eq!(later.should_replace(3), None);
        assert!(later.should_replace(0).is_some());
        later.replaced(1, true);
        // Replaced: the new socket has a fresh SILENCE.
        assert_eq!(later.should_replace(1), None);
        // A failed replacement leaves it due: the next late call tries again.
        later.replaced(0, false);
        assert!(later.should_replace(0).is_some());
    }

    #[test]
    fn an_answer_puts_the_replacement_off() {
        let watches = Watches {
            epoch: Instant::now() - SILENCE * 2,
            sockets: Watches::new(1).sockets,
        };
        watches.heard(0);
        assert_eq!(watches.should_replace(0), None);
    }
}
