//! Consumer groups, classic protocol: FindCoordinator (key 10, v0–6), JoinGroup (11, v0–9),
//! SyncGroup (14, v0–5), Heartbeat (12, v0–4), LeaveGroup (13, v0–5), ListGroups (16, v0–5),
//! DescribeGroups (15, v0–6), DeleteGroups (42, v0–2). The handlers translate; the group
//! coordinator (`weir-coordinator`) decides.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use weir_coordinator::share_coordinator::ShareStateError;
use weir_coordinator::transaction::TxnError;
use weir_coordinator::{partition_for, GroupError, JoinRequest, SyncRequest, OFFSETS_TOPIC};
use weir_metadata::acl::{AclOperation, ResourceType};
use weir_metadata::authorizer::Access;
use weir_metadata::{MetadataImage, NO_LEADER, SHARE_GROUP_STATE_TOPIC, TRANSACTION_STATE_TOPIC};

use crate::broker::Broker;
use crate::endpoints::ClientEndpoint;
use crate::handlers::errors::{
    group_code, group_error, share_state_error, txn_error, INVALID_REQUEST_MESSAGE,
};
use crate::handlers::{operations, str_bytes};

/// FindCoordinator key type of a consumer group.
const KEY_TYPE_GROUP: i8 = 0;
/// FindCoordinator key type of a transactional id.
const KEY_TYPE_TRANSACTION: i8 = 1;
/// FindCoordinator key type of a share-partition's state (KIP-932: `group:topicId:partition`,
/// which partition leaders look up).
const KEY_TYPE_SHARE: i8 = 2;

fn optional(s: &Option<StrBytes>) -> Option<&str> {
    s.as_ref().map(|s| s.as_str())
}

/// Why a key has no coordinator to name: the error and its message.
type Unlocated = (ResponseError, String);

/// The broker leading the partition of `topic` that holds `key`, if it has a leader.
pub(crate) fn key_leader(image: &MetadataImage, topic: &str, key: &str) -> Option<i32> {
    let topic = image.topic(topic)?;
    let partition = partition_for(key, topic.partition_count());
    topic
        .partition(partition)
        .map(|p| p.leader)
        .filter(|leader| *leader != NO_LEADER)
}

/// The coordinator of `key`: the leader of its partition of the internal topic, which, when
/// it is this broker, must have loaded that partition.
fn locate(
    broker: &Broker,
    image: &MetadataImage,
    key_type: i8,
    key: &str,
) -> Result<i32, Unlocated> {
    let topic = match key_type {
        KEY_TYPE_GROUP => OFFSETS_TOPIC,
        KEY_TYPE_SHARE => SHARE_GROUP_STATE_TOPIC,
        _ => TRANSACTION_STATE_TOPIC,
    };
    let unavailable = || {
        let error = ResponseError::CoordinatorNotAvailable;
        (error, format!("{topic} has no leader for this key"))
    };
    let leader = key_leader(image, topic, key).ok_or_else(unavailable)?;
    if leader == broker.identity.node_id {
        let served = match key_type {
            KEY_TYPE_GROUP => broker
                .coordinator
                .check_served(key)
                .map_err(|e| (group_error(e), e.to_string())),
            KEY_TYPE_SHARE => broker
                .share_coordinator
                .check_served(key)
                .map_err(|e| (share_state_error(e), e.to_string())),
            _ => broker
                .transactions
                .check_served(key)
                .map_err(|e| (txn_error(e), e.to_string())),
        };
        served?;
    }
    Ok(leader)
}

/// FindCoordinator: the broker leading the key's partition of `__consumer_offsets` (a group),
/// `__transaction_state` (a transactional id) or `__share_group_state` (a share-partition),
/// once the topic exists and, here, the partition is loaded.
pub async fn find_coordinator(
    broker: &Arc<Broker>,
    request: FindCoordinatorRequest,
    version: i16,
    (listener, access): (&str, &Access),
) -> FindCoordinatorResponse {
    let keys: Vec<StrBytes> = if version >= 4 {
        request.coordinator_keys
    } else {
        vec![request.key]
    };
    let ready: Result<(), Unlocated> = match request.key_type {
        KEY_TYPE_GROUP => broker
            .ensure_internal_topic(&broker.offsets_topic)
            .await
            .map_err(|e| {
                let error = GroupError::from(e);
                (group_error(error), error.to_string())
            }),
        KEY_TYPE_TRANSACTION => broker
            .ensure_internal_topic(&broker.transaction_topic)
            .await
            .map_err(|e| {
                let error = TxnError::from(e);
                (txn_error(error), error.to_string())
            }),
        KEY_TYPE_SHARE => broker
            .ensure_internal_topic(&broker.share_state_topic)
            .await
            .map_err(|e| {
                let error = ShareStateError::from(e);
                (share_state_error(error), error.to_string())
            }),
        _ => Err((
            ResponseError::InvalidRequest,
            INVALID_REQUEST_MESSAGE.to_string(),
        )),
    };
    let image = broker.image();
    let coordinators: Vec<Coordinator> = keys
        .into_iter()
        .map(|key| {
            let endpoint = authorized(access, request.key_type, key.as_str())
                .and_then(|()| ready.clone())
                .and_then(|()| locate(broker, &image, request.key_type, key.as_str()))
                .and_then(|leader| {
                    image
                        .broker(leader)
                        .and_then(|b| ClientEndpoint::on(b, listener))
                        .ok_or((
                            ResponseError::CoordinatorNotAvailable,
                            format!("the coordinator has no listener {listener}"),
                        ))
                });
            let mut c = Coordinator::default();
            c.key = key;
            match endpoint {
                Ok(endpoint) => {
                    c.node_id = BrokerId(endpoint.node_id);
                    c.host = str_bytes(endpoint.host);
                    c.port = i32::from(endpoint.port);
                }
                Err((error, message)) => {
                    c.node_id = BrokerId(-1);
                    c.port = -1;
                    c.error_code = error.code();
                    c.error_message = Some(str_bytes(message));
                }
            }
            c
        })
        .collect();
    let mut response = FindCoordinatorResponse::default();
    if version < 4 {
        if let Some(c) = coordinators.into_iter().next() {
            response.error_code = c.error_code;
            // Before batching, Kafka names success too.
            response.error_message = if c.error_code == 0 {
                Some(str_bytes("NONE"))
            } else {
                c.error_message
            };
            response.node_id = c.node_id;
            response.host = c.host;
            response.port = c.port;
        }
    } else {
        response.coordinators = coordinators;
    }
    response
}

/// Whether the client may find the coordinator of `key`: DESCRIBE on the group or the
/// transactional id.
fn authorized(access: &Access, key_type: i8, key: &str) -> Result<(), Unlocated> {
    match key_type {
        KEY_TYPE_GROUP if !access.group(AclOperation::Describe, key) => Err((
            ResponseError::GroupAuthorizationFailed,
            format!("Not authorized to access group: {key}"),
        )),
        KEY_TYPE_TRANSACTION if !access.transactional_id(AclOperation::Describe, key) => Err((
            ResponseError::TransactionalIdAuthorizationFailed,
            format!("Not authorized to access transactional id: {key}"),
        )),
        KEY_TYPE_SHARE if !access.cluster(AclOperation::ClusterAction) => Err((
            ResponseError::ClusterAuthorizationFailed,
            "Cluster authorization failed.".to_string(),
        )),
        KEY_TYPE_SHARE if !is_share_key(key) => Err((
            ResponseError::InvalidRequest,
            format!("Invalid coordinator key {key}: expected group:topicId:partition"),
        )),
        _ => Ok(()),
    }
}

/// Whether `key` reads as a share-partition's coordinator key, `group:topicId:partition`.
fn is_share_key(key: &str) -> bool {
    let mut parts = key.rsplitn(3, ':');
    let partition = parts.next().and_then(|p| p.parse::<i32>().ok());
    let topic_id = parts.next().filter(|id| !id.is_empty());
    let group = parts.next().filter(|group| !group.is_empty());
    partition.is_some_and(|p| p >= 0) && topic_id.is_some() && group.is_some()
}

/// JoinGroup: waits for the rebalance to complete.
pub async fn join_group(
    broker: &Arc<Broker>,
    request: JoinGroupRequest,
    version: i16,
    client_id: Option<&str>,
    (client_host, access): (String, &Access),
) -> JoinGroupResponse {
    if !access.group(AclOperation::Read, request.group_id.as_str()) {
        let mut response = JoinGroupResponse::default();
        response.error_code = ResponseError::GroupAuthorizationFailed.code();
        response.generation_id = -1;
        response.member_id = request.member_id;
        response.protocol_name = (version < 7).then(StrBytes::default);
        return response;
    }
    let join = JoinRequest {
        member_id: request.member_id.to_string(),
        group_instance_id: request.group_instance_id.as_ref().map(|s| s.to_string()),
        client_id: client_id.unwrap_or_default().to_string(),
        client_host,
        session_timeout_ms: request.session_timeout_ms,
        rebalance_timeout_ms: match version {
            0 => request.session_timeout_ms,
            _ => request.rebalance_timeout_ms,
        },
        protocol_type: request.protocol_type.to_string(),
        protocols: request
            .protocols
            .into_iter()
            // Copied: a slice would keep the whole request frame alive as long as the member.
            .map(|p| (p.name.to_string(), Bytes::copy_from_slice(&p.metadata)))
            .collect(),
        require_known_member_id: version >= 4,
    };
    let outcome = broker
        .coordinator
        .join_group(request.group_id.as_str(), join)
        .await;
    let mut response = JoinGroupResponse::default();
    response.error_code = outcome.error.map_or(0, |e| group_error(e).code());
    response.generation_id = outcome.generation;
    response.protocol_type = outcome.protocol_type.map(str_bytes);
    // Below v7 the protocol name is not nullable.
    response.protocol_name = outcome
        .protocol_name
        .map(str_bytes)
        .or_else(|| (version < 7).then(StrBytes::default));
    response.leader = str_bytes(outcome.leader);
    response.member_id = str_bytes(outcome.member_id);
    response.members = outcome
        .members
        .into_iter()
        .map(|m| {
            let mut member = JoinGroupResponseMember::default();
            member.member_id = str_bytes(m.member_id);
            member.group_instance_id = m.group_instance_id.map(str_bytes);
            member.metadata = m.metadata;
            member
        })
        .collect();
    response
}

/// SyncGroup: the leader hands in the assignment; everyone gets their part.
pub async fn sync_group(
    broker: &Arc<Broker>,
    request: SyncGroupRequest,
    access: &Access,
) -> SyncGroupResponse {
    if !access.group(AclOperation::Read, request.group_id.as_str()) {
        let mut response = SyncGroupResponse::default();
        response.error_code = ResponseError::GroupAuthorizationFailed.code();
        return response;
    }
    let assignments = request
        .assignments
        .into_iter()
        // Copied, as the join's metadata is: the group keeps them, not the request frame.
        .map(|a| {
            (
                a.member_id.to_string(),
                Bytes::copy_from_slice(&a.assignment),
            )
        })
        .collect();
    let sync = SyncRequest {
        member_id: request.member_id.as_str(),
        instance_id: optional(&request.group_instance_id),
        generation: request.generation_id,
        protocol_type: optional(&request.protocol_type),
        protocol_name: optional(&request.protocol_name),
        assignments,
    };
    let outcome = broker
        .coordinator
        .sync_group(request.group_id.as_str(), sync)
        .await;
    let mut response = SyncGroupResponse::default();
    match outcome {
        Ok(assignment) => {
            response.protocol_type = assignment.protocol_type.map(str_bytes);
            response.protocol_name = assignment.protocol_name.map(str_bytes);
            response.assignment = assignment.assignment;
        }
        Err(error) => response.error_code = group_error(error).code(),
    }
    response
}

/// Heartbeat.
pub fn heartbeat(
    broker: &Arc<Broker>,
    request: HeartbeatRequest,
    access: &Access,
) -> HeartbeatResponse {
    let mut response = HeartbeatResponse::default();
    if !access.group(AclOperation::Read, request.group_id.as_str()) {
        response.error_code = ResponseError::GroupAuthorizationFailed.code();
        return response;
    }
    response.error_code = group_code(broker.coordinator.heartbeat(
        request.group_id.as_str(),
        request.member_id.as_str(),
        optional(&request.group_instance_id),
        request.generation_id,
    ));
    response
}

/// LeaveGroup: one member (v0–2) or a batch of members by id or instance id (v3+).
pub async fn leave_group(
    broker: &Arc<Broker>,
    request: LeaveGroupRequest,
    version: i16,
    access: &Access,
) -> LeaveGroupResponse {
    if !access.group(AclOperation::Read, request.group_id.as_str()) {
        let mut response = LeaveGroupResponse::default();
        response.error_code = ResponseError::GroupAuthorizationFailed.code();
        return response;
    }
    let members: Vec<(String, Option<String>)> = if version >= 3 {
        request
            .members
            .iter()
            .map(|m| {
                (
                    m.member_id.to_string(),
                    m.group_instance_id.as_ref().map(|s| s.to_string()),
                )
            })
            .collect()
    } else {
        vec![(request.member_id.to_string(), None)]
    };
    let mut response = LeaveGroupResponse::default();
    let left = match broker
        .coordinator
        .leave_group(request.group_id.as_str(), &members)
        .await
    {
        // From v3 each member has its own answer: none of them is in a group that is not there.
        Err(GroupError::UnknownMemberId) if version >= 3 => {
            Ok(vec![Err(GroupError::UnknownMemberId); members.len()])
        }
        other => other,
    };
    match left {
        Err(error) => response.error_code = group_error(error).code(),
        Ok(results) if version < 3 => response.error_code = group_code(results[0]),
        Ok(results) => {
            response.members = members
                .into_iter()
                .zip(results)
                .map(|((member_id, instance_id), result)| {
                    let mut member = MemberResponse::default();
                    member.member_id = str_bytes(member_id);
                    member.group_instance_id = instance_id.map(str_bytes);
                    member.error_code = group_code(result);
                    member
                })
                .collect();
        }
    }
    response
}

/// ListGroups, filtered by state (v4+) and type (v5+: `classic` or `consumer`).
pub fn list_groups(
    broker: &Arc<Broker>,
    request: ListGroupsRequest,
    access: &Access,
) -> ListGroupsResponse {
    // DESCRIBE on the cluster lists every group; otherwise those the client may describe.
    let all = access.cluster(AclOperation::Describe);
    let states: Vec<String> = request
        .states_filter
        .iter()
        .map(|s| s.to_lowercase())
        .collect();
    let types: Vec<String> = request
        .types_filter
        .iter()
        .map(|s| s.to_lowercase())
        .collect();
    let mut response = ListGroupsResponse::default();
    response.groups = broker
        .coordinator
        .list_groups()
        .into_iter()
        .filter(|g| states.is_empty() || states.contains(&g.state.name().to_lowercase()))
        .filter(|g| types.is_empty() || types.iter().any(|t| t == g.group_type))
        .filter(|g| all || access.group(AclOperation::Describe, &g.group_id))
        .map(|g| {
            let mut listed = ListedGroup::default();
            listed.group_id = GroupId(str_bytes(g.group_id));
            listed.protocol_type = str_bytes(g.protocol_type);
            listed.group_state = str_bytes(g.state.name());
            listed.group_type = str_bytes(g.group_type);
            listed
        })
        .collect();
    response
}

/// DescribeGroups. An unknown group is described as Dead with no error below v6, and with
/// GROUP_ID_NOT_FOUND from v6, as Kafka answers.
pub fn describe_groups(
    broker: &Arc<Broker>,
    request: DescribeGroupsRequest,
    version: i16,
    access: &Access,
) -> DescribeGroupsResponse {
    let mut response = DescribeGroupsResponse::default();
    response.groups = request
        .groups
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
            match broker.coordinator.describe_group(group_id.as_str()) {
                Err(error) => described.error_code = group_error(error).code(),
                Ok(None) => {
                    described.group_state = str_bytes("Dead");
                    if version >= 6 {
                        described.error_code = ResponseError::GroupIdNotFound.code();
                        // Consumer-protocol and share groups are not ones DescribeGroups
                        // describes.
                        let other_type = broker
                            .coordinator
                            .group_type(group_id.as_str())
                            .is_some_and(|t| t != "classic");
                        let message = if other_type {
                            format!("Group {} is not a classic group.", group_id.as_str())
                        } else {
                            format!("Group {} not found.", group_id.as_str())
                        };
                        described.error_message = Some(str_bytes(message));
                    }
                }
                Ok(Some(summary)) => {
                    described.group_state = str_bytes(summary.state.name());
                    described.protocol_type = str_bytes(summary.protocol_type);
                    described.protocol_data = str_bytes(summary.protocol);
                    described.members = summary
                        .members
                        .into_iter()
                        .map(|m| {
                            let mut member = DescribedGroupMember::default();
                            member.member_id = str_bytes(m.member_id);
                            member.group_instance_id = m.group_instance_id.map(str_bytes);
                            member.client_id = str_bytes(m.client_id);
                            member.client_host = str_bytes(m.client_host);
                            member.member_metadata = m.metadata;
                            member.member_assignment = m.assignment;
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

/// DeleteGroups: each group must be empty.
pub async fn delete_groups(
    broker: &Arc<Broker>,
    request: DeleteGroupsRequest,
    access: &Access,
) -> DeleteGroupsResponse {
    let mut response = DeleteGroupsResponse::default();
    for group_id in request.groups_names {
        let mut result = DeletableGroupResult::default();
        result.error_code = match access.group(AclOperation::Delete, group_id.as_str()) {
            true => group_code(broker.coordinator.delete_group(group_id.as_str()).await),
            false => ResponseError::GroupAuthorizationFailed.code(),
        };
        result.group_id = group_id;
        response.results.push(result);
    }
    response
}
