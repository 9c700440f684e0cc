//! DescribeCluster (key 60), v0–1, DescribeQuorum (key 55), v0–2, and OffsetForLeaderEpoch
//! (key 23), v2–4.

use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    describe_quorum_response, BrokerId, DescribeClusterRequest, DescribeClusterResponse,
    DescribeQuorumRequest, DescribeQuorumResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
};
use kafka_protocol::ResponseError;
use weir_metadata::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use weir_metadata::authorizer::Access;
use weir_metadata::requests::DescribeQuorum;
use weir_metadata::ControllerError;

use crate::broker::Broker;
use crate::endpoints::client_endpoints;
use crate::handlers::errors::{ErrorReply, CLUSTER_DENIED};
use crate::handlers::{operations, str_bytes};

/// Endpoint type of the broker listener in DescribeCluster v1.
const ENDPOINT_TYPE_BROKERS: i8 = 1;
/// Endpoint type asking for the controllers, served on controller listeners only.
const ENDPOINT_TYPE_CONTROLLERS: i8 = 2;

/// Describes the cluster: its registered brokers, and this node as the controller (it forwards
/// admin requests to the active controller).
pub fn describe_cluster(
    broker: &Arc<Broker>,
    request: DescribeClusterRequest,
    (listener, access): (&str, &Access),
) -> DescribeClusterResponse {
    let identity = &broker.identity;
    let mut response = DescribeClusterResponse::default();
    match request.endpoint_type {
        0 | ENDPOINT_TYPE_BROKERS => {}
        ENDPOINT_TYPE_CONTROLLERS => {
            response.error_code = ResponseError::MismatchedEndpointType.code();
            response.error_message = Some(str_bytes(
                "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER",
            ));
            return response;
        }
        other => {
            response.error_code = ResponseError::UnsupportedEndpointType.code();
            response.error_message = Some(str_bytes(format!("Unsupported endpoint type {other}")));
            return response;
        }
    }
    response.endpoint_type = ENDPOINT_TYPE_BROKERS;
    response.cluster_id = str_bytes(identity.cluster_id.clone());
    response.controller_id = BrokerId(identity.node_id);
    // Anyone may describe the cluster; its operations are told to those who may describe it.
    let operations = match access.cluster(AclOperation::Describe) {
        true => access.authorized_operations(ResourceType::Cluster, CLUSTER_NAME),
        false => 0,
    };
    response.cluster_authorized_operations =
        operations::reported(request.include_cluster_authorized_operations, operations);
    response.brokers = client_endpoints(&broker.image(), broker.identity.node_id, listener)
        .map(|endpoint| {
            let mut node = DescribeClusterBroker::default();
            node.broker_id = BrokerId(endpoint.node_id);
            node.host = str_bytes(endpoint.host);
            node.port = i32::from(endpoint.port);
            node.rack = endpoint.rack.map(str_bytes);
            node
        })
        .collect();
    response
}

/// The metadata log's name in DescribeQuorum, as in Kafka.
const METADATA_TOPIC: &str = "__cluster_metadata";
/// Name of the controller listener in DescribeQuorum v2's nodes.
const CONTROLLER_LISTENER: &str = "CONTROLLER";

/// Describes the metadata quorum as its leader sees it (asked of the leader wherever it is):
/// leader, term as the leader epoch, the commit index as the high watermark, and each voter's
/// log end and last contact. Anything but `__cluster_metadata` partition 0 is
/// UNKNOWN_TOPIC_OR_PARTITION, as in Kafka.
pub async fn describe_quorum(
    broker: &Arc<Broker>,
    request: DescribeQuorumRequest,
    version: i16,
    access: &Access,
) -> DescribeQuorumResponse {
    let mut response = DescribeQuorumResponse::default();
    if !access.cluster(AclOperation::Describe) {
        response.error_code = ResponseError::ClusterAuthorizationFailed.code();
        response.error_message = (version >= 2).then(|| str_bytes(CLUSTER_DENIED));
        return response;
    }
    let valid = matches!(request.topics.as_slice(), [topic]
        if topic.topic_name.0.as_str() == METADATA_TOPIC
            && matches!(topic.partitions.as_slice(), [p] if p.partition_index == 0));
    let status = if valid {
        broker.controller.ask(DescribeQuorum).await.map(|c| c.value)
    } else {
        Err(ControllerError::UnknownTopic(METADATA_TOPIC.into()))
    };
    let now_ms = broker.partitions.clock().now_ms();
    for topic in request.topics {
        let mut data = describe_quorum_response::TopicData::default();
        data.topic_name = topic.topic_name;
        for asked in topic.partitions {
            let mut partition = describe_quorum_response::PartitionData::default();
            partition.partition_index = asked.partition_index;
            match &status {
                Ok(status) => {
                    partition.leader_id = BrokerId(status.leader);
                    partition.leader_epoch = i32::try_from(status.term).unwrap_or(i32::MAX);
                    partition.high_watermark = status.commit_index.map_or(0, |i| i as i64 + 1);
                    let replica_state = |voter: &weir_metadata::VoterStatus| {
                        let mut state = describe_quorum_response::ReplicaState::default();
                        state.replica_id = BrokerId(voter.node_id);
                        state.log_end_offset = voter.matched_index.map_or(-1, |i| i as i64 + 1);
                        let seen = voter.last_contact_ms.map_or(-1, |ago| now_ms - ago as i64);
                        state.last_fetch_timestamp = seen;
                        state.last_caught_up_timestamp = seen;
                        state
                    };
                    partition.current_voters = status.voters.iter().map(replica_state).collect();
                    partition.observers = status.observers.iter().map(replica_state).collect();
                }
                Err(ControllerError::UnknownTopic(_)) => {
                    partition.error_code = ResponseError::UnknownTopicOrPartition.code();
                }
                Err(error) => {
                    let error = ErrorReply::from(error);
                    partition.error_code = error.code();
                    // Messages and the nodes list exist from v2.
                    partition.error_message = (version >= 2).then(|| str_bytes(error.message));
                }
            }
            data.partitions.push(partition);
        }
        response.topics.push(data);
    }
    if let (Ok(status), true) = (&status, version >= 2) {
        response.nodes = status
            .voters
            .iter()
            .filter_map(|voter| {
                let (host, port) = voter.address.rsplit_once(':')?;
                let mut listener = describe_quorum_response::Listener::default();
                listener.name = str_bytes(CONTROLLER_LISTENER);
                listener.host = str_bytes(host.to_string());
                listener.port = port.parse().ok()?;
                let mut node = describe_quorum_response::Node::default();
                node.node_id = BrokerId(voter.node_id);
                node.listeners = vec![listener];
                Some(node)
            })
            .collect();
    }
    response
}

/// The end offset of a leader epoch, for clients validating their position after a leader
/// change (KIP-320) and, later, for followers truncating (KIP-101).
pub fn offset_for_leader_epoch(
    broker: &Arc<Broker>,
    request: OffsetForLeaderEpochRequest,
    access: &Access,
) -> OffsetForLeaderEpochResponse {
    let mut response = OffsetForLeaderEpochResponse::default();
    // Followers need CLUSTER_ACTION; consumers (KIP-320) DESCRIBE on the topic.
    let all_allowed = access.cluster(AclOperation::ClusterAction);
    for topic in request.topics {
        let mut result = OffsetForLeaderTopicResult::default();
        let name = topic.topic.0.as_str();
        let allowed = all_allowed || access.topic(AclOperation::Describe, name);
        for partition in topic.partitions {
            let mut end = EpochEndOffset::default();
            end.partition = partition.partition;
            end.leader_epoch = -1;
            end.end_offset = -1;
            let led = match allowed {
                true => super::led_partition(broker, name, partition.partition),
                false => Err(ResponseError::TopicAuthorizationFailed),
            };
            match led {
                Err(error) => end.error_code = error.code(),
                Ok(p) => {
                    let log = p.log();
                    let current = log.leader_epoch();
                    if partition.current_leader_epoch > current {
                        end.error_code = ResponseError::UnknownLeaderEpoch.code();
                    } else if partition.current_leader_epoch >= 0
                        && partition.current_leader_epoch < current
                    {
                        end.error_code = ResponseError::FencedLeaderEpoch.code();
                    } else if partition.leader_epoch > current {
                        // An epoch this log has not reached yet: undefined, as Kafka answers.
                    } else if let Some((epoch, offset)) =
                        log.end_offset_for_epoch(partition.leader_epoch)
                    {
                        end.leader_epoch = epoch;
                        end.end_offset = offset;
                    }
                }
            }
            result.partitions.push(end);
        }
        result.topic = topic.topic;
        response.topics.push(result);
    }
    response
}
