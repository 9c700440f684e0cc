//! Authorized operations (KIP-430) that Metadata, DescribeCluster, DescribeGroups and
//! ConsumerGroupDescribe report when asked: the bits of the operations the client may do on
//! the resource ([`crate::authorizer::Access::authorized_operations`]).

/// The value when the client did not ask.
const NOT_REQUESTED: i32 = i32::MIN;

/// `allowed` when the client asked for authorized operations, else [`NOT_REQUESTED`].
pub(crate) fn reported(requested: bool, allowed: i32) -> i32 {
    if requested {
        allowed
    } else {
        NOT_REQUESTED
    }
}
