//! Admin operations: topics, partitions, configs, offsets and cluster status.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{describe_quorum_request, describe_quorum_response};
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse, DescribeClusterRequest,
    DescribeClusterResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    DescribeQuorumRequest, DescribeQuorumResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::cluster::{BrokerInfo, ClientConfig, Cluster, TopicInfo};
use crate::consumer::{list_offset, OffsetSpec};
use crate::error::{ClientError, Result};

/// Resource type code of a topic in config APIs.
const RESOURCE_TOPIC: i8 = 2;

/// A config entry as the broker describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// Kafka's name.
    pub name: String,
    /// Current value (`None` when sensitive or unset).
    pub value: Option<String>,
    /// Where it came from: Kafka's source name (`TOPIC_CONFIG`, `DEFAULT_CONFIG`, …).
    pub source: &'static str,
}

/// A topic with its partitions' offsets.
#[derive(Debug, Clone)]
pub struct TopicDescription {
    /// Metadata: id, partitions, leaders, replicas, ISR.
    pub info: TopicInfo,
    /// Per partition: (log start offset, high watermark).
    pub offsets: Vec<(i64, i64)>,
}

/// What the cluster looks like.
#[derive(Debug, Clone)]
pub struct ClusterStatus {
    /// Cluster id.
    pub cluster_id: String,
    /// Controller node id.
    pub controller: i32,
    /// Brokers.
    pub brokers: Vec<BrokerInfo>,
    /// Number of topics.
    pub topics: usize,
    /// Number of partitions over all topics.
    pub partitions: usize,
    /// Partitions whose ISR is smaller than their replica set (offline ones included).
    pub under_replicated: Vec<PartitionHealth>,
}

/// One partition that is not fully replicated: where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionHealth {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
    /// Its leader, or -1 when it has none (offline).
    pub leader: i32,
    /// Its replicas.
    pub replicas: Vec<i32>,
    /// Its in-sync replicas.
    pub isr: Vec<i32>,
}

/// The metadata quorum as its leader reports it (Kafka's DescribeQuorum).
#[derive(Debug, Clone)]
pub struct QuorumInfo {
    /// The controller leading the quorum.
    pub leader: i32,
    /// The leader's epoch (its Raft term).
    pub epoch: i32,
    /// The metadata log's high watermark: entries below it are committed.
    pub high_watermark: i64,
    /// Each voter, with how far its log reaches.
    pub voters: Vec<QuorumVoter>,
    /// Each observer (a broker-only node following the quorum without a vote).
    pub observers: Vec<QuorumVoter>,
}

/// One voter of the metadata quorum.
#[derive(Debug, Clone)]
pub struct QuorumVoter {
    /// Its node id.
    pub node_id: i32,
    /// Its log end offset, or -1 when unknown.
    pub log_end_offset: i64,
    /// When the leader last heard from it (ms since the epoch), or -1 when unknown.
    pub last_fetch_timestamp: i64,
}

fn quorum_voter(state: &describe_quorum_response::ReplicaState) -> QuorumVoter {
    QuorumVoter {
        node_id: state.replica_id.0,
        log_end_offset: state.log_end_offset,
        last_fetch_timestamp: state.last_fetch_timestamp,
    }
}

/// Admin client.
///
/// ```no_run
/// # async fn example() -> weir_client::Result<()> {
/// use weir_client::{Admin, ClientConfig};
/// let admin = Admin::new(ClientConfig::new("127.0.0.1:9092"));
/// admin.create_topic("orders", 3, 1, &[("retention.ms", "86400000")]).await?;
/// println!("{:?}", admin.list_topics().await?);
/// # Ok(()) }
/// ```
pub struct Admin {
    pub(crate) cluster: Arc<Cluster>,
}

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn source_name(code: i8) -> &'static str {
    match code {
        1 => "TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        _ => "UNKNOWN",
    }
}

/// The broker's error for `code`, if any.
pub(crate) fn check(code: i16, message: Option<&StrBytes>) -> Result<()> {
    match ClientError::from_code(code, message.map(|m| m.as_str().to_string())) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

impl Admin {
    /// An admin client for the cluster at `config.bootstrap`.
    pub fn new(config: ClientConfig) -> Admin {
        Admin {
            cluster: Cluster::new(config),
        }
    }

    /// The cluster view this admin client uses (shared connections and metadata), for callers
    /// that also read or fetch.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Creates a topic; `replication_factor` -1 means the broker default.
    pub async fn create_topic(
        &self,
        topic: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &[(&str, &str)],
    ) -> Result<()> {
        let mut t = CreatableTopic::default();
        t.name = name(topic);
        t.num_partitions = partitions;
        t.replication_factor = replication_factor;
        t.configs = configs
            .iter()
            .map(|(k, v)| {
                let mut c = CreatableTopicConfig::default();
                c.name = StrBytes::from_string(k.to_string());
                c.value = Some(StrBytes::from_string(v.to_string()));
                c
            })
            .collect();
        let mut request = CreateTopicsRequest::default();
        request.topics = vec![t];
        request.timeout_ms = self.timeout_ms();
        let connection = self.cluster.controller().await?;
        let response: CreateTopicsResponse =
            connection.call(ApiKey::CreateTopics, 7, &request).await?;
        let result = response
            .topics
            .first()
            .ok_or_else(|| ClientError::Protocol("empty CreateTopics response".into()))?;
        check(result.error_code, result.error_message.as_ref())?;
        self.wait_for_leaders(topic).await
    }

    /// Waits until every partition of a new topic has a leader: a multi-broker cluster (Kafka's
    /// included) answers CreateTopics before its brokers have taken leadership.
    async fn wait_for_leaders(&self, topic: &str) -> Result<()> {
        let deadline = tokio::time::Instant::now() + self.cluster.config().request_timeout;
        loop {
            self.cluster.invalidate(topic).await;
            match self.cluster.topic(topic, false).await {
                Ok(info)
                    if !info.partitions.is_empty()
                        && info
                            .partitions
                            .iter()
                            .all(|p| p.leader >= 0 && p.error_code == 0) =>
                {
                    return Ok(())
                }
                Ok(_) | Err(ClientError::UnknownTopic(_)) => {}
                Err(error) if error.is_retriable() => {}
                Err(error) => return Err(error),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ClientError::Timeout(
                    self.cluster.config().request_timeout.as_millis() as u64,
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Deletes a topic.
    pub async fn delete_topic(&self, topic: &str) -> Result<()> {
        let mut request = DeleteTopicsRequest::default();
        request.topic_names = vec![name(topic)];
        request.timeout_ms = self.timeout_ms();
        let connection = self.cluster.controller().await?;
        let response: DeleteTopicsResponse =
            connection.call(ApiKey::DeleteTopics, 5, &request).await?;
        let result = response
            .responses
            .first()
            .ok_or_else(|| ClientError::Protocol("empty DeleteTopics response".into()))?;
        if result.error_code == 3 {
            return Err(ClientError::UnknownTopic(topic.to_string()));
        }
        self.cluster.invalidate(topic).await;
        check(result.error_code, result.error_message.as_ref())
    }

    /// Raises a topic's partition count to `total` (Kafka's meaning: the new total).
    pub async fn add_partitions(&self, topic: &str, total: i32) -> Result<()> {
        let mut t = CreatePartitionsTopic::default();
        t.name = name(topic);
        t.count = total;
        t.assignments = None;
        let mut request = CreatePartitionsRequest::default();
        request.topics = vec![t];
        request.timeout_ms = self.timeout_ms();
        let connection = self.cluster.controller().await?;
        let response: CreatePartitionsResponse = connection
            .call(ApiKey::CreatePartitions, 3, &request)
            .await?;
        let result = response
            .results
            .first()
            .ok_or_else(|| ClientError::Protocol("empty CreatePartitions response".into()))?;
        if result.error_code == 3 {
            return Err(ClientError::UnknownTopic(topic.to_string()));
        }
        self.cluster.invalidate(topic).await;
        check(result.error_code, result.error_message.as_ref())
    }

    /// Every topic name, sorted.
    pub async fn list_topics(&self) -> Result<Vec<String>> {
        let response = self.cluster.refresh(None, false).await?;
        let mut names: Vec<String> = response
            .topics
            .iter()
            .filter_map(|t| t.name.as_ref().map(|n| n.0.as_str().to_string()))
            .collect();
        names.sort();
        Ok(names)
    }

    /// A topic's partitions, leaders, replicas, ISR and offsets.
    pub async fn describe_topic(&self, topic: &str) -> Result<TopicDescription> {
        self.cluster.invalidate(topic).await;
        let info = self.cluster.topic(topic, false).await?;
        let mut offsets = Vec::with_capacity(info.partitions.len());
        for partition in &info.partitions {
            let start = list_offset(
                &self.cluster,
                topic,
                partition.partition,
                OffsetSpec::Earliest,
            )
            .await?
            .unwrap_or(0);
            let end = list_offset(
                &self.cluster,
                topic,
                partition.partition,
                OffsetSpec::Latest,
            )
            .await?
            .unwrap_or(0);
            offsets.push((start, end));
        }
        Ok(TopicDescription { info, offsets })
    }

    /// Every config of a topic with its value and source.
    pub async fn describe_configs(&self, topic: &str) -> Result<Vec<ConfigEntry>> {
        let mut resource = DescribeConfigsResource::default();
        resource.resource_type = RESOURCE_TOPIC;
        resource.resource_name = StrBytes::from_string(topic.to_string());
        resource.configuration_keys = None;
        let mut request = DescribeConfigsRequest::default();
        request.resources = vec![resource];
        let connection = self.cluster.any_broker().await?;
        let response: DescribeConfigsResponse = connection
            .call(ApiKey::DescribeConfigs, 4, &request)
            .await?;
        let result = response
            .results
            .first()
            .ok_or_else(|| ClientError::Protocol("empty DescribeConfigs response".into()))?;
        if result.error_code == 3 {
            return Err(ClientError::UnknownTopic(topic.to_string()));
        }
        check(result.error_code, result.error_message.as_ref())?;
        Ok(result
            .configs
            .iter()
            .map(|c| ConfigEntry {
                name: c.name.as_str().to_string(),
                value: c.value.as_ref().map(|v| v.as_str().to_string()),
                source: source_name(c.config_source),
            })
            .collect())
    }

    /// Sets and deletes topic config overrides (incrementally; others are untouched).
    pub async fn alter_configs(
        &self,
        topic: &str,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Result<()> {
        let mut configs: Vec<AlterableConfig> = Vec::new();
        for (key, value) in set {
            let mut c = AlterableConfig::default();
            c.name = StrBytes::from_string(key.clone());
            c.config_operation = 0;
            c.value = Some(StrBytes::from_string(value.clone()));
            configs.push(c);
        }
        for key in delete {
            let mut c = AlterableConfig::default();
            c.name = StrBytes::from_string(key.clone());
            c.config_operation = 1;
            c.value = None;
            configs.push(c);
        }
        let mut resource = AlterConfigsResource::default();
        resource.resource_type = RESOURCE_TOPIC;
        resource.resource_name = StrBytes::from_string(topic.to_string());
        resource.configs = configs;
        let mut request = IncrementalAlterConfigsRequest::default();
        request.resources = vec![resource];
        let connection = self.cluster.controller().await?;
        let response: IncrementalAlterConfigsResponse = connection
            .call(ApiKey::IncrementalAlterConfigs, 1, &request)
            .await?;
        let result = response.responses.first().ok_or_else(|| {
            ClientError::Protocol("empty IncrementalAlterConfigs response".into())
        })?;
        if result.error_code == 3 {
            return Err(ClientError::UnknownTopic(topic.to_string()));
        }
        check(result.error_code, result.error_message.as_ref())
    }

    /// An offset of a partition: earliest, latest, or the first at or after a timestamp.
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        spec: OffsetSpec,
    ) -> Result<Option<i64>> {
        list_offset(&self.cluster, topic, partition, spec).await
    }

    /// Brokers, controller, topic and partition counts, under-replicated partitions.
    pub async fn cluster_status(&self) -> Result<ClusterStatus> {
        let metadata = self.cluster.refresh(None, false).await?;
        let connection = self.cluster.any_broker().await?;
        let described: Result<DescribeClusterResponse> = connection
            .call(
                ApiKey::DescribeCluster,
                1,
                &DescribeClusterRequest::default(),
            )
            .await;
        let (brokers, controller, cluster_id) = self.cluster.brokers().await;
        let (cluster_id, controller) = match described {
            Ok(d) if d.error_code == 0 => (d.cluster_id.as_str().to_string(), d.controller_id.0),
            _ => (cluster_id.unwrap_or_default(), controller),
        };
        let partitions: Vec<_> = metadata
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t, p)))
            .collect();
        let ids = |nodes: &[BrokerId]| nodes.iter().map(|b| b.0).collect::<Vec<i32>>();
        let under_replicated = partitions
            .iter()
            .filter(|(_, p)| p.isr_nodes.len() < p.replica_nodes.len() || p.leader_id.0 < 0)
            .map(|(t, p)| PartitionHealth {
                topic: t
                    .name
                    .as_ref()
                    .map_or_else(String::new, |n| n.0.to_string()),
                partition: p.partition_index,
                leader: p.leader_id.0,
                replicas: ids(&p.replica_nodes),
                isr: ids(&p.isr_nodes),
            })
            .collect();
        Ok(ClusterStatus {
            cluster_id,
            controller,
            brokers,
            topics: metadata.topics.len(),
            partitions: partitions.len(),
            under_replicated,
        })
    }

    /// The metadata quorum: leader, epoch, high watermark and voters (DescribeQuorum v1).
    pub async fn describe_quorum(&self) -> Result<QuorumInfo> {
        let mut partition = describe_quorum_request::PartitionData::default();
        partition.partition_index = 0;
        let mut topic = describe_quorum_request::TopicData::default();
        topic.topic_name = TopicName(StrBytes::from_static_str("__cluster_metadata"));
        topic.partitions = vec![partition];
        let mut request = DescribeQuorumRequest::default();
        request.topics = vec![topic];
        let connection = self.cluster.any_broker().await?;
        let response: DescribeQuorumResponse =
            connection.call(ApiKey::DescribeQuorum, 1, &request).await?;
        check(response.error_code, response.error_message.as_ref())?;
        let partition = response
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .ok_or_else(|| ClientError::Protocol("empty DescribeQuorum response".into()))?;
        check(partition.error_code, partition.error_message.as_ref())?;
        Ok(QuorumInfo {
            leader: partition.leader_id.0,
            epoch: partition.leader_epoch,
            high_watermark: partition.high_watermark,
            voters: partition.current_voters.iter().map(quorum_voter).collect(),
            observers: partition.observers.iter().map(quorum_voter).collect(),
        })
    }

    pub(crate) fn timeout_ms(&self) -> i32 {
        self.cluster
            .config()
            .request_timeout
            .as_millis()
            .min(i32::MAX as u128) as i32
    }
}
