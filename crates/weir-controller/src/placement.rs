//! Where new partitions' replicas go: striped over the registered brokers so that leaders and
//! followers spread evenly, and over their racks so that each partition has copies in as many
//! racks as it can, as Kafka's rack-aware placement does.

use std::collections::BTreeMap;

use weir_metadata::{ControllerError, MetadataImage};

/// `brokers` (node id and rack) in rack-alternating order: the first broker of each rack in
/// turn, then the second of each, and so on (racks and brokers by name and id). A broker
/// without a rack counts as a rack of its own name `None`.
fn rack_alternated(brokers: &[(i32, Option<String>)]) -> Vec<(i32, Option<String>)> {
    let mut by_rack: BTreeMap<Option<String>, Vec<i32>> = BTreeMap::new();
    for (id, rack) in brokers {
        by_rack.entry(rack.clone()).or_default().push(*id);
    }
    for ids in by_rack.values_mut() {
        ids.sort_unstable();
    }
    let deepest = by_rack.values().map(Vec::len).max().unwrap_or(0);
    (0..deepest)
        .flat_map(|i| {
            by_rack
                .iter()
                .filter_map(move |(rack, ids)| ids.get(i).map(|id| (*id, rack.clone())))
        })
        .collect()
}

/// The replicas of `count` new partitions with `replication_factor` replicas each, over
/// `brokers` (node id and rack). `start` picks the first partition's leader; passing the
/// number of partitions the cluster already has spreads leaders across topics too.
///
/// The brokers are taken in rack-alternating order. Partition `p`'s leader is broker
/// `(start + p) % n` of that order; each follower is the next broker at a distance that grows
/// by one every `n` partitions whose rack holds no replica of the partition yet (any rack once
/// every rack holds one), so the same pair of brokers does not always share a partition, one
/// broker's loss spreads its followers' load over all the others, and a rack's loss leaves every
/// partition with replicas elsewhere. Without racks this is Kafka's rack-unaware placement.
pub fn place(
    brokers: &[(i32, Option<String>)],
    count: i32,
    replication_factor: i16,
    start: usize,
) -> Result<Vec<Vec<i32>>, ControllerError> {
    let arranged = rack_alternated(brokers);
    let n = arranged.len();
    let racks = {
        let mut racks: Vec<&Option<String>> = arranged.iter().map(|(_, r)| r).collect();
        racks.sort();
        racks.dedup();
        racks.len()
    };
    let factor = usize::try_from(replication_factor).unwrap_or(0);
    if factor > n {
        return Err(ControllerError::InvalidReplicationFactor(format!(
            "Unable to replicate the partition {replication_factor} time(s): The target replication factor of {replication_factor} cannot be reached because only {n} broker(s) are registered or some brokers have all their log directories cordoned."
        )));
    }
    let count = usize::try_from(count).unwrap_or(0);
    let mut shift = start;
    let placed = (0..count)
        .map(|p| {
            if p > 0 && p % n == 0 {
                shift += 1;
            }
            let first = (start + p) % n;
            let mut replicas = vec![arranged[first].0];
            let mut racks_used = vec![&arranged[first].1];
            let mut k = 0;
            while replicas.len() < factor {
                let distance = 1 + (shift * racks + k) % (n - 1);
                let (id, rack) = &arranged[(first + distance) % n];
                k += 1;
                let rack_free = !racks_used.contains(&rack) || racks_used.len() == racks;
                if rack_free && !replicas.contains(id) {
                    replicas.push(*id);
                    if !racks_used.contains(&rack) {
                        racks_used.push(rack);
                    }
                }
            }
            replicas
        })
        .collect();
    Ok(placed)
}

/// One partition's manual replica list, checked as Kafka checks it: not empty, no broker
/// twice, only registered brokers.
pub(crate) fn check_replica_list(
    image: &MetadataImage,
    replicas: &[i32],
) -> Result<(), ControllerError> {
    let refuse = |why: String| Err(ControllerError::InvalidReplicaAssignment(why));
    if replicas.is_empty() {
        return refuse("The manual partition assignment includes an empty replica list.".into());
    }
    // One pass: a hostile list of millions of ids must not cost a quadratic scan.
    let mut seen = std::collections::HashSet::with_capacity(replicas.len());
    if let Some(node_id) = replicas.iter().find(|id| !seen.insert(**id)) {
        return refuse(format!(
            "The manual partition assignment includes the broker {node_id} more than once."
        ));
    }
    if let Some(unknown) = replicas.iter().find(|b| image.broker(**b).is_none()) {
        return refuse(format!(
            "The manual partition assignment includes broker {unknown}, but no such broker is registered."
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    fn no_racks(ids: &[i32]) -> Vec<(i32, Option<String>)> {
        ids.iter().map(|id| (*id, None)).collect()
    }

    #[test]
    fn replicas_are_distinct_and_leaders_spread_evenly() {
        let brokers = no_racks(&[1, 2, 3, 4]);
        for factor in 1..=4i16 {
            for start in 0..5 {
                let placed = place(&brokers, 12, factor, start).expect("placed");
                assert_eq!(placed.len(), 12);
                let mut leaders: BTreeMap<i32, usize> = BTreeMap::new();
                let mut hosted: BTreeMap<i32, usize> = BTreeMap::new();
                for replicas in &placed {
                    let distinct: BTreeSet<i32> = replicas.iter().copied().collect();
                    assert_eq!(distinct.len(), factor as usize, "{replicas:?}");
                    *leaders.entry(replicas[0]).or_default() += 1;
                    for node in replicas {
                        *hosted.entry(*node).or_default() += 1;
                    }
                }
                assert!(leaders.values().all(|&c| c == 3), "{leaders:?}");
                assert!(
                    hosted.values().all(|&c| c == 3 * factor as usize),
                    "{hosted:?}"
                );
            }
        }
    }

    #[test]
    fn followers_of_one_broker_spread_over_the_others() {
        let placed = place(&no_racks(&[1, 2, 3, 4]), 12, 2, 0).expect("placed");
        let followers_of_1: BTreeSet<i32> =
            placed.iter().filter(|r| r[0] == 1).map(|r| r[1]).collect();
        assert_eq!(followers_of_1, BTreeSet::from([2, 3, 4]));
    }

    #[test]
    fn every_partition_has_replicas_in_as_many_racks_as_it_can() {
        // Three racks of two brokers, and an uneven one: a, a, b, c.
        let racked = |spec: &[(i32, &str)]| -> Vec<(i32, Option<String>)> {
            spec.iter()
                .map(|(id, r)| (*id, Some(r.to_string())))
                .collect()
        };
        let even = racked(&[(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")]);
        let uneven = racked(&[(1, "a"), (2, "a"), (3, "b"), (4, "c")]);
        for (brokers, factor) in [(&even, 3i16), (&even, 2), (&uneven, 3), (&uneven, 2)] {
            let rack_of: BTreeMap<i32, &Option<String>> =
                brokers.iter().map(|(id, r)| (*id, r)).collect();
            for start in 0..7 {
                let placed = place(brokers, 24, factor, start).expect("placed");
                let mut leaders: BTreeMap<i32, usize> = BTreeMap::new();
                for replicas in &placed {
                    let racks: BTreeSet<_> = replicas.iter().map(|id| rack_of[id]).collect();
                    let distinct: BTreeSet<i32> = replicas.iter().copied().collect();
                    assert_eq!(distinct.len(), factor as usize, "{replicas:?}");
                    assert_eq!(
                        racks.len(),
                        factor as usize,
                        "one copy per rack: {replicas:?}"
                    );
                    *leaders.entry(replicas[0]).or_default() += 1;
                }
                let (low, high) = (leaders.values().min(), leaders.values().max());
                assert!(
                    high.zip(low).is_some_and(|(h, l)| h - l <= 1),
                    "{leaders:?}"
                );
            }
        }
    }

    #[test]
    fn too_few_brokers_is_refused_in_kafkas_words() {
        let refused = place(&no_racks(&[1]), 3, 3, 0).expect_err("refused");
        assert!(refused
            .to_string()
            .contains("only 1 broker(s) are registered"));
        assert!(place(&[], 1, 1, 0).is_err());
        assert_eq!(
            place(&no_racks(&[7]), 2, 1, 5).expect("placed"),
            vec![vec![7], vec![7]]
        );
    }
}
