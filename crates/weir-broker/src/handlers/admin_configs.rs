//! DescribeConfigs (key 32) v1–4, AlterConfigs (key 33) v0–2, IncrementalAlterConfigs (key 44)
//! v0–1. Topic configs change at runtime; so do the broker keys of topic configs
//! (`log.retention.ms`), for the whole cluster (the broker resource named "") or one broker
//! (named by its id). Other broker settings are static (file, environment, flags).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use weir_metadata::acl::AclOperation;
use weir_metadata::authorizer::Access;
use weir_metadata::requests::{AlterBrokerConfig, AlterTopicConfig};
use weir_metadata::topic_config::{dynamic_broker_config, topic_config};
use weir_metadata::ConfigChange;

use crate::broker::Broker;
use crate::config::{BrokerConfig, DescribedConfig, DynamicConfigs};
use crate::handlers::errors::{ErrorReply, CLUSTER_DENIED};
use crate::handlers::str_bytes;

/// Resource type of a topic.
const RESOURCE_TOPIC: i8 = 2;
/// Resource type of a broker.
const RESOURCE_BROKER: i8 = 4;
/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;
/// The topic configs whose values are comma-separated lists, which APPEND and SUBTRACT
/// change item by item.
const LIST_CONFIGS: &[&str] = &["cleanup.policy"];

/// Which level of broker configs a broker resource names.
#[derive(Debug, Clone, Copy)]
enum BrokerLevel {
    /// The empty name: the cluster-wide defaults.
    Cluster,
    /// This broker's id.
    ThisBroker,
}

/// The level a broker resource's name picks, refused as Kafka refuses it: a name that is not
/// a number, or another broker's id (`describing` words that refusal as DescribeConfigs does).
fn broker_level(broker: &Broker, name: &str, describing: bool) -> Result<BrokerLevel, ErrorReply> {
    if name.is_empty() {
        return Ok(BrokerLevel::Cluster);
    }
    let refused = |message: String| ErrorReply::new(ResponseError::InvalidRequest, message);
    let what = if describing { "Broker" } else { "Node" };
    let id: i32 = name
        .parse()
        .map_err(|_| refused(format!("{what} id must be an integer, but it is: {name}")))?;
    let this = broker.identity.node_id;
    if id != this {
        let expected = if describing {
            format!("{this} or empty string")
        } else {
            this.to_string()
        };
        return Err(refused(format!(
            "Unexpected broker id, expected {expected}, but received {id}"
        )));
    }
    Ok(BrokerLevel::ThisBroker)
}

/// The topic a resource names, refused as Kafka refuses it: an invalid name with
/// INVALID_TOPIC_EXCEPTION, an unknown one with UNKNOWN_TOPIC_OR_PARTITION and `unknown`.
fn known_topic(
    broker: &Broker,
    name: &StrBytes,
    unknown: impl FnOnce() -> String,
) -> Result<weir_metadata::TopicImage, ErrorReply> {
    weir_metadata::validate_topic_name(name.as_str())
        .map_err(|why| ErrorReply::new(ResponseError::InvalidTopicException, why))?;
    broker
        .image()
        .topic(name.as_str())
        .cloned()
        .ok_or_else(|| ErrorReply::new(ResponseError::UnknownTopicOrPartition, unknown()))
}

/// The refusal of `operation` on a resource the client may not touch: a topic needs the
/// operation on the topic (TOPIC_AUTHORIZATION_FAILED), a broker on the cluster
/// (CLUSTER_AUTHORIZATION_FAILED).
fn denied(
    access: &Access,
    operation: AclOperation,
    (resource_type, name): (i8, &str),
) -> Option<ErrorReply> {
    match resource_type {
        RESOURCE_TOPIC if !access.topic(operation, name) => Some(ErrorReply::new(
            ResponseError::TopicAuthorizationFailed,
            "Topic authorization failed.",
        )),
        RESOURCE_BROKER if !access.cluster(operation) => Some(ErrorReply::new(
            ResponseError::ClusterAuthorizationFailed,
            CLUSTER_DENIED,
        )),
        _ => None,
    }
}

/// Describes topic and broker configs: every supported key with its value and source.
pub fn describe_configs(
    broker: &Arc<Broker>,
    request: DescribeConfigsRequest,
    version: i16,
    access: &Access,
) -> DescribeConfigsResponse {
    let mut response = DescribeConfigsResponse::default();
    for resource in request.resources {
        let mut result = DescribeConfigsResult::default();
        result.resource_type = resource.resource_type;
        result.resource_name = resource.resource_name.clone();
        let image = broker.image();
        let dynamic = broker.dynamic_configs(&image);
        let refusal = denied(
            access,
            AclOperation::DescribeConfigs,
            (resource.resource_type, resource.resource_name.as_str()),
        );
        let described: Result<Vec<DescribedConfig>, ErrorReply> =
            match (refusal, resource.resource_type) {
                (Some(refusal), _) => Err(refusal),
                // Kafka answers an unknown topic here with an empty message.
                (None, RESOURCE_TOPIC) => known_topic(broker, &resource.resource_name, String::new)
                    .map(|topic| broker.config.describe_topic(dynamic, &topic.configs)),
                (None, RESOURCE_BROKER) => {
                    broker_level(broker, resource.resource_name.as_str(), true).map(|level| {
                        match level {
                            BrokerLevel::Cluster => BrokerConfig::describe_cluster_default(dynamic),
                            BrokerLevel::ThisBroker => broker.config.describe(dynamic),
                        }
                    })
                }
                (None, other) => Err(ErrorReply::new(
                    ResponseError::InvalidRequest,
                    format!("resource type {other} is not supported"),
                )),
            };
        match described {
            Ok(configs) => {
                // Null or an empty list both mean every key, in name order; named keys
                // come in the order asked (unknown ones left out), as in Kafka.
                let configs: Vec<DescribedConfig> =
                    match resource.configuration_keys.filter(|k| !k.is_empty()) {
                        None => {
                            let mut all = configs;
                            all.sort_by(|a, b| a.name.cmp(&b.name));
                            all
                        }
                        Some(keys) => {
                            let mut by_name: BTreeMap<String, DescribedConfig> =
                                configs.into_iter().map(|c| (c.name.clone(), c)).collect();
                            keys.iter()
                                .filter_map(|k| by_name.remove(k.as_str()))
                                .collect()
                        }
                    };
                result.configs = configs
                    .into_iter()
                    .map(|c| {
                        let mut entry = DescribeConfigsResourceResult::default();
                        entry.config_type = c.config_type;
                        entry.documentation = (version >= 3 && request.include_documentation)
                            .then(|| str_bytes(c.doc));
                        if request.include_synonyms {
                            entry.synonyms = c
                                .synonyms
                                .into_iter()
                                .map(|(name, value, source)| {
                                    let mut synonym = DescribeConfigsSynonym::default();
                                    synonym.name = str_bytes(name);
                                    synonym.value = Some(str_bytes(value));
                                    synonym.source = source as i8;
                                    synonym
                                })
                                .collect();
                        }
                        entry.name = str_bytes(c.name);
                        entry.value = c.value.map(str_bytes);
                        entry.config_source = c.source as i8;
                        entry.read_only = c.read_only;
                        entry
                    })
                    .collect();
            }
            Err(error) => {
                result.error_code = error.code();
                result.error_message = Some(str_bytes(error.message));
            }
        }
        response.results.push(result);
    }
    response
}

/// A list config's new value after APPEND (items not there yet, in order) or SUBTRACT (items
/// removed) of `value`'s comma-separated items to its current value (at the level the resource
/// names: a topic's, the cluster's or this broker's); any other config is refused, as Kafka
/// does.
fn list_change(
    broker: &Broker,
    resource_type: i8,
    resource: &StrBytes,
    name: &str,
    op: i8,
    value: Option<&StrBytes>,
) -> Result<String, String> {
    let (verb, lower) = if op == OP_APPEND {
        ("APPEND", "append")
    } else {
        ("SUBTRACT", "subtract")
    };
    let def = if resource_type == RESOURCE_BROKER {
        dynamic_broker_config(name)
    } else {
        topic_config(name)
    };
    let Some(def) = def else {
        // Not a config that changes: refused as any unknown or static key is.
        return Ok(value.map(|v| v.to_string()).unwrap_or_default());
    };
    if !LIST_CONFIGS.contains(&def.name) {
        return Err(if resource_type == RESOURCE_BROKER {
            format!("Config value {lower} is not allowed for config key: {name}")
        } else {
            format!("Can't {verb} to key {name} because its type is not LIST.")
        });
    }
    let value = value.ok_or_else(|| format!("Null value not supported for : {name}"))?; // refused earlier
    let image = broker.image();
    let dynamic = broker.dynamic_configs(&image);
    let configs = match resource_type {
        RESOURCE_BROKER => match broker_level(broker, resource.as_str(), false) {
            // The cluster level's current value is what a broker without its own has.
            Ok(BrokerLevel::Cluster) => broker.config.describe(DynamicConfigs::cluster(&image)),
            _ => broker.config.describe(dynamic),
        },
        _ => image
            .topic(resource.as_str())
            .map(|t| broker.config.describe_topic(dynamic, &t.configs))
            .unwrap_or_default(),
    };
    let current = configs
        .into_iter()
        .find(|c| c.name == name)
        .and_then(|c| c.value)
        .unwrap_or_default();
    let items = |list: &str| -> Vec<String> {
        list.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut list = items(&current);
    let change = items(value.as_str());
    if op == OP_APPEND {
        for item in change {
            if !list.contains(&item) {
                list.push(item);
            }
        }
    } else {
        list.retain(|item| !change.contains(item));
    }
    Ok(list.join(","))
}

/// One key named twice in one resource (SET and DELETE of it, say) is refused before anything
/// else, as Kafka does.
fn unique_keys(mut names: Vec<&str>) -> Result<(), ErrorReply> {
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Err(ErrorReply::new(
            ResponseError::InvalidRequest,
            "Error due to duplicate config keys",
        ));
    }
    Ok(())
}

/// A config given without a value where one is needed, refused as Kafka does.
fn null_value_refused(name: &str) -> ErrorReply {
    ErrorReply::new(
        ResponseError::InvalidRequest,
        format!("Null value not supported for : {name}"),
    )
}

/// One resource's result; AlterConfigs and IncrementalAlterConfigs answer with identical but
/// distinct generated types, so a macro fills either.
macro_rules! alter_result {
    ($ty:ty, $resource:expr, $outcome:expr) => {{
        let mut result = <$ty>::default();
        result.error_message = None; // null on success, as Kafka answers
        if let Err(error) = $outcome {
            result.error_code = error.code();
            result.error_message = Some(str_bytes(error.message));
        }
        result.resource_type = $resource.resource_type;
        result.resource_name = $resource.resource_name;
        result
    }};
}

/// Applies one resource's change after the refusals Kafka makes before anything else: a
/// client without ALTER_CONFIGS on it, a key named twice among `keys`, then a `missing_value`
/// (the first key given without one).
async fn alter_resource(
    (broker, access): (&Arc<Broker>, &Access),
    resource_type: i8,
    name: &StrBytes,
    (keys, missing_value): (Vec<&str>, Option<&str>),
    change: Result<ConfigChange, String>,
    validate_only: bool,
) -> Result<(), ErrorReply> {
    if let Some(refusal) = denied(
        access,
        AclOperation::AlterConfigs,
        (resource_type, name.as_str()),
    ) {
        return Err(refusal);
    }
    unique_keys(keys)?;
    if let Some(key) = missing_value {
        return Err(null_value_refused(key));
    }
    let invalid_config = |message| ErrorReply::new(ResponseError::InvalidConfig, message);
    if resource_type == RESOURCE_BROKER {
        let node_id = match broker_level(broker, name.as_str(), false)? {
            BrokerLevel::Cluster => None,
            BrokerLevel::ThisBroker => Some(broker.identity.node_id),
        };
        let change = change.map_err(invalid_config)?;
        return broker
            .change_metadata(broker.controller.ask(AlterBrokerConfig {
                node_id,
                change,
                validate_only,
            }))
            .await
            .map_err(|error| ErrorReply::from(&error));
    }
    if resource_type != RESOURCE_TOPIC {
        return Err(ErrorReply::new(
            ResponseError::InvalidRequest,
            format!("Unknown resource type {resource_type}"),
        ));
    }
    let change = change.map_err(invalid_config)?;
    known_topic(broker, name, || {
        format!("The topic '{}' does not exist.", name.as_str())
    })?;
    let topic = name.as_str().to_string();
    broker
        .change_metadata(broker.controller.ask(AlterTopicConfig {
            name: topic,
            change,
            validate_only,
        }))
        .await
        .map_err(|error| ErrorReply::from(&error))
}

/// Replaces a topic's overrides, or one level of dynamic broker configs, with the given set
/// (AlterConfigs semantics).
pub async fn alter_configs(
    broker: &Arc<Broker>,
    request: AlterConfigsRequest,
    access: &Access,
) -> AlterConfigsResponse {
    use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
    let mut response = AlterConfigsResponse::default();
    for resource in request.resources {
        let set = resource
            .configs
            .iter()
            .filter_map(|c| {
                let value = c.value.as_ref()?;
                Some((c.name.as_str().to_string(), value.as_str().to_string()))
            })
            .collect::<BTreeMap<_, _>>();
        let change = Ok(ConfigChange {
            set,
            delete: Vec::new(),
            replace: true,
        });
        let keys = resource.configs.iter().map(|c| c.name.as_str()).collect();
        let missing = resource.configs.iter().find(|c| c.value.is_none());
        let outcome = alter_resource(
            (broker, access),
            resource.resource_type,
            &resource.resource_name,
            (keys, missing.map(|c| c.name.as_str())),
            change,
            request.validate_only,
        )
        .await;
        response.responses.push(alter_result!(
            AlterConfigsResourceResponse,
            resource,
            outcome
        ));
    }
    response
}

/// Sets or deletes individual topic overrides or dynamic broker configs (IncrementalAlterConfigs
/// semantics), or appends to and subtracts from a list config's current value; a key named
/// twice in one resource is INVALID_REQUEST.
pub async fn incremental_alter_configs(
    broker: &Arc<Broker>,
    request: IncrementalAlterConfigsRequest,
    access: &Access,
) -> IncrementalAlterConfigsResponse {
    use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
    let mut response = IncrementalAlterConfigsResponse::default();
    for resource in request.resources {
        let mut set = BTreeMap::new();
        let mut delete = Vec::new();
        let mut problem = None;
        for config in &resource.configs {
            let name = config.name.as_str().to_string();
            match (config.config_operation, &config.value) {
                (OP_SET, Some(value)) => {
                    set.insert(name, value.as_str().to_string());
                }
                (OP_DELETE, _) => delete.push(name),
                (OP_SET, None) => {} // refused below, before anything else
                (op @ (OP_APPEND | OP_SUBTRACT), value) => {
                    let listed = list_change(
                        broker,
                        resource.resource_type,
                        &resource.resource_name,
                        &name,
                        op,
                        value.as_ref(),
                    );
                    match listed {
                        Ok(value) => {
                            set.insert(name, value);
                        }
                        Err(message) => problem = Some(message),
                    }
                }
                (op, _) => problem = Some(format!("operation {op} on {name} does not exist")),
            }
        }
        let change = match problem {
            Some(message) => Err(message),
            None => Ok(ConfigChange {
                set,
                delete,
                replace: false,
            }),
        };
        let keys = resource.configs.iter().map(|c| c.name.as_str()).collect();
        let missing = resource
            .configs
            .iter()
            .find(|c| c.config_operation != OP_DELETE && c.value.is_none());
        let outcome = alter_resource(
            (broker, access),
            resource.resource_type,
            &resource.resource_name,
            (keys, missing.map(|c| c.name.as_str())),
            change,
            request.validate_only,
        )
        .await;
        response.responses.push(alter_result!(
            AlterConfigsResourceResponse,
            resource,
            outcome
        ));
    }
    response
}
