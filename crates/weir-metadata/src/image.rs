//! The metadata image: an immutable view of cluster metadata that the data plane reads.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use uuid::Uuid;
use weir_sasl::{ScramCredential, ScramHash};

use crate::acl::AclTable;
use crate::command::{BrokerListener, ConfigChange, MetadataCommand, PartitionChange};
use crate::quota::QuotaTable;

/// No leader (Kafka's `-1`): the partition cannot be read or written until one is elected.
pub const NO_LEADER: i32 = -1;

/// One partition's replicas and leadership.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionImage {
    /// The brokers holding a replica, preferred leader first.
    pub replicas: Vec<i32>,
    /// The in-sync replicas: those that have every acknowledged write.
    pub isr: Vec<i32>,
    /// The broker that takes writes and serves reads, or [`NO_LEADER`].
    pub leader: i32,
    /// Bumped at every leader change; stamped on every batch the leader appends.
    pub leader_epoch: i32,
    /// Bumped at every change to the partition (replicas, ISR or leader).
    pub partition_epoch: i32,
    /// Replicas a reassignment in progress adds (already in `replicas`, copying).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding: Vec<i32>,
    /// Replicas a reassignment in progress removes once the added ones are in sync.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing: Vec<i32>,
}

impl PartitionImage {
    /// A new partition on `replicas` at epoch 0: every replica whose broker is `alive` is in
    /// sync (all are empty), and the first of them leads. With none alive it is offline.
    pub fn new(replicas: Vec<i32>, alive: impl Fn(i32) -> bool) -> PartitionImage {
        let isr: Vec<i32> = replicas.iter().copied().filter(|id| alive(*id)).collect();
        PartitionImage {
            leader: isr.first().copied().unwrap_or(NO_LEADER),
            isr,
            replicas,
            leader_epoch: 0,
            partition_epoch: 0,
            adding: Vec::new(),
            removing: Vec::new(),
        }
    }

    /// Applies a change of leader and ISR (and of replicas, when it carries them): the
    /// partition epoch moves on, and the leader epoch too when the leader changes.
    pub fn change(&mut self, change: &PartitionChange) {
        if change.leader != self.leader {
            self.leader_epoch += 1;
        }
        self.leader = change.leader;
        self.isr = change.isr.clone();
        if let Some(assignment) = &change.assignment {
            self.replicas = assignment.replicas.clone();
            self.adding = assignment.adding.clone();
            self.removing = assignment.removing.clone();
        }
        self.partition_epoch += 1;
    }

    /// Whether some replica is not in sync.
    pub fn under_replicated(&self) -> bool {
        self.isr.len() < self.replicas.len()
    }

    /// Whether a reassignment is moving the partition.
    pub fn reassigning(&self) -> bool {
        !self.adding.is_empty() || !self.removing.is_empty()
    }

    /// The replicas the partition ends on: all of them once no reassignment is in progress.
    pub fn target_replicas(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|id| !self.removing.contains(id))
            .collect()
    }

    /// The replicas the partition had before its reassignment began.
    pub fn original_replicas(&self) -> Vec<i32> {
        self.replicas
            .iter()
            .copied()
            .filter(|id| !self.adding.contains(id))
            .collect()
    }
}

/// The broker epoch of a registration at log position `position` by the start
/// `incarnation_id` (random): the position, so that a later registration has a larger epoch,
/// shifted above 31 bits of the incarnation id. A follower proves with its broker epoch that a
/// replica fetch is its own (KIP-903); the random bits keep that epoch from being guessed by a
/// client posing as the follower. Fits an int64 for 2^32 positions.
pub fn broker_epoch(position: u64, incarnation_id: Uuid) -> u64 {
    let random = (incarnation_id.as_u128() as u64) & 0x7fff_ffff;
    (position.min(u64::from(u32::MAX)) << 31) | random
}

/// A broker as registered with the controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    /// Node id, which clients see as the broker id.
    pub node_id: i32,
    /// Random id of the broker process's current start.
    pub incarnation_id: Uuid,
    /// The registration's broker epoch, new at every start and larger than the last: its
    /// position in the metadata log with 31 random bits below it (see [`broker_epoch`]).
    pub epoch: u64,
    /// Where clients reach it.
    pub listeners: Vec<BrokerListener>,
    /// Its rack, for rack-aware placement.
    pub rack: Option<String>,
    /// Its lease expired or it shut down: it leads nothing, is in no ISR and gets no new
    /// replicas until it heartbeats again.
    #[serde(default)]
    pub fenced: bool,
}

/// One topic as the cluster knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicImage {
    /// Topic name.
    pub name: String,
    /// Topic id.
    pub topic_id: Uuid,
    /// The partitions, by index.
    pub partitions: Vec<PartitionImage>,
    /// Replication factor.
    pub replication_factor: i16,
    /// Topic-level config overrides.
    pub configs: BTreeMap<String, String>,
}

impl TopicImage {
    /// Number of partitions.
    pub fn partition_count(&self) -> i32 {
        self.partitions.len() as i32
    }

    /// Partition `index`, if the topic has it.
    pub fn partition(&self, index: i32) -> Option<&PartitionImage> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }
}

/// No configs: what a broker without dynamic configs has.
static NO_CONFIGS: BTreeMap<String, String> = BTreeMap::new();

/// Cluster metadata at one point of the metadata log (serialized whole in quorum snapshots).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetadataImage {
    /// Number of commands applied.
    pub applied_count: u64,
    topics: BTreeMap<String, TopicImage>,
    names_by_id: HashMap<Uuid, String>,
    /// The first producer id not yet reserved.
    pub next_producer_id: i64,
    /// Dynamic broker configs set for the whole cluster (`DYNAMIC_DEFAULT_BROKER_CONFIG`).
    cluster_broker_configs: BTreeMap<String, String>,
    /// Dynamic broker configs set for one broker (`DYNAMIC_BROKER_CONFIG`), by node id.
    node_broker_configs: BTreeMap<i32, BTreeMap<String, String>>,
    /// Registered brokers, by node id.
    brokers: BTreeMap<i32, BrokerRegistration>,
    /// SCRAM credentials, by user name and mechanism.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    scram_credentials: BTreeMap<String, BTreeMap<ScramHash, ScramCredential>>,
    /// The access control lists.
    #[serde(default, skip_serializing_if = "AclTable::is_empty")]
    acls: AclTable,
    /// Client quotas, by entity.
    #[serde(default, skip_serializing_if = "QuotaTable::is_empty")]
    client_quotas: QuotaTable,
}

impl MetadataImage {
    /// The topic called `name`.
    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics.get(name)
    }

    /// The topic with id `topic_id`.
    pub fn topic_by_id(&self, topic_id: Uuid) -> Option<&TopicImage> {
        self.names_by_id
            .get(&topic_id)
            .and_then(|name| self.topics.get(name))
    }

    /// Every topic, by name.
    pub fn topics(&self) -> impl Iterator<Item = &TopicImage> {
        self.topics.values()
    }

    /// User `user`'s SCRAM credential for `hash`.
    pub fn scram_credential(&self, user: &str, hash: ScramHash) -> Option<&ScramCredential> {
        self.scram_credentials.get(user)?.get(&hash)
    }

    /// User `user`'s SCRAM credentials, by mechanism.
    pub fn scram_credentials_of(
        &self,
        user: &str,
    ) -> Option<&BTreeMap<ScramHash, ScramCredential>> {
        self.scram_credentials.get(user)
    }

    /// Every user with SCRAM credentials, by name, with their credentials by mechanism.
    pub fn scram_users(
        &self,
    ) -> impl Iterator<Item = (&String, &BTreeMap<ScramHash, ScramCredential>)> {
        self.scram_credentials.iter()
    }

    /// The access control lists.
    pub fn acls(&self) -> &AclTable {
        &self.acls
    }

    /// The client quotas.
    pub fn client_quotas(&self) -> &QuotaTable {
        &self.client_quotas
    }

    /// Every registered broker, by node id.
    pub fn brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values()
    }

    /// The broker with node id `node_id`, if registered.
    pub fn broker(&self, node_id: i32) -> Option<&BrokerRegistration> {
        self.brokers.get(&node_id)
    }

    /// Whether broker `node_id` may lead and be in sync: registered and not fenced. A broker
    /// never registered counts as alive (logs from before registrations name such brokers).
    pub fn is_alive(&self, node_id: i32) -> bool {
        self.brokers.get(&node_id).is_none_or(|b| !b.fenced)
    }

    /// Number of partitions in the cluster.
    pub fn partition_total(&self) -> usize {
        self.topics.values().map(|t| t.partitions.len()).sum()
    }

    /// The dynamic broker configs of one level: the cluster-wide defaults (`None`) or one
    /// broker's own.
    pub fn broker_configs(&self, node_id: Option<i32>) -> &BTreeMap<String, String> {
        match node_id {
            None => &self.cluster_broker_configs,
            Some(id) => self.node_broker_configs.get(&id).unwrap_or(&NO_CONFIGS),
        }
    }

    /// The levels dynamic broker configs may be set at: the cluster-wide one (`None`), then
    /// each broker that has configs of its own.
    pub fn broker_config_levels(&self) -> impl Iterator<Item = Option<i32>> + '_ {
        std::iter::once(None).chain(self.node_broker_configs.keys().map(|id| Some(*id)))
    }

    /// Applies a command that the controller already validated.
    pub fn apply(&mut self, command: &MetadataCommand) {
        self.applied_count += 1;
        match command {
            MetadataCommand::CreateTopic {
                name,
                topic_id,
                partitions,
                replication_factor,
                configs,
                assignments,
            } => {
                self.names_by_id.insert(*topic_id, name.clone());
                self.topics.insert(
                    name.clone(),
                    TopicImage {
                        name: name.clone(),
                        topic_id: *topic_id,
                        partitions: self.new_partitions(0, *partitions, assignments),
                        replication_factor: *replication_factor,
                        configs: configs.clone(),
                    },
                );
            }
            MetadataCommand::DeleteTopic { topic_id } => {
                if let Some(name) = self.names_by_id.remove(topic_id) {
                    self.topics.remove(&name);
                }
            }
            MetadataCommand::CreatePartitions {
                topic_id,
                total,
                assignments,
            } => {
                let from = self.topic_by_id(*topic_id).map(TopicImage::partition_count);
                if let Some(from) = from {
                    let added = self.new_partitions(from, *total, assignments);
                    if let Some(topic) = self.topic_mut(*topic_id) {
                        topic.partitions.extend(added);
                    }
                }
            }
            MetadataCommand::AlterTopicConfig { topic_id, change } => {
                if let Some(topic) = self.topic_mut(*topic_id) {
                    change_configs(&mut topic.configs, change);
                }
            }
            MetadataCommand::AlterBrokerConfig { node_id, change } => {
                let configs = match node_id {
                    None => &mut self.cluster_broker_configs,
                    Some(id) => self.node_broker_configs.entry(*id).or_default(),
                };
                change_configs(configs, change);
                if let Some(id) = node_id.filter(|_| configs.is_empty()) {
                    self.node_broker_configs.remove(&id);
                }
            }
            MetadataCommand::RegisterBroker {
                node_id,
                incarnation_id,
                listeners,
                rack,
            } => {
                let registration = BrokerRegistration {
                    node_id: *node_id,
                    incarnation_id: *incarnation_id,
                    epoch: broker_epoch(self.applied_count, *incarnation_id),
                    listeners: listeners.clone(),
                    rack: rack.clone(),
                    // A broker back from a restart stays fenced until it heartbeats.
                    fenced: self.brokers.get(node_id).is_some_and(|b| b.fenced),
                };
                self.brokers.insert(*node_id, registration);
            }
            MetadataCommand::FenceBroker { node_id, changes } => {
                if let Some(broker) = self.brokers.get_mut(node_id) {
                    broker.fenced = true;
                }
                self.change_partitions(changes);
            }
            MetadataCommand::UnfenceBroker { node_id, changes } => {
                if let Some(broker) = self.brokers.get_mut(node_id) {
                    broker.fenced = false;
                }
                self.change_partitions(changes);
            }
            MetadataCommand::ChangePartitions { changes } => self.change_partitions(changes),
            MetadataCommand::AllocateProducerIds { first, count } => {
                self.next_producer_id = self.next_producer_id.max(first + count);
            }
            MetadataCommand::AlterScramCredentials { upserts, deletions } => {
                for deletion in deletions {
                    if let Some(user) = self.scram_credentials.get_mut(&deletion.user) {
                        user.remove(&deletion.hash);
                        if user.is_empty() {
                            self.scram_credentials.remove(&deletion.user);
                        }
                    }
                }
                for upsert in upserts {
                    self.scram_credentials
                        .entry(upsert.user.clone())
                        .or_default()
                        .insert(upsert.hash, upsert.credential.clone());
                }
            }
            MetadataCommand::CreateAcls { acls } => {
                for acl in acls {
                    self.acls.insert(acl.clone());
                }
            }
            MetadataCommand::DeleteAcls { acls } => {
                for acl in acls {
                    self.acls.remove(acl);
                }
            }
            MetadataCommand::AlterClientQuotas { alterations } => {
                for alteration in alterations {
                    self.client_quotas.apply(alteration);
                }
            }
        }
    }

    fn topic_mut(&mut self, topic_id: Uuid) -> Option<&mut TopicImage> {
        let name = self.names_by_id.get(&topic_id)?;
        self.topics.get_mut(name)
    }

    fn change_partitions(&mut self, changes: &[PartitionChange]) {
        for change in changes {
            let partition = self.topic_mut(change.topic_id).and_then(|t| {
                t.partitions
                    .get_mut(usize::try_from(change.partition).ok()?)
            });
            if let Some(partition) = partition {
                partition.change(change);
            }
        }
    }

    /// Partitions `from..to` on `assignments` (the replicas of each, in order). A partition
    /// the command names no replicas for has none, and so no leader: it is offline, never
    /// guessed.
    fn new_partitions(&self, from: i32, to: i32, assignments: &[Vec<i32>]) -> Vec<PartitionImage> {
        (0..to.saturating_sub(from).max(0) as usize)
            .map(|i| {
                let replicas = assignments.get(i).cloned().unwrap_or_default();
                PartitionImage::new(replicas, |id| self.is_alive(id))
            })
            .collect()
    }
}

/// Applies one config change: `replace` drops every config first, then `delete` removes and
/// `set` sets.
fn change_configs(configs: &mut BTreeMap<String, String>, change: &ConfigChange) {
    if change.replace {
        configs.clear();
    }
    for key in &change.delete {
        configs.remove(key);
    }
    configs.extend(change.set.iter().map(|(k, v)| (k.clone(), v.clone())));
}
