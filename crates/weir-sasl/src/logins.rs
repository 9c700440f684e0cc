//! Failed logins by address, and how long their answers wait, for every door that checks a
//! password (SASL on the Kafka listeners, HTTP Basic on the gateway): once an address has
//! [`FREE_FAILURES`] failures within [`FAILURE_WINDOW`], each further failure is answered
//! after the failure delay doubled per failure, up to [`FAILURE_DELAY_MAX`], and a login
//! holds one of the address's [`LOGINS_IN_FLIGHT_MAX`] places while it is checked (a failed
//! one until it is answered).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Failures an address may have within [`FAILURE_WINDOW`] before its failures are answered
/// ever later.
pub const FREE_FAILURES: u32 = 5;
/// The window failed logins are counted in.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Longest a failed login waits for its answer.
pub const FAILURE_DELAY_MAX: Duration = Duration::from_secs(5);
/// The least delay past the free failures, doubled per failure.
pub const FAILURE_DELAY_FLOOR: Duration = Duration::from_millis(100);
/// Logins of one address that may be under way (a failed one until it is answered).
pub const LOGINS_IN_FLIGHT_MAX: u32 = 4;
/// Addresses whose failures are remembered at once; past it the oldest windows are dropped.
const ADDRESSES_TRACKED_MAX: usize = 10_000;

/// Failed logins by address, logins under way by address, and the secret that makes unknown
/// users' stand-in salts.
pub struct Logins {
    /// Makes the stand-in salts of users the store does not know.
    secret: Vec<u8>,
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
    in_flight: Mutex<HashMap<IpAddr, u32>>,
}

impl Default for Logins {
    fn default() -> Logins {
        Logins {
            secret: crate::random_salt(),
            failures: Mutex::new(HashMap::new()),
            in_flight: Mutex::new(HashMap::new()),
        }
    }
}

/// One of an address's places for logins under way, given back when dropped.
pub struct LoginPlace {
    logins: Arc<Logins>,
    address: IpAddr,
}

impl Drop for LoginPlace {
    fn drop(&mut self) {
        let mut in_flight = self
            .logins
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(count) = in_flight.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&self.address);
            }
        }
    }
}

impl Logins {
    /// The secret that makes the stand-in salts of users the store does not know
    /// ([`crate::ScramServer`]), one per process.
    pub fn secret(&self) -> &[u8] {
        &self.secret
    }

    /// A place for a login from `address`; `None` when all of its places are taken.
    pub fn place(self: &Arc<Self>, address: IpAddr) -> Option<LoginPlace> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        let count = in_flight.entry(address).or_insert(0);
        if *count >= LOGINS_IN_FLIGHT_MAX {
            return None;
        }
        *count += 1;
        Some(LoginPlace {
            logins: self.clone(),
            address,
        })
    }

    /// Counts a failure of `address`; answered with how long to wait before saying so.
    pub fn fail(&self, address: IpAddr, base_delay: Duration) -> Duration {
        let now = Instant::now();
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        if failures.len() >= ADDRESSES_TRACKED_MAX && !failures.contains_key(&address) {
            failures.retain(|_, (since, _)| now.duration_since(*since) < FAILURE_WINDOW);
            if failures.len() >= ADDRESSES_TRACKED_MAX {
                return FAILURE_DELAY_MAX;
            }
        }
        let (since, count) = failures.entry(address).or_insert((now, 0));
        if now.duration_since(*since) >= FAILURE_WINDOW {
            (*since, *count) = (now, 0);
        }
        *count += 1;
        failure_delay(base_delay, *count)
    }
}

/// The wait before the answer to an address's `count`th failure in the window: the configured
/// delay, and past the free failures at least [`FAILURE_DELAY_FLOOR`] doubled per failure (so
/// a delay configured to 0 still slows guessing).
fn failure_delay(base_delay: Duration, count: u32) -> Duration {
    if count <= FREE_FAILURES {
        return base_delay.min(FAILURE_DELAY_MAX);
    }
    let doublings = (count - FREE_FAILURES).min(16);
    base_delay
        .max(FAILURE_DELAY_FLOOR)
        .saturating_mul(1 << doublings)
        .min(FAILURE_DELAY_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_past_the_free_ones_wait_ever_longer_up_to_the_cap() {
        let base = Duration::from_millis(100);
        assert_eq!(failure_delay(base, 1), base);
        assert_eq!(failure_delay(base, FREE_FAILURES), base);
        assert_eq!(failure_delay(base, FREE_FAILURES + 1), base * 2);
        assert_eq!(failure_delay(base, FREE_FAILURES + 3), base * 8);
        assert_eq!(failure_delay(base, 1000), FAILURE_DELAY_MAX);
        assert_eq!(failure_delay(Duration::ZERO, 1), Duration::ZERO);
        assert_eq!(
            failure_delay(Duration::ZERO, FREE_FAILURES + 1),
            FAILURE_DELAY_FLOOR * 2
        );

        let logins = Logins::default();
        let (guesser, neighbour) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        for _ in 0..FREE_FAILURES {
            assert_eq!(logins.fail(guesser, base), base);
        }
        assert_eq!(logins.fail(guesser, base), base * 2);
        assert_eq!(logins.fail(neighbour, base), base, "counted per address");
    }
}
