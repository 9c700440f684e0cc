//! Moving replicas and leaders on request: reassignments (AlterPartitionReassignments), which
//! add the target replicas, wait until they are all in sync and only then drop the others, and
//! leader elections (ElectLeaders, preferred or unclean, decided by `crate::election`). The
//! decisions are pure functions of the image; the controller commits them as
//! `ChangePartitions`.

use weir_metadata::{
    ControllerError, ElectionType, MetadataCommand, MetadataImage, PartitionChange, PartitionImage,
    PartitionOutcome, PartitionRefusal, Reassignment, ReplicaAssignment, TopicImage, Uuid,
};

use crate::election::{elect, leader_among, partition_change, Decision, UncleanDefaults};
use crate::Controller;

impl Controller {
    /// Starts, replaces or cancels reassignments, each checked against the image holding the
    /// ones before it; the accepted ones are committed in one command.
    pub async fn alter_partition_reassignments(
        &self,
        reassignments: Vec<Reassignment>,
        allow_replication_factor_change: bool,
    ) -> Result<Vec<PartitionOutcome>, ControllerError> {
        let _turn = self.deciding.lock().await;
        let unclean = self.unclean_defaults();
        self.decide_partitions(reassignments.into_iter().map(|r| {
            let key = (r.topic, r.partition);
            let decide = move |image: &MetadataImage, topic: &TopicImage, p: &PartitionImage| {
                match &r.target {
                    Some(target) => reassign(
                        image,
                        topic,
                        r.partition,
                        p,
                        target,
                        allow_replication_factor_change,
                    ),
                    None => cancel(image, topic, r.partition, p, unclean),
                }
            };
            (key, decide)
        }))
        .await
    }

    /// Elects leaders for `partitions`, or for every partition (`None`, whose outcomes leave
    /// out the partitions that needed no election, as Kafka's do).
    pub async fn elect_leaders(
        &self,
        election: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<Vec<PartitionOutcome>, ControllerError> {
        let _turn = self.deciding.lock().await;
        let every = partitions.is_none();
        let partitions = partitions.unwrap_or_else(|| {
            self.image()
                .topics()
                .flat_map(|t| (0..t.partition_count()).map(|i| (t.name.clone(), i)))
                .collect()
        });
        let outcomes = self
            .decide_partitions(partitions.into_iter().map(|key| {
                let index = key.1;
                let decide =
                    move |image: &MetadataImage, topic: &TopicImage, p: &PartitionImage| {
                        elect(image, topic, index, p, election)
                    };
                (key, decide)
            }))
            .await?;
        Ok(outcomes
            .into_iter()
            .filter(|o| {
                !(every && matches!(o.refusal, Some(PartitionRefusal::ElectionNotNeeded(_))))
            })
            .collect())
    }

    /// Decides each partition's change in turn against an image holding the changes decided
    /// before it, then commits them all in one command. Call with the decision lock held.
    async fn decide_partitions<F>(
        &self,
        requests: impl Iterator<Item = ((String, i32), F)>,
    ) -> Result<Vec<PartitionOutcome>, ControllerError>
    where
        F: FnOnce(&MetadataImage, &TopicImage, &PartitionImage) -> Decision,
    {
        let mut preview = MetadataImage::clone(&self.image());
        let mut changes = Vec::new();
        let mut outcomes = Vec::new();
        for ((topic, partition), decide) in requests {
            let decision = match preview
                .topic(&topic)
                .and_then(|t| Some((t, t.partition(partition)?)))
            {
                Some((t, p)) => decide(&preview, t, p),
                None => Err(PartitionRefusal::UnknownTopicOrPartition(
                    "This server does not host this topic-partition.".into(),
                )),
            };
            let refusal = match decision {
                Ok(Some(change)) => {
                    preview.apply(&MetadataCommand::ChangePartitions {
                        changes: vec![change.clone()],
                    });
                    changes.push(change);
                    None
                }
                Ok(None) => None,
                Err(refusal) => Some(refusal),
            };
            outcomes.push(PartitionOutcome {
                topic,
                partition,
                refusal,
            });
        }
        if !changes.is_empty() {
            tracing::info!(target: "weir::controller", partitions = changes.len(), "moving replicas or leaders on request");
            self.commit(MetadataCommand::ChangePartitions { changes })
                .await?;
        }
        Ok(outcomes)
    }
}

/// `ids` in the order of `order`, keeping only those in it.
fn ordered(ids: &[i32], order: &[i32]) -> Vec<i32> {
    order
        .iter()
        .copied()
        .filter(|id| ids.contains(id))
        .collect()
}

/// Starts moving partition `index` to `target` (or replaces the move in progress): the
/// replicas become the target followed by those to remove, which stay until every target
/// replica is in sync. A target already in sync completes at once.
pub fn reassign(
    image: &MetadataImage,
    topic: &TopicImage,
    index: i32,
    p: &PartitionImage,
    target: &[i32],
    allow_replication_factor_change: bool,
) -> Decision {
    crate::placement::check_replica_list(image, target)
        .map_err(|e| PartitionRefusal::InvalidReplicaAssignment(e.to_string()))?;
    let original = p.original_replicas();
    if !allow_replication_factor_change && target.len() != original.len() {
        return Err(PartitionRefusal::InvalidReplicationFactor(format!(
            "The replication factor is changed from {} to {} but allowReplicationFactorChange is false",
            original.len(),
            target.len()
        )));
    }
    if target == p.replicas.as_slice() && !p.reassigning() {
        return Ok(None);
    }
    let removing: Vec<i32> = p
        .replicas
        .iter()
        .copied()
        .filter(|id| !target.contains(id))
        .collect();
    let adding: Vec<i32> = target
        .iter()
        .copied()
        .filter(|id| !p.replicas.contains(id))
        .collect();
    let replicas: Vec<i32> = target.iter().chain(&removing).copied().collect();
    let moving = PartitionImage {
        replicas: replicas.clone(),
        adding: adding.clone(),
        removing: removing.clone(),
        ..p.clone()
    };
    let change = completed(
        image,
        topic.topic_id,
        index,
        &moving,
        p.leader,
        p.isr.clone(),
    );
    Ok(Some(change.unwrap_or_else(|| {
        let assignment = ReplicaAssignment {
            replicas,
            adding,
            removing,
        };
        partition_change(
            topic.topic_id,
            index,
            p.leader,
            p.isr.clone(),
            Some(assignment),
        )
    })))
}

/// Cancels the reassignment moving partition `index`: back to the replicas it had, keeping
/// the in-sync ones among them. Refused when none of them is in sync (that would take an
/// unclean election) unless the topic allows unclean elections.
pub fn cancel(
    image: &MetadataImage,
    topic: &TopicImage,
    index: i32,
    p: &PartitionImage,
    unclean: UncleanDefaults,
) -> Decision {
    if !p.reassigning() {
        return Err(PartitionRefusal::NoReassignmentInProgress(format!(
            "No ongoing reassignment for partition {}-{index}.",
            topic.name
        )));
    }
    let original = p.original_replicas();
    let mut isr = ordered(&p.isr, &original);
    if isr.is_empty() {
        match original.iter().copied().find(|id| image.is_alive(*id)) {
            Some(id) if unclean.allow(image, topic) => isr = vec![id],
            _ => {
                return Err(PartitionRefusal::InvalidReplicaAssignment(format!(
                    "Unable to revert partition assignment for {}:{index} because it would require an unclean leader election.",
                    topic.name
                )))
            }
        }
    }
    let leader = leader_among(image, p.leader, &isr);
    let assignment = ReplicaAssignment {
        replicas: original,
        adding: Vec::new(),
        removing: Vec::new(),
    };
    Ok(Some(partition_change(
        topic.topic_id,
        index,
        leader,
        isr,
        Some(assignment),
    )))
}

/// The change that completes the reassignment of partition `index` of topic `topic_id` (`p`)
/// once its ISR would be `isr` under `leader`: when every target replica is in sync, the
/// replicas become the target, the removed ones leave the ISR, and a removed leader hands over
/// to the first live in-sync target replica. `None` while the move must wait (or none is in
/// progress).
pub fn completed(
    image: &MetadataImage,
    topic_id: Uuid,
    index: i32,
    p: &PartitionImage,
    leader: i32,
    isr: Vec<i32>,
) -> Option<PartitionChange> {
    if !p.reassigning() {
        return None;
    }
    let target = p.target_replicas();
    if !target.iter().all(|id| isr.contains(id)) {
        return None;
    }
    let isr = ordered(&isr, &target);
    let leader = leader_among(image, leader, &isr);
    let assignment = ReplicaAssignment {
        replicas: target,
        adding: Vec::new(),
        removing: Vec::new(),
    };
    Some(partition_change(
        topic_id,
        index,
        leader,
        isr,
        Some(assignment),
    ))
}

#[cfg(test)]
mod tests {
    use weir_metadata::NO_LEADER;

    use super::*;
    use crate::election::preferred_elections;

    fn image(brokers: &[i32], replicas: Vec<i32>) -> MetadataImage {
        crate::liveness::tests::image(brokers, vec![replicas])
    }

    fn apply(image: &mut MetadataImage, decision: Decision) {
        let change = decision.expect("accepted").expect("a change");
        image.apply(&MetadataCommand::ChangePartitions {
            changes: vec![change],
        });
    }

    fn partition(image: &MetadataImage) -> PartitionImage {
        image.topic("t").expect("topic").partitions[0].clone()
    }

    fn decide(
        image: &MetadataImage,
        f: impl Fn(&TopicImage, &PartitionImage) -> Decision,
    ) -> Decision {
        let topic = image.topic("t").expect("topic");
        f(topic, &topic.partitions[0])
    }

    #[test]
    fn a_move_adds_first_and_removes_only_once_the_target_is_in_sync() {
        let mut image = image(&[1, 2, 3, 4], vec![1, 2, 3]);
        let decision = decide(&image, |t, p| reassign(&image, t, 0, p, &[2, 3, 4], false));
        apply(&mut image, decision);
        let moving = partition(&image);
        assert_eq!(moving.replicas, vec![2, 3, 4, 1]);
        assert_eq!(
            (moving.adding.clone(), moving.removing.clone()),
            (vec![4], vec![1])
        );
        assert_eq!(
            (moving.leader, moving.isr.clone()),
            (1, vec![1, 2, 3]),
            "leader kept while copying"
        );
        // Broker 4 caught up: the leader asks for it in the ISR, which completes the move.
        let done = completed(&image, Uuid::from_u128(7), 0, &moving, 1, vec![1, 2, 3, 4])
            .expect("completes");
        assert_eq!(
            done.assignment.as_ref().map(|a| a.replicas.clone()),
            Some(vec![2, 3, 4])
        );
        assert_eq!(
            (done.leader, done.isr.clone()),
            (2, vec![2, 3, 4]),
            "the removed leader hands over"
        );
        assert_eq!(
            completed(&image, Uuid::from_u128(7), 0, &moving, 1, vec![1, 2, 3]),
            None,
            "4 not in sync yet"
        );
    }

    #[test]
    fn a_target_already_in_sync_completes_at_once_and_the_same_target_changes_nothing() {
        let mut image = image(&[1, 2, 3], vec![1, 2, 3]);
        assert_eq!(
            decide(&image, |t, p| reassign(&image, t, 0, p, &[1, 2, 3], false)),
            Ok(None)
        );
        let decision = decide(&image, |t, p| reassign(&image, t, 0, p, &[3, 1, 2], false));
        apply(&mut image, decision);
        let p = partition(&image);
        assert_eq!(
            (p.replicas.clone(), p.reassigning()),
            (vec![3, 1, 2], false)
        );
        assert_eq!(p.leader, 1, "the leader stays until a preferred election");
    }

    #[test]
    fn refusals_name_the_reason() {
        let image = image(&[1, 2, 3], vec![1, 2]);
        let refused = |target: &[i32], allow: bool| {
            decide(&image, |t, p| reassign(&image, t, 0, p, target, allow)).expect_err("refused")
        };
        assert!(matches!(
            refused(&[], false),
            PartitionRefusal::InvalidReplicaAssignment(_)
        ));
        assert!(matches!(
            refused(&[1, 1], false),
            PartitionRefusal::InvalidReplicaAssignment(_)
        ));
        assert!(matches!(
            refused(&[1, 9], false),
            PartitionRefusal::InvalidReplicaAssignment(_)
        ));
        assert!(matches!(
            refused(&[1, 2, 3], false),
            PartitionRefusal::InvalidReplicationFactor(_)
        ));
        assert!(decide(&image, |t, p| reassign(&image, t, 0, p, &[1, 2, 3], true)).is_ok());
        assert!(matches!(
            decide(&image, |t, p| cancel(
                &image,
                t,
                0,
                p,
                UncleanDefaults::default()
            )),
            Err(PartitionRefusal::NoReassignmentInProgress(_))
        ));
    }

    #[test]
    fn cancelling_goes_back_to_the_original_replicas() {
        let mut image = image(&[1, 2, 3, 4], vec![1, 2]);
        let decision = decide(&image, |t, p| reassign(&image, t, 0, p, &[3, 4], false));
        apply(&mut image, decision);
        assert_eq!(partition(&image).replicas, vec![3, 4, 1, 2]);
        let decision = decide(&image, |t, p| {
            cancel(&image, t, 0, p, UncleanDefaults::default())
        });
        apply(&mut image, decision);
        let p = partition(&image);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone(), p.leader),
            (vec![1, 2], vec![1, 2], 1)
        );
        assert!(!p.reassigning());
    }

    #[test]
    fn preferred_and_unclean_elections() {
        let mut image = image(&[1, 2, 3], vec![1, 2, 3]);
        let preferred = |image: &MetadataImage| {
            decide(image, |t, p| elect(image, t, 0, p, ElectionType::Preferred))
        };
        assert!(matches!(
            preferred(&image),
            Err(PartitionRefusal::ElectionNotNeeded(_))
        ));
        // 1 is fenced: 2 leads; 1 returns and catches up; the preferred election moves it back.
        let changes = crate::fencing::fence(&image, 1, UncleanDefaults::default());
        image.apply(&MetadataCommand::FenceBroker {
            node_id: 1,
            changes,
        });
        assert_eq!(partition(&image).leader, 2);
        assert!(matches!(
            preferred(&image),
            Err(PartitionRefusal::PreferredLeaderNotAvailable(_))
        ));
        assert_eq!(preferred_elections(&image), Vec::<(String, i32)>::new());
        image.apply(&MetadataCommand::UnfenceBroker {
            node_id: 1,
            changes: vec![],
        });
        let p = partition(&image);
        image.apply(&MetadataCommand::ChangePartitions {
            changes: vec![partition_change(
                Uuid::from_u128(7),
                0,
                p.leader,
                vec![1, 2, 3],
                None,
            )],
        });
        assert_eq!(preferred_elections(&image), vec![("t".to_string(), 0)]);
        let decision = preferred(&image);
        apply(&mut image, decision);
        assert_eq!(partition(&image).leader, 1);
        // Unclean: only for a partition without a leader.
        let unclean = |image: &MetadataImage| {
            decide(image, |t, p| elect(image, t, 0, p, ElectionType::Unclean))
        };
        assert!(matches!(
            unclean(&image),
            Err(PartitionRefusal::ElectionNotNeeded(_))
        ));
        for id in [1, 2] {
            let changes = crate::fencing::fence(&image, id, UncleanDefaults::default());
            image.apply(&MetadataCommand::FenceBroker {
                node_id: id,
                changes,
            });
        }
        let changes = crate::fencing::fence(&image, 3, UncleanDefaults::default());
        image.apply(&MetadataCommand::FenceBroker {
            node_id: 3,
            changes,
        });
        assert_eq!(partition(&image).leader, NO_LEADER);
        assert!(matches!(
            unclean(&image),
            Err(PartitionRefusal::EligibleLeadersNotAvailable(_))
        ));
        image.apply(&MetadataCommand::UnfenceBroker {
            node_id: 1,
            changes: vec![],
        });
        let decision = unclean(&image);
        apply(&mut image, decision);
        let p = partition(&image);
        assert_eq!(
            (p.leader, p.isr),
            (1, vec![1]),
            "an out-of-sync replica leads alone"
        );
    }
}
