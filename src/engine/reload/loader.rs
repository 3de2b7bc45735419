//! Where rule sets are built and freed: each load on a thread of its own that ends with it.
//!
//! mimalloc keeps each memory page with the thread that allocated into it, and hands a page
//! back to the system only when it is empty and its purge delay has passed. A thread that
//! lives on after a load (the main thread after the first load, a blocking-pool thread after
//! a reload, or a long-lived loader thread) keeps the load's half-used pages as its own; a
//! thread that ends gives its empty pages back at once and leaves the others to be freed by
//! whoever frees their last block. Measured with 20 000 rules (docs/benchmarks.md, "Memory
//! per rule"): 5 to 15 MiB less resident at rest than with a thread that stays.

use std::time::{Duration, Instant};

use super::trim::{trim_after_load, LoadWindow};

/// How long a replaced rule set may stay in use (decisions that started before the swap)
/// before it is let go wherever its last user drops it.
const RETIRE_WAIT: Duration = Duration::from_secs(2);
const RETIRE_POLL: Duration = Duration::from_millis(5);

/// What a reload replaced, to be freed once nothing uses it.
pub trait Retired: Send {
    /// Whether a decision (or anyone else) still holds it.
    fn in_use(&self) -> bool;
}

/// A load's thread could not start, or the load panicked.
#[derive(Debug, thiserror::Error)]
#[error("the configuration loader thread failed")]
pub struct LoaderGone;

/// Runs loads, each on a fresh thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct Loader;

impl Loader {
    /// Runs `work` on a thread of its own (it blocks that thread, not the caller's), with
    /// freed pages going back to the system from its start until its memory is trimmed, a few
    /// seconds after it ends (`trim`).
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, LoaderGone> {
        let window = LoadWindow::open();
        let (done, result) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("floodgate-rules".to_owned())
            .spawn(move || {
                let _ = done.send(work());
            })
            .map_err(|_| LoaderGone)?;
        let loaded = result.await.map_err(|_| LoaderGone);
        // Also after a refused or failed load: it parsed files just as much.
        trim_after_load(window);
        loaded
    }

    /// Frees `retired` on a thread of its own once nothing uses it (or after [`RETIRE_WAIT`]).
    pub fn retire(&self, retired: Box<dyn Retired>) {
        let spawned = std::thread::Builder::new()
            .name("floodgate-rules".to_owned())
            .spawn(move || {
                let deadline = Instant::now() + RETIRE_WAIT;
                while retired.in_use() && Instant::now() < deadline {
                    std::thread::sleep(RETIRE_POLL);
                }
                drop(retired);
            });
        if let Err(error) = spawned {
            tracing::debug!(%error, "no thread to free the replaced rules on; freed where their last user drops them");
        }
    }
}
