//! Handing a load's scratch memory back to the system. Parsing a configuration takes up to
//! 25 times its size for a moment; that memory is freed, but the allocator (mimalloc) returns
//! freed pages to the system only after a delay (10 ms, as `main.rs` sets it), and only when a
//! later free looks for pages whose delay has passed. In an idle process no later free comes, so the whole peak of
//! the last load would stay resident until traffic arrives: 60 MiB for 20 000 rules, where
//! the rules themselves take 10 (docs/benchmarks.md, "Memory per rule").

use std::time::Duration;

/// Longer than mimalloc's purge delay (10 ms as main.rs sets it; 1 s, v3's default, under
/// MIMALLOC_PURGE_DELAY=1000), so the pages the load freed are due.
const AFTER_PURGE_DELAY: Duration = Duration::from_millis(1500);

/// A block big enough to get pages of its own from the allocator, whose release runs the
/// purge of the pages that are due. It is never written, so it costs no memory.
const NUDGE_BYTES: usize = 4 << 20;

/// Once the memory freed by a load just done is due, returns it to the system. Needs a tokio
/// runtime; returns at once.
pub fn trim_after_load() {
    tokio::spawn(async {
        // Twice: what the first pass freed late (a replaced rule set let go after its last
        // decision) is due by the second.
        for _ in 0..2 {
            tokio::time::sleep(AFTER_PURGE_DELAY).await;
            release_due_pages();
        }
    });
}

/// Allocates and frees one large block: with mimalloc, freeing it purges every page whose
/// purge delay has passed; with another allocator it costs an allocation.
fn release_due_pages() {
    let block: Vec<u8> = Vec::with_capacity(NUDGE_BYTES);
    // Keeps the allocation from being optimised away.
    drop(std::hint::black_box(block));
}
