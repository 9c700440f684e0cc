//! One consumer group: its membership under one protocol or none, and its committed offsets.
//! A group without members of either protocol becomes a group of the protocol whose member
//! joins; one with members refuses the other protocol's members, as Kafka does.
//!
//! Everything here is synchronous and takes the time as an argument, so the state machines
//! are tested without a clock or a log.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::consumer_group::{ConsumerGroup, ConsumerHeartbeat, HeartbeatReply, TopicCatalog};
use crate::limits::{ConsumerGroupSettings, GroupLimits, ShareGroupSettings};
use crate::records::{ConsumerKey, GroupRecord, GroupValue};
use crate::share_group::{ShareGroup, ShareHeartbeat, ShareHeartbeatReply, GROUP_TYPE};
use crate::state::GroupState;
use crate::GroupError;

mod classic;
mod consumer_records;
mod offsets;

pub use classic::{
    ClassicGroup, JoinOutcome, JoinRequest, JoinedMember, MemberDescription, Step, SyncAssignment,
    SyncOutcome, SyncRequest,
};
pub use offsets::{CommittedOffset, Offsets};

/// Who is in a group, and under which protocol.
#[derive(Debug, Default)]
pub enum Membership {
    /// Nobody has joined: a group known by its committed offsets only.
    #[default]
    Empty,
    /// Members of the classic protocol (JoinGroup, SyncGroup), or none since the last left.
    Classic(ClassicGroup),
    /// Members of the consumer group protocol (KIP-848), or none since the last left (boxed:
    /// it is several times the size of the others).
    Consumer(Box<ConsumerGroup>),
    /// Members of a share group (KIP-932), or none since the last left. Held in memory only:
    /// a coordinator that loads the partition anew knows no share group, and their members
    /// rejoin (their heartbeats are answered UNKNOWN_MEMBER_ID).
    Share(Box<ShareGroup>),
}

/// A consumer group.
#[derive(Debug)]
pub struct Group {
    /// Group id.
    pub id: String,
    /// Its members.
    pub membership: Membership,
    /// Its committed offsets.
    pub offsets: Offsets,
    /// Keys of consumer group records the log may hold wrongly (their write failed, or the
    /// consumer group they belong to was replaced): the next write stores what the group
    /// holds under each, its value or a tombstone.
    stale_keys: BTreeSet<ConsumerKey>,
    /// A classic group became a consumer group: its classic metadata record must go.
    tombstone_classic: bool,
    /// Writes deleting the group's membership (DeleteGroups, offset retention) appended and
    /// not yet ended: until they end the group makes no consumer group records, which the
    /// log would hold after its deletion but memory before it.
    pub deletions: usize,
}

impl Group {
    /// A new group without members or offsets.
    pub fn new(id: String) -> Group {
        Group {
            id,
            membership: Membership::Empty,
            offsets: Offsets::default(),
            stale_keys: BTreeSet::new(),
            tombstone_classic: false,
            deletions: 0,
        }
    }

    /// Rebuilds the classic membership from its stored metadata (at the end of a load). Where
    /// the log holds a consumer group too (it should not), a classic group with members wins
    /// and the consumer group's records go with the next write; else the classic record
    /// does.
    pub fn restore_classic(&mut self, value: GroupValue, limits: &GroupLimits, now: Instant) {
        let classic = ClassicGroup::restore(value, limits, now);
        match &self.membership {
            Membership::Consumer(_) if classic.has_no_members() => {
                self.tombstone_classic |= classic.protocol_type().is_some();
            }
            Membership::Consumer(consumer) => {
                self.stale_keys.extend(consumer.keys());
                self.membership = Membership::Classic(classic);
            }
            Membership::Empty | Membership::Classic(_) | Membership::Share(_) => {
                self.membership = Membership::Classic(classic);
            }
        }
    }

    /// Makes `consumer` the group's membership; the metadata record of a classic group it
    /// replaces is tombstoned by the next write.
    fn install_consumer(&mut self, consumer: Box<ConsumerGroup>) {
        self.tombstone_classic |= self
            .classic()
            .is_some_and(|classic| classic.protocol_type().is_some());
        self.membership = Membership::Consumer(consumer);
    }

    /// The classic membership, if the group is a classic group.
    pub fn classic(&self) -> Option<&ClassicGroup> {
        match &self.membership {
            Membership::Classic(classic) => Some(classic),
            _ => None,
        }
    }

    /// The consumer-protocol membership, if the group is a consumer group.
    pub fn consumer(&self) -> Option<&ConsumerGroup> {
        match &self.membership {
            Membership::Consumer(consumer) => Some(consumer),
            _ => None,
        }
    }

    /// The consumer-protocol membership, to change it, if the group is a consumer group.
    pub fn consumer_mut(&mut self) -> Option<&mut ConsumerGroup> {
        match &mut self.membership {
            Membership::Consumer(consumer) => Some(consumer),
            _ => None,
        }
    }

    /// The share group membership, if the group is a share group.
    pub fn share(&self) -> Option<&ShareGroup> {
        match &self.membership {
            Membership::Share(share) => Some(share),
            _ => None,
        }
    }

    /// The group's type, as ListGroups names it: `classic`, `consumer` or `share`.
    pub fn group_type(&self) -> &'static str {
        match &self.membership {
            Membership::Empty | Membership::Classic(_) => "classic",
            Membership::Consumer(_) => "consumer",
            Membership::Share(_) => GROUP_TYPE,
        }
    }

    /// The group's state.
    pub fn state(&self) -> GroupState {
        match &self.membership {
            Membership::Empty => GroupState::Empty,
            Membership::Classic(classic) => classic.state(),
            Membership::Consumer(consumer) => consumer.state(),
            Membership::Share(share) => share.state(),
        }
    }

    /// The generation of a classic group's last completed rebalance (0 for other groups).
    pub fn generation(&self) -> i32 {
        self.classic().map_or(0, ClassicGroup::generation)
    }

    /// When a group that had members last changed state (ms since the epoch): for one
    /// without members now, when it became empty. `None` for a group nobody ever joined,
    /// whose offsets age from their commits.
    pub fn state_since_ms(&self) -> Option<i64> {
        match &self.membership {
            Membership::Empty => None,
            Membership::Classic(classic) => {
                classic.protocol_type().map(|_| classic.state_since_ms())
            }
            Membership::Consumer(consumer) => Some(consumer.state_since_ms()),
            Membership::Share(share) => Some(share.state_since_ms()),
        }
    }

    /// The protocol type: `consumer` for a consumer group, a classic group's once a member
    /// has joined it.
    pub fn protocol_type(&self) -> Option<&str> {
        match &self.membership {
            Membership::Empty => None,
            Membership::Classic(classic) => classic.protocol_type(),
            Membership::Consumer(_) => Some("consumer"),
            Membership::Share(_) => Some(GROUP_TYPE),
        }
    }

    /// A classic group's chosen protocol (assignor).
    pub fn protocol(&self) -> Option<&str> {
        self.classic().and_then(ClassicGroup::protocol)
    }

    /// The longest rebalance timeout of a classic group's members.
    pub fn rebalance_timeout(&self) -> Duration {
        self.classic()
            .map_or(Duration::ZERO, ClassicGroup::rebalance_timeout)
    }

    /// True when the group has neither members nor pending joins, of either protocol.
    pub fn has_no_members(&self) -> bool {
        match &self.membership {
            Membership::Empty => true,
            Membership::Classic(classic) => classic.has_no_members(),
            Membership::Consumer(consumer) => consumer.is_empty(),
            Membership::Share(share) => share.is_empty(),
        }
    }

    /// True when the log holds nothing of the group (no members, committed offsets, stored
    /// metadata or consumer group records, and no commit under way): memory forgets it, as a
    /// coordinator loading the log would not know it.
    pub fn leaves_no_trace(&self) -> bool {
        self.has_no_members()
            && self.offsets.is_empty()
            && self.protocol_type().is_none()
            && self.stale_keys.is_empty()
    }

    /// The record that stores a classic group's membership as it is now (once it became
    /// Empty, so that a restart does not bring back members that left).
    pub fn classic_record(&self) -> Option<GroupRecord> {
        self.classic().map(|classic| GroupRecord::Group {
            group: self.id.clone(),
            value: Some(classic.stored_value()),
        })
    }

    /// The records that delete the group from the log: tombstones of its committed offsets
    /// (and of those open transactions committed), of its classic metadata and of its
    /// consumer group records.
    pub fn deletion_records(&self) -> Vec<GroupRecord> {
        let mut partitions: BTreeSet<&(String, i32)> = self.offsets.committed.keys().collect();
        partitions.extend(self.offsets.transactional.values().flat_map(HashMap::keys));
        let offsets = partitions
            .into_iter()
            .map(|(topic, p)| GroupRecord::offset_tombstone(&self.id, topic, *p));
        let metadata = GroupRecord::Group {
            group: self.id.clone(),
            value: None,
        };
        offsets
            .chain(std::iter::once(metadata))
            .chain(self.consumer_tombstones())
            .collect()
    }

    /// Bytes of member metadata the group holds: classic members' protocols and
    /// assignments, consumer-protocol members' subscriptions.
    pub fn metadata_bytes(&self) -> usize {
        match &self.membership {
            Membership::Empty => 0,
            Membership::Classic(classic) => classic.metadata_bytes(),
            Membership::Consumer(consumer) => consumer.subscription_bytes(),
            Membership::Share(share) => share.metadata_bytes(),
        }
    }

    /// What DescribeGroups shows of a classic group's members.
    pub fn describe_members(&self) -> Vec<MemberDescription> {
        self.classic()
            .map(ClassicGroup::describe_members)
            .unwrap_or_default()
    }

    /// Handles a JoinGroup. A group without members becomes a classic group; one with
    /// consumer-protocol members refuses it (INCONSISTENT_GROUP_PROTOCOL).
    pub fn join(
        &mut self,
        request: JoinRequest,
        limits: &GroupLimits,
        now: Instant,
        now_ms: i64,
    ) -> Step<JoinOutcome> {
        let refused = |error| Step::Done(JoinOutcome::failed(error, &request.member_id));
        if let Err(error) = ClassicGroup::check_join(self.classic(), &self.id, &request, limits) {
            return refused(error);
        }
        let mut classic = match std::mem::take(&mut self.membership) {
            Membership::Classic(classic) => classic,
            Membership::Consumer(consumer) if !consumer.is_empty() => {
                self.membership = Membership::Consumer(consumer);
                return refused(GroupError::InconsistentGroupProtocol);
            }
            Membership::Share(share) => {
                self.membership = Membership::Share(share);
                return refused(GroupError::InconsistentGroupProtocol);
            }
            Membership::Consumer(consumer) => {
                // Its records go with the next write.
                self.stale_keys.extend(consumer.keys());
                ClassicGroup::new(limits, now_ms)
            }
            Membership::Empty => ClassicGroup::new(limits, now_ms),
        };
        let step = classic.join(request, limits, now, now_ms);
        self.membership = Membership::Classic(classic);
        step
    }

    /// The bytes a join would add to what `group` holds (`None`: a group the join would
    /// create), or `None` when the group's own bounds refuse it (then it adds nothing).
    pub fn join_adds_bytes(
        group: Option<&Group>,
        request: &JoinRequest,
        limits: &GroupLimits,
    ) -> Option<usize> {
        ClassicGroup::join_adds_bytes(group.and_then(Group::classic), request, limits)
    }

    /// Handles a SyncGroup; UNKNOWN_MEMBER_ID unless the group is a classic group.
    pub fn sync(
        &mut self,
        request: SyncRequest<'_>,
        limits: &GroupLimits,
        now: Instant,
    ) -> Step<SyncOutcome> {
        match &mut self.membership {
            Membership::Classic(classic) => classic.sync(&self.id, request, limits, now),
            _ => Step::Done(Err(GroupError::UnknownMemberId)),
        }
    }

    /// The bytes a leader's assignments take, or `None` when the group's bounds refuse them.
    pub fn assignment_bytes(
        &self,
        assignments: &[(String, Bytes)],
        limits: &GroupLimits,
    ) -> Option<usize> {
        ClassicGroup::assignment_bytes(self.classic(), assignments, limits)
    }

    /// The leader's assignment was stored (or not); see [`ClassicGroup::finish_sync`].
    pub fn finish_sync(
        &mut self,
        generation: i32,
        stored: Result<&GroupValue, GroupError>,
        now: Instant,
        now_ms: i64,
    ) {
        if let Membership::Classic(classic) = &mut self.membership {
            classic.finish_sync(generation, stored, now, now_ms);
        }
    }

    /// Handles a Heartbeat; UNKNOWN_MEMBER_ID unless the group is a classic group.
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Result<(), GroupError> {
        match &mut self.membership {
            Membership::Classic(classic) => {
                classic.heartbeat(member_id, instance_id, generation, now)
            }
            _ => Err(GroupError::UnknownMemberId),
        }
    }

    /// Handles one member of a LeaveGroup. Returns true when the group became Empty.
    pub fn leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        now: Instant,
        now_ms: i64,
    ) -> Result<bool, GroupError> {
        match &mut self.membership {
            Membership::Classic(classic) => classic.leave(member_id, instance_id, now, now_ms),
            _ => Err(GroupError::UnknownMemberId),
        }
    }

    /// A ConsumerGroupHeartbeat. A group without members becomes a consumer group first;
    /// one with classic members answers GROUP_ID_NOT_FOUND, as Kafka does. A refused
    /// heartbeat leaves a group that was not a consumer group as it was.
    pub fn consumer_heartbeat(
        &mut self,
        request: ConsumerHeartbeat,
        catalog: &dyn TopicCatalog,
        settings: &ConsumerGroupSettings,
        now: Instant,
        now_ms: i64,
    ) -> Result<HeartbeatReply, GroupError> {
        let (mut consumer, previous) = match std::mem::take(&mut self.membership) {
            Membership::Consumer(consumer) => (consumer, None),
            Membership::Classic(classic) if !classic.has_no_members() => {
                self.membership = Membership::Classic(classic);
                return Err(GroupError::GroupIdNotFound);
            }
            Membership::Share(share) => {
                self.membership = Membership::Share(share);
                return Err(GroupError::GroupIdNotFound);
            }
            previous => (
                Box::new(ConsumerGroup::new(settings, now_ms)),
                Some(previous),
            ),
        };
        let was_empty = consumer.is_empty();
        let reply = consumer.heartbeat(&self.id, request, catalog, settings, now);
        let converting = previous.is_some();
        if let Some(previous) = previous {
            self.membership = previous;
        }
        if converting && reply.is_err() {
            return reply;
        }
        if consumer.is_empty() != was_empty {
            consumer.set_state_since(now_ms);
        }
        self.install_consumer(consumer);
        reply
    }

    /// A ShareGroupHeartbeat. Only a share group, or a group the log holds nothing of, takes
    /// one; any other group answers GROUP_ID_NOT_FOUND ("not a share group"), as Kafka does.
    pub fn share_heartbeat(
        &mut self,
        request: ShareHeartbeat,
        catalog: &dyn TopicCatalog,
        settings: &ShareGroupSettings,
        now: Instant,
        now_ms: i64,
    ) -> Result<ShareHeartbeatReply, GroupError> {
        if matches!(self.membership, Membership::Empty) && self.leaves_no_trace() {
            self.membership = Membership::Share(Box::new(ShareGroup::new(settings, now_ms)));
        }
        match &mut self.membership {
            Membership::Share(share) => {
                share.heartbeat(&self.id, request, catalog, settings, now, now_ms)
            }
            _ => Err(GroupError::GroupIdNotFound),
        }
    }

    /// Applies the passing of time to the membership. Returns true when the group became
    /// Empty.
    pub fn tick(&mut self, now: Instant, now_ms: i64) -> bool {
        match &mut self.membership {
            Membership::Empty => false,
            Membership::Classic(classic) => classic.tick(&self.id, now, now_ms),
            Membership::Consumer(consumer) => {
                let emptied = consumer.tick(&self.id, now);
                if emptied {
                    consumer.set_state_since(now_ms);
                }
                emptied
            }
            Membership::Share(share) => share.tick(&self.id, now, now_ms),
        }
    }

    /// The next moment [`Group::tick`] has something to do (none while the group is being
    /// deleted).
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.deletions > 0 {
            return None;
        }
        match &self.membership {
            Membership::Empty => None,
            Membership::Classic(classic) => classic.next_deadline(),
            Membership::Consumer(consumer) => consumer.next_deadline(),
            Membership::Share(share) => share.next_deadline(),
        }
    }

    /// Checks that an OffsetCommit (of request `version`) may be applied: against a classic
    /// group's generation ([`ClassicGroup::check_commit`]), a consumer-protocol member's epoch
    /// ([`ConsumerGroup::check_commit`]); a group nobody joined takes only commits of
    /// non-members (generation -1).
    pub fn check_commit(
        &self,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
        version: i16,
    ) -> Result<(), GroupError> {
        match &self.membership {
            Membership::Empty if generation < 0 => Ok(()),
            Membership::Empty => Err(GroupError::UnknownMemberId),
            Membership::Classic(classic) => {
                classic.check_commit(generation, member_id, instance_id)
            }
            Membership::Consumer(consumer) => consumer.check_commit(member_id, generation, version),
            Membership::Share(_) => Err(GroupError::GroupIdNotFound),
        }
    }

    /// Checks a TxnOffsetCommit (KIP-447 fencing of zombie members): a member names its
    /// current generation (classic) or epoch (consumer protocol, ILLEGAL_GENERATION when it
    /// is not the member's), whatever state the group is in; a commit that names no member
    /// (versions before 3, or a producer outside the group) is taken as it is.
    pub fn check_txn_commit(
        &self,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        match &self.membership {
            Membership::Empty if generation < 0 => Ok(()),
            Membership::Empty => Err(GroupError::UnknownMemberId),
            Membership::Classic(classic) => {
                classic.check_txn_commit(generation, member_id, instance_id)
            }
            Membership::Consumer(consumer) => consumer.check_txn_commit(member_id, generation),
            Membership::Share(_) => Err(GroupError::GroupIdNotFound),
        }
    }

    /// Topics a `consumer`-protocol group's members subscribe to, for OffsetDelete's
    /// GROUP_SUBSCRIBED_TO_TOPIC.
    pub fn subscribed_topics(&self) -> Vec<String> {
        match &self.membership {
            Membership::Empty => Vec::new(),
            Membership::Classic(classic) => classic.subscribed_topics(),
            Membership::Consumer(consumer) => consumer.subscribed_topics(),
            Membership::Share(share) => share.subscribed_topics(),
        }
    }
}

#[cfg(test)]
mod tests;
