//! Rate-limited logging of bad client input, so a hostile client cannot flood the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Most bad-input lines logged per second; the rest are counted and reported with the next line.
const LINES_PER_SECOND_MAX: u64 = 5;

static WINDOW_SECOND: AtomicU64 = AtomicU64::new(0);
static LINES_IN_WINDOW: AtomicU64 = AtomicU64::new(0);
static SUPPRESSED: AtomicU64 = AtomicU64::new(0);

/// Logs a warning about bad input from `peer`, at most [`LINES_PER_SECOND_MAX`] a second.
pub fn warn_bad_input(peer: &str, what: &str) {
    let second = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if WINDOW_SECOND.swap(second, Ordering::Relaxed) != second {
        LINES_IN_WINDOW.store(0, Ordering::Relaxed);
    }
    if LINES_IN_WINDOW.fetch_add(1, Ordering::Relaxed) >= LINES_PER_SECOND_MAX {
        SUPPRESSED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let suppressed = SUPPRESSED.swap(0, Ordering::Relaxed);
    tracing::warn!(target: "weir::bad_input", peer, suppressed, "{what}");
}
