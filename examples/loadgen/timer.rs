//! A sub-millisecond sleep for the open-loop pacer: a Linux timerfd in tokio's reactor.
//! tokio's own timer ticks once a millisecond, so requests due within one tick would leave
//! together as a burst and the latencies would measure that burst's queueing. A second
//! thread could sleep more finely, but every request would then cost a wake-up across
//! threads, and the generator shares the CPUs with the server it measures.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

pub struct FineTimer {
    fd: AsyncFd<OwnedFd>,
}

impl FineTimer {
    /// Must be called inside the runtime (it registers with its reactor).
    #[allow(unsafe_code)] // registering the timerfd, explained below
    pub fn new() -> io::Result<Self> {
        let fd = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        // SAFETY: the AsyncFd owns the OwnedFd, whose descriptor stays open and the same
        // until the AsyncFd drops it.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
        Ok(Self { fd })
    }

    /// Sleeps for `wait`; for no wait at all, lets the runtime's other tasks run once.
    pub async fn sleep(&self, wait: Duration) -> io::Result<()> {
        if wait.is_zero() {
            tokio::task::yield_now().await;
            return Ok(());
        }
        let once = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: i64::try_from(wait.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: wait.subsec_nanos().into(),
            },
        };
        timerfd_settime(self.fd.get_ref(), TimerfdTimerFlags::empty(), &once)?;
        loop {
            let mut ready = self.fd.readable().await?;
            let mut expirations = [0u8; 8];
            match rustix::io::read(ready.get_inner(), &mut expirations) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::AGAIN) => ready.clear_ready(),
                Err(error) => return Err(error.into()),
            }
        }
    }
}
