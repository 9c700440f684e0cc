//! Rate limits for log lines, so a hostile client (or a failing disk) cannot flood the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Most lines one [`LineLimit`] admits per second; the rest are counted and reported with the
/// next line admitted.
const LINES_PER_SECOND_MAX: u64 = 5;

/// Admits at most [`LINES_PER_SECOND_MAX`] log lines a second.
pub struct LineLimit {
    window_second: AtomicU64,
    lines_in_window: AtomicU64,
    suppressed: AtomicU64,
}

impl LineLimit {
    /// A new limit.
    pub const fn new() -> LineLimit {
        LineLimit {
            window_second: AtomicU64::new(0),
            lines_in_window: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(lines suppressed since the last admitted one)` when a line may be logged now.
    pub fn admit(&self) -> Option<u64> {
        let second = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if self.window_second.swap(second, Ordering::Relaxed) != second {
            self.lines_in_window.store(0, Ordering::Relaxed);
        }
        if self.lines_in_window.fetch_add(1, Ordering::Relaxed) >= LINES_PER_SECOND_MAX {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.suppressed.swap(0, Ordering::Relaxed))
    }
}

/// Lines about bad client input (malformed frames, refused batches).
static BAD_INPUT: LineLimit = LineLimit::new();

/// Logs a warning about bad input, rate-limited; `source` names where it came from (a
/// client's address, or the topic-partition a refused batch was for).
pub fn warn_bad_input(source: &str, what: &str) {
    if let Some(suppressed) = BAD_INPUT.admit() {
        tracing::warn!(target: "weir::bad_input", source, suppressed, "{what}");
    }
}
