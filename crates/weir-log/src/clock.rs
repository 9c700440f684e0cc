//! Time as the log sees it, injectable so retention and expiry are testable.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// A source of wall-clock milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The operating system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }
}

/// A clock that moves only when told to, for tests.
#[derive(Debug, Default, Clone)]
pub struct ManualClock {
    now_ms: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: i64) -> ManualClock {
        ManualClock {
            now_ms: Arc::new(AtomicI64::new(now_ms)),
        }
    }

    /// Moves the clock forward by `delta_ms`.
    pub fn advance(&self, delta_ms: i64) {
        self.now_ms.fetch_add(delta_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}
