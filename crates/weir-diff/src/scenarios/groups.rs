//! The classic group protocol and committed offsets: JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups,
//! OffsetDelete.

use anyhow::Result;
use bytes::Bytes;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest,
    ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest,
    OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse, SyncGroupRequest,
    SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::cluster::coordinator_ready;
use super::{scenarios, Expect};
use crate::session::Ctx;
use crate::setup::{create_topic, s};

scenarios! { "groups";
    classic_member_lifecycle: Expect::Same,
        "JoinGroup v9 (member id required, then leader), SyncGroup v5, Heartbeat v4, commit, LeaveGroup v5";
    join_refusals: Expect::Same,
        "JoinGroup with an empty group id, a session timeout out of range, an unknown member, no protocols";
    unknown_member_requests: Expect::Same,
        "Heartbeat, SyncGroup and LeaveGroup for a group or member the coordinator does not know";
    simple_commits: Expect::Same,
        "OffsetCommit v2 and v8 outside any generation, OffsetFetch v1, v7 and v8, unknown topic";
    list_describe_delete: Expect::Same,
        "ListGroups v4 and v5 with filters, DescribeGroups v5, DeleteGroups v2";
    offset_delete: Expect::Same,
        "OffsetDelete v0 for a committed, an uncommitted and an unknown-topic partition";
}

fn join_request(
    cx: &Ctx,
    group: &str,
    member_id: &str,
    session_timeout_ms: i32,
) -> JoinGroupRequest {
    let mut protocol = JoinGroupRequestProtocol::default();
    protocol.name = s("range");
    protocol.metadata = Bytes::from_static(b"\x00\x03\x00\x00\x00\x00\xff\xff\xff\xff");
    let mut request = JoinGroupRequest::default();
    request.group_id = cx.group(group);
    request.session_timeout_ms = session_timeout_ms;
    request.rebalance_timeout_ms = 10_000;
    request.member_id = s(member_id);
    request.protocol_type = s("consumer");
    request.protocols = vec![protocol];
    request
}

fn commit_request(
    group: GroupId,
    generation: i32,
    member: &str,
    topic: &TopicName,
    offsets: &[(i32, i64)],
) -> OffsetCommitRequest {
    let mut t = OffsetCommitRequestTopic::default();
    t.name = topic.clone();
    t.partitions = offsets
        .iter()
        .map(|(partition, offset)| {
            let mut p = OffsetCommitRequestPartition::default();
            p.partition_index = *partition;
            p.committed_offset = *offset;
            p.committed_leader_epoch = -1;
            p.committed_metadata = Some(s("meta"));
            p
        })
        .collect();
    let mut request = OffsetCommitRequest::default();
    request.group_id = group;
    request.generation_id_or_member_epoch = generation;
    request.member_id = s(member);
    request.retention_time_ms = -1;
    request.topics = vec![t];
    request
}

async fn classic_member_lifecycle(cx: &mut Ctx) -> Result<()> {
    cx.mask("leader");
    coordinator_ready(cx).await?;
    let topic = create_topic(cx, "classic", 2, &[]).await?;
    let first: JoinGroupResponse = cx
        .answer(
            ApiKey::JoinGroup,
            9,
            &join_request(cx, "classic", "", 10_000),
        )
        .await?;
    let member = first.member_id.to_string();
    let joined: JoinGroupResponse = cx
        .answer(
            ApiKey::JoinGroup,
            9,
            &join_request(cx, "classic", &member, 10_000),
        )
        .await?;
    let mut assignment = SyncGroupRequestAssignment::default();
    assignment.member_id = s(&member);
    assignment.assignment = Bytes::from_static(b"\x00\x03\x00\x00\x00\x00\xff\xff\xff\xff");
    let mut sync = SyncGroupRequest::default();
    sync.group_id = cx.group("classic");
    sync.generation_id = joined.generation_id;
    sync.member_id = s(&member);
    sync.protocol_type = Some(s("consumer"));
    sync.protocol_name = Some(s("range"));
    sync.assignments = vec![assignment];
    let _: SyncGroupResponse = cx.answer(ApiKey::SyncGroup, 5, &sync).await?;
    let mut heartbeat = HeartbeatRequest::default();
    heartbeat.group_id = cx.group("classic");
    heartbeat.generation_id = joined.generation_id;
    heartbeat.member_id = s(&member);
    let _: HeartbeatResponse = cx.answer(ApiKey::Heartbeat, 4, &heartbeat).await?;
    heartbeat.generation_id += 1;
    let _: HeartbeatResponse = cx.answer(ApiKey::Heartbeat, 4, &heartbeat).await?;
    let commit = commit_request(
        cx.group("classic"),
        joined.generation_id,
        &member,
        &topic,
        &[(0, 5), (1, 7)],
    );
    let _: OffsetCommitResponse = cx.answer(ApiKey::OffsetCommit, 8, &commit).await?;
    let stale = commit_request(
        cx.group("classic"),
        joined.generation_id + 3,
        &member,
        &topic,
        &[(0, 6)],
    );
    let _: OffsetCommitResponse = cx.answer(ApiKey::OffsetCommit, 8, &stale).await?;
    let mut describe = DescribeGroupsRequest::default();
    describe.groups = vec![cx.group("classic")];
    let _: DescribeGroupsResponse = cx.answer(ApiKey::DescribeGroups, 5, &describe).await?;
    let mut identity = MemberIdentity::default();
    identity.member_id = s(&member);
    identity.reason = Some(s("done"));
    let mut leave = LeaveGroupRequest::default();
    leave.group_id = cx.group("classic");
    leave.members = vec![identity];
    let _: LeaveGroupResponse = cx.answer(ApiKey::LeaveGroup, 5, &leave).await?;
    let _: DescribeGroupsResponse = cx.answer(ApiKey::DescribeGroups, 5, &describe).await?;
    Ok(())
}

async fn join_refusals(cx: &mut Ctx) -> Result<()> {
    coordinator_ready(cx).await?;
    let mut empty = join_request(cx, "x", "", 10_000);
    empty.group_id = GroupId(StrBytes::default());
    let _: JoinGroupResponse = cx.answer(ApiKey::JoinGroup, 9, &empty).await?;
    for timeout in [1, 3_600_001] {
        let _: JoinGroupResponse = cx
            .answer(
                ApiKey::JoinGroup,
                9,
                &join_request(cx, "timeouts", "", timeout),
            )
            .await?;
    }
    let _: JoinGroupResponse = cx
        .answer(
            ApiKey::JoinGroup,
            9,
            &join_request(cx, "strangers", "made-up-member", 10_000),
        )
        .await?;
    let mut none = join_request(cx, "no-protocols", "", 10_000);
    none.protocols.clear();
    let _: JoinGroupResponse = cx.answer(ApiKey::JoinGroup, 9, &none).await?;
    Ok(())
}

async fn unknown_member_requests(cx: &mut Ctx) -> Result<()> {
    coordinator_ready(cx).await?;
    let mut heartbeat = HeartbeatRequest::default();
    heartbeat.group_id = cx.group("nobody");
    heartbeat.generation_id = 1;
    heartbeat.member_id = s("made-up");
    let _: HeartbeatResponse = cx.answer(ApiKey::Heartbeat, 4, &heartbeat).await?;
    let mut sync = SyncGroupRequest::default();
    sync.group_id = cx.group("nobody");
    sync.generation_id = 1;
    sync.member_id = s("made-up");
    sync.protocol_type = Some(s("consumer"));
    sync.protocol_name = Some(s("range"));
    let _: SyncGroupResponse = cx.answer(ApiKey::SyncGroup, 5, &sync).await?;
    let mut identity = MemberIdentity::default();
    identity.member_id = s("made-up");
    let mut leave = LeaveGroupRequest::default();
    leave.group_id = cx.group("nobody");
    leave.members = vec![identity];
    let _: LeaveGroupResponse = cx.answer(ApiKey::LeaveGroup, 5, &leave).await?;
    let mut old = LeaveGroupRequest::default();
    old.group_id = cx.group("nobody");
    old.member_id = s("made-up");
    let _: LeaveGroupResponse = cx.answer(ApiKey::LeaveGroup, 2, &old).await?;
    Ok(())
}

async fn simple_commits(cx: &mut Ctx) -> Result<()> {
    coordinator_ready(cx).await?;
    let topic = create_topic(cx, "committed", 2, &[]).await?;
    let commit = commit_request(cx.group("simple"), -1, "", &topic, &[(0, 3), (1, 4)]);
    for version in [2, 8] {
        let _: OffsetCommitResponse = cx.answer(ApiKey::OffsetCommit, version, &commit).await?;
    }
    let unknown = commit_request(cx.group("simple"), -1, "", &cx.topic("nowhere"), &[(0, 1)]);
    let _: OffsetCommitResponse = cx.answer(ApiKey::OffsetCommit, 8, &unknown).await?;
    let wide = commit_request(cx.group("simple"), -1, "", &topic, &[(9, 1)]);
    let _: OffsetCommitResponse = cx.answer(ApiKey::OffsetCommit, 8, &wide).await?;
    let mut one = OffsetFetchRequestTopic::default();
    one.name = topic.clone();
    one.partition_indexes = vec![0, 1, 5];
    let mut fetch = OffsetFetchRequest::default();
    fetch.group_id = cx.group("simple");
    fetch.topics = Some(vec![one]);
    for version in [1, 7] {
        let _: OffsetFetchResponse = cx.answer(ApiKey::OffsetFetch, version, &fetch).await?;
    }
    let mut all = OffsetFetchRequestGroup::default();
    all.group_id = cx.group("simple");
    all.member_epoch = -1;
    let mut some = OffsetFetchRequestGroup::default();
    some.group_id = cx.group("never-committed");
    some.member_epoch = -1;
    let mut t = OffsetFetchRequestTopics::default();
    t.name = topic;
    t.partition_indexes = vec![0];
    some.topics = Some(vec![t]);
    let mut batched = OffsetFetchRequest::default();
    batched.groups = vec![all, some];
    let _: OffsetFetchResponse = cx.answer(ApiKey::OffsetFetch, 8, &batched).await?;
    Ok(())
}

async fn list_describe_delete(cx: &mut Ctx) -> Result<()> {
    coordinator_ready(cx).await?;
    let topic = create_topic(cx, "listed-groups", 1, &[]).await?;
    let commit = commit_request(cx.group("empty"), -1, "", &topic, &[(0, 1)]);
    let _: OffsetCommitResponse = cx.quietly(ApiKey::OffsetCommit, 8, &commit).await?;
    for (version, states, types) in [
        (4, vec!["Empty"], vec![]),
        (5, vec![], vec!["classic"]),
        (5, vec!["Stable"], vec![]),
    ] {
        let mut list = ListGroupsRequest::default();
        list.states_filter = states.into_iter().map(s).collect();
        list.types_filter = types.into_iter().map(s).collect();
        let mut response: ListGroupsResponse =
            cx.quietly(ApiKey::ListGroups, version, &list).await?;
        let prefix = cx.name("");
        response
            .groups
            .retain(|g| g.group_id.0.starts_with(&prefix));
        response
            .groups
            .sort_by(|a, b| a.group_id.0.cmp(&b.group_id.0));
        cx.record(
            &format!("ListGroups v{version} (this run's groups)"),
            &response,
        );
    }
    let mut describe = DescribeGroupsRequest::default();
    describe.groups = vec![
        cx.group("empty"),
        cx.group("never-was"),
        GroupId(StrBytes::default()),
    ];
    describe.include_authorized_operations = true;
    describe_groups(cx, 5, &describe).await?;
    let mut delete = DeleteGroupsRequest::default();
    delete.groups_names = vec![
        cx.group("empty"),
        cx.group("never-was"),
        GroupId(StrBytes::default()),
    ];
    for _ in 0..2 {
        let mut deleted: DeleteGroupsResponse =
            cx.quietly(ApiKey::DeleteGroups, 2, &delete).await?;
        deleted.results.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        cx.record("DeleteGroups v2 (by group id)", &deleted);
    }
    Ok(())
}

/// Sends DescribeGroups and records the answer by group id (clients match answers by id; the
/// order is the broker's own).
pub(super) async fn describe_groups(
    cx: &mut Ctx,
    version: i16,
    request: &DescribeGroupsRequest,
) -> Result<()> {
    let mut described: DescribeGroupsResponse =
        cx.quietly(ApiKey::DescribeGroups, version, request).await?;
    described.groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    cx.record(
        &format!("DescribeGroups v{version} (by group id)"),
        &described,
    );
    Ok(())
}

async fn offset_delete(cx: &mut Ctx) -> Result<()> {
    coordinator_ready(cx).await?;
    let topic = create_topic(cx, "offset-delete", 2, &[]).await?;
    let commit = commit_request(cx.group("deletes"), -1, "", &topic, &[(0, 1)]);
    let _: OffsetCommitResponse = cx.quietly(ApiKey::OffsetCommit, 8, &commit).await?;
    let partitions = |list: &[i32]| {
        list.iter()
            .map(|p| {
                let mut partition = OffsetDeleteRequestPartition::default();
                partition.partition_index = *p;
                partition
            })
            .collect::<Vec<_>>()
    };
    let mut t = OffsetDeleteRequestTopic::default();
    t.name = topic;
    t.partitions = partitions(&[0, 1]);
    let mut unknown = OffsetDeleteRequestTopic::default();
    unknown.name = cx.topic("nowhere");
    unknown.partitions = partitions(&[0]);
    let mut request = OffsetDeleteRequest::default();
    request.group_id = cx.group("deletes");
    request.topics = vec![t, unknown];
    for group in ["deletes", "never-was"] {
        request.group_id = cx.group(group);
        let mut response: OffsetDeleteResponse =
            cx.quietly(ApiKey::OffsetDelete, 0, &request).await?;
        response.topics.sort_by(|a, b| a.name.cmp(&b.name));
        cx.record("OffsetDelete v0 (by name)", &response);
    }
    Ok(())
}
