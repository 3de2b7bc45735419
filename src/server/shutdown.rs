//! One shutdown signal for every listener and background task.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

/// A cloneable handle that resolves once shutdown has begun.
#[derive(Clone)]
pub struct Shutdown {
    receiver: watch::Receiver<bool>,
}

/// Starts shutdown for every `Shutdown` made from it.
pub struct ShutdownTrigger {
    sender: watch::Sender<bool>,
}

pub fn channel() -> (ShutdownTrigger, Shutdown) {
    let (sender, receiver) = watch::channel(false);
    (ShutdownTrigger { sender }, Shutdown { receiver })
}

impl ShutdownTrigger {
    pub fn fire(&self) {
        self.sender.send_replace(true);
    }
}

impl Shutdown {
    pub fn has_fired(&self) -> bool {
        *self.receiver.borrow()
    }

    /// Resolves when shutdown begins (at once if it already has, or if the trigger is gone).
    pub async fn fired(mut self) {
        let _ = self.receiver.wait_for(|fired| *fired).await;
    }
}

/// Runs `tick` every `period` (the first at once) until shutdown; a slow tick delays the next
/// rather than piling up.
pub async fn every<Tick, Done>(period: Duration, shutdown: Shutdown, mut tick: Tick)
where
    Tick: FnMut() -> Done,
    Done: Future<Output = ()>,
{
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop = shutdown.fired();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = ticks.tick() => tick().await,
        }
    }
}

/// Fires `trigger` on SIGTERM or Ctrl-C.
pub async fn on_signal(trigger: ShutdownTrigger) {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops floodgate");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("interrupt received: draining"),
        () = terminate => tracing::info!("SIGTERM received: draining"),
    }
    trigger.fire();
}
