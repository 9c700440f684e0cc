//! Connection limits: `max.connections` broker-wide and `max.connections.per.ip` per client
//! address (with `max.connections.per.ip.overrides`). A connection over a limit is closed as
//! soon as it is accepted, so a flood from one address neither waits in the accept queue nor
//! locks anyone else out. The limits change at runtime (dynamic broker configs); connections
//! already open stay open.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::config::{BrokerConfig, DynamicConfigs};

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `max.connections` are open.
    Broker(u32),
    /// The address already has its maximum open.
    Address(u32),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Broker(max) => {
                write!(f, "the broker already has max.connections ({max}) open")
            }
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
    /// The most `max.connections` may be: what the open-file budget reserved at startup.
    ceiling: u32,
    counts: Mutex<Counts>,
    closed: Notify,
}

/// Resolves `host:count` overrides to addresses; a host that does not resolve is an error
/// (as in Kafka).
pub async fn resolve_overrides(
    overrides: &[(String, u32)],
) -> Result<HashMap<IpAddr, u32>, String> {
    let mut resolved = HashMap::new();
    for (host, count) in overrides {
        let addresses: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|e| {
                    format!("max.connections.per.ip.overrides: cannot resolve {host}: {e}")
                })?
                .map(|a| a.ip())
                .collect(),
        };
        for ip in addresses {
            resolved.insert(ip.to_canonical(), *count);
        }
    }
    Ok(resolved)
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
    /// Limits from the broker's static config, resolving override host names; an override
    /// naming a host that does not resolve is an error (as in Kafka).
    pub async fn from_config(config: &BrokerConfig) -> Result<Arc<ConnectionLimits>, String> {
        let settings = config.runtime_settings(DynamicConfigs::none()).connections;
        let overrides = resolve_overrides(&settings.per_ip_overrides).await?;
        Ok(ConnectionLimits::new(
            config.max_connections,
            settings.max_connections_per_ip,
            overrides,
        ))
    }

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

    /// Puts new limits in force for connections admitted from now on. `max_total` is held to
    /// the startup value, which the open-file budget reserved files for.
    pub fn reconfigure(
        &self,
        max_total: u32,
        per_ip_default: u32,
        per_ip_overrides: HashMap<IpAddr, u32>,
    ) {
        if max_total > self.ceiling {
            tracing::warn!(target: "weir::server", asked = max_total, kept = self.ceiling, "max.connections cannot rise above its value at startup (the open-file budget reserved that many)");
        }
        let mut counts = self.counts();
        counts.max_total = max_total.min(self.ceiling);
        counts.per_ip_default = per_ip_default;
        counts.per_ip_overrides = per_ip_overrides;
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
            return Err(Refusal::Broker(counts.max_total));
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
    fn per_address_then_broker_limits() {
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
        assert_eq!(limits.admit(local).err(), Some(Refusal::Broker(5)));
        drop(a);
        let _c = limits
            .admit(local)
            .expect("a closed connection frees its place");
        assert_eq!(limits.open(), 5);
        drop(vips);
        assert_eq!(limits.open(), 2);
        // New limits apply to the next connection; max.connections stays within its start.
        limits.reconfigure(9, 1, HashMap::new());
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
            Some(Refusal::Broker(5)),
            "held to the startup value"
        );
    }
}
