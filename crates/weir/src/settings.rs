//! Broker settings layered from the TOML file, then the environment (`WEIR_` + upper snake
//! case of the Kafka name), each overriding the one before; flags come last, through clap.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context};
use weir_broker::BrokerConfig;

/// The environment variable that sets broker property `name`.
pub fn env_name(name: &str) -> String {
    format!("WEIR_{}", name.replace('.', "_").to_ascii_uppercase())
}

/// Reads broker properties from an optional TOML file and the environment, then `flags`
/// (settings given by command-line flags, which win).
pub fn load(file: Option<&Path>, flags: &[(&str, String)]) -> anyhow::Result<BrokerConfig> {
    let mut properties = BTreeMap::new();
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config file {}", path.display()))?;
        let table: toml::Table = text
            .parse()
            .with_context(|| format!("parsing config file {}", path.display()))?;
        flatten("", &table, &mut properties)?;
    }
    for (name, _, _) in BrokerConfig::documented() {
        if let Ok(value) = std::env::var(env_name(name)) {
            properties.insert(name.to_string(), value);
        }
    }
    for (name, value) in flags {
        properties.insert(name.to_string(), value.clone());
    }
    BrokerConfig::from_properties(&properties).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Turns nested TOML tables into dotted Kafka names (`[log] retention.ms = 1` and
/// `"log.retention.ms" = 1` both give `log.retention.ms`).
fn flatten(
    prefix: &str,
    table: &toml::Table,
    out: &mut BTreeMap<String, String>,
) -> anyhow::Result<()> {
    for (key, value) in table {
        let name = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(inner) => flatten(&name, inner, out)?,
            toml::Value::String(s) => {
                out.insert(name, s.clone());
            }
            toml::Value::Integer(i) => {
                out.insert(name, i.to_string());
            }
            toml::Value::Boolean(b) => {
                out.insert(name, b.to_string());
            }
            other => bail!("config key {name}: unsupported value {other}"),
        }
    }
    Ok(())
}

/// The `--help` text listing every broker property, its default and its environment variable.
pub fn properties_help() -> String {
    let mut text = String::from(
        "BROKER SETTINGS (Kafka names; in the --config TOML file, or WEIR_<NAME> in the environment, which wins over the file):\n",
    );
    for (name, default, doc) in BrokerConfig::documented() {
        text.push_str(&format!(
            "  {name} (default {default}, env {})\n      {doc}\n",
            env_name(name)
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_flattening() {
        assert_eq!(env_name("log.retention.ms"), "WEIR_LOG_RETENTION_MS");
        let table: toml::Table = "num.partitions = 3\n[log]\n\"retention.ms\" = 1000\n"
            .parse()
            .expect("toml");
        let mut out = BTreeMap::new();
        flatten("", &table, &mut out).expect("flatten");
        assert_eq!(out.get("num.partitions").map(String::as_str), Some("3"));
        assert_eq!(
            out.get("log.retention.ms").map(String::as_str),
            Some("1000")
        );
    }
}
