//! `weir-controller` is the cluster manager in its single-node form: metadata changes are
//! typed [`MetadataCommand`]s, validated here, appended to a [`MetadataLog`] and applied to the
//! [`MetadataImage`], which is published to the data plane as an immutable snapshot. On start
//! the log is replayed. The [`MetadataLog`] trait is the seam where a Raft quorum will replace
//! the local file without changing the commands.
//!
//! It never touches partition data and is never on the produce or fetch path: the broker reads
//! the latest image from memory.

mod command;
mod controller;
mod image;
mod metadata_log;
pub mod topic_config;

pub use command::MetadataCommand;
pub use controller::{
    Controller, ControllerError, NewTopic, PARTITIONS_PER_TOPIC_MAX, PRODUCER_ID_BLOCK_SIZE,
};
pub use image::{MetadataImage, TopicImage};
pub use metadata_log::{FileMetadataLog, MetadataLog, MetadataLogError};
pub use uuid::Uuid;

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
