//! The consumer group protocol (KIP-848) on the wire: ConsumerGroupHeartbeat and
//! ConsumerGroupDescribe, member epochs on OffsetCommit and OffsetFetch, and how the classic
//! APIs meet a consumer-protocol group. Every bad request gets Kafka's error and changes
//! nothing.

use std::path::Path;
use std::sync::Arc;

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tokio::net::TcpStream;
use weir_storage::MemoryStorage;

use crate::common::*;

const GROUP_ID_NOT_FOUND: i16 = 69;
const INVALID_REQUEST: i16 = 42;
const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_MEMBER_EPOCH: i16 = 110;
const UNSUPPORTED_ASSIGNOR: i16 = 112;
const STALE_MEMBER_EPOCH: i16 = 113;
const INVALID_REGULAR_EXPRESSION: i16 = 128;
const UNSUPPORTED_VERSION: i16 = 35;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const NON_EMPTY_GROUP: i16 = 68;
const UNRELEASED_INSTANCE_ID: i16 = 111;

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A join (epoch 0) of `member` subscribing to `topic`.
fn join(group: &str, member: &str, topic: &str) -> ConsumerGroupHeartbeatRequest {
    let mut request = ConsumerGroupHeartbeatRequest::default();
    request.group_id = GroupId(text(group));
    request.member_id = text(member);
    request.member_epoch = 0;
    request.rebalance_timeout_ms = 30_000;
    request.subscribed_topic_names = Some(vec![topic_name(topic)]);
    request.topic_partitions = Some(Vec::new());
    request
}

/// A heartbeat of `member` at `epoch` that changes nothing.
fn beat(group: &str, member: &str, epoch: i32) -> ConsumerGroupHeartbeatRequest {
    let mut request = ConsumerGroupHeartbeatRequest::default();
    request.group_id = GroupId(text(group));
    request.member_id = text(member);
    request.member_epoch = epoch;
    request.rebalance_timeout_ms = -1;
    request
}

async fn heartbeat(
    c: &mut TcpStream,
    version: i16,
    request: &ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    call(c, ApiKey::ConsumerGroupHeartbeat, version, request).await
}

async fn describe(
    c: &mut TcpStream,
    group: &str,
) -> consumer_group_describe_response::DescribedGroup {
    let mut request = ConsumerGroupDescribeRequest::default();
    request.group_ids = vec![GroupId(text(group))];
    let mut response: ConsumerGroupDescribeResponse =
        call(c, ApiKey::ConsumerGroupDescribe, 1, &request).await;
    response.groups.remove(0)
}

async fn fetch_offset(
    c: &mut TcpStream,
    group: &str,
    member: Option<&str>,
    epoch: i32,
) -> (i16, i64) {
    let mut t = OffsetFetchRequestTopics::default();
    t.name = topic_name("t");
    t.partition_indexes = vec![0];
    let mut g = OffsetFetchRequestGroup::default();
    g.group_id = GroupId(text(group));
    g.member_id = member.map(text);
    g.member_epoch = epoch;
    g.topics = Some(vec![t]);
    let mut request = OffsetFetchRequest::default();
    request.groups = vec![g];
    let response: OffsetFetchResponse = call(c, ApiKey::OffsetFetch, 9, &request).await;
    let group = &response.groups[0];
    (
        group.error_code,
        group
            .topics
            .first()
            .map_or(-1, |t| t.partitions[0].committed_offset),
    )
}

async fn commit(
    c: &mut TcpStream,
    version: i16,
    group: &str,
    member: &str,
    epoch: i32,
    offset: i64,
) -> i16 {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    let mut p = OffsetCommitRequestPartition::default();
    p.committed_offset = offset;
    let mut t = OffsetCommitRequestTopic::default();
    t.name = topic_name("t");
    t.partitions = vec![p];
    let mut request = OffsetCommitRequest::default();
    request.group_id = GroupId(text(group));
    request.generation_id_or_member_epoch = epoch;
    request.member_id = text(member);
    request.topics = vec![t];
    let response: OffsetCommitResponse = call(c, ApiKey::OffsetCommit, version, &request).await;
    response.topics[0].partitions[0].error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_protocol_groups_assign_check_epochs_and_refuse_bad_requests() {
    let settings = [
        ("group.initial.rebalance.delay.ms", "0"),
        ("offsets.topic.num.partitions", "3"),
        // Every change assigns at once (the interval's batching is the coordinator's test).
        ("group.consumer.assignment.interval.ms", "0"),
    ];
    let test = start_on(Arc::new(MemoryStorage::new()), Path::new("/"), &settings).await;
    let mut c = TcpStream::connect(test.addr).await.expect("connect");
    assert_eq!(create_topic(&mut c, "t", 4, &[]).await, 0);
    let topic_id = test.broker.image().topic("t").expect("topic").topic_id;
    // As clients do first: the coordinator's lookup creates __consumer_offsets.
    let mut find = FindCoordinatorRequest::default();
    find.key = text("g");
    let found: FindCoordinatorResponse = call(&mut c, ApiKey::FindCoordinator, 3, &find).await;
    assert_eq!(found.error_code, 0);

    // A member joins (v1: it names itself) and gets all four partitions at epoch 1.
    let first = heartbeat(&mut c, 1, &join("g", "m1", "t")).await;
    assert_eq!((first.error_code, first.member_epoch), (0, 1));
    assert_eq!(first.member_id.as_ref().map(|s| s.as_str()), Some("m1"));
    assert_eq!(
        first.heartbeat_interval_ms, 5_000,
        "group.consumer.heartbeat.interval.ms"
    );
    let assignment = first.assignment.expect("assignment");
    assert_eq!(assignment.topic_partitions.len(), 1);
    assert_eq!(assignment.topic_partitions[0].topic_id, topic_id);
    assert_eq!(assignment.topic_partitions[0].partitions, vec![0, 1, 2, 3]);
    // A heartbeat that changes nothing carries no assignment.
    let quiet = heartbeat(&mut c, 1, &beat("g", "m1", 1)).await;
    assert_eq!((quiet.error_code, quiet.member_epoch), (0, 1));
    assert!(quiet.assignment.is_none());
    // v0: the broker names a joining member.
    let named = heartbeat(&mut c, 0, &join("g0", "", "t")).await;
    assert_eq!(named.error_code, 0);
    assert!(named.member_id.as_ref().is_some_and(|id| id.len() >= 16));

    // Commits and fetches at the member's epoch.
    assert_eq!(commit(&mut c, 9, "g", "m1", 1, 42).await, 0);
    assert_eq!(fetch_offset(&mut c, "g", Some("m1"), 1).await, (0, 42));
    assert_eq!(
        fetch_offset(&mut c, "g", None, -1).await,
        (0, 42),
        "an admin's fetch"
    );

    // Bad requests: each gets Kafka's error.
    let mut no_subscription = join("g", "m2", "t");
    no_subscription.subscribed_topic_names = None;
    let mut no_timeout = join("g", "m2", "t");
    no_timeout.rebalance_timeout_ms = -1;
    let mut owning = join("g", "m2", "t");
    owning.topic_partitions = Some(vec![{
        let mut t = TopicPartitions::default();
        t.topic_id = topic_id;
        t.partitions = vec![0];
        t
    }]);
    let mut bad_assignor = join("g", "m2", "t");
    bad_assignor.server_assignor = Some(text("sticky"));
    let mut bad_regex = join("g", "m2", "t");
    bad_regex.subscribed_topic_names = None;
    bad_regex.subscribed_topic_regex = Some(text("t(("));
    let mut dynamic_static_leave = beat("g", "m1", -2);
    dynamic_static_leave.instance_id = None;
    let mut empty_group = join("", "m2", "t");
    empty_group.group_id = GroupId(text(""));
    let cases: Vec<(&str, i16, ConsumerGroupHeartbeatRequest, i16)> = vec![
        (
            "a join without a subscription",
            1,
            no_subscription,
            INVALID_REQUEST,
        ),
        (
            "a join without a rebalance timeout",
            1,
            no_timeout,
            INVALID_REQUEST,
        ),
        ("a join that owns partitions", 1, owning, INVALID_REQUEST),
        ("an unknown assignor", 1, bad_assignor, UNSUPPORTED_ASSIGNOR),
        (
            "a regex that does not compile",
            1,
            bad_regex,
            INVALID_REGULAR_EXPRESSION,
        ),
        (
            "v1 without a member id",
            1,
            join("g", "", "t"),
            INVALID_REQUEST,
        ),
        ("an epoch below -2", 1, beat("g", "m1", -3), INVALID_REQUEST),
        (
            "a temporary leave without an instance id",
            1,
            dynamic_static_leave,
            INVALID_REQUEST,
        ),
        ("an empty group id", 1, empty_group, INVALID_REQUEST),
        (
            "a heartbeat to no group",
            1,
            beat("nowhere", "m1", 1),
            GROUP_ID_NOT_FOUND,
        ),
        (
            "an unknown member",
            1,
            beat("g", "stranger", 1),
            UNKNOWN_MEMBER_ID,
        ),
        (
            "an epoch from the future",
            1,
            beat("g", "m1", 9),
            FENCED_MEMBER_EPOCH,
        ),
    ];
    for (what, version, request, error) in cases {
        let response = heartbeat(&mut c, version, &request).await;
        assert_eq!(response.error_code, error, "{what}");
        assert!(
            response.error_message.is_some(),
            "{what}: a message says why"
        );
    }
    assert_eq!(
        commit(&mut c, 8, "g", "m1", 1, 43).await,
        UNSUPPORTED_VERSION,
        "v8 from a consumer member"
    );
    assert_eq!(
        commit(&mut c, 9, "g", "m1", 0, 43).await,
        STALE_MEMBER_EPOCH
    );
    assert_eq!(
        commit(&mut c, 9, "g", "m1", 2, 43).await,
        STALE_MEMBER_EPOCH
    );
    assert_eq!(
        commit(&mut c, 9, "g", "stranger", 1, 43).await,
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        commit(&mut c, 9, "g", "", -1, 43).await,
        UNKNOWN_MEMBER_ID,
        "outside a non-empty group"
    );
    assert_eq!(
        fetch_offset(&mut c, "g", Some("m1"), 0).await.0,
        STALE_MEMBER_EPOCH
    );
    assert_eq!(
        fetch_offset(&mut c, "g", Some("stranger"), 1).await.0,
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        fetch_offset(&mut c, "nowhere", Some("m1"), 1).await,
        (0, -1),
        "no group: nothing committed"
    );
    let classic_join = join_group(&mut c, "g", 9).await;
    assert_eq!(
        classic_join.error_code, INCONSISTENT_GROUP_PROTOCOL,
        "a classic member in a consumer group"
    );
    let mut delete = DeleteGroupsRequest::default();
    delete.groups_names = vec![GroupId(text("g"))];
    let deleted: DeleteGroupsResponse = call(&mut c, ApiKey::DeleteGroups, 2, &delete).await;
    assert_eq!(deleted.results[0].error_code, NON_EMPTY_GROUP);
    // A static member's instance id while it is held.
    let mut static_join = join("g", "s1", "t");
    static_join.instance_id = Some(text("instance"));
    assert_eq!(heartbeat(&mut c, 1, &static_join).await.error_code, 0);
    static_join.member_id = text("s2");
    assert_eq!(
        heartbeat(&mut c, 1, &static_join).await.error_code,
        UNRELEASED_INSTANCE_ID
    );

    // None of it changed the group: m1 is still at epoch 1 with its commit; s1 joined at
    // epoch 2 and waits for what m1 must give up.
    assert_eq!(fetch_offset(&mut c, "g", Some("m1"), 1).await, (0, 42));
    let described = describe(&mut c, "g").await;
    assert_eq!(described.error_code, 0);
    assert_eq!(described.group_state.as_str(), "Reconciling");
    assert_eq!((described.group_epoch, described.assignment_epoch), (2, 2));
    assert_eq!(described.assignor_name.as_str(), "uniform");
    let members: Vec<(&str, i32)> = described
        .members
        .iter()
        .map(|m| (m.member_id.as_str(), m.member_epoch))
        .collect();
    assert_eq!(members, vec![("m1", 1), ("s1", 2)]);
    let m1 = &described.members[0];
    assert_eq!(m1.assignment.topic_partitions[0].topic_name.as_str(), "t");
    assert_eq!(m1.target_assignment.topic_partitions[0].partitions.len(), 2);
    assert_eq!(m1.member_type, 1);
    assert_eq!(
        described.members[1]
            .instance_id
            .as_ref()
            .map(|s| s.as_str()),
        Some("instance")
    );

    // m1 learns what to give up, acknowledges, and moves to epoch 2.
    let revoke = heartbeat(&mut c, 1, &beat("g", "m1", 1)).await;
    assert_eq!(revoke.member_epoch, 1);
    let kept = revoke.assignment.expect("what m1 keeps");
    let mut ack = beat("g", "m1", 1);
    ack.topic_partitions = Some(
        kept.topic_partitions
            .iter()
            .map(|t| {
                let mut o = TopicPartitions::default();
                o.topic_id = t.topic_id;
                o.partitions = t.partitions.clone();
                o
            })
            .collect(),
    );
    let advanced = heartbeat(&mut c, 1, &ack).await;
    assert_eq!((advanced.error_code, advanced.member_epoch), (0, 2));
    let s1 = heartbeat(&mut c, 1, &beat("g", "s1", 2)).await;
    assert_eq!(
        s1.assignment.expect("released partitions").topic_partitions[0]
            .partitions
            .len(),
        2
    );
    assert_eq!(describe(&mut c, "g").await.group_state.as_str(), "Stable");

    // The classic APIs see a consumer group as Kafka shows it.
    let mut describe_classic = DescribeGroupsRequest::default();
    describe_classic.groups = vec![GroupId(text("g"))];
    let v5: DescribeGroupsResponse =
        call(&mut c, ApiKey::DescribeGroups, 5, &describe_classic).await;
    assert_eq!(
        (v5.groups[0].error_code, v5.groups[0].group_state.as_str()),
        (0, "Dead")
    );
    let v6: DescribeGroupsResponse =
        call(&mut c, ApiKey::DescribeGroups, 6, &describe_classic).await;
    assert_eq!(v6.groups[0].error_code, GROUP_ID_NOT_FOUND);
    let mut consumers_only = ListGroupsRequest::default();
    consumers_only.types_filter = vec![text("consumer")];
    let listed: ListGroupsResponse = call(&mut c, ApiKey::ListGroups, 5, &consumers_only).await;
    let listed: Vec<(&str, &str, &str)> = listed
        .groups
        .iter()
        .map(|g| {
            (
                g.group_id.as_str(),
                g.group_state.as_str(),
                g.group_type.as_str(),
            )
        })
        .collect();
    assert!(listed.contains(&("g", "Stable", "consumer")), "{listed:?}");

    // And a classic group is not a consumer group.
    let classic = join_group(&mut c, "classic", 9).await;
    assert_eq!(classic.error_code, 0);
    assert_eq!(
        heartbeat(&mut c, 1, &join("classic", "m9", "t"))
            .await
            .error_code,
        GROUP_ID_NOT_FOUND
    );
    let d = describe(&mut c, "classic").await;
    assert_eq!(d.error_code, GROUP_ID_NOT_FOUND);
    assert_eq!(
        describe(&mut c, "missing").await.error_code,
        GROUP_ID_NOT_FOUND
    );

    // Leaving: the last member out leaves the group Empty, with its offsets.
    for member in ["m1", "s1"] {
        let left = heartbeat(&mut c, 1, &beat("g", member, -1)).await;
        assert_eq!((left.error_code, left.member_epoch), (0, -1), "{member}");
    }
    assert_eq!(describe(&mut c, "g").await.group_state.as_str(), "Empty");
    assert_eq!(
        commit(&mut c, 9, "g", "", -1, 50).await,
        0,
        "an admin's commit to an empty group"
    );
    assert_eq!(fetch_offset(&mut c, "g", None, -1).await, (0, 50));
    test.stop.send_replace(true);
}
