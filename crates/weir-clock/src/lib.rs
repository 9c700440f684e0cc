//! `weir-clock` is the one time source of a node: the log (segment ages, retention), the
//! broker and the group coordinator (sessions, deadlines, commit timestamps) read the time only
//! through a [`Clock`] they are given, so a test or the simulation sets the time instead of
//! waiting for it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A moment: a monotonic instant for deadlines and the wall clock for what is stored
/// (timestamps, when something became empty).
#[derive(Debug, Clone, Copy)]
pub struct Now {
    /// For deadlines.
    pub instant: Instant,
    /// Milliseconds since the Unix epoch.
    pub wall_ms: i64,
}

/// Where the time is read.
pub trait Clock: Send + Sync + 'static {
    /// The current moment.
    fn now(&self) -> Now;

    /// The wall clock now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64 {
        self.now().wall_ms
    }
}

/// The operating system's clocks.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Now {
        Now {
            instant: Instant::now(),
            wall_ms: self.now_ms(),
        }
    }

    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
    }
}

/// A clock that moves only when told to, for tests and the simulation; clones share it.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<Now>>,
}

impl ManualClock {
    /// A clock whose wall clock reads `wall_ms` (its instant starts at the system's).
    pub fn new(wall_ms: i64) -> ManualClock {
        ManualClock {
            now: Arc::new(Mutex::new(Now {
                instant: Instant::now(),
                wall_ms,
            })),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        now.instant += by;
        now.wall_ms = now
            .wall_ms
            .saturating_add(i64::try_from(by.as_millis()).unwrap_or(i64::MAX));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Now {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_both_readings_and_is_shared_by_its_clones() {
        let clock = ManualClock::new(1_000);
        let shared = clock.clone();
        let before = clock.now();
        shared.advance(Duration::from_millis(250));
        let after = clock.now();
        assert_eq!(after.wall_ms, 1_250);
        assert_eq!(after.instant - before.instant, Duration::from_millis(250));
        assert_eq!(clock.now_ms(), 1_250);
    }
}
