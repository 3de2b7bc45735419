//! Where an HTTP/2 connection's calls run ([`CallTasks`]). With several worker threads, by
//! default on the connection's own task: hyper hands each new stream to [`CallExecutor`], and the
//! connection's task polls the streams beside the connection itself ([`drive`]). A call that
//! answers without waiting (the memory store's) then costs no task of its own, no trip through
//! the scheduler's queues and no hand-over to another thread and back: at 16 calls in flight
//! over four connections on two workers that made floodgate about 1.2× as fast
//! (docs/benchmarks.md, "Calls on their connection's task"). The two sides wake each other
//! from inside the task's poll (h2 wakes a call as it grants it room to send, a call that
//! answers wakes the connection to write it); those wake-ups are served in the same poll, never
//! by waking the task, which tokio would queue again and, with an idle worker, wake that worker
//! for (docs/benchmarks.md, "No wake-up of its own task"). One connection's calls then share
//! one thread, as Envoy's own connections do; `--grpc-call-tasks` gives each call a task of its
//! own (`CallTasks::Own`), as on one worker thread, where nothing is handed between threads and
//! a call that waits (Redis) costs fewer instructions so.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures_util::future::CatchUnwind;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::task::{ArcWake, AtomicWaker};
use futures_util::FutureExt;
use parking_lot::Mutex;

/// How an HTTP/2 listener runs its connections' calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CallTasks {
    /// On the connection's task (`Operations`' default; `serve` chooses by worker threads).
    #[default]
    OnConnection,
    /// Each on a task of its own, which any worker may run (`--grpc-call-tasks`).
    Own,
}

/// One stream hyper hands over: the call, from its headers to its answer's last frame.
type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

/// hyper's executor for one connection's streams: passes each to that connection's task, or
/// spawns it as a task of its own.
#[derive(Clone)]
pub(super) enum CallExecutor {
    OnConnection(Arc<Shared>),
    Own,
}

/// What hyper's executor, the connection's task and the wakers of both sides share.
pub(super) struct Shared {
    /// The calls hyper handed over that the connection's task has not taken yet.
    handoff: Mutex<Vec<Call>>,
    /// Whether the connection was woken since it was last polled.
    connection_woken: AtomicBool,
    /// Whether a call was handed over or woken since the calls were last run.
    calls_woken: AtomicBool,
    /// Whether the connection's task is inside its poll, which looks at both flags before it
    /// ends: a wake-up then only sets its flag.
    in_poll: AtomicBool,
    /// The connection's task.
    task: AtomicWaker,
}

impl Shared {
    /// Notes that one side (`connection_woken` or `calls_woken`) has work, and wakes the task
    /// unless it is inside its poll. From inside, tokio would poll the task again after a trip
    /// through its queues, which, with an idle worker, wakes that worker to take it over: a
    /// cross-thread wake-up per answer at a low rate. Both sides wake from inside as a rule: h2
    /// wakes a call polled inline when it grants the call room to send, and a call that answers
    /// wakes the connection to write the answer.
    fn woken(&self, side: &AtomicBool) {
        // SeqCst pairs with `drive`'s end of poll: either this sees the task out of its poll
        // and wakes it, or the task sees the flag and goes round again.
        side.store(true, Ordering::SeqCst);
        if !self.in_poll.load(Ordering::SeqCst) {
            self.task.wake();
        }
    }

    fn was_woken(&self) -> bool {
        self.connection_woken.load(Ordering::SeqCst) || self.calls_woken.load(Ordering::SeqCst)
    }
}

impl<F> hyper::rt::Executor<F> for CallExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, call: F) {
        match self {
            CallExecutor::OnConnection(shared) => {
                shared.handoff.lock().push(Box::pin(call));
                shared.woken(&shared.calls_woken);
            }
            CallExecutor::Own => drop(tokio::spawn(call)),
        }
    }
}

/// The waker hyper's connection is polled with.
struct ConnectionWaker(Arc<Shared>);

impl ArcWake for ConnectionWaker {
    fn wake_by_ref(this: &Arc<Self>) {
        this.0.woken(&this.0.connection_woken);
    }
}

/// The waker the calls are polled with (and the waiting set's, which wakes it for any of them).
struct CallsWaker(Arc<Shared>);

impl ArcWake for CallsWaker {
    fn wake_by_ref(this: &Arc<Self>) {
        this.0.woken(&this.0.calls_woken);
    }
}

/// The calls of one connection, run by its task.
pub(super) struct Calls {
    shared: Arc<Shared>,
    /// The calls taken from the handoff, kept to reuse its allocation.
    taken: Vec<Call>,
    /// Calls that waited at their first poll (Redis, a held answer, a stream).
    waiting: FuturesUnordered<CatchUnwind<AssertUnwindSafe<Call>>>,
}

/// An executor to build a connection with, and the calls it will hand to the connection's task
/// (`None` when they are tasks of their own).
pub(super) fn executor(tasks: CallTasks) -> (CallExecutor, Option<Calls>) {
    match tasks {
        CallTasks::Own => (CallExecutor::Own, None),
        CallTasks::OnConnection => {
            let shared = Arc::new(Shared {
                handoff: Mutex::new(Vec::new()),
                // So that the first poll polls the connection.
                connection_woken: AtomicBool::new(true),
                calls_woken: AtomicBool::new(false),
                in_poll: AtomicBool::new(false),
                task: AtomicWaker::new(),
            });
            let calls = Calls {
                shared: Arc::clone(&shared),
                taken: Vec::new(),
                waiting: FuturesUnordered::new(),
            };
            (CallExecutor::OnConnection(shared), Some(calls))
        }
    }
}

/// How many rounds (the connection, then its calls) one poll of a connection's task may go
/// while its two sides keep waking each other, before it lets other tasks run.
const ROUNDS_PER_POLL: usize = 8;

/// Runs `connection` and its calls until the connection ends; its output. Calls still open then
/// are dropped: their connection is gone, so nothing they could send would arrive (a graceful
/// close has waited for them already).
pub(super) async fn drive<C: Future>(connection: C, mut calls: Calls) -> C::Output {
    tokio::pin!(connection);
    let shared = Arc::clone(&calls.shared);
    let wakers = Wakers {
        connection: futures_util::task::waker(Arc::new(ConnectionWaker(Arc::clone(&shared)))),
        calls: futures_util::task::waker(Arc::new(CallsWaker(Arc::clone(&shared)))),
    };
    std::future::poll_fn(|cx| {
        shared.task.register(cx.waker());
        shared.in_poll.store(true, Ordering::SeqCst);
        let polled = calls.go_round(connection.as_mut(), &wakers);
        shared.in_poll.store(false, Ordering::SeqCst);
        // Woken in the last round, or after the last look: polled again after other tasks.
        if polled.is_pending() && shared.was_woken() {
            cx.waker().wake_by_ref();
        }
        polled
    })
    .await
}

/// The wakers each side of a connection's task is polled with.
struct Wakers {
    connection: Waker,
    calls: Waker,
}

impl Calls {
    /// Polls the connection when it was woken, then the calls, while either side keeps waking
    /// the other (at most [`ROUNDS_PER_POLL`] times).
    fn go_round<C: Future>(
        &mut self,
        mut connection: Pin<&mut C>,
        wakers: &Wakers,
    ) -> Poll<C::Output> {
        for _ in 0..ROUNDS_PER_POLL {
            // A wake-up for a call that waited (its Redis reply) leaves the connection alone
            // until the answer is written.
            if self.shared.connection_woken.swap(false, Ordering::SeqCst) {
                let polled = connection
                    .as_mut()
                    .poll(&mut Context::from_waker(&wakers.connection));
                if polled.is_ready() {
                    return polled;
                }
            }
            self.shared.calls_woken.store(false, Ordering::SeqCst);
            self.run(&mut Context::from_waker(&wakers.calls));
            if !self.shared.was_woken() {
                break;
            }
        }
        Poll::Pending
    }

    /// Takes the calls handed over and polls each once, then every waiting call that can move.
    /// Most calls answer at their first poll, and never cost a place among the waiting.
    fn run(&mut self, cx: &mut Context<'_>) {
        std::mem::swap(&mut *self.shared.handoff.lock(), &mut self.taken);
        for mut call in self.taken.drain(..) {
            match std::panic::catch_unwind(AssertUnwindSafe(|| call.as_mut().poll(cx))) {
                Ok(Poll::Ready(())) => {}
                Ok(Poll::Pending) => self.waiting.push(AssertUnwindSafe(call).catch_unwind()),
                Err(_) => call_panicked(),
            }
        }
        while let Poll::Ready(Some(ended)) = self.waiting.poll_next_unpin(cx) {
            if ended.is_err() {
                call_panicked();
            }
        }
    }
}

/// A bug, never input: the call is lost (its stream reset), not the connection.
fn call_panicked() {
    tracing::error!("a gRPC call panicked; its stream is reset");
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    fn on_connection() -> (CallExecutor, Calls) {
        match executor(CallTasks::OnConnection) {
            (executor, Some(calls)) => (executor, calls),
            (_, None) => panic!("calls on the connection come with the calls to run"),
        }
    }

    /// A connection that ends once `done` calls have finished.
    async fn until(done: Arc<AtomicUsize>, wanted: usize) {
        while done.load(Ordering::SeqCst) < wanted {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// A waker that counts its wake-ups.
    struct CountingWaker(AtomicUsize);

    impl ArcWake for CountingWaker {
        fn wake_by_ref(this: &Arc<Self>) {
            this.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The connection's task as tokio sees it: polled by hand, its wake-ups counted.
    struct Task {
        wakes: Arc<CountingWaker>,
        waker: Waker,
    }

    impl Task {
        fn new() -> Self {
            let wakes = Arc::new(CountingWaker(AtomicUsize::new(0)));
            let waker = futures_util::task::waker(Arc::clone(&wakes));
            Task { wakes, waker }
        }

        fn wakes(&self) -> usize {
            self.wakes.0.load(Ordering::SeqCst)
        }

        /// Polls `driven` once; true while it has not ended.
        fn poll<F: Future>(&self, driven: Pin<&mut F>) -> bool {
            driven
                .poll(&mut Context::from_waker(&self.waker))
                .is_pending()
        }
    }

    /// A connection that hands one call over at its first poll (as hyper does when a request's
    /// headers arrive) and counts its polls; the call wakes the connection and answers, as a
    /// call that writes its answer does, after waking itself as h2 does when it grants the call
    /// room to send.
    fn connection_with_one_answering_call(
        executor: CallExecutor,
        polls: Arc<AtomicUsize>,
    ) -> impl Future<Output = ()> {
        std::future::poll_fn(move |cx| {
            if polls.fetch_add(1, Ordering::SeqCst) == 0 {
                let connection = cx.waker().clone();
                executor.execute(std::future::poll_fn(move |call_cx| {
                    call_cx.waker().wake_by_ref();
                    connection.wake_by_ref();
                    Poll::Ready(())
                }));
            }
            Poll::Pending
        })
    }

    #[test]
    fn wake_ups_from_inside_the_poll_are_served_in_it_without_rescheduling_the_task() {
        let (executor, calls) = on_connection();
        let polls = Arc::new(AtomicUsize::new(0));
        let connection = connection_with_one_answering_call(executor, Arc::clone(&polls));
        let task = Task::new();
        let driven = drive(connection, calls);
        futures_util::pin_mut!(driven);
        assert!(task.poll(driven.as_mut()));
        // Polled again in the same poll to write the answer; the task never woken, so tokio
        // has no reason to queue it again (and wake an idle worker to take it).
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        assert_eq!(task.wakes(), 0);
    }

    #[test]
    fn wake_ups_from_outside_the_poll_wake_the_task() {
        let (executor, calls) = on_connection();
        let connection_waker = Arc::new(parking_lot::Mutex::new(None::<Waker>));
        let kept = Arc::clone(&connection_waker);
        let connection = std::future::poll_fn(move |cx| {
            *kept.lock() = Some(cx.waker().clone());
            Poll::<()>::Pending
        });
        let task = Task::new();
        let driven = drive(connection, calls);
        futures_util::pin_mut!(driven);
        assert!(task.poll(driven.as_mut()));
        assert_eq!(task.wakes(), 0);
        // The socket became readable: the connection is woken from outside.
        if let Some(connection) = connection_waker.lock().take() {
            connection.wake();
        }
        assert_eq!(task.wakes(), 1);
        // tokio polls the woken task; then a call is handed over from outside a poll (hyper
        // does not, but nothing may be lost).
        assert!(task.poll(driven.as_mut()));
        executor.execute(async {});
        assert_eq!(task.wakes(), 2);
    }

    #[test]
    fn sides_that_keep_waking_each_other_yield_after_a_bounded_number_of_rounds() {
        let (_executor, calls) = on_connection();
        let polls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&polls);
        // A connection that always has more to do.
        let connection = std::future::poll_fn(move |cx| {
            counted.fetch_add(1, Ordering::SeqCst);
            cx.waker().wake_by_ref();
            Poll::<()>::Pending
        });
        let task = Task::new();
        let driven = drive(connection, calls);
        futures_util::pin_mut!(driven);
        assert!(task.poll(driven.as_mut()));
        assert_eq!(polls.load(Ordering::SeqCst), ROUNDS_PER_POLL);
        // Other tasks run first; then the task is polled again.
        assert_eq!(task.wakes(), 1);
    }

    #[tokio::test]
    async fn calls_handed_over_run_beside_the_connection_and_wait_concurrently() {
        let (executor, calls) = on_connection();
        let done = Arc::new(AtomicUsize::new(0));
        for delay_ms in [30, 20, 10] {
            let done = Arc::clone(&done);
            executor.execute(async move {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        let started = std::time::Instant::now();
        tokio::time::timeout(
            Duration::from_secs(5),
            drive(until(Arc::clone(&done), 3), calls),
        )
        .await
        .unwrap_or_else(|_| panic!("the calls never finished"));
        // Waiting together, not one after the other (60 ms), with room for a slow host.
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(done.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_call_that_panics_ends_alone_and_the_connection_goes_on() {
        let (executor, calls) = on_connection();
        let done = Arc::new(AtomicUsize::new(0));
        executor.execute(async { panic!("a bug in one call") });
        let after = Arc::clone(&done);
        executor.execute(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            after.fetch_add(1, Ordering::SeqCst);
        });
        tokio::time::timeout(
            Duration::from_secs(5),
            drive(until(Arc::clone(&done), 1), calls),
        )
        .await
        .unwrap_or_else(|_| panic!("the call after the panic never finished"));
    }

    #[tokio::test]
    async fn calls_still_open_when_the_connection_ends_are_dropped_not_awaited() {
        let (executor, calls) = on_connection();
        executor.execute(std::future::pending::<()>());
        let ended = tokio::time::timeout(
            Duration::from_secs(5),
            drive(tokio::time::sleep(Duration::from_millis(10)), calls),
        )
        .await;
        assert!(ended.is_ok(), "the connection's end waited on an open call");
    }
}
