//! Gathering while in flight (`--redis-batch-max N`, N > 1): the requests for one lane (one
//! socket to a server, or one hash slot of a cluster) that arrive while the lane's script call
//! is in flight wait for it, then go together in the next call, up to N, in the order they
//! came. A request that finds the lane idle wakes the lane's caller, a task of the lane's own
//! that calls at once with whoever has joined by the time it runs (requests already being
//! handled on the same thread): there is no timer, so a lone request never waits for company.
//! The caller lives as long as the lane and sleeps while it is idle: a task spawned for each
//! call instead cost an allocation and about 1.6 k instructions of a lone decision (callgrind).
//!
//! One call decides its requests one after the other, each exactly as a call of its own would
//! at that point (`lua/decide.lua`), so batching changes what a decision costs Redis, not what
//! it decides. What stays per request: its deadline (it counts from when the request joined
//! the lane, waiting included; a request whose deadline passes while it waits is answered as
//! late and never sent), and the circuit breaker and failure policy, which stand in front of
//! the lane (`mod.rs`). An error of the call fails every request in it, as the same error would
//! fail each alone.
//!
//! No request keeps a timer of its own: a call's deadline is its earliest request's, so the
//! call ends, answered or late, by then. Every request of a store has the same timeout, so one
//! that joins while a call is in flight has a deadline no earlier than that call's; when the call
//! ends it is either late (answered so at once) or goes in the next call, whose deadline is again
//! its earliest request's. Each is answered by its own deadline without a timer per request (a
//! timer wheel entry made and removed per decision, under the wheel's lock).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::connection::lock;
use super::errors::unavailable;
use super::script::{parse_replies, Call, RequestArgs};
use crate::store::{Decided, StoreError};

/// The most requests `--redis-batch-max` may put in one call. A script blocks Redis while it
/// runs: 256 single-counter requests take it 3 to 4 ms on a shared 2-vCPU machine.
pub const MAX_BATCH: usize = 256;

/// Where a lane's calls go.
pub(super) trait Target: Send + Sync + 'static {
    /// Runs `call` within `deadline`; a Redis error or the deadline becomes `Unavailable`.
    fn invoke(
        &self,
        call: &Call,
        deadline: Duration,
    ) -> impl Future<Output = Result<Vec<i64>, StoreError>> + Send;

    /// What a request gets when `deadline` passed before its answer came.
    fn late(&self, deadline: Duration) -> StoreError;
}

/// One lane: its requests waiting, and whether a call of its is in flight.
pub(super) struct Lane<T> {
    target: T,
    max: usize,
    queue: Mutex<Queue>,
    /// Wakes the caller when a request finds the lane idle.
    wake: Arc<Notify>,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Waiting>,
    /// A call is in flight (or about to be sent): newcomers wait for it.
    calling: bool,
    /// The task that makes the lane's calls ([`serve`]): spawned at the lane's first request,
    /// and again if the runtime it ran on has gone.
    caller: Option<JoinHandle<()>>,
}

struct Waiting {
    request: RequestArgs,
    /// Its deadline, and how long that was when it joined (for the message if it is late).
    deadline: Instant,
    timeout: Duration,
    answer: oneshot::Sender<Answer>,
}

type Answer = Result<Decided, StoreError>;

impl<T: Target> Lane<T> {
    /// A lane to `target` whose calls carry up to `max` requests (at least one).
    pub fn new(target: T, max: usize) -> Arc<Self> {
        Arc::new(Self {
            target,
            max: max.max(1),
            queue: Mutex::new(Queue::default()),
            wake: Arc::new(Notify::new()),
        })
    }

    /// Decides `request` in the lane's next call, within `timeout` from now.
    pub async fn decide(self: &Arc<Self>, request: RequestArgs, timeout: Duration) -> Answer {
        let deadline = deadline_after(timeout);
        let (answer, answered) = oneshot::channel();
        {
            let mut queue = lock(&self.queue);
            queue.waiting.push_back(Waiting {
                request,
                deadline,
                timeout,
                answer,
            });
            // A caller that ended mid-call (its runtime shut down) left the lane marked as
            // calling: a new one takes over.
            let caller_gone = queue.caller.as_ref().is_some_and(JoinHandle::is_finished);
            if !std::mem::replace(&mut queue.calling, true) || caller_gone {
                self.wake_caller(&mut queue);
            }
        }
        match answered.await {
            Ok(answer) => answer,
            // Dropped unanswered: the runtime is stopping.
            Err(_) => Err(self.target.late(timeout)),
        }
    }

    /// Wakes the caller for a lane that was idle, first spawning it if it is not running. The
    /// calls are the caller's, not the requests': a call must go on (and serve whoever joins
    /// meanwhile) even if the request that started it is given up.
    fn wake_caller(self: &Arc<Self>, queue: &mut Queue) {
        if queue.caller.as_ref().is_none_or(JoinHandle::is_finished) {
            let caller = serve(Arc::downgrade(self), Arc::clone(&self.wake));
            queue.caller = Some(tokio::spawn(caller));
        }
        // A permit if the caller is not yet waiting: it calls as soon as it is.
        self.wake.notify_one();
    }

    /// Calls until nobody waits.
    async fn call_while_waiting(&self) {
        while let Some(batch) = self.next_batch() {
            let deadline = batch
                .iter()
                .map(|waiting| waiting.deadline)
                .min()
                .unwrap_or_else(Instant::now);
            let call = Call::batch(batch.iter().map(|waiting| &waiting.request));
            let result = self
                .target
                .invoke(&call, deadline.saturating_duration_since(Instant::now()))
                .await;
            answer_all(batch, result);
        }
    }

    /// The next requests to send, oldest first, up to `max`, leaving out those nobody waits for
    /// any longer; `None` (and the lane idle) when there are none.
    fn next_batch(&self) -> Option<Vec<Waiting>> {
        let mut queue = lock(&self.queue);
        let now = Instant::now();
        let mut batch = Vec::with_capacity(self.max.min(queue.waiting.len()));
        while batch.len() < self.max {
            let Some(waiting) = queue.waiting.pop_front() else {
                break;
            };
            if waiting.answer.is_closed() {
                continue; // given up (a cancelled call): never charged
            }
            if waiting.deadline <= now {
                // Out of time while it waited: late, and never charged.
                let _ = waiting.answer.send(Err(self.target.late(waiting.timeout)));
                continue;
            }
            batch.push(waiting);
        }
        if batch.is_empty() {
            queue.calling = false;
            return None;
        }
        Some(batch)
    }
}

impl<T> Drop for Lane<T> {
    fn drop(&mut self) {
        if let Some(caller) = lock(&self.queue).caller.take() {
            caller.abort();
        }
    }
}

/// A lane's caller: calls while anyone waits, then sleeps until a request finds the lane idle.
/// It holds the lane only while calling, so a lane nobody uses any more is dropped (which ends
/// its caller).
async fn serve<T: Target>(lane: Weak<Lane<T>>, wake: Arc<Notify>) {
    loop {
        wake.notified().await;
        let Some(lane) = lane.upgrade() else {
            return;
        };
        lane.call_while_waiting().await;
    }
}

/// `timeout` from now; a timeout too long for the clock (`--redis-timeout-ms` can be any u64)
/// waits as good as for ever instead of overflowing.
fn deadline_after(timeout: Duration) -> Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    let now = Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(CENTURY))
        .unwrap_or(now)
}

/// Gives each request of `batch` its part of the call's `result`.
fn answer_all(batch: Vec<Waiting>, result: Result<Vec<i64>, StoreError>) {
    let decided = result.and_then(|reply| {
        parse_replies(
            &reply,
            batch.iter().map(|waiting| waiting.request.counters()),
        )
        .map_err(|error| unavailable(error.to_string()))
    });
    match decided {
        Ok(decided) => {
            for (waiting, decided) in batch.into_iter().zip(decided) {
                let _ = waiting.answer.send(Ok(decided));
            }
        }
        Err(error) => {
            for waiting in batch {
                let _ = waiting.answer.send(Err(error.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests;
