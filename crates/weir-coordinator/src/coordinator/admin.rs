//! The admin views of groups: ListGroups, DescribeGroups, DeleteGroups.

use crate::runtime::Decision;
use crate::GroupError;

use super::{GroupCoordinator, GroupListing, GroupSummary};

impl GroupCoordinator {
    /// ListGroups: every group in a loaded partition.
    pub fn list_groups(&self) -> Vec<GroupListing> {
        let partitions = self.runtime.lock();
        let mut listing: Vec<GroupListing> = partitions
            .shards()
            .flat_map(|shard| shard.groups.values())
            .map(|g| GroupListing {
                group_id: g.id.clone(),
                protocol_type: g.protocol_type().unwrap_or_default().to_string(),
                state: g.state(),
                group_type: g.group_type(),
            })
            .collect();
        listing.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        listing
    }

    /// DescribeGroups for one group; `Ok(None)` when it does not exist or is not a classic
    /// group (Kafka describes a consumer-protocol or share group there as Dead).
    pub fn describe_group(&self, group_id: &str) -> Result<Option<GroupSummary>, GroupError> {
        let partitions = self.runtime.lock();
        let (_, shard) = partitions.served_ref(group_id)?;
        let classic = shard
            .groups
            .get(group_id)
            .filter(|g| g.consumer().is_none() && g.share().is_none());
        Ok(classic.map(|g| GroupSummary {
            state: g.state(),
            protocol_type: g.protocol_type().unwrap_or_default().to_string(),
            protocol: g.protocol().unwrap_or_default().to_string(),
            members: g.describe_members(),
        }))
    }

    /// DeleteGroups for one group: only an Empty group; its metadata and offsets are
    /// tombstoned before it is forgotten.
    pub async fn delete_group(&self, group_id: &str) -> Result<(), GroupError> {
        let written = self
            .runtime
            .write(group_id, |shard, _| {
                let group = shard.group(group_id)?;
                if !group.has_no_members() || group.offsets.pending_writes > 0 {
                    return Err(GroupError::NonEmptyGroup);
                }
                let records = group.deletion_records();
                Ok(Decision {
                    answer: (),
                    records,
                })
            })
            .await?;
        written.stored
    }
}
