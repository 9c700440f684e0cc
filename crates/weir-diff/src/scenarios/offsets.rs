//! Offsets and idempotent producers: ListOffsets, OffsetForLeaderEpoch, InitProducerId without
//! a transactional id, DeleteRecords.

use anyhow::Result;
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, InitProducerIdRequest, InitProducerIdResponse, ListOffsetsResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ProducerId, TopicName,
};
use kafka_protocol::records::Compression;

use super::{scenarios, Expect};
use crate::session::Ctx;
use crate::setup::{batch_with, create_topic, list_offsets_request, produce};

scenarios! { "offsets";
    list_offsets_specials: Expect::Same,
        "ListOffsets v8: earliest, latest, max timestamp, earliest local, by time";
    list_offsets_old_versions: Expect::Same,
        "ListOffsets v1 and v6 (max timestamp is v7+)";
    list_offsets_unknown: Expect::Same,
        "ListOffsets for an unknown topic and partition, and with a stale leader epoch";
    offset_for_leader_epoch: Expect::Same,
        "OffsetForLeaderEpoch v4: current, older and future epochs, unknown partition, fenced";
    init_producer_id_idempotent: Expect::Same,
        "InitProducerId v4 for an idempotent producer";
    delete_records: Expect::Same,
        "DeleteRecords v2: below an offset, to the high watermark (-1), past it, an unknown partition, a compacted topic; then ListOffsets earliest and latest";
}

/// A topic with three batches one second apart, the newest first in time order last.
async fn timed_topic(cx: &mut Ctx, base: &str) -> Result<TopicName> {
    let topic = create_topic(cx, base, 1, &[]).await?;
    for (i, delta) in [0, 2000, 1000].into_iter().enumerate() {
        let value = format!("record {i}");
        let records = batch_with(
            cx.timestamp_ms() + delta,
            Compression::None,
            &[(None, value.as_str())],
        );
        produce(cx, &topic, 0, records).await?;
    }
    Ok(topic)
}

async fn list_offsets_specials(cx: &mut Ctx) -> Result<()> {
    let topic = timed_topic(cx, "listed").await?;
    let t = cx.timestamp_ms();
    for timestamp in [-2, -1, -3, -4, t, t + 500, t + 1000, t + 5000] {
        let request = list_offsets_request(&topic, &[(0, timestamp)], -1);
        let _: ListOffsetsResponse = cx.answer(ApiKey::ListOffsets, 8, &request).await?;
    }
    Ok(())
}

async fn list_offsets_old_versions(cx: &mut Ctx) -> Result<()> {
    let topic = timed_topic(cx, "listed-old").await?;
    for version in [1, 6] {
        for timestamp in [-1, -3] {
            let request = list_offsets_request(&topic, &[(0, timestamp)], -1);
            let _: ListOffsetsResponse = cx.answer(ApiKey::ListOffsets, version, &request).await?;
        }
    }
    Ok(())
}

async fn list_offsets_unknown(cx: &mut Ctx) -> Result<()> {
    let topic = create_topic(cx, "listed-unknown", 1, &[]).await?;
    let request = list_offsets_request(&cx.topic("nowhere"), &[(0, -1)], -1);
    let _: ListOffsetsResponse = cx.answer(ApiKey::ListOffsets, 8, &request).await?;
    let request = list_offsets_request(&topic, &[(0, -1), (4, -1)], -1);
    // Clients match partitions by index; Kafka lists refused ones first.
    let mut response: ListOffsetsResponse = cx.quietly(ApiKey::ListOffsets, 8, &request).await?;
    for t in &mut response.topics {
        t.partitions.sort_by_key(|p| p.partition_index);
    }
    cx.record("ListOffsets v8 (partitions by index)", &response);
    for epoch in [5, 0] {
        let request = list_offsets_request(&topic, &[(0, -1)], epoch);
        let _: ListOffsetsResponse = cx.answer(ApiKey::ListOffsets, 8, &request).await?;
    }
    Ok(())
}

async fn offset_for_leader_epoch(cx: &mut Ctx) -> Result<()> {
    let topic = timed_topic(cx, "epochs").await?;
    let ask = |partition: i32, current: i32, epoch: i32| {
        let mut p = OffsetForLeaderPartition::default();
        p.partition = partition;
        p.current_leader_epoch = current;
        p.leader_epoch = epoch;
        p
    };
    let mut t = OffsetForLeaderTopic::default();
    t.topic = topic.clone();
    t.partitions = vec![
        ask(0, -1, 0),
        ask(0, 0, 0),
        ask(0, -1, 5),
        ask(0, 3, 0),
        ask(9, -1, 0),
    ];
    let mut unknown = OffsetForLeaderTopic::default();
    unknown.topic = cx.topic("nowhere");
    unknown.partitions = vec![ask(0, -1, 0)];
    let mut request = OffsetForLeaderEpochRequest::default();
    request.replica_id = BrokerId(-1);
    request.topics = vec![t, unknown];
    let _: OffsetForLeaderEpochResponse =
        cx.answer(ApiKey::OffsetForLeaderEpoch, 4, &request).await?;
    Ok(())
}

async fn init_producer_id_idempotent(cx: &mut Ctx) -> Result<()> {
    let mut request = InitProducerIdRequest::default();
    request.transaction_timeout_ms = 60_000;
    request.producer_id = ProducerId(-1);
    request.producer_epoch = -1;
    let _: InitProducerIdResponse = cx.answer(ApiKey::InitProducerId, 4, &request).await?;
    Ok(())
}

async fn delete_records(cx: &mut Ctx) -> Result<()> {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
    let ask = |topic: &TopicName, partitions: &[(i32, i64)]| {
        let mut t = DeleteRecordsTopic::default();
        t.name = topic.clone();
        t.partitions = partitions
            .iter()
            .map(|(index, offset)| {
                let mut p = DeleteRecordsPartition::default();
                p.partition_index = *index;
                p.offset = *offset;
                p
            })
            .collect();
        let mut request = DeleteRecordsRequest::default();
        request.topics = vec![t];
        request.timeout_ms = 10_000;
        request
    };
    let topic = timed_topic(cx, "trimmed").await?;
    for partitions in [&[(0, 1)][..], &[(0, 0)], &[(0, 99)], &[(0, -1)], &[(1, 0)]] {
        let request = ask(&topic, partitions);
        let _: DeleteRecordsResponse = cx.answer(ApiKey::DeleteRecords, 2, &request).await?;
    }
    for timestamp in [-2, -1] {
        let request = list_offsets_request(&topic, &[(0, timestamp)], -1);
        let _: ListOffsetsResponse = cx.answer(ApiKey::ListOffsets, 8, &request).await?;
    }
    let compacted =
        create_topic(cx, "trimmed-compacted", 1, &[("cleanup.policy", "compact")]).await?;
    let request = ask(&compacted, &[(0, 0)]);
    let _: DeleteRecordsResponse = cx.answer(ApiKey::DeleteRecords, 2, &request).await?;
    let request = ask(&cx.topic("nowhere"), &[(0, 0)]);
    let _: DeleteRecordsResponse = cx.answer(ApiKey::DeleteRecords, 2, &request).await?;
    Ok(())
}
