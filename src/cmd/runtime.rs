//! The async runtime floodgate serves on, sized by `--worker-threads`.

use crate::cmd::cli::StoreKind;

/// The runtime for `threads` (`--worker-threads`), else TOKIO_WORKER_THREADS, else
/// `default_threads`, else one per CPU this process may use (cgroup quota and affinity count).
///
/// One thread gets the single-threaded scheduler: it batches work the multi-threaded one
/// spreads out (several answers in one write, several Redis calls in one packet) and cost 40 %
/// less CPU per decision on the same machine (docs/benchmarks-redis.md). More threads share the
/// work through tokio's work-stealing scheduler.
pub fn build(
    threads: Option<u16>,
    default_threads: Option<usize>,
) -> Result<tokio::runtime::Runtime, String> {
    let threads = match threads {
        Some(threads) => usize::from(threads),
        None => threads_from_environment()?
            .or(default_threads)
            .unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
            }),
    };
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(threads);
        builder
    };
    builder
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the async runtime: {error}"))
}

/// The threads a store serves best on when nobody says otherwise (`None`: one per CPU). With
/// Redis every decision waits on one multiplexed connection: one thread drives it at half the
/// CPU per decision of two (docs/benchmarks.md) and carries about 60 000 decisions/s, and more
/// capacity comes from more instances. The memory store cannot scale out (its counts are per
/// process), so it gets every CPU.
pub fn default_threads(store: StoreKind) -> Option<usize> {
    match store {
        StoreKind::Redis => Some(1),
        // Decided in the process, like the memory store: every CPU.
        StoreKind::Memory | StoreKind::Hybrid => None,
    }
}

/// TOKIO_WORKER_THREADS, which tokio's own builder would read (and panic on when malformed).
fn threads_from_environment() -> Result<Option<usize>, String> {
    let Ok(value) = std::env::var("TOKIO_WORKER_THREADS") else {
        return Ok(None);
    };
    match value.trim().parse::<usize>() {
        Ok(threads) if threads > 0 => Ok(Some(threads)),
        _ => Err(format!(
            "TOKIO_WORKER_THREADS={value:?} is not a number of threads; set it to 1 or more, \
             or unset it for one thread per CPU"
        )),
    }
}
