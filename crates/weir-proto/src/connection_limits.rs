//! Connection limits of a server: a total and a per-address maximum (with overrides for some
//! addresses). A connection over a limit is refused as soon as it is accepted, so a flood from
//! one address neither waits in the accept queue nor locks anyone else out. The limits change
//! at runtime; connections already open stay open. The Kafka listener and the HTTP gateway
//! both count their connections here.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The most connections allowed in all are open.
    Total(u32),
    /// The address already has its maximum open.
    Address(u32),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Total(max) => write!(f, "all {max} connections allowed are open"),
            Refusal::Address(max) => write!(
                f,
                "the address already has its maximum of {max} connections"
            ),
        }
    }
}

/// The limits in force and the connections counted against them.
struct Counts {
    max_total: u32,
    per_ip_default: u32,
    per_ip_overrides: HashMap<IpAddr, u32>,
    total: u32,
    per_ip: HashMap<IpAddr, u32>,
}

/// Open connections counted against the limits.
pub struct ConnectionLimits {
    /// The most the total limit may be raised to: the one given at start.
    ceiling: u32,
    counts: Mutex<Counts>,
    closed: Notify,
}

/// One admitted connection; dropping it frees its place.
pub struct ConnectionSlot {
    limits: Arc<ConnectionLimits>,
    ip: IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut counts = self.limits.counts();
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                counts.per_ip.remove(&self.ip);
            }
        }
        drop(counts);
        self.limits.closed.notify_waiters();
    }
}

impl ConnectionLimits {
    /// Limits with resolved overrides; `max_total` is also the most it may be raised to later.
    pub fn new(
        max_total: u32,
        per_ip_default: u32,
        per_ip_overrides: HashMap<IpAddr, u32>,
    ) -> Arc<ConnectionLimits> {
        Arc::new(ConnectionLimits {
            ceiling: max_total,
            counts: Mutex::new(Counts {
                max_total,
                per_ip_default,
                per_ip_overrides,
                total: 0,
                per_ip: HashMap::new(),
            }),
            closed: Notify::new(),
        })
    }

    /// Puts new limits in force for connections admitted from now on; answers the total
    /// limit in force, which is held to the one given at start (a server reserves its files
    /// for that many).
    pub fn reconfigure(
        &self,
        max_total: u32,
        per_ip_default: u32,
        per_ip_overrides: HashMap<IpAddr, u32>,
    ) -> u32 {
        let mut counts = self.counts();
        counts.max_total = max_total.min(self.ceiling);
        counts.per_ip_default = per_ip_default;
        counts.per_ip_overrides = per_ip_overrides;
        counts.max_total
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        // Plain counters, consistent after every statement.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a new connection from `ip`, or refuses it.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionSlot, Refusal> {
        let ip = ip.to_canonical();
        let mut counts = self.counts();
        let per_ip_max = counts
            .per_ip_overrides
            .get(&ip)
            .copied()
            .unwrap_or(counts.per_ip_default);
        let from_ip = counts.per_ip.get(&ip).copied().unwrap_or(0);
        if from_ip >= per_ip_max {
            return Err(Refusal::Address(per_ip_max));
        }
        if counts.total >= counts.max_total {
            return Err(Refusal::Total(counts.max_total));
        }
        counts.total += 1;
        *counts.per_ip.entry(ip).or_default() += 1;
        Ok(ConnectionSlot {
            limits: self.clone(),
            ip,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> u32 {
        self.counts().total
    }

    /// Returns once every admitted connection has closed.
    pub async fn all_closed(&self) {
        loop {
            let notified = self.closed.notified();
            if self.open() == 0 {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_address_then_total_limits() {
        let other: IpAddr = "127.0.0.2".parse().expect("ip");
        let vip: IpAddr = "10.0.0.1".parse().expect("ip");
        let local: IpAddr = "127.0.0.1".parse().expect("ip");
        let limits = ConnectionLimits::new(5, 2, HashMap::from([(vip, 3)]));
        let a = limits.admit(other).expect("first");
        let _b = limits.admit(other).expect("second");
        assert_eq!(limits.admit(other).err(), Some(Refusal::Address(2)));
        let mapped: IpAddr = "::ffff:127.0.0.2".parse().expect("ip");
        assert_eq!(
            limits.admit(mapped).err(),
            Some(Refusal::Address(2)),
            "IPv4-mapped is the same address"
        );
        let vips: Vec<_> = (0..3)
            .map(|_| limits.admit(vip).expect("override"))
            .collect();
        assert_eq!(limits.admit(local).err(), Some(Refusal::Total(5)));
        drop(a);
        let _c = limits
            .admit(local)
            .expect("a closed connection frees its place");
        assert_eq!(limits.open(), 5);
        drop(vips);
        assert_eq!(limits.open(), 2);
        // New limits apply to the next connection; max.connections stays within its start.
        assert_eq!(limits.reconfigure(9, 1, HashMap::new()), 5);
        assert_eq!(limits.admit(other).err(), Some(Refusal::Address(1)));
        let _d = limits
            .admit(vip)
            .expect("one from an address without its override");
        let _e = limits
            .admit("127.0.0.3".parse().expect("ip"))
            .expect("fourth");
        let _f = limits
            .admit("127.0.0.4".parse().expect("ip"))
            .expect("fifth");
        assert_eq!(
            limits.admit("127.0.0.5".parse().expect("ip")).err(),
            Some(Refusal::Total(5)),
            "held to the startup value"
        );
    }
}
