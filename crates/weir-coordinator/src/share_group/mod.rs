//! One share group's membership (KIP-932): members heartbeat with their epoch and subscribed
//! topic names; whenever the membership or what it subscribes to changes, the group epoch
//! moves, and the next heartbeat computes the target assignment with the `simple` assignor.
//! Partitions are not owned exclusively in a share group (the share-partition's record locks
//! keep two members off one record), so there is no revocation: a member takes its target
//! at its next heartbeat, and when there are more members than partitions they share them.
//!
//! Synchronous and clock-free like the other groups: callers pass the time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::assignors::TopicPartitions;
use crate::consumer_group::TopicCatalog;
use crate::limits::{millis, ShareGroupSettings};
use crate::state::GroupState;
use crate::GroupError;

#[cfg(test)]
mod tests;

/// Member epoch of a ShareGroupHeartbeat that joins the group.
pub const JOIN_EPOCH: i32 = 0;
/// Member epoch of a ShareGroupHeartbeat that leaves the group.
pub const LEAVE_EPOCH: i32 = -1;
/// The one assignor of share groups, as ShareGroupDescribe names it.
pub const ASSIGNOR: &str = "simple";
/// `protocol_type` and `group_type` of a share group in ListGroups.
pub const GROUP_TYPE: &str = "share";

/// A ShareGroupHeartbeat, decoded by the handler. `None` fields did not change since the
/// member's last heartbeat.
#[derive(Debug, Clone, Default)]
pub struct ShareHeartbeat {
    /// Member id, chosen by the client.
    pub member_id: String,
    /// 0 to join, -1 to leave, else its epoch.
    pub member_epoch: i32,
    /// `client.rack`.
    pub rack_id: Option<String>,
    /// Subscribed topic names.
    pub topic_names: Option<Vec<String>>,
    /// The client's `client.id`.
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
}

/// The answer to a ShareGroupHeartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareHeartbeatReply {
    /// The member's epoch after this heartbeat (-1 once it left).
    pub member_epoch: i32,
    /// When to heartbeat next (0 once it left).
    pub heartbeat_interval_ms: i32,
    /// The member's assignment, when it joined or its assignment changed.
    pub assignment: Option<TopicPartitions>,
}

/// What ShareGroupDescribe shows of one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareMemberDescription {
    /// Member id.
    pub member_id: String,
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
    /// What it was given at its last heartbeat.
    pub assignment: TopicPartitions,
}

/// What ShareGroupDescribe shows of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupDescription {
    /// Empty or Stable.
    pub state: GroupState,
    /// The group epoch.
    pub epoch: i32,
    /// The epoch of the target assignment.
    pub assignment_epoch: i32,
    /// Members in id order.
    pub members: Vec<ShareMemberDescription>,
}

/// One member.
#[derive(Debug, Clone)]
struct ShareMember {
    epoch: i32,
    rack_id: Option<String>,
    client_id: String,
    client_host: String,
    topic_names: Vec<String>,
    /// Its assignment as of its last heartbeat.
    assignment: TopicPartitions,
    /// When it is removed unless it heartbeats.
    expires: Instant,
}

/// The membership of a share group.
#[derive(Debug, Default)]
pub struct ShareGroup {
    epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, ShareMember>,
    /// The target assignment at `assignment_epoch`, per member.
    target: BTreeMap<String, TopicPartitions>,
    /// The subscribed topics' ids and partition counts the target was computed from.
    topics: BTreeMap<String, (Uuid, i32)>,
    /// The catalog version the topics were last resolved at.
    resolved_at: Option<u64>,
    /// `group.share.session.timeout.ms` as the last heartbeat's settings gave it.
    session_timeout: Duration,
    /// No member's session ends before this: lowered as sessions are extended, made exact
    /// when the timer reaches it.
    due: Option<Instant>,
    /// When the group last became empty or got its first member (ms since the epoch).
    state_since_ms: i64,
    /// Every topic a member subscribed to (that existed) since the group was made, at most
    /// [`REMEMBERED_TOPICS_MAX`]: the topics whose share-partitions may hold state, which
    /// DescribeShareGroupOffsets shows when it names none.
    remembered_topics: BTreeSet<String>,
}

/// Topics a share group remembers its members subscribed to, at most.
pub const REMEMBERED_TOPICS_MAX: usize = 10_000;

impl ShareGroup {
    /// A group without members, made at `now_ms`.
    pub fn new(settings: &ShareGroupSettings, now_ms: i64) -> ShareGroup {
        ShareGroup {
            session_timeout: millis(settings.session_timeout_ms),
            state_since_ms: now_ms,
            ..ShareGroup::default()
        }
    }

    /// Empty without members, else Stable (a member takes its target at its next heartbeat).
    pub fn state(&self) -> GroupState {
        if self.members.is_empty() {
            GroupState::Empty
        } else {
            GroupState::Stable
        }
    }

    /// True without members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// True when `member_id` is a member.
    pub fn has_member(&self, member_id: &str) -> bool {
        self.members.contains_key(member_id)
    }

    /// When the group last became empty or got its first member (ms since the epoch).
    pub fn state_since_ms(&self) -> i64 {
        self.state_since_ms
    }

    /// Bytes of member metadata held: the subscriptions' names and the client strings.
    pub fn metadata_bytes(&self) -> usize {
        self.members.iter().map(|(id, m)| member_bytes(id, m)).sum()
    }

    /// Every topic some member subscribes to that exists.
    pub fn subscribed_topics(&self) -> Vec<String> {
        self.topics.keys().cloned().collect()
    }

    /// Every topic a member subscribed to since the group was made (that existed then), in
    /// name order.
    pub fn remembered_topics(&self) -> Vec<String> {
        self.remembered_topics.iter().cloned().collect()
    }

    /// Handles one heartbeat of a member whose request passed the handler's checks: joins
    /// (epoch 0, also a member rejoining), heartbeats (its current epoch) or leaves (-1).
    pub fn heartbeat(
        &mut self,
        group_id: &str,
        request: ShareHeartbeat,
        catalog: &dyn TopicCatalog,
        settings: &ShareGroupSettings,
        now: Instant,
        now_ms: i64,
    ) -> Result<ShareHeartbeatReply, GroupError> {
        self.session_timeout = millis(settings.session_timeout_ms);
        let was_empty = self.members.is_empty();
        let reply = self.member_heartbeat(group_id, request, catalog, settings, now);
        if self.members.is_empty() != was_empty {
            self.state_since_ms = now_ms;
        }
        reply
    }

    fn member_heartbeat(
        &mut self,
        group_id: &str,
        request: ShareHeartbeat,
        catalog: &dyn TopicCatalog,
        settings: &ShareGroupSettings,
        now: Instant,
    ) -> Result<ShareHeartbeatReply, GroupError> {
        let joining = request.member_epoch == JOIN_EPOCH;
        match self.members.get(&request.member_id) {
            None if request.member_epoch == LEAVE_EPOCH || !joining => {
                return Err(GroupError::UnknownMemberId);
            }
            None if self.members.len() >= settings.max_size => {
                return Err(GroupError::GroupMaxSizeReached);
            }
            Some(_) if request.member_epoch == LEAVE_EPOCH => {
                self.remove_members(group_id, &[request.member_id], "left the group");
                return Ok(ShareHeartbeatReply {
                    member_epoch: LEAVE_EPOCH,
                    heartbeat_interval_ms: 0,
                    assignment: None,
                });
            }
            Some(member) if !joining && request.member_epoch != member.epoch => {
                return Err(GroupError::FencedMemberEpoch);
            }
            _ => {}
        }
        let is_new = !self.members.contains_key(&request.member_id);
        let expires = now + self.session_timeout;
        let member = self
            .members
            .entry(request.member_id.clone())
            .or_insert_with(|| {
                tracing::info!(target: "weir::groups", group = group_id, member = %request.member_id, "share group member joined");
                ShareMember {
                    epoch: JOIN_EPOCH,
                    rack_id: None,
                    client_id: String::new(),
                    client_host: String::new(),
                    topic_names: Vec::new(),
                    assignment: TopicPartitions::new(),
                    expires,
                }
            });
        let mut changed = is_new;
        if let Some(names) = request.topic_names {
            let mut names = names;
            names.sort();
            names.dedup();
            changed |= names != member.topic_names;
            member.topic_names = names;
        }
        if request.rack_id.is_some() && request.rack_id != member.rack_id {
            member.rack_id = request.rack_id;
        }
        member.client_id = request.client_id;
        member.client_host = request.client_host;
        member.expires = expires;
        self.due = Some(self.due.map_or(expires, |due| due.min(expires)));
        if changed {
            self.epoch += 1;
        }
        self.resolve_topics(catalog, changed);
        if self.assignment_epoch < self.epoch {
            self.assign();
        }
        let target = self
            .target
            .get(&request.member_id)
            .cloned()
            .unwrap_or_default();
        let assignment_epoch = self.assignment_epoch;
        let member = self
            .members
            .get_mut(&request.member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        // Kafka sends the assignment when it changed (and to a member joining), not when
        // only the epoch moved.
        let moved = member.assignment != target;
        member.epoch = assignment_epoch;
        let assignment = (moved || joining).then(|| target.clone());
        member.assignment = target;
        Ok(ShareHeartbeatReply {
            member_epoch: member.epoch,
            heartbeat_interval_ms: settings.heartbeat_interval_ms,
            assignment,
        })
    }

    /// Resolves the members' subscribed names against the catalog (when it changed since the
    /// last time, or the subscriptions did); a topic created, deleted or grown moves the
    /// group epoch so that the target follows it.
    fn resolve_topics(&mut self, catalog: &dyn TopicCatalog, subscriptions_changed: bool) {
        let version = catalog.version();
        if !subscriptions_changed && self.resolved_at == Some(version) {
            return;
        }
        let names: BTreeSet<&String> = self
            .members
            .values()
            .flat_map(|m| m.topic_names.iter())
            .collect();
        let resolved: BTreeMap<String, (Uuid, i32)> = names
            .into_iter()
            .filter_map(|name| catalog.topic(name).map(|t| (name.clone(), t)))
            .collect();
        if resolved != self.topics {
            // A target already behind the group epoch is computed from these anyway.
            if self.epoch == self.assignment_epoch {
                self.epoch += 1;
            }
            for name in resolved.keys() {
                if self.remembered_topics.len() < REMEMBERED_TOPICS_MAX {
                    self.remembered_topics.insert(name.clone());
                }
            }
            self.topics = resolved;
        }
        self.resolved_at = Some(version);
    }

    /// Computes the target assignment at the group epoch with the `simple` assignor: each
    /// topic's partitions go round-robin over the members subscribed to it (in member id
    /// order); when it has fewer partitions than subscribers, the subscribers share them,
    /// each taking one, so that every member of a subscribed topic gets work.
    fn assign(&mut self) {
        let mut target: BTreeMap<String, TopicPartitions> = self
            .members
            .keys()
            .map(|id| (id.clone(), TopicPartitions::new()))
            .collect();
        for (name, (topic_id, partitions)) in &self.topics {
            let subscribers: Vec<&String> = self
                .members
                .iter()
                .filter(|(_, m)| m.topic_names.binary_search(name).is_ok())
                .map(|(id, _)| id)
                .collect();
            if subscribers.is_empty() || *partitions <= 0 {
                continue;
            }
            let count = subscribers.len().max(*partitions as usize);
            for slot in 0..count {
                let member = subscribers[slot % subscribers.len()];
                let partition = (slot % *partitions as usize) as i32;
                if let Some(assigned) = target.get_mut(member) {
                    assigned.entry(*topic_id).or_default().insert(partition);
                }
            }
        }
        self.target = target;
        self.assignment_epoch = self.epoch;
    }

    /// Removes members (left or expired): the group epoch moves so the others' targets are
    /// computed again at their next heartbeat.
    fn remove_members(&mut self, group_id: &str, ids: &[String], why: &str) {
        for id in ids {
            if self.members.remove(id).is_some() {
                self.target.remove(id);
                tracing::info!(target: "weir::groups", group = group_id, member = %id, "share group member {why}");
            }
        }
        if !ids.is_empty() {
            self.epoch += 1;
        }
    }

    /// Removes the members whose session ended by `now`. Returns true when the group became
    /// empty.
    pub fn tick(&mut self, group_id: &str, now: Instant, now_ms: i64) -> bool {
        if self.due.is_none_or(|due| due > now) {
            return false;
        }
        let had_members = !self.members.is_empty();
        let expired: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.expires <= now)
            .map(|(id, _)| id.clone())
            .collect();
        self.remove_members(group_id, &expired, "session expired; removed");
        self.due = self.members.values().map(|m| m.expires).min();
        let emptied = had_members && self.members.is_empty();
        if emptied {
            self.state_since_ms = now_ms;
        }
        emptied
    }

    /// The next moment [`ShareGroup::tick`] has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.due
    }

    /// What ShareGroupDescribe shows.
    pub fn describe(&self) -> ShareGroupDescription {
        ShareGroupDescription {
            state: self.state(),
            epoch: self.epoch,
            assignment_epoch: self.assignment_epoch,
            members: self
                .members
                .iter()
                .map(|(id, m)| ShareMemberDescription {
                    member_id: id.clone(),
                    rack_id: m.rack_id.clone(),
                    member_epoch: m.epoch,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    topic_names: m.topic_names.clone(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }
}

/// Bytes one member's metadata takes.
fn member_bytes(id: &str, member: &ShareMember) -> usize {
    id.len()
        + member.client_id.len()
        + member.client_host.len()
        + member.rack_id.as_ref().map_or(0, String::len)
        + member.topic_names.iter().map(String::len).sum::<usize>()
}

/// What a heartbeat would add to the group's metadata: a new member's, or a subscription
/// grown by names.
pub fn sent_bytes(request: &ShareHeartbeat) -> usize {
    request.member_id.len()
        + request.client_id.len()
        + request.client_host.len()
        + request.rack_id.as_ref().map_or(0, String::len)
        + request
            .topic_names
            .iter()
            .flatten()
            .map(String::len)
            .sum::<usize>()
}
