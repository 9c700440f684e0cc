//! Share groups (KIP-932) on the wire: ShareGroupHeartbeat and ShareGroupDescribe, share
//! groups in the group admin APIs, and the other protocols meeting a share group's id.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::list_groups_request::ListGroupsRequest;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tokio::net::TcpStream;
use weir_storage::MemoryStorage;

use crate::common::*;

const GROUP_ID_NOT_FOUND: i16 = 69;
const INVALID_REQUEST: i16 = 42;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_MEMBER_EPOCH: i16 = 110;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_MAX_SIZE_REACHED: i16 = 81;

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A join (epoch 0) of `member` subscribing to `topic`.
pub(crate) fn join(group: &str, member: &str, topic: &str) -> ShareGroupHeartbeatRequest {
    let mut request = ShareGroupHeartbeatRequest::default();
    request.group_id = GroupId(text(group));
    request.member_id = text(member);
    request.member_epoch = 0;
    request.subscribed_topic_names = Some(vec![topic_name(topic)]);
    request
}

/// A heartbeat of `member` at `epoch` that changes nothing.
fn beat(group: &str, member: &str, epoch: i32) -> ShareGroupHeartbeatRequest {
    let mut request = ShareGroupHeartbeatRequest::default();
    request.group_id = GroupId(text(group));
    request.member_id = text(member);
    request.member_epoch = epoch;
    request
}

pub(crate) async fn heartbeat(
    c: &mut TcpStream,
    request: &ShareGroupHeartbeatRequest,
) -> ShareGroupHeartbeatResponse {
    call(c, ApiKey::ShareGroupHeartbeat, 1, request).await
}

async fn describe(c: &mut TcpStream, group: &str) -> share_group_describe_response::DescribedGroup {
    let mut request = ShareGroupDescribeRequest::default();
    request.group_ids = vec![GroupId(text(group))];
    let mut response: ShareGroupDescribeResponse =
        call(c, ApiKey::ShareGroupDescribe, 1, &request).await;
    response.groups.remove(0)
}

/// The groups ListGroups v5 lists for `types`, as (id, protocol type, state, type).
async fn list(c: &mut TcpStream, types: &[&str]) -> Vec<(String, String, String, String)> {
    let mut request = ListGroupsRequest::default();
    request.types_filter = types.iter().map(|t| text(t)).collect();
    let response: ListGroupsResponse = call(c, ApiKey::ListGroups, 5, &request).await;
    response
        .groups
        .into_iter()
        .map(|g| {
            (
                g.group_id.to_string(),
                g.protocol_type.to_string(),
                g.group_state.to_string(),
                g.group_type.to_string(),
            )
        })
        .collect()
}

fn message(text: &Option<StrBytes>) -> &str {
    text.as_ref().map_or("", |m| m.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_group_members_share_partitions_expire_and_meet_other_protocols() {
    let settings = [
        ("offsets.topic.num.partitions", "3"),
        ("group.share.session.timeout.ms", "1500"),
        ("group.share.heartbeat.interval.ms", "200"),
        ("group.share.max.size", "2"),
    ];
    let test = start_on(Arc::new(MemoryStorage::new()), Path::new("/"), &settings).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "t", 1, &[]).await, 0);
    let topic_id = test.broker.image().topic("t").expect("topic").topic_id;
    let mut find = FindCoordinatorRequest::default();
    find.key = text("sg");
    let found: FindCoordinatorResponse = call(&mut c, ApiKey::FindCoordinator, 3, &find).await;
    assert_eq!(found.error_code, 0);

    // Two members join and share the one partition.
    let first = heartbeat(&mut c, &join("sg", "m1", "t")).await;
    assert_eq!(first.error_code, 0, "{:?}", first.error_message);
    assert_eq!(first.member_id.as_ref().map(|s| s.as_str()), Some("m1"));
    assert_eq!(
        first.heartbeat_interval_ms, 200,
        "group.share.heartbeat.interval.ms"
    );
    let assigned = |r: &ShareGroupHeartbeatResponse| {
        r.assignment.as_ref().map(|a| {
            a.topic_partitions
                .iter()
                .map(|t| (t.topic_id, t.partitions.clone()))
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(assigned(&first), Some(vec![(topic_id, vec![0])]));
    let second = heartbeat(&mut c, &join("sg", "m2", "t")).await;
    assert_eq!(assigned(&second), Some(vec![(topic_id, vec![0])]), "shared");
    assert!(second.member_epoch > first.member_epoch);
    let quiet = heartbeat(&mut c, &beat("sg", "m1", first.member_epoch)).await;
    assert_eq!(
        (quiet.error_code, quiet.member_epoch),
        (0, second.member_epoch)
    );
    assert!(quiet.assignment.is_none(), "its partition did not change");

    let described = describe(&mut c, "sg").await;
    assert_eq!(described.error_code, 0);
    assert_eq!(described.group_state.as_str(), "Stable");
    assert_eq!(described.assignor_name.as_str(), "simple");
    let members: Vec<&str> = described
        .members
        .iter()
        .map(|m| m.member_id.as_str())
        .collect();
    assert_eq!(members, ["m1", "m2"]);
    let member = &described.members[0];
    assert_eq!(member.subscribed_topic_names, vec![topic_name("t")]);
    assert_eq!(
        member.assignment.topic_partitions[0].topic_name,
        topic_name("t")
    );
    assert_eq!(
        list(&mut c, &["share"]).await,
        [("sg".into(), "share".into(), "Stable".into(), "share".into())]
    );
    assert!(list(&mut c, &["consumer"]).await.is_empty());

    // Refusals, each as Kafka words it; none changes the group.
    let mut no_topics = join("sg", "m3", "t");
    no_topics.subscribed_topic_names = Some(Vec::new());
    let cases = [
        (
            no_topics,
            INVALID_REQUEST,
            "SubscribedTopicNames must be set in first request.",
        ),
        (
            beat("sg", "m1", -2),
            INVALID_REQUEST,
            "MemberEpoch is invalid.",
        ),
        (
            join("", "m3", "t"),
            INVALID_REQUEST,
            "GroupId can't be empty.",
        ),
        (join("sg", "", "t"), INVALID_REQUEST, ""),
        (
            beat("sg", "m9", 3),
            UNKNOWN_MEMBER_ID,
            "Member m9 is not a member of group sg.",
        ),
        (
            beat("nobody", "m1", 3),
            GROUP_ID_NOT_FOUND,
            "Share group nobody not found.",
        ),
        (
            beat("nobody", "m1", -1),
            GROUP_ID_NOT_FOUND,
            "Group nobody not found.",
        ),
        (
            beat("sg", "m1", second.member_epoch + 7),
            FENCED_MEMBER_EPOCH,
            "The share group member has a greater member epoch",
        ),
        (
            join("sg", "m3", "t"),
            GROUP_MAX_SIZE_REACHED,
            "The share group has reached its maximum capacity of 2 members.",
        ),
    ];
    for (request, code, text) in cases {
        let refused = heartbeat(&mut c, &request).await;
        assert_eq!(refused.error_code, code, "{request:?}");
        assert!(
            message(&refused.error_message).starts_with(text),
            "{:?}",
            refused.error_message
        );
    }
    assert_eq!(describe(&mut c, "sg").await.members.len(), 2);

    // The other protocols refuse the share group's id; the classic APIs do not describe it.
    let mut consumer = ConsumerGroupHeartbeatRequest::default();
    consumer.group_id = GroupId(text("sg"));
    consumer.member_id = text("c1");
    consumer.rebalance_timeout_ms = 30_000;
    consumer.subscribed_topic_names = Some(vec![topic_name("t")]);
    consumer.topic_partitions = Some(Vec::new());
    let refused: ConsumerGroupHeartbeatResponse =
        call(&mut c, ApiKey::ConsumerGroupHeartbeat, 1, &consumer).await;
    assert_eq!(refused.error_code, GROUP_ID_NOT_FOUND);
    assert_eq!(
        message(&refused.error_message),
        "Group sg is not a consumer group."
    );
    let mut classic = JoinGroupRequest::default();
    classic.group_id = GroupId(text("sg"));
    classic.session_timeout_ms = 10_000;
    classic.rebalance_timeout_ms = 10_000;
    classic.member_id = text("");
    classic.protocol_type = text("consumer");
    let mut protocol = join_group_request::JoinGroupRequestProtocol::default();
    protocol.name = text("range");
    classic.protocols = vec![protocol];
    let joined: JoinGroupResponse = call(&mut c, ApiKey::JoinGroup, 5, &classic).await;
    assert_eq!(joined.error_code, INCONSISTENT_GROUP_PROTOCOL);
    let mut groups = DescribeGroupsRequest::default();
    groups.groups = vec![GroupId(text("sg"))];
    let described: DescribeGroupsResponse = call(&mut c, ApiKey::DescribeGroups, 6, &groups).await;
    assert_eq!(described.groups[0].error_code, GROUP_ID_NOT_FOUND);
    assert_eq!(
        message(&described.groups[0].error_message),
        "Group sg is not a classic group."
    );
    let unknown = describe(&mut c, "nobody").await;
    assert_eq!(
        (unknown.error_code, message(&unknown.error_message)),
        (GROUP_ID_NOT_FOUND, "Group nobody not found.")
    );

    // m2 stops heartbeating: after its session it is gone, and m1 still has the partition.
    let mut epoch = quiet.member_epoch;
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let answer = heartbeat(&mut c, &beat("sg", "m1", epoch)).await;
        assert_eq!(answer.error_code, 0, "{:?}", answer.error_message);
        epoch = answer.member_epoch;
    }
    let described = describe(&mut c, "sg").await;
    let members: Vec<&str> = described
        .members
        .iter()
        .map(|m| m.member_id.as_str())
        .collect();
    assert_eq!(members, ["m1"], "m2's session expired");
    assert!(epoch > quiet.member_epoch, "its departure moved the epoch");

    // A group with a member is not deleted; once the member leaves it is.
    let mut delete = DeleteGroupsRequest::default();
    delete.groups_names = vec![GroupId(text("sg"))];
    let refused: DeleteGroupsResponse = call(&mut c, ApiKey::DeleteGroups, 2, &delete).await;
    assert_eq!(refused.results[0].error_code, NON_EMPTY_GROUP);
    let left = heartbeat(&mut c, &beat("sg", "m1", -1)).await;
    assert_eq!((left.error_code, left.member_epoch), (0, -1));
    assert_eq!(describe(&mut c, "sg").await.group_state.as_str(), "Empty");
    let deleted: DeleteGroupsResponse = call(&mut c, ApiKey::DeleteGroups, 2, &delete).await;
    assert_eq!(deleted.results[0].error_code, 0);
    assert_eq!(describe(&mut c, "sg").await.error_code, GROUP_ID_NOT_FOUND);
    assert!(list(&mut c, &[]).await.iter().all(|g| g.0 != "sg"));
}

const INVALID_RECORD_STATE: i16 = 121;
const SHARE_SESSION_NOT_FOUND: i16 = 122;
const INVALID_SHARE_SESSION_EPOCH: i16 = 123;

/// A ShareFetch of `member` at session `epoch` for partition 0 of `topic_id`, acknowledging
/// `acks` (first, last, type) there.
pub(crate) fn share_fetch(
    member: &str,
    epoch: i32,
    topic_id: uuid::Uuid,
    max_records: i32,
    acks: &[(i64, i64, i8)],
) -> ShareFetchRequest {
    let mut partition = share_fetch_request::FetchPartition::default();
    partition.partition_index = 0;
    partition.acknowledgement_batches = acks
        .iter()
        .map(|&(first, last, kind)| {
            let mut batch = share_fetch_request::AcknowledgementBatch::default();
            batch.first_offset = first;
            batch.last_offset = last;
            batch.acknowledge_types = vec![kind];
            batch
        })
        .collect();
    let mut topic = share_fetch_request::FetchTopic::default();
    topic.topic_id = topic_id;
    topic.partitions = vec![partition];
    let mut request = ShareFetchRequest::default();
    request.group_id = Some(GroupId(text("queue")));
    request.member_id = Some(text(member));
    request.share_session_epoch = epoch;
    request.max_wait_ms = 0;
    request.max_bytes = 1 << 20;
    request.max_records = max_records;
    request.topics = vec![topic];
    request
}

/// The partition's answer: (error, acknowledge error, acquired (first, last, deliveries),
/// whether records came).
pub(crate) async fn share_fetched(
    c: &mut TcpStream,
    request: &ShareFetchRequest,
) -> (i16, Option<(i16, i16, Vec<(i64, i64, i16)>, bool)>) {
    let response: ShareFetchResponse = call(c, ApiKey::ShareFetch, 1, request).await;
    let partition = response.responses.first().map(|t| {
        let p = &t.partitions[0];
        let acquired = p
            .acquired_records
            .iter()
            .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
            .collect();
        let records = p.records.as_ref().is_some_and(|r| !r.is_empty());
        (p.error_code, p.acknowledge_error_code, acquired, records)
    });
    (response.error_code, partition)
}

/// One batch of ten records, `v0` to `v9`.
pub(crate) fn ten_records() -> Vec<u8> {
    use weir_log::batch::{build_batch, ProducerFields};
    let values: Vec<Vec<u8>> = (0..10).map(|i| format!("v{i}").into_bytes()).collect();
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    build_batch(&refs, 0, ProducerFields::NONE)
}

/// What a new session of `member` is first delivered from partition 0 of `topic_id`, asking
/// again for up to 10 s while the partition or its share coordinator is not ready.
pub(crate) async fn first_delivery(
    c: &mut TcpStream,
    member: &str,
    topic_id: uuid::Uuid,
) -> Option<(i16, i16, Vec<(i64, i64, i16)>, bool)> {
    for _ in 0..200 {
        let fetched = share_fetched(c, &share_fetch(member, 0, topic_id, 20, &[])).await;
        if fetched.0 == 0 && fetched.1.as_ref().is_some_and(|p| p.0 == 0 && p.3) {
            return fetched.1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_fetch_delivers_each_record_to_one_member_and_redelivers_what_is_released() {
    use weir_log::batch::{build_batch, ProducerFields};
    let test = start_on(Arc::new(MemoryStorage::new()), Path::new("/"), &[]).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "q", 1, &[]).await, 0);
    let topic_id = test.broker.image().topic("q").expect("topic").topic_id;

    // The first fetch starts the share-partition at the log's end (share.auto.offset.reset
    // latest): nothing yet.
    assert_eq!(
        share_fetched(&mut c, &share_fetch("a", 0, topic_id, 4, &[])).await,
        (0, None)
    );
    assert_eq!(produce(&mut c, "q", 0, -1, ten_records()).await.0, 0);

    // a takes four records, b the other six: none goes to both.
    let a = share_fetched(&mut c, &share_fetch("a", 1, topic_id, 4, &[])).await;
    assert_eq!(a, (0, Some((0, 0, vec![(0, 3, 1)], true))));
    let b = share_fetched(&mut c, &share_fetch("b", 0, topic_id, 500, &[])).await;
    assert_eq!(b, (0, Some((0, 0, vec![(4, 9, 1)], true))));
    assert_eq!(
        share_fetched(&mut c, &share_fetch("c", 0, topic_id, 500, &[])).await,
        (0, None)
    );

    // a accepts two and releases two with ShareAcknowledge; b rejects one and accepts the
    // rest in its next fetch, which brings it the two a released, delivered a second time.
    let mut ack = ShareAcknowledgeRequest::default();
    ack.group_id = Some(GroupId(text("queue")));
    ack.member_id = Some(text("a"));
    ack.share_session_epoch = 2;
    let mut partition = share_acknowledge_request::AcknowledgePartition::default();
    partition.partition_index = 0;
    for (first, last, kind) in [(0, 1, 1), (2, 3, 2)] {
        let mut batch = share_acknowledge_request::AcknowledgementBatch::default();
        batch.first_offset = first;
        batch.last_offset = last;
        batch.acknowledge_types = vec![kind];
        partition.acknowledgement_batches.push(batch);
    }
    let mut topic = share_acknowledge_request::AcknowledgeTopic::default();
    topic.topic_id = topic_id;
    topic.partitions = vec![partition];
    ack.topics = vec![topic];
    let acked: ShareAcknowledgeResponse = call(&mut c, ApiKey::ShareAcknowledge, 1, &ack).await;
    assert_eq!(acked.error_code, 0);
    assert_eq!(acked.responses[0].partitions[0].error_code, 0);
    let b = share_fetched(
        &mut c,
        &share_fetch("b", 1, topic_id, 500, &[(4, 4, 3), (5, 9, 1)]),
    )
    .await;
    assert_eq!(b, (0, Some((0, 0, vec![(2, 3, 2)], true))));

    // Refusals: a record not held, a wrong epoch, a closed session.
    let stale = share_fetched(&mut c, &share_fetch("a", 3, topic_id, 500, &[(0, 0, 1)])).await;
    assert_eq!(
        stale.1.map(|p| p.1),
        Some(INVALID_RECORD_STATE),
        "0 was accepted already"
    );
    let wrong = share_fetched(&mut c, &share_fetch("a", 9, topic_id, 500, &[])).await;
    assert_eq!(wrong.0, INVALID_SHARE_SESSION_EPOCH);
    // A member id past 255 bytes names no session (nor share-partition state).
    let long = "m".repeat(256);
    let refused = share_fetched(&mut c, &share_fetch(&long, 0, topic_id, 500, &[])).await;
    assert_eq!(refused, (INVALID_REQUEST, None));
    ack.share_session_epoch = 0;
    let refused: ShareAcknowledgeResponse = call(&mut c, ApiKey::ShareAcknowledge, 1, &ack).await;
    assert_eq!(refused.error_code, INVALID_SHARE_SESSION_EPOCH);

    // b leaves (its final fetch): what it holds is released for others at once.
    assert_eq!(
        share_fetched(&mut c, &share_fetch("b", -1, topic_id, 500, &[])).await,
        (0, None)
    );
    let gone = share_fetched(&mut c, &share_fetch("b", 3, topic_id, 500, &[])).await;
    assert_eq!(gone.0, SHARE_SESSION_NOT_FOUND);
    let a = share_fetched(&mut c, &share_fetch("a", 4, topic_id, 500, &[])).await;
    assert_eq!(
        a,
        (0, Some((0, 0, vec![(2, 3, 3)], true))),
        "a third delivery"
    );

    // A fetch that waits is answered once records arrive.
    let mut waiting = share_fetch("a", 5, topic_id, 500, &[(2, 3, 1)]);
    waiting.max_wait_ms = 10_000;
    let addr = test.addr;
    let producer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut p = TcpStream::connect(addr).await.expect("connect");
        produce(
            &mut p,
            "q",
            0,
            -1,
            build_batch(&[b"late"], 0, ProducerFields::NONE),
        )
        .await
    });
    let late = share_fetched(&mut c, &waiting).await;
    assert_eq!(producer.await.expect("produced").0, 0);
    assert_eq!(late, (0, Some((0, 0, vec![(10, 10, 1)], true))));

    // What /metrics reports: 15 deliveries, 4 of them again; acknowledgements by type.
    let share = &test.broker.metrics().share;
    let read =
        |counter: &std::sync::atomic::AtomicU64| counter.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!((read(&share.acquired), read(&share.redelivered)), (15, 4));
    let acknowledged: Vec<u64> = share.acknowledged.iter().map(read).collect();
    assert_eq!(acknowledged, [9, 2, 1, 0], "accept, release, reject, gap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_connection_drops_has_its_records_released_at_once() {
    use weir_log::batch::{build_batch, ProducerFields};
    let test = start_on(Arc::new(MemoryStorage::new()), Path::new("/"), &[]).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "q", 1, &[]).await, 0);
    let topic_id = test.broker.image().topic("q").expect("topic").topic_id;
    let mut lost = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(
        share_fetched(&mut lost, &share_fetch("a", 0, topic_id, 10, &[])).await,
        (0, None)
    );
    let (code, _) = produce(
        &mut c,
        "q",
        0,
        -1,
        build_batch(&[b"x", b"y"], 0, ProducerFields::NONE),
    )
    .await;
    assert_eq!(code, 0);
    let a = share_fetched(&mut lost, &share_fetch("a", 1, topic_id, 10, &[])).await;
    assert_eq!(a, (0, Some((0, 0, vec![(0, 1, 1)], true))));
    // a's connection drops (a killed consumer) long before its locks would expire: b gets
    // the records at once, delivered a second time.
    drop(lost);
    let mut got = None;
    for epoch in 0..100 {
        let b = share_fetched(&mut c, &share_fetch("b", epoch, topic_id, 10, &[])).await;
        if b.1.is_some() {
            got = b.1;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(got, Some((0, 0, vec![(0, 1, 2)], true)));
}

/// What a share group acknowledged survives a restart of its partition's leader (which is its
/// share coordinator here): the group goes on after the last acknowledged record, records it
/// released or held are delivered again with their deliveries counted, a rejected one never.
/// A ShareAcknowledge of `member` at session `epoch` for partition 0 of `topic_id`: `acks`
/// (first, last, type); the partition's error code.
pub(crate) async fn share_acknowledged(
    c: &mut TcpStream,
    member: &str,
    epoch: i32,
    topic_id: uuid::Uuid,
    acks: &[(i64, i64, i8)],
) -> i16 {
    let mut ack = ShareAcknowledgeRequest::default();
    ack.group_id = Some(GroupId(text("queue")));
    ack.member_id = Some(text(member));
    ack.share_session_epoch = epoch;
    let mut partition = share_acknowledge_request::AcknowledgePartition::default();
    for &(first, last, kind) in acks {
        let mut batch = share_acknowledge_request::AcknowledgementBatch::default();
        (batch.first_offset, batch.last_offset) = (first, last);
        batch.acknowledge_types = vec![kind];
        partition.acknowledgement_batches.push(batch);
    }
    let mut topic = share_acknowledge_request::AcknowledgeTopic::default();
    topic.topic_id = topic_id;
    topic.partitions = vec![partition];
    ack.topics = vec![topic];
    let acked: ShareAcknowledgeResponse = call(c, ApiKey::ShareAcknowledge, 1, &ack).await;
    assert_eq!(acked.error_code, 0);
    acked.responses[0].partitions[0].error_code
}

/// DescribeShareGroupOffsets v1 of every partition holding `group`'s state: (topic, partition,
/// start offset, lag), or the group's error.
pub(crate) async fn described_offsets(
    c: &mut TcpStream,
    group: &str,
) -> Result<Vec<(String, i32, i64, i64)>, i16> {
    let mut asked =
        describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default();
    asked.group_id = GroupId(text(group));
    asked.topics = None;
    let mut request = DescribeShareGroupOffsetsRequest::default();
    request.groups = vec![asked];
    let described: DescribeShareGroupOffsetsResponse =
        call(c, ApiKey::DescribeShareGroupOffsets, 1, &request).await;
    let group = &described.groups[0];
    if group.error_code != 0 {
        return Err(group.error_code);
    }
    Ok(group
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    t.topic_name.0.to_string(),
                    p.partition_index,
                    p.start_offset,
                    p.lag,
                )
            })
        })
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledgements_survive_a_restart() {
    let storage = MemoryStorage::new();
    let root = Path::new("/");
    let test = start_on(Arc::new(storage.clone()), root, &[]).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "q", 1, &[]).await, 0);
    let topic_id = test.broker.image().topic("q").expect("topic").topic_id;
    assert_eq!(
        share_fetched(&mut c, &share_fetch("a", 0, topic_id, 20, &[])).await,
        (0, None)
    );
    assert_eq!(produce(&mut c, "q", 0, -1, ten_records()).await.0, 0);
    let a = share_fetched(&mut c, &share_fetch("a", 1, topic_id, 20, &[])).await;
    assert_eq!(a, (0, Some((0, 0, vec![(0, 9, 1)], true))));
    // Accept 0–3, release 4–5, reject 6; 7–9 stay acquired.
    let acks = [(0, 3, 1), (4, 5, 2), (6, 6, 3)];
    assert_eq!(share_acknowledged(&mut c, "a", 2, topic_id, &acks).await, 0);
    let summary = test
        .broker
        .share_coordinator()
        .read_summary(
            &weir_coordinator::share_coordinator::records::SharePartitionKey {
                group: "queue".to_string(),
                topic_id,
                partition: 0,
            },
        )
        .expect("summary");
    assert_eq!(summary.start_offset, 4, "0–3 done");
    test.shutdown().await;

    let restarted = start_on(Arc::new(storage), root, &[]).await;
    let mut c = TcpStream::connect(restarted.addr).await.expect("connect");
    assert_eq!(
        first_delivery(&mut c, "b", topic_id).await,
        Some((0, 0, vec![(4, 5, 2), (7, 9, 2)], true)),
        "what was not acknowledged, once more; 0–3 and the rejected 6 never"
    );

    // kafka-share-groups --describe: the start offset and the lag (10 records, 4 done before
    // the start, 6 rejected: 5 not yet done), once the group has a member again (its
    // membership is not stored).
    let mut find = FindCoordinatorRequest::default();
    find.key = text("queue");
    let found: FindCoordinatorResponse = call(&mut c, ApiKey::FindCoordinator, 3, &find).await;
    assert_eq!(found.error_code, 0);
    assert_eq!(
        heartbeat(&mut c, &join("queue", "b", "q")).await.error_code,
        0
    );
    assert_eq!(
        described_offsets(&mut c, "queue").await,
        Ok(vec![("q".to_string(), 0, 4, 5)])
    );
    assert_eq!(
        described_offsets(&mut c, "nobody").await,
        Err(GROUP_ID_NOT_FOUND)
    );
    // Partitions named: each once, one the topic lacks refused without a coordinator call.
    let mut topic =
        describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestTopic::default();
    topic.topic_name = topic_name("q");
    topic.partitions = vec![0, 7, 0];
    let mut asked =
        describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default();
    asked.group_id = GroupId(text("queue"));
    asked.topics = Some(vec![topic]);
    let mut request = DescribeShareGroupOffsetsRequest::default();
    request.groups = vec![asked];
    let named: DescribeShareGroupOffsetsResponse =
        call(&mut c, ApiKey::DescribeShareGroupOffsets, 1, &request).await;
    let answers: Vec<(i32, i16, i64)> = named.groups[0].topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.error_code, p.start_offset))
        .collect();
    assert_eq!(answers, [(0, 0, 4), (7, UNKNOWN_TOPIC_OR_PARTITION, -1)]);

    // Leaders find a share-partition's coordinator with FindCoordinator's key type 2.
    let key = weir_coordinator::share_coordinator::records::SharePartitionKey {
        group: "queue".to_string(),
        topic_id,
        partition: 0,
    };
    let mut find = FindCoordinatorRequest::default();
    find.key_type = 2;
    find.coordinator_keys = vec![
        text(&key.coordinator_key()),
        text("queue-without-partition"),
    ];
    let found: FindCoordinatorResponse = call(&mut c, ApiKey::FindCoordinator, 6, &find).await;
    let answers: Vec<(i16, i32)> = found
        .coordinators
        .iter()
        .map(|c| (c.error_code, c.node_id.0))
        .collect();
    assert_eq!(answers, [(0, 1), (INVALID_REQUEST, -1)]);
    restarted.shutdown().await;
}

/// A ShareFetch wanting fewer records than its byte budget holds reads the log in windows:
/// the records it acquires come back whole, in order, however many windows they span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_fetch_reads_what_it_acquires_across_windows() {
    use weir_log::batch::{build_batch, ProducerFields};
    let test = start_on(Arc::new(MemoryStorage::new()), Path::new("/"), &[]).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "w", 1, &[]).await, 0);
    let topic_id = test.broker.image().topic("w").expect("topic").topic_id;
    let opening = share_fetch("a", 0, topic_id, 1, &[]);
    assert_eq!(share_fetched(&mut c, &opening).await, (0, None));
    // 300 one-record batches of 1 KiB: the first 64 KiB window holds about 60.
    let value = vec![b'x'; 1024];
    for _ in 0..300 {
        let batch = build_batch(&[value.as_slice()], 0, ProducerFields::NONE);
        assert_eq!(produce(&mut c, "w", 0, -1, batch).await.0, 0);
    }
    for (epoch, wanted, first, last) in [(1, 250, 0, 249), (2, 500, 250, 299)] {
        let request = share_fetch("a", epoch, topic_id, wanted, &[]);
        let response: ShareFetchResponse = call(&mut c, ApiKey::ShareFetch, 1, &request).await;
        let partition = &response.responses[0].partitions[0];
        let acquired: Vec<(i64, i64)> = partition
            .acquired_records
            .iter()
            .map(|a| (a.first_offset, a.last_offset))
            .collect();
        assert_eq!(acquired, [(first, last)]);
        let records = partition.records.clone().expect("records");
        let batches: Vec<i64> = whole_batches(&records)
            .into_iter()
            .map(|(base, _)| base)
            .collect();
        assert_eq!(
            batches,
            (first..=last).collect::<Vec<_>>(),
            "each batch once, in order"
        );
    }
}
