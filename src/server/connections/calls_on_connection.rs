//! Where an HTTP/2 connection's calls run ([`CallTasks`]). By default on the connection's own
//! task: hyper hands each new stream to [`CallExecutor`], and the connection's task polls the
//! streams beside the connection itself ([`drive`]). A call that answers without waiting (the
//! memory store's) then costs no task of its own, no trip through the scheduler's queues and,
//! with several workers, no hand-over to another thread and back: at 16 calls in flight over
//! four connections on two workers that made floodgate 1.2× as fast (docs/benchmarks.md,
//! "Calls on their connection's task"). The price is that one connection's calls share one
//! thread, as Envoy's own connections do; a client that sends all its load over one connection
//! gets a thread per call with `--grpc-call-tasks` (`CallTasks::Own`).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::future::CatchUnwind;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tokio::sync::mpsc;

/// How an HTTP/2 listener runs its connections' calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CallTasks {
    /// On the connection's task (the default).
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
    OnConnection(mpsc::UnboundedSender<Call>),
    Own,
}

impl<F> hyper::rt::Executor<F> for CallExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, call: F) {
        match self {
            // Refused only once the connection's task has ended: the call would go with it.
            CallExecutor::OnConnection(calls) => drop(calls.send(Box::pin(call))),
            CallExecutor::Own => drop(tokio::spawn(call)),
        }
    }
}

/// The calls of one connection, run by its task.
pub(super) struct Calls {
    arriving: mpsc::UnboundedReceiver<Call>,
    running: FuturesUnordered<CatchUnwind<AssertUnwindSafe<Call>>>,
}

/// An executor to build a connection with, and the calls it will hand to the connection's task
/// (`None` when they are tasks of their own).
pub(super) fn executor(tasks: CallTasks) -> (CallExecutor, Option<Calls>) {
    match tasks {
        CallTasks::Own => (CallExecutor::Own, None),
        CallTasks::OnConnection => {
            let (calls, arriving) = mpsc::unbounded_channel();
            let running = FuturesUnordered::new();
            let calls_here = Calls { arriving, running };
            (CallExecutor::OnConnection(calls), Some(calls_here))
        }
    }
}

/// Polls the connection again after its calls answered, at most this many times a wake-up, so
/// the answers go out in this turn rather than the next; bounded to leave the thread to others.
const ROUNDS_PER_WAKE: usize = 4;

/// Runs `connection` and its calls until the connection ends; its output. Calls still open then
/// are dropped: their connection is gone, so nothing they could send would arrive (a graceful
/// close has waited for them already).
pub(super) async fn drive<C: Future>(connection: C, mut calls: Calls) -> C::Output {
    tokio::pin!(connection);
    std::future::poll_fn(|cx| {
        for _ in 0..ROUNDS_PER_WAKE {
            if let Poll::Ready(output) = connection.as_mut().poll(cx) {
                return Poll::Ready(output);
            }
            if calls.run(cx) == 0 {
                break;
            }
        }
        Poll::Pending
    })
    .await
}

impl Calls {
    /// Takes the calls handed over and polls every call that can move; how many finished.
    fn run(&mut self, cx: &mut Context<'_>) -> usize {
        while let Poll::Ready(Some(call)) = self.arriving.poll_recv(cx) {
            self.running.push(AssertUnwindSafe(call).catch_unwind());
        }
        let mut finished = 0;
        while let Poll::Ready(Some(ended)) = self.running.poll_next_unpin(cx) {
            finished += 1;
            if ended.is_err() {
                // A bug, never input: the call is lost (its stream reset), not the connection.
                tracing::error!("a gRPC call panicked; its stream is reset");
            }
        }
        finished
    }
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
