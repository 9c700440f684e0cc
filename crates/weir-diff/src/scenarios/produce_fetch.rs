//! Produce and Fetch: appends, their refusals, and what a consumer reads back.

use std::time::Duration;

use anyhow::Result;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, ListOffsetsResponse, ProduceResponse, TopicName,
};
use kafka_protocol::records::Compression;

use super::{scenarios, Expect};
use crate::session::Ctx;
use crate::setup::{
    batch, batch_with, create_topic, describe_records, fetch_request, list_offsets_request,
    produce, produce_request, producer_batch,
};

scenarios! { "produce_fetch";
    produce_error_messages: Expect::Deliberate("a refused append says why in error_message"),
        "Produce refusals' error messages (the other scenarios leave them out)";
    produce_then_fetch: Expect::Same,
        "Produce v9 and v11 with acks all and 1, then Fetch v12 by name and v16 by id";
    idempotent_producer: Expect::Same,
        "An idempotent producer: in order, a duplicate, a gap, a new epoch, the old epoch, an unknown id";
    internal_topic_data: Expect::Same,
        "Produce to and Fetch from __consumer_offsets as a client";
    old_versions: Expect::Same,
        "Produce v3 and Fetch v4 and v7, the oldest versions both serve";
    fetch_positions: Expect::Same,
        "Fetch at the log end, past it, before the start, with a stale leader epoch";
    produce_refusals: Expect::Same,
        "Produce to an unknown topic, an unknown partition, with acks 2, with empty records";
    produce_acks0_unknown_topic: Expect::Same,
        "Produce acks=0 to an unknown topic: the broker closes the connection";
    produce_corrupt_batch: Expect::Same,
        "Produce a batch whose CRC does not match";
    produce_future_timestamp: Expect::Same,
        "Produce a record two hours ahead (message.timestamp.after.max.ms is one hour)";
    produce_too_large: Expect::Same,
        "Produce a batch above the topic's max.message.bytes";
    produce_compressed: Expect::Same,
        "Produce gzip, snappy, lz4 and zstd batches and fetch them back";
    fetch_unknown: Expect::Same,
        "Fetch v12 for an unknown topic and partition, v16 for an unknown topic id";
    fetch_session_new: Expect::Same,
        "Fetch v12 opening an incremental fetch session (KIP-227)";
    fetch_session_unknown: Expect::Same,
        "Fetch v12 in a session the broker never gave out";
    fetch_session_incremental: Expect::Same,
        "Fetch v12 and v16 sessions: only what changed is listed, forgotten partitions, wrong epoch, close";
    log_append_time_topic: Expect::Same,
        "A topic with message.timestamp.type=LogAppendTime: produce, fetch, ListOffsets -3";
    topic_compression_type: Expect::Same,
        "Topics with compression.type gzip, uncompressed and zstd: batches stored recompressed";
}

/// Records a fetch answer with each partition's records decoded (their bytes carry times).
fn record_fetch(cx: &mut Ctx, version: i16, mut response: FetchResponse) {
    let mut decoded = Vec::new();
    for topic in &mut response.responses {
        for partition in &mut topic.partitions {
            decoded.push(format!(
                "partition {}: {}",
                partition.partition_index,
                describe_records(partition.records.as_ref())
            ));
            partition.records = partition.records.as_ref().map(|_| Bytes::new());
        }
    }
    cx.record(&format!("Fetch v{version}"), &response);
    cx.note(&decoded.join("\n"));
}

async fn fetch(cx: &mut Ctx, version: i16, request: &FetchRequest) -> Result<()> {
    let response: FetchResponse = cx.quietly(ApiKey::Fetch, version, request).await?;
    record_fetch(cx, version, response);
    Ok(())
}

async fn produce_recorded(
    cx: &mut Ctx,
    version: i16,
    topic: &TopicName,
    partition: i32,
    acks: i16,
    records: Bytes,
) -> Result<()> {
    let request = produce_request(topic.clone(), partition, acks, records);
    let _: Option<ProduceResponse> = cx.ask(ApiKey::Produce, version, &request).await?;
    Ok(())
}

async fn topic_id(cx: &mut Ctx, topic: &TopicName) -> Result<uuid::Uuid> {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    let mut t = MetadataRequestTopic::default();
    t.name = Some(topic.clone());
    let mut request = MetadataRequest::default();
    request.topics = Some(vec![t]);
    let response: MetadataResponse = cx.quietly(ApiKey::Metadata, 12, &request).await?;
    Ok(response
        .topics
        .first()
        .map(|t| t.topic_id)
        .unwrap_or_default())
}

async fn produce_error_messages(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "messages", 1, &[("max.message.bytes", "200")]).await?;
    let records = batch(cx, &[(None, "x")]);
    produce_recorded(cx, 9, &cx.topic("nowhere"), 0, 1, records.clone()).await?;
    produce_recorded(cx, 9, &topic, 0, 2, records.clone()).await?;
    let mut two = BytesMut::from(&records[..]);
    two.extend_from_slice(&records);
    produce_recorded(cx, 9, &topic, 0, 1, two.freeze()).await?;
    let value = "v".repeat(300);
    produce_recorded(cx, 9, &topic, 0, 1, batch(cx, &[(None, value.as_str())])).await
}

async fn produce_then_fetch(cx: &mut Ctx) -> Result<()> {
    cx.ignore("error_message");
    let topic = create_topic(cx, "produced", 2, &[]).await?;
    let first = batch(cx, &[(Some("k1"), "one"), (None, "two")]);
    produce_recorded(cx, 9, &topic, 0, -1, first).await?;
    let second = batch(cx, &[(Some("k3"), "three")]);
    produce_recorded(cx, 11, &topic, 0, 1, second).await?;
    fetch(cx, 12, &fetch_request(topic.clone(), 0, 0)).await?;
    let mut by_id = fetch_request(TopicName::default(), 0, 1);
    by_id.topics[0].topic_id = topic_id(cx, &topic).await?;
    fetch(cx, 16, &by_id).await
}

async fn idempotent_producer(cx: &mut Ctx) -> Result<()> {
    use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
    cx.ignore("error_message");
    let topic = create_topic(cx, "idempotent", 1, &[]).await?;
    let mut init = InitProducerIdRequest::default();
    init.transaction_timeout_ms = 60_000;
    init.producer_id = ProducerId(-1);
    init.producer_epoch = -1;
    let granted: InitProducerIdResponse = cx.quietly(ApiKey::InitProducerId, 4, &init).await?;
    let (id, epoch) = (granted.producer_id.0, granted.producer_epoch);
    let ts = cx.timestamp_ms();
    let cases: [((i64, i16, i32), &str); 7] = [
        ((id, epoch, 0), "first"),
        ((id, epoch, 2), "second"),
        ((id, epoch, 2), "second again"),
        ((id, epoch, 7), "after a gap"),
        ((id, epoch + 1, 0), "new epoch"),
        ((id, epoch, 4), "old epoch"),
        ((id + 1_000_000, 0, 3), "unknown producer"),
    ];
    for (producer, value) in cases {
        let records = producer_batch(ts, producer, &[(None, value), (None, value)]);
        produce_recorded(cx, 9, &topic, 0, -1, records).await?;
    }
    fetch(cx, 12, &fetch_request(topic, 0, 0)).await
}

async fn internal_topic_data(cx: &mut Ctx) -> Result<()> {
    super::cluster::coordinator_ready(cx).await?;
    cx.ignore("error_message");
    let offsets = TopicName(crate::setup::s("__consumer_offsets"));
    let records = batch(cx, &[(Some("k"), "not a commit")]);
    produce_recorded(cx, 9, &offsets, 0, 1, records).await?;
    // What each broker keeps there is its own; compare the answer's shape.
    let response: FetchResponse = cx
        .quietly(ApiKey::Fetch, 12, &fetch_request(offsets, 0, 0))
        .await?;
    for topic in &response.responses {
        for p in &topic.partitions {
            cx.note(&format!(
                "partition {} error {}",
                p.partition_index, p.error_code
            ));
        }
    }
    Ok(())
}

async fn old_versions(cx: &mut Ctx) -> Result<()> {
    cx.ignore("error_message");
    let topic = create_topic(cx, "old-versions", 1, &[]).await?;
    let records = batch(cx, &[(Some("k"), "v3")]);
    produce_recorded(cx, 3, &topic, 0, 1, records).await?;
    for version in [4, 7] {
        let mut request = fetch_request(topic.clone(), 0, 0);
        request.session_epoch = if version >= 7 { -1 } else { 0 };
        request.topics[0].partitions[0].log_start_offset = if version >= 5 { -1 } else { 0 };
        request.topics[0].partitions[0].current_leader_epoch = if version >= 9 { -1 } else { 0 };
        fetch(cx, version, &request).await?;
    }
    Ok(())
}

async fn fetch_positions(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "positions", 1, &[]).await?;
    let records = batch(cx, &[(None, "a"), (None, "b")]);
    produce(cx, &topic, 0, records).await?;
    for offset in [2, 3, -1] {
        fetch(cx, 12, &fetch_request(topic.clone(), 0, offset)).await?;
    }
    let mut stale = fetch_request(topic.clone(), 0, 0);
    stale.topics[0].partitions[0].current_leader_epoch = 7;
    fetch(cx, 12, &stale).await?;
    let mut waits = fetch_request(topic, 0, 2);
    waits.max_wait_ms = 200;
    waits.min_bytes = 1;
    fetch(cx, 12, &waits).await
}

async fn produce_refusals(cx: &mut Ctx) -> Result<()> {
    cx.ignore("error_message");
    let topic = create_topic(cx, "refusals", 1, &[]).await?;
    let records = batch(cx, &[(None, "x")]);
    produce_recorded(cx, 9, &cx.topic("nowhere"), 0, 1, records.clone()).await?;
    produce_recorded(cx, 9, &topic, 5, 1, records.clone()).await?;
    produce_recorded(cx, 9, &topic, 0, 2, records.clone()).await?;
    // (Null records are left out: Kafka 4.4 never answers them.)
    produce_recorded(cx, 9, &topic, 0, 1, Bytes::new()).await
}

async fn produce_acks0_unknown_topic(cx: &mut Ctx) -> Result<()> {
    let records = batch(cx, &[(None, "x")]);
    let request = produce_request(cx.topic("nowhere-acks0"), 0, 0, records);
    cx.wire().send(ApiKey::Produce, 9, &request).await?;
    let closed = cx.wire().closed_within(Duration::from_secs(3)).await?;
    cx.note(&format!("connection closed within 3 s: {closed}"));
    Ok(())
}

async fn produce_corrupt_batch(cx: &mut Ctx) -> Result<()> {
    cx.ignore("error_message");
    let topic = create_topic(cx, "corrupt", 1, &[]).await?;
    let mut records = BytesMut::from(&batch(cx, &[(None, "will be flipped")])[..]);
    let last = records.len() - 1;
    records[last] ^= 0xff;
    produce_recorded(cx, 9, &topic, 0, 1, records.freeze()).await?;
    fetch(cx, 12, &fetch_request(topic, 0, 0)).await
}

async fn produce_future_timestamp(cx: &mut Ctx) -> Result<()> {
    cx.ignore("error_message");
    // The message names the window's bounds, which are each broker's own clock.
    cx.ignore("batch_index_error_message");
    let topic = create_topic(cx, "future", 1, &[]).await?;
    let ahead = cx.timestamp_ms() + 2 * 3_600_000;
    let records = batch_with(
        ahead,
        Compression::None,
        &[(None, "from the future"), (None, "too")],
    );
    produce_recorded(cx, 9, &topic, 0, 1, records).await?;
    fetch(cx, 12, &fetch_request(topic, 0, 0)).await
}

async fn produce_too_large(cx: &mut Ctx) -> Result<()> {
    cx.ignore("error_message");
    let topic = create_topic(cx, "small", 1, &[("max.message.bytes", "200")]).await?;
    let value = "v".repeat(300);
    let records = batch(cx, &[(None, value.as_str())]);
    produce_recorded(cx, 9, &topic, 0, 1, records).await
}

async fn produce_compressed(cx: &mut Ctx) -> Result<()> {
    cx.ignore("error_message");
    let topic = create_topic(cx, "compressed", 1, &[]).await?;
    for compression in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let records = batch_with(
            cx.timestamp_ms(),
            compression,
            &[(Some("k"), "compressed"), (None, "twice")],
        );
        produce_recorded(cx, 9, &topic, 0, 1, records).await?;
    }
    fetch(cx, 12, &fetch_request(topic, 0, 0)).await
}

async fn fetch_unknown(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "fetch-unknown", 1, &[]).await?;
    fetch(cx, 12, &fetch_request(cx.topic("nowhere"), 0, 0)).await?;
    fetch(cx, 12, &fetch_request(topic, 3, 0)).await?;
    let mut by_id = fetch_request(TopicName::default(), 0, 0);
    by_id.topics[0].topic_id = uuid::Uuid::from_u128(77);
    fetch(cx, 16, &by_id).await
}

async fn fetch_session_new(cx: &mut Ctx) -> Result<()> {
    cx.mask("session_id");
    let topic = create_topic(cx, "session", 1, &[]).await?;
    let records = batch(cx, &[(None, "s")]);
    produce(cx, &topic, 0, records).await?;
    let mut request = fetch_request(topic, 0, 0);
    request.session_id = 0;
    request.session_epoch = 0;
    fetch(cx, 12, &request).await
}

/// Sends a fetch in a session and records its answer; returns the session id it names.
async fn session_fetch(cx: &mut Ctx, version: i16, request: &FetchRequest) -> Result<i32> {
    let response: FetchResponse = cx.quietly(ApiKey::Fetch, version, request).await?;
    let id = response.session_id;
    record_fetch(cx, version, response);
    Ok(id)
}

async fn fetch_session_incremental(cx: &mut Ctx) -> Result<()> {
    use kafka_protocol::messages::fetch_request::ForgottenTopic;
    cx.mask("session_id");
    let topic = create_topic(cx, "incremental-session", 2, &[]).await?;
    let first = batch(cx, &[(None, "a")]);
    produce(cx, &topic, 0, first).await?;
    for version in [12, 16] {
        let mut full = fetch_request(topic.clone(), 0, 0);
        if version >= 13 {
            full.topics[0].topic_id = topic_id(cx, &topic).await?;
            full.topics[0].topic = TopicName::default();
        }
        let mut second = full.topics[0].partitions[0].clone();
        second.partition = 1;
        full.topics[0].partitions.push(second);
        full.session_id = 0;
        full.session_epoch = 0;
        let id = session_fetch(cx, version, &full).await?;
        // Nothing new: the answer lists no partition.
        let mut next = full.clone();
        next.topics.clear();
        next.session_id = id;
        next.session_epoch = 1;
        session_fetch(cx, version, &next).await?;
        // Partition 0 moves on and partition 1 gets a record: both are listed.
        let more = batch(cx, &[(None, "b")]);
        produce(cx, &topic, 1, more).await?;
        let mut moved = full.clone();
        moved.topics[0].partitions.truncate(1);
        moved.topics[0].partitions[0].fetch_offset = 1;
        moved.session_id = id;
        moved.session_epoch = 2;
        session_fetch(cx, version, &moved).await?;
        // Forget partition 1: its next record is not listed.
        let again = batch(cx, &[(None, "c")]);
        produce(cx, &topic, 1, again).await?;
        let mut forget = next.clone();
        let mut forgotten = ForgottenTopic::default();
        forgotten.topic = full.topics[0].topic.clone();
        forgotten.topic_id = full.topics[0].topic_id;
        forgotten.partitions = vec![1];
        forget.forgotten_topics_data = vec![forgotten];
        forget.session_epoch = 3;
        session_fetch(cx, version, &forget).await?;
        // An epoch other than the next is refused; closing serves the fetch without a session.
        next.session_epoch = 9;
        session_fetch(cx, version, &next).await?;
        let mut close = full.clone();
        close.session_id = id;
        close.session_epoch = -1;
        session_fetch(cx, version, &close).await?;
        next.session_epoch = 4;
        session_fetch(cx, version, &next).await?;
    }
    Ok(())
}

async fn fetch_session_unknown(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "no-session", 1, &[]).await?;
    let mut request = fetch_request(topic, 0, 0);
    request.session_id = 12_345;
    request.session_epoch = 3;
    fetch(cx, 12, &request).await
}

async fn log_append_time_topic(cx: &mut Ctx) -> Result<()> {
    cx.ignore("error_message");
    // ListOffsets -3 answers the time the broker stamped.
    cx.mask("timestamp");
    let topic = create_topic(
        cx,
        "append-time",
        1,
        &[("message.timestamp.type", "LogAppendTime")],
    )
    .await?;
    let records = batch(cx, &[(None, "stamped"), (None, "twice")]);
    produce_recorded(cx, 9, &topic, 0, 1, records).await?;
    // A later millisecond, so that the newest batch has the largest append time on both.
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Far outside the CreateTime window: a LogAppendTime topic does not check it.
    let ancient = batch_with(1, Compression::Gzip, &[(Some("k"), "old"), (None, "older")]);
    produce_recorded(cx, 9, &topic, 0, 1, ancient).await?;
    fetch(cx, 12, &fetch_request(topic.clone(), 0, 0)).await?;
    let request = list_offsets_request(&topic, &[(0, -3)], -1);
    let _: ListOffsetsResponse = cx.answer(ApiKey::ListOffsets, 8, &request).await?;
    Ok(())
}

async fn topic_compression_type(cx: &mut Ctx) -> Result<()> {
    cx.ignore("error_message");
    for (base, codec, sent) in [
        ("gzipped", "gzip", Compression::None),
        ("uncompressed", "uncompressed", Compression::Gzip),
        ("zstd", "zstd", Compression::Lz4),
        ("kept", "snappy", Compression::Snappy),
    ] {
        let topic = create_topic(cx, base, 1, &[("compression.type", codec)]).await?;
        let records = batch_with(
            cx.timestamp_ms(),
            sent,
            &[(Some("k"), "plain"), (None, "text")],
        );
        produce_recorded(cx, 9, &topic, 0, 1, records).await?;
        fetch(cx, 12, &fetch_request(topic, 0, 0)).await?;
    }
    Ok(())
}
