//! A member of a consumer group as the group holds it (its subscription, epochs, partitions
//! and deadlines), built from and compared with its records, and the group's subscriptions
//! counted over its members.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::assignors::TopicPartitions;
use crate::records::{AssignmentValue, MemberValue};

use super::{ConsumerHeartbeat, STATIC_LEAVE_EPOCH};

/// Where a member is in reaching its target assignment (Kafka's member states).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MemberState {
    /// It has its target assignment, or all of it that is free.
    Stable,
    /// It must revoke partitions before it may advance.
    UnrevokedPartitions,
    /// It is at the target epoch, waiting for partitions other members still hold.
    UnreleasedPartitions,
}

impl MemberState {
    /// Kafka's number for the state, as the member's assignment record stores it.
    pub(super) fn code(self) -> i8 {
        match self {
            MemberState::Stable => 0,
            MemberState::UnrevokedPartitions => 1,
            MemberState::UnreleasedPartitions => 2,
        }
    }

    /// The state a stored number means (an unknown one as Stable).
    pub(super) fn from_code(code: i8) -> MemberState {
        match code {
            1 => MemberState::UnrevokedPartitions,
            2 => MemberState::UnreleasedPartitions,
            _ => MemberState::Stable,
        }
    }
}

/// A member's assignment when it starts over: epoch 0, holding nothing.
pub(super) fn starting_over() -> AssignmentValue {
    AssignmentValue {
        epoch: 0,
        previous_epoch: 0,
        state: MemberState::Stable.code(),
        assigned: TopicPartitions::new(),
        pending_revocation: TopicPartitions::new(),
    }
}

/// A member's subscription record after `request`: `current` (a new member's built from the
/// request) with the fields the request carries.
pub(super) fn subscribed(
    current: Option<&MemberValue>,
    request: &ConsumerHeartbeat,
) -> MemberValue {
    let mut value = current.cloned().unwrap_or_else(|| MemberValue {
        instance_id: request.instance_id.clone(),
        rack_id: None,
        client_id: request.client_id.clone(),
        client_host: request.client_host.clone(),
        topic_names: Vec::new(),
        topic_regex: None,
        rebalance_timeout_ms: 0,
        server_assignor: None,
    });
    if request.rebalance_timeout_ms >= 0 {
        value.rebalance_timeout_ms = request.rebalance_timeout_ms;
    }
    if let Some(names) = &request.topic_names {
        let mut names = names.clone();
        names.sort();
        names.dedup();
        value.topic_names = names;
    }
    if let Some(pattern) = &request.topic_regex {
        value.topic_regex = (!pattern.is_empty()).then(|| pattern.clone());
    }
    if request.rack_id.is_some() {
        value.rack_id.clone_from(&request.rack_id);
    }
    if request.server_assignor.is_some() {
        value.server_assignor.clone_from(&request.server_assignor);
    }
    value
}

#[derive(Debug)]
pub(super) struct ConsumerMember {
    pub(super) instance_id: Option<String>,
    pub(super) rack_id: Option<String>,
    pub(super) client_id: String,
    pub(super) client_host: String,
    pub(super) topic_names: Vec<String>,
    pub(super) topic_regex: Option<(String, regex::Regex)>,
    pub(super) server_assignor: Option<String>,
    pub(super) rebalance_timeout: Duration,
    pub(super) epoch: i32,
    pub(super) previous_epoch: i32,
    pub(super) state: MemberState,
    /// The partitions it holds (without those pending revocation).
    pub(super) assigned: TopicPartitions,
    /// Partitions it must give up; they stay its own until it acknowledges.
    pub(super) pending_revocation: TopicPartitions,
    /// Session expiry, pushed forward by each heartbeat.
    pub(super) expires: Instant,
    /// UnrevokedPartitions: when the member is fenced if it has not revoked.
    pub(super) revoke_by: Option<Instant>,
}

impl ConsumerMember {
    /// A member before its records are applied: no subscription, epoch 0, nothing held, its
    /// session ending at `expires`.
    pub(super) fn new(expires: Instant) -> ConsumerMember {
        ConsumerMember {
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            topic_names: Vec::new(),
            topic_regex: None,
            server_assignor: None,
            rebalance_timeout: Duration::ZERO,
            epoch: 0,
            previous_epoch: 0,
            state: MemberState::Stable,
            assigned: TopicPartitions::new(),
            pending_revocation: TopicPartitions::new(),
            expires,
            revoke_by: None,
        }
    }

    /// A static member that left with epoch -2, waiting for its instance to return.
    pub(super) fn departed(&self) -> bool {
        self.epoch == STATIC_LEAVE_EPOCH
    }

    /// Its subscription and client, as its record stores them.
    pub(super) fn stored(&self) -> MemberValue {
        MemberValue {
            instance_id: self.instance_id.clone(),
            rack_id: self.rack_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            topic_names: self.topic_names.clone(),
            topic_regex: self.topic_regex.as_ref().map(|(p, _)| p.clone()),
            rebalance_timeout_ms: i32::try_from(self.rebalance_timeout.as_millis())
                .unwrap_or(i32::MAX),
            server_assignor: self.server_assignor.clone(),
        }
    }

    /// Its epochs and partitions, as its record stores them.
    pub(super) fn assignment(&self) -> AssignmentValue {
        AssignmentValue {
            epoch: self.epoch,
            previous_epoch: self.previous_epoch,
            state: self.state.code(),
            assigned: self.assigned.clone(),
            pending_revocation: self.pending_revocation.clone(),
        }
    }

    /// True when its epochs and partitions are `value`'s.
    pub(super) fn holds(&self, value: &AssignmentValue) -> bool {
        self.epoch == value.epoch
            && self.previous_epoch == value.previous_epoch
            && self.state.code() == value.state
            && self.assigned == value.assigned
            && self.pending_revocation == value.pending_revocation
    }

    /// Bytes its subscription holds: topic names, pattern and rack.
    pub(super) fn subscription_bytes(&self) -> usize {
        self.topic_names.iter().map(String::len).sum::<usize>()
            + self.topic_regex.as_ref().map_or(0, |(p, _)| p.len())
            + self.rack_id.as_ref().map_or(0, String::len)
    }

    pub(super) fn subscribes_to(&self, name: &str) -> bool {
        // `topic_names` is kept sorted.
        self.topic_names
            .binary_search_by(|n| n.as_str().cmp(name))
            .is_ok()
            || self
                .topic_regex
                .as_ref()
                .is_some_and(|(_, regex)| regex.is_match(name))
    }
}

/// The members' subscriptions, counted: topic names and patterns with how many members name
/// each, and their bytes, so a heartbeat needs no pass over every member.
#[derive(Debug, Default)]
pub(super) struct Subscriptions {
    pub(super) names: BTreeMap<String, usize>,
    pub(super) patterns: BTreeMap<String, usize>,
    pub(super) bytes: usize,
    /// Moves with every change.
    pub(super) generation: u64,
}

impl Subscriptions {
    pub(super) fn add(&mut self, member: &ConsumerMember) {
        for name in &member.topic_names {
            *self.names.entry(name.clone()).or_default() += 1;
        }
        if let Some((pattern, _)) = &member.topic_regex {
            *self.patterns.entry(pattern.clone()).or_default() += 1;
        }
        self.bytes += member.subscription_bytes();
        self.generation += 1;
    }

    pub(super) fn remove(&mut self, member: &ConsumerMember) {
        let drop_one = |counts: &mut BTreeMap<String, usize>, key: &String| {
            if let Some(count) = counts.get_mut(key) {
                *count -= 1;
                if *count == 0 {
                    counts.remove(key);
                }
            }
        };
        for name in &member.topic_names {
            drop_one(&mut self.names, name);
        }
        if let Some((pattern, _)) = &member.topic_regex {
            drop_one(&mut self.patterns, pattern);
        }
        self.bytes = self.bytes.saturating_sub(member.subscription_bytes());
        self.generation += 1;
    }
}
