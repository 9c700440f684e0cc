//! One consumer group under the consumer group protocol (KIP-848): members heartbeat with
//! their epoch, the coordinator computes the group's target assignment with a server-side
//! assignor whenever the group epoch moves, and hands each member its part incrementally: a
//! member first gives up the partitions it must lose (keeping its epoch), then advances to
//! the target epoch with the partitions nobody else still holds; a partition another member
//! has not yet revoked comes with a later heartbeat. So only partitions that move are ever
//! revoked, and no partition has two owners.
//!
//! Synchronous and clock-free like the classic group: callers pass the time.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::assignors::{TopicPartitions, ASSIGNORS};
use crate::limits::{millis, ConsumerGroupSettings, MetadataBounds};
use crate::records::{AssignmentValue, ConsumerKey, ConsumerValue};
use crate::state::GroupState;
use crate::GroupError;

mod assignment;
mod member;
mod reconcile;
mod records;
#[cfg(test)]
mod tests;

pub use assignment::{AssignmentJob, ComputedTarget};
use member::{starting_over, subscribed, ConsumerMember, MemberState, Subscriptions};
use reconcile::is_subset;

/// Member epoch of a ConsumerGroupHeartbeat that joins the group.
pub const JOIN_EPOCH: i32 = 0;
/// Member epoch of a ConsumerGroupHeartbeat that leaves the group.
pub const LEAVE_EPOCH: i32 = -1;
/// Member epoch of a static member leaving for now: its partitions wait for its instance
/// id to come back within the session timeout.
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// Longest `SubscribedTopicRegex` accepted, and the compiled size it may reach.
const REGEX_MAX_LEN: usize = 4096;
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// The topics a group's members may subscribe to, as the metadata image has them.
pub trait TopicCatalog: Send + Sync {
    /// Id and partition count of the topic called `name`.
    fn topic(&self, name: &str) -> Option<(Uuid, i32)>;
    /// The name of the topic with id `id`.
    fn topic_name(&self, id: Uuid) -> Option<String>;
    /// Every topic name a regular expression may match (internal topics excluded).
    fn topic_names(&self) -> Vec<String>;
    /// Changes whenever a topic is created, deleted or grows: pattern subscriptions are
    /// matched again only then.
    fn version(&self) -> u64;
}

/// A ConsumerGroupHeartbeat, decoded by the handler. `None` fields did not change since the
/// member's last heartbeat.
#[derive(Debug, Clone, Default)]
pub struct ConsumerHeartbeat {
    /// Member id (v1: chosen by the client; v0: empty on the first heartbeat).
    pub member_id: String,
    /// 0 to join, -1 to leave, -2 for a static member's temporary leave, else its epoch.
    pub member_epoch: i32,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    /// `client.rack`.
    pub rack_id: Option<String>,
    /// `max.poll.interval.ms` of the client, or -1.
    pub rebalance_timeout_ms: i32,
    /// Subscribed topic names.
    pub topic_names: Option<Vec<String>>,
    /// Subscribed topic pattern (RE2 syntax, matched against whole names).
    pub topic_regex: Option<String>,
    /// Preferred server assignor.
    pub server_assignor: Option<String>,
    /// Partitions the member owns now.
    pub owned: Option<TopicPartitions>,
    /// The client's `client.id`.
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
}

/// The answer to a ConsumerGroupHeartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatReply {
    /// The member's id.
    pub member_id: String,
    /// The member's epoch after this heartbeat.
    pub member_epoch: i32,
    /// When to heartbeat next.
    pub heartbeat_interval_ms: i32,
    /// The member's assignment, when it changed or the request was a full one.
    pub assignment: Option<TopicPartitions>,
}

/// What ConsumerGroupDescribe shows of one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerMemberDescription {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id`.
    pub instance_id: Option<String>,
    /// `client.rack`.
    pub rack_id: Option<String>,
    /// Its epoch.
    pub member_epoch: i32,
    /// `client.id`.
    pub client_id: String,
    /// Address.
    pub client_host: String,
    /// Subscribed names.
    pub topic_names: Vec<String>,
    /// Subscribed pattern.
    pub topic_regex: Option<String>,
    /// What it holds now.
    pub assignment: TopicPartitions,
    /// What it is heading for.
    pub target_assignment: TopicPartitions,
}

/// What ConsumerGroupDescribe shows of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerGroupDescription {
    /// Its state.
    pub state: GroupState,
    /// The group epoch.
    pub epoch: i32,
    /// The epoch of the target assignment.
    pub assignment_epoch: i32,
    /// The assignor the target was computed with.
    pub assignor: String,
    /// Members in id order.
    pub members: Vec<ConsumerMemberDescription>,
}

/// The membership of a consumer-protocol group (its committed offsets live in the
/// enclosing [`crate::group::Group`]).
#[derive(Debug, Default)]
pub struct ConsumerGroup {
    epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, ConsumerMember>,
    /// The target assignment at `assignment_epoch`, per member.
    target: HashMap<String, TopicPartitions>,
    /// The subscribed topics' ids and partition counts the target was computed from.
    topics: BTreeMap<String, (Uuid, i32)>,
    /// Which member holds (or is revoking) each partition.
    owners: HashMap<(Uuid, i32), String>,
    /// The assignor of the last target.
    assignor: &'static str,
    /// Restored from the log: `topics` is taken from the catalog at the next heartbeat,
    /// without a new epoch unless the target no longer covers them.
    topics_unknown: bool,
    /// The topics the members' patterns matched: the catalog version and the patterns they
    /// were matched at, so a heartbeat does not match every topic name again.
    pattern_matches: Option<(u64, Vec<String>, BTreeSet<String>)>,
    /// The changes made since [`ConsumerGroup::take_records`], as the records that make
    /// them, in the order they were made (and applied).
    records: Vec<(ConsumerKey, Option<ConsumerValue>)>,
    /// A pattern the heartbeat being handled compiled, for the member record it writes.
    compiled: Option<(String, regex::Regex)>,
    /// No member's session or revocation deadline falls before this: lowered as deadlines
    /// are set, made exact when the timer reaches it, so a heartbeat costs no scan.
    due: Option<Instant>,
    /// What the members subscribe to, counted.
    subscriptions: Subscriptions,
    /// The catalog version and subscriptions generation the topics were last resolved at.
    resolved_at: Option<(u64, u64)>,
    /// `group.consumer.session.timeout.ms`, as the last heartbeat's settings gave it (or
    /// loading's): the session a member starts with.
    session_timeout: Duration,
    /// `group.consumer.assignment.interval.ms`, as the last heartbeat's settings gave it.
    assignment_interval: Duration,
    /// When the target assignment was last computed.
    assigned_at: Option<Instant>,
    /// When a target assignment the interval held back is computed (by the timer).
    assignment_due: Option<Instant>,
    /// When the group last became empty or got its first member (ms since the epoch), for
    /// offset retention.
    state_since_ms: i64,
}

impl ConsumerGroup {
    /// A group without members, made at `now_ms`.
    pub fn new(settings: &ConsumerGroupSettings, now_ms: i64) -> ConsumerGroup {
        let mut group = ConsumerGroup {
            state_since_ms: now_ms,
            ..ConsumerGroup::default()
        };
        group.take_settings(settings);
        group
    }

    /// A group that loading found in the log at `now_ms`, before any of its records is
    /// applied: which topics its members subscribe to is learnt from the catalog at its next
    /// heartbeat, without a new epoch unless the target no longer covers them.
    pub fn loaded(settings: &ConsumerGroupSettings, now_ms: i64) -> ConsumerGroup {
        ConsumerGroup {
            topics_unknown: true,
            ..ConsumerGroup::new(settings, now_ms)
        }
    }

    /// Uses the broker's settings as they are now.
    fn take_settings(&mut self, settings: &ConsumerGroupSettings) {
        self.session_timeout = millis(settings.session_timeout_ms);
        self.assignment_interval = millis(settings.assignment_interval_ms);
    }

    /// When the group last became empty or got its first member (ms since the epoch).
    pub fn state_since_ms(&self) -> i64 {
        self.state_since_ms
    }

    /// Notes that the group became empty or got its first member at `now_ms`.
    pub fn set_state_since(&mut self, now_ms: i64) {
        self.state_since_ms = now_ms;
    }

    /// The group's state: Empty without members, Assigning while the target lags the group
    /// epoch, Reconciling while a member has not reached it, else Stable.
    pub fn state(&self) -> GroupState {
        if self.members.is_empty() {
            GroupState::Empty
        } else if self.assignment_epoch < self.epoch {
            GroupState::Assigning
        } else if self
            .members
            .values()
            .any(|m| m.epoch != self.assignment_epoch || m.state != MemberState::Stable)
        {
            GroupState::Reconciling
        } else {
            GroupState::Stable
        }
    }

    /// True without members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The group epoch.
    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    /// Every topic some member subscribes to (by name or pattern) that exists.
    pub fn subscribed_topics(&self) -> Vec<String> {
        self.topics.keys().cloned().collect()
    }

    /// Checks an OffsetCommit: from a member with exactly its current epoch (else
    /// STALE_MEMBER_EPOCH), at version 9 or later; or with epoch -1 from outside the group
    /// while it is empty.
    pub fn check_commit(
        &self,
        member_id: &str,
        member_epoch: i32,
        version: i16,
    ) -> Result<(), GroupError> {
        let Some(member) = self.committing_member(member_id, member_epoch)? else {
            return Ok(());
        };
        if version < 9 {
            return Err(GroupError::UnsupportedVersion);
        }
        if member_epoch != member.epoch {
            return Err(GroupError::StaleMemberEpoch);
        }
        Ok(())
    }

    /// Checks a TxnOffsetCommit: from a member with exactly its current epoch (else
    /// ILLEGAL_GENERATION, as Kafka answers a transactional commit), at any version; or with
    /// epoch -1 from outside the group while it is empty.
    pub fn check_txn_commit(&self, member_id: &str, member_epoch: i32) -> Result<(), GroupError> {
        match self.committing_member(member_id, member_epoch)? {
            Some(member) if member_epoch != member.epoch => Err(GroupError::IllegalGeneration),
            _ => Ok(()),
        }
    }

    /// The member a commit names: `None` for a commit from outside the group (epoch -1)
    /// while it is empty; UNKNOWN_MEMBER_ID when there is no such member.
    fn committing_member(
        &self,
        member_id: &str,
        member_epoch: i32,
    ) -> Result<Option<&ConsumerMember>, GroupError> {
        if member_epoch < 0 && self.members.is_empty() {
            return Ok(None);
        }
        self.members
            .get(member_id)
            .map(Some)
            .ok_or(GroupError::UnknownMemberId)
    }

    /// Checks an OffsetFetch that names a member or an epoch (v9): it must be in the group at
    /// that epoch.
    pub fn check_fetch(&self, member_id: &str, member_epoch: i32) -> Result<(), GroupError> {
        let member = self
            .members
            .get(member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if member_epoch != member.epoch {
            return Err(GroupError::StaleMemberEpoch);
        }
        Ok(())
    }

    /// Handles a ConsumerGroupHeartbeat (see the module docs).
    pub fn heartbeat(
        &mut self,
        group_id: &str,
        request: ConsumerHeartbeat,
        catalog: &dyn TopicCatalog,
        settings: &ConsumerGroupSettings,
        now: Instant,
    ) -> Result<HeartbeatReply, GroupError> {
        let reply = |member_id: String, member_epoch: i32| HeartbeatReply {
            member_id,
            member_epoch,
            heartbeat_interval_ms: settings.heartbeat_interval_ms,
            assignment: None,
        };
        check_request(&request, &settings.metadata)?;
        self.check_subscription_bytes(group_id, &request, &settings.metadata)?;
        // A pattern is compiled once, not on every heartbeat that repeats it.
        let pattern = request.topic_regex.as_ref().filter(|p| !p.is_empty());
        let known = self
            .members
            .get(&request.member_id)
            .and_then(|m| m.topic_regex.as_ref())
            .map(|(p, _)| p);
        self.compiled = match pattern {
            Some(pattern) if known != Some(pattern) => Some((pattern.clone(), compile(pattern)?)),
            _ => None,
        };
        self.take_settings(settings);
        let mut joined = false;
        match request.member_epoch {
            LEAVE_EPOCH | STATIC_LEAVE_EPOCH => {
                let id = self.leaving_member(&request)?;
                if request.member_epoch == STATIC_LEAVE_EPOCH {
                    // What it was revoking is free now; what it holds waits for it.
                    let member = &self.members[&id];
                    let away = AssignmentValue {
                        epoch: STATIC_LEAVE_EPOCH,
                        previous_epoch: member.epoch,
                        state: MemberState::Stable.code(),
                        assigned: member.assigned.clone(),
                        pending_revocation: TopicPartitions::new(),
                    };
                    self.set_assignment(&id, away, now);
                    self.extend_session(&id, now);
                    tracing::info!(target: "weir::groups", group = group_id, member = %id, "static member left for now; its partitions wait for its instance");
                } else {
                    tracing::info!(target: "weir::groups", group = group_id, member = %id, "member left the group");
                    self.remove_members(std::slice::from_ref(&id), now);
                }
                return Ok(HeartbeatReply {
                    heartbeat_interval_ms: 0,
                    ..reply(id, request.member_epoch)
                });
            }
            JOIN_EPOCH => joined = self.join(group_id, &request, settings, now)?,
            epoch => {
                let member = self
                    .members
                    .get(&request.member_id)
                    .filter(|m| !m.departed())
                    .ok_or_else(|| self.missing_member(&request))?;
                if let Some(instance) = &request.instance_id {
                    if member.instance_id.as_ref() != Some(instance) {
                        return Err(GroupError::FencedInstanceId);
                    }
                }
                let behind_but_consistent = epoch == member.previous_epoch
                    && request
                        .owned
                        .as_ref()
                        .is_some_and(|owned| is_subset(owned, &member.assigned));
                if epoch != member.epoch && !behind_but_consistent {
                    return Err(GroupError::FencedMemberEpoch);
                }
            }
        }
        let member_id = request.member_id.clone();
        let before = self.members.get(&member_id).map(|m| m.assigned.clone());
        let resubscribed = self.update_member(&member_id, &request, now);
        self.extend_session(&member_id, now);
        let topics_changed = self.refresh_topics(catalog);
        if joined || resubscribed || topics_changed {
            self.bump_epoch(now);
        }
        self.update_target(now);
        self.reconcile(&member_id, request.owned.as_ref(), now);
        let member = &self.members[&member_id];
        let full = request.rebalance_timeout_ms != -1
            && (request.topic_names.is_some() || request.topic_regex.is_some())
            && request.owned.is_some();
        let changed = before.is_none_or(|assigned| assigned != member.assigned);
        let mut answer = reply(member_id, member.epoch);
        if request.member_epoch == JOIN_EPOCH || full || changed {
            answer.assignment = Some(member.assigned.clone());
        }
        // A target the interval holds back: come back soon after it is computed, rather than
        // a whole heartbeat interval later.
        if let Some(due) = self.assignment_due {
            let soon = due.saturating_duration_since(now) + ASSIGNMENT_HEARTBEAT_SLACK;
            let soon = i32::try_from(soon.as_millis()).unwrap_or(i32::MAX);
            answer.heartbeat_interval_ms = answer
                .heartbeat_interval_ms
                .min(soon.max(ASSIGNMENT_HEARTBEAT_MIN_MS));
        }
        Ok(answer)
    }

    /// Bytes of its members' subscriptions.
    pub fn subscription_bytes(&self) -> usize {
        self.subscriptions.bytes
    }

    /// Bytes of the subscription `member_id` holds now (0 for one not in the group).
    pub fn member_subscription_bytes(&self, member_id: &str) -> usize {
        self.members
            .get(member_id)
            .map_or(0, ConsumerMember::subscription_bytes)
    }

    /// A subscription that would take the group's subscriptions over `group.metadata.max.bytes`
    /// is GROUP_MAX_SIZE_REACHED (the member's own earlier one does not count).
    fn check_subscription_bytes(
        &self,
        group_id: &str,
        request: &ConsumerHeartbeat,
        bounds: &MetadataBounds,
    ) -> Result<(), GroupError> {
        if self.subscription_adds_bytes(request, bounds).is_some() {
            return Ok(());
        }
        tracing::warn!(target: "weir::groups", group = group_id, client_id = %request.client_id, client_host = %request.client_host, bytes = sent_subscription_bytes(request), limit = bounds.group_max_bytes, "ConsumerGroupHeartbeat refused: the group's subscriptions would be over group.metadata.max.bytes");
        Err(GroupError::GroupMaxSizeReached)
    }

    /// The bytes a heartbeat's subscription adds to what the group holds (less what its member
    /// held), or `None` when it would take the group over `group.metadata.max.bytes`.
    pub fn subscription_adds_bytes(
        &self,
        request: &ConsumerHeartbeat,
        bounds: &MetadataBounds,
    ) -> Option<usize> {
        if request.topic_names.is_none() && request.topic_regex.is_none() {
            return Some(0);
        }
        let others = self
            .subscriptions
            .bytes
            .saturating_sub(self.member_subscription_bytes(&request.member_id));
        let sent = sent_subscription_bytes(request);
        (others + sent <= bounds.group_max_bytes)
            .then(|| sent.saturating_sub(self.member_subscription_bytes(&request.member_id)))
    }

    /// The member a leave names: by member id, or a static member by instance id.
    fn leaving_member(&self, request: &ConsumerHeartbeat) -> Result<String, GroupError> {
        let member = self
            .members
            .get(&request.member_id)
            .ok_or_else(|| self.missing_member(request))?;
        if let Some(instance) = &request.instance_id {
            if member.instance_id.as_ref() != Some(instance) {
                return Err(GroupError::FencedInstanceId);
            }
        }
        Ok(request.member_id.clone())
    }

    /// The error for a member id the group does not have: FENCED_INSTANCE_ID when its
    /// instance id is now held by another member (it was replaced), else UNKNOWN_MEMBER_ID.
    fn missing_member(&self, request: &ConsumerHeartbeat) -> GroupError {
        let replaced = request.instance_id.as_ref().is_some_and(|instance| {
            self.members
                .values()
                .any(|m| m.instance_id.as_ref() == Some(instance))
        });
        if replaced {
            GroupError::FencedInstanceId
        } else {
            GroupError::UnknownMemberId
        }
    }

    /// A heartbeat with epoch 0: a new member, a member starting over, or a static member's
    /// instance coming back under a new member id (taking over its predecessor's partitions
    /// and epoch without a new target). True for a new member.
    fn join(
        &mut self,
        group_id: &str,
        request: &ConsumerHeartbeat,
        settings: &ConsumerGroupSettings,
        now: Instant,
    ) -> Result<bool, GroupError> {
        if let Some(instance) = &request.instance_id {
            let previous = self
                .members
                .iter()
                .find(|(_, m)| m.instance_id.as_ref() == Some(instance))
                .map(|(id, m)| (id.clone(), m.departed()));
            match previous {
                Some((id, false)) if id == request.member_id => {}
                Some((_, false)) => return Err(GroupError::UnreleasedInstanceId),
                Some((id, true)) => {
                    if id != request.member_id && self.members.contains_key(&request.member_id) {
                        // The new id is another live member's: taking it would orphan that
                        // member's partitions.
                        return Err(GroupError::InvalidRequest);
                    }
                    self.take_over(&id, &request.member_id, now);
                    tracing::info!(target: "weir::groups", group = group_id, member = %request.member_id, previous = %id, "static member came back and takes over its partitions");
                    return Ok(false);
                }
                None => {}
            }
        }
        if let Some(member) = self.members.get(&request.member_id) {
            // Starting over: whatever it held is released and handed out again.
            if member.departed() {
                return Err(GroupError::UnknownMemberId);
            }
            self.set_assignment(&request.member_id, starting_over(), now);
            return Ok(false);
        }
        if self.members.len() >= settings.max_size {
            return Err(GroupError::GroupMaxSizeReached);
        }
        let member = subscribed(None, request);
        self.write(
            ConsumerKey::Member(request.member_id.clone()),
            Some(ConsumerValue::Member(member)),
            now,
        );
        tracing::info!(target: "weir::groups", group = group_id, member = %request.member_id, "member joined the group");
        Ok(true)
    }

    /// A static member's instance came back as `new_id`: it takes over what the departed
    /// member `old_id` held and was heading for, at epoch 0.
    fn take_over(&mut self, old_id: &str, new_id: &str, now: Instant) {
        let member = &self.members[old_id];
        let subscription = member.stored();
        let mut assignment = member.assignment();
        assignment.epoch = 0;
        assignment.previous_epoch = 0;
        if old_id != new_id {
            let target = self.target.get(old_id).cloned();
            self.remove_records(old_id, now);
            self.write(
                ConsumerKey::Member(new_id.to_string()),
                Some(ConsumerValue::Member(subscription)),
                now,
            );
            if let Some(target) = target {
                self.write(
                    ConsumerKey::TargetMember(new_id.to_string()),
                    Some(ConsumerValue::Target(target)),
                    now,
                );
            }
        }
        self.set_assignment(new_id, assignment, now);
        self.extend_session(new_id, now);
    }

    /// Writes the request's changed fields into the member's subscription record. True when
    /// its topics, pattern or preferred assignor changed, which moves the group epoch.
    fn update_member(
        &mut self,
        member_id: &str,
        request: &ConsumerHeartbeat,
        now: Instant,
    ) -> bool {
        let Some(member) = self.members.get(member_id) else {
            return false;
        };
        // Most heartbeats carry none of these: nothing to compare.
        let may_change = request.topic_names.is_some()
            || request.topic_regex.is_some()
            || (request.rebalance_timeout_ms >= 0
                && millis(request.rebalance_timeout_ms) != member.rebalance_timeout)
            || (request.rack_id.is_some() && request.rack_id != member.rack_id)
            || (request.server_assignor.is_some()
                && request.server_assignor != member.server_assignor);
        if !may_change {
            return false;
        }
        let current = member.stored();
        let updated = subscribed(Some(&current), request);
        if updated == current {
            return false;
        }
        let moves_epoch = updated.topic_names != current.topic_names
            || updated.topic_regex != current.topic_regex
            || updated.server_assignor != current.server_assignor;
        self.write(
            ConsumerKey::Member(member_id.to_string()),
            Some(ConsumerValue::Member(updated)),
            now,
        );
        moves_epoch
    }

    /// The member's session starts again now.
    fn extend_session(&mut self, member_id: &str, now: Instant) {
        let expires = now + self.session_timeout;
        if let Some(member) = self.members.get_mut(member_id) {
            member.expires = expires;
            self.note_deadline(expires);
        }
    }

    /// The group epoch moves on (a member joined, left or changed what it subscribes to, or
    /// a subscribed topic changed).
    fn bump_epoch(&mut self, now: Instant) {
        self.write(
            ConsumerKey::Metadata,
            Some(ConsumerValue::Epoch(self.epoch + 1)),
            now,
        );
    }

    /// The tombstones of a member's records, in the order Kafka replays them: its current
    /// assignment, its target, its subscription. Its partitions are free.
    fn remove_records(&mut self, member_id: &str, now: Instant) {
        if self.members.contains_key(member_id) {
            self.write(ConsumerKey::Assignment(member_id.to_string()), None, now);
        }
        if self.target.contains_key(member_id) {
            self.write(ConsumerKey::TargetMember(member_id.to_string()), None, now);
        }
        if self.members.contains_key(member_id) {
            self.write(ConsumerKey::Member(member_id.to_string()), None, now);
        }
    }

    /// Makes `value` the member's epochs and partitions, unless they are so already.
    fn set_assignment(&mut self, member_id: &str, value: AssignmentValue, now: Instant) {
        if self
            .members
            .get(member_id)
            .is_some_and(|member| member.holds(&value))
        {
            return;
        }
        self.write(
            ConsumerKey::Assignment(member_id.to_string()),
            Some(ConsumerValue::Assignment(value)),
            now,
        );
    }

    /// Removes members (left, fenced or expired): their partitions are free and the rest of
    /// the group gets one new target. A group just loaded waits for its next heartbeat,
    /// which learns the topics first.
    fn remove_members(&mut self, member_ids: &[String], now: Instant) {
        for member_id in member_ids {
            self.remove_records(member_id, now);
        }
        self.bump_epoch(now);
        if !self.topics_unknown {
            self.update_target(now);
        }
    }

    /// Fences members whose session expired or who did not revoke within their rebalance
    /// timeout. Returns true when the group became empty.
    pub fn tick(&mut self, group_id: &str, now: Instant) -> bool {
        if self.due.is_none_or(|due| due > now) {
            return false;
        }
        let had_members = !self.members.is_empty();
        let expired: Vec<(String, &'static str)> = self
            .members
            .iter()
            .filter_map(|(id, m)| {
                if m.expires <= now {
                    Some((id.clone(), "session expired"))
                } else if m.revoke_by.is_some_and(|d| d <= now) {
                    Some((
                        id.clone(),
                        "partitions not revoked within the rebalance timeout",
                    ))
                } else {
                    None
                }
            })
            .collect();
        for (id, why) in &expired {
            tracing::info!(target: "weir::groups", group = group_id, member = %id, "{why}; removing the member");
        }
        if !expired.is_empty() {
            let ids: Vec<String> = expired.into_iter().map(|(id, _)| id).collect();
            self.remove_members(&ids, now);
        }
        if self.assignment_due.is_some_and(|due| due <= now) && !self.topics_unknown {
            self.update_target(now);
        }
        self.due = self.earliest_deadline();
        had_members && self.members.is_empty()
    }

    /// The next moment [`ConsumerGroup::tick`] may have something to do (never later than
    /// the first member's deadline).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.due
    }

    /// The first member's session or revocation deadline, found by looking at every member.
    fn earliest_deadline(&self) -> Option<Instant> {
        self.members
            .values()
            .flat_map(|m| [Some(m.expires), m.revoke_by])
            .flatten()
            .chain(self.assignment_due)
            .min()
    }

    /// A member's deadline was set to `at`: the timer must look no later than that.
    fn note_deadline(&mut self, at: Instant) {
        self.due = Some(self.due.map_or(at, |due| due.min(at)));
    }

    /// What ConsumerGroupDescribe shows.
    pub fn describe(&self) -> ConsumerGroupDescription {
        ConsumerGroupDescription {
            state: self.state(),
            epoch: self.epoch,
            assignment_epoch: self.assignment_epoch,
            assignor: if self.assignor.is_empty() {
                self.preferred_assignor().to_string()
            } else {
                self.assignor.to_string()
            },
            members: self
                .members
                .iter()
                .map(|(id, m)| ConsumerMemberDescription {
                    member_id: id.clone(),
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    member_epoch: m.epoch,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    topic_names: m.topic_names.clone(),
                    topic_regex: m.topic_regex.as_ref().map(|(p, _)| p.clone()),
                    assignment: m.assigned.clone(),
                    target_assignment: self.target.get(id).cloned().unwrap_or_default(),
                })
                .collect(),
        }
    }
}

/// Why `pattern` is refused as a subscription, in a phrase for the error message; `None`
/// when it is accepted.
pub fn pattern_problem(pattern: &str) -> Option<String> {
    if pattern.len() > REGEX_MAX_LEN {
        return Some(format!("it is longer than {REGEX_MAX_LEN} bytes"));
    }
    if let Err(error) = regex_syntax::Parser::new().parse(pattern) {
        return Some(match error {
            regex_syntax::Error::Parse(e) => e.kind().to_string(),
            regex_syntax::Error::Translate(e) => e.kind().to_string(),
            other => other.to_string(),
        });
    }
    compile(pattern)
        .err()
        .map(|_| "it is too large to compile".to_string())
}

/// Compiles a subscription pattern matched against whole topic names, as Kafka's RE2J
/// `matches()` does, within bounded size.
fn compile(pattern: &str) -> Result<regex::Regex, GroupError> {
    if pattern.len() > REGEX_MAX_LEN {
        return Err(GroupError::InvalidRegularExpression);
    }
    // The pattern must parse on its own (so `a)|(b` cannot escape the anchors below).
    regex_syntax::Parser::new()
        .parse(pattern)
        .map_err(|_| GroupError::InvalidRegularExpression)?;
    regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|_| GroupError::InvalidRegularExpression)
}

/// How long after a held-back target assignment is due a member told to come back for it
/// heartbeats: time for the timer to compute it.
const ASSIGNMENT_HEARTBEAT_SLACK: Duration = Duration::from_millis(50);
/// The shortest heartbeat interval a member is told, whatever is due.
const ASSIGNMENT_HEARTBEAT_MIN_MS: i32 = 100;

/// Longest member or instance id accepted: its record's key stores it with an int16 length.
const ID_MAX_LEN: usize = i16::MAX as usize;

/// Bytes of the subscription a heartbeat carries: topic names, pattern and rack.
pub(crate) fn sent_subscription_bytes(request: &ConsumerHeartbeat) -> usize {
    request
        .topic_names
        .iter()
        .flatten()
        .map(String::len)
        .sum::<usize>()
        + request.topic_regex.as_ref().map_or(0, String::len)
        + request.rack_id.as_ref().map_or(0, String::len)
}

/// Checks what a heartbeat must carry, before it touches any group (Kafka's
/// `throwIfConsumerGroupHeartbeatRequestIsInvalid`): a join needs a rebalance timeout, a
/// subscription and an empty owned list; a temporary leave an instance id; no epoch is below
/// -2; ids fit their records; a named assignor exists; the subscription is at most
/// `group.member.metadata.max.bytes`.
pub fn check_request(
    request: &ConsumerHeartbeat,
    bounds: &MetadataBounds,
) -> Result<(), GroupError> {
    let sent = sent_subscription_bytes(request);
    if sent > bounds.member_max_bytes {
        tracing::warn!(target: "weir::groups", client_id = %request.client_id, client_host = %request.client_host, bytes = sent, limit = bounds.member_max_bytes, "ConsumerGroupHeartbeat refused: its subscription is over group.member.metadata.max.bytes");
        return Err(GroupError::InvalidRequest);
    }
    let too_long = request.member_id.len() > ID_MAX_LEN
        || request
            .instance_id
            .as_ref()
            .is_some_and(|i| i.is_empty() || i.len() > ID_MAX_LEN)
        || request.rack_id.as_ref().is_some_and(String::is_empty);
    let bad_join = request.member_epoch == JOIN_EPOCH
        && (request.rebalance_timeout_ms < 0
            || (request.topic_names.is_none() && request.topic_regex.is_none())
            || request.owned.as_ref().is_none_or(|owned| !owned.is_empty()));
    let bad_leave = request.member_epoch == STATIC_LEAVE_EPOCH && request.instance_id.is_none();
    if too_long || bad_join || bad_leave || request.member_epoch < STATIC_LEAVE_EPOCH {
        return Err(GroupError::InvalidRequest);
    }
    match &request.server_assignor {
        Some(assignor) if !ASSIGNORS.contains(&assignor.as_str()) => {
            Err(GroupError::UnsupportedAssignor)
        }
        _ => Ok(()),
    }
}
