//! Records over HTTP: publish (one record or a batch, acknowledged per record with its
//! partition and offset) and read a partition from an offset or a time, with long polling.
//!
//! A record's key, value and header values are strings: UTF-8 text, or base64 when the
//! record says `"encoding": "base64"`. Records read back come in the same shape, as text when
//! every field is valid UTF-8 and as base64 otherwise (or when asked), so a record read can be
//! published again unchanged.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::Bytes;
use serde::de::{Error as _, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use weir_client::{
    Acks, ClientConfig, ClientError, Cluster, Consumer, ConsumerConfig, ConsumerRecord, OffsetSpec,
    Producer, ProducerConfig, ProducerRecord,
};
use weir_metadata::acl::{AclOperation, ResourceType};
use weir_metadata::is_internal_topic;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Fields, JsonBody, Object, PathParams, QueryParams};
use crate::Gateway;

/// Records one publish may carry.
pub const PUBLISH_RECORDS_MAX: usize = 10_000;
/// Records one read returns at most.
pub const READ_RECORDS_MAX: usize = 10_000;
/// Bytes of stored records one read asks the partition for at most.
pub const READ_BYTES_MAX: i32 = 8 * 1024 * 1024;
/// Longest a read waits for records to arrive.
pub const READ_WAIT_MS_MAX: u64 = 30_000;

/// Long polls waiting at once, each on a connection of its own to the node's Kafka listener
/// (well inside the listener's `max.connections.per.ip`).
const LONG_POLLS_MAX: usize = 256;

static LONG_POLLS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(LONG_POLLS_MAX);

/// Time a long poll's fetch may take beyond its wait before it counts as timed out.
const LONG_POLL_TIMEOUT_MARGIN: Duration = Duration::from_secs(10);

/// How a record's key, value and header values are written as strings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// UTF-8 text.
    #[default]
    Text,
    /// Base64 (standard alphabet, padded).
    Base64,
}

/// A record header.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    key: String,
    value: Option<String>,
}

/// A record to publish.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordIn {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    headers: Vec<Object<Header>>,
    /// Explicit partition; otherwise a keyed record goes where murmur2 puts it (as a Java
    /// client would) and a keyless one to the producer's sticky partition.
    #[serde(default)]
    partition: Option<i32>,
    /// Timestamp in ms since the epoch; now when absent.
    #[serde(default)]
    timestamp: Option<i64>,
    #[serde(default)]
    encoding: Encoding,
}

/// The body of a publish: one record, or `{"records": [...]}`. Read as it streams in, so a
/// batch is refused at its record past [`PUBLISH_RECORDS_MAX`] without holding the rest.
pub struct PublishIn(Vec<RecordIn>);

impl<'de> Deserialize<'de> for PublishIn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(PublishVisitor)
    }
}

struct PublishVisitor;

impl<'de> Visitor<'de> for PublishVisitor {
    type Value = PublishIn;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a record, or an object with only `records`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PublishIn, A::Error> {
        let Some(first) = map.next_key::<String>()? else {
            return Err(A::Error::custom("an empty object is not a record"));
        };
        if first == "records" {
            let BoundedRecords(records) = map.next_value()?;
            if let Some(other) = map.next_key::<String>()? {
                return Err(A::Error::custom(format!(
                    "unknown field `{other}` beside `records`"
                )));
            }
            return Ok(PublishIn(records));
        }
        let mut fields = serde_json::Map::new();
        fields.insert(first, map.next_value()?);
        let fields = Fields(fields).visit_map(map)?;
        RecordIn::deserialize(serde_json::Value::Object(fields))
            .map(|record| PublishIn(vec![record]))
            .map_err(A::Error::custom)
    }
}

/// The records of a batch: refused at the first past [`PUBLISH_RECORDS_MAX`].
struct BoundedRecords(Vec<RecordIn>);

impl<'de> Deserialize<'de> for BoundedRecords {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Records;
        impl<'de> Visitor<'de> for Records {
            type Value = BoundedRecords;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("an array of records")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<BoundedRecords, A::Error> {
                let mut records = Vec::new();
                while let Some(Object(record)) = seq.next_element::<Object<RecordIn>>()? {
                    if records.len() == PUBLISH_RECORDS_MAX {
                        return Err(A::Error::custom(format!(
                            "a publish carries 1 to {PUBLISH_RECORDS_MAX} records"
                        )));
                    }
                    records.push(record);
                }
                Ok(BoundedRecords(records))
            }
        }
        deserializer.deserialize_seq(Records)
    }
}

/// Query parameters of a publish.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishParams {
    /// `all` (-1, the default), `1` (leader) or `0` (none: no offsets returned).
    #[serde(default)]
    acks: Option<String>,
}

/// How far ahead of now a published record's timestamp may be: Kafka's default
/// `message.timestamp.after.max.ms`. Refused here, not by the broker, because the broker
/// refuses a whole batch and the gateway's producers batch records of different requests.
const TIMESTAMP_AHEAD_MAX_MS: i64 = 3_600_000;

/// Producers of the gateway, one per acks level, created when first used and shared by every
/// request (so concurrent publishes are batched together).
pub struct Publisher {
    client: ClientConfig,
    producers: [OnceLock<Producer>; 3],
}

impl Publisher {
    /// Producers for the cluster `client` reaches.
    pub fn new(client: ClientConfig) -> Publisher {
        Publisher {
            client,
            producers: [OnceLock::new(), OnceLock::new(), OnceLock::new()],
        }
    }

    fn producer(&self, acks: Acks) -> &Producer {
        let slot = match acks {
            Acks::All => 0,
            Acks::Leader => 1,
            Acks::None => 2,
        };
        self.producers[slot].get_or_init(|| {
            let mut config = ProducerConfig::new("");
            config.client = self.client.clone();
            config.acks = acks;
            config.idempotence = acks == Acks::All;
            config.linger = Duration::ZERO;
            config.delivery_timeout = Duration::from_secs(30);
            // A full buffer answers 429 at once rather than holding the request.
            config.block_when_full = false;
            Producer::new(config)
        })
    }
}

fn parse_acks(acks: Option<&str>) -> Result<Acks, ApiError> {
    match acks.unwrap_or("all") {
        "all" | "-1" => Ok(Acks::All),
        "1" | "leader" => Ok(Acks::Leader),
        "0" | "none" => Ok(Acks::None),
        other => Err(ApiError::invalid(format!(
            "acks={other:?}: use all (or -1), 1 or 0"
        ))),
    }
}

fn decode_field(
    text: Option<&str>,
    encoding: Encoding,
    what: &str,
) -> Result<Option<Bytes>, ApiError> {
    let Some(text) = text else {
        return Ok(None);
    };
    match encoding {
        Encoding::Text => Ok(Some(Bytes::copy_from_slice(text.as_bytes()))),
        Encoding::Base64 => BASE64
            .decode(text)
            .map(|bytes| Some(Bytes::from(bytes)))
            .map_err(|error| ApiError::invalid(format!("{what} is not valid base64: {error}"))),
    }
}

fn producer_record(
    topic: &str,
    index: usize,
    record: RecordIn,
) -> Result<ProducerRecord, ApiError> {
    let at = |field: &str| format!("records[{index}].{field}");
    if record.partition.is_some_and(|p| p < 0) {
        return Err(ApiError::invalid(format!(
            "{} must not be negative",
            at("partition")
        )));
    }
    if record.timestamp.is_some_and(|t| t < 0) {
        return Err(ApiError::invalid(format!(
            "{} must not be negative",
            at("timestamp")
        )));
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    if record
        .timestamp
        .is_some_and(|t| t > now_ms.saturating_add(TIMESTAMP_AHEAD_MAX_MS))
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_timestamp",
            format!(
                "{} is more than {TIMESTAMP_AHEAD_MAX_MS} ms in the future",
                at("timestamp")
            ),
        ));
    }
    let mut headers = Vec::with_capacity(record.headers.len());
    for (i, Object(header)) in record.headers.iter().enumerate() {
        let value = decode_field(
            header.value.as_deref(),
            record.encoding,
            &at(&format!("headers[{i}].value")),
        )?;
        headers.push((header.key.clone(), value));
    }
    Ok(ProducerRecord {
        topic: topic.to_string(),
        partition: record.partition,
        key: decode_field(record.key.as_deref(), record.encoding, &at("key"))?,
        value: decode_field(record.value.as_deref(), record.encoding, &at("value"))?,
        headers,
        timestamp: record.timestamp,
    })
}

/// Where one published record went, or why it did not.
#[derive(Serialize)]
pub struct Published {
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<i32>,
    /// The record's offset; null with acks=0.
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorBody>,
}

/// The answer of a publish: each record's partition and offset, in order.
#[derive(Serialize)]
pub struct PublishAnswer {
    offsets: Vec<Published>,
}

/// `POST /topics/{topic}/publish`: publishes one record (the body is a record) or a batch
/// (`{"records": [...]}`) and answers, in order, each record's partition and offset. When
/// every record failed the answer is the first one's error; when only some did, each failed
/// record carries its error.
pub async fn publish(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    PathParams(topic): PathParams<String>,
    QueryParams(params): QueryParams<PublishParams>,
    JsonBody(PublishIn(records)): JsonBody<PublishIn>,
) -> Result<Json<PublishAnswer>, ApiError> {
    caller.require(AclOperation::Write, ResourceType::Topic, &topic)?;
    let acks = parse_acks(params.acks.as_deref())?;
    if is_internal_topic(&topic) {
        // Refused by the broker too, but with acks=0 only by closing the connection.
        return Err(ApiError::invalid(format!(
            "{topic} is internal: it holds a coordinator's state and takes no records from clients"
        )));
    }
    if records.is_empty() || records.len() > PUBLISH_RECORDS_MAX {
        return Err(ApiError::invalid(format!(
            "a publish carries 1 to {PUBLISH_RECORDS_MAX} records, not {}",
            records.len()
        )));
    }
    let records = records
        .into_iter()
        .enumerate()
        .map(|(i, r)| producer_record(&topic, i, r))
        .collect::<Result<Vec<_>, _>>()?;
    let producer = gateway.publisher.producer(acks);
    let mut pending = Vec::with_capacity(records.len());
    for record in records {
        pending.push(producer.send(record).await);
    }
    let mut results: Vec<Result<(i32, i64), ClientError>> = Vec::with_capacity(pending.len());
    for sent in pending {
        results.push(match sent {
            Ok(delivery) => delivery.await.map(|m| (m.partition, m.offset)),
            Err(error) => Err(error),
        });
    }
    if let Some(Err(first)) = results.first() {
        if results.iter().all(Result::is_err) {
            return Err(first.clone().into());
        }
    }
    let offsets: Vec<Published> = results
        .into_iter()
        .map(|result| match result {
            Ok((partition, offset)) => Published {
                partition: Some(partition),
                offset: (offset >= 0).then_some(offset),
                error: None,
            },
            Err(error) => Published {
                partition: None,
                offset: None,
                error: Some(ApiError::from(error).body()),
            },
        })
        .collect();
    Ok(Json(PublishAnswer { offsets }))
}

/// Query parameters of a read.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// Start at this offset.
    #[serde(default)]
    offset: Option<i64>,
    /// Start at the first record at or after this time (ms since the epoch).
    #[serde(default)]
    timestamp: Option<i64>,
    /// Records at most (default 100).
    #[serde(default)]
    max: Option<usize>,
    /// Bytes of stored records to read at most (default 1 MiB).
    #[serde(default)]
    max_bytes: Option<i32>,
    /// Wait up to this long for records when there are none yet (default 0).
    #[serde(default)]
    wait_ms: Option<u64>,
    /// `auto` (text when valid UTF-8, the default) or `base64`.
    #[serde(default)]
    encoding: Option<String>,
}

/// Whether the `encoding` parameter of a read asks for base64: `auto` (the default: text
/// when valid UTF-8) or `base64`.
pub fn force_base64(encoding: Option<&str>) -> Result<bool, ApiError> {
    match encoding.unwrap_or("auto") {
        "auto" => Ok(false),
        "base64" => Ok(true),
        other => Err(ApiError::invalid(format!(
            "encoding={other:?}: use auto or base64"
        ))),
    }
}

/// A record read.
#[derive(Serialize)]
pub struct RecordOut {
    offset: i64,
    timestamp: i64,
    key: Option<String>,
    value: Option<String>,
    headers: Vec<Header>,
    encoding: Encoding,
}

impl RecordOut {
    /// The record as JSON: text when every field is readable text, UTF-8 without control
    /// characters other than tab and line breaks (unless `force_base64`), base64 otherwise.
    pub fn of(record: ConsumerRecord, force_base64: bool) -> RecordOut {
        let readable = |bytes: &Bytes| {
            std::str::from_utf8(bytes).is_ok_and(|s| {
                !s.chars()
                    .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
            })
        };
        let text = !force_base64
            && [&record.key, &record.value]
                .into_iter()
                .chain(record.headers.iter().map(|(_, v)| v))
                .all(|field| field.as_ref().is_none_or(readable));
        let encode = |bytes: &Option<Bytes>| {
            bytes.as_ref().map(|b| match text {
                true => String::from_utf8_lossy(b).into_owned(),
                false => BASE64.encode(b),
            })
        };
        RecordOut {
            offset: record.offset,
            timestamp: record.timestamp,
            key: encode(&record.key),
            value: encode(&record.value),
            headers: record
                .headers
                .iter()
                .map(|(key, value)| Header {
                    key: key.clone(),
                    value: encode(value),
                })
                .collect(),
            encoding: if text {
                Encoding::Text
            } else {
                Encoding::Base64
            },
        }
    }
}

/// The answer of a read.
#[derive(Serialize)]
pub struct ReadAnswer {
    topic: String,
    partition: i32,
    records: Vec<RecordOut>,
    /// Where the next read should start.
    next_offset: i64,
    /// The partition's high watermark when read (null when the broker did not say).
    high_watermark: Option<i64>,
}

/// The `max` of a read or poll: 100 when absent, 1 to [`READ_RECORDS_MAX`].
pub fn read_max(max: Option<usize>) -> Result<usize, ApiError> {
    match max.unwrap_or(100) {
        max @ 1..=READ_RECORDS_MAX => Ok(max),
        _ => Err(ApiError::invalid(format!(
            "max must be 1 to {READ_RECORDS_MAX}"
        ))),
    }
}

/// The `wait_ms` of a read or poll: `default` when absent, at most [`READ_WAIT_MS_MAX`].
pub fn read_wait_ms(wait_ms: Option<u64>, default: u64) -> Result<u64, ApiError> {
    match wait_ms.unwrap_or(default) {
        wait_ms @ 0..=READ_WAIT_MS_MAX => Ok(wait_ms),
        _ => Err(ApiError::invalid(format!(
            "wait_ms must be at most {READ_WAIT_MS_MAX}"
        ))),
    }
}

/// `GET /topics/{topic}/partitions/{partition}/records`: records from an offset (or a
/// time, or the start), at most `max`, waiting up to `wait_ms` when there are none yet.
pub async fn read(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    PathParams((topic, partition)): PathParams<(String, i32)>,
    QueryParams(params): QueryParams<ReadParams>,
) -> Result<Json<ReadAnswer>, ApiError> {
    caller.require(AclOperation::Read, ResourceType::Topic, &topic)?;
    let max = read_max(params.max)?;
    let max_bytes = params.max_bytes.unwrap_or(1024 * 1024);
    if !(1..=READ_BYTES_MAX).contains(&max_bytes) {
        return Err(ApiError::invalid(format!(
            "max_bytes must be 1 to {READ_BYTES_MAX}"
        )));
    }
    let wait_ms = read_wait_ms(params.wait_ms, 0)?;
    let force_base64 = force_base64(params.encoding.as_deref())?;
    if params.offset.is_some() && params.timestamp.is_some() {
        return Err(ApiError::invalid("give offset or timestamp, not both"));
    }
    if params.offset.is_some_and(|o| o < 0) || params.timestamp.is_some_and(|t| t < 0) {
        return Err(ApiError::invalid(
            "offset and timestamp must not be negative",
        ));
    }
    let cluster = gateway.admin.cluster().clone();
    cluster.invalidate(&topic).await;
    let info = cluster.topic(&topic, false).await?;
    if partition < 0 || partition as usize >= info.partitions.len() {
        return Err(ApiError::not_found(
            "unknown_partition",
            format!(
                "topic {topic} has {} partitions; there is no partition {partition}",
                info.partitions.len()
            ),
        ));
    }
    let spec = match (params.offset, params.timestamp) {
        (Some(offset), _) => OffsetSpec::At(offset),
        (None, Some(timestamp)) => OffsetSpec::Timestamp(timestamp),
        (None, None) => OffsetSpec::Earliest,
    };
    let start = match gateway.admin.list_offset(&topic, partition, spec).await? {
        Some(offset) => offset,
        // No record at or after that time: read from the end.
        None => gateway
            .admin
            .list_offset(&topic, partition, OffsetSpec::Latest)
            .await?
            .unwrap_or(0),
    };
    // A broker answers one connection's requests in order, so a long poll gets a connection
    // of its own (with its wait inside its request timeout) rather than holding up every
    // other request of the gateway's shared one. Past LONG_POLLS_MAX at once, a read answers
    // with what there is now.
    let long_poll = match wait_ms {
        0 => None,
        _ => LONG_POLLS.try_acquire().ok(),
    };
    let (cluster, wait_ms) = match &long_poll {
        Some(_) => {
            let mut client = cluster.config().clone();
            client.request_timeout = Duration::from_millis(wait_ms) + LONG_POLL_TIMEOUT_MARGIN;
            (Cluster::new(client), wait_ms)
        }
        None => (cluster, 0),
    };
    let mut config = ConsumerConfig::new("");
    config.client = cluster.config().clone();
    config.fetch_max_bytes = max_bytes;
    config.partition_max_bytes = max_bytes;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    let (mut records, high_watermark) = loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        config.fetch_max_wait = left;
        let (records, high_watermark) =
            Consumer::fetch_once(cluster.clone(), config.clone(), &topic, partition, start).await?;
        if !records.is_empty() || left.is_zero() {
            break (records, high_watermark);
        }
        // Nothing came back before the wait ran out: leadership moved or the broker answered
        // with an error to retry. Pause before asking again.
        tokio::time::sleep(left.min(Duration::from_millis(20))).await;
    };
    records.truncate(max);
    let next_offset = records.last().map_or(start, |r| r.offset + 1);
    let records: Vec<RecordOut> = records
        .into_iter()
        .map(|r| RecordOut::of(r, force_base64))
        .collect();
    Ok(Json(ReadAnswer {
        topic,
        partition,
        records,
        next_offset,
        high_watermark,
    }))
}
