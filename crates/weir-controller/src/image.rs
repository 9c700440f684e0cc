//! The metadata image: an immutable view of cluster metadata that the data plane reads.

use std::collections::{BTreeMap, HashMap};

use uuid::Uuid;

use crate::command::MetadataCommand;

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

/// Cluster metadata at one point of the metadata log.
#[derive(Debug, Clone, Default)]
pub struct MetadataImage {
    /// Number of commands applied.
    pub applied_count: u64,
    topics: BTreeMap<String, TopicImage>,
    names_by_id: HashMap<Uuid, String>,
    /// The first producer id not yet reserved.
    pub next_producer_id: i64,
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

    /// Applies a command that the controller already validated.
    pub(crate) fn apply(&mut self, command: &MetadataCommand) {
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
            MetadataCommand::AlterTopicConfig {
                topic_id,
                set,
                delete,
                replace,
            } => {
                if let Some(topic) = self.topic_mut(*topic_id) {
                    if *replace {
                        topic.configs.clear();
                    }
                    for key in delete {
                        topic.configs.remove(key);
                    }
                    topic
                        .configs
                        .extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
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
