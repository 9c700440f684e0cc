//! Consumer groups, the consumer group protocol of KIP-848 (`group.protocol=consumer`):
//! ConsumerGroupHeartbeat (key 68, v0–1) and ConsumerGroupDescribe (69, v0–1). The handlers
//! translate topic ids and names; the group coordinator decides.

use std::sync::Arc;

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member,
    TopicPartitions as DescribedPartitions,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment, TopicPartitions as AssignedPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::ResponseError;
use uuid::Uuid;
use weir_coordinator::assignors::TopicPartitions;
use weir_coordinator::{ConsumerHeartbeat, GroupError, TopicCatalog};
use weir_metadata::acl::{AclOperation, ResourceType};
use weir_metadata::authorizer::Access;
use weir_metadata::is_internal_topic;
use weir_metadata::MetadataImage;

use crate::broker::Broker;
use crate::handlers::errors::group_error;
use crate::handlers::operations;
use crate::handlers::str_bytes;

/// ConsumerGroupDescribe v1 `MemberType` of a consumer-protocol member.
const MEMBER_TYPE_CONSUMER: i8 = 1;

/// The metadata image as the coordinator's view of topics.
pub(crate) struct ImageCatalog(pub(crate) Arc<MetadataImage>);

impl TopicCatalog for ImageCatalog {
    fn topic(&self, name: &str) -> Option<(Uuid, i32)> {
        self.0
            .topic(name)
            .map(|t| (t.topic_id, t.partition_count()))
    }

    fn topic_name(&self, id: Uuid) -> Option<String> {
        self.0.topic_by_id(id).map(|t| t.name.clone())
    }

    fn topic_names(&self) -> Vec<String> {
        self.0
            .topics()
            .filter(|t| !is_internal_topic(&t.name))
            .map(|t| t.name.clone())
            .collect()
    }

    fn version(&self) -> u64 {
        self.0.applied_count
    }
}

/// ConsumerGroupHeartbeat: join, heartbeat or leave; the answer carries the member's epoch
/// and, when it changed, its assignment, once the change is stored.
pub async fn heartbeat(
    broker: &Arc<Broker>,
    request: ConsumerGroupHeartbeatRequest,
    version: i16,
    client_id: Option<&str>,
    (client_host, access): (String, &Access),
) -> ConsumerGroupHeartbeatResponse {
    let subscribed = request.subscribed_topic_names.as_ref();
    if let Some(refusal) = heartbeat_refusal(request.group_id.as_str(), subscribed, access) {
        let mut response = ConsumerGroupHeartbeatResponse::default();
        response.error_code = refusal.0.code();
        response.error_message = Some(str_bytes(refusal.1));
        return response;
    }
    let owned = request.topic_partitions.map(|topics| {
        let mut owned = TopicPartitions::new();
        for t in topics {
            owned.entry(t.topic_id).or_default().extend(t.partitions);
        }
        owned
    });
    let heartbeat = ConsumerHeartbeat {
        member_id: request.member_id.to_string(),
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.map(|s| s.to_string()),
        rack_id: request.rack_id.map(|s| s.to_string()),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        topic_names: request
            .subscribed_topic_names
            .map(|names| names.into_iter().map(|n| n.to_string()).collect()),
        topic_regex: request.subscribed_topic_regex.map(|s| s.to_string()),
        server_assignor: request.server_assignor.map(|s| s.to_string()),
        owned,
        client_id: client_id.unwrap_or_default().to_string(),
        client_host,
    };
    let refusal = Refusal::of(&heartbeat, request.group_id.as_str(), version);
    let catalog = ImageCatalog(broker.image());
    let mut response = ConsumerGroupHeartbeatResponse::default();
    let answer = broker
        .coordinator
        .consumer_heartbeat(request.group_id.as_str(), heartbeat, version, &catalog)
        .await;
    match answer {
        Ok(reply) => {
            response.member_id = Some(str_bytes(reply.member_id));
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
        }
        Err(error) => {
            let code = group_error(error);
            response.error_code = code.code();
            let group_type = broker.coordinator.group_type(request.group_id.as_str());
            response.error_message = Some(str_bytes(refusal.message(error, code, group_type)));
        }
    }
    response
}

/// What a refused heartbeat's message needs to know of the request, taken before the
/// coordinator consumes it; the messages are Kafka's.
struct Refusal {
    group_id: String,
    member_id: String,
    member_epoch: i32,
    server_assignor: Option<String>,
    topic_regex: Option<String>,
    invalid: Option<&'static str>,
}

impl Refusal {
    fn of(request: &ConsumerHeartbeat, group_id: &str, version: i16) -> Refusal {
        Refusal {
            group_id: group_id.to_string(),
            member_id: request.member_id.clone(),
            member_epoch: request.member_epoch,
            server_assignor: request.server_assignor.clone(),
            topic_regex: request.topic_regex.clone(),
            invalid: invalid_request_reason(request, group_id, version),
        }
    }

    fn message(&self, error: GroupError, code: ResponseError, group_type: Option<&str>) -> String {
        let group = &self.group_id;
        match error {
            GroupError::InvalidRequest => self
                .invalid
                .unwrap_or("MemberId, InstanceId and RackId must be at most 255 characters.")
                .to_string(),
            GroupError::GroupIdNotFound if group_type == Some("share") => {
                format!("Group {group} is not a consumer group.")
            }
            GroupError::GroupIdNotFound if group_type.is_some() => format!(
                "Group {group} is not a consumer group (it is a classic group with members)."
            ),
            GroupError::GroupIdNotFound => format!("Consumer group {group} not found."),
            GroupError::UnknownMemberId => {
                format!("Member {} is not a member of group {group}.", self.member_id)
            }
            GroupError::UnsupportedAssignor => format!(
                "ServerAssignor {} is not supported. Supported assignors: {}.",
                self.server_assignor.as_deref().unwrap_or_default(),
                weir_coordinator::assignors::ASSIGNORS.join(", ")
            ),
            GroupError::InvalidRegularExpression => {
                let regex = self.topic_regex.as_deref().unwrap_or_default();
                let why = weir_coordinator::pattern_problem(regex).unwrap_or_default();
                format!("SubscribedTopicRegex `{regex}` is not a valid regular expression: {why}.")
            }
            GroupError::FencedMemberEpoch => format!(
                "The consumer group member has a member epoch ({}) the group coordinator does not know. The member must abandon all its partitions and rejoin.",
                self.member_epoch
            ),
            _ => code.to_string(),
        }
    }
}

/// Why a heartbeat is INVALID_REQUEST, checked in the order Kafka checks and worded as it
/// words it; `None` when it is not (or only for Weir's own bounds on id lengths).
fn invalid_request_reason(
    request: &ConsumerHeartbeat,
    group_id: &str,
    version: i16,
) -> Option<&'static str> {
    let empty = |s: &Option<String>| s.as_ref().is_some_and(String::is_empty);
    if version >= 1 && request.member_id.is_empty() {
        return Some("MemberId can't be empty.");
    }
    if group_id.is_empty() {
        return Some("GroupId can't be empty.");
    }
    if empty(&request.instance_id) {
        return Some("InstanceId can't be empty.");
    }
    if empty(&request.rack_id) {
        return Some("RackId can't be empty.");
    }
    match request.member_epoch {
        0 if request.rebalance_timeout_ms < 0 => {
            Some("RebalanceTimeoutMs must be provided in first request.")
        }
        0 if request.owned.as_ref().is_none_or(|owned| !owned.is_empty()) => {
            Some("TopicPartitions must be empty when (re-)joining.")
        }
        0 if request.topic_names.is_none() && request.topic_regex.is_none() => Some(
            "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
        ),
        -2 if request.instance_id.is_none() => Some("InstanceId can't be null."),
        epoch if epoch < -2 => Some("MemberEpoch is invalid."),
        _ => None,
    }
}

/// Why a heartbeat (ConsumerGroupHeartbeat or ShareGroupHeartbeat) is not authorized, if it
/// is not: READ on the group, DESCRIBE on each topic subscribed to by name.
pub(crate) fn heartbeat_refusal(
    group: &str,
    subscribed: Option<&Vec<TopicName>>,
    access: &Access,
) -> Option<(ResponseError, String)> {
    if !access.group(AclOperation::Read, group) {
        return Some((
            ResponseError::GroupAuthorizationFailed,
            format!("Not authorized to access group: {group}"),
        ));
    }
    let denied: Vec<&str> = subscribed
        .into_iter()
        .flatten()
        .map(|t| t.as_str())
        .filter(|t| !access.topic(AclOperation::Describe, t))
        .collect();
    (!denied.is_empty()).then(|| {
        (
            ResponseError::TopicAuthorizationFailed,
            format!("Not authorized to access topics: [{}]", denied.join(", ")),
        )
    })
}

/// `partitions` with their topics' names, for a describe answer: (id, name, partitions); a
/// topic deleted since the assignment is left out, as Kafka does.
pub(crate) fn named_partitions(
    catalog: &ImageCatalog,
    partitions: TopicPartitions,
) -> Vec<(Uuid, TopicName, Vec<i32>)> {
    partitions
        .into_iter()
        .filter_map(|(topic_id, ps)| {
            let name = TopicName(str_bytes(catalog.topic_name(topic_id)?));
            Some((topic_id, name, ps.into_iter().collect()))
        })
        .collect()
}

/// ConsumerGroupDescribe: groups with their epochs, members and assignments; a missing or
/// classic group is GROUP_ID_NOT_FOUND.
pub fn describe(
    broker: &Arc<Broker>,
    request: ConsumerGroupDescribeRequest,
    version: i16,
    access: &Access,
) -> ConsumerGroupDescribeResponse {
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
    let mut response = ConsumerGroupDescribeResponse::default();
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
            match broker
                .coordinator
                .describe_consumer_group(group_id.as_str())
            {
                Err(error) => {
                    described.error_code = group_error(error).code();
                    if error == GroupError::GroupIdNotFound {
                        described.error_message = Some(str_bytes(format!(
                            "Group {} is not a consumer group.",
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
                    described.assignor_name = str_bytes(group.assignor);
                    described.members = group
                        .members
                        .into_iter()
                        .map(|m| {
                            let mut member = Member::default();
                            member.member_id = str_bytes(m.member_id);
                            member.instance_id = m.instance_id.map(str_bytes);
                            member.rack_id = m.rack_id.map(str_bytes);
                            member.member_epoch = m.member_epoch;
                            member.client_id = str_bytes(m.client_id);
                            member.client_host = str_bytes(m.client_host);
                            member.subscribed_topic_names = m
                                .topic_names
                                .into_iter()
                                .map(|n| TopicName(str_bytes(n)))
                                .collect();
                            // Kafka answers an empty pattern, not null, when there is none.
                            member.subscribed_topic_regex =
                                Some(str_bytes(m.topic_regex.unwrap_or_default()));
                            member.assignment = assignment(m.assignment);
                            member.target_assignment = assignment(m.target_assignment);
                            if version >= 1 {
                                member.member_type = MEMBER_TYPE_CONSUMER;
                            }
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
