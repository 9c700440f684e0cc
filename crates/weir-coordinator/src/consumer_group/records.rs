//! A consumer group as its records (group and target epochs, and per member its
//! subscription, target and current assignment, as Kafka writes them): every change an
//! operation makes is a record, applied by [`ConsumerGroup::apply`], the function loading
//! applies each record it reads with, so a group loaded from the log is the group that wrote
//! it by construction.

use std::time::Instant;

use crate::limits::millis;
use crate::records::{AssignmentValue, ConsumerKey, ConsumerValue, MemberValue};

use super::reconcile::{flatten, release};
use super::{compile, ConsumerGroup, ConsumerMember, MemberState};

impl ConsumerGroup {
    /// Makes one change to what the log holds of the group: applies its record as loading
    /// would and keeps it for the next write ([`ConsumerGroup::take_records`]).
    pub(super) fn write(&mut self, key: ConsumerKey, value: Option<ConsumerValue>, now: Instant) {
        self.apply(&key, value.as_ref(), now);
        self.records.push((key, value));
    }

    /// The records of the changes made since the last call, in the order they were made.
    pub fn take_records(&mut self) -> Vec<(ConsumerKey, Option<ConsumerValue>)> {
        std::mem::take(&mut self.records)
    }

    /// Applies one record (`None`: a tombstone): what the group's operations change, and
    /// what loading replays. A member's session starts `now`. (The group epoch's tombstone,
    /// which deletes the group, is the enclosing group's to apply.)
    pub fn apply(&mut self, key: &ConsumerKey, value: Option<&ConsumerValue>, now: Instant) {
        match (key, value) {
            (ConsumerKey::Metadata, Some(ConsumerValue::Epoch(epoch))) => self.epoch = *epoch,
            (ConsumerKey::TargetMetadata, Some(ConsumerValue::Epoch(epoch))) => {
                self.assignment_epoch = *epoch;
            }
            (ConsumerKey::TargetMetadata, None) => self.assignment_epoch = 0,
            (ConsumerKey::Member(id), Some(ConsumerValue::Member(member))) => {
                self.apply_member(id, member, now);
            }
            (ConsumerKey::Member(id), None) => {
                if let Some(member) = self.members.remove(id) {
                    release(&mut self.owners, id, &member.assigned);
                    release(&mut self.owners, id, &member.pending_revocation);
                    self.subscriptions.remove(&member);
                }
            }
            (ConsumerKey::TargetMember(id), Some(ConsumerValue::Target(partitions))) => {
                self.target.insert(id.clone(), partitions.clone());
            }
            (ConsumerKey::TargetMember(id), None) => {
                self.target.remove(id);
            }
            (ConsumerKey::Assignment(id), Some(ConsumerValue::Assignment(assignment))) => {
                self.apply_assignment(id, assignment, now);
            }
            (ConsumerKey::Assignment(id), None) if self.members.contains_key(id) => {
                self.apply_assignment(id, &super::starting_over(), now);
            }
            // The group's deletion, or a value that is not the key's (decoding pairs them).
            _ => {}
        }
    }

    /// A member's subscription and client: a new member (at epoch 0, holding nothing, its
    /// session starting now) or a changed one.
    fn apply_member(&mut self, id: &str, value: &MemberValue, now: Instant) {
        let mut names = value.topic_names.clone();
        names.sort();
        names.dedup();
        let is_new = !self.members.contains_key(id);
        let member = self
            .members
            .entry(id.to_string())
            .or_insert_with(|| ConsumerMember::new(now + self.session_timeout));
        let expires = member.expires;
        let pattern = value.topic_regex.as_deref().filter(|p| !p.is_empty());
        // A record that only keeps the member's subscription leaves the group's subscriptions
        // (and so their generation, which says when topics must be resolved again) alone.
        let resubscribes = is_new
            || member.topic_names != names
            || member.topic_regex.as_ref().map(|(p, _)| p.as_str()) != pattern
            || member.rack_id != value.rack_id;
        if resubscribes && !is_new {
            self.subscriptions.remove(member);
        }
        if member.topic_regex.as_ref().map(|(p, _)| p.as_str()) != pattern {
            member.topic_regex = pattern.and_then(|pattern| {
                let compiled = self.compiled.take().filter(|(p, _)| p == pattern);
                compiled.or_else(|| Some((pattern.to_string(), compile(pattern).ok()?)))
            });
        }
        member.topic_names = names;
        member.instance_id.clone_from(&value.instance_id);
        member.rack_id.clone_from(&value.rack_id);
        member.client_id.clone_from(&value.client_id);
        member.client_host.clone_from(&value.client_host);
        member.rebalance_timeout = millis(value.rebalance_timeout_ms);
        member.server_assignor.clone_from(&value.server_assignor);
        if resubscribes {
            self.subscriptions.add(member);
        }
        self.note_deadline(expires);
    }

    /// A member's epochs and partitions (a member without a subscription record is made, as
    /// Kafka does): the owner map follows, and a member that must revoke has its rebalance
    /// timeout from now to do it.
    fn apply_assignment(&mut self, id: &str, value: &AssignmentValue, now: Instant) {
        let session_ends = now + self.session_timeout;
        let member = self
            .members
            .entry(id.to_string())
            .or_insert_with(|| ConsumerMember::new(session_ends));
        release(&mut self.owners, id, &member.assigned);
        release(&mut self.owners, id, &member.pending_revocation);
        member.epoch = value.epoch;
        member.previous_epoch = value.previous_epoch;
        member.state = MemberState::from_code(value.state);
        member.assigned.clone_from(&value.assigned);
        member
            .pending_revocation
            .clone_from(&value.pending_revocation);
        for partition in flatten(&value.assigned)
            .into_iter()
            .chain(flatten(&value.pending_revocation))
        {
            self.owners.insert(partition, id.to_string());
        }
        member.revoke_by = (member.state == MemberState::UnrevokedPartitions)
            .then(|| now + member.rebalance_timeout);
        let deadlines = [Some(member.expires), member.revoke_by];
        for deadline in deadlines.into_iter().flatten() {
            self.note_deadline(deadline);
        }
    }

    /// The keys of every record the group holds, in the order Kafka replays their
    /// tombstones: each member's current assignment, target and subscription, the targets of
    /// ids that are not members, then the target's epoch and the group epoch.
    pub fn keys(&self) -> Vec<ConsumerKey> {
        let mut keys = Vec::new();
        for id in self.members.keys() {
            keys.push(ConsumerKey::Assignment(id.clone()));
            if self.target.contains_key(id) {
                keys.push(ConsumerKey::TargetMember(id.clone()));
            }
            keys.push(ConsumerKey::Member(id.clone()));
        }
        let mut orphans: Vec<&String> = self
            .target
            .keys()
            .filter(|id| !self.members.contains_key(*id))
            .collect();
        orphans.sort();
        keys.extend(
            orphans
                .into_iter()
                .map(|id| ConsumerKey::TargetMember(id.clone())),
        );
        keys.push(ConsumerKey::TargetMetadata);
        keys.push(ConsumerKey::Metadata);
        keys
    }

    /// The value the group holds under `key`; `None` when it holds none (its record is a
    /// tombstone).
    pub fn value_of(&self, key: &ConsumerKey) -> Option<ConsumerValue> {
        match key {
            ConsumerKey::Metadata => Some(ConsumerValue::Epoch(self.epoch)),
            ConsumerKey::TargetMetadata => Some(ConsumerValue::Epoch(self.assignment_epoch)),
            ConsumerKey::Member(id) => self
                .members
                .get(id)
                .map(|m| ConsumerValue::Member(m.stored())),
            ConsumerKey::TargetMember(id) => self
                .target
                .get(id)
                .map(|t| ConsumerValue::Target(t.clone())),
            ConsumerKey::Assignment(id) => self
                .members
                .get(id)
                .map(|m| ConsumerValue::Assignment(m.assignment())),
        }
    }
}
