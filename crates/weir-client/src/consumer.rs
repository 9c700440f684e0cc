//! The consumer, by partition assignment: fetch from an offset, the earliest, the latest or a
//! timestamp; the next fetch is sent while the caller processes the current records.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio::task::JoinHandle;

use crate::cluster::{ClientConfig, Cluster};
use crate::error::{ClientError, Result};
use crate::records::decode_batches;

/// Where to start reading a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The first retained offset.
    Earliest,
    /// The end: only records written from now on.
    Latest,
    /// An exact offset.
    At(i64),
    /// The first record with a timestamp at or after this (ms).
    Timestamp(i64),
}

/// Consumer settings.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Connection settings.
    pub client: ClientConfig,
    /// Longest a fetch waits for data at the broker.
    pub fetch_max_wait: Duration,
    /// Bytes a fetch asks for at most, over all partitions.
    pub fetch_max_bytes: i32,
    /// Bytes a fetch asks for at most, per partition.
    pub partition_max_bytes: i32,
    /// Read only committed records (the last stable offset).
    pub read_committed: bool,
}

impl ConsumerConfig {
    /// Defaults like the Java client's.
    pub fn new(bootstrap: &str) -> ConsumerConfig {
        ConsumerConfig {
            client: ClientConfig::new(bootstrap),
            fetch_max_wait: Duration::from_millis(500),
            fetch_max_bytes: 50 * 1024 * 1024,
            partition_max_bytes: 8 * 1024 * 1024,
            read_committed: false,
        }
    }
}

/// One consumed record: the seed's record shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Timestamp (ms).
    pub timestamp: i64,
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
    /// Headers, in order.
    pub headers: Vec<(String, Option<Bytes>)>,
}

type TopicPartition = (String, i32);

/// What one fetch round brought: records, new positions, partition high watermarks.
struct FetchResult {
    records: Vec<ConsumerRecord>,
    positions: HashMap<TopicPartition, i64>,
    high_watermarks: HashMap<TopicPartition, i64>,
    error: Option<ClientError>,
}

/// A consumer of assigned partitions (for consumer groups, see `GroupConsumer`).
pub struct Consumer {
    cluster: Arc<Cluster>,
    config: ConsumerConfig,
    positions: BTreeMap<TopicPartition, i64>,
    high_watermarks: HashMap<TopicPartition, i64>,
    paused: HashSet<TopicPartition>,
    buffered: VecDeque<ConsumerRecord>,
    prefetch: Option<JoinHandle<FetchResult>>,
}

impl Consumer {
    /// A consumer with nothing assigned.
    ///
    /// ```no_run
    /// # async fn example() -> weir_client::Result<()> {
    /// use weir_client::{Consumer, ConsumerConfig, OffsetSpec};
    /// let mut consumer = Consumer::new(ConsumerConfig::new("127.0.0.1:9092"));
    /// consumer.assign("orders", 0, OffsetSpec::Earliest).await?;
    /// for record in consumer.poll(std::time::Duration::from_secs(1)).await? {
    ///     println!("{} {:?}", record.offset, record.value);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn new(config: ConsumerConfig) -> Consumer {
        Consumer {
            cluster: Cluster::new(config.client.clone()),
            config,
            positions: BTreeMap::new(),
            high_watermarks: HashMap::new(),
            paused: HashSet::new(),
            buffered: VecDeque::new(),
            prefetch: None,
        }
    }

    /// The cluster view this consumer uses.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Starts reading `partition` of `topic` at `from`; returns the resolved offset.
    pub async fn assign(&mut self, topic: &str, partition: i32, from: OffsetSpec) -> Result<i64> {
        let info = self.cluster.topic(topic, false).await?;
        if partition < 0 || partition as usize >= info.partitions.len() {
            return Err(ClientError::UnknownPartition {
                topic: topic.to_string(),
                partition,
            });
        }
        let offset = match from {
            OffsetSpec::At(offset) => offset,
            other => list_offset(&self.cluster, topic, partition, other)
                .await?
                .unwrap_or(-1),
        };
        let offset = if offset < 0 {
            list_offset(&self.cluster, topic, partition, OffsetSpec::Latest)
                .await?
                .unwrap_or(0)
        } else {
            offset
        };
        self.reset_prefetch();
        self.positions
            .insert((topic.to_string(), partition), offset);
        Ok(offset)
    }

    /// Moves the position of an assigned partition.
    pub async fn seek(&mut self, topic: &str, partition: i32, to: OffsetSpec) -> Result<i64> {
        self.assign(topic, partition, to).await
    }

    /// Stops reading `partition` of `topic` and forgets its position.
    pub fn unassign(&mut self, topic: &str, partition: i32) {
        self.reset_prefetch();
        let tp = (topic.to_string(), partition);
        self.positions.remove(&tp);
        self.high_watermarks.remove(&tp);
        self.paused.remove(&tp);
    }

    /// Stops fetching `partition` until [`Consumer::resume`].
    pub fn pause(&mut self, topic: &str, partition: i32) {
        self.reset_prefetch();
        self.paused.insert((topic.to_string(), partition));
    }

    /// Fetches a paused partition again.
    pub fn resume(&mut self, topic: &str, partition: i32) {
        self.reset_prefetch();
        self.paused.remove(&(topic.to_string(), partition));
    }

    /// The next offset to be read from each assigned partition.
    pub fn positions(&self) -> &BTreeMap<(String, i32), i64> {
        &self.positions
    }

    /// The high watermark last seen for a partition.
    pub fn high_watermark(&self, topic: &str, partition: i32) -> Option<i64> {
        self.high_watermarks
            .get(&(topic.to_string(), partition))
            .copied()
    }

    /// True when every assigned partition has been read to its last seen high watermark.
    pub fn at_end(&self) -> bool {
        self.buffered.is_empty()
            && self
                .positions
                .iter()
                .all(|(tp, pos)| self.high_watermarks.get(tp).is_some_and(|hw| pos >= hw))
    }

    fn reset_prefetch(&mut self) {
        if let Some(task) = self.prefetch.take() {
            task.abort();
        }
        self.buffered.clear();
    }

    /// Returns the records available now, waiting up to `timeout` for some to arrive.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        if !self.buffered.is_empty() {
            return Ok(self.buffered.drain(..).collect());
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let mut task = match self.prefetch.take() {
                Some(task) => task,
                None => self.spawn_fetch(),
            };
            let result = match tokio::time::timeout_at(deadline, &mut task).await {
                Ok(joined) => joined.map_err(|_| ClientError::Closed)?,
                Err(_) => {
                    // The fetch goes on: its answer (records, high watermarks) is the next
                    // poll's, never dropped.
                    self.prefetch = Some(task);
                    return Ok(Vec::new());
                }
            };
            self.high_watermarks.extend(result.high_watermarks);
            for (tp, position) in result.positions {
                if let Some(current) = self.positions.get_mut(&tp) {
                    *current = position;
                }
            }
            // Pipelining: the next fetch is in flight while the caller handles these records.
            self.prefetch = Some(self.spawn_fetch());
            if let Some(error) = result.error {
                return Err(error);
            }
            if !result.records.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(result.records);
            }
        }
    }

    /// One fetch of one partition from `offset` through `cluster`, with no consumer state:
    /// waits up to `config.fetch_max_wait` for records, and returns those at or after `offset`
    /// with the partition's high watermark (when the broker answered with one). For stateless
    /// readers such as an HTTP gateway, which share one cluster view across requests.
    pub async fn fetch_once(
        cluster: Arc<Cluster>,
        config: ConsumerConfig,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<(Vec<ConsumerRecord>, Option<i64>)> {
        let tp = (topic.to_string(), partition);
        let result = fetch_round(cluster, config, vec![(tp.clone(), offset)]).await;
        if let Some(error) = result.error {
            return Err(error);
        }
        Ok((result.records, result.high_watermarks.get(&tp).copied()))
    }

    fn spawn_fetch(&self) -> JoinHandle<FetchResult> {
        let wanted: Vec<(TopicPartition, i64)> = self
            .positions
            .iter()
            .filter(|(tp, _)| !self.paused.contains(*tp))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        let cluster = self.cluster.clone();
        let config = self.config.clone();
        tokio::spawn(async move { fetch_round(cluster, config, wanted).await })
    }
}

async fn fetch_round(
    cluster: Arc<Cluster>,
    config: ConsumerConfig,
    wanted: Vec<(TopicPartition, i64)>,
) -> FetchResult {
    let mut result = FetchResult {
        records: Vec::new(),
        positions: HashMap::new(),
        high_watermarks: HashMap::new(),
        error: None,
    };
    if wanted.is_empty() {
        tokio::time::sleep(config.fetch_max_wait).await;
        return result;
    }
    let mut by_leader: BTreeMap<i32, Vec<(TopicPartition, i64)>> = BTreeMap::new();
    for (tp, offset) in wanted {
        match cluster.topic(&tp.0, false).await {
            Ok(info) => {
                let leader = info.partitions.get(tp.1 as usize).map_or(-1, |p| p.leader);
                by_leader.entry(leader).or_default().push((tp, offset));
            }
            Err(error) => result.error = Some(error),
        }
    }
    let rounds = by_leader
        .into_iter()
        .map(|(leader, parts)| fetch_from(cluster.clone(), config.clone(), leader, parts));
    for (records, positions, high_watermarks, error) in futures_util::future::join_all(rounds).await
    {
        result.records.extend(records);
        result.positions.extend(positions);
        result.high_watermarks.extend(high_watermarks);
        if error.is_some() {
            result.error = error;
        }
    }
    result
}

type LeaderFetch = (
    Vec<ConsumerRecord>,
    HashMap<TopicPartition, i64>,
    HashMap<TopicPartition, i64>,
    Option<ClientError>,
);

async fn fetch_from(
    cluster: Arc<Cluster>,
    config: ConsumerConfig,
    leader: i32,
    parts: Vec<(TopicPartition, i64)>,
) -> LeaderFetch {
    let mut out: LeaderFetch = (Vec::new(), HashMap::new(), HashMap::new(), None);
    let connection = match cluster.broker(leader).await {
        Ok(connection) => connection,
        Err(error) => {
            for (tp, _) in &parts {
                cluster.invalidate(&tp.0).await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            out.3 = if error.is_retriable() {
                None
            } else {
                Some(error)
            };
            return out;
        }
    };
    let mut topics: Vec<FetchTopic> = Vec::new();
    for ((topic, partition), offset) in &parts {
        if topics.last().is_none_or(|t| t.topic.0.as_str() != topic) {
            let mut t = FetchTopic::default();
            t.topic = TopicName(StrBytes::from_string(topic.clone()));
            topics.push(t);
        }
        let mut p = FetchPartition::default();
        p.partition = *partition;
        p.fetch_offset = *offset;
        p.partition_max_bytes = config.partition_max_bytes;
        p.current_leader_epoch = -1;
        if let Some(t) = topics.last_mut() {
            t.partitions.push(p);
        }
    }
    let mut request = FetchRequest::default();
    request.replica_id = kafka_protocol::messages::BrokerId(-1);
    request.max_wait_ms = config.fetch_max_wait.as_millis() as i32;
    request.min_bytes = 1;
    request.max_bytes = config.fetch_max_bytes;
    request.isolation_level = i8::from(config.read_committed);
    request.session_epoch = -1;
    request.topics = topics;
    // Versions 4–12 name topics; 13+ need topic ids, which this client does not track yet.
    let response: FetchResponse = match connection.call(ApiKey::Fetch, 12, &request).await {
        Ok(response) => response,
        Err(error) => {
            out.3 = if error.is_retriable() {
                None
            } else {
                Some(error)
            };
            return out;
        }
    };
    for topic in response.responses {
        let name = topic.topic.0.as_str().to_string();
        for partition in topic.partitions {
            let tp = (name.clone(), partition.partition_index);
            let Some(start) = parts.iter().find(|(p, _)| *p == tp).map(|(_, o)| *o) else {
                continue;
            };
            if partition.error_code == ResponseError::NotLeaderOrFollower.code()
                || partition.error_code == ResponseError::UnknownTopicOrPartition.code()
            {
                cluster.invalidate(&name).await;
                continue;
            }
            if let Some(error) = ClientError::from_code(partition.error_code, None) {
                out.3 = Some(error);
                continue;
            }
            out.2.insert(tp.clone(), partition.high_watermark);
            let mut next = start;
            if let Some(bytes) = partition.records {
                match decode_batches(bytes) {
                    Ok(decoded) => {
                        // Past the whole batch: records compacted from its end and control
                        // batches are not fetched again.
                        next = next.max(decoded.next_offset.unwrap_or(start));
                        for record in decoded.records {
                            if record.offset < start {
                                continue;
                            }
                            out.0.push(ConsumerRecord {
                                topic: name.clone(),
                                partition: tp.1,
                                offset: record.offset,
                                timestamp: record.timestamp,
                                key: record.key,
                                value: record.value,
                                headers: record.headers,
                            });
                        }
                    }
                    Err(error) => out.3 = Some(error),
                }
            }
            out.1.insert(tp, next);
        }
    }
    out
}

/// Pause before asking again after leadership moved or a broker was unreachable.
const LIST_OFFSET_BACKOFF: Duration = Duration::from_millis(100);

/// Looks up an offset with ListOffsets; `None` when no record matches a timestamp. A
/// retriable error (leadership moved, the leader restarting) is retried against fresh
/// metadata until the client's request timeout, as Kafka's clients do.
pub(crate) async fn list_offset(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    spec: OffsetSpec,
) -> Result<Option<i64>> {
    let timestamp = match spec {
        OffsetSpec::Earliest => -2,
        OffsetSpec::Latest => -1,
        OffsetSpec::Timestamp(ts) => ts,
        OffsetSpec::At(offset) => return Ok(Some(offset)),
    };
    let deadline = tokio::time::Instant::now() + cluster.config().request_timeout;
    loop {
        match list_offset_once(cluster, topic, partition, timestamp).await {
            Err(error)
                if error.is_retriable()
                    && tokio::time::Instant::now() + LIST_OFFSET_BACKOFF < deadline =>
            {
                cluster.invalidate(topic).await;
                tokio::time::sleep(LIST_OFFSET_BACKOFF).await;
            }
            result => return result,
        }
    }
}

/// One ListOffsets request to the partition's leader as the cached metadata names it.
async fn list_offset_once(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    timestamp: i64,
) -> Result<Option<i64>> {
    let info = cluster.topic(topic, false).await?;
    let leader = info
        .partitions
        .get(partition as usize)
        .map_or(-1, |p| p.leader);
    let connection = cluster.broker(leader).await?;
    let mut p = ListOffsetsPartition::default();
    p.partition_index = partition;
    p.timestamp = timestamp;
    p.current_leader_epoch = -1;
    let mut t = ListOffsetsTopic::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = vec![p];
    let mut request = ListOffsetsRequest::default();
    request.replica_id = kafka_protocol::messages::BrokerId(-1);
    request.topics = vec![t];
    let response: ListOffsetsResponse = connection.call(ApiKey::ListOffsets, 7, &request).await?;
    let result = response
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or_else(|| {
            ClientError::Protocol("ListOffsets response without the partition".into())
        })?;
    if let Some(error) = ClientError::from_code(result.error_code, None) {
        return Err(error);
    }
    Ok((result.offset >= 0).then_some(result.offset))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use kafka_protocol::messages::list_offsets_response::{
        ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
    };
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{BrokerId, MetadataResponse, ResponseKind};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A one-node broker that leads partition 0 of topic `t` and answers the first
    /// `stale_answers` ListOffsets with NOT_LEADER_OR_FOLLOWER (leadership just moved to it),
    /// then with offset 42. Counts the ListOffsets it was sent.
    async fn broker_whose_leadership_just_moved(
        stale_answers: usize,
    ) -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = asked.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let counter = counter.clone();
                tokio::spawn(async move {
                    while let Ok(length) = socket.read_i32().await {
                        let mut frame = vec![0u8; length as usize];
                        socket.read_exact(&mut frame).await.expect("frame");
                        let key = i16::from_be_bytes([frame[0], frame[1]]);
                        let version = i16::from_be_bytes([frame[2], frame[3]]);
                        let correlation_id =
                            i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
                        let api = ApiKey::try_from(key).expect("api key");
                        let body = match api {
                            ApiKey::ApiVersions => {
                                ResponseKind::ApiVersions(weir_proto::api::api_versions_response(0))
                            }
                            ApiKey::Metadata => {
                                let mut broker = MetadataResponseBroker::default();
                                broker.node_id = BrokerId(1);
                                broker.host = StrBytes::from_static_str("127.0.0.1");
                                broker.port = i32::from(address.port());
                                let mut partition = MetadataResponsePartition::default();
                                partition.leader_id = BrokerId(1);
                                partition.replica_nodes = vec![BrokerId(1)];
                                partition.isr_nodes = vec![BrokerId(1)];
                                let mut topic = MetadataResponseTopic::default();
                                topic.name = Some(TopicName(StrBytes::from_static_str("t")));
                                topic.partitions = vec![partition];
                                let mut metadata = MetadataResponse::default();
                                metadata.brokers = vec![broker];
                                metadata.topics = vec![topic];
                                ResponseKind::Metadata(metadata)
                            }
                            ApiKey::ListOffsets => {
                                let seen = counter.fetch_add(1, Ordering::SeqCst);
                                let mut partition = ListOffsetsPartitionResponse::default();
                                if seen < stale_answers {
                                    partition.error_code =
                                        ResponseError::NotLeaderOrFollower.code();
                                } else {
                                    partition.offset = 42;
                                }
                                let mut topic = ListOffsetsTopicResponse::default();
                                topic.name = TopicName(StrBytes::from_static_str("t"));
                                topic.partitions = vec![partition];
                                let mut response = ListOffsetsResponse::default();
                                response.topics = vec![topic];
                                ResponseKind::ListOffsets(response)
                            }
                            other => panic!("unexpected request {other:?}"),
                        };
                        let answer =
                            weir_proto::encode_response(api, version, correlation_id, &body)
                                .expect("encode");
                        if socket.write_all(&answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (address.to_string(), asked)
    }

    #[tokio::test]
    async fn list_offset_asks_again_when_leadership_just_moved() {
        let (address, asked) = broker_whose_leadership_just_moved(2).await;
        let cluster = Cluster::new(ClientConfig::new(&address));
        let end = list_offset(&cluster, "t", 0, OffsetSpec::Latest).await;
        assert_eq!(end.expect("offset"), Some(42));
        assert_eq!(asked.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn list_offset_gives_up_at_the_request_timeout() {
        let (address, asked) = broker_whose_leadership_just_moved(usize::MAX).await;
        let mut config = ClientConfig::new(&address);
        config.request_timeout = Duration::from_millis(500);
        let cluster = Cluster::new(config);
        let end = list_offset(&cluster, "t", 0, OffsetSpec::Latest).await;
        assert_eq!(
            end.expect_err("never led").code(),
            Some(ResponseError::NotLeaderOrFollower.code())
        );
        assert!((2..=6).contains(&asked.load(Ordering::SeqCst)));
    }
}
