//! Share groups (KIP-932): ShareGroupHeartbeat (key 76, v1), ShareGroupDescribe (77, v1) and
//! DescribeShareGroupOffsets (90, v0–1).
//! The handlers check the request as Kafka does, with its wording, and translate topic ids
//! and names; the group coordinator decides.

use std::collections::BTreeSet;
use std::sync::Arc;

use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup, DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
};
use kafka_protocol::messages::share_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member,
    TopicPartitions as DescribedPartitions,
};
use kafka_protocol::messages::share_group_heartbeat_response::{
    Assignment, TopicPartitions as AssignedPartitions,
};
use kafka_protocol::messages::{
    list_offsets_request, ApiKey, BrokerId, DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse, ListOffsetsRequest, ListOffsetsResponse,
    ShareGroupDescribeRequest, ShareGroupDescribeResponse, ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::ResponseError;
use weir_coordinator::assignors::TopicPartitions;
use weir_coordinator::share_coordinator::records::SharePartitionKey;
use weir_coordinator::share_group::{ShareHeartbeat, ASSIGNOR, JOIN_EPOCH, LEAVE_EPOCH};
use weir_coordinator::GroupError;
use weir_metadata::acl::{AclOperation, ResourceType};
use weir_metadata::authorizer::Access;

use crate::broker::Broker;
use crate::endpoints::ClientEndpoint;
use crate::handlers::consumer_groups::{heartbeat_refusal, named_partitions, ImageCatalog};
use crate::handlers::errors::group_error;
use crate::handlers::{led_partition, operations, str_bytes};
use crate::share_persister::remote;

/// ShareGroupHeartbeat: join, heartbeat or leave; the answer carries the member's epoch and,
/// when it joined or its assignment changed, its assignment.
pub fn heartbeat(
    broker: &Arc<Broker>,
    request: ShareGroupHeartbeatRequest,
    client_id: Option<&str>,
    (client_host, access): (String, &Access),
) -> ShareGroupHeartbeatResponse {
    let group = request.group_id.to_string();
    let member_id = request.member_id.to_string();
    let member_epoch = request.member_epoch;
    let refused = |code: ResponseError, message: Option<String>| {
        let mut response = ShareGroupHeartbeatResponse::default();
        response.error_code = code.code();
        response.error_message = message.map(str_bytes);
        response
    };
    let subscribed = request.subscribed_topic_names.as_ref();
    if let Some((code, message)) = heartbeat_refusal(&group, subscribed, access) {
        return refused(code, Some(message));
    }
    if let Some(invalid) = invalid_request(&request) {
        return refused(ResponseError::InvalidRequest, invalid.map(str::to_string));
    }
    let heartbeat = ShareHeartbeat {
        member_id: member_id.clone(),
        member_epoch,
        rack_id: request.rack_id.map(|s| s.to_string()),
        topic_names: request
            .subscribed_topic_names
            .map(|names| names.into_iter().map(|n| n.to_string()).collect()),
        client_id: client_id.unwrap_or_default().to_string(),
        client_host,
    };
    let catalog = ImageCatalog(broker.image());
    match broker
        .coordinator
        .share_heartbeat(&group, heartbeat, &catalog)
    {
        Ok(reply) => {
            let mut response = ShareGroupHeartbeatResponse::default();
            response.member_id = Some(str_bytes(member_id));
            response.member_epoch = reply.member_epoch;
            response.heartbeat_interval_ms = reply.heartbeat_interval_ms;
            response.assignment = reply.assignment.map(|assigned| {
                let mut assignment = Assignment::default();
                assignment.topic_partitions = assigned
                    .into_iter()
                    .map(|(topic_id, partitions)| {
                        let mut t = AssignedPartitions::default();
                        t.topic_id = topic_id;
                        t.partitions = partitions.into_iter().collect();
                        t
                    })
                    .collect();
                assignment
            });
            response
        }
        Err(error) => {
            let code = group_error(error);
            let message = match error {
                GroupError::GroupIdNotFound => Some(match broker.coordinator.group_type(&group) {
                    Some(_) => format!("Group {group} is not a share group."),
                    None if member_epoch == LEAVE_EPOCH => format!("Group {group} not found."),
                    None => format!("Share group {group} not found."),
                }),
                GroupError::UnknownMemberId => Some(format!(
                    "Member {member_id} is not a member of group {group}."
                )),
                GroupError::FencedMemberEpoch => {
                    Some(fenced_message(broker, &group, &member_id, member_epoch))
                }
                GroupError::GroupMaxSizeReached => Some(format!(
                    "The share group has reached its maximum capacity of {} members.",
                    broker.config.coordinator.share.max_size
                )),
                _ => Some(code.to_string()),
            };
            refused(code, message)
        }
    }
}

/// Kafka's FENCED_MEMBER_EPOCH message, naming the member's epoch and the coordinator's.
fn fenced_message(broker: &Broker, group: &str, member_id: &str, sent: i32) -> String {
    let known = broker
        .coordinator
        .describe_share_group(group)
        .ok()
        .flatten()
        .and_then(|g| g.members.into_iter().find(|m| m.member_id == member_id))
        .map_or(-1, |m| m.member_epoch);
    let relation = if sent > known { "greater" } else { "smaller" };
    format!(
        "The share group member has a {relation} member epoch ({sent}) than the one known by the group coordinator ({known}). The member must abandon all its partitions and rejoin."
    )
}

/// Why a heartbeat is INVALID_REQUEST, checked in the order Kafka checks and worded as it
/// words it (an empty member id has no message there); `None` when it is not.
fn invalid_request(request: &ShareGroupHeartbeatRequest) -> Option<Option<&'static str>> {
    if request.group_id.is_empty() {
        return Some(Some("GroupId can't be empty."));
    }
    if request.member_id.is_empty() {
        return Some(None);
    }
    if request.member_id.len() > 255 || request.rack_id.as_ref().is_some_and(|r| r.len() > 255) {
        return Some(Some("MemberId and RackId must be at most 255 characters."));
    }
    if request.member_epoch < LEAVE_EPOCH {
        return Some(Some("MemberEpoch is invalid."));
    }
    let no_topics = request
        .subscribed_topic_names
        .as_ref()
        .is_none_or(Vec::is_empty);
    if request.member_epoch == JOIN_EPOCH && no_topics {
        return Some(Some("SubscribedTopicNames must be set in first request."));
    }
    None
}

/// ShareGroupDescribe: groups with their epochs, members and assignments; a missing group or
/// one of another type is GROUP_ID_NOT_FOUND.
pub fn describe(
    broker: &Arc<Broker>,
    request: ShareGroupDescribeRequest,
    access: &Access,
) -> ShareGroupDescribeResponse {
    let catalog = ImageCatalog(broker.image());
    let assignment = |partitions: TopicPartitions| {
        let mut a = DescribedAssignment::default();
        a.topic_partitions = named_partitions(&catalog, partitions)
            .into_iter()
            .map(|(topic_id, topic_name, partitions)| {
                let mut t = DescribedPartitions::default();
                t.topic_id = topic_id;
                t.topic_name = topic_name;
                t.partitions = partitions;
                t
            })
            .collect();
        a
    };
    let mut response = ShareGroupDescribeResponse::default();
    response.groups = request
        .group_ids
        .into_iter()
        .map(|group_id| {
            let mut described = DescribedGroup::default();
            described.authorized_operations = operations::reported(
                request.include_authorized_operations,
                access.authorized_operations(ResourceType::Group, group_id.as_str()),
            );
            if !access.group(AclOperation::Describe, group_id.as_str()) {
                described.error_code = ResponseError::GroupAuthorizationFailed.code();
                described.group_id = group_id;
                return described;
            }
            match broker.coordinator.describe_share_group(group_id.as_str()) {
                Err(error) => {
                    described.error_code = group_error(error).code();
                    if error == GroupError::GroupIdNotFound {
                        described.error_message = Some(str_bytes(format!(
                            "Group {} is not a share group.",
                            group_id.as_str()
                        )));
                    }
                }
                Ok(None) => {
                    described.error_code = ResponseError::GroupIdNotFound.code();
                    described.error_message =
                        Some(str_bytes(format!("Group {} not found.", group_id.as_str())));
                }
                Ok(Some(group)) => {
                    described.group_state = str_bytes(group.state.name());
                    described.group_epoch = group.epoch;
                    described.assignment_epoch = group.assignment_epoch;
                    described.assignor_name = str_bytes(ASSIGNOR);
                    described.members = group
                        .members
                        .into_iter()
                        .map(|m| {
                            let mut member = Member::default();
                            member.member_id = str_bytes(m.member_id);
                            member.rack_id = m.rack_id.map(str_bytes);
                            member.member_epoch = m.member_epoch;
                            member.client_id = str_bytes(m.client_id);
                            member.client_host = str_bytes(m.client_host);
                            member.subscribed_topic_names = m
                                .topic_names
                                .into_iter()
                                .map(|n| TopicName(str_bytes(n)))
                                .collect();
                            member.assignment = assignment(m.assignment);
                            member
                        })
                        .collect();
                }
            }
            described.group_id = group_id;
            described
        })
        .collect();
    response
}

/// The ListOffsets version asked of another broker for a partition's high watermark.
const LIST_OFFSETS_VERSION: i16 = 5;

/// DescribeShareGroupOffsets (v0–1): each share-partition's start offset and leader epoch
/// from its share coordinator, and (v1) its lag: records up to the high watermark whose
/// delivery is not complete. With no topics named, every partition holding state of every
/// topic the group's members subscribed to.
pub async fn describe_offsets(
    broker: &Arc<Broker>,
    request: DescribeShareGroupOffsetsRequest,
    access: &Access,
) -> DescribeShareGroupOffsetsResponse {
    let mut response = DescribeShareGroupOffsetsResponse::default();
    for asked in request.groups {
        let mut group = DescribeShareGroupOffsetsResponseGroup::default();
        let group_id = asked.group_id.as_str().to_string();
        group.group_id = asked.group_id;
        if !access.group(AclOperation::Describe, &group_id) {
            group.error_code = ResponseError::GroupAuthorizationFailed.code();
            response.groups.push(group);
            continue;
        }
        let remembered = match broker.coordinator.share_group_topics(&group_id) {
            Ok(topics) => topics,
            Err(error) => {
                group.error_code = group_error(error).code();
                if error == GroupError::GroupIdNotFound {
                    group.error_message = Some(str_bytes(format!("Group {group_id} not found.")));
                }
                response.groups.push(group);
                continue;
            }
        };
        // (topic, partitions named; None: every partition holding state).
        let wanted: Vec<(String, Option<Vec<i32>>)> = match asked.topics {
            Some(topics) => topics
                .into_iter()
                .map(|t| (t.topic_name.0.to_string(), Some(t.partitions)))
                .collect(),
            None => remembered
                .into_iter()
                .filter(|topic| access.topic(AclOperation::Describe, topic))
                .map(|topic| (topic, None))
                .collect(),
        };
        for (name, partitions) in wanted {
            if let Some(topic) =
                offsets_of_topic(broker, &group_id, &name, partitions, access).await
            {
                group.topics.push(topic);
            }
        }
        response.groups.push(group);
    }
    response
}

/// One topic's answer to DescribeShareGroupOffsets; `None` when no partition was named and
/// none holds state.
async fn offsets_of_topic(
    broker: &Arc<Broker>,
    group_id: &str,
    name: &str,
    named: Option<Vec<i32>>,
    access: &Access,
) -> Option<DescribeShareGroupOffsetsResponseTopic> {
    let mut topic = DescribeShareGroupOffsetsResponseTopic::default();
    topic.topic_name = TopicName(str_bytes(name));
    let image = broker.image();
    let found = image.topic(name);
    let refusal = if !access.topic(AclOperation::Describe, name) {
        Some(ResponseError::TopicAuthorizationFailed)
    } else if found.is_none() {
        Some(ResponseError::UnknownTopicOrPartition)
    } else {
        None
    };
    let every = named.is_none();
    let count = found.map_or(0, |t| t.partition_count());
    // Each partition once; one the topic lacks is answered without asking its coordinator.
    let indexes: BTreeSet<i32> = named.map_or_else(|| (0..count).collect(), BTreeSet::from_iter);
    // An unauthorized topic's id is not shown.
    let topic_id = found
        .filter(|_| refusal.is_none())
        .map(|t| t.topic_id)
        .unwrap_or_default();
    topic.topic_id = topic_id;
    for index in indexes {
        let refused = refusal
            .or((!(0..count).contains(&index)).then_some(ResponseError::UnknownTopicOrPartition));
        let key = SharePartitionKey {
            group: group_id.to_string(),
            topic_id,
            partition: index,
        };
        let summary = match refused {
            Some(error) => Err(error),
            None => broker.share_state_summary(&key).await,
        };
        let mut partition = DescribeShareGroupOffsetsResponsePartition::default();
        partition.partition_index = index;
        match summary {
            Ok(summary) if every && summary.start_offset < 0 => continue,
            Ok(summary) => {
                partition.start_offset = summary.start_offset;
                partition.leader_epoch = summary.leader_epoch;
                partition.lag = match (summary.start_offset, summary.delivery_complete_count) {
                    (start, complete) if start >= 0 && complete >= 0 => {
                        match high_watermark(broker, name, index).await {
                            Some(end) => (end - start - i64::from(complete)).max(0),
                            None => -1,
                        }
                    }
                    _ => -1,
                };
            }
            Err(error) => {
                partition.start_offset = -1;
                partition.leader_epoch = -1;
                partition.error_code = error.code();
                partition.error_message = Some(str_bytes(error.to_string()));
            }
        }
        topic.partitions.push(partition);
    }
    (!every || !topic.partitions.is_empty()).then_some(topic)
}

/// The high watermark of `topic`-`index`: read here when this broker leads it, else asked of
/// its leader (ListOffsets, latest); `None` when neither answers.
async fn high_watermark(broker: &Arc<Broker>, topic: &str, index: i32) -> Option<i64> {
    if let Ok(partition) = led_partition(broker, topic, index) {
        return Some(partition.log().high_watermark());
    }
    let image = broker.image();
    let leader = image.topic(topic)?.partition(index)?.leader;
    let endpoint = image
        .broker(leader)
        .and_then(|b| ClientEndpoint::on(b, &broker.identity.inter_broker.listener))?;
    let address = format!("{}:{}", endpoint.host, endpoint.port);
    let client_id = format!("weir-share-lag-{}", broker.identity.node_id);
    let connection = broker.share_links.to(&address, &client_id).await.ok()?;
    let mut asked = list_offsets_request::ListOffsetsPartition::default();
    asked.partition_index = index;
    asked.timestamp = -1;
    asked.current_leader_epoch = -1;
    let mut named = list_offsets_request::ListOffsetsTopic::default();
    named.name = TopicName(str_bytes(topic));
    named.partitions = vec![asked];
    let mut request = ListOffsetsRequest::default();
    request.replica_id = BrokerId(-1);
    request.topics = vec![named];
    let response: ListOffsetsResponse = remote(
        &connection,
        ApiKey::ListOffsets,
        (LIST_OFFSETS_VERSION, &request),
    )
    .await
    .ok()?;
    let answer = response.topics.first()?.partitions.first()?;
    (answer.error_code == 0).then_some(answer.offset)
}
