//! Hung transactions on [`Admin`]: transactions open at a partition long after any
//! transaction may run. Each holds its partition's last stable offset back, so read_committed
//! consumers stop there until it is aborted. Found as Kafka's `kafka-transactions
//! find-hanging` finds them (DescribeProducers of every partition, asked of its leader) and
//! ended as its `abort` ends one (an abort marker, WriteTxnMarkers, to the leader).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    ApiKey, DescribeConfigsRequest, DescribeConfigsResponse, DescribeProducersRequest,
    DescribeProducersResponse, TopicName, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::admin::{check, Admin};
use crate::connection::Connection;
use crate::error::{ClientError, Result};

/// Resource type code of a broker in config APIs.
const RESOURCE_BROKER: i8 = 4;
/// The broker config bounding every transaction's timeout.
const MAX_TIMEOUT_CONFIG: &str = "transaction.max.timeout.ms";
/// Kafka's default of [`MAX_TIMEOUT_CONFIG`], for a broker that does not report it.
const DEFAULT_MAX_TIMEOUT_MS: i64 = 900_000;
/// Longest the metadata, then each leader, is waited for when looking for hung transactions.
const LEADER_ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// A transaction open at a partition whose producer has not written there for longer than
/// the leader's `transaction.max.timeout.ms`: its coordinator would have aborted any
/// transaction it knows by then, so nothing will end this one but an abort marker
/// (`kafka-transactions abort`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HungTransaction {
    /// Its partition's topic.
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// The partition's leader, which reported it.
    pub leader: i32,
    /// The producer whose transaction it is.
    pub producer_id: i64,
    /// That producer's epoch.
    pub producer_epoch: i32,
    /// Offset of its first record on the partition: read_committed consumers stop there.
    pub start_offset: i64,
    /// How long ago its producer last wrote to the partition, in ms.
    pub idle_ms: i64,
    /// The leader's `transaction.max.timeout.ms`, the idle time past which it counts as hung.
    pub max_timeout_ms: i64,
}

/// The hung transactions found, and the leaders that could not be asked.
#[derive(Debug, Clone, Default)]
pub struct HungTransactions {
    /// Every hung transaction, by topic, partition and producer.
    pub found: Vec<HungTransaction>,
    /// Leaders not asked (down, or refusing), with why: their partitions are unknown.
    pub unasked: Vec<(i32, String)>,
}

impl Admin {
    /// Every hung transaction of the cluster: each partition's leader is asked which
    /// producers have a transaction open there (DescribeProducers) and its
    /// `transaction.max.timeout.ms` (DescribeConfigs), and a transaction whose producer has
    /// been idle there for longer than that is hung.
    pub async fn hung_transactions(&self) -> Result<HungTransactions> {
        let metadata =
            tokio::time::timeout(LEADER_ANSWER_TIMEOUT, self.cluster.refresh(None, false))
                .await
                .map_err(|_| ClientError::Timeout(LEADER_ANSWER_TIMEOUT.as_millis() as u64))??;
        let mut by_leader: BTreeMap<i32, BTreeMap<String, Vec<i32>>> = BTreeMap::new();
        for topic in &metadata.topics {
            let Some(name) = &topic.name else { continue };
            for partition in &topic.partitions {
                if partition.leader_id.0 >= 0 {
                    by_leader
                        .entry(partition.leader_id.0)
                        .or_default()
                        .entry(name.0.to_string())
                        .or_default()
                        .push(partition.partition_index);
                }
            }
        }
        // Every leader at once, each within its bound: one down or cut off delays nothing.
        let asked = by_leader
            .into_iter()
            .map(|(leader, partitions)| async move {
                let answer =
                    tokio::time::timeout(LEADER_ANSWER_TIMEOUT, self.hung_at(leader, partitions));
                (leader, answer.await)
            });
        let mut hung = HungTransactions::default();
        for (leader, answer) in join_all(asked).await {
            match answer {
                Ok(Ok(found)) => hung.found.extend(found),
                Ok(Err(error)) => hung.unasked.push((leader, error.to_string())),
                Err(_) => hung.unasked.push((
                    leader,
                    format!("no answer within {} s", LEADER_ANSWER_TIMEOUT.as_secs()),
                )),
            }
        }
        hung.found.sort_by(|a, b| {
            (&a.topic, a.partition, a.producer_id).cmp(&(&b.topic, b.partition, b.producer_id))
        });
        Ok(hung)
    }

    /// The hung transactions among `partitions`, which `leader` leads.
    async fn hung_at(
        &self,
        leader: i32,
        partitions: BTreeMap<String, Vec<i32>>,
    ) -> Result<Vec<HungTransaction>> {
        let connection = self.cluster.broker(leader).await?;
        let max_timeout_ms = max_timeout_ms(&connection, leader).await?;
        let mut request = DescribeProducersRequest::default();
        request.topics = partitions
            .into_iter()
            .map(|(name, indexes)| {
                let mut topic = TopicRequest::default();
                topic.name = TopicName(StrBytes::from_string(name));
                topic.partition_indexes = indexes;
                topic
            })
            .collect();
        let response: DescribeProducersResponse = connection
            .call(ApiKey::DescribeProducers, 0, &request)
            .await?;
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let mut found = Vec::new();
        for topic in response.topics {
            for partition in topic.partitions {
                // A partition whose leadership moved since the metadata is left out: its
                // new leader answers the next time.
                if partition.error_code != 0 {
                    continue;
                }
                for producer in partition.active_producers {
                    let idle_ms = now_ms.saturating_sub(producer.last_timestamp);
                    if producer.current_txn_start_offset >= 0 && idle_ms > max_timeout_ms {
                        found.push(HungTransaction {
                            topic: topic.name.0.to_string(),
                            partition: partition.partition_index,
                            leader,
                            producer_id: producer.producer_id.0,
                            producer_epoch: producer.producer_epoch,
                            start_offset: producer.current_txn_start_offset,
                            idle_ms,
                            max_timeout_ms,
                        });
                    }
                }
            }
        }
        Ok(found)
    }
}

/// The transaction an abort marker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedHung {
    /// The producer whose transaction it was.
    pub producer_id: i64,
    /// That producer's epoch, the marker's.
    pub producer_epoch: i16,
}

impl Admin {
    /// Ends the transaction open at `start_offset` of `topic`-`partition` with an abort
    /// marker, as `kafka-transactions abort` does: its leader names the producer
    /// (DescribeProducers) and writes the marker (WriteTxnMarkers). Its records are then
    /// skipped by read_committed consumers, which read on past them.
    pub async fn abort_hung_transaction(
        &self,
        topic: &str,
        partition: i32,
        start_offset: i64,
    ) -> Result<AbortedHung> {
        let info = self.cluster.topic(topic, false).await?;
        let leader = info
            .partitions
            .iter()
            .find(|p| p.partition == partition)
            .ok_or_else(|| ClientError::UnknownPartition {
                topic: topic.to_string(),
                partition,
            })?
            .leader;
        let connection = self.cluster.broker(leader).await?;
        let mut request = DescribeProducersRequest::default();
        let mut asked = TopicRequest::default();
        asked.name = TopicName(StrBytes::from_string(topic.to_string()));
        asked.partition_indexes = vec![partition];
        request.topics = vec![asked];
        let response: DescribeProducersResponse = connection
            .call(ApiKey::DescribeProducers, 0, &request)
            .await?;
        let described = response
            .topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .next()
            .ok_or_else(|| ClientError::Protocol("DescribeProducers answered nothing".into()))?;
        check(described.error_code, described.error_message.as_ref())?;
        let producer = described
            .active_producers
            .into_iter()
            .find(|p| p.current_txn_start_offset == start_offset)
            .ok_or_else(|| {
                ClientError::InvalidArgument(format!(
                    "no transaction is open at offset {start_offset} of {topic}-{partition}"
                ))
            })?;
        let producer_epoch = i16::try_from(producer.producer_epoch).map_err(|_| {
            ClientError::Protocol(format!(
                "producer epoch {} out of range",
                producer.producer_epoch
            ))
        })?;
        let mut marker = WritableTxnMarker::default();
        marker.producer_id = producer.producer_id;
        marker.producer_epoch = producer_epoch;
        marker.transaction_result = false;
        marker.coordinator_epoch = producer.coordinator_epoch.max(0);
        let mut marked = WritableTxnMarkerTopic::default();
        marked.name = TopicName(StrBytes::from_string(topic.to_string()));
        marked.partition_indexes = vec![partition];
        marker.topics = vec![marked];
        let mut request = WriteTxnMarkersRequest::default();
        request.markers = vec![marker];
        let response: WriteTxnMarkersResponse = connection
            .call(ApiKey::WriteTxnMarkers, 1, &request)
            .await?;
        let code = response
            .markers
            .iter()
            .flat_map(|m| &m.topics)
            .flat_map(|t| &t.partitions)
            .map(|p| p.error_code)
            .next()
            .ok_or_else(|| ClientError::Protocol("WriteTxnMarkers answered nothing".into()))?;
        check(code, None)?;
        Ok(AbortedHung {
            producer_id: producer.producer_id.0,
            producer_epoch,
        })
    }
}

/// `transaction.max.timeout.ms` of broker `node_id`, reached through `connection`.
async fn max_timeout_ms(connection: &Connection, node_id: i32) -> Result<i64> {
    let mut resource = DescribeConfigsResource::default();
    resource.resource_type = RESOURCE_BROKER;
    resource.resource_name = StrBytes::from_string(node_id.to_string());
    resource.configuration_keys = Some(vec![StrBytes::from_static_str(MAX_TIMEOUT_CONFIG)]);
    let mut request = DescribeConfigsRequest::default();
    request.resources = vec![resource];
    let response: DescribeConfigsResponse = connection
        .call(ApiKey::DescribeConfigs, 4, &request)
        .await?;
    let Some(result) = response.results.first() else {
        return Ok(DEFAULT_MAX_TIMEOUT_MS);
    };
    check(result.error_code, result.error_message.as_ref())?;
    Ok(result
        .configs
        .iter()
        .find(|c| c.name.as_str() == MAX_TIMEOUT_CONFIG)
        .and_then(|c| c.value.as_ref()?.as_str().parse().ok())
        .unwrap_or(DEFAULT_MAX_TIMEOUT_MS))
}
