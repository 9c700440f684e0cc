//! Transactional writes the transaction coordinator never saw (KIP-890 verification): a
//! produce or an offset commit of a transaction that does not hold the partition is refused,
//! and leaves nothing open that would hold read_committed consumers or the group back.

use std::time::Duration;

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    ApiKey, DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest,
    EndTxnResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId, ListOffsetsRequest,
    ListOffsetsResponse, OffsetFetchRequest, OffsetFetchResponse, ProduceResponse, ProducerId,
    TransactionalId, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::net::TcpStream;
use weir_log::batch::{build_batch, build_transactional_batch, ProducerFields};

use crate::common::*;

const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_TXN_STATE: i16 = 48;
const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
const TRANSACTION_ABORTABLE: i16 = 120;

pub(crate) fn id(s: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(s.to_string()))
}

/// The error code of a transactional batch of `(producer id, epoch, sequence)` produced to
/// `good`-`partition` at `version`, naming `transactional_id`.
pub(crate) async fn produce_txn(
    c: &mut TcpStream,
    version: i16,
    transactional_id: Option<&str>,
    (producer_id, epoch, sequence): (i64, i16, i32),
    partition: i32,
) -> i16 {
    let producer = ProducerFields {
        producer_id,
        producer_epoch: epoch,
        base_sequence: sequence,
    };
    let batch = build_transactional_batch(&[(Some(b"k"), Some(b"v"))], 0, producer);
    let mut request = produce_request("good", partition, -1, batch);
    request.transactional_id = transactional_id.map(id);
    let r: ProduceResponse = call(c, ApiKey::Produce, version, &request).await;
    r.responses[0].partition_responses[0].error_code
}

/// `good`-`partition`'s latest offset for read_committed consumers (the last stable offset)
/// and for read_uncommitted ones (the high watermark).
pub(crate) async fn stable_and_high(c: &mut TcpStream, partition: i32) -> (i64, i64) {
    let mut offsets = [0; 2];
    for (isolation, offset) in offsets.iter_mut().enumerate() {
        let mut p = ListOffsetsPartition::default();
        p.partition_index = partition;
        p.timestamp = -1;
        p.current_leader_epoch = -1;
        let mut t = ListOffsetsTopic::default();
        t.name = topic_name("good");
        t.partitions = vec![p];
        let mut req = ListOffsetsRequest::default();
        req.replica_id = kafka_protocol::messages::BrokerId(-1);
        req.isolation_level = 1 - isolation as i8;
        req.topics = vec![t];
        let r: ListOffsetsResponse = call(c, ApiKey::ListOffsets, 5, &req).await;
        let answered = &r.topics[0].partitions[0];
        assert_eq!(answered.error_code, 0);
        *offset = answered.offset;
    }
    (offsets[0], offsets[1])
}

/// Waits until this broker coordinates `group` (its partition of `__consumer_offsets` loaded).
async fn await_group_coordinator(c: &mut TcpStream, group: &str) {
    for _ in 0..200 {
        let mut find = FindCoordinatorRequest::default();
        find.key = StrBytes::from_string(group.to_string());
        let found: FindCoordinatorResponse = call(c, ApiKey::FindCoordinator, 3, &find).await;
        if found.error_code == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no coordinator for {group}");
}

/// Waits until `transactional_id`'s transaction is complete (its markers written).
pub(crate) async fn await_state(c: &mut TcpStream, transactional_id: &str, state: &str) {
    for _ in 0..200 {
        let mut req = DescribeTransactionsRequest::default();
        req.transactional_ids = vec![id(transactional_id)];
        let r: DescribeTransactionsResponse = call(c, ApiKey::DescribeTransactions, 0, &req).await;
        if r.transaction_states[0].transaction_state.as_str() == state {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{transactional_id} never reached {state}");
}

/// A transactional batch is appended only to a partition its transaction holds: one never
/// added is refused (TRANSACTION_ABORTABLE from Produce v11, INVALID_TXN_STATE before), as is
/// one of a producer the coordinator does not know, one of a fenced epoch, one naming no
/// transactional id, and one after its transaction ended; none of them leaves a transaction
/// open, so the last stable offset stays at the high watermark. AddPartitionsToTxn v4
/// `verify_only` answers the same question and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_produce_to_a_partition_not_in_the_transaction_is_refused() {
    let test = start_fs(&[]).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "good", 2, &[]).await, 0);
    let (producer_id, epoch) = transactional_producer(&mut c, "v").await;
    let me = (producer_id, epoch, 0);
    assert_eq!(
        produce_txn(&mut c, 11, Some("v"), me, 0).await,
        TRANSACTION_ABORTABLE
    );
    assert_eq!(
        produce_txn(&mut c, 9, Some("v"), me, 0).await,
        INVALID_TXN_STATE
    );
    assert_eq!(
        produce_txn(&mut c, 9, None, me, 0).await,
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    );
    let stranger = (producer_id + 1_000, 0, 0);
    assert_eq!(
        produce_txn(&mut c, 9, Some("v"), stranger, 0).await,
        INVALID_PRODUCER_ID_MAPPING
    );
    assert_eq!(
        produce_txn(&mut c, 9, Some("nobody"), stranger, 0).await,
        INVALID_PRODUCER_ID_MAPPING
    );
    assert_eq!(
        produce(
            &mut c,
            "good",
            0,
            -1,
            build_batch(&[b"x"], 0, ProducerFields::NONE)
        )
        .await,
        (0, 0)
    );
    assert_eq!(
        stable_and_high(&mut c, 0).await,
        (1, 1),
        "nothing left open"
    );

    let txn = ("v", producer_id, epoch);
    let asked = [("good", 0), ("good", 1)];
    let codes = |r: kafka_protocol::messages::AddPartitionsToTxnResponse| -> Vec<i16> {
        r.results_by_transaction[0]
            .topic_results
            .iter()
            .flat_map(|t| {
                t.results_by_partition
                    .iter()
                    .map(|p| p.partition_error_code)
            })
            .collect()
    };
    let r = add_partitions_to_txn(&mut c, 4, txn, &asked, true).await;
    assert_eq!(codes(r), [TRANSACTION_ABORTABLE; 2], "nothing added yet");
    let r = add_partitions_to_txn(&mut c, 3, txn, &[("good", 0)], false).await;
    assert_eq!(
        r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        0
    );
    let r = add_partitions_to_txn(&mut c, 5, txn, &asked, true).await;
    assert_eq!(codes(r), [0, TRANSACTION_ABORTABLE]);

    assert_eq!(produce_txn(&mut c, 9, Some("v"), me, 0).await, 0);
    assert_eq!(
        produce_txn(&mut c, 9, Some("v"), (producer_id, epoch, 1), 1).await,
        INVALID_TXN_STATE,
        "good-1 is not in the transaction"
    );
    assert_eq!(
        produce_txn(&mut c, 9, Some("v"), (producer_id, epoch, 1), 0).await,
        0,
        "inside the open transaction"
    );
    assert_eq!(
        stable_and_high(&mut c, 0).await,
        (1, 3),
        "the transaction is open"
    );
    assert_eq!(stable_and_high(&mut c, 1).await, (0, 0));

    let mut end = EndTxnRequest::default();
    end.transactional_id = id("v");
    end.producer_id = ProducerId(producer_id);
    end.producer_epoch = epoch;
    end.committed = true;
    let r: EndTxnResponse = call(&mut c, ApiKey::EndTxn, 3, &end).await;
    assert_eq!(r.error_code, 0);
    await_state(&mut c, "v", "CompleteCommit").await;
    assert_eq!(stable_and_high(&mut c, 0).await, (4, 4), "committed");
    assert_eq!(
        produce_txn(&mut c, 9, Some("v"), (producer_id, epoch, 2), 0).await,
        INVALID_TXN_STATE,
        "its transaction ended"
    );
    let (_, newer) = transactional_producer(&mut c, "v").await;
    assert!(newer > epoch);
    assert_eq!(
        produce_txn(&mut c, 9, Some("v"), (producer_id, epoch, 2), 0).await,
        INVALID_PRODUCER_EPOCH,
        "fenced"
    );
    assert_eq!(stable_and_high(&mut c, 0).await, (4, 4));
    test.shutdown().await;
}

/// TxnOffsetCommit of a producer whose transaction does not hold the group's offsets
/// partition (no AddOffsetsToTxn) is refused: TRANSACTION_ABORTABLE from v4, INVALID_TXN_STATE
/// before, and INVALID_PRODUCER_ID_MAPPING for a producer the coordinator never gave out. The
/// group's offsets are not held back: OffsetFetch with `require_stable` answers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_offset_commit_outside_the_transaction_is_refused() {
    let test = start_fs(&[]).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "good", 1, &[]).await, 0);
    let (producer_id, epoch) = transactional_producer(&mut c, "w").await;
    await_group_coordinator(&mut c, "victims").await;
    let commit = |producer: (i64, i16), transactional_id: &'static str| {
        let mut partition = TxnOffsetCommitRequestPartition::default();
        partition.committed_offset = 5;
        let mut topic = TxnOffsetCommitRequestTopic::default();
        topic.name = topic_name("good");
        topic.partitions = vec![partition];
        let mut req = TxnOffsetCommitRequest::default();
        req.transactional_id = id(transactional_id);
        req.group_id = GroupId(StrBytes::from_static_str("victims"));
        req.producer_id = ProducerId(producer.0);
        req.producer_epoch = producer.1;
        req.generation_id = -1;
        req.topics = vec![topic];
        req
    };
    let mut send = async |version: i16, req: TxnOffsetCommitRequest| -> i16 {
        let r: TxnOffsetCommitResponse = call(&mut c, ApiKey::TxnOffsetCommit, version, &req).await;
        r.topics[0].partitions[0].error_code
    };
    let me = (producer_id, epoch);
    assert_eq!(send(4, commit(me, "w")).await, TRANSACTION_ABORTABLE);
    assert_eq!(send(3, commit(me, "w")).await, INVALID_TXN_STATE);
    assert_eq!(
        send(3, commit((producer_id + 1_000, 0), "w")).await,
        INVALID_PRODUCER_ID_MAPPING
    );
    assert_eq!(
        send(3, commit((987_654, 0), "made-up")).await,
        INVALID_PRODUCER_ID_MAPPING
    );
    let stable_fetch = async |c: &mut TcpStream| -> i16 {
        let mut topic = OffsetFetchRequestTopic::default();
        topic.name = topic_name("good");
        topic.partition_indexes = vec![0];
        let mut req = OffsetFetchRequest::default();
        req.group_id = GroupId(StrBytes::from_static_str("victims"));
        req.topics = Some(vec![topic]);
        req.require_stable = true;
        let r: OffsetFetchResponse = call(c, ApiKey::OffsetFetch, 7, &req).await;
        assert_eq!(r.error_code, 0);
        r.topics[0].partitions[0].error_code
    };
    assert_eq!(
        stable_fetch(&mut c).await,
        0,
        "no offsets held back by a transaction"
    );

    let mut add = kafka_protocol::messages::AddOffsetsToTxnRequest::default();
    add.transactional_id = id("w");
    add.producer_id = ProducerId(producer_id);
    add.producer_epoch = epoch;
    add.group_id = GroupId(StrBytes::from_static_str("victims"));
    let r: kafka_protocol::messages::AddOffsetsToTxnResponse =
        call(&mut c, ApiKey::AddOffsetsToTxn, 3, &add).await;
    assert_eq!(r.error_code, 0);
    let mut send = async |version: i16, req: TxnOffsetCommitRequest| -> i16 {
        let r: TxnOffsetCommitResponse = call(&mut c, ApiKey::TxnOffsetCommit, version, &req).await;
        r.topics[0].partitions[0].error_code
    };
    assert_eq!(send(3, commit(me, "w")).await, 0, "in the transaction now");
    assert_eq!(
        stable_fetch(&mut c).await,
        88,
        "UNSTABLE_OFFSET_COMMIT while the transaction is open"
    );
    test.shutdown().await;
}

/// Transaction protocol version 2 (KIP-890), as a Kafka 4 client runs it once ApiVersions
/// reports `transaction.version` 2: Produce v12 and TxnOffsetCommit v5 add their partitions
/// themselves, EndTxn v5 answers the bumped epoch, and a late write of the old epoch is fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_version_2_adds_partitions_and_bumps_the_epoch() {
    use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
    let test = start_fs(&[]).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    let mut ask = ApiVersionsRequest::default();
    ask.client_software_name = StrBytes::from_static_str("t");
    ask.client_software_version = StrBytes::from_static_str("1");
    let versions: ApiVersionsResponse = call(&mut c, ApiKey::ApiVersions, 3, &ask).await;
    let finalized: Vec<(&str, i16)> = versions
        .finalized_features
        .iter()
        .map(|f| (f.name.as_str(), f.max_version_level))
        .collect();
    assert_eq!(finalized, [("transaction.version", 2)]);
    assert!(versions.finalized_features_epoch >= 0);

    assert_eq!(create_topic(&mut c, "good", 1, &[]).await, 0);
    let (producer_id, epoch) = transactional_producer(&mut c, "v2").await;
    await_group_coordinator(&mut c, "v2-group").await;
    assert_eq!(
        produce_txn(&mut c, 12, Some("v2"), (producer_id, epoch, 0), 0).await,
        0,
        "added by the leader"
    );
    let mut partition = TxnOffsetCommitRequestPartition::default();
    partition.committed_offset = 1;
    let mut topic = TxnOffsetCommitRequestTopic::default();
    topic.name = topic_name("good");
    topic.partitions = vec![partition];
    let mut commit = TxnOffsetCommitRequest::default();
    commit.transactional_id = id("v2");
    commit.group_id = GroupId(StrBytes::from_static_str("v2-group"));
    commit.producer_id = ProducerId(producer_id);
    commit.producer_epoch = epoch;
    commit.generation_id = -1;
    commit.topics = vec![topic];
    let r: TxnOffsetCommitResponse = call(&mut c, ApiKey::TxnOffsetCommit, 5, &commit).await;
    assert_eq!(
        r.topics[0].partitions[0].error_code, 0,
        "added by the coordinator"
    );

    let mut end = EndTxnRequest::default();
    end.transactional_id = id("v2");
    end.producer_id = ProducerId(producer_id);
    end.producer_epoch = epoch;
    end.committed = true;
    let r: EndTxnResponse = call(&mut c, ApiKey::EndTxn, 5, &end).await;
    assert_eq!(
        (r.error_code, r.producer_id.0, r.producer_epoch),
        (0, producer_id, epoch + 1)
    );
    await_state(&mut c, "v2", "CompleteCommit").await;
    assert_eq!(
        stable_and_high(&mut c, 0).await,
        (2, 2),
        "one record and its marker"
    );
    assert_eq!(
        produce_txn(&mut c, 12, Some("v2"), (producer_id, epoch, 1), 0).await,
        INVALID_PRODUCER_EPOCH,
        "a late write of the ended transaction's epoch"
    );
    let r: EndTxnResponse = call(&mut c, ApiKey::EndTxn, 5, &end).await;
    assert_eq!(
        (r.error_code, r.producer_epoch),
        (0, epoch + 1),
        "a retried EndTxn is answered as done"
    );
    assert_eq!(
        produce_txn(&mut c, 12, Some("v2"), (producer_id, epoch + 1, 0), 0).await,
        0,
        "the next transaction, at the bumped epoch"
    );
    assert_eq!(stable_and_high(&mut c, 0).await, (2, 3));
    test.shutdown().await;
}
