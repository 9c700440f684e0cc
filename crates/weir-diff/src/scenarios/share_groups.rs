//! Share groups (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe, and share groups in
//! the group admin APIs.

use anyhow::Result;
use kafka_protocol::messages::list_groups_request::ListGroupsRequest;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, DeleteGroupsRequest,
    DeleteGroupsResponse, DescribeGroupsRequest, GroupId, ListGroupsResponse,
    ShareGroupDescribeRequest, ShareGroupDescribeResponse, ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::cluster::coordinator_ready;
use super::consumer_groups::mask_epochs;
use super::{scenarios, Expect};
use crate::session::Ctx;
use crate::setup::{create_topic, s};

scenarios! { "share_groups";
    members_join_share_and_leave: Expect::Same,
        "ShareGroupHeartbeat v1: two members join, share a one-partition topic, heartbeat, describe, list, leave";
    heartbeat_refusals: Expect::Same,
        "ShareGroupHeartbeat v1 requests Kafka refuses, each with its error and message; a group id of another type";
    heartbeat_fenced_message: Expect::Pending("Kafka assigns a share group's partitions once their share-group state is initialised, a second group epoch; Weir at the join"),
        "ShareGroupHeartbeat v1 with a future epoch: FENCED_MEMBER_EPOCH naming both epochs";
    describe_list_and_delete: Expect::Same,
        "ShareGroupDescribe v1 of unknown, consumer and share groups; DescribeGroups v6; DeleteGroups of a share group";
}

/// A member's first heartbeat, subscribing to `topics`.
fn joining(group: GroupId, member_id: &str, topics: &[TopicName]) -> ShareGroupHeartbeatRequest {
    let mut request = ShareGroupHeartbeatRequest::default();
    request.group_id = group;
    request.member_id = s(member_id);
    request.member_epoch = 0;
    request.subscribed_topic_names = Some(topics.to_vec());
    request
}

/// The member's next heartbeat after `answer`, nothing changed.
fn again(
    group: GroupId,
    member_id: &str,
    answer: &ShareGroupHeartbeatResponse,
) -> ShareGroupHeartbeatRequest {
    let mut request = ShareGroupHeartbeatRequest::default();
    request.group_id = group;
    request.member_id = s(member_id);
    request.member_epoch = answer.member_epoch;
    request
}

/// Joins `member` (unrecorded) and heartbeats until it is assigned a partition (at most 5 s).
async fn settle(
    cx: &mut Ctx,
    group: &GroupId,
    member: &str,
    topics: &[TopicName],
) -> Result<ShareGroupHeartbeatResponse> {
    let joined = cx
        .quietly(
            ApiKey::ShareGroupHeartbeat,
            1,
            &joining(group.clone(), member, topics),
        )
        .await?;
    settle_again(cx, group, member, joined).await
}

/// Heartbeats (unrecorded) from `answer` until the member is assigned a partition (at most
/// 5 s); the last answer that carried its assignment, with the epoch it settled at.
async fn settle_again(
    cx: &mut Ctx,
    group: &GroupId,
    member: &str,
    mut answer: ShareGroupHeartbeatResponse,
) -> Result<ShareGroupHeartbeatResponse> {
    let mut assigned = answer.assignment.clone();
    for _ in 0..50 {
        if assigned
            .as_ref()
            .is_some_and(|a| !a.topic_partitions.is_empty())
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        answer = cx
            .quietly(
                ApiKey::ShareGroupHeartbeat,
                1,
                &again(group.clone(), member, &answer),
            )
            .await?;
        if answer.assignment.is_some() {
            assigned = answer.assignment.clone();
        }
    }
    answer.assignment = assigned;
    Ok(answer)
}

/// Sends one heartbeat and records the answer.
async fn heartbeat(
    cx: &mut Ctx,
    request: &ShareGroupHeartbeatRequest,
) -> Result<ShareGroupHeartbeatResponse> {
    cx.answer(ApiKey::ShareGroupHeartbeat, 1, request).await
}

async fn describe(cx: &mut Ctx, groups: Vec<GroupId>) -> Result<()> {
    let mut request = ShareGroupDescribeRequest::default();
    request.group_ids = groups;
    let mut response: ShareGroupDescribeResponse =
        cx.quietly(ApiKey::ShareGroupDescribe, 1, &request).await?;
    response.groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    for group in &mut response.groups {
        group.members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    }
    cx.record("ShareGroupDescribe v1 (by group id)", &response);
    Ok(())
}

/// ListGroups v5 of `types`, only the groups named.
async fn list(cx: &mut Ctx, types: &[&str], groups: &[&GroupId]) -> Result<()> {
    let mut request = ListGroupsRequest::default();
    request.types_filter = types.iter().map(|t| s(t)).collect();
    let mut response: ListGroupsResponse = cx.quietly(ApiKey::ListGroups, 5, &request).await?;
    response.groups.retain(|g| groups.contains(&&g.group_id));
    response.groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    cx.record(
        &format!("ListGroups v5 {types:?} (these groups)"),
        &response,
    );
    Ok(())
}

async fn members_join_share_and_leave(cx: &mut Ctx) -> Result<()> {
    mask_epochs(cx);
    coordinator_ready(cx).await?;
    let topic = create_topic(cx, "kip932", 1, &[]).await?;
    let group = cx.group("kip932");
    let first = uuid::Uuid::new_v4().simple().to_string();
    let second = uuid::Uuid::new_v4().simple().to_string();
    let topics = std::slice::from_ref(&topic);
    // Kafka assigns once the share-partition's state is initialised, Weir at the join:
    // heartbeat (unrecorded) until both members are assigned, then record where they stand.
    let first_answer = settle(cx, &group, &first, topics).await?;
    let second_answer = settle(cx, &group, &second, topics).await?;
    cx.record("second member assigned", &second_answer.assignment);
    // The first member's next heartbeat: what the second member's arrival changed for it.
    let _ = heartbeat(cx, &again(group.clone(), &first, &first_answer)).await?;
    describe(cx, vec![group.clone()]).await?;
    list(cx, &["share"], &[&group]).await?;
    list(cx, &[], &[&group]).await?;
    for member in [&first, &second] {
        let mut leave = ShareGroupHeartbeatRequest::default();
        leave.group_id = group.clone();
        leave.member_id = s(member);
        leave.member_epoch = -1;
        heartbeat(cx, &leave).await?;
    }
    describe(cx, vec![group.clone()]).await?;
    list(cx, &["share"], &[&group]).await
}

async fn heartbeat_refusals(cx: &mut Ctx) -> Result<()> {
    cx.mask("member_epoch");
    coordinator_ready(cx).await?;
    let topic = create_topic(cx, "kip932-refusals", 1, &[]).await?;
    let group = cx.group("kip932-refusals");
    let member = uuid::Uuid::new_v4().simple().to_string();
    let topics = std::slice::from_ref(&topic);
    let mut cases: Vec<ShareGroupHeartbeatRequest> = Vec::new();
    let mut no_subscription = joining(group.clone(), &member, topics);
    no_subscription.subscribed_topic_names = None;
    cases.push(no_subscription);
    cases.push(joining(group.clone(), &member, &[]));
    cases.push(joining(group.clone(), "", topics));
    let mut below = joining(group.clone(), &member, topics);
    below.member_epoch = -2;
    cases.push(below);
    cases.push(joining(GroupId(StrBytes::default()), &member, topics));
    let mut unknown_group = joining(cx.group("kip932-nobody"), &member, topics);
    unknown_group.member_epoch = 5;
    cases.push(unknown_group);
    let mut leave_unknown = joining(cx.group("kip932-nobody"), &member, topics);
    leave_unknown.member_epoch = -1;
    cases.push(leave_unknown);
    for request in &cases {
        heartbeat(cx, request).await?;
    }
    settle(cx, &group, &member, topics).await?;
    let mut stranger = joining(group.clone(), "not-a-member", topics);
    stranger.member_epoch = 1;
    heartbeat(cx, &stranger).await?;
    let mut rejoin = joining(group.clone(), &member, topics);
    rejoin.member_epoch = 0;
    let answer = heartbeat(cx, &rejoin).await?;
    cx.record(
        "rejoined",
        &(answer.error_code, answer.assignment.is_some()),
    );

    // A group id another kind of group holds.
    let classic = cx.group("kip932-offsets-only");
    commit_offset(cx, &classic, &topic).await?;
    heartbeat(cx, &joining(classic, &member, topics)).await?;
    let mut consumer = ConsumerGroupHeartbeatRequest::default();
    consumer.group_id = group.clone();
    consumer.member_id = s(&member);
    consumer.rebalance_timeout_ms = 30_000;
    consumer.subscribed_topic_names = Some(topics.to_vec());
    consumer.topic_partitions = Some(Vec::new());
    let _: ConsumerGroupHeartbeatResponse = cx
        .answer(ApiKey::ConsumerGroupHeartbeat, 1, &consumer)
        .await?;
    Ok(())
}

async fn heartbeat_fenced_message(cx: &mut Ctx) -> Result<()> {
    coordinator_ready(cx).await?;
    let topic = create_topic(cx, "kip932-fenced", 1, &[]).await?;
    let group = cx.group("kip932-fenced");
    let member = uuid::Uuid::new_v4().simple().to_string();
    let settled = settle(cx, &group, &member, std::slice::from_ref(&topic)).await?;
    let mut future = again(group, &member, &settled);
    future.member_epoch += 50;
    heartbeat(cx, &future).await?;
    Ok(())
}

/// Commits offset 1 of `topic`'s partition 0 for `group`, which makes it a classic group
/// known by its offsets.
async fn commit_offset(cx: &mut Ctx, group: &GroupId, topic: &TopicName) -> Result<()> {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};
    let mut p = OffsetCommitRequestPartition::default();
    p.committed_offset = 1;
    let mut t = OffsetCommitRequestTopic::default();
    t.name = topic.clone();
    t.partitions = vec![p];
    let mut commit = OffsetCommitRequest::default();
    commit.group_id = group.clone();
    commit.generation_id_or_member_epoch = -1;
    commit.topics = vec![t];
    let _: OffsetCommitResponse = cx.quietly(ApiKey::OffsetCommit, 8, &commit).await?;
    Ok(())
}

async fn describe_list_and_delete(cx: &mut Ctx) -> Result<()> {
    mask_epochs(cx);
    coordinator_ready(cx).await?;
    let topic = create_topic(cx, "kip932-admin", 1, &[]).await?;
    let classic = cx.group("kip932-classic");
    commit_offset(cx, &classic, &topic).await?;
    let share = cx.group("kip932-admin");
    let member = uuid::Uuid::new_v4().simple().to_string();
    let joined = settle(cx, &share, &member, std::slice::from_ref(&topic)).await?;
    describe(
        cx,
        vec![
            share.clone(),
            cx.group("kip932-unknown"),
            cx.group("kip932-classic"),
        ],
    )
    .await?;
    let mut classic = DescribeGroupsRequest::default();
    classic.groups = vec![share.clone()];
    super::groups::describe_groups(cx, 6, &classic).await?;

    // A share group with a member is not deleted; once it is empty it is.
    let mut delete = DeleteGroupsRequest::default();
    delete.groups_names = vec![share.clone()];
    let _: DeleteGroupsResponse = cx.answer(ApiKey::DeleteGroups, 2, &delete).await?;
    let mut leave = again(share.clone(), &member, &joined);
    leave.member_epoch = -1;
    let _: ShareGroupHeartbeatResponse = cx.quietly(ApiKey::ShareGroupHeartbeat, 1, &leave).await?;
    let _: DeleteGroupsResponse = cx.answer(ApiKey::DeleteGroups, 2, &delete).await?;
    describe(cx, vec![share.clone()]).await?;
    list(cx, &["share"], &[&share]).await
}
