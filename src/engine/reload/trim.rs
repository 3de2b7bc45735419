//! Handing a load's scratch memory back to the system, and only a load's.
//!
//! Parsing a configuration takes up to 25 times its size for a moment. The allocator
//! (mimalloc) hands freed pages back to the system after a delay, and only when a later free
//! or allocation looks for pages whose delay has passed. Two needs pull that delay apart:
//! - a load wants it short, or what one file's parse freed stays resident while the next takes
//!   new pages (reloads of 20 000 rules peaked at 116–132 MiB with 1 s, 72–77 with 10 ms);
//! - serving wants it long: requests free and take pages again within milliseconds, and with
//!   10 ms each page went back to the system and was faulted in again, 0.16 page faults and
//!   0.013 `madvise` calls per decision at peak, against 0.006 and 0.0003 with 1 s
//!   (docs/benchmarks.md, "Freed pages kept while serving").
//!
//! So a load opens a [`LoadWindow`]: the allocator returns freed pages soon from the load's
//! start until its trim is done (the replaced rules are freed within that time too), and keeps
//! them for reuse otherwise. The binary, which chooses the allocator, says how to tell it
//! ([`set_freed_pages_switch`]); without a switch a load only trims.

use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// How soon the allocator should hand freed pages back to the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreedPages {
    /// Within milliseconds: a load is freeing its scratch memory.
    ReturnSoon,
    /// After about a second: requests take freed pages again long before that.
    KeepForReuse,
}

/// How the allocator is told, set once by the binary.
static SWITCH: OnceLock<fn(FreedPages)> = OnceLock::new();

/// The loads whose window is open, in this process.
static WINDOWS: Windows = Windows::new();

/// Sets how the allocator is told when loads begin and end; the first call wins (false after).
pub fn set_freed_pages_switch(switch: fn(FreedPages)) -> bool {
    SWITCH.set(switch).is_ok()
}

/// Longer than the allocator's purge delay while a window is open (10 ms as `main.rs` sets
/// it; 1 s, v3's default, under MIMALLOC_PURGE_DELAY=1000), so the pages the load freed are due.
const AFTER_PURGE_DELAY: Duration = Duration::from_millis(1500);

/// A block big enough to get pages of its own from the allocator, whose release runs the
/// purge of the pages that are due. It is never written, so it costs no memory.
const NUDGE_BYTES: usize = 4 << 20;

/// While alive, freed pages go back to the system soon; the last window to close lets them be
/// kept for reuse again.
#[derive(Debug)]
pub(super) struct LoadWindow(());

impl LoadWindow {
    pub(super) fn open() -> Self {
        WINDOWS.open(tell_allocator);
        LoadWindow(())
    }
}

impl Drop for LoadWindow {
    fn drop(&mut self) {
        WINDOWS.close(tell_allocator);
    }
}

fn tell_allocator(pages: FreedPages) {
    if let Some(switch) = SWITCH.get() {
        switch(pages);
    }
}

/// Counts open windows, so that overlapping loads (a file reload during an xDS push) switch
/// the allocator once each way.
#[derive(Debug)]
struct Windows {
    open: Mutex<usize>,
}

impl Windows {
    const fn new() -> Self {
        Windows {
            open: Mutex::new(0),
        }
    }

    fn open(&self, switch: impl Fn(FreedPages)) {
        // The count is a plain number: a panic elsewhere while it was held leaves it whole.
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if *open == 0 {
            switch(FreedPages::ReturnSoon);
        }
        *open += 1;
    }

    fn close(&self, switch: impl Fn(FreedPages)) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        *open = open.saturating_sub(1);
        if *open == 0 {
            switch(FreedPages::KeepForReuse);
        }
    }
}

/// Once the memory freed by a load just done is due, returns it to the system, then closes
/// the load's window. Returns at once; without a tokio runtime it only closes the window.
pub(super) fn trim_after_load(window: LoadWindow) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        // Twice: what the first pass freed late (a replaced rule set let go after its last
        // decision) is due by the second. In an idle process no other free comes to do it,
        // and the whole peak of the last load would stay resident until traffic arrives.
        for _ in 0..2 {
            tokio::time::sleep(AFTER_PURGE_DELAY).await;
            release_due_pages();
        }
        drop(window);
    });
}

/// Allocates and frees one large block: with mimalloc, freeing it purges every page whose
/// purge delay has passed; with another allocator it costs an allocation.
fn release_due_pages() {
    let block: Vec<u8> = Vec::with_capacity(NUDGE_BYTES);
    // Keeps the allocation from being optimised away.
    drop(std::hint::black_box(block));
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::{FreedPages, Windows};

    #[test]
    fn overlapping_loads_switch_the_allocator_once_each_way() {
        let windows = Windows::new();
        let told = Mutex::new(Vec::new());
        let switch = |pages| told.lock().unwrap().push(pages);
        windows.open(switch);
        windows.open(switch);
        windows.close(switch);
        assert_eq!(*told.lock().unwrap(), [FreedPages::ReturnSoon]);
        windows.close(switch);
        windows.open(switch);
        windows.close(switch);
        assert_eq!(
            *told.lock().unwrap(),
            [
                FreedPages::ReturnSoon,
                FreedPages::KeepForReuse,
                FreedPages::ReturnSoon,
                FreedPages::KeepForReuse,
            ]
        );
    }
}
