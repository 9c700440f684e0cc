//! Client-side partition assignors of the classic group protocol, computed by the group's
//! leader: `range` (Kafka's RangeAssignor) and `cooperative-sticky` (members keep what they
//! own; a partition that must move is first revoked by its owner and given to its new owner
//! only in the next rebalance, KIP-429).

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{consumer_protocol_assignment, consumer_protocol_subscription};
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// A topic and partition.
pub type TopicPartition = (String, i32);

/// Version of the subscription and assignment encodings written (with owned partitions).
const CONSUMER_PROTOCOL_VERSION: i16 = 1;

/// A partition assignor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignor {
    /// Contiguous ranges of each topic's partitions, per topic.
    Range,
    /// Balanced and sticky, with incremental (cooperative) rebalances.
    CooperativeSticky,
}

impl Assignor {
    /// The protocol name members announce.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::CooperativeSticky => "cooperative-sticky",
        }
    }

    /// The assignor of a protocol name, if this client implements it.
    pub fn from_name(name: &str) -> Option<Assignor> {
        [Assignor::Range, Assignor::CooperativeSticky]
            .into_iter()
            .find(|a| a.name() == name)
    }

    /// True when members keep their partitions through a rebalance.
    pub fn is_cooperative(self) -> bool {
        self == Assignor::CooperativeSticky
    }

    /// Assigns the partitions of `partitions` (topic → partition count) to `members`.
    pub fn assign(
        self,
        members: &[MemberSubscription],
        partitions: &BTreeMap<String, i32>,
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let mut result: BTreeMap<String, Vec<TopicPartition>> = members
            .iter()
            .map(|m| (m.member_id.clone(), Vec::new()))
            .collect();
        match self {
            Assignor::Range => range(members, partitions, &mut result),
            Assignor::CooperativeSticky => cooperative_sticky(members, partitions, &mut result),
        }
        for assigned in result.values_mut() {
            assigned.sort();
        }
        result
    }
}

/// What a member told the leader: its topics and the partitions it owns now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSubscription {
    /// Member id.
    pub member_id: String,
    /// Subscribed topics.
    pub topics: Vec<String>,
    /// Partitions it owns (cooperative protocols).
    pub owned: Vec<TopicPartition>,
}

fn range(
    members: &[MemberSubscription],
    partitions: &BTreeMap<String, i32>,
    result: &mut BTreeMap<String, Vec<TopicPartition>>,
) {
    for (topic, &count) in partitions {
        let mut subscribed: Vec<&str> = members
            .iter()
            .filter(|m| m.topics.contains(topic))
            .map(|m| m.member_id.as_str())
            .collect();
        subscribed.sort();
        if subscribed.is_empty() {
            continue;
        }
        let n = subscribed.len() as i32;
        let (each, extra) = (count / n, count % n);
        let mut next = 0;
        for (i, member) in subscribed.into_iter().enumerate() {
            let take = each + i32::from((i as i32) < extra);
            let assigned = result.entry(member.to_string()).or_default();
            assigned.extend((next..next + take).map(|p| (topic.clone(), p)));
            next += take;
        }
    }
}

fn cooperative_sticky(
    members: &[MemberSubscription],
    partitions: &BTreeMap<String, i32>,
    result: &mut BTreeMap<String, Vec<TopicPartition>>,
) {
    let mut members: Vec<&MemberSubscription> = members.iter().collect();
    members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    let all: BTreeSet<TopicPartition> = partitions
        .iter()
        .filter(|(topic, _)| members.iter().any(|m| m.topics.contains(topic)))
        .flat_map(|(topic, &count)| (0..count).map(move |p| (topic.clone(), p)))
        .collect();
    if members.is_empty() {
        return;
    }
    // Quotas: every member gets floor(P/M); the P%M members owning most get one more.
    let total = all.len();
    let (floor, extra) = (total / members.len(), total % members.len());
    let mut by_owned: Vec<(usize, &str)> = members
        .iter()
        .map(|m| (m.owned.len(), m.member_id.as_str()))
        .collect();
    by_owned.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let quota: BTreeMap<&str, usize> = by_owned
        .iter()
        .enumerate()
        .map(|(i, (_, id))| (*id, floor + usize::from(i < extra)))
        .collect();
    // Keep what each member owns, is still subscribed to, and no one else claimed first.
    let mut claimed: BTreeMap<TopicPartition, &str> = BTreeMap::new();
    let mut previous_owner: BTreeMap<TopicPartition, &str> = BTreeMap::new();
    for m in &members {
        let mut kept = 0;
        for tp in &m.owned {
            previous_owner.entry(tp.clone()).or_insert(&m.member_id);
            let valid = all.contains(tp) && m.topics.contains(&tp.0);
            if valid && !claimed.contains_key(tp) && kept < quota[m.member_id.as_str()] {
                claimed.insert(tp.clone(), &m.member_id);
                kept += 1;
            }
        }
    }
    let mut counts: BTreeMap<&str, usize> =
        members.iter().map(|m| (m.member_id.as_str(), 0)).collect();
    for owner in claimed.values() {
        *counts.entry(owner).or_default() += 1;
    }
    // Hand out the rest: each to the eligible member furthest below its quota.
    let unclaimed: Vec<&TopicPartition> =
        all.iter().filter(|tp| !claimed.contains_key(*tp)).collect();
    for tp in unclaimed {
        let target = members
            .iter()
            .filter(|m| m.topics.contains(&tp.0))
            .map(|m| m.member_id.as_str())
            .min_by_key(|id| (counts[id] >= quota[id], counts[id], *id));
        if let Some(id) = target {
            *counts.entry(id).or_default() += 1;
            claimed.insert(tp.clone(), id);
        }
    }
    for (tp, owner) in claimed {
        // A partition moving from another member is withheld this round: its owner revokes
        // it first, then everyone rejoins and it is assigned (KIP-429).
        if previous_owner
            .get(&tp)
            .is_some_and(|previous| *previous != owner)
        {
            continue;
        }
        result.entry(owner.to_string()).or_default().push(tp);
    }
}

/// Encodes a member's subscription (`ConsumerProtocolSubscription` v1, with owned partitions).
pub fn encode_subscription(topics: &[String], owned: &BTreeSet<TopicPartition>) -> Bytes {
    let mut subscription = ConsumerProtocolSubscription::default();
    subscription.topics = topics
        .iter()
        .map(|t| StrBytes::from_string(t.clone()))
        .collect();
    subscription.owned_partitions = group_by_topic(owned.iter().cloned())
        .into_iter()
        .map(|(topic, partitions)| {
            let mut tp = consumer_protocol_subscription::TopicPartition::default();
            tp.topic = TopicName(StrBytes::from_string(topic));
            tp.partitions = partitions;
            tp
        })
        .collect();
    encode_versioned(&subscription)
}

/// Decodes a subscription of any version (0–3).
pub fn decode_subscription(member_id: &str, bytes: &Bytes) -> Option<MemberSubscription> {
    let mut buf = bytes.clone();
    if buf.remaining() < 2 {
        return None;
    }
    let version = buf.get_i16().clamp(0, 3);
    let s = ConsumerProtocolSubscription::decode(&mut buf, version).ok()?;
    Some(MemberSubscription {
        member_id: member_id.to_string(),
        topics: s.topics.iter().map(|t| t.to_string()).collect(),
        owned: s
            .owned_partitions
            .into_iter()
            .flat_map(|tp| {
                let topic = tp.topic.to_string();
                tp.partitions.into_iter().map(move |p| (topic.clone(), p))
            })
            .collect(),
    })
}

/// Encodes an assignment (`ConsumerProtocolAssignment` v1).
pub fn encode_assignment(partitions: &[TopicPartition]) -> Bytes {
    let mut assignment = ConsumerProtocolAssignment::default();
    assignment.assigned_partitions = group_by_topic(partitions.iter().cloned())
        .into_iter()
        .map(|(topic, partitions)| {
            let mut tp = consumer_protocol_assignment::TopicPartition::default();
            tp.topic = TopicName(StrBytes::from_string(topic));
            tp.partitions = partitions;
            tp
        })
        .collect();
    encode_versioned(&assignment)
}

/// Decodes an assignment of any version (0–3); empty bytes are an empty assignment.
pub fn decode_assignment(bytes: &Bytes) -> Vec<TopicPartition> {
    let mut buf = bytes.clone();
    if buf.remaining() < 2 {
        return Vec::new();
    }
    let version = buf.get_i16().clamp(0, 3);
    ConsumerProtocolAssignment::decode(&mut buf, version)
        .map(|a| {
            a.assigned_partitions
                .into_iter()
                .flat_map(|tp| {
                    let topic = tp.topic.to_string();
                    tp.partitions.into_iter().map(move |p| (topic.clone(), p))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Partitions grouped by topic, each list in the order given.
pub(crate) fn group_by_topic(
    partitions: impl Iterator<Item = TopicPartition>,
) -> BTreeMap<String, Vec<i32>> {
    let mut grouped: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (topic, p) in partitions {
        grouped.entry(topic).or_default().push(p);
    }
    grouped
}

fn encode_versioned<M: Encodable>(message: &M) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(CONSUMER_PROTOCOL_VERSION);
    // Encoding an in-memory message of a supported version cannot fail.
    message
        .encode(&mut buf, CONSUMER_PROTOCOL_VERSION)
        .expect("consumer protocol message encodes at v1");
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, owned: &[(&str, i32)]) -> MemberSubscription {
        MemberSubscription {
            member_id: id.into(),
            topics: vec!["t".into()],
            owned: owned.iter().map(|(t, p)| (t.to_string(), *p)).collect(),
        }
    }

    fn topics(count: i32) -> BTreeMap<String, i32> {
        BTreeMap::from([("t".to_string(), count)])
    }

    fn partitions(assigned: &[TopicPartition]) -> Vec<i32> {
        assigned.iter().map(|(_, p)| *p).collect()
    }

    #[test]
    fn range_gives_contiguous_ranges_with_the_extra_to_the_first_members() {
        let members = [member("a", &[]), member("b", &[]), member("c", &[])];
        let result = Assignor::Range.assign(&members, &topics(7));
        assert_eq!(partitions(&result["a"]), [0, 1, 2]);
        assert_eq!(partitions(&result["b"]), [3, 4]);
        assert_eq!(partitions(&result["c"]), [5, 6]);
    }

    #[test]
    fn cooperative_sticky_keeps_owned_partitions_and_withholds_moving_ones() {
        let first =
            Assignor::CooperativeSticky.assign(&[member("a", &[]), member("b", &[])], &topics(6));
        assert_eq!((first["a"].len(), first["b"].len()), (3, 3));
        let a_owned: Vec<(&str, i32)> = first["a"].iter().map(|(t, p)| (t.as_str(), *p)).collect();
        let b_owned: Vec<(&str, i32)> = first["b"].iter().map(|(t, p)| (t.as_str(), *p)).collect();
        // c joins: a and b each give one up, and c gets nothing until they have revoked it.
        let joined = [
            member("a", &a_owned),
            member("b", &b_owned),
            member("c", &[]),
        ];
        let second = Assignor::CooperativeSticky.assign(&joined, &topics(6));
        assert_eq!(
            (second["a"].len(), second["b"].len(), second["c"].len()),
            (2, 2, 0)
        );
        assert!(
            second["a"].iter().all(|tp| first["a"].contains(tp)),
            "a keeps what it had"
        );
        let a_kept: Vec<(&str, i32)> = second["a"].iter().map(|(t, p)| (t.as_str(), *p)).collect();
        let b_kept: Vec<(&str, i32)> = second["b"].iter().map(|(t, p)| (t.as_str(), *p)).collect();
        let third = Assignor::CooperativeSticky.assign(
            &[member("a", &a_kept), member("b", &b_kept), member("c", &[])],
            &topics(6),
        );
        assert_eq!(
            (third["a"].len(), third["b"].len(), third["c"].len()),
            (2, 2, 2)
        );
        assert_eq!(third["a"], second["a"]);
        // b leaves: its partitions go to a and c at once (no one owned them).
        let a_now: Vec<(&str, i32)> = third["a"].iter().map(|(t, p)| (t.as_str(), *p)).collect();
        let c_now: Vec<(&str, i32)> = third["c"].iter().map(|(t, p)| (t.as_str(), *p)).collect();
        let fourth = Assignor::CooperativeSticky
            .assign(&[member("a", &a_now), member("c", &c_now)], &topics(6));
        assert_eq!((fourth["a"].len(), fourth["c"].len()), (3, 3));
        assert!(third["a"].iter().all(|tp| fourth["a"].contains(tp)));
    }

    #[test]
    fn subscriptions_and_assignments_round_trip() {
        let owned = BTreeSet::from([("t".to_string(), 1), ("u".to_string(), 0)]);
        let bytes = encode_subscription(&["t".into(), "u".into()], &owned);
        let decoded = decode_subscription("m", &bytes).expect("decodes");
        assert_eq!(decoded.topics, ["t", "u"]);
        assert_eq!(decoded.owned, [("t".to_string(), 1), ("u".to_string(), 0)]);
        let assignment = vec![("t".to_string(), 0), ("t".to_string(), 2)];
        assert_eq!(
            decode_assignment(&encode_assignment(&assignment)),
            assignment
        );
        assert!(decode_assignment(&Bytes::new()).is_empty());
    }
}
