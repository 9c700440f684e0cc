//! The consumer group protocol of KIP-848: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

use std::time::Duration;

use anyhow::{bail, Result};
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, GroupId, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::cluster::coordinator_ready;
use super::{scenarios, Expect};
use crate::session::Ctx;
use crate::setup::{create_topic, s};

scenarios! { "consumer_groups";
    member_joins_settles_and_leaves: Expect::Same,
        "ConsumerGroupHeartbeat v1: join, reconcile until assigned, describe, leave, describe";
    heartbeat_refusals: Expect::Same,
        "ConsumerGroupHeartbeat v1 requests Kafka refuses, each with its error and message";
    heartbeat_regex_and_fenced_messages: Expect::Deliberate("the wording names Weir's regex parser and its epochs"),
        "ConsumerGroupHeartbeat v1 with a regex that does not parse, and with a future epoch";
    member_commits_and_listing: Expect::Same,
        "OffsetCommit and OffsetFetch v9 with member epochs, ListGroups v5 by type, DescribeGroups v5 and v6";
    describe_unknown_and_classic: Expect::Same,
        "ConsumerGroupDescribe v1 for an unknown group and a classic group";
}

/// A member's first heartbeat, subscribing to `topics`.
fn joining(group: GroupId, member_id: &str, topics: &[TopicName]) -> ConsumerGroupHeartbeatRequest {
    let mut request = ConsumerGroupHeartbeatRequest::default();
    request.group_id = group;
    request.member_id = s(member_id);
    request.member_epoch = 0;
    request.rebalance_timeout_ms = 30_000;
    request.subscribed_topic_names = Some(topics.to_vec());
    request.topic_partitions = Some(Vec::new());
    request
}

/// Heartbeats (unrecorded) as the member reports what it was given, until it holds
/// `partitions` partitions and a heartbeat brings no change; returns the answer that carried
/// its assignment, with the epoch it settled at.
async fn reconcile(
    cx: &mut Ctx,
    mut request: ConsumerGroupHeartbeatRequest,
    partitions: usize,
) -> Result<ConsumerGroupHeartbeatResponse> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut assigned: Option<ConsumerGroupHeartbeatResponse> = None;
    loop {
        let response: ConsumerGroupHeartbeatResponse = cx
            .quietly(ApiKey::ConsumerGroupHeartbeat, 1, &request)
            .await?;
        if response.error_code != 0 {
            bail!("heartbeat error {}", response.error_code);
        }
        let held: usize = request
            .topic_partitions
            .iter()
            .flatten()
            .map(|tp| tp.partitions.len())
            .sum();
        if response.assignment.is_none() && held == partitions {
            if let Some(mut last) = assigned {
                last.member_epoch = response.member_epoch;
                return Ok(last);
            }
        }
        if let Some(assignment) = &response.assignment {
            request.topic_partitions = Some(
                assignment
                    .topic_partitions
                    .iter()
                    .map(|tp| {
                        let mut owned = TopicPartitions::default();
                        owned.topic_id = tp.topic_id;
                        owned.partitions = tp.partitions.clone();
                        owned
                    })
                    .collect(),
            );
            assigned = Some(response.clone());
        }
        request.member_epoch = response.member_epoch;
        request.subscribed_topic_names = None;
        request.rebalance_timeout_ms = -1;
        if tokio::time::Instant::now() > deadline {
            bail!("the member did not settle with {partitions} partitions within 20 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends one heartbeat and records the answer.
async fn heartbeat(
    cx: &mut Ctx,
    version: i16,
    request: &ConsumerGroupHeartbeatRequest,
) -> Result<()> {
    let _: ConsumerGroupHeartbeatResponse = cx
        .answer(ApiKey::ConsumerGroupHeartbeat, version, request)
        .await?;
    Ok(())
}

async fn describe(cx: &mut Ctx, groups: Vec<GroupId>) -> Result<()> {
    let mut request = ConsumerGroupDescribeRequest::default();
    request.group_ids = groups;
    let mut response: ConsumerGroupDescribeResponse = cx
        .quietly(ApiKey::ConsumerGroupDescribe, 1, &request)
        .await?;
    response.groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    cx.record("ConsumerGroupDescribe v1 (by group id)", &response);
    Ok(())
}

/// Masks the epochs and the client's address in `cx`'s transcript: Kafka computes a target
/// assignment asynchronously and counts epochs its own way, and clients treat epochs as
/// opaque; compare what members are assigned.
pub(super) fn mask_epochs(cx: &mut Ctx) {
    for field in [
        "member_epoch",
        "group_epoch",
        "assignment_epoch",
        "client_host",
    ] {
        cx.mask(field);
    }
}

async fn member_joins_settles_and_leaves(cx: &mut Ctx) -> Result<()> {
    mask_epochs(cx);
    coordinator_ready(cx).await?;
    let topic = create_topic(cx, "kip848", 3, &[]).await?;
    let member = uuid::Uuid::new_v4().simple().to_string();
    let settled = reconcile(cx, joining(cx.group("kip848"), &member, &[topic]), 3).await?;
    cx.record("settled heartbeat", &settled);
    describe(cx, vec![cx.group("kip848")]).await?;
    let mut leave = ConsumerGroupHeartbeatRequest::default();
    leave.group_id = cx.group("kip848");
    leave.member_id = s(&member);
    leave.member_epoch = -1;
    heartbeat(cx, 1, &leave).await?;
    describe(cx, vec![cx.group("kip848")]).await
}

async fn heartbeat_refusals(cx: &mut Ctx) -> Result<()> {
    coordinator_ready(cx).await?;
    let topic = create_topic(cx, "kip848-refusals", 1, &[]).await?;
    let group = cx.group("kip848-refusals");
    let member = uuid::Uuid::new_v4().simple().to_string();
    let topics = std::slice::from_ref(&topic);
    let mut cases: Vec<(i16, ConsumerGroupHeartbeatRequest)> = Vec::new();
    let mut no_subscription = joining(group.clone(), &member, topics);
    no_subscription.subscribed_topic_names = None;
    cases.push((1, no_subscription));
    let mut no_timeout = joining(group.clone(), &member, topics);
    no_timeout.rebalance_timeout_ms = -1;
    cases.push((1, no_timeout));
    let mut owns = joining(group.clone(), &member, topics);
    let mut owned = TopicPartitions::default();
    owned.topic_id = uuid::Uuid::from_u128(5);
    owned.partitions = vec![0];
    owns.topic_partitions = Some(vec![owned]);
    cases.push((1, owns));
    let mut assignor = joining(group.clone(), &member, topics);
    assignor.server_assignor = Some(s("no-such-assignor"));
    cases.push((1, assignor));
    cases.push((1, joining(group.clone(), "", topics)));
    let mut below = joining(group.clone(), &member, topics);
    below.member_epoch = -3;
    cases.push((1, below));
    let mut static_leave = joining(group.clone(), &member, topics);
    static_leave.member_epoch = -2;
    cases.push((1, static_leave));
    cases.push((1, joining(GroupId(StrBytes::default()), &member, topics)));
    let mut unknown_group = joining(cx.group("kip848-nobody"), &member, topics);
    unknown_group.member_epoch = 5;
    cases.push((1, unknown_group));
    for (version, request) in cases {
        heartbeat(cx, version, &request).await?;
    }
    reconcile(cx, joining(group.clone(), &member, topics), 1).await?;
    let mut stranger = joining(group.clone(), "not-a-member", topics);
    stranger.member_epoch = 1;
    heartbeat(cx, 1, &stranger).await?;
    Ok(())
}

async fn heartbeat_regex_and_fenced_messages(cx: &mut Ctx) -> Result<()> {
    coordinator_ready(cx).await?;
    let topic = create_topic(cx, "kip848-messages", 1, &[]).await?;
    let group = cx.group("kip848-messages");
    let member = uuid::Uuid::new_v4().simple().to_string();
    let mut regex = joining(group.clone(), &member, &[]);
    regex.subscribed_topic_names = None;
    regex.subscribed_topic_regex = Some(s("(unclosed"));
    heartbeat(cx, 1, &regex).await?;
    let topics = std::slice::from_ref(&topic);
    reconcile(cx, joining(group.clone(), &member, topics), 1).await?;
    let mut future = joining(group, &member, topics);
    future.member_epoch = 99;
    heartbeat(cx, 1, &future).await?;
    Ok(())
}

async fn member_commits_and_listing(cx: &mut Ctx) -> Result<()> {
    use kafka_protocol::messages::list_groups_request::ListGroupsRequest;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopics,
    };
    use kafka_protocol::messages::{
        DescribeGroupsRequest, ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse,
        OffsetFetchRequest, OffsetFetchResponse,
    };
    for field in ["member_epoch", "generation_id_or_member_epoch"] {
        cx.mask(field);
    }
    coordinator_ready(cx).await?;
    let topic = create_topic(cx, "kip848-commits", 1, &[]).await?;
    let group = cx.group("kip848-commits");
    let member = uuid::Uuid::new_v4().simple().to_string();
    let settled = reconcile(
        cx,
        joining(group.clone(), &member, std::slice::from_ref(&topic)),
        1,
    )
    .await?;
    let epoch = settled.member_epoch;
    let commit = |generation: i32, offset: i64| {
        let mut p = OffsetCommitRequestPartition::default();
        p.committed_offset = offset;
        p.committed_leader_epoch = -1;
        let mut t = OffsetCommitRequestTopic::default();
        t.name = topic.clone();
        t.partitions = vec![p];
        let mut request = OffsetCommitRequest::default();
        request.group_id = group.clone();
        request.generation_id_or_member_epoch = generation;
        request.member_id = s(&member);
        request.topics = vec![t];
        request
    };
    // The member's epoch, an older one, a newer one; then v8 from a consumer-protocol member.
    for (version, generation, offset) in [
        (9, epoch, 4),
        (9, epoch - 1, 5),
        (9, epoch + 1, 6),
        (8, epoch, 7),
    ] {
        let _: OffsetCommitResponse = cx
            .answer(ApiKey::OffsetCommit, version, &commit(generation, offset))
            .await?;
    }
    for member_epoch in [epoch, epoch + 1] {
        let mut t = OffsetFetchRequestTopics::default();
        t.name = topic.clone();
        t.partition_indexes = vec![0];
        let mut g = OffsetFetchRequestGroup::default();
        g.group_id = group.clone();
        g.member_id = Some(s(&member));
        g.member_epoch = member_epoch;
        g.topics = Some(vec![t]);
        let mut fetch = OffsetFetchRequest::default();
        fetch.groups = vec![g];
        let _: OffsetFetchResponse = cx.answer(ApiKey::OffsetFetch, 9, &fetch).await?;
    }
    for types in [vec!["consumer"], vec!["classic"]] {
        let mut list = ListGroupsRequest::default();
        list.types_filter = types.into_iter().map(s).collect();
        let mut response: ListGroupsResponse = cx.quietly(ApiKey::ListGroups, 5, &list).await?;
        let mine = group.0.to_string();
        response.groups.retain(|g| g.group_id.0.as_str() == mine);
        cx.record("ListGroups v5 (this group)", &response);
    }
    let mut describe = DescribeGroupsRequest::default();
    describe.groups = vec![group.clone(), cx.group("kip848-nobody")];
    for version in [5, 6] {
        super::groups::describe_groups(cx, version, &describe).await?;
    }
    Ok(())
}

async fn describe_unknown_and_classic(cx: &mut Ctx) -> Result<()> {
    coordinator_ready(cx).await?;
    let topic = create_topic(cx, "kip848-classic", 1, &[]).await?;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};
    let mut p = OffsetCommitRequestPartition::default();
    p.committed_offset = 1;
    let mut t = OffsetCommitRequestTopic::default();
    t.name = topic;
    t.partitions = vec![p];
    let mut commit = OffsetCommitRequest::default();
    commit.group_id = cx.group("kip848-classic");
    commit.generation_id_or_member_epoch = -1;
    commit.topics = vec![t];
    let _: OffsetCommitResponse = cx.quietly(ApiKey::OffsetCommit, 8, &commit).await?;
    describe(
        cx,
        vec![cx.group("kip848-unknown"), cx.group("kip848-classic")],
    )
    .await
}
