//! CreateTopics (key 19) v2–7, DeleteTopics (key 20) v1–6, CreatePartitions (key 37) v0–3,
//! with Kafka's `controller_mutation_rate` (KIP-599) on the partitions they create or delete.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

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
use weir_metadata::acl::AclOperation;
use weir_metadata::authorizer::Access;
use weir_metadata::requests::{CreatePartitions, CreateTopic, DeleteTopic, Mutated, MutationQuota};
use weir_metadata::{is_internal_topic, ControllerError, NewTopic};

use crate::broker::Broker;
use crate::handlers::errors::ErrorReply;
use crate::handlers::str_bytes;
use crate::quotas::{mutation_quota, THROTTLE_MAX};
use crate::request_quota::QuotaClient;

/// Creates topics; `-1` partitions or replication factor mean the broker default. The
/// partitions created count against the client's `controller_mutation_rate`.
pub async fn create_topics(
    broker: &Arc<Broker>,
    request: CreateTopicsRequest,
    (version, access): (i16, &Access),
    client: Option<QuotaClient>,
) -> CreateTopicsResponse {
    let mut response = CreateTopicsResponse::default();
    let mut throttle = MutationThrottle::new(broker, client, version >= 6);
    let cluster_create = access.cluster(AclOperation::Create);
    let mut duplicates = Duplicates::new(request.topics.iter().map(|t| t.name.0.to_string()));
    for topic in request.topics {
        let mut result = CreatableTopicResult::default();
        result.name = topic.name.clone();
        result.error_message = None;
        result.num_partitions = -1;
        result.replication_factor = -1;
        let name = topic.name.0.as_str().to_string();
        let outcome = match duplicates.check(&name) {
            Repeat::Later => continue,
            Repeat::First => Err(ErrorReply::new(
                ResponseError::InvalidRequest,
                "Duplicate topic name.",
            )),
            Repeat::Once if !cluster_create && !access.topic(AclOperation::Create, &name) => {
                Err(ErrorReply::new(
                    ResponseError::TopicAuthorizationFailed,
                    "Authorization failed.",
                ))
            }
            Repeat::Once => {
                let checks = (request.validate_only, throttle.quota());
                let created = create_one(broker, name.clone(), topic, checks).await;
                throttle.note(created).map_err(|e| ErrorReply::from(&e))
            }
        };
        match outcome {
            Ok(created) => {
                result.topic_id = created.topic_id;
                result.num_partitions = created.partition_count();
                result.replication_factor = created.replication_factor;
                if version >= 5 && !access.topic(AclOperation::DescribeConfigs, &name) {
                    result.topic_config_error_code = ResponseError::TopicAuthorizationFailed.code();
                } else if version >= 5 {
                    let image = broker.image();
                    let dynamic = broker.dynamic_configs(&image);
                    let mut configs = broker.config.describe_topic(dynamic, &created.configs);
                    configs.sort_by(|a, b| a.name.cmp(&b.name));
                    result.configs = Some(
                        configs
                            .into_iter()
                            .map(|c| {
                                let mut config = CreatableTopicConfigs::default();
                                config.name = str_bytes(c.name);
                                config.value = c.value.map(str_bytes);
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
    response.throttle_time_ms = throttle.finish(broker);
    response
}

async fn create_one(
    broker: &Arc<Broker>,
    name: String,
    topic: kafka_protocol::messages::create_topics_request::CreatableTopic,
    (validate_only, quota): (bool, Option<MutationQuota>),
) -> Result<Mutated<weir_metadata::TopicImage>, ControllerError> {
    let partitions = if !topic.assignments.is_empty() {
        if topic.num_partitions != -1 || topic.replication_factor != -1 {
            return Err(ControllerError::InvalidRequest(
                "A manual partition assignment was specified, but numPartitions was not set to -1."
                    .into(),
            ));
        }
        let mut indexes: Vec<i32> = topic
            .assignments
            .iter()
            .map(|a| a.partition_index)
            .collect();
        indexes.sort_unstable();
        if indexes.iter().enumerate().any(|(i, p)| *p != i as i32) {
            return Err(ControllerError::InvalidReplicaAssignment(
                "partitions should be a consecutive 0-based integer sequence".into(),
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
            return Err(ControllerError::InvalidConfig(format!(
                "config {} has a null value",
                config.name.as_str()
            )));
        };
        configs.insert(config.name.as_str().to_string(), value.as_str().to_string());
    }
    let mut assignments = topic.assignments;
    assignments.sort_by_key(|a| a.partition_index);
    let new_topic = NewTopic {
        name,
        partitions,
        replication_factor,
        configs,
        assignments: assignments
            .into_iter()
            .map(|a| a.broker_ids.into_iter().map(|b| b.0).collect())
            .collect(),
    };
    broker
        .change_metadata(broker.controller.ask(CreateTopic {
            topic: new_topic,
            validate_only,
            quota,
        }))
        .await
}

/// Deletes topics by name (v1–5) or by name or id (v6); a topic named twice is refused. The
/// partitions deleted count against the client's `controller_mutation_rate`.
pub async fn delete_topics(
    broker: &Arc<Broker>,
    request: DeleteTopicsRequest,
    (version, access): (i16, &Access),
    client: Option<QuotaClient>,
) -> DeleteTopicsResponse {
    let mut response = DeleteTopicsResponse::default();
    let mut throttle = MutationThrottle::new(broker, client, version >= 5);
    let wanted: Vec<(Option<TopicName>, weir_metadata::Uuid)> = if version >= 6 {
        request
            .topics
            .into_iter()
            .map(|t| (t.name, t.topic_id))
            .collect()
    } else {
        request
            .topic_names
            .into_iter()
            .map(|n| (Some(n), weir_metadata::Uuid::nil()))
            .collect()
    };
    // A topic named (or identified) twice is refused and left alone, as Kafka does; it
    // gets one result.
    let key = |(name, id): &(Option<TopicName>, weir_metadata::Uuid)| match name {
        Some(n) => (Some(n.0.to_string()), weir_metadata::Uuid::nil()),
        None => (None, *id),
    };
    let mut duplicates = Duplicates::new(wanted.iter().map(key));
    for (name, topic_id) in wanted {
        let mut result = DeletableTopicResult::default();
        result.error_message = None;
        match duplicates.check(&key(&(name.clone(), topic_id))) {
            Repeat::Later => continue,
            Repeat::First => {
                result.error_code = ResponseError::InvalidRequest.code();
                result.error_message = Some(str_bytes(if name.is_some() {
                    "Duplicate topic name."
                } else {
                    "Duplicate topic id."
                }));
                result.name = name;
                result.topic_id = topic_id;
                response.responses.push(result);
                continue;
            }
            Repeat::Once => {}
        }
        let image = broker.image();
        let resolved = match &name {
            Some(n) => image.topic(n.0.as_str()),
            None => image.topic_by_id(topic_id),
        };
        result.name = name.clone();
        result.topic_id = topic_id;
        // Refused without DELETE whether or not it exists; an id names no topic to those
        // who may not delete it.
        let denied = match (&name, resolved) {
            (Some(n), _) => !access.topic(AclOperation::Delete, n.0.as_str()),
            (None, Some(t)) => !access.topic(AclOperation::Delete, &t.name),
            (None, None) => false,
        };
        if denied {
            result.error_code = ResponseError::TopicAuthorizationFailed.code();
            result.error_message = Some(str_bytes("Authorization failed."));
            response.responses.push(result);
            continue;
        }
        match resolved.map(|t| t.name.clone()) {
            None => {
                // Kafka answers with the errors' standard messages here.
                let (error, message) = if name.is_some() {
                    (
                        ResponseError::UnknownTopicOrPartition,
                        "This server does not host this topic-partition.",
                    )
                } else {
                    (
                        ResponseError::UnknownTopicId,
                        "This server does not host this topic ID.",
                    )
                };
                result.error_code = error.code();
                result.error_message = Some(str_bytes(message));
            }
            Some(topic_name) if is_internal_topic(&topic_name) => {
                // Kafka deletes them, and every group's committed offsets or every
                // transaction's state with them; Weir does not.
                result.error_code = ResponseError::TopicDeletionDisabled.code();
                result.error_message = Some(str_bytes(format!(
                    "{topic_name} holds a coordinator's state and is not deleted"
                )));
            }
            Some(topic_name) => {
                let quota = throttle.quota();
                let deleted = broker
                    .change_metadata(broker.controller.ask(DeleteTopic {
                        name: topic_name,
                        quota,
                    }))
                    .await;
                let deleted = throttle.note(deleted);
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
    response.throttle_time_ms = throttle.finish(broker);
    response
}

/// Raises partition counts to the requested totals, on the replicas the request assigns (the
/// controller checks them as Kafka does: INVALID_REPLICA_ASSIGNMENT) or where the controller
/// places them; a topic named twice is refused (INVALID_REQUEST) and left alone. The partitions
/// added count against the client's `controller_mutation_rate`.
pub async fn create_partitions(
    broker: &Arc<Broker>,
    request: CreatePartitionsRequest,
    (version, access): (i16, &Access),
    client: Option<QuotaClient>,
) -> CreatePartitionsResponse {
    let mut response = CreatePartitionsResponse::default();
    let mut throttle = MutationThrottle::new(broker, client, version >= 3);
    let mut duplicates = Duplicates::new(request.topics.iter().map(|t| t.name.0.to_string()));
    for topic in request.topics {
        let mut result = CreatePartitionsTopicResult::default();
        result.name = topic.name.clone();
        result.error_message = None;
        let name = topic.name.0.as_str().to_string();
        match duplicates.check(&name) {
            Repeat::Later => continue,
            Repeat::First => {
                result.error_code = ResponseError::InvalidRequest.code();
                result.error_message = Some(str_bytes("Duplicate topic name."));
                response.results.push(result);
                continue;
            }
            Repeat::Once => {}
        }
        if !access.topic(AclOperation::Alter, &name) {
            result.error_code = ResponseError::TopicAuthorizationFailed.code();
            result.error_message = Some(str_bytes("Authorization failed."));
            response.results.push(result);
            continue;
        }
        if is_internal_topic(&name) {
            // Keys are placed on its partitions by their count: more partitions would move
            // groups and transactional ids away from their state.
            result.error_code = ResponseError::InvalidPartitions.code();
            result.error_message = Some(str_bytes(format!(
                "the partition count of {name} is fixed: its keys are placed on its partitions by that count"
            )));
            response.results.push(result);
            continue;
        }
        let assignments = topic.assignments.map(|assignments| {
            assignments
                .into_iter()
                .map(|a| a.broker_ids.into_iter().map(|b| b.0).collect())
                .collect()
        });
        let outcome = broker
            .change_metadata(broker.controller.ask(CreatePartitions {
                name,
                total: topic.count,
                assignments,
                validate_only: request.validate_only,
                quota: throttle.quota(),
            }))
            .await;
        let outcome = throttle
            .note(outcome)
            .map_err(|error| ErrorReply::from(&error));
        if let Err(error) = outcome {
            result.error_code = error.code();
            // Kafka names no reason for an unknown topic here.
            result.error_message = (error.error != ResponseError::UnknownTopicOrPartition)
                .then(|| str_bytes(error.message));
        }
        response.results.push(result);
    }
    response.throttle_time_ms = throttle.finish(broker);
    response
}

/// What one request's topic changes cost under the client's `controller_mutation_rate`: the
/// quota the controller is to hold them to, and the longest pause any of them called for
/// (a refusal's included), which the response carries and the connection is muted for.
struct MutationThrottle {
    client: Option<QuotaClient>,
    quota: Option<MutationQuota>,
    ms: u64,
}

impl MutationThrottle {
    /// The throttle of `client`'s request, `strict` at the versions Kafka refuses changes at.
    fn new(broker: &Broker, client: Option<QuotaClient>, strict: bool) -> MutationThrottle {
        let quota = client
            .as_ref()
            .and_then(|c| mutation_quota(broker.image().client_quotas(), c.who(), strict));
        MutationThrottle {
            client,
            quota,
            ms: 0,
        }
    }

    /// The quota for the next change of the request.
    fn quota(&self) -> Option<MutationQuota> {
        self.quota.clone()
    }

    /// Notes the pause a change's outcome calls for; answered with what it produced.
    fn note<T>(
        &mut self,
        outcome: Result<Mutated<T>, ControllerError>,
    ) -> Result<T, ControllerError> {
        match outcome {
            Ok(Mutated { value, throttle_ms }) => {
                self.ms = self.ms.max(throttle_ms);
                Ok(value)
            }
            Err(ControllerError::ThrottlingQuotaExceeded(ms)) => {
                self.ms = self.ms.max(ms);
                Err(ControllerError::ThrottlingQuotaExceeded(ms))
            }
            Err(error) => Err(error),
        }
    }

    /// Mutes the client's connection for the pause (at most [`THROTTLE_MAX`]) and counts it;
    /// answered with the response's `throttle_time_ms`.
    fn finish(self, broker: &Broker) -> i32 {
        let (Some(client), ms @ 1..) = (self.client, self.ms) else {
            return 0;
        };
        let pause = Duration::from_millis(ms);
        broker.metrics.mutation_throttling.count(pause);
        client.mute.extend(pause.min(THROTTLE_MAX));
        i32::try_from(ms).unwrap_or(i32::MAX)
    }
}

/// Where a name stands among a request's names: Kafka refuses a name given twice once, and
/// leaves its other mentions unanswered.
enum Repeat {
    /// Named once.
    Once,
    /// The first mention of a name given more than once: answer INVALID_REQUEST.
    First,
    /// A later mention of such a name: no answer of its own.
    Later,
}

/// The names of one request, counted.
struct Duplicates<K> {
    counts: HashMap<K, usize>,
    answered: HashSet<K>,
}

impl<K: std::hash::Hash + Eq + Clone> Duplicates<K> {
    fn new(keys: impl Iterator<Item = K>) -> Self {
        let mut counts = HashMap::new();
        for key in keys {
            *counts.entry(key).or_insert(0usize) += 1;
        }
        Self {
            counts,
            answered: HashSet::new(),
        }
    }

    fn check(&mut self, key: &K) -> Repeat {
        if self.counts.get(key).copied().unwrap_or(0) <= 1 {
            Repeat::Once
        } else if self.answered.insert(key.clone()) {
            Repeat::First
        } else {
            Repeat::Later
        }
    }
}
