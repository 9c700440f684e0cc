//! `weir-metadata` is cluster metadata as data: the [`MetadataCommand`]s every change is made
//! of, the [`MetadataImage`] that applying them in order builds, Kafka's topic configs, and
//! [`MetadataControl`], the interface through which the broker asks the controller for a change
//! and follows the stream of committed images. It does no I/O: the controller (which makes
//! commands durable) and the broker (which serves from images) both build on it, and neither
//! calls into the other.

pub mod acl;
pub mod authorizer;
pub mod broker_config;
mod command;
mod control;
mod error;
mod image;
pub mod quota;
pub mod requests;
pub mod topic_config;

pub use command::{
    BrokerListener, ConfigChange, MetadataCommand, PartitionChange, ReplicaAssignment,
    ScramDeletion, ScramUpsert,
};
pub use control::{Committed, MetadataControl, Pending};
pub use error::ControllerError;
pub use image::{
    broker_epoch, BrokerRegistration, MetadataImage, PartitionImage, TopicImage, NO_LEADER,
};
pub use requests::{
    AlterPartition, ElectionType, NewTopic, PartitionOutcome, PartitionRefusal, QuorumStatus,
    Reassignment, VoterStatus,
};
pub use uuid::Uuid;

/// The internal topic holding committed offsets and group metadata.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The internal topic holding the transaction coordinator's state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// The internal topic holding share groups' share-partition state (KIP-932).
pub const SHARE_GROUP_STATE_TOPIC: &str = "__share_group_state";

/// Whether `topic` is one of the coordinators' internal topics, which clients cannot produce
/// to, delete or grow.
pub fn is_internal_topic(topic: &str) -> bool {
    topic == OFFSETS_TOPIC || topic == TRANSACTION_STATE_TOPIC || topic == SHARE_GROUP_STATE_TOPIC
}

/// Longest topic name Kafka accepts.
pub const TOPIC_NAME_MAX_CHARS: usize = 249;

/// Checks a topic name the way Kafka does: 1–249 characters of `[a-zA-Z0-9._-]`, and not `.`
/// or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    let invalid = |why: String| Err(format!("Topic name is invalid: {why}"));
    if name.is_empty() {
        return invalid("the empty string is not allowed".into());
    }
    if name == "." || name == ".." {
        return invalid(format!("'{name}' is not allowed"));
    }
    if name.len() > TOPIC_NAME_MAX_CHARS {
        return invalid(format!(
            "the length of '{name}' is longer than the max allowed length {TOPIC_NAME_MAX_CHARS}"
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return invalid(format!(
            "'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::validate_topic_name;

    #[test]
    fn topic_names() {
        let long = "a".repeat(250);
        for (name, ok) in [
            ("orders", true),
            ("a.b_c-D9", true),
            ("", false),
            (".", false),
            ("..", false),
            ("bad/name", false),
            ("sp ace", false),
            (long.as_str(), false),
        ] {
            assert_eq!(validate_topic_name(name).is_ok(), ok, "{name:?}");
        }
    }
}
