//! The broker's connection limits: `max.connections` broker-wide and `max.connections.per.ip`
//! per client address (with `max.connections.per.ip.overrides`), counted by
//! [`ConnectionLimits`]; they change at runtime (dynamic broker configs).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

pub use weir_proto::connection_limits::{ConnectionLimits, ConnectionSlot, Refusal};

use crate::config::{BrokerConfig, DynamicConfigs};

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

/// The limits of the broker's static config, resolving override host names; an override
/// naming a host that does not resolve is an error (as in Kafka).
pub async fn connection_limits(config: &BrokerConfig) -> Result<Arc<ConnectionLimits>, String> {
    let settings = config.runtime_settings(DynamicConfigs::none()).connections;
    let overrides = resolve_overrides(&settings.per_ip_overrides).await?;
    Ok(ConnectionLimits::new(
        config.max_connections,
        settings.max_connections_per_ip,
        overrides,
    ))
}
