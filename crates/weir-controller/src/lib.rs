//! `weir-controller` is the cluster manager in its single-node form: it validates metadata
//! changes, turns them into `weir_metadata` commands, appends them to a [`MetadataLog`] and
//! applies them to the image, which it publishes to brokers as immutable snapshots through
//! [`LocalControl`] (the broker's `MetadataControl`). On start the log is replayed. The
//! [`MetadataLog`] trait is the seam where a Raft quorum will replace the local file without
//! changing the commands.
//!
//! It never touches partition data, is never on the produce or fetch path, and never calls
//! into the broker: brokers follow the images it publishes.

mod controller;
mod metadata_log;
mod placement;
pub mod query;
mod relational;

pub use controller::{Controller, LocalControl, PARTITIONS_PER_TOPIC_MAX, PRODUCER_ID_BLOCK_SIZE};
pub use metadata_log::{FileMetadataLog, MetadataLog, MetadataLogError};
