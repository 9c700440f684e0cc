//! CreateTopics (key 19) v2–7, DeleteTopics (key 20) v1–6, CreatePartitions (key 37) v0–3.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use kafka_protocol::ResponseError;
use weir_controller::{ControllerError, NewTopic};

use crate::broker::Broker;
use crate::handlers::errors::ErrorReply;
use crate::handlers::str_bytes;

/// Creates topics; `-1` partitions or replication factor mean the broker default.
pub async fn create_topics(
    broker: &Arc<Broker>,
    request: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let mut response = CreateTopicsResponse::default();
    let mut seen: HashMap<TopicName, usize> = HashMap::new();
    for topic in &request.topics {
        *seen.entry(topic.name.clone()).or_default() += 1;
    }
    for topic in request.topics {
        let mut result = CreatableTopicResult::default();
        result.name = topic.name.clone();
        result.num_partitions = -1;
        result.replication_factor = -1;
        let name = topic.name.0.as_str().to_string();
        let outcome = if seen.get(&topic.name).copied().unwrap_or(0) > 1 {
            Err(ErrorReply::new(
                ResponseError::InvalidRequest,
                format!("topic {name} appears more than once in the request"),
            ))
        } else {
            create_one(broker, name, topic, request.validate_only).await
        };
        match outcome {
            Ok(created) => {
                result.topic_id = created.topic_id;
                result.num_partitions = created.partitions;
                result.replication_factor = created.replication_factor;
                if version >= 5 {
                    let configs = broker.config.describe_topic(&created.configs);
                    result.configs = Some(
                        configs
                            .into_iter()
                            .map(|c| {
                                let mut config = CreatableTopicConfigs::default();
                                config.name = str_bytes(c.name);
                                config.value = Some(str_bytes(c.value));
                                config.config_source = c.source as i8;
                                config
                            })
                            .collect(),
                    );
                }
            }
            Err(error) => {
                result.error_code = error.code();
                result.error_message = Some(str_bytes(error.message));
            }
        }
        response.topics.push(result);
    }
    response
}

async fn create_one(
    broker: &Arc<Broker>,
    name: String,
    topic: kafka_protocol::messages::create_topics_request::CreatableTopic,
    validate_only: bool,
) -> Result<weir_controller::TopicImage, ErrorReply> {
    let node_id = broker.identity.node_id;
    let partitions = if !topic.assignments.is_empty() {
        if topic.num_partitions != -1 || topic.replication_factor != -1 {
            return Err(ErrorReply::new(
                ResponseError::InvalidRequest,
                "give either assignments or partitions and replication factor",
            ));
        }
        if topic
            .assignments
            .iter()
            .any(|a| a.broker_ids.iter().any(|b| b.0 != node_id))
        {
            return Err(ErrorReply::new(
                ResponseError::InvalidReplicaAssignment,
                format!("the only broker is {node_id}"),
            ));
        }
        let mut indexes: Vec<i32> = topic
            .assignments
            .iter()
            .map(|a| a.partition_index)
            .collect();
        indexes.sort_unstable();
        if indexes.iter().enumerate().any(|(i, p)| *p != i as i32) {
            return Err(ErrorReply::new(
                ResponseError::InvalidReplicaAssignment,
                "assigned partitions must be numbered 0 to N-1 without gaps",
            ));
        }
        let duplicate = topic.assignments.iter().any(|a| {
            let mut ids: Vec<i32> = a.broker_ids.iter().map(|b| b.0).collect();
            ids.sort_unstable();
            ids.windows(2).any(|w| w[0] == w[1]) || ids.is_empty()
        });
        if duplicate {
            return Err(ErrorReply::new(
                ResponseError::InvalidReplicaAssignment,
                "each partition needs one or more distinct brokers",
            ));
        }
        topic.assignments.len() as i32
    } else if topic.num_partitions == -1 {
        broker.config.num_partitions
    } else {
        topic.num_partitions
    };
    let replication_factor = match (topic.replication_factor, topic.assignments.first()) {
        (-1, Some(assignment)) => assignment.broker_ids.len() as i16,
        (-1, None) => broker.config.default_replication_factor,
        (rf, _) => rf,
    };
    let mut configs = BTreeMap::new();
    for config in topic.configs {
        let Some(value) = config.value else {
            return Err(ErrorReply::new(
                ResponseError::InvalidConfig,
                format!("config {} has a null value", config.name.as_str()),
            ));
        };
        configs.insert(config.name.as_str().to_string(), value.as_str().to_string());
    }
    let new_topic = NewTopic {
        name,
        partitions,
        replication_factor,
        configs,
    };
    broker
        .change_metadata(move |c| c.create_topic(new_topic, validate_only))
        .await
        .map_err(|e| ErrorReply::from(&e))
}

/// Deletes topics by name (v1–5) or by name or id (v6); a topic named twice is refused.
pub async fn delete_topics(
    broker: &Arc<Broker>,
    request: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let mut response = DeleteTopicsResponse::default();
    let wanted: Vec<(Option<TopicName>, weir_controller::Uuid)> = if version >= 6 {
        request
            .topics
            .into_iter()
            .map(|t| (t.name, t.topic_id))
            .collect()
    } else {
        request
            .topic_names
            .into_iter()
            .map(|n| (Some(n), weir_controller::Uuid::nil()))
            .collect()
    };
    // A topic named (or identified) twice is refused and left alone, as Kafka does; it
    // gets one result.
    let key = |(name, id): &(Option<TopicName>, weir_controller::Uuid)| match name {
        Some(n) => (Some(n.0.to_string()), weir_controller::Uuid::nil()),
        None => (None, *id),
    };
    let mut seen = std::collections::HashMap::new();
    for entry in &wanted {
        *seen.entry(key(entry)).or_insert(0usize) += 1;
    }
    let mut answered = std::collections::HashSet::new();
    for (name, topic_id) in wanted {
        let mut result = DeletableTopicResult::default();
        let entry_key = key(&(name.clone(), topic_id));
        if seen[&entry_key] > 1 {
            if answered.insert(entry_key) {
                result.error_code = ResponseError::InvalidRequest.code();
                result.error_message = Some(str_bytes(if name.is_some() {
                    "Duplicate topic name."
                } else {
                    "Duplicate topic id."
                }));
                result.name = name;
                result.topic_id = topic_id;
                response.responses.push(result);
            }
            continue;
        }
        let image = broker.image();
        let resolved = match &name {
            Some(n) => image.topic(n.0.as_str()),
            None => image.topic_by_id(topic_id),
        };
        result.name = name.clone();
        result.topic_id = topic_id;
        match resolved.map(|t| t.name.clone()) {
            None => {
                result.error_code = if name.is_some() {
                    ResponseError::UnknownTopicOrPartition.code()
                } else {
                    ResponseError::UnknownTopicId.code()
                };
            }
            Some(topic_name) => {
                let deleted = broker
                    .change_metadata(move |c| c.delete_topic(&topic_name))
                    .await;
                match deleted {
                    Ok(topic) => {
                        result.name = Some(TopicName(str_bytes(topic.name)));
                        result.topic_id = topic.topic_id;
                    }
                    Err(error) => {
                        result.error_code = ErrorReply::from(&error).code();
                        result.error_message = Some(str_bytes(error.to_string()));
                    }
                }
            }
        }
        response.responses.push(result);
    }
    response
}

/// Raises partition counts to the requested totals.
pub async fn create_partitions(
    broker: &Arc<Broker>,
    request: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut response = CreatePartitionsResponse::default();
    let node_id = broker.identity.node_id;
    for topic in request.topics {
        let mut result = CreatePartitionsTopicResult::default();
        result.name = topic.name.clone();
        let name = topic.name.0.as_str().to_string();
        let foreign_broker = topic
            .assignments
            .iter()
            .flatten()
            .any(|a| a.broker_ids.iter().any(|b| b.0 != node_id));
        let outcome = if foreign_broker {
            Err(ControllerError::InvalidPartitions(format!(
                "the only broker is {node_id}"
            )))
        } else {
            let total = topic.count;
            let validate_only = request.validate_only;
            broker
                .change_metadata(move |c| c.create_partitions(&name, total, validate_only))
                .await
        };
        if let Err(error) = outcome {
            result.error_code = if foreign_broker {
                ResponseError::InvalidReplicaAssignment.code()
            } else {
                ErrorReply::from(&error).code()
            };
            result.error_message = Some(str_bytes(error.to_string()));
        }
        response.results.push(result);
    }
    response
}
