//! Access control lists as Kafka keeps them: bindings of a resource pattern (a topic, group,
//! transactional id or the cluster, by literal name or prefix) to a principal, a host, an
//! operation and allow or deny; filters that select bindings for DescribeAcls and DeleteAcls;
//! and the decision Kafka's `StandardAuthorizer` takes from them. A deny wins over any allow;
//! READ, WRITE, DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS, and ALL
//! is every operation. The codes are Kafka's wire codes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// The one name of the cluster resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// The literal name and the principal or host that match every other.
pub const WILDCARD: &str = "*";

/// The principal that matches every user.
pub const ANY_USER: &str = "User:*";

macro_rules! codes {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $code:literal => $wire:literal,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
        }

        impl $name {
            /// Every value.
            pub const ALL_VALUES: &'static [$name] = &[$($name::$variant,)*];

            /// The wire code.
            pub fn code(self) -> i8 {
                match self {
                    $($name::$variant => $code,)*
                }
            }

            /// The value of a wire code, if it names one.
            pub fn from_code(code: i8) -> Option<$name> {
                match code {
                    $($code => Some($name::$variant),)*
                    _ => None,
                }
            }

            /// Kafka's name, as its tools print it.
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)*
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

codes! {
    /// The kind of resource an ACL guards.
    ResourceType {
        /// A topic.
        Topic = 2 => "TOPIC",
        /// A consumer group.
        Group = 3 => "GROUP",
        /// The cluster (named `kafka-cluster`).
        Cluster = 4 => "CLUSTER",
        /// A transactional id.
        TransactionalId = 5 => "TRANSACTIONAL_ID",
        /// A delegation token.
        DelegationToken = 6 => "DELEGATION_TOKEN",
        /// A user.
        User = 7 => "USER",
    }
}

codes! {
    /// How an ACL's resource name matches.
    PatternType {
        /// The name itself, or every name when it is `*`.
        Literal = 3 => "LITERAL",
        /// Every name starting with it.
        Prefixed = 4 => "PREFIXED",
    }
}

codes! {
    /// An operation on a resource.
    AclOperation {
        /// Every operation.
        All = 2 => "ALL",
        /// Read (consume, join a group, commit offsets).
        Read = 3 => "READ",
        /// Write (produce).
        Write = 4 => "WRITE",
        /// Create.
        Create = 5 => "CREATE",
        /// Delete.
        Delete = 6 => "DELETE",
        /// Alter.
        Alter = 7 => "ALTER",
        /// Describe.
        Describe = 8 => "DESCRIBE",
        /// What brokers do among themselves (replica fetch, transaction markers).
        ClusterAction = 9 => "CLUSTER_ACTION",
        /// Describe configs.
        DescribeConfigs = 10 => "DESCRIBE_CONFIGS",
        /// Alter configs.
        AlterConfigs = 11 => "ALTER_CONFIGS",
        /// Idempotent produce.
        IdempotentWrite = 12 => "IDEMPOTENT_WRITE",
        /// Create delegation tokens.
        CreateTokens = 13 => "CREATE_TOKENS",
        /// Describe delegation tokens.
        DescribeTokens = 14 => "DESCRIBE_TOKENS",
    }
}

codes! {
    /// Whether an ACL allows or denies.
    AclPermission {
        /// Denies, whatever else allows.
        Deny = 2 => "DENY",
        /// Allows, unless something denies.
        Allow = 3 => "ALLOW",
    }
}

/// Kafka's wildcard codes in filters.
const ANY: i8 = 1;
/// PatternType MATCH: every pattern that matches the filter's name.
const MATCH: i8 = 2;

impl AclOperation {
    /// Whether an ACL for `self` covers `wanted`: ALL covers everything, READ, WRITE, DELETE
    /// and ALTER cover DESCRIBE, and ALTER_CONFIGS covers DESCRIBE_CONFIGS (allows only; a
    /// deny covers its own operation and, for ALL, every one).
    fn implies(self, wanted: AclOperation) -> bool {
        use AclOperation::*;
        self == All
            || self == wanted
            || (wanted == Describe && matches!(self, Read | Write | Delete | Alter))
            || (wanted == DescribeConfigs && self == AlterConfigs)
    }

    /// The operations a resource type has, as Kafka lists them for authorized operations.
    pub fn of(resource: ResourceType) -> &'static [AclOperation] {
        use AclOperation::*;
        match resource {
            ResourceType::Topic => &[
                Read,
                Write,
                Create,
                Delete,
                Alter,
                Describe,
                DescribeConfigs,
                AlterConfigs,
            ],
            ResourceType::Group => &[Read, Delete, Describe, DescribeConfigs, AlterConfigs],
            ResourceType::Cluster => &[
                Create,
                Alter,
                Describe,
                ClusterAction,
                DescribeConfigs,
                AlterConfigs,
                IdempotentWrite,
            ],
            ResourceType::TransactionalId => &[Write, Describe],
            ResourceType::DelegationToken => &[Describe],
            ResourceType::User => &[CreateTokens, DescribeTokens],
        }
    }
}

/// Which resources an ACL is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResourcePattern {
    /// The resource type.
    pub resource_type: ResourceType,
    /// How `name` matches.
    pub pattern_type: PatternType,
    /// A name, a prefix, or `*`.
    pub name: String,
}

/// Who an ACL is for and what it allows or denies.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclEntry {
    /// `Type:name`, e.g. `User:alice`, or `User:*` for everyone.
    pub principal: String,
    /// The client address, or `*` for any.
    pub host: String,
    /// The operation.
    pub operation: AclOperation,
    /// Allow or deny.
    pub permission: AclPermission,
}

/// One ACL: a resource pattern and an entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    /// The resources.
    pub pattern: ResourcePattern,
    /// The principal, host, operation and permission.
    pub entry: AclEntry,
}

impl AclBinding {
    /// A binding from CreateAcls' fields, checked as Kafka checks them (its messages).
    pub fn from_wire(
        (resource_type, name, pattern_type): (i8, &str, i8),
        (principal, host, operation, permission): (&str, &str, i8, i8),
    ) -> Result<AclBinding, String> {
        let resource_type = ResourceType::from_code(resource_type)
            .ok_or_else(|| format!("Invalid resourceType {}", describe_code(resource_type)))?;
        let pattern_type = PatternType::from_code(pattern_type)
            .ok_or_else(|| format!("Invalid patternType {}", describe_code(pattern_type)))?;
        let operation = AclOperation::from_code(operation)
            .ok_or_else(|| format!("Invalid operation {}", describe_code(operation)))?;
        let permission = AclPermission::from_code(permission)
            .ok_or_else(|| format!("Invalid permissionType {}", describe_code(permission)))?;
        if name.is_empty() {
            return Err("Resource name should not be empty".into());
        }
        if resource_type == ResourceType::Cluster && name != CLUSTER_NAME {
            return Err(format!(
                "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
            ));
        }
        check_principal(principal)?;
        if host.is_empty() {
            return Err("Invalid empty host".into());
        }
        Ok(AclBinding {
            pattern: ResourcePattern {
                resource_type,
                pattern_type,
                name: name.to_string(),
            },
            entry: AclEntry {
                principal: principal.to_string(),
                host: host.to_string(),
                operation,
                permission,
            },
        })
    }
}

fn describe_code(code: i8) -> &'static str {
    match code {
        ANY => "ANY",
        MATCH => "MATCH",
        _ => "UNKNOWN",
    }
}

/// A principal is `Type:name` with a type and a name.
fn check_principal(principal: &str) -> Result<(), String> {
    match principal.split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(()),
        Some(_) => Err(format!("Invalid principal `{principal}`")),
        None => Err(format!("Could not parse principal from `{principal}` (no colon is present separating the principal type from the principal name)")),
    }
}

/// How a filter matches resource names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PatternFilter {
    /// Any pattern type, the name equal.
    Any,
    /// Every pattern that would apply to the name: literal equal or `*`, prefixes of it.
    Match,
    /// Exactly this pattern type, the name equal.
    Exactly(PatternType),
}

/// Selects ACLs for DescribeAcls and DeleteAcls; a `None` field matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclFilter {
    /// The resource type, or any.
    pub resource_type: Option<ResourceType>,
    /// The resource name, or any.
    pub name: Option<String>,
    /// How the name is matched.
    pub pattern: PatternFilter,
    /// The principal, or any.
    pub principal: Option<String>,
    /// The host, or any.
    pub host: Option<String>,
    /// The operation, or any.
    pub operation: Option<AclOperation>,
    /// The permission, or any.
    pub permission: Option<AclPermission>,
}

impl AclFilter {
    /// A filter from DescribeAcls' or DeleteAcls' fields (ANY is code 1, MATCH 2).
    pub fn from_wire(
        (resource_type, name, pattern_type): (i8, Option<&str>, i8),
        (principal, host, operation, permission): (Option<&str>, Option<&str>, i8, i8),
    ) -> Result<AclFilter, String> {
        let pattern = match pattern_type {
            ANY => PatternFilter::Any,
            MATCH => PatternFilter::Match,
            code => PatternFilter::Exactly(
                PatternType::from_code(code)
                    .ok_or_else(|| format!("Invalid patternType {}", describe_code(code)))?,
            ),
        };
        Ok(AclFilter {
            resource_type: any_or(
                resource_type,
                ResourceType::from_code(resource_type),
                "resourceType",
            )?,
            name: name.map(str::to_string),
            pattern,
            principal: principal.map(str::to_string),
            host: host.map(str::to_string),
            operation: any_or(operation, AclOperation::from_code(operation), "operation")?,
            permission: any_or(
                permission,
                AclPermission::from_code(permission),
                "permissionType",
            )?,
        })
    }

    /// Whether `binding` is one this filter selects.
    pub fn matches(&self, binding: &AclBinding) -> bool {
        let AclBinding { pattern, entry } = binding;
        let name_matches = match (self.pattern, &self.name) {
            (PatternFilter::Match, Some(name)) => match pattern.pattern_type {
                PatternType::Literal => pattern.name == *name || pattern.name == WILDCARD,
                PatternType::Prefixed => name.starts_with(&pattern.name),
            },
            (PatternFilter::Exactly(kind), name) => {
                pattern.pattern_type == kind && same(name, &pattern.name)
            }
            (_, name) => same(name, &pattern.name),
        };
        name_matches
            && same(&self.resource_type, &pattern.resource_type)
            && same(&self.principal, &entry.principal)
            && same(&self.host, &entry.host)
            && same(&self.operation, &entry.operation)
            && same(&self.permission, &entry.permission)
    }
}

/// `None` for ANY, else the value a code names (refused when it names none).
fn any_or<T>(code: i8, known: Option<T>, what: &str) -> Result<Option<T>, String> {
    match (code, known) {
        (ANY, _) => Ok(None),
        (_, Some(value)) => Ok(Some(value)),
        _ => Err(format!("Invalid {what} {}", describe_code(code))),
    }
}

/// Whether a filter's field (`None`: any) admits `value`.
fn same<T: PartialEq>(wanted: &Option<T>, value: &T) -> bool {
    wanted.as_ref().is_none_or(|w| w == value)
}

/// Every ACL, by resource type and pattern type, then name, so a check looks up only the
/// patterns that can apply, by the name it is given (no allocation).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<AclBinding>", into = "Vec<AclBinding>")]
pub struct AclTable {
    by_kind: BTreeMap<(ResourceType, PatternType), BTreeMap<String, BTreeSet<AclEntry>>>,
}

impl From<Vec<AclBinding>> for AclTable {
    fn from(bindings: Vec<AclBinding>) -> AclTable {
        let mut table = AclTable::default();
        for binding in bindings {
            table.insert(binding);
        }
        table
    }
}

impl From<AclTable> for Vec<AclBinding> {
    fn from(table: AclTable) -> Vec<AclBinding> {
        table.iter().collect()
    }
}

/// What the ACLs say of one access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AclDecision {
    /// An ACL allows it and none denies it.
    Allowed,
    /// An ACL denies it, or the resource has ACLs and none allows it.
    Denied,
    /// The resource has no ACL at all (`allow.everyone.if.no.acl.found` decides).
    NoAcls,
}

impl AclTable {
    /// Whether there is no ACL.
    pub fn is_empty(&self) -> bool {
        self.by_kind.is_empty()
    }

    /// How many ACLs there are.
    pub fn len(&self) -> usize {
        self.by_kind
            .values()
            .flat_map(BTreeMap::values)
            .map(BTreeSet::len)
            .sum()
    }

    /// Every ACL, ordered by resource pattern.
    pub fn iter(&self) -> impl Iterator<Item = AclBinding> + '_ {
        self.by_kind
            .iter()
            .flat_map(|(&(resource_type, pattern_type), names)| {
                names.iter().flat_map(move |(name, entries)| {
                    entries.iter().map(move |entry| AclBinding {
                        pattern: ResourcePattern {
                            resource_type,
                            pattern_type,
                            name: name.clone(),
                        },
                        entry: entry.clone(),
                    })
                })
            })
    }

    fn entries(&self, pattern: &ResourcePattern) -> Option<&BTreeSet<AclEntry>> {
        self.by_kind
            .get(&(pattern.resource_type, pattern.pattern_type))?
            .get(&pattern.name)
    }

    /// Whether the table holds `binding`.
    pub fn contains(&self, binding: &AclBinding) -> bool {
        self.entries(&binding.pattern)
            .is_some_and(|entries| entries.contains(&binding.entry))
    }

    /// Adds `binding` (once).
    pub fn insert(&mut self, binding: AclBinding) {
        let AclBinding { pattern, entry } = binding;
        self.by_kind
            .entry((pattern.resource_type, pattern.pattern_type))
            .or_default()
            .entry(pattern.name)
            .or_default()
            .insert(entry);
    }

    /// Removes `binding`, if held.
    pub fn remove(&mut self, binding: &AclBinding) {
        let kind = (binding.pattern.resource_type, binding.pattern.pattern_type);
        let Some(names) = self.by_kind.get_mut(&kind) else {
            return;
        };
        if let Some(entries) = names.get_mut(&binding.pattern.name) {
            entries.remove(&binding.entry);
            if entries.is_empty() {
                names.remove(&binding.pattern.name);
            }
        }
        if names.is_empty() {
            self.by_kind.remove(&kind);
        }
    }

    /// The entries of every pattern that applies to the resource `name` of `resource_type`:
    /// the literal name, the literal `*`, and each prefix of the name.
    fn applying<'a>(
        &'a self,
        resource_type: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a AclEntry> + 'a {
        let literal = self.by_kind.get(&(resource_type, PatternType::Literal));
        let wildcard = (name != WILDCARD).then_some(WILDCARD);
        let literals = [Some(name), wildcard]
            .into_iter()
            .flatten()
            .filter_map(move |n| literal?.get(n));
        let prefixed = self.by_kind.get(&(resource_type, PatternType::Prefixed));
        let prefixes = prefixed.into_iter().flat_map(move |prefixed| {
            name.char_indices()
                .filter_map(move |(i, c)| prefixed.get(&name[..i + c.len_utf8()]))
        });
        literals.chain(prefixes).flatten()
    }

    /// Kafka's `StandardAuthorizer` decision for `principal` at `host` doing `operation` on
    /// the resource `name` of `resource_type`.
    pub fn decide(
        &self,
        (principal, host): (&str, IpAddr),
        operation: AclOperation,
        (resource_type, name): (ResourceType, &str),
    ) -> AclDecision {
        let mut found = false;
        let mut allowed = false;
        for entry in self.applying(resource_type, name) {
            found = true;
            if !(entry.principal == principal || entry.principal == ANY_USER)
                || !host_matches(&entry.host, host)
            {
                continue;
            }
            match entry.permission {
                AclPermission::Deny
                    if entry.operation == AclOperation::All || entry.operation == operation =>
                {
                    return AclDecision::Denied;
                }
                AclPermission::Allow if entry.operation.implies(operation) => allowed = true,
                _ => {}
            }
        }
        match (found, allowed) {
            (false, _) => AclDecision::NoAcls,
            (true, true) => AclDecision::Allowed,
            (true, false) => AclDecision::Denied,
        }
    }

    /// Whether some ACL lets `principal` at `host` do `operation` on some resource of
    /// `resource_type` (KIP-679: WRITE on any topic delegates IDEMPOTENT_WRITE), unless a
    /// deny of it on every such resource (`*`) stands in the way.
    pub fn allows_some(
        &self,
        (principal, host): (&str, IpAddr),
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        let applies = |entry: &AclEntry| {
            (entry.principal == principal || entry.principal == ANY_USER)
                && host_matches(&entry.host, host)
        };
        let mut allowed = false;
        for pattern_type in PatternType::ALL_VALUES {
            let Some(names) = self.by_kind.get(&(resource_type, *pattern_type)) else {
                continue;
            };
            for (name, entries) in names {
                let everything = *pattern_type == PatternType::Literal && name == WILDCARD;
                for entry in entries.iter().filter(|e| applies(e)) {
                    match entry.permission {
                        AclPermission::Deny
                            if everything
                                && (entry.operation == AclOperation::All
                                    || entry.operation == operation) =>
                        {
                            return false;
                        }
                        AclPermission::Allow if entry.operation.implies(operation) => {
                            allowed = true
                        }
                        _ => {}
                    }
                }
            }
        }
        allowed
    }
}

/// Whether an ACL's host applies to a client at `host`.
fn host_matches(acl_host: &str, host: IpAddr) -> bool {
    acl_host == WILDCARD || acl_host.parse::<IpAddr>().is_ok_and(|h| h == host)
}

#[cfg(test)]
mod tests;
