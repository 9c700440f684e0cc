//! Share groups (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe.

use crate::consumer_group::TopicCatalog;
use crate::share_group::{sent_bytes, ShareGroupDescription, ShareHeartbeat, ShareHeartbeatReply};
use crate::GroupError;

use super::{admit_metadata, member_shard, GroupCoordinator};

impl GroupCoordinator {
    /// ShareGroupHeartbeat: joins, heartbeats or leaves a share group (the group is created
    /// by a join). The handler has checked the request's fields.
    pub fn share_heartbeat(
        &self,
        group_id: &str,
        request: ShareHeartbeat,
        catalog: &dyn TopicCatalog,
    ) -> Result<ShareHeartbeatReply, GroupError> {
        let settings = self.settings.share;
        let bounds = self.settings.consumer.metadata;
        let (reply, deadline) = {
            let mut partitions = self.runtime.lock();
            let now = self.runtime.now();
            let (_, shard) = member_shard(&mut partitions, group_id)?;
            let existing = shard.groups.get(group_id);
            if existing.is_some_and(|group| group.deletions > 0) {
                return Err(GroupError::CoordinatorLoadInProgress);
            }
            let joining = request.member_epoch == crate::share_group::JOIN_EPOCH;
            let known_member = existing
                .and_then(|group| group.share())
                .is_some_and(|share| share.has_member(&request.member_id));
            if existing.is_none() && !joining {
                return Err(GroupError::GroupIdNotFound);
            }
            if joining && !known_member {
                let more = sent_bytes(&request);
                if more > bounds.member_max_bytes {
                    return Err(GroupError::InvalidRequest);
                }
                let held = existing.map_or(0, |group| group.metadata_bytes());
                if held.saturating_add(more) > bounds.group_max_bytes {
                    return Err(GroupError::GroupMaxSizeReached);
                }
                admit_metadata(&mut partitions, &bounds, group_id, more)?;
            }
            let (_, shard) = partitions.served(group_id)?;
            let created = !shard.groups.contains_key(group_id);
            let group = shard.group_or_new(group_id);
            let reply =
                group.share_heartbeat(request, catalog, &settings, now.instant, now.wall_ms);
            if created && reply.is_err() {
                shard.groups.remove(group_id);
            }
            (reply, group_deadline(shard, group_id))
        };
        self.runtime.wake_by(deadline);
        reply
    }

    /// ShareGroupDescribe for one group: `Ok(None)` when it does not exist,
    /// GROUP_ID_NOT_FOUND for a group of another type.
    pub fn describe_share_group(
        &self,
        group_id: &str,
    ) -> Result<Option<ShareGroupDescription>, GroupError> {
        let mut partitions = self.runtime.lock();
        let (_, shard) = member_shard(&mut partitions, group_id)?;
        match shard.groups.get(group_id) {
            None => Ok(None),
            Some(group) => group
                .share()
                .map(|share| Some(share.describe()))
                .ok_or(GroupError::GroupIdNotFound),
        }
    }

    /// The topics DescribeShareGroupOffsets shows for share group `group_id` when it names
    /// none: every topic its members subscribed to since it was made. GROUP_ID_NOT_FOUND when
    /// there is no such share group.
    pub fn share_group_topics(&self, group_id: &str) -> Result<Vec<String>, GroupError> {
        let partitions = self.runtime.lock();
        let (_, shard) = partitions.served_ref(group_id)?;
        shard
            .groups
            .get(group_id)
            .and_then(|group| group.share())
            .map(|share| share.remembered_topics())
            .ok_or(GroupError::GroupIdNotFound)
    }

    /// The type of group `group_id` (`classic`, `consumer` or `share`), if this coordinator
    /// serves it and it exists; for the wording of refusals.
    pub fn group_type(&self, group_id: &str) -> Option<&'static str> {
        let partitions = self.runtime.lock();
        let (_, shard) = partitions.served_ref(group_id).ok()?;
        shard.groups.get(group_id).map(|group| group.group_type())
    }
}

/// The next deadline of `group_id`'s timer, if the group is still there.
fn group_deadline(shard: &super::shard::GroupShard, group_id: &str) -> Option<std::time::Instant> {
    shard.groups.get(group_id).and_then(|g| g.next_deadline())
}
