//! Broker liveness as the controller runs it: registrations, heartbeats that renew leases
//! ([`crate::leases`]), the fencing of brokers whose lease ran out and the return of fenced
//! ones (what they change is decided in [`crate::fencing`]), and the ISR changes leaders ask
//! for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_metadata::{
    AlterPartition, ControllerError, ElectionType, MetadataCommand, MetadataImage, PartitionChange,
    PartitionImage,
};

use crate::election::{partition_change, preferred_elections, UncleanDefaults};
use crate::fencing::{fence, unfence};
use crate::leases::Leases;
use crate::reassignment::completed;
use crate::Controller;

/// How often the active controller looks for expired leases.
const LEASE_CHECK_MS: u64 = 250;

impl Controller {
    /// Where `unclean.leader.election.enable` comes from below a topic's own setting.
    pub(crate) fn unclean_defaults(&self) -> UncleanDefaults {
        self.settings.unclean
    }

    /// Moves every partition whose preferred replica is live and in sync but does not lead
    /// back to it, when the rebalance interval has passed since `last`.
    async fn rebalance_leaders(&self, image: &MetadataImage, last: &mut Instant) {
        let Some(every) = self.settings.leader_rebalance else {
            return;
        };
        if last.elapsed() < every {
            return;
        }
        *last = Instant::now();
        let due = preferred_elections(image);
        if due.is_empty() {
            return;
        }
        match self.elect_leaders(ElectionType::Preferred, Some(due)).await {
            Ok(outcomes) => {
                let moved = outcomes.iter().filter(|o| o.refusal.is_none()).count();
                tracing::info!(target: "weir::controller", moved, "leaders moved back to their preferred replicas");
            }
            Err(error) => {
                tracing::warn!(target: "weir::controller", %error, "could not move leaders back to their preferred replicas")
            }
        }
    }

    fn lease_timeout(&self) -> Duration {
        self.settings.session_timeout
    }

    fn leases(&self) -> std::sync::MutexGuard<'_, Leases> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// NOT_CONTROLLER unless this controller leads the quorum: leases live on the leader only.
    fn check_leading(&self) -> Result<(), ControllerError> {
        let leading = self.quorum.status().is_ok();
        self.leases().set_leading(leading, Instant::now());
        match leading {
            true => Ok(()),
            false => Err(ControllerError::NotController(
                "this controller does not lead the metadata quorum".into(),
            )),
        }
    }

    /// The registration `node_id` speaks for must be its current one.
    fn check_broker_epoch(
        image: &MetadataImage,
        node_id: i32,
        broker_epoch: u64,
    ) -> Result<(), ControllerError> {
        match image.broker(node_id) {
            Some(b) if b.epoch == broker_epoch => Ok(()),
            Some(b) => Err(ControllerError::StaleBrokerEpoch(format!(
                "broker {node_id} is registered at epoch {}, not {broker_epoch}",
                b.epoch
            ))),
            None => Err(ControllerError::StaleBrokerEpoch(format!(
                "broker {node_id} is not registered"
            ))),
        }
    }

    /// Renews a broker's lease; a fenced broker heartbeating is unfenced (and leads again what
    /// waited for it). Answered with whether it is fenced now.
    pub async fn heartbeat(
        &self,
        node_id: i32,
        broker_epoch: u64,
    ) -> Result<bool, ControllerError> {
        self.check_leading()?;
        let image = self.image();
        Self::check_broker_epoch(&image, node_id, broker_epoch)?;
        self.leases().renew(node_id, Instant::now());
        if !image.broker(node_id).is_some_and(|b| b.fenced) {
            return Ok(false);
        }
        let _turn = self.deciding.lock().await;
        let image = self.image();
        Self::check_broker_epoch(&image, node_id, broker_epoch)?;
        if image.broker(node_id).is_some_and(|b| b.fenced) {
            let changes = unfence(&image, node_id, self.unclean_defaults());
            tracing::info!(target: "weir::controller", node_id, elected = changes.len(), "broker unfenced");
            self.commit(MetadataCommand::UnfenceBroker { node_id, changes })
                .await?;
        }
        Ok(false)
    }

    /// Fences `node_id` (lease expired, or shutting down): it leaves every ISR and its
    /// leaderships move. Call with the decision lock held.
    async fn fence_broker(&self, node_id: i32, why: &str) -> Result<(), ControllerError> {
        let image = self.image();
        if image.broker(node_id).is_none_or(|b| b.fenced) {
            return Ok(());
        }
        let changes = fence(&image, node_id, self.unclean_defaults());
        let partitions = changes.len();
        self.commit(MetadataCommand::FenceBroker { node_id, changes })
            .await?;
        tracing::warn!(target: "weir::controller", node_id, partitions, why, "broker fenced");
        Ok(())
    }

    /// A broker stopping cleanly: its leaderships move to in-sync replicas and it leaves every
    /// ISR before it goes, so no client waits out a lease.
    pub async fn controlled_shutdown(
        &self,
        node_id: i32,
        broker_epoch: u64,
    ) -> Result<(), ControllerError> {
        self.check_leading()?;
        let _turn = self.deciding.lock().await;
        Self::check_broker_epoch(&self.image(), node_id, broker_epoch)?;
        self.fence_broker(node_id, "controlled shutdown").await?;
        self.leases().forget(node_id);
        Ok(())
    }

    /// Changes a partition's ISR as its leader asks (Kafka's AlterPartition), as
    /// [`isr_change`] decides, and answers with the partition as it is then.
    pub async fn alter_partition(
        &self,
        request: AlterPartition,
    ) -> Result<PartitionImage, ControllerError> {
        self.check_leading()?;
        let _turn = self.deciding.lock().await;
        if let Some(change) = isr_change(&self.image(), &request)? {
            self.commit(MetadataCommand::ChangePartitions {
                changes: vec![change],
            })
            .await?;
        }
        let image = self.image();
        image
            .topic_by_id(request.topic_id)
            .and_then(|t| t.partition(request.partition))
            .cloned()
            .ok_or_else(|| ControllerError::UnknownTopic(request.topic_id.to_string()))
    }

    /// Fences every broker whose lease runs out, for as long as the controller lives: runs on
    /// every controller and acts only while it leads the quorum.
    pub fn watch_leases(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let controller = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(LEASE_CHECK_MS));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last_rebalance = Instant::now();
            loop {
                tick.tick().await;
                let Some(controller) = controller.upgrade() else {
                    return;
                };
                if controller.check_leading().is_err() {
                    last_rebalance = Instant::now();
                    continue;
                }
                let image = controller.image();
                let expired =
                    controller
                        .leases()
                        .expired(&image, controller.lease_timeout(), Instant::now());
                for node_id in expired {
                    let _turn = controller.deciding.lock().await;
                    if let Err(error) = controller.fence_broker(node_id, "lease expired").await {
                        tracing::warn!(target: "weir::controller", node_id, %error, "could not fence a broker whose lease expired; trying again");
                    }
                }
                controller
                    .rebalance_leaders(&controller.image(), &mut last_rebalance)
                    .await;
            }
        })
    }
}

/// What a leader's AlterPartition asks of `image`: the change to commit, `None` when the ISR
/// asked for is the one the partition has. Refused when the broker epoch is stale, when the
/// leader or the partition moved on since the state the leader saw, or when a replica it adds
/// may not be in sync (not a replica, or fenced). The last replica of a reassignment to come
/// in sync completes it.
pub fn isr_change(
    image: &MetadataImage,
    request: &AlterPartition,
) -> Result<Option<PartitionChange>, ControllerError> {
    Controller::check_broker_epoch(image, request.leader, request.broker_epoch)?;
    let topic = image
        .topic_by_id(request.topic_id)
        .ok_or_else(|| ControllerError::UnknownTopic(request.topic_id.to_string()))?;
    let partition = topic.partition(request.partition).ok_or_else(|| {
        ControllerError::UnknownTopic(format!("{}-{}", topic.name, request.partition))
    })?;
    if partition.leader != request.leader || partition.leader_epoch != request.leader_epoch {
        return Err(ControllerError::FencedLeaderEpoch(format!(
            "{}-{} is led by {} at epoch {}",
            topic.name, request.partition, partition.leader, partition.leader_epoch
        )));
    }
    if partition.partition_epoch != request.partition_epoch {
        return Err(ControllerError::InvalidUpdateVersion(format!(
            "{}-{} is at partition epoch {}, not {}",
            topic.name, request.partition, partition.partition_epoch, request.partition_epoch
        )));
    }
    let eligible = |id: &i32| {
        partition.replicas.contains(id) && (partition.isr.contains(id) || image.is_alive(*id))
    };
    if !request.isr.contains(&request.leader) || !request.isr.iter().all(eligible) {
        return Err(ControllerError::IneligibleReplica(format!(
            "ISR {:?} of {}-{} must hold its leader and only live replicas of {:?}",
            request.isr, topic.name, request.partition, partition.replicas
        )));
    }
    let mut isr = request.isr.clone();
    isr.sort_by_key(|id| partition.replicas.iter().position(|r| r == id));
    isr.dedup();
    if isr == partition.isr {
        return Ok(None);
    }
    let change = completed(
        image,
        request.topic_id,
        request.partition,
        partition,
        request.leader,
        isr.clone(),
    )
    .unwrap_or_else(|| {
        partition_change(
            request.topic_id,
            request.partition,
            request.leader,
            isr,
            None,
        )
    });
    Ok(Some(change))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use weir_metadata::{BrokerListener, MetadataCommand, Uuid, NO_LEADER};

    use super::*;
    use crate::election::UNCLEAN_ELECTION;

    /// Brokers `brokers` registered and topic `t` (id 7) with one partition per replica list.
    pub(crate) fn image(brokers: &[i32], replicas: Vec<Vec<i32>>) -> MetadataImage {
        let mut image = MetadataImage::default();
        for id in brokers {
            image.apply(&MetadataCommand::RegisterBroker {
                node_id: *id,
                incarnation_id: Uuid::new_v4(),
                listeners: vec![BrokerListener {
                    name: "PLAINTEXT".into(),
                    host: "localhost".into(),
                    port: 9092,
                }],
                rack: None,
            });
        }
        image.apply(&MetadataCommand::CreateTopic {
            name: "t".into(),
            topic_id: Uuid::from_u128(7),
            partitions: replicas.len() as i32,
            replication_factor: replicas[0].len() as i16,
            configs: BTreeMap::new(),
            assignments: replicas,
        });
        image
    }

    fn fenced(mut image: MetadataImage, node_id: i32) -> MetadataImage {
        let changes = fence(&image, node_id, UncleanDefaults::default());
        image.apply(&MetadataCommand::FenceBroker { node_id, changes });
        image
    }

    fn partition(image: &MetadataImage, index: usize) -> PartitionImage {
        image.topic("t").expect("topic").partitions[index].clone()
    }

    #[test]
    fn fencing_a_leader_elects_the_next_in_sync_replica_and_a_new_epoch() {
        let image = fenced(image(&[1, 2, 3], vec![vec![1, 2, 3], vec![2, 3, 1]]), 1);
        let p0 = partition(&image, 0);
        assert_eq!(
            (p0.leader, p0.isr.clone(), p0.leader_epoch),
            (2, vec![2, 3], 1)
        );
        let p1 = partition(&image, 1);
        assert_eq!(
            (p1.leader, p1.isr.clone(), p1.leader_epoch),
            (2, vec![2, 3], 0)
        );
        assert_eq!(p1.partition_epoch, 1);
    }

    #[test]
    fn the_last_in_sync_replica_stays_in_the_isr_and_leads_again_on_return() {
        let mut image = image(&[1, 2], vec![vec![1, 2]]);
        image = fenced(image, 2);
        image = fenced(image, 1);
        let p = partition(&image, 0);
        assert_eq!((p.leader, p.isr.clone()), (NO_LEADER, vec![1]));
        // Replica 2 returns first: out of sync, it may not lead.
        assert!(unfence(&image, 2, UncleanDefaults::default()).is_empty());
        let changes = unfence(&image, 1, UncleanDefaults::default());
        image.apply(&MetadataCommand::UnfenceBroker {
            node_id: 1,
            changes,
        });
        let p = partition(&image, 0);
        assert_eq!((p.leader, p.isr.clone(), p.leader_epoch), (1, vec![1], 2));
    }

    #[test]
    fn an_unclean_election_needs_the_topic_to_allow_it() {
        let mut image = image(&[1, 2], vec![vec![1, 2]]);
        image = fenced(image, 2);
        image.apply(&MetadataCommand::AlterTopicConfig {
            topic_id: Uuid::from_u128(7),
            change: weir_metadata::ConfigChange::setting(BTreeMap::from([(
                UNCLEAN_ELECTION.to_string(),
                "true".to_string(),
            )])),
        });
        // 2 came back but is out of sync; 1 dies: with unclean election 2 leads.
        let changes = unfence(&image, 2, UncleanDefaults::default());
        assert!(changes.is_empty(), "1 still leads");
        image.apply(&MetadataCommand::UnfenceBroker {
            node_id: 2,
            changes,
        });
        image = fenced(image, 1);
        let p = partition(&image, 0);
        assert_eq!((p.leader, p.isr.clone()), (2, vec![2]));
    }

    #[test]
    fn unclean_election_reads_every_level_below_the_topic_as_kafkas_controller_does() {
        let set = |image: &mut MetadataImage, node_id: Option<i32>, value: &str| {
            let change = weir_metadata::ConfigChange::setting(BTreeMap::from([(
                UNCLEAN_ELECTION.to_string(),
                value.to_string(),
            )]));
            match node_id {
                Some(-1) => image.apply(&MetadataCommand::AlterTopicConfig {
                    topic_id: Uuid::from_u128(7),
                    change,
                }),
                node_id => image.apply(&MetadataCommand::AlterBrokerConfig { node_id, change }),
            }
        };
        let allowed = |image: &MetadataImage, defaults: UncleanDefaults| {
            defaults.allow(image, image.topic("t").expect("topic"))
        };
        let controller = |configured| UncleanDefaults {
            node_id: Some(1),
            configured,
        };
        let mut image = image(&[1, 2], vec![vec![1, 2]]);
        assert!(!allowed(&image, UncleanDefaults::default()));
        // The controller's static config, when nothing dynamic sets it.
        assert!(allowed(&image, controller(true)));
        // The cluster-wide level over the static one, as Kafka spells booleans.
        set(&mut image, None, "FALSE");
        assert!(!allowed(&image, controller(true)));
        // The controller node's own level over the cluster-wide one; another node's is not read.
        set(&mut image, Some(2), "false");
        set(&mut image, Some(1), " True");
        assert!(allowed(&image, controller(false)));
        assert!(!allowed(&image, UncleanDefaults::default()));
        // The topic's own over all of them.
        set(&mut image, Some(-1), "false");
        assert!(!allowed(&image, controller(true)));
    }

    #[test]
    fn leases_expire_only_for_a_leading_controller_and_restart_with_leadership() {
        let image = image(&[1, 2], vec![vec![1, 2]]);
        let start = Instant::now();
        let timeout = Duration::from_secs(9);
        let mut leases = Leases::default();
        assert!(leases
            .expired(&image, timeout, start + timeout * 2)
            .is_empty());
        leases.set_leading(true, start);
        leases.renew(1, start + Duration::from_secs(5));
        assert_eq!(
            leases.expired(&image, timeout, start + Duration::from_secs(10)),
            vec![2]
        );
        assert_eq!(
            leases.expired(&image, timeout, start + Duration::from_secs(15)),
            vec![1, 2]
        );
        leases.set_leading(false, start + Duration::from_secs(15));
        leases.set_leading(true, start + Duration::from_secs(16));
        assert!(leases
            .expired(&image, timeout, start + Duration::from_secs(20))
            .is_empty());
    }
}
