//! What the log holds of a consumer group: its records as Kafka writes them (group and
//! target epochs, and per member its subscription, target and current assignment), and the
//! group rebuilt from them on load.

use std::time::Instant;

use crate::assignors::TopicPartitions;
use crate::limits::{millis, ConsumerGroupSettings};
use crate::records::consumer::{
    decode_assignment, decode_epoch, decode_member, decode_target, encode_assignment, encode_epoch,
    encode_member, encode_target, AssignmentValue, MemberValue,
};
use crate::records::{ConsumerKey, FormatError};

use super::reconcile::flatten;
use super::{compile, ConsumerGroup, ConsumerMember, MemberState};

impl ConsumerGroup {
    /// The group as Kafka's records: the group and target epochs, and each member's
    /// subscription, target and current assignment.
    pub fn records(&self) -> Vec<(ConsumerKey, Vec<u8>)> {
        self.records_of(self.members.keys())
    }

    /// The group's own records (its epochs), and those of each member of `ids` that is in it.
    pub fn records_of<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a String>,
    ) -> Vec<(ConsumerKey, Vec<u8>)> {
        let mut out = vec![
            (ConsumerKey::Metadata, encode_epoch(self.epoch)),
            (
                ConsumerKey::TargetMetadata,
                encode_epoch(self.assignment_epoch),
            ),
        ];
        let members = ids
            .into_iter()
            .filter_map(|id| self.members.get(id).map(|m| (id, m)));
        for (id, m) in members {
            let value = MemberValue {
                instance_id: m.instance_id.clone(),
                rack_id: m.rack_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                topic_names: m.topic_names.clone(),
                topic_regex: m.topic_regex.as_ref().map(|(p, _)| p.clone()),
                rebalance_timeout_ms: i32::try_from(m.rebalance_timeout.as_millis())
                    .unwrap_or(i32::MAX),
                server_assignor: m.server_assignor.clone(),
            };
            out.push((ConsumerKey::Member(id.clone()), encode_member(&value)));
            if let Some(target) = self.target.get(id) {
                out.push((ConsumerKey::TargetMember(id.clone()), encode_target(target)));
            }
            let state = match m.state {
                MemberState::Stable => 0,
                MemberState::UnrevokedPartitions => 1,
                MemberState::UnreleasedPartitions => 2,
            };
            let assignment = AssignmentValue {
                epoch: m.epoch,
                previous_epoch: m.previous_epoch,
                state,
                assigned: m.assigned.clone(),
                pending_revocation: m.pending_revocation.clone(),
            };
            out.push((
                ConsumerKey::Assignment(id.clone()),
                encode_assignment(&assignment),
            ));
        }
        out
    }

    /// Rebuilds a group from its records (the newest value of each key), as
    /// [`ConsumerGroup::records`] wrote them: members keep their epochs and partitions, their
    /// sessions starting now. A record that does not parse is an error; a member's target
    /// or assignment without its subscription is ignored.
    pub fn restore(
        records: &[(ConsumerKey, Vec<u8>)],
        settings: &ConsumerGroupSettings,
        now: Instant,
    ) -> Result<ConsumerGroup, FormatError> {
        let mut group = ConsumerGroup {
            topics_unknown: true,
            ..ConsumerGroup::default()
        };
        for (key, value) in records {
            match key {
                ConsumerKey::Metadata => group.epoch = decode_epoch(value)?,
                ConsumerKey::TargetMetadata => group.assignment_epoch = decode_epoch(value)?,
                ConsumerKey::Member(id) => {
                    let mut m = decode_member(value)?;
                    m.topic_names.sort();
                    m.topic_names.dedup();
                    let topic_regex = match m.topic_regex {
                        Some(pattern) if !pattern.is_empty() => {
                            compile(&pattern).ok().map(|regex| (pattern, regex))
                        }
                        _ => None,
                    };
                    group.members.insert(
                        id.clone(),
                        ConsumerMember {
                            instance_id: m.instance_id,
                            rack_id: m.rack_id,
                            client_id: m.client_id,
                            client_host: m.client_host,
                            topic_names: m.topic_names,
                            topic_regex,
                            server_assignor: m.server_assignor,
                            rebalance_timeout: millis(m.rebalance_timeout_ms),
                            epoch: 0,
                            previous_epoch: 0,
                            state: MemberState::Stable,
                            assigned: TopicPartitions::new(),
                            pending_revocation: TopicPartitions::new(),
                            expires: now + millis(settings.session_timeout_ms),
                            revoke_by: None,
                        },
                    );
                }
                ConsumerKey::TargetMember(_) | ConsumerKey::Assignment(_) => {}
            }
        }
        for (key, value) in records {
            match key {
                ConsumerKey::TargetMember(id) if group.members.contains_key(id) => {
                    group.target.insert(id.clone(), decode_target(value)?);
                }
                ConsumerKey::Assignment(id) => {
                    let a = decode_assignment(value)?;
                    let Some(member) = group.members.get_mut(id) else {
                        continue;
                    };
                    member.epoch = a.epoch;
                    member.previous_epoch = a.previous_epoch;
                    member.state = match a.state {
                        1 => MemberState::UnrevokedPartitions,
                        2 => MemberState::UnreleasedPartitions,
                        _ => MemberState::Stable,
                    };
                    if member.state == MemberState::UnrevokedPartitions {
                        member.revoke_by = Some(now + member.rebalance_timeout);
                    }
                    for partition in flatten(&a.assigned)
                        .into_iter()
                        .chain(flatten(&a.pending_revocation))
                    {
                        group.owners.insert(partition, id.clone());
                    }
                    member.assigned = a.assigned;
                    member.pending_revocation = a.pending_revocation;
                }
                _ => {}
            }
        }
        group.assignor = group.preferred_assignor();
        for member in group.members.values() {
            group.subscriptions.add(member);
        }
        group.due = group.earliest_deadline();
        Ok(group)
    }
}
