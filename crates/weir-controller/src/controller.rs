//! The controller: validates requests, turns them into commands and commits them through the
//! metadata quorum, whose applied images it publishes.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use weir_metadata::acl::{AclBinding, AclFilter};
use weir_metadata::broker_config::checked_runtime_broker_config;
use weir_metadata::quota::QuotaAlteration;
use weir_metadata::requests::{Mutated, MutationQuota};
use weir_metadata::topic_config::checked_topic_configs;
use weir_metadata::{
    validate_topic_name, BrokerListener, BrokerRegistration, ConfigChange, ControllerError,
    MetadataCommand, MetadataImage, NewTopic, ScramDeletion, ScramUpsert, TopicImage,
};
use weir_storage::Storage;

use crate::election::UncleanDefaults;
use crate::fencing::fence;
use crate::leases::{Leases, DEFAULT_SESSION_TIMEOUT_MS};
use crate::mutation_quota::MutationQuotas;
use crate::placement::{check_replica_list, place};
use crate::quorum::MetadataQuorum;
use crate::record_file::{RecordFile, RecordFileError};

/// Producer ids reserved per metadata command; the broker hands them out from memory.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;
/// Most partitions one topic may have: each costs open files and memory on every start.
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;
/// Most listeners one broker may register.
const LISTENERS_PER_BROKER_MAX: usize = 16;

/// How a controller is set up, fixed when it is made (`weir server` takes it from the node's
/// configuration and its open-file limit).
#[derive(Debug, Clone, Copy)]
pub struct ControllerSettings {
    /// `broker.session.timeout.ms`: how long a broker may go without a heartbeat.
    pub session_timeout: Duration,
    /// How often the active controller moves leaders back to their preferred replicas
    /// (`leader.imbalance.check.interval.seconds`); `None` never does
    /// (`auto.leader.rebalance.enable=false`).
    pub leader_rebalance: Option<Duration>,
    /// Where `unclean.leader.election.enable` comes from below a topic's own setting.
    pub unclean: UncleanDefaults,
    /// Most partitions the cluster may hold in total (each holds open files on its broker).
    pub partitions_max: usize,
}

impl Default for ControllerSettings {
    /// Kafka's defaults, no leader rebalancing and no partition limit.
    fn default() -> ControllerSettings {
        ControllerSettings {
            session_timeout: Duration::from_millis(DEFAULT_SESSION_TIMEOUT_MS),
            leader_rebalance: None,
            unclean: UncleanDefaults::default(),
            partitions_max: usize::MAX,
        }
    }
}

/// The controller: every change is validated against an image that holds every change before
/// it, then committed through the quorum.
pub struct Controller {
    pub(crate) quorum: Arc<dyn MetadataQuorum>,
    /// Held from a change's validation until it is applied, so changes are decided one at a
    /// time, each against the image its predecessors made.
    pub(crate) deciding: tokio::sync::Mutex<()>,
    /// The brokers' leases, while this controller leads.
    pub(crate) leases: std::sync::Mutex<Leases>,
    pub(crate) settings: ControllerSettings,
    /// Clients' `controller_mutation_rate` buckets, while this controller leads.
    mutation_quotas: MutationQuotas,
}

/// Gives a command written before replicas were recorded its replicas: every partition on
/// `node_id`, the node that wrote it (such logs come from a single node).
fn with_replicas(command: MetadataCommand, node_id: i32, image: &MetadataImage) -> MetadataCommand {
    match command {
        MetadataCommand::CreateTopic {
            name,
            topic_id,
            partitions,
            replication_factor,
            configs,
            assignments,
        } if assignments.is_empty() => MetadataCommand::CreateTopic {
            name,
            topic_id,
            partitions,
            replication_factor,
            configs,
            assignments: vec![vec![node_id]; partitions.max(0) as usize],
        },
        MetadataCommand::CreatePartitions {
            topic_id,
            total,
            assignments,
        } if assignments.is_empty() => {
            let current = image
                .topic_by_id(topic_id)
                .map_or(total, |t| t.partition_count());
            MetadataCommand::CreatePartitions {
                topic_id,
                total,
                assignments: vec![vec![node_id]; (total - current).max(0) as usize],
            }
        }
        other => other,
    }
}

impl Controller {
    /// The controller over `quorum`.
    pub fn new(quorum: Arc<dyn MetadataQuorum>, settings: ControllerSettings) -> Controller {
        Controller {
            quorum,
            deciding: tokio::sync::Mutex::new(()),
            leases: std::sync::Mutex::new(Leases::default()),
            mutation_quotas: MutationQuotas::default(),
            settings,
        }
    }

    /// Moves the commands of a metadata log written by an earlier single-node version (at
    /// `path`, if it exists) into the quorum, in order, then renames the file `*.migrated`.
    /// Its commands are read as placing every replica on `node_id`, the node that wrote it.
    /// Replaying the whole sequence again after a crash mid-way ends in the same image, so an
    /// interrupted migration simply runs again at the next start.
    pub async fn migrate_single_node_log(
        &self,
        storage: Arc<dyn Storage>,
        path: &Path,
        node_id: i32,
    ) -> Result<(), ControllerError> {
        if !storage.exists(path) {
            return Ok(());
        }
        let commands = {
            let storage = storage.clone();
            let path = path.to_path_buf();
            tokio::task::spawn_blocking(move || {
                RecordFile::<MetadataCommand>::open(storage, &path)
                    .map_err(RecordFileError::Fatal)
                    .and_then(|mut file| file.replay())
            })
            .await
            .map_err(|e| ControllerError::Fatal(std::io::Error::other(e)))?
            .map_err(|e| ControllerError::Fatal(std::io::Error::other(e.to_string())))?
        };
        let _turn = self.deciding.lock().await;
        let mut image = MetadataImage::default();
        for command in commands.iter().cloned() {
            let command = with_replicas(command, node_id, &image);
            image.apply(&command);
            self.quorum.propose(command).await?;
        }
        let migrated = path.with_extension("log.migrated");
        storage
            .rename(path, &migrated)
            .map_err(ControllerError::Fatal)?;
        tracing::info!(target: "weir::controller", commands = commands.len(), from = %path.display(), "metadata log of a single-node version moved into the quorum");
        Ok(())
    }

    /// Refuses topic creations and partition additions that would take the cluster past
    /// `partitions_max` partitions in total.
    fn check_capacity(&self, image: &MetadataImage, adding: i32) -> Result<(), ControllerError> {
        let max = self.settings.partitions_max;
        let current = image.partition_total();
        if current + adding.max(0) as usize > max {
            return Err(ControllerError::InvalidPartitions(format!(
                "the cluster would hold {} partitions, more than the {max} its open-file limit allows; raise `ulimit -n` and restart",
                current + adding.max(0) as usize
            )));
        }
        Ok(())
    }

    /// The current image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.quorum.images().borrow().clone()
    }

    /// Commits `command` and waits until it is applied.
    pub(crate) async fn commit(&self, command: MetadataCommand) -> Result<(), ControllerError> {
        self.quorum.propose(command).await.map(|_| ())
    }

    fn topic_id(image: &MetadataImage, name: &str) -> Result<Uuid, ControllerError> {
        image
            .topic(name)
            .map(|t| t.topic_id)
            .ok_or_else(|| ControllerError::UnknownTopic(name.to_string()))
    }

    /// A topic's config overrides checked, and as they are kept (as Kafka describes them).
    fn checked_configs(
        configs: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, String>, ControllerError> {
        checked_topic_configs(configs).map_err(ControllerError::InvalidConfig)
    }

    /// Takes the `partitions` a change creates or deletes from its client's
    /// `controller_mutation_rate` (none: no quota), answered with the milliseconds the client
    /// is to pause; THROTTLING_QUOTA_EXCEEDED when a strict quota is used up. Only the
    /// controller leading the quorum counts them (a follower forwards the change to it).
    fn take_mutations(
        &self,
        quota: Option<&MutationQuota>,
        partitions: i32,
    ) -> Result<u64, ControllerError> {
        let Some(quota) = quota else {
            return Ok(0);
        };
        if !self.quorum.leads() {
            return Err(ControllerError::NotController(
                "this controller does not lead the metadata quorum".into(),
            ));
        }
        self.mutation_quotas.take(quota, partitions)
    }

    /// Creates a topic with a fresh random id, its partitions held to the client's `quota`.
    /// With `validate_only` nothing changes (the partitions still count, as in Kafka).
    pub async fn create_topic(
        &self,
        topic: NewTopic,
        validate_only: bool,
        quota: Option<&MutationQuota>,
    ) -> Result<Mutated<TopicImage>, ControllerError> {
        validate_topic_name(&topic.name).map_err(ControllerError::InvalidTopic)?;
        if topic.partitions < 1 {
            return Err(ControllerError::InvalidPartitions(
                "Number of partitions was set to an invalid non-positive value.".into(),
            ));
        }
        if topic.partitions > PARTITIONS_PER_TOPIC_MAX {
            return Err(ControllerError::InvalidPartitions(format!(
                "Number of partitions {} is more than the {PARTITIONS_PER_TOPIC_MAX} a topic may have.",
                topic.partitions
            )));
        }
        let replicas = topic.replication_factor;
        // A manual assignment is checked list by list below (an empty list has its own error).
        if replicas < 1 && topic.assignments.is_empty() {
            return Err(ControllerError::InvalidReplicationFactor(
                "Replication factor must be larger than 0, or -1 to use the default value.".into(),
            ));
        }
        let topic = NewTopic {
            configs: Self::checked_configs(&topic.configs)?,
            ..topic
        };
        let _turn = self.deciding.lock().await;
        let image = self.image();
        if image.topic(&topic.name).is_some() {
            return Err(ControllerError::TopicAlreadyExists(topic.name));
        }
        // Kafka's rule: '.' and '_' collide in metric names, so names differing only there clash.
        let normalized = topic.name.replace('.', "_");
        if let Some(other) = image
            .topics()
            .find(|t| t.name.replace('.', "_") == normalized)
        {
            return Err(ControllerError::InvalidTopic(format!(
                "Topic '{}' collides with existing topic: {} (names may not differ only in '.' and '_')",
                topic.name, other.name
            )));
        }
        self.check_capacity(&image, topic.partitions)?;
        let assignments = if topic.assignments.is_empty() {
            Self::place(&image, topic.partitions, replicas)?
        } else {
            if topic.assignments.len() != topic.partitions as usize {
                return Err(ControllerError::InvalidReplicaAssignment(format!(
                    "The manual partition assignment names {} partition(s), not {}.",
                    topic.assignments.len(),
                    topic.partitions
                )));
            }
            for assigned in &topic.assignments {
                check_replica_list(&image, assigned)?;
                if assigned.len() != replicas as usize {
                    return Err(ControllerError::InvalidReplicaAssignment(
                        "All partitions in the manual partition assignment must have the same number of replicas.".into(),
                    ));
                }
            }
            topic.assignments
        };
        let throttle_ms = self.take_mutations(quota, topic.partitions)?;
        let topic_id = Uuid::new_v4();
        let command = MetadataCommand::CreateTopic {
            name: topic.name,
            topic_id,
            partitions: topic.partitions,
            replication_factor: replicas,
            configs: topic.configs,
            assignments,
        };
        let value = if validate_only {
            let mut preview = MetadataImage::clone(&image);
            preview.apply(&command);
            Self::created(&preview, topic_id)?
        } else {
            self.commit(command).await?;
            Self::created(&self.image(), topic_id)?
        };
        Ok(Mutated { value, throttle_ms })
    }

    /// Replicas for `count` new partitions over the registered brokers, continuing the
    /// cluster's stripe so leaders spread across topics.
    fn place(
        image: &MetadataImage,
        count: i32,
        replication_factor: i16,
    ) -> Result<Vec<Vec<i32>>, ControllerError> {
        // A fenced broker gets no new replicas: it may never come back.
        let brokers: Vec<(i32, Option<String>)> = image
            .brokers()
            .filter(|b| !b.fenced)
            .map(|b| (b.node_id, b.rack.clone()))
            .collect();
        place(&brokers, count, replication_factor, image.partition_total())
    }

    /// The topic just created, as `image` holds it.
    fn created(image: &MetadataImage, topic_id: Uuid) -> Result<TopicImage, ControllerError> {
        image.topic_by_id(topic_id).cloned().ok_or_else(|| {
            ControllerError::Fatal(std::io::Error::other(
                "created topic missing from the image",
            ))
        })
    }

    /// Registers a broker (at each of its starts) with a fresh incarnation id; its epoch is
    /// the registration's position in the log above random bits of that id
    /// ([`weir_metadata::broker_epoch`]).
    pub async fn register_broker(
        &self,
        node_id: i32,
        listeners: Vec<BrokerListener>,
        rack: Option<String>,
    ) -> Result<BrokerRegistration, ControllerError> {
        if node_id < 0 {
            return Err(ControllerError::InvalidRequest(format!(
                "Invalid node id {node_id}: node ids are non-negative"
            )));
        }
        if listeners.is_empty() || listeners.len() > LISTENERS_PER_BROKER_MAX {
            return Err(ControllerError::InvalidRequest(format!(
                "A broker registers between 1 and {LISTENERS_PER_BROKER_MAX} listeners, not {}",
                listeners.len()
            )));
        }
        let _turn = self.deciding.lock().await;
        // A new start of a live broker: its old incarnation is fenced first, so leadership
        // moves and the new one rejoins each ISR only once it has caught up.
        let image = self.image();
        if image.broker(node_id).is_some_and(|b| !b.fenced) {
            let changes = fence(&image, node_id, self.unclean_defaults());
            self.commit(MetadataCommand::FenceBroker { node_id, changes })
                .await?;
        }
        let command = MetadataCommand::RegisterBroker {
            node_id,
            incarnation_id: Uuid::new_v4(),
            listeners,
            rack,
        };
        self.commit(command).await?;
        self.image().broker(node_id).cloned().ok_or_else(|| {
            ControllerError::Fatal(std::io::Error::other(
                "registered broker missing from the image",
            ))
        })
    }

    /// Deletes a topic by name.
    pub async fn delete_topic(
        &self,
        name: &str,
        quota: Option<&MutationQuota>,
    ) -> Result<Mutated<TopicImage>, ControllerError> {
        let _turn = self.deciding.lock().await;
        let image = self.image();
        let topic_id = Self::topic_id(&image, name)?;
        let topic = image
            .topic(name)
            .cloned()
            .ok_or_else(|| ControllerError::UnknownTopic(name.to_string()))?;
        let throttle_ms = self.take_mutations(quota, topic.partition_count())?;
        self.commit(MetadataCommand::DeleteTopic { topic_id })
            .await?;
        Ok(Mutated {
            value: topic,
            throttle_ms,
        })
    }

    /// Raises a topic's partition count to `total` (Kafka's CreatePartitions meaning), with
    /// the new partitions on `assignments` (one replica list each) or, without them, placed
    /// over the registered brokers; the partitions added are held to the client's `quota`.
    pub async fn create_partitions(
        &self,
        name: &str,
        total: i32,
        assignments: Option<Vec<Vec<i32>>>,
        (validate_only, quota): (bool, Option<&MutationQuota>),
    ) -> Result<Mutated<()>, ControllerError> {
        let _turn = self.deciding.lock().await;
        let image = self.image();
        let topic_id = Self::topic_id(&image, name)?;
        let topic = image.topic(name);
        let current = topic.map_or(0, |t| t.partition_count());
        let replication_factor = topic.map_or(1, |t| t.replication_factor);
        if total == current {
            return Err(ControllerError::InvalidPartitions(format!(
                "Topic already has {current} partition(s)."
            )));
        }
        if total < current {
            return Err(ControllerError::InvalidPartitions(format!(
                "The topic {name} currently has {current} partition(s); {total} would not be an increase."
            )));
        }
        if total > PARTITIONS_PER_TOPIC_MAX {
            return Err(ControllerError::InvalidPartitions(format!(
                "Number of partitions {total} is more than the {PARTITIONS_PER_TOPIC_MAX} a topic may have."
            )));
        }
        self.check_capacity(&image, total - current)?;
        let assignments = if let Some(assignments) = assignments {
            let added = total - current;
            if assignments.len() != added as usize {
                return Err(ControllerError::InvalidReplicaAssignment(format!(
                    "Attempted to add {added} additional partition(s), but only {} assignment(s) were specified.",
                    assignments.len()
                )));
            }
            for assigned in &assignments {
                check_replica_list(&image, assigned)?;
                if assigned.len() != replication_factor as usize {
                    return Err(ControllerError::InvalidReplicaAssignment(format!(
                        "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {replication_factor} replica(s).",
                        assigned.len()
                    )));
                }
            }
            assignments
        } else {
            Self::place(&image, total - current, replication_factor)?
        };
        let throttle_ms = self.take_mutations(quota, total - current)?;
        if !validate_only {
            let command = MetadataCommand::CreatePartitions {
                topic_id,
                total,
                assignments,
            };
            self.commit(command).await?;
        }
        Ok(Mutated {
            value: (),
            throttle_ms,
        })
    }

    /// Changes a topic's config overrides.
    pub async fn alter_topic_config(
        &self,
        name: &str,
        change: ConfigChange,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        // Deleting a key that is not a config deletes nothing, as in Kafka.
        let change = ConfigChange {
            set: Self::checked_configs(&change.set)?,
            ..change
        };
        let _turn = self.deciding.lock().await;
        let image = self.image();
        let topic_id = Self::topic_id(&image, name)?;
        if !validate_only {
            let command = MetadataCommand::AlterTopicConfig { topic_id, change };
            self.commit(command).await?;
        }
        Ok(())
    }

    /// Changes dynamic broker configs: the cluster-wide defaults (`node_id` `None`) or one
    /// broker's own; `replace` drops the level's configs not in `set`. Only the broker keys of
    /// topic configs and the settings marked dynamic change at runtime; any other key is
    /// refused, as is a bad value.
    pub async fn alter_broker_config(
        &self,
        node_id: Option<i32>,
        change: ConfigChange,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let checked: Vec<_> = change
            .set
            .iter()
            .map(|(name, value)| (name, checked_runtime_broker_config(name, value)))
            .collect();
        let fixed: Vec<&str> = checked
            .iter()
            .filter(|(_, checked)| checked.is_none())
            .map(|(name, _)| name.as_str())
            .collect();
        if !fixed.is_empty() {
            return Err(ControllerError::InvalidRequest(format!(
                "Cannot update these configs dynamically: [{}]",
                fixed.join(", ")
            )));
        }
        let set = checked
            .into_iter()
            .filter_map(|(name, checked)| Some((name.clone(), checked?)))
            .map(|(name, checked)| checked.map(|value| (name, value)))
            .collect::<Result<_, _>>()
            .map_err(ControllerError::InvalidRequest)?;
        let change = ConfigChange { set, ..change };
        let _turn = self.deciding.lock().await;
        if !validate_only {
            let command = MetadataCommand::AlterBrokerConfig { node_id, change };
            self.commit(command).await?;
        }
        Ok(())
    }

    /// Reserves the next block of producer ids, durably, so no id is ever handed out twice.
    pub async fn allocate_producer_ids(&self) -> Result<(i64, i64), ControllerError> {
        let _turn = self.deciding.lock().await;
        let image = self.image();
        let first = image.next_producer_id;
        self.commit(MetadataCommand::AllocateProducerIds {
            first,
            count: PRODUCER_ID_BLOCK_SIZE,
        })
        .await?;
        Ok((first, PRODUCER_ID_BLOCK_SIZE))
    }

    /// Sets and removes SCRAM credentials in one command; answered with the deletions that
    /// name no credential (left out of it, as Kafka answers RESOURCE_NOT_FOUND for them).
    pub async fn alter_scram_credentials(
        &self,
        upserts: Vec<ScramUpsert>,
        deletions: Vec<ScramDeletion>,
    ) -> Result<Vec<ScramDeletion>, ControllerError> {
        let _turn = self.deciding.lock().await;
        let image = self.image();
        let (deletions, missing): (Vec<_>, Vec<_>) = deletions
            .into_iter()
            .partition(|d| image.scram_credential(&d.user, d.hash).is_some());
        if !upserts.is_empty() || !deletions.is_empty() {
            self.commit(MetadataCommand::AlterScramCredentials { upserts, deletions })
                .await?;
        }
        Ok(missing)
    }

    /// Sets and removes client quotas in one command, leaving out what would change nothing.
    pub async fn alter_client_quotas(
        &self,
        alterations: Vec<QuotaAlteration>,
    ) -> Result<(), ControllerError> {
        let _turn = self.deciding.lock().await;
        let image = self.image();
        let alterations: Vec<QuotaAlteration> = alterations
            .iter()
            .filter_map(|a| image.client_quotas().effective(a))
            .collect();
        if !alterations.is_empty() {
            self.commit(MetadataCommand::AlterClientQuotas { alterations })
                .await?;
        }
        Ok(())
    }

    /// Adds the ACLs the cluster does not hold yet.
    pub async fn create_acls(&self, acls: Vec<AclBinding>) -> Result<(), ControllerError> {
        let _turn = self.deciding.lock().await;
        let image = self.image();
        let mut new: Vec<AclBinding> = acls
            .into_iter()
            .filter(|acl| !image.acls().contains(acl))
            .collect();
        new.sort();
        new.dedup();
        if !new.is_empty() {
            self.commit(MetadataCommand::CreateAcls { acls: new })
                .await?;
        }
        Ok(())
    }

    /// Removes every ACL one of `filters` selects; answered with them, per filter.
    pub async fn delete_acls(
        &self,
        filters: Vec<AclFilter>,
    ) -> Result<Vec<Vec<AclBinding>>, ControllerError> {
        let _turn = self.deciding.lock().await;
        let image = self.image();
        let matched: Vec<Vec<AclBinding>> = filters
            .iter()
            .map(|filter| {
                image
                    .acls()
                    .iter()
                    .filter(|acl| filter.matches(acl))
                    .collect()
            })
            .collect();
        let mut removed: Vec<AclBinding> = matched.iter().flatten().cloned().collect();
        removed.sort();
        removed.dedup();
        if !removed.is_empty() {
            self.commit(MetadataCommand::DeleteAcls { acls: removed })
                .await?;
        }
        Ok(matched)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::quorum::{QuorumConfig, RaftQuorum};

    /// A controller over a quorum of one in `dir`, and the quorum (to stop it, as a restart
    /// would).
    pub struct Node {
        controller: Controller,
        quorum: Arc<RaftQuorum>,
    }

    impl std::ops::Deref for Node {
        type Target = Controller;
        fn deref(&self) -> &Controller {
            &self.controller
        }
    }

    impl Node {
        pub async fn stop(self) {
            self.quorum.shutdown().await;
        }

        pub fn quorum(&self) -> &RaftQuorum {
            &self.quorum
        }
    }

    pub fn listener(port: u16) -> BrokerListener {
        BrokerListener {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port,
        }
    }

    /// The controller of node `node_id` over `dir`, its quorum opened (replayed).
    pub async fn open_node(dir: &std::path::Path, node_id: i32) -> Node {
        open_node_with(dir, node_id, ControllerSettings::default()).await
    }

    /// As [`open_node`], with `settings`.
    pub async fn open_node_with(
        dir: &std::path::Path,
        node_id: i32,
        settings: ControllerSettings,
    ) -> Node {
        let config = QuorumConfig {
            node_id,
            voters: BTreeMap::from([(node_id, "127.0.0.1:1".to_string())]),
            dir: dir.join("quorum"),
            tls: None,
        };
        let quorum = Arc::new(
            RaftQuorum::open(Arc::new(weir_storage::FsStorage), config, None)
                .await
                .expect("quorum"),
        );
        Node {
            controller: Controller::new(quorum.clone(), settings),
            quorum,
        }
    }

    impl Node {
        /// Registers broker `node_id` and heartbeats once, as a broker joins at its start
        /// (a restarted broker is fenced until it heartbeats).
        pub async fn join(&self, node_id: i32, listener: BrokerListener, rack: Option<String>) {
            let registered = self
                .register_broker(node_id, vec![listener], rack)
                .await
                .expect("register");
            let fenced = self
                .heartbeat(node_id, registered.epoch)
                .await
                .expect("heartbeat");
            assert!(!fenced || self.image().broker(node_id).is_some_and(|b| !b.fenced));
        }
    }

    /// Node 1's controller over `dir`, with broker 1 joined (as at every start).
    pub async fn open(dir: &std::path::Path) -> Node {
        let node = open_node(dir, 1).await;
        node.join(1, listener(9092), None).await;
        node
    }

    fn new_topic(name: &str, partitions: i32) -> NewTopic {
        NewTopic {
            name: name.into(),
            partitions,
            replication_factor: 1,
            ..NewTopic::default()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn changes_survive_replay_and_ids_are_fresh() {
        let dir = tempfile::tempdir().expect("tempdir");
        let controller = open(dir.path()).await;
        let first = controller
            .create_topic(new_topic("orders", 3), false, None)
            .await
            .expect("create")
            .value;
        controller
            .create_partitions("orders", 5, None, (false, None))
            .await
            .expect("grow");
        let set = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
        controller
            .alter_topic_config("orders", ConfigChange::setting(set), false)
            .await
            .expect("alter");
        let (pid, _) = controller.allocate_producer_ids().await.expect("pids");
        controller.stop().await;
        let controller = open(dir.path()).await;
        let image = controller.image();
        let topic = image.topic("orders").expect("topic survives");
        assert_eq!(
            (topic.partition_count(), topic.topic_id),
            (5, first.topic_id)
        );
        assert_eq!(
            topic.configs.get("retention.ms").map(String::as_str),
            Some("1000")
        );
        assert!(
            controller.allocate_producer_ids().await.expect("pids").0 > pid,
            "producer ids never reused"
        );
        controller
            .delete_topic("orders", None)
            .await
            .expect("delete");
        let again = controller
            .create_topic(new_topic("orders", 1), false, None)
            .await
            .expect("recreate")
            .value;
        assert_ne!(again.topic_id, first.topic_id);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn partitions_spread_over_registered_brokers_with_leaders_and_epochs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let controller = open(dir.path()).await;
        let three = NewTopic {
            replication_factor: 3,
            ..new_topic("orders", 6)
        };
        assert!(
            matches!(
                controller.create_topic(three.clone(), false, None).await,
                Err(ControllerError::InvalidReplicationFactor(_))
            ),
            "one broker cannot hold three replicas"
        );
        for node_id in [2, 3] {
            controller
                .join(node_id, listener(9092 + node_id as u16), Some("r1".into()))
                .await;
        }
        let first_epoch = controller.image().broker(1).expect("broker 1").epoch;
        let created = controller
            .create_topic(three, false, None)
            .await
            .expect("create")
            .value;
        let mut leaders = std::collections::BTreeMap::<i32, usize>::new();
        for partition in &created.partitions {
            assert_eq!(partition.replicas.len(), 3);
            assert_eq!(
                partition.isr, partition.replicas,
                "new replicas are all in sync"
            );
            assert_eq!(partition.leader, partition.replicas[0]);
            assert_eq!((partition.leader_epoch, partition.partition_epoch), (0, 0));
            *leaders.entry(partition.leader).or_default() += 1;
        }
        assert_eq!(leaders.values().collect::<Vec<_>>(), vec![&2, &2, &2]);
        controller
            .create_partitions("orders", 9, None, (false, None))
            .await
            .expect("grow");
        controller.stop().await;
        let controller = open(dir.path()).await;
        let image = controller.image();
        let topic = image.topic("orders").expect("topic");
        // The restart of broker 1 fenced its old incarnation: it left every ISR, and what it
        // led moved to the next in-sync replica at a new leader epoch.
        for (before, after) in created.partitions.iter().zip(&topic.partitions[..6]) {
            assert_eq!(after.replicas, before.replicas);
            assert!(!after.isr.contains(&1), "{after:?}");
            match before.leader {
                1 => assert_eq!((after.leader, after.leader_epoch), (before.replicas[1], 1)),
                leader => assert_eq!((after.leader, after.leader_epoch), (leader, 0)),
            }
        }
        assert!(topic.partitions[6..].iter().all(|p| p.replicas.len() == 3));
        assert_eq!(image.broker(2).and_then(|b| b.rack.as_deref()), Some("r1"));
        assert!(
            image.broker(1).expect("broker 1").epoch > first_epoch,
            "a new start has a new broker epoch"
        );
        assert!(controller
            .register_broker(-1, vec![listener(1)], None)
            .await
            .is_err());
        assert!(controller
            .register_broker(4, Vec::new(), None)
            .await
            .is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commands_of_a_single_node_log_move_into_the_quorum_with_their_replicas() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage: Arc<dyn weir_storage::Storage> = Arc::new(weir_storage::FsStorage);
        let legacy = dir.path().join("metadata.log");
        let mut log = RecordFile::<MetadataCommand>::open(storage.clone(), &legacy).expect("log");
        for stored in [
            r#"{"type":"create_topic","name":"old","topic_id":"00000000-0000-0000-0000-000000000007","partitions":2,"replication_factor":1,"configs":{}}"#,
            r#"{"type":"create_partitions","topic_id":"00000000-0000-0000-0000-000000000007","total":3}"#,
            r#"{"type":"allocate_producer_ids","first":0,"count":1000}"#,
        ] {
            let command: MetadataCommand = serde_json::from_str(stored).expect("old command");
            log.append(&command).expect("append");
        }
        drop(log);
        let controller = open_node(dir.path(), 5).await;
        controller
            .migrate_single_node_log(storage.clone(), &legacy, 5)
            .await
            .expect("migrated");
        // Run again, as after a crash before the rename: the same image.
        let migrated = legacy.with_extension("log.migrated");
        std::fs::copy(&migrated, &legacy).expect("copy back");
        controller
            .migrate_single_node_log(storage.clone(), &legacy, 5)
            .await
            .expect("migrated again");
        assert!(!legacy.exists() && migrated.exists());
        controller.stop().await;
        let controller = open_node(dir.path(), 5).await;
        let image = controller.image();
        let topic = image.topic("old").expect("topic");
        assert_eq!(topic.partition_count(), 3);
        for partition in &topic.partitions {
            assert_eq!(
                (partition.replicas.as_slice(), partition.leader),
                (&[5][..], 5)
            );
        }
        assert_eq!(image.next_producer_id, 1000);
        controller.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn broker_configs_survive_replay_and_only_dynamic_keys_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let controller = open(dir.path()).await;
        let one = |key: &str, value: &str| BTreeMap::from([(key.to_string(), value.to_string())]);
        let set = |key: &str, value: &str| ConfigChange::setting(one(key, value));
        controller
            .alter_broker_config(None, set("log.retention.ms", "7000"), false)
            .await
            .expect("cluster default");
        controller
            .alter_broker_config(Some(1), set("message.max.bytes", "2000"), false)
            .await
            .expect("this broker");
        let before = controller.image().applied_count;
        for (key, value) in [
            ("num.partitions", "2"),
            ("log.retention.ms", "soon"),
            ("no.such.key", "1"),
            ("remote.storage.enable", "false"),
            ("retention.ms", "1000"),
        ] {
            let refused = controller
                .alter_broker_config(Some(1), set(key, value), false)
                .await;
            assert!(
                matches!(refused, Err(ControllerError::InvalidRequest(_))),
                "{key}={value}: {refused:?}"
            );
        }
        assert_eq!(
            controller.image().applied_count,
            before,
            "refusals change nothing"
        );
        controller
            .alter_broker_config(Some(1), set("log.segment.bytes", "2097152"), true)
            .await
            .expect("validate only");
        let image = controller.image();
        assert_eq!(
            image.broker_configs(Some(1)),
            &one("message.max.bytes", "2000")
        );
        controller.stop().await;
        let controller = open(dir.path()).await;
        assert_eq!(
            controller.image().broker_configs(None),
            &one("log.retention.ms", "7000")
        );
        assert_eq!(
            controller.image().broker_configs(Some(1)),
            &one("message.max.bytes", "2000")
        );
        controller
            .alter_broker_config(
                Some(1),
                ConfigChange {
                    replace: true,
                    ..ConfigChange::default()
                },
                false,
            )
            .await
            .expect("replace with nothing");
        assert!(controller.image().broker_configs(Some(1)).is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn creations_past_the_partition_limit_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let settings = ControllerSettings {
            partitions_max: 4,
            ..ControllerSettings::default()
        };
        let controller = open_node_with(dir.path(), 1, settings).await;
        controller.join(1, listener(9092), None).await;
        controller
            .create_topic(new_topic("t", 2), false, None)
            .await
            .expect("create");
        let refused = controller
            .create_topic(new_topic("big", 3), false, None)
            .await;
        assert!(
            matches!(&refused, Err(ControllerError::InvalidPartitions(why)) if why.contains("5 partitions, more than the 4")),
            "{refused:?}"
        );
        assert!(
            controller
                .create_partitions("t", 5, None, (false, None))
                .await
                .is_err(),
            "over the partition limit"
        );
        controller
            .create_partitions("t", 4, None, (false, None))
            .await
            .expect("up to the limit");
        assert!(controller.image().topic("big").is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn refusals_change_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let controller = open(dir.path()).await;
        controller
            .create_topic(new_topic("t", 1), false, None)
            .await
            .expect("create");
        let bad_config = NewTopic {
            configs: BTreeMap::from([("cleanup.policy".into(), "shred".into())]),
            ..new_topic("u", 1)
        };
        let cases: Vec<(NewTopic, &str)> = vec![
            (new_topic("t", 1), "exists"),
            (new_topic("bad/name", 1), "name"),
            (new_topic("u", 0), "partitions"),
            (
                NewTopic {
                    replication_factor: 3,
                    ..new_topic("u", 1)
                },
                "replication",
            ),
            (bad_config, "config"),
        ];
        for (topic, what) in cases {
            assert!(
                controller.create_topic(topic, false, None).await.is_err(),
                "{what}"
            );
        }
        assert!(controller
            .create_topic(new_topic("t.x", 1), false, None)
            .await
            .is_ok());
        assert!(
            controller
                .create_topic(new_topic("t_x", 1), false, None)
                .await
                .is_err(),
            "'.' and '_' collide"
        );
        let before = controller.image().applied_count;
        assert!(controller
            .create_partitions("t", 1, None, (false, None))
            .await
            .is_err());
        assert!(controller
            .alter_topic_config(
                "t",
                ConfigChange::setting(BTreeMap::from([("foo.bar".into(), "1".into())])),
                false
            )
            .await
            .is_err());
        assert!(
            controller
                .create_topic(new_topic("v", 2), true, None)
                .await
                .is_ok(),
            "validate only"
        );
        assert_eq!(controller.image().applied_count, before);
        assert!(controller.image().topic("v").is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_partitions_a_client_creates_and_deletes_count_against_its_mutation_rate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let controller = open(dir.path()).await;
        let strict = MutationQuota {
            user: None,
            client_id: Some("admin".into()),
            rate: 1.0,
            strict: true,
        };
        let quota = Some(&strict);
        let refused = |outcome: Result<Mutated<TopicImage>, ControllerError>| matches!(outcome, Err(ControllerError::ThrottlingQuotaExceeded(ms)) if ms > 0);
        // A refused change takes nothing; a full bucket holds 11 partitions.
        let invalid = controller.create_topic(new_topic("bad/name", 50), false, quota);
        assert!(matches!(
            invalid.await,
            Err(ControllerError::InvalidTopic(_))
        ));
        let made = controller.create_topic(new_topic("a", 8), false, quota);
        assert_eq!(made.await.expect("a").throttle_ms, 0);
        let grown = controller.create_partitions("a", 10, None, (false, quota));
        assert_eq!(grown.await.expect("grow").throttle_ms, 0);
        let checked = controller.create_topic(new_topic("b", 3), true, quota);
        assert!(checked.await.expect("validate only").throttle_ms > 1_000);
        assert!(refused(
            controller
                .create_topic(new_topic("c", 1), false, quota)
                .await
        ));
        assert!(controller.image().topic("c").is_none(), "nothing made");
        assert!(refused(controller.delete_topic("a", quota).await));
        assert!(controller.image().topic("a").is_some(), "nothing deleted");
        let permissive = MutationQuota {
            strict: false,
            ..strict.clone()
        };
        let deleted = controller.delete_topic("a", Some(&permissive)).await;
        assert!(
            deleted
                .expect("an older client's change is made")
                .throttle_ms
                > 10_000
        );
        let other = MutationQuota {
            client_id: Some("other".into()),
            ..strict.clone()
        };
        let theirs = controller.create_topic(new_topic("d", 11), false, Some(&other));
        assert_eq!(theirs.await.expect("its own bucket").throttle_ms, 0);
        let unbounded = controller.create_topic(new_topic("e", 50), false, None);
        assert_eq!(unbounded.await.expect("no quota").throttle_ms, 0);
    }
}
