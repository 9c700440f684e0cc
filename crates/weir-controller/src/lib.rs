//! `weir-controller` is the cluster manager: it validates metadata changes, turns them into
//! `weir_metadata` commands and commits them through the metadata quorum ([`RaftQuorum`], a
//! Raft group of controllers; a single node is a quorum of one), whose state machine applies
//! them to the image it publishes to brokers as immutable snapshots through [`LocalControl`]
//! (the broker's `MetadataControl`). Only [`MetadataQuorum`] knows Raft.
//!
//! It never touches partition data, is never on the produce or fetch path, and never calls
//! into the broker: brokers follow the images it publishes.

mod controller;
mod dispatch;
pub mod election;
pub mod fencing;
mod forward;
pub mod leases;
pub mod liveness;
mod mutation_quota;
mod placement;
pub mod query;
mod quorum;
mod reassignment;
mod record_file;
mod relational;

pub use controller::{
    Controller, ControllerSettings, PARTITIONS_PER_TOPIC_MAX, PRODUCER_ID_BLOCK_SIZE,
};
pub use dispatch::LocalControl;
pub use quorum::{
    read_peer_frames, ControlHandler, MetadataQuorum, QuorumConfig, QuorumTls, RaftQuorum,
    RaftStatus,
};
