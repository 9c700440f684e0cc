//! The metadata image: an immutable view of cluster metadata that the data plane reads.

use std::collections::{BTreeMap, HashMap};

use uuid::Uuid;

use crate::command::MetadataCommand;
use crate::ConfigChange;

/// One topic as the cluster knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicImage {
    /// Topic name.
    pub name: String,
    /// Topic id.
    pub topic_id: Uuid,
    /// Number of partitions.
    pub partitions: i32,
    /// Replication factor.
    pub replication_factor: i16,
    /// Topic-level config overrides.
    pub configs: BTreeMap<String, String>,
}

/// No configs: what a broker without dynamic configs has.
static NO_CONFIGS: BTreeMap<String, String> = BTreeMap::new();

/// Cluster metadata at one point of the metadata log.
#[derive(Debug, Clone, Default)]
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
            } => {
                self.names_by_id.insert(*topic_id, name.clone());
                self.topics.insert(
                    name.clone(),
                    TopicImage {
                        name: name.clone(),
                        topic_id: *topic_id,
                        partitions: *partitions,
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
            MetadataCommand::CreatePartitions { topic_id, total } => {
                if let Some(topic) = self.topic_mut(*topic_id) {
                    topic.partitions = (*total).max(topic.partitions);
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
            MetadataCommand::AllocateProducerIds { first, count } => {
                self.next_producer_id = self.next_producer_id.max(first + count);
            }
        }
    }

    fn topic_mut(&mut self, topic_id: Uuid) -> Option<&mut TopicImage> {
        let name = self.names_by_id.get(&topic_id)?;
        self.topics.get_mut(name)
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
