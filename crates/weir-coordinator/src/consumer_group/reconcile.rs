//! Each member's way to its target (Kafka's `CurrentAssignmentBuilder`): partitions it must
//! lose are revoked first, then it advances to the target epoch with the partitions nobody
//! else still holds; an owner map keeps a partition from having two owners.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use uuid::Uuid;

use crate::assignors::TopicPartitions;
use crate::records::AssignmentValue;

use super::{ConsumerGroup, MemberState};

impl ConsumerGroup {
    /// Moves the member towards its target: acknowledges a revocation the request shows
    /// done, then revokes what it must lose or advances its epoch with what is free.
    pub(super) fn reconcile(
        &mut self,
        member_id: &str,
        owned: Option<&TopicPartitions>,
        now: Instant,
    ) {
        let Some(member) = self.members.get(member_id) else {
            return;
        };
        // A revocation not yet done holds the member where it is.
        if member.state == MemberState::UnrevokedPartitions
            && owned.is_none_or(|owned| intersects(owned, &member.pending_revocation))
        {
            return;
        }
        let target_epoch = self.assignment_epoch;
        if member.epoch == target_epoch && member.state == MemberState::Stable {
            return;
        }
        let empty = TopicPartitions::new();
        let target = self.target.get(member_id).unwrap_or(&empty);
        let revoking = difference(&member.assigned, target);
        let mut assigned = intersection(&member.assigned, target);
        // Already given up when the request does not list them (never when it lists
        // nothing: `None` means unchanged).
        if !revoking.is_empty() && owned.is_none_or(|owned| intersects(owned, &revoking)) {
            let value = AssignmentValue {
                epoch: member.epoch,
                previous_epoch: member.previous_epoch,
                state: MemberState::UnrevokedPartitions.code(),
                assigned,
                pending_revocation: revoking,
            };
            self.set_assignment(member_id, value, now);
            return;
        }
        let mut all_free = true;
        for (topic, p) in flatten(&difference(target, &assigned)) {
            match self.owners.get(&(topic, p)) {
                Some(owner) if owner != member_id => all_free = false,
                _ => {
                    assigned.entry(topic).or_default().insert(p);
                }
            }
        }
        let (epoch, previous_epoch) = if member.epoch == target_epoch {
            (member.epoch, member.previous_epoch)
        } else {
            (target_epoch, member.epoch)
        };
        let state = if all_free {
            MemberState::Stable
        } else {
            MemberState::UnreleasedPartitions
        };
        let value = AssignmentValue {
            epoch,
            previous_epoch,
            state: state.code(),
            assigned,
            pending_revocation: TopicPartitions::new(),
        };
        self.set_assignment(member_id, value, now);
    }
}

/// Frees the `partitions` that `member_id` holds in the owner map.
pub(super) fn release(
    owners: &mut HashMap<(Uuid, i32), String>,
    member_id: &str,
    partitions: &TopicPartitions,
) {
    for partition in flatten(partitions) {
        if owners.get(&partition).map(String::as_str) == Some(member_id) {
            owners.remove(&partition);
        }
    }
}

pub(super) fn flatten(partitions: &TopicPartitions) -> Vec<(Uuid, i32)> {
    partitions
        .iter()
        .flat_map(|(topic, ps)| ps.iter().map(move |p| (*topic, *p)))
        .collect()
}

pub(super) fn contains(partitions: &TopicPartitions, topic: &Uuid, p: i32) -> bool {
    partitions.get(topic).is_some_and(|ps| ps.contains(&p))
}

pub(super) fn is_subset(small: &TopicPartitions, big: &TopicPartitions) -> bool {
    small
        .iter()
        .all(|(topic, ps)| ps.iter().all(|p| contains(big, topic, *p)))
}

pub(super) fn intersects(a: &TopicPartitions, b: &TopicPartitions) -> bool {
    a.iter()
        .any(|(topic, ps)| ps.iter().any(|p| contains(b, topic, *p)))
}

pub(super) fn filtered(a: &TopicPartitions, keep: impl Fn(&Uuid, i32) -> bool) -> TopicPartitions {
    a.iter()
        .map(|(topic, ps)| {
            let kept: BTreeSet<i32> = ps.iter().copied().filter(|p| keep(topic, *p)).collect();
            (*topic, kept)
        })
        .filter(|(_, ps)| !ps.is_empty())
        .collect()
}

pub(super) fn difference(a: &TopicPartitions, b: &TopicPartitions) -> TopicPartitions {
    filtered(a, |topic, p| !contains(b, topic, p))
}

pub(super) fn intersection(a: &TopicPartitions, b: &TopicPartitions) -> TopicPartitions {
    filtered(a, |topic, p| contains(b, topic, p))
}
