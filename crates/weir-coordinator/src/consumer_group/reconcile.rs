//! Each member's way to its target (Kafka's `CurrentAssignmentBuilder`): partitions it must
//! lose are revoked first, then it advances to the target epoch with the partitions nobody
//! else still holds; an owner map keeps a partition from having two owners.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use uuid::Uuid;

use crate::assignors::TopicPartitions;

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
        if member.state == MemberState::UnrevokedPartitions {
            let revoked = owned.is_some_and(|owned| !intersects(owned, &member.pending_revocation));
            if !revoked {
                return;
            }
            let pending = std::mem::take(
                &mut self
                    .members
                    .get_mut(member_id)
                    .expect("found above")
                    .pending_revocation,
            );
            release(&mut self.owners, member_id, &pending);
        }
        let target_epoch = self.assignment_epoch;
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let member = self.members.get_mut(member_id).expect("found above");
        if member.epoch == target_epoch && member.state == MemberState::Stable {
            member.revoke_by = None;
            return;
        }
        let revoking = difference(&member.assigned, &target);
        member.assigned = intersection(&member.assigned, &target);
        if !revoking.is_empty() {
            // Already given up when the request does not list them (never when it lists
            // nothing: `None` means unchanged).
            if owned.is_none_or(|owned| intersects(owned, &revoking)) {
                member.pending_revocation = revoking;
                member.state = MemberState::UnrevokedPartitions;
                let revoke_by = now + member.rebalance_timeout;
                member.revoke_by = Some(revoke_by);
                self.note_deadline(revoke_by);
                return;
            }
            release(&mut self.owners, member_id, &revoking);
        }
        let wanted = difference(&target, &member.assigned);
        let mut all_free = true;
        for (topic, p) in flatten(&wanted) {
            match self.owners.get(&(topic, p)) {
                Some(owner) if owner != member_id => all_free = false,
                _ => {
                    self.owners.insert((topic, p), member_id.to_string());
                    member.assigned.entry(topic).or_default().insert(p);
                }
            }
        }
        if member.epoch != target_epoch {
            member.previous_epoch = member.epoch;
            member.epoch = target_epoch;
        }
        member.revoke_by = None;
        member.state = if all_free {
            MemberState::Stable
        } else {
            MemberState::UnreleasedPartitions
        };
    }

    /// Releases every partition a member holds or is revoking.
    pub(super) fn release_all(&mut self, member_id: &str) {
        self.owners.retain(|_, owner| owner != member_id);
        if let Some(member) = self.members.get_mut(member_id) {
            member.assigned.clear();
            member.pending_revocation.clear();
            self.changed.insert(member_id.to_string());
        }
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
