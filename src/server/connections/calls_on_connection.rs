//! Where an HTTP/2 connection's calls run ([`CallTasks`]). With several worker threads, by
//! default on the connection's own task: hyper hands each new stream to [`CallExecutor`], and the
//! connection's task polls the streams beside the connection itself ([`drive`]). A call that
//! answers without waiting (the memory store's) then costs no task of its own, no trip through
//! the scheduler's queues and no hand-over to another thread and back: at 16 calls in flight
//! over four connections on two workers that made floodgate about 1.2× as fast
//! (docs/benchmarks.md, "Calls on their connection's task"). One connection's calls then share
//! one thread, as Envoy's own connections do; `--grpc-call-tasks` gives each call a task of its
//! own (`CallTasks::Own`), as on one worker thread, where nothing is handed between threads and
//! a call that waits (Redis) costs fewer instructions so.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

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

/// What hyper's executor and the connection's task share.
pub(super) struct Shared {
    handoff: Mutex<Handoff>,
    /// Whether the connection was woken since its last poll (it is polled first of all).
    connection_woken: AtomicBool,
    /// The connection's task.
    task: AtomicWaker,
}

/// The calls hyper handed over that the connection's task has not taken yet.
#[derive(Default)]
struct Handoff {
    calls: Vec<Call>,
    /// Whether the connection's task is polling the connection now: hyper hands calls over from
    /// inside that poll, and they are taken right after it, so no wake-up is needed then.
    polling: bool,
}

impl<F> hyper::rt::Executor<F> for CallExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, call: F) {
        match self {
            CallExecutor::OnConnection(shared) => {
                let wake = {
                    let mut handoff = shared.handoff.lock();
                    handoff.calls.push(Box::pin(call));
                    !handoff.polling
                };
                if wake {
                    shared.task.wake();
                }
            }
            CallExecutor::Own => drop(tokio::spawn(call)),
        }
    }
}

/// The connection's own waker: says it was woken, then wakes the task.
impl ArcWake for Shared {
    fn wake_by_ref(this: &Arc<Self>) {
        this.connection_woken.store(true, Ordering::Release);
        this.task.wake();
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
                handoff: Mutex::new(Handoff::default()),
                // So that the first poll polls the connection.
                connection_woken: AtomicBool::new(true),
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

/// Runs `connection` and its calls until the connection ends; its output. Calls still open then
/// are dropped: their connection is gone, so nothing they could send would arrive (a graceful
/// close has waited for them already).
pub(super) async fn drive<C: Future>(connection: C, mut calls: Calls) -> C::Output {
    tokio::pin!(connection);
    let connection_waker = futures_util::task::waker(Arc::clone(&calls.shared));
    std::future::poll_fn(|cx| {
        calls.shared.task.register(cx.waker());
        // Only when something it waits on moved (or at the start): a wake-up for a call that
        // waited (its Redis reply) leaves the connection alone until the answer is written.
        if calls.shared.connection_woken.swap(false, Ordering::AcqRel) {
            calls.start_polling();
            let mut connection_cx = Context::from_waker(&connection_waker);
            if let Poll::Ready(output) = connection.as_mut().poll(&mut connection_cx) {
                return Poll::Ready(output);
            }
        }
        // A call that answers wakes the connection to write its answer: it is polled again at
        // once, after other tasks had their turn.
        calls.run(cx);
        Poll::Pending
    })
    .await
}

impl Calls {
    fn start_polling(&self) {
        self.shared.handoff.lock().polling = true;
    }

    /// Takes the calls handed over and polls each once, then every waiting call that can move.
    /// Most calls answer at their first poll, and never cost a place among the waiting.
    fn run(&mut self, cx: &mut Context<'_>) {
        {
            let mut handoff = self.shared.handoff.lock();
            handoff.polling = false;
            std::mem::swap(&mut handoff.calls, &mut self.taken);
        }
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
