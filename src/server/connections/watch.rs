//! A connection's timekeeping, kept off the path its requests take.
//!
//! The bounds a connection is held to (header, handshake, idle and stall timeouts, the close
//! at shutdown) need a timer and the shutdown signal. Raced against hyper's connection in one
//! `select!`, both were polled again at every wake-up of the connection's task, which is every
//! frame read and every answer written: a timer poll and a lock on the shutdown signal's
//! waiters per call, for deadlines tens of seconds away. So the watch runs on a task of its
//! own ([`keep_time`]), asleep until its next look, and gives its [`Orders`] to the connection,
//! which reads them with one atomic load per poll ([`Obeying`]).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use tokio::time::Instant;

use super::activity::{Activity, Timeouts, Verdict, Wire};
use super::{GracefulConnection, CLOSE_GRACE};
use crate::engine::shutdown::Shutdown;
use crate::telemetry::connections::connection_closed;

/// What the watch has told the connection, in the order they can only escalate.
const CARRY_ON: u8 = 0;
const CLOSE: u8 = 1;
const DROP: u8 = 2;

/// The watch's word to its connection, and how to wake the connection to hear it.
pub(super) struct Orders {
    order: AtomicU8,
    /// The connection's task, stored when its waker changes (once, for a tokio task).
    waker: Mutex<Option<Waker>>,
}

impl Default for Orders {
    fn default() -> Self {
        Self {
            order: AtomicU8::new(CARRY_ON),
            waker: Mutex::new(None),
        }
    }
}

impl Orders {
    fn give(&self, order: u8) {
        self.order.fetch_max(order, Ordering::AcqRel);
        let waker = self.waker.lock().clone();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn listen(&self, waker: &Waker) {
        *self.waker.lock() = Some(waker.clone());
    }
}

/// Where one connection is watched from: what it is and what bounds it.
pub(super) struct Watch {
    pub listener: &'static str,
    pub peer: SocketAddr,
    pub wire: Wire,
    pub timeouts: Timeouts,
    pub shutdown: Shutdown,
}

/// Watches `activity` until the connection must close (idle, or at shutdown) or be dropped
/// (a bound broken, or the close not done within [`CLOSE_GRACE`]), telling it through
/// `orders`. Ends after the drop; the connection's task aborts it sooner when it ends first.
pub(super) async fn keep_time(watch: Watch, activity: Arc<Activity>, orders: Arc<Orders>) {
    let Watch {
        listener,
        peer,
        wire,
        timeouts,
        shutdown,
    } = watch;
    let stop = shutdown.fired();
    tokio::pin!(stop);
    let mut next_look: Instant = activity.instant_at(timeouts.header_ms).into();
    loop {
        tokio::select! {
            () = &mut stop => break,
            () = tokio::time::sleep_until(next_look) => {
                match activity.snapshot().verdict(wire, timeouts) {
                    Verdict::Keep { recheck_at_ms } => {
                        next_look = activity.instant_at(recheck_at_ms).into();
                    }
                    Verdict::CloseIdle => {
                        connection_closed(listener, "idle");
                        break;
                    }
                    Verdict::Abort(reason) => {
                        connection_closed(listener, reason.label());
                        tracing::debug!(%peer, listener, "connection dropped: {}", reason.describe());
                        orders.give(DROP);
                        return;
                    }
                }
            }
        }
    }
    orders.give(CLOSE);
    tokio::time::sleep(CLOSE_GRACE).await;
    connection_closed(listener, "shutdown");
    tracing::debug!(%peer, listener, "connection dropped: not finished within the close grace");
    orders.give(DROP);
}

/// How a watched connection ended.
pub(super) enum Ended {
    /// hyper's connection finished (its error, if it failed).
    Finished(Result<(), hyper::Error>),
    /// The watch dropped it.
    Dropped,
}

/// A connection that follows its watch's orders: a graceful close once asked, its end when
/// dropped.
pub(super) struct Obeying<'c, C> {
    connection: Pin<&'c mut C>,
    orders: Arc<Orders>,
    /// The waker `orders` holds, to store it again only when the task's waker changes.
    heard_by: Option<Waker>,
    closing: bool,
}

impl<'c, C> Obeying<'c, C> {
    pub fn new(connection: Pin<&'c mut C>, orders: Arc<Orders>) -> Self {
        Self {
            connection,
            orders,
            heard_by: None,
            closing: false,
        }
    }
}

impl<C: GracefulConnection> Future for Obeying<'_, C> {
    type Output = Ended;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Ended> {
        let this = self.get_mut();
        if !this
            .heard_by
            .as_ref()
            .is_some_and(|heard| heard.will_wake(cx.waker()))
        {
            this.orders.listen(cx.waker());
            this.heard_by = Some(cx.waker().clone());
        }
        // Read after the waker is stored: an order given in between wakes this task again.
        match this.orders.order.load(Ordering::Acquire) {
            DROP => return Poll::Ready(Ended::Dropped),
            CLOSE if !this.closing => {
                this.closing = true;
                this.connection.as_mut().graceful_close();
            }
            _ => {}
        }
        this.connection.as_mut().poll(cx).map(Ended::Finished)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that never ends by itself and records the close it was asked for.
    #[derive(Default)]
    struct Pending {
        closed: bool,
    }

    impl Future for Pending {
        type Output = Result<(), hyper::Error>;

        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
            Poll::Pending
        }
    }

    impl GracefulConnection for Pending {
        fn graceful_close(self: Pin<&mut Self>) {
            self.get_mut().closed = true;
        }
    }

    #[tokio::test]
    async fn orders_reach_a_waiting_connection_in_order() {
        let orders = Arc::new(Orders::default());
        let mut connection = Pending::default();
        let giver = Arc::clone(&orders);
        let obeying = Obeying::new(Pin::new(&mut connection), orders);
        let given = tokio::spawn(async move {
            tokio::task::yield_now().await;
            giver.give(CLOSE);
            tokio::task::yield_now().await;
            giver.give(DROP);
        });
        let ended = tokio::time::timeout(std::time::Duration::from_secs(5), obeying).await;
        assert!(matches!(ended, Ok(Ended::Dropped)));
        assert!(connection.closed, "asked to close before it was dropped");
        assert!(given.await.is_ok());
    }

    #[tokio::test]
    async fn a_connection_carries_on_until_told() {
        let orders = Arc::new(Orders::default());
        let mut connection = Pending::default();
        let obeying = Obeying::new(Pin::new(&mut connection), Arc::clone(&orders));
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), obeying).await;
        assert!(waited.is_err(), "ended without an order");
        assert_eq!(orders.order.load(Ordering::Acquire), CARRY_ON);
        assert!(!connection.closed);
    }
}
