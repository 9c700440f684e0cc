//! `weir acl add|list|remove`: the ACLs the authorizer checks, through Kafka's CreateAcls,
//! DescribeAcls and DeleteAcls. A resource is named as `kafka-acls` names it (a topic, a group,
//! a transactional id or the cluster, literally or by prefix).

use anyhow::bail;
use clap::{Args, Subcommand, ValueEnum};
use weir_client::acl::{
    AclBinding, AclFilter, AclOperation, AclPermission, PatternFilter, PatternType, ResourceType,
    CLUSTER_NAME,
};
use weir_client::Admin;

use super::{within, ConnectArgs};

/// Access control lists (with `authorizer.class.name=StandardAuthorizer`).
#[derive(Debug, Args)]
#[command(after_help = "EXAMPLES:\n  \
    weir acl add --principal User:alice --operation read,describe --topic orders\n  \
    weir acl add --principal User:alice --operation read --group billing-\n      --prefixed\n  \
    weir acl add --principal User:* --operation write --topic audit --deny --host 10.0.0.9\n  \
    weir acl list --principal User:alice\n  \
    weir acl remove --principal User:alice --operation read --topic orders")]
pub struct AclArgs {
    #[command(subcommand)]
    command: AclCommand,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// An operation on the command line (Kafka's names, in any case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum OperationArg {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
}

impl OperationArg {
    fn operation(self) -> AclOperation {
        match self {
            OperationArg::All => AclOperation::All,
            OperationArg::Read => AclOperation::Read,
            OperationArg::Write => AclOperation::Write,
            OperationArg::Create => AclOperation::Create,
            OperationArg::Delete => AclOperation::Delete,
            OperationArg::Alter => AclOperation::Alter,
            OperationArg::Describe => AclOperation::Describe,
            OperationArg::ClusterAction => AclOperation::ClusterAction,
            OperationArg::DescribeConfigs => AclOperation::DescribeConfigs,
            OperationArg::AlterConfigs => AclOperation::AlterConfigs,
            OperationArg::IdempotentWrite => AclOperation::IdempotentWrite,
        }
    }
}

/// The resource an ACL is about: exactly one of these.
#[derive(Debug, Args)]
#[group(required = false, multiple = false)]
struct ResourceArgs {
    /// A topic (`*` for every topic).
    #[arg(long)]
    topic: Option<String>,
    /// A consumer group (`*` for every group).
    #[arg(long)]
    group: Option<String>,
    /// A transactional id (`*` for every one).
    #[arg(long)]
    transactional_id: Option<String>,
    /// The cluster.
    #[arg(long)]
    cluster: bool,
}

impl ResourceArgs {
    fn resource(&self) -> Option<(ResourceType, String)> {
        let named = |kind, name: &Option<String>| name.clone().map(|n| (kind, n));
        named(ResourceType::Topic, &self.topic)
            .or_else(|| named(ResourceType::Group, &self.group))
            .or_else(|| named(ResourceType::TransactionalId, &self.transactional_id))
            .or_else(|| {
                self.cluster
                    .then(|| (ResourceType::Cluster, CLUSTER_NAME.to_string()))
            })
    }
}

/// What `add` and `remove` name: whose ACL, which operations, allowed or denied, from where.
#[derive(Debug, Args)]
struct AclSpec {
    #[command(flatten)]
    resource: ResourceArgs,
    /// The principal, `User:name` (`User:*` for everyone).
    #[arg(long)]
    principal: String,
    /// The operations, comma-separated.
    #[arg(
        long,
        value_enum,
        ignore_case = true,
        value_delimiter = ',',
        required = true
    )]
    operation: Vec<OperationArg>,
    /// The resource name is a prefix: the ACL covers every name starting with it.
    #[arg(long)]
    prefixed: bool,
    /// Deny rather than allow (a deny wins over any allow).
    #[arg(long)]
    deny: bool,
    /// The client address it applies to (`*`: any).
    #[arg(long, default_value = "*")]
    host: String,
}

impl AclSpec {
    fn bindings(&self) -> anyhow::Result<Vec<AclBinding>> {
        let Some((resource_type, name)) = self.resource.resource() else {
            bail!("name the resource: --topic, --group, --transactional-id or --cluster");
        };
        let pattern_type = match self.prefixed {
            true => PatternType::Prefixed,
            false => PatternType::Literal,
        };
        let permission = match self.deny {
            true => AclPermission::Deny,
            false => AclPermission::Allow,
        };
        self.operation
            .iter()
            .map(|op| {
                // Checked here as the broker checks it, for a clear message before sending.
                AclBinding::from_wire(
                    (resource_type.code(), name.as_str(), pattern_type.code()),
                    (
                        self.principal.as_str(),
                        self.host.as_str(),
                        op.operation().code(),
                        permission.code(),
                    ),
                )
                .map_err(anyhow::Error::msg)
            })
            .collect()
    }
}

#[derive(Debug, Subcommand)]
enum AclCommand {
    /// Add ACLs: the principal may (or, with --deny, may not) do each operation on the resource.
    Add(AclSpec),
    /// List ACLs: all of them, or those of a principal, of a resource (and the prefixed and `*`
    /// ACLs that cover it), or both.
    List {
        #[command(flatten)]
        resource: ResourceArgs,
        /// Only this principal's.
        #[arg(long)]
        principal: Option<String>,
    },
    /// Remove the ACLs `add` with the same options made.
    Remove(AclSpec),
}

fn exactly(binding: &AclBinding) -> AclFilter {
    AclFilter {
        resource_type: Some(binding.pattern.resource_type),
        name: Some(binding.pattern.name.clone()),
        pattern: PatternFilter::Exactly(binding.pattern.pattern_type),
        principal: Some(binding.entry.principal.clone()),
        host: Some(binding.entry.host.clone()),
        operation: Some(binding.entry.operation),
        permission: Some(binding.entry.permission),
    }
}

fn print(acls: &[AclBinding]) {
    outln!(
        "{:<16} {:<9} {:<24} {:<24} {:<16} {:<17} PERMISSION",
        "RESOURCE",
        "PATTERN",
        "NAME",
        "PRINCIPAL",
        "HOST",
        "OPERATION"
    );
    for AclBinding { pattern, entry } in acls {
        outln!(
            "{:<16} {:<9} {:<24} {:<24} {:<16} {:<17} {}",
            pattern.resource_type.name(),
            pattern.pattern_type.name(),
            pattern.name,
            entry.principal,
            entry.host,
            entry.operation.name(),
            entry.permission.name()
        );
    }
}

/// Runs an ACL command.
pub async fn run(args: AclArgs) -> anyhow::Result<()> {
    let admin = Admin::new(args.connect.client_config());
    match args.command {
        AclCommand::Add(spec) => {
            let acls = spec.bindings()?;
            within(&args.connect, admin.create_acls(&acls)).await?;
            outln!("added {} ACL(s)", acls.len());
            print(&acls);
        }
        AclCommand::List {
            resource,
            principal,
        } => {
            let (resource_type, name, pattern) = match resource.resource() {
                Some((kind, name)) => (Some(kind), Some(name), PatternFilter::Match),
                None => (None, None, PatternFilter::Any),
            };
            let filter = AclFilter {
                resource_type,
                name,
                pattern,
                principal,
                host: None,
                operation: None,
                permission: None,
            };
            let acls = within(&args.connect, admin.describe_acls(&filter)).await?;
            print(&acls);
        }
        AclCommand::Remove(spec) => {
            let filters: Vec<AclFilter> = spec.bindings()?.iter().map(exactly).collect();
            let removed = within(&args.connect, admin.delete_acls(&filters)).await?;
            if removed.is_empty() {
                bail!("no such ACL");
            }
            outln!("removed {} ACL(s)", removed.len());
            print(&removed);
        }
    }
    Ok(())
}
