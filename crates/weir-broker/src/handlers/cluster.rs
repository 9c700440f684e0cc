//! DescribeCluster (key 60), v0–1, and OffsetForLeaderEpoch (key 23), v2–4.

use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
};
use kafka_protocol::ResponseError;

use crate::broker::{client_listener, Broker};
use crate::handlers::{operations, str_bytes};

/// Endpoint type of the broker listener in DescribeCluster v1.
const ENDPOINT_TYPE_BROKERS: i8 = 1;
/// Endpoint type asking for the controllers, served on controller listeners only.
const ENDPOINT_TYPE_CONTROLLERS: i8 = 2;

/// Describes the cluster: its registered brokers, and this node as the controller (the
/// quorum is this process).
pub fn describe_cluster(
    broker: &Arc<Broker>,
    request: DescribeClusterRequest,
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
    response.cluster_authorized_operations = operations::reported(
        request.include_cluster_authorized_operations,
        operations::CLUSTER,
    );
    response.brokers = broker
        .image()
        .brokers()
        .filter_map(|registered| {
            let listener = client_listener(registered)?;
            let mut node = DescribeClusterBroker::default();
            node.broker_id = BrokerId(registered.node_id);
            node.host = str_bytes(listener.host.clone());
            node.port = i32::from(listener.port);
            node.rack = registered.rack.clone().map(str_bytes);
            Some(node)
        })
        .collect();
    response
}

/// The end offset of a leader epoch, for clients validating their position after a leader
/// change (KIP-320) and, later, for followers truncating (KIP-101).
pub fn offset_for_leader_epoch(
    broker: &Arc<Broker>,
    request: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let mut response = OffsetForLeaderEpochResponse::default();
    for topic in request.topics {
        let mut result = OffsetForLeaderTopicResult::default();
        for partition in topic.partitions {
            let mut end = EpochEndOffset::default();
            end.partition = partition.partition;
            end.leader_epoch = -1;
            end.end_offset = -1;
            match super::led_partition(broker, topic.topic.0.as_str(), partition.partition) {
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
