//! The one thread that builds rule sets and frees them.
//!
//! mimalloc keeps each memory page with the thread that allocated into it; a block freed from
//! another thread is handed back to that page only when its own thread allocates again. Rules
//! loaded on one thread and freed on another (the one that happened to drop the last
//! reference) therefore stayed resident as long as the loading thread stayed idle: the main
//! thread after the first load, a blocking-pool thread after a reload. An idle floodgate kept
//! every replaced rule set (docs/benchmarks.md, "Memory per rule"). Loading, and freeing what
//! a reload replaced, on one thread makes every free a local one, taken back at once, and the
//! memory of one load is reused by the next.

use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a replaced rule set may stay in use (decisions that started before the swap)
/// before it is let go wherever its last user drops it.
const RETIRE_WAIT: Duration = Duration::from_secs(2);
const RETIRE_POLL: Duration = Duration::from_millis(5);

type Job = Box<dyn FnOnce() + Send>;

/// What a reload replaced, to be freed on the loader thread once nothing uses it.
pub trait Retired: Send {
    /// Whether a decision (or anyone else) still holds it.
    fn in_use(&self) -> bool;
}

/// The loader thread stopped (a load panicked).
#[derive(Debug, thiserror::Error)]
#[error("the configuration loader thread stopped")]
pub struct LoaderGone;

/// A handle to the loader thread; it ends when the last handle is dropped.
#[derive(Debug, Clone)]
pub struct Loader {
    jobs: mpsc::Sender<Job>,
}

impl Loader {
    pub fn spawn() -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("floodgate-rules".to_owned())
            .spawn(move || {
                for job in queue {
                    job();
                }
            })?;
        Ok(Self { jobs })
    }

    /// Runs `work` on the loader thread (it blocks that thread, not the caller's).
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, LoaderGone> {
        let (done, result) = tokio::sync::oneshot::channel();
        self.jobs
            .send(Box::new(move || {
                let _ = done.send(work());
            }))
            .map_err(|_| LoaderGone)?;
        result.await.map_err(|_| LoaderGone)
    }

    /// Frees `retired` on the loader thread once nothing uses it (or after [`RETIRE_WAIT`]).
    pub fn retire(&self, retired: Box<dyn Retired>) {
        let job: Job = Box::new(move || {
            let deadline = Instant::now() + RETIRE_WAIT;
            while retired.in_use() && Instant::now() < deadline {
                std::thread::sleep(RETIRE_POLL);
            }
            drop(retired);
        });
        if let Err(mpsc::SendError(job)) = self.jobs.send(job) {
            // No loader: free it here.
            drop(job);
        }
    }
}
