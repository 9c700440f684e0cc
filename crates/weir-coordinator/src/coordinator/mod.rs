//! The group coordinator: groups in memory, one [`GroupShard`] per partition of
//! `__consumer_offsets` this broker leads, on the coordinator [`Runtime`]; the operations
//! behind each group API, by concept: classic membership ([`classic`]), the consumer group
//! protocol ([`consumer`]), share groups ([`share`]), committed offsets ([`offsets`]) and the
//! admin views ([`admin`]).

mod admin;
mod classic;
mod consumer;
mod offsets;
mod shard;
mod share;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_support;
#[cfg(test)]
mod tests_txn;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::group::{Group, MemberDescription};
use crate::limits::{ConsumerGroupSettings, GroupLimits, MetadataBounds, ShareGroupSettings};
use crate::runtime::{CoordinatorLog, Partitions, Runtime, TopicRuntime};
use crate::state::GroupState;
use crate::GroupError;
use weir_clock::{Clock, Now, SystemClock};

use shard::GroupShard;

pub use offsets::{FetchedOffset, TxnCommit};
pub use weir_metadata::OFFSETS_TOPIC;

/// How long past its own timeouts a JoinGroup or SyncGroup waits at most: the group's timer
/// answers it before then, this bound only guards against a bug leaving it unanswered.
const WAIT_GRACE: Duration = Duration::from_secs(5);

/// Broker settings the coordinator follows.
#[derive(Debug, Clone, Copy)]
pub struct CoordinatorSettings {
    /// Session, delay and size limits for groups.
    pub limits: GroupLimits,
    /// `offset.metadata.max.bytes`.
    pub offset_metadata_max_bytes: usize,
    /// `offsets.retention.minutes` (in ms): how long the committed offsets of a group without members are
    /// kept (from when it became empty, or from the commit for a group that never had any).
    pub offsets_retention_ms: i64,
    /// `offsets.retention.check.interval.ms`.
    pub offsets_retention_check_interval_ms: u64,
    /// Settings of consumer group protocol groups.
    pub consumer: ConsumerGroupSettings,
    /// Settings of share groups.
    pub share: ShareGroupSettings,
}

/// One offset to commit.
#[derive(Debug, Clone)]
pub struct CommitEntry {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// The next offset to read.
    pub offset: i64,
    /// Leader epoch of the last record read, or -1.
    pub leader_epoch: i32,
    /// Client metadata.
    pub metadata: String,
}

/// A group as ListGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// Group id.
    pub group_id: String,
    /// Protocol type (empty for a group that only has offsets).
    pub protocol_type: String,
    /// State.
    pub state: GroupState,
    /// `consumer` for a consumer group protocol group, `share` for a share group, else
    /// `classic`.
    pub group_type: &'static str,
}

/// A group as DescribeGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSummary {
    /// State.
    pub state: GroupState,
    /// Protocol type.
    pub protocol_type: String,
    /// Chosen protocol, or empty.
    pub protocol: String,
    /// Members with their assignments.
    pub members: Vec<MemberDescription>,
}

/// The group coordinator of this broker.
pub struct GroupCoordinator {
    settings: CoordinatorSettings,
    runtime: Arc<Runtime<GroupShard>>,
}

impl GroupCoordinator {
    /// A coordinator with no partitions yet: group requests get COORDINATOR_NOT_AVAILABLE
    /// until [`GroupCoordinator::start`].
    pub fn new(settings: CoordinatorSettings, log: Arc<dyn CoordinatorLog>) -> GroupCoordinator {
        GroupCoordinator::with_clock(settings, log, Arc::new(SystemClock))
    }

    /// [`GroupCoordinator::new`] reading the time from `clock`.
    pub fn with_clock(
        settings: CoordinatorSettings,
        log: Arc<dyn CoordinatorLog>,
        clock: Arc<dyn Clock>,
    ) -> GroupCoordinator {
        GroupCoordinator {
            settings,
            runtime: Arc::new(Runtime::new(log, clock, move |now: Now| {
                GroupShard::new(settings, now)
            })),
        }
    }

    /// The runtime of `__consumer_offsets`, which the broker starts, loads and unloads as the
    /// topic's leadership moves.
    pub fn topic_runtime(&self) -> Arc<dyn TopicRuntime> {
        self.runtime.clone()
    }

    /// Checks that `group_id` can be served now (for FindCoordinator and OffsetFetch).
    pub fn check_served(&self, group_id: &str) -> Result<(), GroupError> {
        self.runtime.lock().served_partition(group_id)?;
        Ok(())
    }

    /// Expires sessions and pending member ids, completes rebalances whose time is up and
    /// expires committed offsets, until `stop` resolves.
    pub async fn run_timers(self: Arc<Self>, stop: impl Future<Output = ()>) {
        self.runtime.clone().run_timers(stop).await;
    }
}

/// Membership requests need a group id; offset commits and fetches, descriptions and
/// deletions accept the empty one, as Kafka does for old clients.
fn member_shard<'a>(
    partitions: &'a mut Partitions<GroupShard>,
    group_id: &str,
) -> Result<(i32, &'a mut GroupShard), GroupError> {
    if group_id.is_empty() {
        return Err(GroupError::InvalidGroupId);
    }
    Ok(partitions.served(group_id)?)
}

/// The group a membership request (SyncGroup, Heartbeat, LeaveGroup) names, with its
/// partition; UNKNOWN_MEMBER_ID when there is no such group.
fn member_group<'a>(
    partitions: &'a mut Partitions<GroupShard>,
    group_id: &str,
) -> Result<(i32, &'a mut Group), GroupError> {
    let (partition, shard) = member_shard(partitions, group_id)?;
    let group = shard
        .groups
        .get_mut(group_id)
        .ok_or(GroupError::UnknownMemberId)?;
    Ok((partition, group))
}

/// Admits `more` bytes of member metadata for `group_id` under
/// `group.coordinator.metadata.max.bytes` (all the groups of this coordinator); past it the
/// request is answered COORDINATOR_NOT_AVAILABLE, which clients retry, so a client that fills
/// the coordinator keeps others out only while its members live.
fn admit_metadata(
    partitions: &mut Partitions<GroupShard>,
    bounds: &MetadataBounds,
    group_id: &str,
    more: usize,
) -> Result<(), GroupError> {
    let held: usize = partitions.shards().map(|s| s.metadata_held).sum();
    if held.saturating_add(more) > bounds.coordinator_max_bytes {
        tracing::warn!(target: "weir::groups", group = group_id, bytes = more, held, limit = bounds.coordinator_max_bytes, "group request refused (coordinator not available): the groups of this coordinator hold group.coordinator.metadata.max.bytes of member metadata");
        return Err(GroupError::CoordinatorNotAvailable);
    }
    let (_, shard) = partitions.served(group_id)?;
    shard.metadata_held = shard.metadata_held.saturating_add(more);
    Ok(())
}
