//! Requests scenarios share: topics made and waited for, record batches, produce and fetch
//! requests, and what a fetched record set says (decoded, since its bytes carry times a
//! broker stamps).

use std::iter::empty;
use std::ops::ControlFlow;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, CreateTopicsRequest, CreateTopicsResponse, FetchRequest, ListOffsetsRequest,
    ListOffsetsResponse, MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use weir_codec::compression::Levels;
use weir_codec::encode::{put_record, seal};
use weir_codec::header::{BatchHeader, ProducerFields};
use weir_codec::records::each_record;

use crate::session::Ctx;

/// Codec names by the id a batch's attributes carry.
const CODECS: [&str; 5] = ["None", "Gzip", "Snappy", "Lz4", "Zstd"];

/// The one topic config whose source differs by design of the reference: Kafka 4 formats a
/// cluster with `min.insync.replicas` as a dynamic broker default (for eligible leader
/// replicas, which Weir does not have). Scenarios that
/// compare whole config lists leave it out; `configs::min_insync_replicas_source` shows it.
pub const KAFKA_DYNAMIC_DEFAULT: &str = "min.insync.replicas";

/// Weir's own topic config (when to fsync), which Kafka does not have; whole config lists
/// are compared without it, and `configs::weir_flush_policy` shows it.
pub const WEIR_OWN_CONFIG: &str = "flush.policy";

/// Whether a config takes part in comparisons of whole config lists.
pub fn compared_config(name: &str) -> bool {
    name != KAFKA_DYNAMIC_DEFAULT && name != WEIR_OWN_CONFIG
}

/// Longest wait for a new topic's partitions to have a leader.
const TOPIC_READY_DEADLINE: Duration = Duration::from_secs(20);

/// A string for a request field.
pub fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// A CreateTopics entry: `partitions` partitions, one replica, `configs`.
pub fn creatable(name: TopicName, partitions: i32, configs: &[(&str, &str)]) -> CreatableTopic {
    let mut topic = CreatableTopic::default();
    topic.name = name;
    topic.num_partitions = partitions;
    topic.replication_factor = 1;
    topic.configs = configs
        .iter()
        .map(|(key, value)| {
            let mut config = CreatableTopicConfig::default();
            config.name = s(key);
            config.value = Some(s(value));
            config
        })
        .collect();
    topic
}

/// A CreateTopics request for `topics` with a 10 s timeout.
pub fn create_request(topics: Vec<CreatableTopic>) -> CreateTopicsRequest {
    let mut request = CreateTopicsRequest::default();
    request.topics = topics;
    request.timeout_ms = 10_000;
    request
}

/// Creates topic `base` (unrecorded) and waits until every partition has a leader.
pub async fn create_topic(
    cx: &mut Ctx,
    base: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> Result<TopicName> {
    let name = cx.topic(base);
    let request = create_request(vec![creatable(name.clone(), partitions, configs)]);
    let response: CreateTopicsResponse = cx.quietly(ApiKey::CreateTopics, 7, &request).await?;
    let topic = response.topics.first().context("CreateTopics: no topic")?;
    if topic.error_code != 0 {
        bail!(
            "creating {}: error {} {:?}",
            name.0,
            topic.error_code,
            topic.error_message
        );
    }
    wait_for_leaders(cx, &name, partitions).await?;
    Ok(name)
}

/// Waits until Metadata shows `partitions` partitions of `name`, each with a leader.
pub async fn wait_for_leaders(cx: &mut Ctx, name: &TopicName, partitions: i32) -> Result<()> {
    let deadline = tokio::time::Instant::now() + TOPIC_READY_DEADLINE;
    loop {
        let mut topic = MetadataRequestTopic::default();
        topic.name = Some(name.clone());
        let mut request = MetadataRequest::default();
        request.topics = Some(vec![topic]);
        let response: MetadataResponse = cx.quietly(ApiKey::Metadata, 12, &request).await?;
        let ready = response.topics.first().is_some_and(|t| {
            t.error_code == 0
                && t.partitions.len() == partitions as usize
                && t.partitions
                    .iter()
                    .all(|p| p.error_code == 0 && p.leader_id.0 >= 0)
        });
        if ready && partitions_answer(cx, name, partitions).await? {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("{} has no leader after {TOPIC_READY_DEADLINE:?}", name.0);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// True when every partition's leader answers ListOffsets: Kafka's metadata may name a
/// leader a moment before that leader serves the partition.
async fn partitions_answer(cx: &mut Ctx, name: &TopicName, partitions: i32) -> Result<bool> {
    let every: Vec<(i32, i64)> = (0..partitions).map(|p| (p, -1)).collect();
    let request = list_offsets_request(name, &every, -1);
    let response: ListOffsetsResponse = cx.quietly(ApiKey::ListOffsets, 8, &request).await?;
    Ok(response
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .all(|p| p.error_code == 0))
}

/// A ListOffsets request for `(partition, timestamp)` of one topic, at `epoch` (-1: any).
pub fn list_offsets_request(
    topic: &TopicName,
    partitions: &[(i32, i64)],
    epoch: i32,
) -> ListOffsetsRequest {
    let mut t = ListOffsetsTopic::default();
    t.name = topic.clone();
    t.partitions = partitions
        .iter()
        .map(|(partition, timestamp)| {
            let mut p = ListOffsetsPartition::default();
            p.partition_index = *partition;
            p.timestamp = *timestamp;
            p.current_leader_epoch = epoch;
            p
        })
        .collect();
    let mut request = ListOffsetsRequest::default();
    request.replica_id = BrokerId(-1);
    request.topics = vec![t];
    request
}

/// One batch of `(key, value)` records at the run's timestamp, uncompressed, no producer id.
pub fn batch(cx: &Ctx, records: &[(Option<&str>, &str)]) -> Bytes {
    batch_with(cx.timestamp_ms(), Compression::None, records)
}

/// One batch of `(key, value)` records at `timestamp_ms` with `compression`.
pub fn batch_with(
    timestamp_ms: i64,
    compression: Compression,
    records: &[(Option<&str>, &str)],
) -> Bytes {
    producer_batch_with(timestamp_ms, compression, (-1, -1, -1), records)
}

/// One uncompressed batch of an idempotent producer: `(producer id, epoch, base sequence)`
/// (-1s for none).
pub fn producer_batch(
    timestamp_ms: i64,
    (producer_id, producer_epoch, base_sequence): (i64, i16, i32),
    records: &[(Option<&str>, &str)],
) -> Bytes {
    let producer = (producer_id, producer_epoch, base_sequence);
    producer_batch_with(timestamp_ms, Compression::None, producer, records)
}

/// One uncompressed batch of a transactional producer: `(producer id, epoch, base sequence)`.
pub fn transactional_batch(
    timestamp_ms: i64,
    producer: (i64, i16, i32),
    records: &[(Option<&str>, &str)],
) -> Bytes {
    sealed(
        timestamp_ms,
        Compression::None,
        producer,
        records,
        ATTR_TRANSACTIONAL,
    )
}

/// The attributes bit of a transactional batch.
const ATTR_TRANSACTIONAL: i16 = 0x10;

fn producer_batch_with(
    timestamp_ms: i64,
    compression: Compression,
    producer: (i64, i16, i32),
    records: &[(Option<&str>, &str)],
) -> Bytes {
    sealed(timestamp_ms, compression, producer, records, 0)
}

/// A batch of `records` with `attributes` added to the compression's.
fn sealed(
    timestamp_ms: i64,
    compression: Compression,
    (producer_id, producer_epoch, base_sequence): (i64, i16, i32),
    records: &[(Option<&str>, &str)],
    attributes: i16,
) -> Bytes {
    let mut encoded = Vec::new();
    for (i, (key, value)) in records.iter().enumerate() {
        let key = key.map(str::as_bytes);
        put_record(
            &mut encoded,
            i as i32,
            0,
            key,
            Some(value.as_bytes()),
            empty(),
        );
    }
    let producer = ProducerFields {
        producer_id,
        producer_epoch,
        base_sequence,
    };
    let count = records.len() as i32;
    let mut header = BatchHeader::new(
        count,
        compression as i16,
        timestamp_ms,
        timestamp_ms,
        producer,
    );
    header.attributes |= attributes;
    Bytes::from(seal(&header, &encoded, Levels::DEFAULT))
}

/// A Produce request of `records` to one partition.
pub fn produce_request(
    topic: TopicName,
    partition: i32,
    acks: i16,
    records: Bytes,
) -> ProduceRequest {
    let mut data = PartitionProduceData::default();
    data.index = partition;
    data.records = Some(records);
    let mut topic_data = TopicProduceData::default();
    topic_data.name = topic;
    topic_data.partition_data = vec![data];
    let mut request = ProduceRequest::default();
    request.acks = acks;
    request.timeout_ms = 10_000;
    request.topic_data = vec![topic_data];
    request
}

/// Appends `records` (unrecorded) with acks=all, retrying while the partition's leader is
/// not ready yet (Kafka's metadata may name a leader a moment before it leads); returns the
/// base offset.
pub async fn produce(
    cx: &mut Ctx,
    topic: &TopicName,
    partition: i32,
    records: Bytes,
) -> Result<i64> {
    /// UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER.
    const NOT_READY: [i16; 3] = [3, 5, 6];
    let deadline = tokio::time::Instant::now() + TOPIC_READY_DEADLINE;
    let request = produce_request(topic.clone(), partition, -1, records);
    loop {
        let response: ProduceResponse = cx.quietly(ApiKey::Produce, 9, &request).await?;
        let answer = response
            .responses
            .first()
            .and_then(|t| t.partition_responses.first())
            .context("Produce: no partition")?;
        match answer.error_code {
            0 => return Ok(answer.base_offset),
            code if NOT_READY.contains(&code) && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            code => bail!("producing to {}: error {code}", topic.0),
        }
    }
}

/// A Fetch request for one partition from `offset`, answered at once.
pub fn fetch_request(topic: TopicName, partition: i32, offset: i64) -> FetchRequest {
    let mut p = FetchPartition::default();
    p.partition = partition;
    p.fetch_offset = offset;
    p.partition_max_bytes = 1 << 20;
    p.current_leader_epoch = -1;
    p.log_start_offset = -1;
    let mut t = FetchTopic::default();
    t.topic = topic;
    t.partitions = vec![p];
    let mut request = FetchRequest::default();
    request.replica_id = kafka_protocol::messages::BrokerId(-1);
    request.max_wait_ms = 0;
    request.min_bytes = 0;
    request.max_bytes = 1 << 20;
    request.session_epoch = -1;
    request.topics = vec![t];
    request
}

/// What a client reads from a record set: per batch its base offset, timestamp type and
/// compression, per record its offset, timestamp, key and value; a transactional batch's
/// records say so with the producer epoch, and a transaction marker is shown by its type and
/// epoch (its timestamp and coordinator epoch are each broker's own).
pub fn describe_records(records: Option<&Bytes>) -> String {
    let Some(records) = records else {
        return "null".into();
    };
    let mut rest = &records[..];
    let mut out = Vec::new();
    while let Some(header) = BatchHeader::parse(rest) {
        let Some(batch) = usize::try_from(header.total_bytes())
            .ok()
            .and_then(|length| rest.get(..length))
        else {
            break; // a batch the fetch cut short
        };
        rest = &rest[batch.len()..];
        let codec = CODECS
            .get(header.compression() as usize)
            .copied()
            .unwrap_or("unknown codec");
        let time_type = if header.is_log_append_time() {
            "LogAppend"
        } else {
            "Creation"
        };
        let epoch = header.producer_epoch;
        let walked = each_record::<true, false, _>(batch, &header, 1 << 30, &mut |record| {
            let offset = header.base_offset + i64::from(record.index);
            if header.is_control() {
                out.push(format!(
                    "offset {offset} {} marker, epoch {epoch}",
                    marker_type(record.key)
                ));
                return Ok(ControlFlow::Continue(()));
            }
            let transactional = if header.is_transactional() {
                format!(" in a transaction, epoch {epoch}")
            } else {
                String::new()
            };
            let timestamp = if header.is_log_append_time() {
                "<append time>".to_string()
            } else {
                record.timestamp.to_string()
            };
            out.push(format!(
                "offset {offset} {time_type} ts {timestamp} {codec} key {:?} value {:?} ({:?}){transactional}",
                record.key.map(String::from_utf8_lossy),
                record.value.map(String::from_utf8_lossy),
                record.headers().count(),
            ));
            Ok(ControlFlow::Continue(()))
        });
        if let Err(e) = walked {
            out.push(format!("undecodable: {e}"));
            break;
        }
    }
    if out.is_empty() {
        "no records".into()
    } else {
        out.join("\n")
    }
}

/// The type a transaction marker's key names (version and type, two big-endian i16s).
fn marker_type(key: Option<&[u8]>) -> String {
    match key {
        Some([_, _, 0, 0]) => "ABORT".into(),
        Some([_, _, 0, 1]) => "COMMIT".into(),
        other => format!("unknown control record (key {other:?})"),
    }
}
