//! The brokers' leases as the active controller keeps them: renewed by heartbeats, expired
//! after `broker.session.timeout.ms` without one.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use weir_metadata::MetadataImage;

/// `broker.session.timeout.ms` by default (Kafka's).
pub const DEFAULT_SESSION_TIMEOUT_MS: u64 = 9_000;

/// The leases of the brokers, as the active controller tracks them (in memory only: a new
/// active controller grants every broker a full lease before fencing anyone).
#[derive(Debug, Default)]
pub struct Leases {
    /// When this controller started leading, if it leads.
    leading_since: Option<Instant>,
    /// Each broker's last heartbeat seen while leading.
    last_seen: HashMap<i32, Instant>,
}

impl Leases {
    /// Records whether this controller leads now; a change of leadership forgets every lease.
    pub fn set_leading(&mut self, leading: bool, now: Instant) {
        match (leading, self.leading_since) {
            (true, None) => {
                self.leading_since = Some(now);
                self.last_seen.clear();
            }
            (false, Some(_)) => {
                self.leading_since = None;
                self.last_seen.clear();
            }
            _ => {}
        }
    }

    /// Renews `node_id`'s lease.
    pub fn renew(&mut self, node_id: i32, now: Instant) {
        self.last_seen.insert(node_id, now);
    }

    /// Forgets `node_id`'s lease (it shut down).
    pub fn forget(&mut self, node_id: i32) {
        self.last_seen.remove(&node_id);
    }

    /// The unfenced brokers of `image` whose lease ran out: no heartbeat for `timeout`, counted
    /// from this controller's start of leadership for a broker it has not heard from yet.
    pub fn expired(&self, image: &MetadataImage, timeout: Duration, now: Instant) -> Vec<i32> {
        let Some(since) = self.leading_since else {
            return Vec::new();
        };
        image
            .brokers()
            .filter(|b| !b.fenced)
            .filter(|b| {
                let seen = self.last_seen.get(&b.node_id).copied().unwrap_or(since);
                now.saturating_duration_since(seen) > timeout
            })
            .map(|b| b.node_id)
            .collect()
    }
}
