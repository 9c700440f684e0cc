//! Transactions: InitProducerId with a transactional id, partitions and offsets added to a
//! transaction (AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, Produce v12), EndTxn,
//! what a read_committed consumer reads (Fetch, ListOffsets), and the operators' views of
//! transactions and producers (DescribeTransactions, ListTransactions, DescribeProducers).

use std::time::Duration;

use anyhow::{bail, Result};
use kafka_protocol::messages::{
    ApiKey, EndTxnRequest, EndTxnResponse, FetchResponse, InitProducerIdRequest,
    InitProducerIdResponse, ListOffsetsResponse, ProduceRequest, ProducerId, TopicName,
    TransactionalId,
};

use super::{scenarios, Expect};
use crate::session::Ctx;
use crate::setup::{
    batch, create_topic, describe_records, fetch_request, list_offsets_request, produce,
    produce_request, s, transactional_batch,
};

scenarios! { "transactions";
    init_producer_id_transactional: Expect::Same,
        "InitProducerId v4 with a transactional id (after a first, unrecorded): a second producer's epoch bump, a producer bumping its own epoch (KIP-360), a fenced one, a bad timeout";
    txn_offset_commit: Expect::Same,
        "AddOffsetsToTxn v4 (also fenced) and TxnOffsetCommit v4 (an unknown topic, a member the group does not have), OffsetFetch v9 requiring stable offsets before and after EndTxn v4 commits";
    txn_protocol_v2: Expect::Same,
        "Transaction protocol version 2: Produce v12 and TxnOffsetCommit v5 add their partitions, EndTxn v5 bumps the epoch (then a retry with the old epoch, an abort of what was committed, an abort of nothing), a late Produce v12 of the old epoch; ListOffsets read_committed";
    txn_verification: Expect::Same,
        "Produce v11 and v9 of a transactional batch to a partition its transaction does not hold, of a made-up producer, without a transactional id, then after AddPartitionsToTxn v3; TxnOffsetCommit v4 and v3 before AddOffsetsToTxn; AddPartitionsToTxn v4 verify_only; ListOffsets read_committed";
    read_committed_fetch: Expect::Same,
        "Fetch v4 and v12 (the newest by name), read_committed and read_uncommitted, of a partition holding an aborted, a committed and an open transaction among plain records: last stable offset, aborted transactions, records and markers; from inside the aborted one and at the last stable offset; ListOffsets both ways; again once the open one commits";
    describe_and_list_transactions: Expect::Same,
        "DescribeTransactions v0 of an open transaction (two partitions and a group's offsets), a committed, an aborted, an empty and an unknown one; ListTransactions v2 by the run's pattern, by state (an unknown state too), by producer id, running longer than an hour";
    describe_producers: Expect::Same,
        "DescribeProducers v0 of partitions holding an open, a committed and an aborted transaction and plain records, and of a partition the topic does not have";
}

/// CONCURRENT_TRANSACTIONS: the last transaction's markers are still being written.
const CONCURRENT_TRANSACTIONS: i16 = 51;

/// A transactional producer of one scenario: its id, producer id and current epoch.
struct TxnProducer {
    transactional_id: TransactionalId,
    producer_id: ProducerId,
    epoch: i16,
}

impl TxnProducer {
    /// A new transactional id named after `base` and its first producer (unrecorded).
    async fn new(cx: &mut Ctx, base: &str) -> Result<Self> {
        let (transactional_id, producer) = new_transactional_producer(cx, base).await?;
        if producer.error_code != 0 {
            bail!("InitProducerId of {base}: error {}", producer.error_code);
        }
        Ok(Self {
            transactional_id,
            producer_id: producer.producer_id,
            epoch: producer.producer_epoch,
        })
    }

    /// A Produce v12 request (which adds the partition to the transaction) of `values`,
    /// the first with `sequence`.
    fn send(
        &self,
        cx: &Ctx,
        topic: &TopicName,
        partition: i32,
        sequence: i32,
        values: &[&str],
    ) -> ProduceRequest {
        let records: Vec<_> = values.iter().map(|v| (None, *v)).collect();
        let producer = (self.producer_id.0, self.epoch, sequence);
        let batch = transactional_batch(cx.timestamp_ms(), producer, &records);
        let mut request = produce_request(topic.clone(), partition, -1, batch);
        request.transactional_id = Some(self.transactional_id.clone());
        request
    }

    /// Appends `values` in the transaction (unrecorded); fails unless accepted.
    async fn produce(
        &self,
        cx: &mut Ctx,
        topic: &TopicName,
        partition: i32,
        sequence: i32,
        values: &[&str],
    ) -> Result<()> {
        use kafka_protocol::messages::ProduceResponse;
        let request = self.send(cx, topic, partition, sequence, values);
        let response: ProduceResponse = cx.quietly(ApiKey::Produce, 12, &request).await?;
        for t in &response.responses {
            for p in &t.partition_responses {
                if p.error_code != 0 {
                    bail!(
                        "transactional produce to {}: error {}",
                        t.name.0,
                        p.error_code
                    );
                }
            }
        }
        Ok(())
    }

    /// The EndTxn v5 request ending the open transaction.
    fn end_request(&self, committed: bool) -> EndTxnRequest {
        let mut request = EndTxnRequest::default();
        request.transactional_id = self.transactional_id.clone();
        request.producer_id = self.producer_id;
        request.producer_epoch = self.epoch;
        request.committed = committed;
        request
    }

    /// Ends the open transaction (unrecorded) and waits until its markers are written; the
    /// producer goes on with the epoch EndTxn v5 gave it.
    async fn end(&mut self, cx: &mut Ctx, committed: bool) -> Result<()> {
        let request = self.end_request(committed);
        let response: EndTxnResponse = cx.quietly(ApiKey::EndTxn, 5, &request).await?;
        if response.error_code != 0 {
            bail!("EndTxn: error {}", response.error_code);
        }
        wait_complete(cx, &request).await?;
        self.epoch = response.producer_epoch;
        Ok(())
    }
}

/// Waits until the transaction `request` (an EndTxn v5 already answered) ended is complete:
/// its markers are written after the answer, and a retry is refused with
/// CONCURRENT_TRANSACTIONS until they are, then answered as done.
async fn wait_complete(cx: &mut Ctx, request: &EndTxnRequest) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let retry: EndTxnResponse = cx.quietly(ApiKey::EndTxn, 5, request).await?;
        if retry.error_code != CONCURRENT_TRANSACTIONS {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the transaction did not complete within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
    // At the run's time: Kafka rolls a segment after a batch stamped in 1970, and answers a
    // fetch from one segment only.
    produce(cx, &topic, 0, batch(cx, &[(None, "plain")])).await?;
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
        latest_both_ways(cx, &topic, partition).await?;
    }
    Ok(())
}

async fn txn_protocol_v2(cx: &mut Ctx) -> Result<()> {
    use kafka_protocol::messages::{
        EndTxnRequest, EndTxnResponse, GroupId, ProduceResponse, TxnOffsetCommitResponse,
    };
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
    wait_complete(cx, &end(epoch, true)).await?;
    let _: EndTxnResponse = cx.answer(ApiKey::EndTxn, 5, &end(epoch, true)).await?;
    let _: EndTxnResponse = cx.answer(ApiKey::EndTxn, 5, &end(epoch, false)).await?;
    let _: EndTxnResponse = cx.answer(ApiKey::EndTxn, 5, &end(epoch + 1, false)).await?;
    let _: ProduceResponse = cx.answer(ApiKey::Produce, 12, &send(epoch, 2)).await?;
    latest_both_ways(cx, &topic, 0).await
}

/// Records a Fetch answer with its records decoded (their bytes carry ids and times).
async fn fetch(
    cx: &mut Ctx,
    version: i16,
    topic: &TopicName,
    offset: i64,
    committed: bool,
) -> Result<()> {
    let mut request = fetch_request(topic.clone(), 0, offset);
    request.isolation_level = i8::from(committed);
    let mut response: FetchResponse = cx.quietly(ApiKey::Fetch, version, &request).await?;
    let mut decoded = Vec::new();
    for t in &mut response.responses {
        for p in &mut t.partitions {
            decoded.push(describe_records(p.records.as_ref()));
            p.records = p.records.as_ref().map(|_| bytes::Bytes::new());
        }
    }
    let isolation = if committed {
        "read_committed"
    } else {
        "read_uncommitted"
    };
    cx.record(
        &format!("Fetch v{version} {isolation} from {offset}"),
        &response,
    );
    cx.note(&decoded.join("\n"));
    Ok(())
}

/// ListOffsets v8 latest of `partition`, read_uncommitted then read_committed.
async fn latest_both_ways(cx: &mut Ctx, topic: &TopicName, partition: i32) -> Result<()> {
    let request = list_offsets_request(topic, &[(partition, -1)], -1);
    let mut committed = request.clone();
    committed.isolation_level = 1;
    for request in [request, committed] {
        let _: ListOffsetsResponse = cx.answer(ApiKey::ListOffsets, 8, &request).await?;
    }
    Ok(())
}

async fn read_committed_fetch(cx: &mut Ctx) -> Result<()> {
    let (topic, _, _) = transactional_setup(cx, "txn-read", 1).await?;
    // Offsets: 0 plain, 1-2 aborted and 3 its marker, 4 committed and 5 its marker,
    // 6 open, 7 plain.
    let mut aborted = TxnProducer::new(cx, "txn-read-aborted").await?;
    aborted
        .produce(cx, &topic, 0, 0, &["aborted 1", "aborted 2"])
        .await?;
    aborted.end(cx, false).await?;
    let mut committed = TxnProducer::new(cx, "txn-read-committed").await?;
    committed.produce(cx, &topic, 0, 0, &["committed"]).await?;
    committed.end(cx, true).await?;
    let mut open = TxnProducer::new(cx, "txn-read-open").await?;
    open.produce(cx, &topic, 0, 0, &["open"]).await?;
    produce(cx, &topic, 0, batch(cx, &[(None, "plain after")])).await?;

    for version in [4, 12] {
        fetch(cx, version, &topic, 0, true).await?;
    }
    fetch(cx, 12, &topic, 0, false).await?;
    fetch(cx, 12, &topic, 2, true).await?;
    fetch(cx, 12, &topic, 6, true).await?;
    latest_both_ways(cx, &topic, 0).await?;

    open.end(cx, true).await?;
    fetch(cx, 12, &topic, 6, true).await?;
    latest_both_ways(cx, &topic, 0).await
}

async fn describe_and_list_transactions(cx: &mut Ctx) -> Result<()> {
    use kafka_protocol::messages::{
        AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, DescribeTransactionsRequest,
        DescribeTransactionsResponse, GroupId, ListTransactionsRequest, ListTransactionsResponse,
    };
    let (topic, _, _) = transactional_setup(cx, "txn-described", 2).await?;
    cx.mask("transaction_start_time_ms");
    let open = TxnProducer::new(cx, "txd-open").await?;
    open.produce(cx, &topic, 0, 0, &["open"]).await?;
    open.produce(cx, &topic, 1, 0, &["open"]).await?;
    let mut add = AddOffsetsToTxnRequest::default();
    add.transactional_id = open.transactional_id.clone();
    add.producer_id = open.producer_id;
    add.producer_epoch = open.epoch;
    add.group_id = GroupId(s(&cx.name("txd-group")));
    let added: AddOffsetsToTxnResponse = cx.quietly(ApiKey::AddOffsetsToTxn, 4, &add).await?;
    if added.error_code != 0 {
        bail!("AddOffsetsToTxn: error {}", added.error_code);
    }
    let mut committed = TxnProducer::new(cx, "txd-committed").await?;
    committed.produce(cx, &topic, 0, 0, &["committed"]).await?;
    committed.end(cx, true).await?;
    let mut aborted = TxnProducer::new(cx, "txd-aborted").await?;
    aborted.produce(cx, &topic, 1, 0, &["aborted"]).await?;
    aborted.end(cx, false).await?;
    TxnProducer::new(cx, "txd-empty").await?;

    let mut describe = DescribeTransactionsRequest::default();
    describe.transactional_ids = ["open", "committed", "aborted", "empty", "unknown"]
        .iter()
        .map(|id| TransactionalId(s(&cx.name(&format!("txd-{id}")))))
        .collect();
    let mut described: DescribeTransactionsResponse = cx
        .quietly(ApiKey::DescribeTransactions, 0, &describe)
        .await?;
    // Kafka lists a transaction's topics and partitions in hash order.
    for state in &mut described.transaction_states {
        state.topics.sort_by(|a, b| a.topic.0.cmp(&b.topic.0));
        for topic in &mut state.topics {
            topic.partitions.sort_unstable();
        }
    }
    cx.record("DescribeTransactions v0", &described);

    let list = |states: &[&str], producers: &[ProducerId], longer_than_ms: i64| {
        let mut request = ListTransactionsRequest::default();
        request.state_filters = states.iter().map(|state| s(state)).collect();
        request.producer_id_filters = producers.to_vec();
        request.duration_filter = longer_than_ms;
        request.transactional_id_pattern = Some(s(&format!("^{}txd-.*", cx.name(""))));
        request
    };
    let requests = [
        list(&[], &[], -1),
        list(&["Ongoing"], &[], -1),
        list(&["CompleteCommit", "NoSuchState"], &[], -1),
        list(&[], &[open.producer_id], -1),
        list(&[], &[], 3_600_000),
    ];
    for request in requests {
        let mut listed: ListTransactionsResponse =
            cx.quietly(ApiKey::ListTransactions, 2, &request).await?;
        listed
            .transaction_states
            .sort_by(|a, b| a.transactional_id.0.cmp(&b.transactional_id.0));
        cx.record("ListTransactions v2", &listed);
    }
    Ok(())
}

async fn describe_producers(cx: &mut Ctx) -> Result<()> {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse};
    let (topic, _, _) = transactional_setup(cx, "txn-producers", 2).await?;
    let open = TxnProducer::new(cx, "txp-open").await?;
    open.produce(cx, &topic, 0, 0, &["open 1", "open 2"])
        .await?;
    let mut committed = TxnProducer::new(cx, "txp-committed").await?;
    committed.produce(cx, &topic, 0, 0, &["committed"]).await?;
    committed.produce(cx, &topic, 1, 0, &["committed"]).await?;
    committed.end(cx, true).await?;
    let mut aborted = TxnProducer::new(cx, "txp-aborted").await?;
    aborted
        .produce(cx, &topic, 1, 0, &["aborted 1", "aborted 2", "aborted 3"])
        .await?;
    aborted.end(cx, false).await?;

    let mut t = TopicRequest::default();
    t.name = topic.clone();
    t.partition_indexes = vec![0, 1, 5];
    let mut request = DescribeProducersRequest::default();
    request.topics = vec![t];
    let mut response: DescribeProducersResponse =
        cx.quietly(ApiKey::DescribeProducers, 0, &request).await?;
    for topic in &mut response.topics {
        topic.partitions.sort_by_key(|p| p.partition_index);
        for partition in &mut topic.partitions {
            // Kafka lists a partition's producers in hash order; their ids differ by broker.
            partition.active_producers.sort_by_key(|p| {
                (
                    p.current_txn_start_offset,
                    p.producer_epoch,
                    p.last_sequence,
                )
            });
        }
    }
    // A marker's timestamp is its broker's clock; a batch's is the run's.
    cx.mask("last_timestamp");
    cx.record("DescribeProducers v0", &response);
    for topic in &response.topics {
        for partition in &topic.partitions {
            for (i, producer) in partition.active_producers.iter().enumerate() {
                let last = producer.last_timestamp;
                let what = if last == cx.timestamp_ms() {
                    "its last batch's".to_string()
                } else if last > cx.timestamp_ms() {
                    "later: a marker's".to_string()
                } else {
                    format!("{last}")
                };
                cx.note(&format!(
                    "partition {} producer {i}: last timestamp {what}",
                    partition.partition_index
                ));
            }
        }
    }
    Ok(())
}
