//! Authorized operations (KIP-430) that Metadata, DescribeCluster, DescribeGroups and
//! ConsumerGroupDescribe report when asked. Weir has no authorizer yet, so every operation a
//! resource type has is allowed, which is what Kafka answers without one.

/// The value when the client did not ask.
pub(crate) const NOT_REQUESTED: i32 = i32::MIN;

/// Kafka's AclOperation codes, as bit positions.
const READ: u8 = 3;
const WRITE: u8 = 4;
const CREATE: u8 = 5;
const DELETE: u8 = 6;
const ALTER: u8 = 7;
const DESCRIBE: u8 = 8;
const CLUSTER_ACTION: u8 = 9;
const DESCRIBE_CONFIGS: u8 = 10;
const ALTER_CONFIGS: u8 = 11;
const IDEMPOTENT_WRITE: u8 = 12;

const fn bits(operations: &[u8]) -> i32 {
    let mut set = 0;
    let mut i = 0;
    while i < operations.len() {
        set |= 1 << operations[i];
        i += 1;
    }
    set
}

/// Every operation on the cluster resource.
pub(crate) const CLUSTER: i32 = bits(&[
    CREATE,
    ALTER,
    DESCRIBE,
    CLUSTER_ACTION,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    IDEMPOTENT_WRITE,
]);
/// Every operation on a topic.
pub(crate) const TOPIC: i32 = bits(&[
    READ,
    WRITE,
    CREATE,
    DELETE,
    ALTER,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
]);
/// Every operation on a group.
pub(crate) const GROUP: i32 = bits(&[READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS]);

/// `allowed` when the client asked for authorized operations, else [`NOT_REQUESTED`].
pub(crate) fn reported(requested: bool, allowed: i32) -> i32 {
    if requested {
        allowed
    } else {
        NOT_REQUESTED
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_are_what_kafka_reports_without_an_authorizer() {
        assert_eq!(CLUSTER, 8096);
        assert_eq!(GROUP, 3400);
        assert_eq!(TOPIC, 3576);
    }
}
