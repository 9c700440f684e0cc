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

async fn member_joins_settles_and_leaves(cx: &mut Ctx) -> Result<()> {
    // Kafka computes a target assignment asynchronously and starts at epoch 2; Weir at once,
    // at epoch 1. Clients treat epochs as opaque: compare what they are assigned.
    for field in [
        "member_epoch",
        "group_epoch",
        "assignment_epoch",
        "client_host",
    ] {
        cx.mask(field);
    }
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
