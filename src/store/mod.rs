//! Where counters live. A store evaluates every counter of one request, asks the core whether
//! the request is over its limits, and charges all of its counters or none, atomically.

pub mod memory;
pub mod redis;

use std::future::Future;

use crate::core::plan::Counter;
pub use crate::core::response::Decided;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("the {backend} store is unavailable: {reason}")]
    Unavailable {
        backend: &'static str,
        reason: String,
    },
    /// The memory store holds `max_keys` counters, all exhausted: a new one would need one of
    /// them forgotten, which would hand its budget back.
    #[error(
        "the memory store is full of exhausted counters (--max-keys {max_keys}); raise --max-keys"
    )]
    Full { max_keys: usize },
}

/// A place that keeps counters.
pub trait Store: Send + Sync + 'static {
    /// Evaluates `counters` together and charges them all or none (`global_shadow`: the request
    /// is never over; see `core::verdict`).
    fn decide(
        &self,
        counters: &[Counter],
        global_shadow: bool,
    ) -> impl Future<Output = Result<Decided, StoreError>> + Send;

    /// A short name for logs and metrics (`memory`, `redis`).
    fn backend(&self) -> &'static str;

    /// Whether the store can take requests now; health is NOT_SERVING while it cannot. Polled
    /// about once a second (an answer later than 2 s counts as not ready). A store in this
    /// process is always ready.
    fn ready(&self) -> impl Future<Output = bool> + Send {
        async { true }
    }
}
