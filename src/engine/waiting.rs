//! Answers held until their request's turn (a queueing leaky bucket, `core::arithmetic::algorithm::
//! Queue`): one timer per held answer, awaited in the call's own future (no task), a cap on how
//! many one process holds (`--max-waiting`), and a release of them all when the process stops.
//!
//! A caller that goes away while its answer is held (gRPC cancel, HTTP disconnect, its
//! deadline) drops the timer, and its turn stays used, as nginx keeps the excess of a delayed
//! request whose client closed: the bucket drained no faster for it, and giving the turn back
//! would reorder the requests queued behind it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::core::decision::plan::Plan;
use crate::core::decision::waiting::{may_wait, wait_at_most};
use crate::core::ground::time::Micros;
use crate::telemetry::metrics::queue::{self, WaitingRules};

/// `--max-waiting`'s default: answers held at once in one process.
pub const DEFAULT_MAX_WAITING: usize = 10_000;

/// An answer is sent this long before the caller's deadline at the latest, so that it arrives
/// before the caller gives up.
const DEADLINE_MARGIN: Duration = Duration::from_millis(5);

/// The answers one process holds.
#[derive(Debug, Clone)]
pub struct WaitingRoom {
    inner: Arc<Room>,
}

#[derive(Debug)]
struct Room {
    max_waiting: usize,
    waiting: AtomicUsize,
    /// True once the process stops: every held answer is sent at once.
    released: watch::Sender<bool>,
}

impl Default for WaitingRoom {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_WAITING)
    }
}

impl WaitingRoom {
    pub fn new(max_waiting: usize) -> Self {
        Self {
            inner: Arc::new(Room {
                max_waiting,
                waiting: AtomicUsize::new(0),
                released: watch::channel(false).0,
            }),
        }
    }

    /// Answers held now.
    pub fn waiting(&self) -> usize {
        self.inner.waiting.load(Ordering::Relaxed)
    }

    pub fn max_waiting(&self) -> usize {
        self.inner.max_waiting
    }

    /// Sends every held answer now, and every later one at once: the process is stopping.
    pub fn release_all(&self) {
        self.inner.released.send_replace(true);
    }

    /// Bounds the waits `plan` may hold its answer for: within `seat`'s budget (what is left
    /// of the caller's deadline, less a margin), and not at all when the room is full. `seat`
    /// takes a place in the room for a plan that may wait, kept while the answer waits.
    pub fn seat(&self, plan: &mut Plan<'_>, seat: &mut Seat) {
        if !may_wait(&plan.counters) {
            return;
        }
        let room = &self.inner;
        let taken = room
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |waiting| {
                (waiting < room.max_waiting).then_some(waiting + 1)
            })
            .is_ok();
        seat.full = !taken;
        if !taken {
            queue::refused_full();
        }
        seat.room = taken.then(|| Arc::clone(&self.inner));
        let longest = match (taken, seat.budget) {
            (false, _) => 0,
            (true, Some(budget)) => micros(budget.saturating_sub(DEADLINE_MARGIN)),
            (true, None) => return,
        };
        wait_at_most(&mut plan.counters, longest);
    }
}

/// One call's place among the held answers (none until [`WaitingRoom::seat`] takes one);
/// freed when dropped.
#[derive(Debug, Default)]
pub struct Seat {
    /// What is left of the caller's deadline; `None`: no deadline.
    budget: Option<Duration>,
    room: Option<Arc<Room>>,
    /// The room was full: a request that would have waited was refused.
    full: bool,
    /// How long the decided answer waits for its turn.
    wait: Micros,
    /// The queueing rules that gave it that turn, counted while it waits.
    rules: WaitingRules,
}

impl Seat {
    /// A call with `budget` left before its caller's deadline.
    pub fn within(budget: Option<Duration>) -> Self {
        Self {
            budget,
            room: None,
            full: false,
            wait: 0,
            rules: WaitingRules::default(),
        }
    }

    /// The answer was decided to wait `wait` µs for its turn.
    pub fn answer_after(&mut self, wait: Micros) {
        self.wait = wait;
    }

    /// The answer waits under `rules`, the queueing rules that gave it a later turn.
    pub fn waits_under(&mut self, rules: WaitingRules) {
        self.rules = rules;
    }

    /// How long the answer waits.
    pub fn wait(&self) -> Micros {
        self.wait
    }

    /// Whether the room was full when the request came (its waits were bounded to none).
    pub fn room_was_full(&self) -> bool {
        self.full
    }

    /// Holds the answer its wait, or until the process stops; frees the seat after.
    pub async fn hold(mut self) {
        let rules = std::mem::take(&mut self.rules);
        let Some(room) = &self.room else {
            return;
        };
        let wait = self.wait;
        if wait <= 0 {
            return;
        }
        let mut released = room.released.subscribe();
        let duration = Duration::from_micros(u64::try_from(wait).unwrap_or(0));
        let _held = queue::answer_held(rules);
        tokio::select! {
            () = tokio::time::sleep(duration) => {}
            _ = released.wait_for(|released| *released) => {}
        }
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        if let Some(room) = &self.room {
            room.waiting.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

fn micros(duration: Duration) -> Micros {
    Micros::try_from(duration.as_micros()).unwrap_or(Micros::MAX)
}
