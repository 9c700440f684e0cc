//! Metadata (key 3), v1–12: brokers, topics, partitions and leaders; auto-creates topics.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::ResponseError;
use weir_metadata::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use weir_metadata::authorizer::Access;
use weir_metadata::is_internal_topic;
use weir_metadata::requests::CreateTopic;
use weir_metadata::{validate_topic_name, ControllerError, NewTopic, TopicImage, NO_LEADER};

use crate::broker::Broker;
use crate::endpoints::client_endpoints;
use crate::handlers::errors::ErrorReply;
use crate::handlers::{operations, str_bytes};

/// Answers a Metadata request, creating unknown topics when both the request and
/// `auto.create.topics.enable` allow it.
pub async fn handle(
    broker: &Arc<Broker>,
    request: MetadataRequest,
    version: i16,
    (listener, access): (&str, &Access),
) -> MetadataResponse {
    let cluster_operations = request.include_cluster_authorized_operations;
    let topic_operations = request.include_topic_authorized_operations;
    let mut response = answer(broker, request, version, (listener, access)).await;
    response.cluster_authorized_operations = operations::reported(
        cluster_operations,
        access.authorized_operations(ResourceType::Cluster, CLUSTER_NAME),
    );
    for topic in &mut response.topics {
        // Kafka reports them for unknown names too.
        let name = topic.name.as_ref().map_or("", |n| n.0.as_str());
        topic.topic_authorized_operations = operations::reported(
            topic_operations,
            access.authorized_operations(ResourceType::Topic, name),
        );
    }
    response
}

async fn answer(
    broker: &Arc<Broker>,
    request: MetadataRequest,
    version: i16,
    (listener, access): (&str, &Access),
) -> MetadataResponse {
    let identity = &broker.identity;
    let mut response = MetadataResponse::default();
    response.brokers = client_endpoints(&broker.image(), broker.identity.node_id, listener)
        .map(|endpoint| {
            let mut node = MetadataResponseBroker::default();
            node.node_id = BrokerId(endpoint.node_id);
            node.host = str_bytes(endpoint.host);
            node.port = i32::from(endpoint.port);
            node.rack = endpoint.rack.map(str_bytes);
            node
        })
        .collect();
    response.cluster_id = Some(str_bytes(identity.cluster_id.clone()));
    // Every broker takes admin requests and forwards them to the active controller, so each
    // names itself (as Kafka's KRaft brokers name a broker, never a controller).
    response.controller_id = BrokerId(identity.node_id);

    let allow_create = broker.config.auto_create_topics_enable
        && (version < 4 || request.allow_auto_topic_creation);
    let Some(requested) = request.topics else {
        // All topics: those the client may describe.
        let image = broker.image();
        response.topics = image
            .topics()
            .filter(|t| access.topic(AclOperation::Describe, &t.name))
            .map(|t| describe_topic(broker, t))
            .collect();
        return response;
    };
    for wanted in requested {
        let image = broker.image();
        // A non-zero topic id wins: the Java client sends it with an empty name, not a null one.
        let by_id = !wanted.topic_id.is_nil();
        let found = match &wanted.name {
            Some(name) if !by_id => image.topic(name.0.as_str()).cloned(),
            _ => image.topic_by_id(wanted.topic_id).cloned(),
        };
        let name = wanted.name.filter(|_| !by_id);
        let topic = match (found, name) {
            (Some(topic), _) if !access.topic(AclOperation::Describe, &topic.name) => {
                let mut refused = error_topic(
                    (!by_id).then(|| topic.name.clone()),
                    ResponseError::TopicAuthorizationFailed.code(),
                );
                refused.topic_id = wanted.topic_id;
                refused
            }
            (Some(topic), _) => describe_topic(broker, &topic),
            (None, Some(name)) => {
                let name = name.0.as_str().to_string();
                // A topic the client may not describe is refused whether or not it exists,
                // and one it may not create is never created.
                let may_create = access.cluster(AclOperation::Create)
                    || access.topic(AclOperation::Create, &name);
                if !access.topic(AclOperation::Describe, &name) || (allow_create && !may_create) {
                    error_topic(Some(name), ResponseError::TopicAuthorizationFailed.code())
                } else if let Err(reason) = validate_topic_name(&name) {
                    tracing::debug!(target: "weir::broker", topic = %name, reason, "metadata for an invalid topic name");
                    error_topic(Some(name), ResponseError::InvalidTopicException.code())
                } else if allow_create {
                    auto_create(broker, name).await
                } else {
                    error_topic(Some(name), ResponseError::UnknownTopicOrPartition.code())
                }
            }
            (None, None) => {
                let mut topic = error_topic(None, ResponseError::UnknownTopicId.code());
                topic.topic_id = wanted.topic_id;
                topic
            }
        };
        response.topics.push(topic);
    }
    response
}

async fn auto_create(broker: &Arc<Broker>, name: String) -> MetadataResponseTopic {
    let topic = NewTopic {
        name: name.clone(),
        partitions: broker.config.num_partitions,
        replication_factor: broker.config.default_replication_factor,
        configs: BTreeMap::new(),
        assignments: Vec::new(),
    };
    let created = broker
        .change_metadata(broker.controller.ask(CreateTopic {
            topic,
            validate_only: false,
            quota: None,
        }))
        .await
        .map(|created| created.value);
    match created {
        Ok(topic) => {
            tracing::info!(target: "weir::broker", topic = %topic.name, partitions = topic.partition_count(), "auto-created topic");
            describe_topic(broker, &topic)
        }
        Err(ControllerError::TopicAlreadyExists(_)) => match broker.image().topic(&name) {
            Some(topic) => describe_topic(broker, topic),
            None => error_topic(Some(name), ResponseError::LeaderNotAvailable.code()),
        },
        Err(error) => error_topic(Some(name), ErrorReply::from(&error).code()),
    }
}

fn error_topic(name: Option<String>, error_code: i16) -> MetadataResponseTopic {
    let mut topic = MetadataResponseTopic::default();
    topic.error_code = error_code;
    topic.name = name.map(|n| TopicName(str_bytes(n)));
    topic
}

fn describe_topic(broker: &Arc<Broker>, topic: &TopicImage) -> MetadataResponseTopic {
    let node_id = broker.identity.node_id;
    let mut result = error_topic(Some(topic.name.clone()), 0);
    result.topic_id = topic.topic_id;
    result.is_internal = is_internal_topic(&topic.name);
    result.partitions = (0i32..)
        .zip(&topic.partitions)
        .map(|(index, assigned)| {
            let mut partition = MetadataResponsePartition::default();
            partition.partition_index = index;
            partition.leader_id = BrokerId(assigned.leader);
            partition.leader_epoch = assigned.leader_epoch;
            partition.replica_nodes = assigned.replicas.iter().copied().map(BrokerId).collect();
            partition.isr_nodes = assigned.isr.iter().copied().map(BrokerId).collect();
            // A partition led here is available once its log is open and leading.
            let led_here = assigned.leader == node_id;
            let available = assigned.leader != NO_LEADER
                && (!led_here
                    || broker
                        .partitions
                        .get(&topic.name, index)
                        .is_some_and(|p| p.is_leader()));
            if !available {
                partition.error_code = ResponseError::LeaderNotAvailable.code();
                partition.leader_id = BrokerId(NO_LEADER);
            }
            partition
        })
        .collect();
    result
}
