//! Moving replicas and leaders: AlterPartitionReassignments and ElectLeaders, decided by the
//! controller and answered once the applied image shows them, and ListPartitionReassignments
//! from the applied image.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ElectLeadersRequest, ElectLeadersResponse, ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::ResponseError;
use weir_metadata::acl::AclOperation;
use weir_metadata::authorizer::Access;
use weir_metadata::requests::{AlterPartitionReassignments, ElectLeaders};
use weir_metadata::{
    ElectionType, PartitionImage, PartitionOutcome, PartitionRefusal, Reassignment,
};

use crate::broker::Broker;
use crate::handlers::errors::{ErrorReply, CLUSTER_DENIED};
use crate::handlers::str_bytes;

/// The Kafka error of a partition's refusal.
fn refusal_error(refusal: &PartitionRefusal) -> ResponseError {
    match refusal {
        PartitionRefusal::UnknownTopicOrPartition(_) => ResponseError::UnknownTopicOrPartition,
        PartitionRefusal::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
        PartitionRefusal::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
        PartitionRefusal::NoReassignmentInProgress(_) => ResponseError::NoReassignmentInProgress,
        PartitionRefusal::ElectionNotNeeded(_) => ResponseError::ElectionNotNeeded,
        PartitionRefusal::PreferredLeaderNotAvailable(_) => {
            ResponseError::PreferredLeaderNotAvailable
        }
        PartitionRefusal::EligibleLeadersNotAvailable(_) => {
            ResponseError::EligibleLeadersNotAvailable
        }
    }
}

/// Each outcome's code and message (none for success).
fn outcome_reply(outcome: &PartitionOutcome) -> Option<ErrorReply> {
    outcome
        .refusal
        .as_ref()
        .map(|r| ErrorReply::new(refusal_error(r), r.message()))
}

/// Outcomes grouped by topic, in the order topics first appear (one pass: a request may name
/// very many topics).
fn by_topic(outcomes: Vec<PartitionOutcome>) -> Vec<(String, Vec<PartitionOutcome>)> {
    let mut topics: Vec<(String, Vec<PartitionOutcome>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for outcome in outcomes {
        match index.get(&outcome.topic) {
            Some(&i) => topics[i].1.push(outcome),
            None => {
                index.insert(outcome.topic.clone(), topics.len());
                topics.push((outcome.topic.clone(), vec![outcome]));
            }
        }
    }
    topics
}

/// AlterPartitionReassignments: starts, replaces or cancels (no replicas) each partition's
/// reassignment; a refusal of the whole request (no controller) is the top-level error.
pub async fn alter(
    broker: &Arc<Broker>,
    request: AlterPartitionReassignmentsRequest,
    version: i16,
    access: &Access,
) -> AlterPartitionReassignmentsResponse {
    let mut response = AlterPartitionReassignmentsResponse::default();
    response.allow_replication_factor_change = request.allow_replication_factor_change;
    if !access.cluster(AclOperation::Alter) {
        response.error_code = ResponseError::ClusterAuthorizationFailed.code();
        response.error_message = Some(str_bytes(CLUSTER_DENIED));
        return response;
    }
    let reassignments: Vec<Reassignment> = request
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(|p| Reassignment {
                topic: topic.name.0.to_string(),
                partition: p.partition_index,
                target: p
                    .replicas
                    .as_ref()
                    .map(|ids| ids.iter().map(|id| id.0).collect()),
            })
        })
        .collect();
    // Before v1 a target may always change the replication factor, as in Kafka.
    let allow_change = version < 1 || request.allow_replication_factor_change;
    let pending = broker.controller.ask(AlterPartitionReassignments {
        reassignments,
        allow_replication_factor_change: allow_change,
    });
    let outcomes = match broker.change_metadata(pending).await {
        Ok(outcomes) => outcomes,
        Err(error) => {
            let error = ErrorReply::from(&error);
            response.error_code = error.code();
            response.error_message = Some(str_bytes(error.message));
            return response;
        }
    };
    for (name, outcomes) in by_topic(outcomes) {
        let mut topic = ReassignableTopicResponse::default();
        topic.name = TopicName(str_bytes(name));
        for outcome in outcomes {
            let mut partition = ReassignablePartitionResponse::default();
            partition.partition_index = outcome.partition;
            if let Some(error) = outcome_reply(&outcome) {
                partition.error_code = error.code();
                partition.error_message = Some(str_bytes(error.message));
            }
            topic.partitions.push(partition);
        }
        response.responses.push(topic);
    }
    response
}

/// ListPartitionReassignments: the reassignments in progress, of every partition or of the
/// named ones (partitions without one, or unknown, are left out).
pub fn list(
    broker: &Broker,
    request: ListPartitionReassignmentsRequest,
    access: &Access,
) -> ListPartitionReassignmentsResponse {
    if !access.cluster(AclOperation::Describe) {
        let mut response = ListPartitionReassignmentsResponse::default();
        response.error_code = ResponseError::ClusterAuthorizationFailed.code();
        response.error_message = Some(str_bytes(CLUSTER_DENIED));
        return response;
    }
    let image = broker.image();
    let wanted: Vec<(String, Vec<i32>)> = match request.topics {
        Some(topics) => topics
            .into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect(),
        None => image
            .topics()
            .map(|t| (t.name.clone(), (0..t.partition_count()).collect()))
            .collect(),
    };
    let mut response = ListPartitionReassignmentsResponse::default();
    for (name, indexes) in wanted {
        let Some(topic) = image.topic(&name) else {
            continue;
        };
        let ongoing: Vec<OngoingPartitionReassignment> = indexes
            .into_iter()
            .filter_map(|index| Some((index, topic.partition(index)?)))
            .filter(|(_, p)| p.reassigning())
            .map(|(index, p)| ongoing(index, p))
            .collect();
        if !ongoing.is_empty() {
            let mut topic = OngoingTopicReassignment::default();
            topic.name = TopicName(str_bytes(name));
            topic.partitions = ongoing;
            response.topics.push(topic);
        }
    }
    response
}

fn broker_ids(ids: &[i32]) -> Vec<BrokerId> {
    ids.iter().copied().map(BrokerId).collect()
}

fn ongoing(index: i32, p: &PartitionImage) -> OngoingPartitionReassignment {
    let mut ongoing = OngoingPartitionReassignment::default();
    ongoing.partition_index = index;
    ongoing.replicas = broker_ids(&p.replicas);
    ongoing.adding_replicas = broker_ids(&p.adding);
    ongoing.removing_replicas = broker_ids(&p.removing);
    ongoing
}

/// ElectLeaders: preferred (0) or unclean (1) elections of the named partitions, or of every
/// partition (null), answered with each partition's outcome.
pub async fn elect(
    broker: &Arc<Broker>,
    request: ElectLeadersRequest,
    version: i16,
    access: &Access,
) -> ElectLeadersResponse {
    let mut response = ElectLeadersResponse::default();
    let election = match request.election_type {
        0 => ElectionType::Preferred,
        1 => ElectionType::Unclean,
        _ => {
            response.error_code = ResponseError::InvalidRequest.code();
            return response;
        }
    };
    let partitions: Option<Vec<(String, i32)>> = request.topic_partitions.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.topic.0.to_string(), *p)))
            .collect()
    });
    let outcomes = match access.cluster(AclOperation::Alter) {
        true => {
            let pending = broker.controller.ask(ElectLeaders {
                election,
                partitions: partitions.clone(),
            });
            broker.change_metadata(pending).await
        }
        // Refused whole, and each partition named with it, as Kafka answers.
        false => {
            response.error_code = ResponseError::ClusterAuthorizationFailed.code();
            let refused = partitions.unwrap_or_default().into_iter();
            for (name, outcomes) in by_topic(
                refused
                    .map(|(topic, partition)| PartitionOutcome {
                        topic,
                        partition,
                        refusal: None,
                    })
                    .collect(),
            ) {
                let mut topic = ReplicaElectionResult::default();
                topic.topic = TopicName(str_bytes(name));
                for outcome in outcomes {
                    let mut partition = PartitionResult::default();
                    partition.partition_id = outcome.partition;
                    partition.error_code = ResponseError::ClusterAuthorizationFailed.code();
                    partition.error_message = Some(str_bytes(CLUSTER_DENIED));
                    topic.partition_result.push(partition);
                }
                response.replica_election_results.push(topic);
            }
            return response;
        }
    };
    let outcomes = match outcomes {
        Ok(outcomes) => outcomes,
        Err(error) => {
            let error = ErrorReply::from(&error);
            if version >= 1 {
                response.error_code = error.code();
                return response;
            }
            // v0 has no top-level error: every partition asked about carries it.
            partitions
                .unwrap_or_default()
                .into_iter()
                .map(|(topic, partition)| PartitionOutcome {
                    topic,
                    partition,
                    refusal: Some(PartitionRefusal::EligibleLeadersNotAvailable(
                        error.message.clone(),
                    )),
                })
                .collect()
        }
    };
    for (name, outcomes) in by_topic(outcomes) {
        let mut topic = ReplicaElectionResult::default();
        topic.topic = TopicName(str_bytes(name));
        for outcome in outcomes {
            let mut partition = PartitionResult::default();
            partition.partition_id = outcome.partition;
            if let Some(error) = outcome_reply(&outcome) {
                partition.error_code = error.code();
                partition.error_message = Some(str_bytes(error.message));
            }
            topic.partition_result.push(partition);
        }
        response.replica_election_results.push(topic);
    }
    response
}
