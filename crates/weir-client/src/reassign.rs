//! Moving replicas and leaders: partition reassignments (start, cancel, list) and leader
//! elections, as Kafka's AdminClient offers them.

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use std::collections::{BTreeMap, HashMap};

use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
    DescribeLogDirsRequest, DescribeLogDirsResponse, ElectLeadersRequest, ElectLeadersResponse,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::admin::{check, Admin};
use crate::error::{ClientError, Result};

/// One partition's answer to a batch request: done, or the broker's refusal.
#[derive(Debug)]
pub struct PartitionResult {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// `Ok` when the change was made.
    pub result: Result<()>,
}

/// A reassignment in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OngoingReassignment {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Every replica now: the target ones first, then those being removed.
    pub replicas: Vec<i32>,
    /// Replicas being added (copying).
    pub adding: Vec<i32>,
    /// Replicas removed once the added ones are in sync.
    pub removing: Vec<i32>,
}

/// Which leaders to elect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// Move leadership to the preferred (first) replica where it is live and in sync.
    Preferred,
    /// Give a leaderless partition any live replica, in sync or not (may lose data).
    Unclean,
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

fn ids(nodes: &[BrokerId]) -> Vec<i32> {
    nodes.iter().map(|b| b.0).collect()
}

/// `(topic, partition)` pairs grouped by topic, in first-seen order.
fn grouped<T: Clone>(items: &[(String, i32, T)]) -> Vec<(String, Vec<(i32, T)>)> {
    let mut topics: Vec<(String, Vec<(i32, T)>)> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (topic, partition, value) in items {
        let entry = (*partition, value.clone());
        match index.get(topic.as_str()) {
            Some(&i) => topics[i].1.push(entry),
            None => {
                index.insert(topic, topics.len());
                topics.push((topic.clone(), vec![entry]));
            }
        }
    }
    topics
}

/// Partition indexes grouped by topic, in first-seen order.
fn indexes_by_topic(partitions: &[(String, i32)]) -> Vec<(String, Vec<i32>)> {
    let keyed: Vec<(String, i32, ())> = partitions
        .iter()
        .map(|(t, p)| (t.clone(), *p, ()))
        .collect();
    grouped(&keyed)
        .into_iter()
        .map(|(topic, indexes)| (topic, indexes.into_iter().map(|(i, ())| i).collect()))
        .collect()
}

impl Admin {
    /// Moves each `(topic, partition)` to its replicas (preferred leader first), or cancels
    /// its move in progress (`None`). The move itself goes on in the cluster: the new replicas
    /// copy the leader and the old ones are dropped once every new one is in sync; follow it
    /// with [`Admin::list_reassignments`].
    pub async fn alter_reassignments(
        &self,
        moves: &[(String, i32, Option<Vec<i32>>)],
        allow_replication_factor_change: bool,
    ) -> Result<Vec<PartitionResult>> {
        let mut request = AlterPartitionReassignmentsRequest::default();
        request.timeout_ms = self.timeout_ms();
        request.allow_replication_factor_change = allow_replication_factor_change;
        for (topic, partitions) in grouped(moves) {
            let mut reassignable = ReassignableTopic::default();
            reassignable.name = topic_name(&topic);
            for (index, replicas) in partitions {
                let mut partition = ReassignablePartition::default();
                partition.partition_index = index;
                partition.replicas = replicas.map(|r| r.into_iter().map(BrokerId).collect());
                reassignable.partitions.push(partition);
            }
            request.topics.push(reassignable);
        }
        let connection = self.cluster.controller().await?;
        let response: AlterPartitionReassignmentsResponse = connection
            .call(ApiKey::AlterPartitionReassignments, 1, &request)
            .await?;
        check(response.error_code, response.error_message.as_ref())?;
        Ok(response
            .responses
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| PartitionResult {
                    topic: t.name.0.to_string(),
                    partition: p.partition_index,
                    result: check(p.error_code, p.error_message.as_ref()),
                })
            })
            .collect())
    }

    /// The reassignments in progress, of every partition (`None`) or of the given ones.
    pub async fn list_reassignments(
        &self,
        partitions: Option<&[(String, i32)]>,
    ) -> Result<Vec<OngoingReassignment>> {
        let mut request = ListPartitionReassignmentsRequest::default();
        request.timeout_ms = self.timeout_ms();
        request.topics = partitions.map(|partitions| {
            indexes_by_topic(partitions)
                .into_iter()
                .map(|(topic, indexes)| {
                    let mut wanted = ListPartitionReassignmentsTopics::default();
                    wanted.name = topic_name(&topic);
                    wanted.partition_indexes = indexes;
                    wanted
                })
                .collect()
        });
        let connection = self.cluster.controller().await?;
        let response: ListPartitionReassignmentsResponse = connection
            .call(ApiKey::ListPartitionReassignments, 0, &request)
            .await?;
        check(response.error_code, response.error_message.as_ref())?;
        Ok(response
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| OngoingReassignment {
                    topic: t.name.0.to_string(),
                    partition: p.partition_index,
                    replicas: ids(&p.replicas),
                    adding: ids(&p.adding_replicas),
                    removing: ids(&p.removing_replicas),
                })
            })
            .collect())
    }

    /// Elects leaders for the given partitions, or for every partition (`None`; then only
    /// partitions that needed an election are answered).
    pub async fn elect_leaders(
        &self,
        election: Election,
        partitions: Option<&[(String, i32)]>,
    ) -> Result<Vec<PartitionResult>> {
        let mut request = ElectLeadersRequest::default();
        request.timeout_ms = self.timeout_ms();
        request.election_type = match election {
            Election::Preferred => 0,
            Election::Unclean => 1,
        };
        request.topic_partitions = partitions.map(|partitions| {
            indexes_by_topic(partitions)
                .into_iter()
                .map(|(topic, indexes)| {
                    let mut wanted = TopicPartitions::default();
                    wanted.topic = topic_name(&topic);
                    wanted.partitions = indexes;
                    wanted
                })
                .collect()
        });
        let connection = self.cluster.controller().await?;
        let response: ElectLeadersResponse =
            connection.call(ApiKey::ElectLeaders, 2, &request).await?;
        check(response.error_code, None)?;
        for (topic, _) in partitions.unwrap_or_default() {
            self.cluster.invalidate(topic).await;
        }
        Ok(response
            .replica_election_results
            .iter()
            .flat_map(|t| {
                t.partition_result.iter().map(move |p| PartitionResult {
                    topic: t.topic.0.to_string(),
                    partition: p.partition_id,
                    result: check(p.error_code, p.error_message.as_ref()),
                })
            })
            .collect())
    }
}

impl Admin {
    /// The size in bytes of each of `partitions` that broker `node_id` holds a replica of
    /// (DescribeLogDirs): how far a replica being copied has got.
    pub async fn replica_sizes(
        &self,
        node_id: i32,
        partitions: &[(String, i32)],
    ) -> Result<BTreeMap<(String, i32), u64>> {
        let mut request = DescribeLogDirsRequest::default();
        request.topics = Some(
            indexes_by_topic(partitions)
                .into_iter()
                .map(|(topic, indexes)| {
                    let mut wanted = DescribableLogDirTopic::default();
                    wanted.topic = topic_name(&topic);
                    wanted.partitions = indexes;
                    wanted
                })
                .collect(),
        );
        let connection = self.cluster.broker(node_id).await?;
        let response: DescribeLogDirsResponse = connection
            .call(ApiKey::DescribeLogDirs, 1, &request)
            .await?;
        check(response.error_code, None)?;
        let mut sizes = BTreeMap::new();
        for dir in &response.results {
            check(dir.error_code, None)?;
            for topic in &dir.topics {
                for p in &topic.partitions {
                    let size = u64::try_from(p.partition_size).unwrap_or(0);
                    sizes.insert((topic.name.0.to_string(), p.partition_index), size);
                }
            }
        }
        Ok(sizes)
    }
}

impl ClientError {
    /// Whether this is Kafka's ELECTION_NOT_NEEDED (the leader is already the one asked for).
    pub fn is_election_not_needed(&self) -> bool {
        matches!(self, ClientError::Broker { code: 84, .. })
    }
}
