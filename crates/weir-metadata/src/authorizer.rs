//! Authorization as every door enforces it (the Kafka listeners and the HTTP gateway): the
//! settings that switch Kafka's `StandardAuthorizer` on (`authorizer.class.name`,
//! `super.users`, `allow.everyone.if.no.acl.found`) and [`Access`], what one request may do,
//! decided from the ACLs of the metadata image it was served with. The ACLs themselves are
//! cluster metadata, changed through the controller.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use crate::acl::{AclDecision, AclOperation, ResourceType, CLUSTER_NAME};
use crate::MetadataImage;

/// Kafka's authorizer, by the names Kafka knows it by.
const STANDARD_AUTHORIZER: [&str; 2] = [
    "StandardAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
];

/// The principal of a client that has not authenticated.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// Whether and how requests are authorized.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerSettings {
    /// Whether requests are checked against the ACLs at all.
    pub enabled: bool,
    /// Principals allowed everything.
    pub super_users: BTreeSet<String>,
    /// Whether a resource with no ACL is open to everyone.
    pub allow_if_no_acl: bool,
}

impl AuthorizerSettings {
    /// From `authorizer.class.name`, `super.users` and `allow.everyone.if.no.acl.found`.
    pub fn resolve(
        class_name: &str,
        super_users: &str,
        allow_if_no_acl: bool,
    ) -> Result<AuthorizerSettings, String> {
        let class_name = class_name.trim();
        let enabled = match class_name {
            "" => false,
            name if STANDARD_AUTHORIZER.contains(&name) => true,
            name => {
                return Err(format!(
                    "authorizer.class.name {name:?} is not an authorizer Weir has; StandardAuthorizer checks the ACLs in the cluster metadata"
                ))
            }
        };
        let mut users = BTreeSet::new();
        for user in super_users
            .split(';')
            .map(str::trim)
            .filter(|u| !u.is_empty())
        {
            match user.split_once(':') {
                Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {
                    users.insert(user.to_string());
                }
                _ => {
                    return Err(format!(
                        "super.users names {user:?}, not a principal of the form User:name"
                    ))
                }
            }
        }
        Ok(AuthorizerSettings {
            enabled,
            super_users: users,
            allow_if_no_acl,
        })
    }
}

/// What one request may do: its principal and address against one metadata image's ACLs.
pub struct Access {
    /// The settings and the image a checked request is decided from; `None` when nothing is
    /// checked (no authorizer, or a super user).
    checked: Option<(Arc<AuthorizerSettings>, Arc<MetadataImage>)>,
    principal: Arc<str>,
    host: IpAddr,
}

impl Access {
    /// The access of `principal` at `host` under `settings`, decided from the image `image`
    /// gives (taken only when something is to be checked).
    pub fn new(
        settings: &Arc<AuthorizerSettings>,
        image: impl FnOnce() -> Arc<MetadataImage>,
        principal: Arc<str>,
        host: IpAddr,
    ) -> Access {
        let checked = settings.enabled && !settings.super_users.contains(&*principal);
        Access {
            checked: checked.then(|| (settings.clone(), image())),
            principal,
            host,
        }
    }

    /// The principal, `User:name`.
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// Whether the request may do `operation` on the resource `name` of `resource_type`.
    pub fn allows(&self, operation: AclOperation, resource_type: ResourceType, name: &str) -> bool {
        let Some((settings, image)) = &self.checked else {
            return true;
        };
        match image.acls().decide(
            (&self.principal, self.host),
            operation,
            (resource_type, name),
        ) {
            AclDecision::Allowed => true,
            AclDecision::Denied => false,
            AclDecision::NoAcls => settings.allow_if_no_acl,
        }
    }

    /// Whether the request may do `operation` on topic `name`.
    pub fn topic(&self, operation: AclOperation, name: &str) -> bool {
        self.allows(operation, ResourceType::Topic, name)
    }

    /// Whether the request may do `operation` on group `id`.
    pub fn group(&self, operation: AclOperation, id: &str) -> bool {
        self.allows(operation, ResourceType::Group, id)
    }

    /// Whether the request may do `operation` on the cluster.
    pub fn cluster(&self, operation: AclOperation) -> bool {
        self.allows(operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// Whether the request may do `operation` on transactional id `id`.
    pub fn transactional_id(&self, operation: AclOperation, id: &str) -> bool {
        self.allows(operation, ResourceType::TransactionalId, id)
    }

    /// Whether the request may write idempotently: IDEMPOTENT_WRITE on the cluster, or (KIP-679)
    /// WRITE on some topic.
    pub fn idempotent_write(&self) -> bool {
        let Some((_, image)) = &self.checked else {
            return true;
        };
        self.cluster(AclOperation::IdempotentWrite)
            || image.acls().allows_some(
                (&self.principal, self.host),
                AclOperation::Write,
                ResourceType::Topic,
            )
    }

    /// The operations (KIP-430 bits) the request may do on the resource `name` of
    /// `resource_type`.
    pub fn authorized_operations(&self, resource_type: ResourceType, name: &str) -> i32 {
        AclOperation::of(resource_type)
            .iter()
            .filter(|op| self.allows(**op, resource_type, name))
            .fold(0, |bits, op| bits | 1 << op.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_take_kafkas_names_and_refuse_others() {
        let on = AuthorizerSettings::resolve(
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "User:admin; User:ANONYMOUS;",
            false,
        )
        .expect("valid");
        assert!(on.enabled);
        assert_eq!(on.super_users.len(), 2);
        assert!(
            !AuthorizerSettings::resolve("", "", true)
                .expect("valid")
                .enabled
        );
        for (class, users) in [("AclAuthorizer", ""), ("StandardAuthorizer", "admin")] {
            assert!(AuthorizerSettings::resolve(class, users, false).is_err());
        }
    }

    #[test]
    fn without_an_authorizer_or_as_a_super_user_everything_is_allowed() {
        let image = Arc::new(MetadataImage::default());
        let host: IpAddr = "127.0.0.1".parse().expect("valid");
        let off = Arc::new(AuthorizerSettings::default());
        let access = Access::new(&off, || image.clone(), "User:x".into(), host);
        assert!(access.topic(AclOperation::Write, "t"));
        // What Kafka reports without an authorizer.
        assert_eq!(
            access.authorized_operations(ResourceType::Cluster, CLUSTER_NAME),
            8096
        );
        assert_eq!(access.authorized_operations(ResourceType::Group, "g"), 3400);
        assert_eq!(access.authorized_operations(ResourceType::Topic, "t"), 3576);
        let on = Arc::new(
            AuthorizerSettings::resolve("StandardAuthorizer", "User:root", false).expect("valid"),
        );
        assert!(Access::new(&on, || image.clone(), "User:root".into(), host)
            .cluster(AclOperation::Alter));
        let nobody = Access::new(&on, || image, "User:x".into(), host);
        assert!(!nobody.topic(AclOperation::Describe, "t"));
        assert!(!nobody.idempotent_write());
        assert_eq!(nobody.authorized_operations(ResourceType::Topic, "t"), 0);
    }
}
