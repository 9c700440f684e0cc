//! Server-side assignors of the consumer group protocol (KIP-848): `uniform` (balanced and
//! sticky) and `range` (co-partitioned ranges per topic). The coordinator computes a group's
//! target assignment with one of them whenever the group epoch moves.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

/// Partitions by topic id.
pub type TopicPartitions = BTreeMap<Uuid, BTreeSet<i32>>;

/// The assignors a member may name in `ServerAssignor`; the first is the default
/// (`group.consumer.assignors` in Kafka).
pub const ASSIGNORS: &[&str] = &["uniform", "range"];

/// What an assignor sees of one member.
#[derive(Debug, Clone)]
pub struct MemberSpec<'a> {
    /// Member id.
    pub member_id: &'a str,
    /// Topic ids it subscribes to (only topics that exist).
    pub subscribed: BTreeSet<Uuid>,
    /// Its partitions in the previous target assignment, which a sticky assignor keeps.
    pub previous: Option<&'a TopicPartitions>,
}

/// Computes a target assignment with the assignor called `name` (one of [`ASSIGNORS`]):
/// every partition of a subscribed topic goes to exactly one member subscribed to it.
/// `members` must be sorted by member id; `topics` gives each topic's partition count.
pub fn assign(
    name: &str,
    members: &[MemberSpec<'_>],
    topics: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, TopicPartitions> {
    match name {
        "range" => range(members, topics),
        _ => uniform(members, topics),
    }
}

/// Per topic, its subscribers in member-id order each get a contiguous range, the first
/// `partitions % subscribers` one more: members with the same subscriptions get the same
/// partition numbers of every topic, for joins across co-partitioned topics.
fn range(
    members: &[MemberSpec<'_>],
    topics: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, TopicPartitions> {
    let mut result: BTreeMap<String, TopicPartitions> = members
        .iter()
        .map(|m| (m.member_id.to_string(), TopicPartitions::new()))
        .collect();
    for (&topic, &count) in topics {
        let subscribers: Vec<&MemberSpec<'_>> = members
            .iter()
            .filter(|m| m.subscribed.contains(&topic))
            .collect();
        if subscribers.is_empty() || count <= 0 {
            continue;
        }
        let n = subscribers.len() as i32;
        let (each, extra) = (count / n, count % n);
        let mut next = 0;
        for (i, member) in subscribers.iter().enumerate() {
            let take = each + i32::from((i as i32) < extra);
            if let Some(assignment) = result.get_mut(member.member_id).filter(|_| take > 0) {
                assignment
                    .entry(topic)
                    .or_default()
                    .extend(next..next + take);
            }
            next += take;
        }
    }
    result
}

/// Balanced and sticky: each member keeps what it had while that stays balanced, unowned
/// partitions go to the least loaded subscriber, then partitions move from the most to the
/// least loaded member until no two subscribers of a topic differ by more than one.
fn uniform(
    members: &[MemberSpec<'_>],
    topics: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, TopicPartitions> {
    let mut owned: Vec<BTreeSet<(Uuid, i32)>> = vec![BTreeSet::new(); members.len()];
    let mut owner: BTreeMap<(Uuid, i32), usize> = BTreeMap::new();
    let exists = |topic: &Uuid, p: i32| topics.get(topic).is_some_and(|&n| (0..n).contains(&p));
    // The share each member would have if everyone subscribed to everything it does: a
    // member keeps at most that many of its previous partitions.
    let total: u64 = members
        .iter()
        .map(|m| {
            m.subscribed
                .iter()
                .map(|t| u64::try_from(topics.get(t).copied().unwrap_or(0)).unwrap_or(0))
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0);
    let quota = usize::try_from(total.div_ceil(members.len().max(1) as u64)).unwrap_or(0);
    for (index, member) in members.iter().enumerate() {
        let Some(previous) = member.previous else {
            continue;
        };
        for (topic, partitions) in previous {
            if !member.subscribed.contains(topic) {
                continue;
            }
            for &p in partitions {
                if owned[index].len() < quota
                    && exists(topic, p)
                    && !owner.contains_key(&(*topic, p))
                {
                    owner.insert((*topic, p), index);
                    owned[index].insert((*topic, p));
                }
            }
        }
    }
    for (&topic, &count) in topics {
        for p in 0..count {
            if owner.contains_key(&(topic, p)) {
                continue;
            }
            let least = (0..members.len())
                .filter(|&i| members[i].subscribed.contains(&topic))
                .min_by_key(|&i| owned[i].len());
            if let Some(index) = least {
                owner.insert((topic, p), index);
                owned[index].insert((topic, p));
            }
        }
    }
    // Each move lowers the sum of squared loads, so this ends.
    loop {
        let mut moved = false;
        let mut order: Vec<usize> = (0..members.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(owned[i].len()));
        'from: for &from in &order {
            for &partition in owned[from].iter().rev() {
                let to = (0..members.len())
                    .filter(|&i| members[i].subscribed.contains(&partition.0))
                    .min_by_key(|&i| owned[i].len());
                if let Some(to) = to.filter(|&to| owned[to].len() + 1 < owned[from].len()) {
                    owned[from].remove(&partition);
                    owned[to].insert(partition);
                    moved = true;
                    break 'from;
                }
            }
        }
        if !moved {
            break;
        }
    }
    members
        .iter()
        .zip(owned)
        .map(|(member, partitions)| {
            let mut assignment = TopicPartitions::new();
            for (topic, p) in partitions {
                assignment.entry(topic).or_default().insert(p);
            }
            (member.member_id.to_string(), assignment)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn topic(n: u8) -> Uuid {
        Uuid::from_bytes([n; 16])
    }

    fn count(a: &TopicPartitions) -> usize {
        a.values().map(BTreeSet::len).sum()
    }

    #[test]
    fn range_gives_co_partitioned_ranges() {
        let topics = BTreeMap::from([(topic(1), 5), (topic(2), 5)]);
        let all = BTreeSet::from([topic(1), topic(2)]);
        let members = [
            MemberSpec {
                member_id: "a",
                subscribed: all.clone(),
                previous: None,
            },
            MemberSpec {
                member_id: "b",
                subscribed: all,
                previous: None,
            },
        ];
        let result = assign("range", &members, &topics);
        for t in [topic(1), topic(2)] {
            assert_eq!(result["a"][&t], BTreeSet::from([0, 1, 2]));
            assert_eq!(result["b"][&t], BTreeSet::from([3, 4]));
        }
    }

    #[test]
    fn uniform_moves_only_what_balance_needs() {
        let topics = BTreeMap::from([(topic(1), 6)]);
        let subscribed = BTreeSet::from([topic(1)]);
        let spec = |id, previous| MemberSpec {
            member_id: id,
            subscribed: subscribed.clone(),
            previous,
        };
        let two = assign("uniform", &[spec("a", None), spec("b", None)], &topics);
        assert_eq!((count(&two["a"]), count(&two["b"])), (3, 3));
        let three = assign(
            "uniform",
            &[
                spec("a", Some(&two["a"])),
                spec("b", Some(&two["b"])),
                spec("c", None),
            ],
            &topics,
        );
        for member in ["a", "b"] {
            assert_eq!(count(&three[member]), 2);
            assert!(three[member][&topic(1)].is_subset(&two[member][&topic(1)]));
        }
        assert_eq!(count(&three["c"]), 2);
    }

    proptest! {
        /// Every partition of a subscribed topic goes to exactly one subscriber; with equal
        /// subscriptions no two members differ by more than one partition; members that stay
        /// keep what balance allows them to keep.
        #[test]
        fn assignments_are_complete_exclusive_and_balanced(
            counts in proptest::collection::vec(0i32..20, 1..4),
            members in 1usize..6,
            heterogeneous in any::<bool>(),
            name in prop_oneof![Just("uniform"), Just("range")],
        ) {
            let topics: BTreeMap<Uuid, i32> =
                counts.iter().enumerate().map(|(i, &n)| (topic(i as u8), n)).collect();
            let ids: Vec<String> = (0..members).map(|i| format!("m{i}")).collect();
            let specs: Vec<MemberSpec<'_>> = ids
                .iter()
                .enumerate()
                .map(|(i, id)| MemberSpec {
                    member_id: id,
                    subscribed: topics
                        .keys()
                        .enumerate()
                        .filter(|(t, _)| !heterogeneous || (t + i) % 2 == 0)
                        .map(|(_, id)| *id)
                        .collect(),
                    previous: None,
                })
                .collect();
            let first = assign(name, &specs, &topics);
            for (&t, &n) in &topics {
                let subscribers: Vec<_> = specs.iter().filter(|m| m.subscribed.contains(&t)).collect();
                for p in 0..n {
                    let owners = first.values().filter(|a| a.get(&t).is_some_and(|s| s.contains(&p))).count();
                    prop_assert_eq!(owners, usize::from(!subscribers.is_empty()));
                }
                for m in &specs {
                    if !m.subscribed.contains(&t) {
                        prop_assert!(first[m.member_id].get(&t).is_none_or(BTreeSet::is_empty));
                    }
                }
            }
            if !heterogeneous && name == "uniform" {
                let loads: Vec<usize> = first.values().map(count).collect();
                prop_assert!(loads.iter().max().unwrap_or(&0) - loads.iter().min().unwrap_or(&0) <= 1);
                // One member leaves: the others keep everything they had.
                let rest: Vec<MemberSpec<'_>> = specs[..specs.len() - 1]
                    .iter()
                    .map(|m| MemberSpec { previous: first.get(m.member_id), ..m.clone() })
                    .collect();
                let second = assign(name, &rest, &topics);
                for m in &rest {
                    for (t, ps) in &first[m.member_id] {
                        prop_assert!(ps.is_subset(second[m.member_id].get(t).unwrap_or(&BTreeSet::new())));
                    }
                }
            }
        }
    }
}
