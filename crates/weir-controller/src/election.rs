//! Who may lead a partition, decided over an image: a preferred or unclean election
//! (ElectLeaders, the auto leader rebalance), a leader kept or chosen among an ISR, and where
//! `unclean.leader.election.enable` comes from. Pure functions; liveness and reassignment
//! build on them, and the controller commits what they decide.

use weir_metadata::topic_config::parse_boolean;
use weir_metadata::{
    ElectionType, MetadataImage, PartitionChange, PartitionImage, PartitionRefusal,
    ReplicaAssignment, TopicImage, Uuid, NO_LEADER,
};

/// Name of the setting that lets an out-of-sync replica become leader.
pub(crate) const UNCLEAN_ELECTION: &str = "unclean.leader.election.enable";
/// Where `unclean.leader.election.enable` comes from when a topic does not set it, in the order
/// Kafka's controller reads the levels: the deciding controller node's own dynamic config, the
/// cluster-wide dynamic config, then the controller's static config; `false` below them all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UncleanDefaults {
    /// The deciding controller's node id, whose node-level dynamic config applies.
    pub node_id: Option<i32>,
    /// `unclean.leader.election.enable` as the controller's process was configured.
    pub configured: bool,
}

impl UncleanDefaults {
    /// Whether `topic` lets an out-of-sync replica lead: the first level that sets it.
    pub fn allow(&self, image: &MetadataImage, topic: &TopicImage) -> bool {
        let node = self.node_id.map(|id| image.broker_configs(Some(id)));
        [Some(&topic.configs), node, Some(image.broker_configs(None))]
            .into_iter()
            .flatten()
            .find_map(|level| level.get(UNCLEAN_ELECTION))
            .map_or(self.configured, |value| parse_boolean(value) == Some(true))
    }
}

/// A partition's change, none when it is already as asked, or why it is refused.
pub type Decision = Result<Option<PartitionChange>, PartitionRefusal>;

/// A change of partition `partition` of topic `topic_id`: its new leader and ISR, and its new
/// replicas when `assignment` is given.
pub(crate) fn partition_change(
    topic_id: Uuid,
    partition: i32,
    leader: i32,
    isr: Vec<i32>,
    assignment: Option<ReplicaAssignment>,
) -> PartitionChange {
    PartitionChange {
        topic_id,
        partition,
        leader,
        isr,
        assignment,
    }
}

/// `current` if it is among `isr`, else the first live member of `isr`, else no leader.
pub(crate) fn leader_among(image: &MetadataImage, current: i32, isr: &[i32]) -> i32 {
    if isr.contains(&current) {
        return current;
    }
    isr.iter()
        .copied()
        .find(|id| image.is_alive(*id))
        .unwrap_or(NO_LEADER)
}

/// Elects a leader for partition `index` as `election` says: the preferred replica when it is
/// live and in sync, or (unclean) any live replica of a partition without a leader.
pub fn elect(
    image: &MetadataImage,
    topic: &TopicImage,
    index: i32,
    p: &PartitionImage,
    election: ElectionType,
) -> Decision {
    let not_needed = || {
        PartitionRefusal::ElectionNotNeeded(
            "Leader election not needed for topic partition.".into(),
        )
    };
    let elected = |leader: i32, isr: Vec<i32>| {
        Ok(Some(partition_change(
            topic.topic_id,
            index,
            leader,
            isr,
            None,
        )))
    };
    match election {
        ElectionType::Preferred => {
            let preferred = p.replicas.first().copied().unwrap_or(NO_LEADER);
            if p.leader == preferred {
                return Err(not_needed());
            }
            if p.isr.contains(&preferred) && image.is_alive(preferred) {
                return elected(preferred, p.isr.clone());
            }
            Err(PartitionRefusal::PreferredLeaderNotAvailable(format!(
                "Failed to elect leader for partition {}-{index} under strategy PreferredReplicaPartitionLeaderElectionStrategy",
                topic.name
            )))
        }
        ElectionType::Unclean => {
            if p.leader != NO_LEADER {
                return Err(not_needed());
            }
            let alive = |id: &i32| image.is_alive(*id);
            if let Some(in_sync) = p
                .replicas
                .iter()
                .copied()
                .find(|id| p.isr.contains(id) && alive(id))
            {
                return elected(in_sync, p.isr.clone());
            }
            match p.replicas.iter().copied().find(alive) {
                Some(unclean) => elected(unclean, vec![unclean]),
                None => Err(PartitionRefusal::EligibleLeadersNotAvailable(format!(
                    "Failed to elect leader for partition {}-{index} under strategy UncleanLeaderElectionStrategy",
                    topic.name
                ))),
            }
        }
    }
}

/// The partitions to move their leader back to the preferred replica (auto leader
/// rebalance): led elsewhere while the preferred replica is live and in sync.
pub fn preferred_elections(image: &MetadataImage) -> Vec<(String, i32)> {
    image
        .topics()
        .flat_map(|topic| {
            (0i32..)
                .zip(&topic.partitions)
                .filter_map(move |(index, p)| {
                    let preferred = *p.replicas.first()?;
                    let due = p.leader != preferred
                        && p.isr.contains(&preferred)
                        && image.is_alive(preferred);
                    due.then(|| (topic.name.clone(), index))
                })
        })
        .collect()
}
