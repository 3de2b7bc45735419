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
pub async fn every<Tick, Done>(period: Duration, shutdown: Shutdown, tick: Tick)
where
    Tick: FnMut() -> Done,
    Done: Future<Output = ()>,
{
    every_or_woken(period, shutdown, std::future::pending, tick).await;
}

/// [`every`], and also at once whenever the future `woken` makes completes.
pub async fn every_or_woken<Tick, Done, Wake, Woken>(
    period: Duration,
    shutdown: Shutdown,
    mut woken: Wake,
    mut tick: Tick,
) where
    Tick: FnMut() -> Done,
    Done: Future<Output = ()>,
    Wake: FnMut() -> Woken,
    Woken: Future<Output = ()>,
{
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop = shutdown.fired();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = ticks.tick() => tick().await,
            () = woken() => tick().await,
        }
    }
}

/// SIGTERM and SIGINT, listened for from the moment this is made: made before the ports open,
/// so a signal that comes early is handled (drained) rather than fatal by default.
pub struct StopSignals {
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    pub fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let listen = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(signal) => Some(signal),
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for {name}");
                    None
                }
            };
            Self {
                terminate: listen(SignalKind::terminate(), "SIGTERM"),
                interrupt: listen(SignalKind::interrupt(), "SIGINT"),
            }
        }
        #[cfg(not(unix))]
        Self {}
    }

    /// Fires `trigger` on the first SIGTERM or SIGINT (Ctrl-C).
    pub async fn fire_on_signal(self, trigger: ShutdownTrigger) {
        #[cfg(unix)]
        {
            async fn next(signal: Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(mut signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            }
            tokio::select! {
                () = next(self.interrupt) => tracing::info!("interrupt received: draining"),
                () = next(self.terminate) => tracing::info!("SIGTERM received: draining"),
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("interrupt received: draining");
        }
        trigger.fire();
    }
}
