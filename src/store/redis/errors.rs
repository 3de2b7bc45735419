//! The two errors every part of the Redis store reports, named for the backend: Redis failed
//! (worth retrying) or the settings cannot work (said at start, never retried).

use crate::store::StoreError;

/// How the Redis store names itself in errors and in `Store::backend`.
pub(super) const BACKEND: &str = "redis";

/// Redis erred, is unreachable or did not answer in time.
pub(super) fn unavailable(reason: String) -> StoreError {
    StoreError::Unavailable {
        backend: BACKEND,
        reason,
    }
}

/// Settings that cannot work whatever Redis does: said at start, never retried.
pub(super) fn misconfigured(reason: String) -> StoreError {
    StoreError::Misconfigured {
        backend: BACKEND,
        reason,
    }
}
