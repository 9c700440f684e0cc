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
const UNKNOWN_MEMBER_ID: i16 = 25;
const FENCED_MEMBER_EPOCH: i16 = 110;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_MAX_SIZE_REACHED: i16 = 81;

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A join (epoch 0) of `member` subscribing to `topic`.
fn join(group: &str, member: &str, topic: &str) -> ShareGroupHeartbeatRequest {
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

async fn heartbeat(
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
