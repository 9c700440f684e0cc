//! `weir quota set|remove|list`: client quotas (bytes per second a producer may append or a
//! consumer fetch, a share of request time, partition mutations per second, connections per
//! second from an address), through Kafka's AlterClientQuotas and DescribeClientQuotas. An
//! entity is named as `kafka-configs` names it: a user, a client id, both, or an IP address,
//! each by name or as the default of its kind.

use std::collections::BTreeMap;

use anyhow::bail;
use clap::{Args, Subcommand};
use weir_client::quota::{
    check_quota, quota_key, EntityType, NameMatch, QuotaAlteration, QuotaEntity,
};
use weir_client::Admin;

use super::{parse_key_value, within, ConnectArgs};

/// Client quotas (producer_byte_rate, consumer_byte_rate, request_percentage,
/// controller_mutation_rate; connection_creation_rate for an IP address).
#[derive(Debug, Args)]
#[command(after_help = "EXAMPLES:\n  \
    weir quota set --user alice producer_byte_rate=1048576 consumer_byte_rate=2097152\n  \
    weir quota set --user-default --client-id-default request_percentage=50\n  \
    weir quota set --ip 10.0.0.9 connection_creation_rate=20\n  \
    weir quota remove --user alice producer_byte_rate\n  \
    weir quota list\n  \
    weir quota list --user alice")]
pub struct QuotaArgs {
    #[command(subcommand)]
    command: QuotaCommand,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// Whose quotas: a user, a client id or both, or an IP address; each by name or as the
/// default of its kind (what applies to those without a quota of their own).
#[derive(Debug, Args)]
struct EntityArgs {
    /// A user (the principal's name: alice for User:alice).
    #[arg(long, conflicts_with = "user_default")]
    user: Option<String>,
    /// The default user quota.
    #[arg(long)]
    user_default: bool,
    /// A client id.
    #[arg(long, conflicts_with = "client_id_default")]
    client_id: Option<String>,
    /// The default client id quota.
    #[arg(long)]
    client_id_default: bool,
    /// An IP address (alone: not with a user or client id).
    #[arg(long, conflicts_with = "ip_default")]
    ip: Option<String>,
    /// The default IP address quota.
    #[arg(long)]
    ip_default: bool,
}

impl EntityArgs {
    /// Each kind named, with its name (`None` for the default).
    fn components(&self) -> Vec<(EntityType, Option<&str>)> {
        fn kind(
            kind: EntityType,
            name: &Option<String>,
            default: bool,
        ) -> Option<(EntityType, Option<&str>)> {
            (name.is_some() || default).then_some((kind, name.as_deref()))
        }
        [
            kind(EntityType::User, &self.user, self.user_default),
            kind(
                EntityType::ClientId,
                &self.client_id,
                self.client_id_default,
            ),
            kind(EntityType::Ip, &self.ip, self.ip_default),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The entity, which must be named.
    fn entity(&self) -> anyhow::Result<QuotaEntity> {
        let components = self.components();
        if components.is_empty() {
            bail!("name whose quotas: --user, --client-id or --ip (or their -default forms)");
        }
        QuotaEntity::new(
            components
                .into_iter()
                .map(|(kind, name)| (kind.name(), name)),
        )
        .map_err(anyhow::Error::msg)
    }
}

#[derive(Debug, Subcommand)]
enum QuotaCommand {
    /// Set quotas of an entity, each as KEY=VALUE (others it has stay as they are).
    Set {
        #[command(flatten)]
        entity: EntityArgs,
        /// The quotas, e.g. producer_byte_rate=1048576.
        #[arg(required = true, value_name = "KEY=VALUE", value_parser = parse_quota)]
        quotas: Vec<(String, f64)>,
    },
    /// Remove quotas of an entity, by key.
    Remove {
        #[command(flatten)]
        entity: EntityArgs,
        /// The quotas' keys, e.g. producer_byte_rate.
        #[arg(required = true, value_name = "KEY")]
        keys: Vec<String>,
    },
    /// List the entities with quotas: all of them, or those with the kinds and names given
    /// (and, with --strict, no other kind).
    List {
        #[command(flatten)]
        entity: EntityArgs,
        /// Only entities of exactly the kinds given.
        #[arg(long)]
        strict: bool,
    },
}

/// Parses `KEY=VALUE` with a number for the value.
fn parse_quota(text: &str) -> Result<(String, f64), String> {
    let (key, value) = parse_key_value(text)?;
    let value = value
        .trim()
        .parse()
        .map_err(|_| format!("the value of {key} is not a number: {value:?}"))?;
    Ok((key, value))
}

/// `value` as Kafka's tools print a quota: whole numbers without a fraction.
fn format_value(value: f64) -> String {
    match value.fract() == 0.0 && value.abs() < 1e15 {
        true => format!("{value:.0}"),
        false => value.to_string(),
    }
}

/// Runs a quota command.
pub async fn run(args: QuotaArgs) -> anyhow::Result<()> {
    let admin = Admin::new(args.connect.client_config());
    match args.command {
        QuotaCommand::Set { entity, quotas } => {
            let entity = entity.entity()?;
            let mut set = BTreeMap::new();
            for (key, value) in &quotas {
                let (key, value) = check_quota(&entity, key, *value).map_err(anyhow::Error::msg)?;
                set.insert(key, value);
            }
            let alteration = QuotaAlteration {
                entity,
                set,
                remove: Vec::new(),
            };
            within(&args.connect, admin.alter_client_quotas(&alteration)).await?;
            let quotas: Vec<String> = alteration
                .set
                .iter()
                .map(|(key, value)| format!("{}={}", key.name(), format_value(value.get())))
                .collect();
            outln!("quotas of {}: {} set", alteration.entity, quotas.join(", "));
        }
        QuotaCommand::Remove { entity, keys } => {
            let entity = entity.entity()?;
            let mut remove = Vec::new();
            for key in &keys {
                remove.push(quota_key(&entity, key).map_err(anyhow::Error::msg)?);
            }
            let alteration = QuotaAlteration {
                entity,
                set: BTreeMap::new(),
                remove,
            };
            within(&args.connect, admin.alter_client_quotas(&alteration)).await?;
            outln!(
                "quotas of {}: {} removed",
                alteration.entity,
                keys.join(", ")
            );
        }
        QuotaCommand::List { entity, strict } => {
            let filter: Vec<(EntityType, NameMatch)> = entity
                .components()
                .into_iter()
                .map(|(kind, name)| (kind, NameMatch::Exactly(name.map(str::to_string))))
                .collect();
            let found =
                within(&args.connect, admin.describe_client_quotas(&filter, strict)).await?;
            outln!("{:<48} QUOTAS", "ENTITY");
            for (entity, quotas) in found {
                let quotas: Vec<String> = quotas
                    .iter()
                    .map(|(key, value)| format!("{key}={}", format_value(*value)))
                    .collect();
                outln!("{:<48} {}", entity.to_string(), quotas.join(", "));
            }
        }
    }
    Ok(())
}
