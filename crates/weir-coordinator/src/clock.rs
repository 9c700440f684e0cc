//! The coordinator's one time source, given to it at construction: every deadline, session
//! and timestamp it keeps reads the time from here, so a test can set the time instead of
//! waiting for it.

#[cfg(test)]
use std::sync::Mutex;
#[cfg(test)]
use std::time::Duration;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A moment as the coordinator sees it: a monotonic instant for deadlines and the wall clock
/// for what it stores (commit timestamps, when a group became empty).
#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// For deadlines.
    pub instant: Instant,
    /// Milliseconds since the Unix epoch.
    pub wall_ms: i64,
}

/// Where the coordinator reads the time.
pub trait Clock: Send + Sync + 'static {
    /// The current moment.
    fn now(&self) -> Now;
}

/// The system's clocks.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Now {
        let wall_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        Now {
            instant: Instant::now(),
            wall_ms,
        }
    }
}

/// A clock that moves only when told to ([`ManualClock::advance`]).
#[cfg(test)]
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Now>,
}

/// A clock standing at the system's current time.
#[cfg(test)]
impl Default for ManualClock {
    fn default() -> ManualClock {
        ManualClock {
            now: Mutex::new(SystemClock.now()),
        }
    }
}

#[cfg(test)]
impl ManualClock {
    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        now.instant += by;
        now.wall_ms += by.as_millis() as i64;
    }
}

#[cfg(test)]
impl Clock for ManualClock {
    fn now(&self) -> Now {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}
