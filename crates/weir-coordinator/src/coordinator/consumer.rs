//! The consumer group protocol (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe.

use crate::consumer_group::{
    check_request, sent_subscription_bytes, ConsumerGroupDescription, ConsumerHeartbeat,
    HeartbeatReply, TopicCatalog, JOIN_EPOCH, STATIC_LEAVE_EPOCH,
};
use crate::group::Group;
use crate::GroupError;

use crate::runtime::Decision;

use super::{admit_metadata, member_shard, GroupCoordinator};

impl GroupCoordinator {
    /// ConsumerGroupHeartbeat: joins, heartbeats or leaves a consumer group protocol group
    /// (the group is created by a join). `version` 0 hands a joining member without an id a
    /// new one; from version 1 the client chooses it.
    /// What changed is appended to the offsets topic and durable before the answer.
    pub async fn consumer_heartbeat(
        &self,
        group_id: &str,
        mut request: ConsumerHeartbeat,
        version: i16,
        catalog: &dyn TopicCatalog,
    ) -> Result<HeartbeatReply, GroupError> {
        if group_id.is_empty() || group_id.len() > i16::MAX as usize {
            return Err(GroupError::InvalidRequest);
        }
        check_request(&request, &self.settings.consumer.metadata)?;
        if request.member_id.trim().is_empty() {
            match (version, request.member_epoch) {
                (0, JOIN_EPOCH) => request.member_id = uuid::Uuid::new_v4().to_string(),
                (0, STATIC_LEAVE_EPOCH) => {}
                _ => return Err(GroupError::InvalidRequest),
            }
        }
        let settings = self.settings.consumer;
        let written = self
            .runtime
            .write_applied(group_id, |partitions, now| {
                let joining = request.member_epoch == JOIN_EPOCH;
                let (_, shard) = partitions.served_ref(group_id)?;
                let existing = shard.groups.get(group_id);
                if existing.is_none() && !joining {
                    return Err(GroupError::GroupIdNotFound);
                }
                // A group being deleted takes members again once its deletion is stored.
                if existing.is_some_and(|group| group.deletions > 0) {
                    return Err(GroupError::CoordinatorLoadInProgress);
                }
                // (check_request refused a subscription over the member bound.) One the
                // group's bound refuses is refused there and adds nothing.
                let bounds = settings.metadata;
                let adds = match existing.and_then(Group::consumer) {
                    Some(consumer) => consumer.subscription_adds_bytes(&request, &bounds),
                    None => Some(sent_subscription_bytes(&request)),
                };
                if let Some(more) = adds.filter(|more| *more > 0) {
                    admit_metadata(partitions, &bounds, group_id, more)?;
                }
                let (_, shard) = partitions.served(group_id)?;
                let created = !shard.groups.contains_key(group_id);
                let group = shard.group_or_new(group_id);
                let reply =
                    group.consumer_heartbeat(request, catalog, &settings, now.instant, now.wall_ms);
                // A refused join changes nothing: no group made, none converted.
                if let (Err(error), true) = (&reply, created) {
                    shard.groups.remove(group_id);
                    return Err(*error);
                }
                Ok(Decision {
                    answer: (reply, group.next_deadline()),
                    records: group.consumer_changes(),
                })
            })
            .await?;
        let (reply, deadline) = written.answer;
        self.runtime.wake_by(deadline);
        if let Err(error) = written.stored {
            tracing::warn!(target: "weir::groups", group = group_id, %error, "consumer group change not stored");
            return Err(GroupError::CoordinatorNotAvailable);
        }
        reply
    }

    /// ConsumerGroupDescribe for one group: `Ok(None)` when it does not exist,
    /// GROUP_ID_NOT_FOUND for a classic group.
    pub fn describe_consumer_group(
        &self,
        group_id: &str,
    ) -> Result<Option<ConsumerGroupDescription>, GroupError> {
        let mut partitions = self.runtime.lock();
        let (_, shard) = member_shard(&mut partitions, group_id)?;
        match shard.groups.get(group_id) {
            None => Ok(None),
            Some(group) => group
                .consumer()
                .map(|c| Some(c.describe()))
                .ok_or(GroupError::GroupIdNotFound),
        }
    }
}
