//! Offsets and producers: ListOffsets, OffsetForLeaderEpoch, InitProducerId, DeleteRecords,
//! and offsets committed in a transaction (AddOffsetsToTxn, TxnOffsetCommit).

use anyhow::Result;
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, InitProducerIdRequest, InitProducerIdResponse, ListOffsetsResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ProducerId, TopicName,
    TransactionalId,
};
use kafka_protocol::records::Compression;

use super::{scenarios, Expect};
use crate::session::Ctx;
use crate::setup::{
    batch_with, create_topic, list_offsets_request, produce, produce_request, s,
    transactional_batch,
};

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
    txn_offset_commit: Expect::Same,
        "AddOffsetsToTxn v4 (also fenced) and TxnOffsetCommit v4 (an unknown topic, a member the group does not have), OffsetFetch v9 requiring stable offsets before and after EndTxn v4 commits";
    txn_protocol_v2: Expect::Same,
        "Transaction protocol version 2: Produce v12 and TxnOffsetCommit v5 add their partitions, EndTxn v5 bumps the epoch (then a retry with the old epoch, an abort of what was committed, an abort of nothing), a late Produce v12 of the old epoch; ListOffsets read_committed";
    txn_verification: Expect::Same,
        "Produce v11 and v9 of a transactional batch to a partition its transaction does not hold, of a made-up producer, without a transactional id, then after AddPartitionsToTxn v3; TxnOffsetCommit v4 and v3 before AddOffsetsToTxn; AddPartitionsToTxn v4 verify_only; ListOffsets read_committed";
    init_producer_id_transactional: Expect::Same,
        "InitProducerId v4 with a transactional id (after a first, unrecorded): a second producer's epoch bump, a producer bumping its own epoch (KIP-360), a fenced one, a bad timeout";
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

async fn init_producer_id_transactional(cx: &mut Ctx) -> Result<()> {
    super::cluster::transaction_coordinator_ready(cx).await?;
    let mut request = InitProducerIdRequest::default();
    request.transactional_id = Some(TransactionalId(s(&cx.name("txn"))));
    request.transaction_timeout_ms = 60_000;
    request.producer_id = ProducerId(-1);
    request.producer_epoch = -1;
    let first = first_init(cx, &request).await?;
    // A second producer of the same id: the same producer id, the next epoch.
    let second: InitProducerIdResponse = cx.answer(ApiKey::InitProducerId, 4, &request).await?;
    // The current producer bumps its own epoch; the first, fenced, cannot (v4: PRODUCER_FENCED,
    // v3: INVALID_PRODUCER_EPOCH).
    let mut bump = request.clone();
    bump.producer_id = second.producer_id;
    bump.producer_epoch = second.producer_epoch;
    let _: InitProducerIdResponse = cx.answer(ApiKey::InitProducerId, 4, &bump).await?;
    let mut fenced = request.clone();
    fenced.producer_id = first.producer_id;
    fenced.producer_epoch = first.producer_epoch;
    for version in [3, 4] {
        let _: InitProducerIdResponse = cx.answer(ApiKey::InitProducerId, version, &fenced).await?;
    }
    let mut too_long = request.clone();
    too_long.transaction_timeout_ms = 900_001;
    let _: InitProducerIdResponse = cx.answer(ApiKey::InitProducerId, 4, &too_long).await?;
    Ok(())
}

/// The first InitProducerId of `request`'s transactional id (unrecorded), repeated until the
/// coordinator has loaded the id's partition: Kafka names itself the coordinator before it
/// has, and answers COORDINATOR_LOAD_IN_PROGRESS (or NOT_COORDINATOR) until then.
async fn first_init(
    cx: &mut Ctx,
    request: &InitProducerIdRequest,
) -> Result<InitProducerIdResponse> {
    const NOT_READY: [i16; 3] = [14, 15, 16];
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let response: InitProducerIdResponse =
            cx.quietly(ApiKey::InitProducerId, 4, request).await?;
        if !NOT_READY.contains(&response.error_code) {
            return Ok(response);
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("the transactional id's partition did not load within 60 s");
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// The start of a transactional scenario (error messages not compared): the coordinators
/// ready, a topic named after `base` of `partitions` with one plain record on partition 0,
/// and a transactional id named after it with its first producer (unrecorded).
async fn transactional_setup(
    cx: &mut Ctx,
    base: &str,
    partitions: i32,
) -> Result<(TopicName, TransactionalId, InitProducerIdResponse)> {
    cx.ignore("error_message");
    super::cluster::coordinator_ready(cx).await?;
    super::cluster::transaction_coordinator_ready(cx).await?;
    let topic = create_topic(cx, base, partitions, &[]).await?;
    let plain = batch_with(1_000, Compression::None, &[(None, "plain")]);
    produce(cx, &topic, 0, plain).await?;
    let (transactional_id, producer) = new_transactional_producer(cx, base).await?;
    Ok((topic, transactional_id, producer))
}

/// A TxnOffsetCommit of offset 1 on `topic`-0 for `group`, by `producer` from outside the
/// group (no generation, no member).
fn outsider_commit(
    transactional_id: &TransactionalId,
    group: kafka_protocol::messages::GroupId,
    producer: &InitProducerIdResponse,
    topic: &TopicName,
) -> kafka_protocol::messages::TxnOffsetCommitRequest {
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    let mut commit = kafka_protocol::messages::TxnOffsetCommitRequest::default();
    commit.transactional_id = transactional_id.clone();
    commit.group_id = group;
    commit.producer_id = producer.producer_id;
    commit.producer_epoch = producer.producer_epoch;
    commit.generation_id = -1;
    let mut p = TxnOffsetCommitRequestPartition::default();
    p.committed_offset = 1;
    let mut t = TxnOffsetCommitRequestTopic::default();
    t.name = topic.clone();
    t.partitions = vec![p];
    commit.topics = vec![t];
    commit
}

/// A transactional id named after `base` and its first producer (unrecorded).
async fn new_transactional_producer(
    cx: &mut Ctx,
    base: &str,
) -> Result<(TransactionalId, InitProducerIdResponse)> {
    let transactional_id = TransactionalId(s(&cx.name(base)));
    let mut init = InitProducerIdRequest::default();
    init.transactional_id = Some(transactional_id.clone());
    init.transaction_timeout_ms = 60_000;
    init.producer_id = ProducerId(-1);
    init.producer_epoch = -1;
    let producer = first_init(cx, &init).await?;
    Ok((transactional_id, producer))
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

async fn txn_offset_commit(cx: &mut Ctx) -> Result<()> {
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopics,
    };
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{
        AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, EndTxnRequest, EndTxnResponse, GroupId,
        OffsetFetchRequest, OffsetFetchResponse, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
    };
    /// UNSTABLE_OFFSET_COMMIT.
    const UNSTABLE: i16 = 88;
    super::cluster::coordinator_ready(cx).await?;
    super::cluster::transaction_coordinator_ready(cx).await?;
    let topic = create_topic(cx, "txn-offsets", 1, &[]).await?;
    let (transactional_id, producer) = new_transactional_producer(cx, "txn-offsets").await?;
    let group = GroupId(s(&cx.name("txn-group")));

    let mut add = AddOffsetsToTxnRequest::default();
    add.transactional_id = transactional_id.clone();
    add.producer_id = producer.producer_id;
    add.producer_epoch = producer.producer_epoch + 1;
    group.clone_into(&mut add.group_id);
    let _: AddOffsetsToTxnResponse = cx.answer(ApiKey::AddOffsetsToTxn, 4, &add).await?;
    add.producer_epoch = producer.producer_epoch;
    let _: AddOffsetsToTxnResponse = cx.answer(ApiKey::AddOffsetsToTxn, 4, &add).await?;

    let commit = |topics: &[(&TopicName, i64)], generation: i32, member: &str| {
        let mut request = TxnOffsetCommitRequest::default();
        request.transactional_id = transactional_id.clone();
        request.group_id = group.clone();
        request.producer_id = producer.producer_id;
        request.producer_epoch = producer.producer_epoch;
        request.generation_id = generation;
        request.member_id = s(member);
        request.topics = topics
            .iter()
            .map(|(name, offset)| {
                let mut p = TxnOffsetCommitRequestPartition::default();
                p.committed_offset = *offset;
                let mut t = TxnOffsetCommitRequestTopic::default();
                t.name = (*name).clone();
                t.partitions = vec![p];
                t
            })
            .collect();
        request
    };
    let nowhere = cx.topic("nowhere");
    let request = commit(&[(&topic, 3), (&nowhere, 1)], -1, "");
    let _: TxnOffsetCommitResponse = cx.answer(ApiKey::TxnOffsetCommit, 4, &request).await?;
    let stranger = commit(&[(&topic, 4)], 5, "stranger");
    let _: TxnOffsetCommitResponse = cx.answer(ApiKey::TxnOffsetCommit, 4, &stranger).await?;

    let mut fetch = OffsetFetchRequest::default();
    let mut t = OffsetFetchRequestTopics::default();
    t.name = topic.clone();
    t.partition_indexes = vec![0];
    let mut g = OffsetFetchRequestGroup::default();
    g.group_id = group.clone();
    g.member_epoch = -1;
    g.topics = Some(vec![t]);
    fetch.groups = vec![g];
    fetch.require_stable = true;
    let _: OffsetFetchResponse = cx.answer(ApiKey::OffsetFetch, 9, &fetch).await?;

    let mut end = EndTxnRequest::default();
    end.transactional_id = transactional_id.clone();
    end.producer_id = producer.producer_id;
    end.producer_epoch = producer.producer_epoch;
    end.committed = true;
    let _: EndTxnResponse = cx.answer(ApiKey::EndTxn, 4, &end).await?;
    // The markers are written after EndTxn is answered: stable once they are.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let answer: OffsetFetchResponse = cx.quietly(ApiKey::OffsetFetch, 9, &fetch).await?;
        let unstable = answer.groups.iter().any(|g| {
            g.topics
                .iter()
                .any(|t| t.partitions.iter().any(|p| p.error_code == UNSTABLE))
        });
        if !unstable {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("the offsets stayed unstable 30 s after the commit");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _: OffsetFetchResponse = cx.answer(ApiKey::OffsetFetch, 9, &fetch).await?;
    Ok(())
}

async fn txn_verification(cx: &mut Ctx) -> Result<()> {
    use kafka_protocol::messages::add_partitions_to_txn_request::{
        AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
    };
    use kafka_protocol::messages::{
        AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, GroupId, ProduceResponse,
        TxnOffsetCommitResponse,
    };
    let (topic, transactional_id, producer) = transactional_setup(cx, "txn-verified", 2).await?;
    let me = (producer.producer_id.0, producer.producer_epoch);

    let send =
        |id: Option<&TransactionalId>, (producer_id, epoch): (i64, i16), sequence, partition| {
            let batch = transactional_batch(2_000, (producer_id, epoch, sequence), &[(None, "t")]);
            let mut request = produce_request(topic.clone(), partition, -1, batch);
            request.transactional_id = id.cloned();
            request
        };
    for version in [11, 9] {
        let request = send(Some(&transactional_id), me, 0, 0);
        let _: ProduceResponse = cx.answer(ApiKey::Produce, version, &request).await?;
    }
    let request = send(None, me, 0, 0);
    let _: ProduceResponse = cx.answer(ApiKey::Produce, 9, &request).await?;
    let stranger = (me.0 + 1_000, 0);
    let request = send(Some(&transactional_id), stranger, 0, 0);
    let _: ProduceResponse = cx.answer(ApiKey::Produce, 9, &request).await?;

    let group = GroupId(s(&cx.name("txn-verified-group")));
    let commit = outsider_commit(&transactional_id, group, &producer, &topic);
    for version in [4, 3] {
        let _: TxnOffsetCommitResponse =
            cx.answer(ApiKey::TxnOffsetCommit, version, &commit).await?;
    }

    let partitions = |indexes: Vec<i32>| {
        let mut t = AddPartitionsToTxnTopic::default();
        t.name = topic.clone();
        t.partitions = indexes;
        vec![t]
    };
    let mut add = AddPartitionsToTxnRequest::default();
    add.v3_and_below_transactional_id = transactional_id.clone();
    add.v3_and_below_producer_id = producer.producer_id;
    add.v3_and_below_producer_epoch = producer.producer_epoch;
    add.v3_and_below_topics = partitions(vec![0]);
    let _: AddPartitionsToTxnResponse = cx.answer(ApiKey::AddPartitionsToTxn, 3, &add).await?;
    // One partition per request: Kafka answers a verification's partitions in no fixed order.
    for partition in [0, 1] {
        let mut verify = AddPartitionsToTxnRequest::default();
        let mut txn = AddPartitionsToTxnTransaction::default();
        txn.transactional_id = transactional_id.clone();
        txn.producer_id = producer.producer_id;
        txn.producer_epoch = producer.producer_epoch;
        txn.verify_only = true;
        txn.topics = partitions(vec![partition]);
        verify.transactions = vec![txn];
        let _: AddPartitionsToTxnResponse =
            cx.answer(ApiKey::AddPartitionsToTxn, 4, &verify).await?;
    }

    let request = send(Some(&transactional_id), me, 0, 0);
    let _: ProduceResponse = cx.answer(ApiKey::Produce, 11, &request).await?;
    let request = send(Some(&transactional_id), me, 1, 1);
    let _: ProduceResponse = cx.answer(ApiKey::Produce, 11, &request).await?;
    // One partition per request: Kafka answers a request's partitions in no fixed order.
    for partition in [0, 1] {
        let request = list_offsets_request(&topic, &[(partition, -1)], -1);
        let mut committed = request.clone();
        committed.isolation_level = 1;
        for request in [request, committed] {
            let _: ListOffsetsResponse = cx.answer(ApiKey::ListOffsets, 8, &request).await?;
        }
    }
    Ok(())
}

async fn txn_protocol_v2(cx: &mut Ctx) -> Result<()> {
    use kafka_protocol::messages::{
        EndTxnRequest, EndTxnResponse, GroupId, ProduceResponse, TxnOffsetCommitResponse,
    };
    /// CONCURRENT_TRANSACTIONS.
    const CONCURRENT: i16 = 51;
    let (topic, transactional_id, producer) = transactional_setup(cx, "txn-v2", 1).await?;
    let pid = producer.producer_id.0;
    let epoch = producer.producer_epoch;
    let send = |epoch: i16, sequence: i32| {
        let batch = transactional_batch(2_000, (pid, epoch, sequence), &[(None, "t")]);
        let mut request = produce_request(topic.clone(), 0, -1, batch);
        request.transactional_id = Some(transactional_id.clone());
        request
    };
    let _: ProduceResponse = cx.answer(ApiKey::Produce, 12, &send(epoch, 0)).await?;
    let _: ProduceResponse = cx.answer(ApiKey::Produce, 12, &send(epoch, 1)).await?;

    let group = GroupId(s(&cx.name("txn-v2-group")));
    let commit = outsider_commit(&transactional_id, group, &producer, &topic);
    let _: TxnOffsetCommitResponse = cx.answer(ApiKey::TxnOffsetCommit, 5, &commit).await?;

    let end = |epoch: i16, committed: bool| {
        let mut request = EndTxnRequest::default();
        request.transactional_id = transactional_id.clone();
        request.producer_id = producer.producer_id;
        request.producer_epoch = epoch;
        request.committed = committed;
        request
    };
    let _: EndTxnResponse = cx.answer(ApiKey::EndTxn, 5, &end(epoch, true)).await?;
    // The markers are written after the answer: a retry waits (CONCURRENT_TRANSACTIONS) until
    // the transaction is complete, then is answered as done.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let retry: EndTxnResponse = cx.quietly(ApiKey::EndTxn, 5, &end(epoch, true)).await?;
        if retry.error_code != CONCURRENT {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("the transaction did not complete within 30 s");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let _: EndTxnResponse = cx.answer(ApiKey::EndTxn, 5, &end(epoch, true)).await?;
    let _: EndTxnResponse = cx.answer(ApiKey::EndTxn, 5, &end(epoch, false)).await?;
    let _: EndTxnResponse = cx.answer(ApiKey::EndTxn, 5, &end(epoch + 1, false)).await?;
    let _: ProduceResponse = cx.answer(ApiKey::Produce, 12, &send(epoch, 2)).await?;
    let request = list_offsets_request(&topic, &[(0, -1)], -1);
    let mut committed = request.clone();
    committed.isolation_level = 1;
    for request in [request, committed] {
        let _: ListOffsetsResponse = cx.answer(ApiKey::ListOffsets, 8, &request).await?;
    }
    Ok(())
}
