//! Where new partitions' replicas go: striped over the registered brokers so that leaders and
//! followers spread evenly, as Kafka's rack-unaware placement does.

use weir_metadata::ControllerError;

/// The replicas of `count` new partitions with `replication_factor` replicas each, over
/// `brokers` (node ids, ascending). `start` picks the first partition's leader; passing the
/// number of partitions the cluster already has spreads leaders across topics too.
///
/// Partition `p`'s leader is broker `(start + p) % n`; its followers follow at a distance that
/// grows by one every `n` partitions, so the same pair of brokers does not always share a
/// partition and one broker's loss spreads its followers' load over all the others.
pub fn place(
    brokers: &[i32],
    count: i32,
    replication_factor: i16,
    start: usize,
) -> Result<Vec<Vec<i32>>, ControllerError> {
    let n = brokers.len();
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
            let mut replicas = vec![brokers[first]];
            for j in 0..factor.saturating_sub(1) {
                let distance = 1 + (shift + j) % (n - 1);
                replicas.push(brokers[(first + distance) % n]);
            }
            replicas
        })
        .collect();
    Ok(placed)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    #[test]
    fn replicas_are_distinct_and_leaders_spread_evenly() {
        let brokers = [1, 2, 3, 4];
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
        let placed = place(&[1, 2, 3, 4], 12, 2, 0).expect("placed");
        let followers_of_1: BTreeSet<i32> =
            placed.iter().filter(|r| r[0] == 1).map(|r| r[1]).collect();
        assert_eq!(followers_of_1, BTreeSet::from([2, 3, 4]));
    }

    #[test]
    fn too_few_brokers_is_refused_in_kafkas_words() {
        let refused = place(&[1], 3, 3, 0).expect_err("refused");
        assert!(refused
            .to_string()
            .contains("only 1 broker(s) are registered"));
        assert!(place(&[], 1, 1, 0).is_err());
        assert_eq!(
            place(&[7], 2, 1, 5).expect("placed"),
            vec![vec![7], vec![7]]
        );
    }
}
