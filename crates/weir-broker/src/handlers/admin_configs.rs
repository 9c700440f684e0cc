//! DescribeConfigs (key 32) v1–4, AlterConfigs (key 33) v0–2, IncrementalAlterConfigs (key 44)
//! v0–1. Topic configs are dynamic; broker configs are static (file, environment, flags).

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
use weir_controller::topic_config::topic_config;

use crate::broker::Broker;
use crate::config::DescribedConfig;
use crate::handlers::errors::ErrorReply;
use crate::handlers::str_bytes;

/// Resource type of a topic.
const RESOURCE_TOPIC: i8 = 2;
/// Resource type of a broker.
const RESOURCE_BROKER: i8 = 4;
/// Kafka's ConfigType codes for DescribeConfigs v3+ (topic configs carry theirs).
const CONFIG_TYPE_BOOLEAN: i8 = 1;
const CONFIG_TYPE_LONG: i8 = 5;
/// IncrementalAlterConfigs operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;
/// The topic configs whose values are comma-separated lists, which APPEND and SUBTRACT
/// change item by item.
const LIST_CONFIGS: &[&str] = &["cleanup.policy"];

fn config_type(name: &str) -> i8 {
    match topic_config(name) {
        Some(def) => def.kind.type_code(),
        None if name.ends_with(".enable") => CONFIG_TYPE_BOOLEAN,
        None => CONFIG_TYPE_LONG,
    }
}

/// The topic a resource names, refused as Kafka refuses it: an invalid name with
/// INVALID_TOPIC_EXCEPTION, an unknown one with UNKNOWN_TOPIC_OR_PARTITION and `unknown`.
fn known_topic(
    broker: &Broker,
    name: &StrBytes,
    unknown: impl FnOnce() -> String,
) -> Result<weir_controller::TopicImage, ErrorReply> {
    weir_controller::validate_topic_name(name.as_str())
        .map_err(|why| ErrorReply::new(ResponseError::InvalidTopicException, why))?;
    broker
        .image()
        .topic(name.as_str())
        .cloned()
        .ok_or_else(|| ErrorReply::new(ResponseError::UnknownTopicOrPartition, unknown()))
}

/// Describes topic and broker configs: every supported key with its value and source.
pub fn describe_configs(
    broker: &Arc<Broker>,
    request: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let mut response = DescribeConfigsResponse::default();
    for resource in request.resources {
        let mut result = DescribeConfigsResult::default();
        result.resource_type = resource.resource_type;
        result.resource_name = resource.resource_name.clone();
        let described: Result<Vec<DescribedConfig>, ErrorReply> = match resource.resource_type {
            // Kafka answers an unknown topic here with an empty message.
            RESOURCE_TOPIC => known_topic(broker, &resource.resource_name, String::new)
                .map(|topic| broker.config.describe_topic(&topic.configs)),
            RESOURCE_BROKER if is_this_broker(broker, &resource.resource_name) => {
                Ok(broker.config.describe())
            }
            RESOURCE_BROKER => Err(ErrorReply::new(
                ResponseError::InvalidRequest,
                format!("unknown broker {}", resource.resource_name.as_str()),
            )),
            other => Err(ErrorReply::new(
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
                        entry.config_type = config_type(&c.name);
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
                        entry.value = Some(str_bytes(c.value));
                        entry.config_source = c.source as i8;
                        entry.read_only = resource.resource_type == RESOURCE_BROKER;
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

fn is_this_broker(broker: &Broker, name: &StrBytes) -> bool {
    name.as_str().is_empty() || name.as_str() == broker.identity.node_id.to_string()
}

/// A list config's new value after APPEND (items not there yet, in order) or SUBTRACT (items
/// removed) of `value`'s comma-separated items to its current value (the override, else the
/// default); any other config is refused, as Kafka does.
fn list_change(
    broker: &Broker,
    topic: &StrBytes,
    name: &str,
    op: i8,
    value: Option<&StrBytes>,
) -> Result<String, String> {
    let verb = if op == OP_APPEND {
        "APPEND"
    } else {
        "SUBTRACT"
    };
    if topic_config(name).is_none() {
        // Not a config at all: the change is refused as any unknown key is.
        return Ok(value.map(|v| v.to_string()).unwrap_or_default());
    }
    if !LIST_CONFIGS.contains(&name) {
        return Err(format!(
            "Can't {verb} to key {name} because its type is not LIST."
        ));
    }
    let value = value.ok_or_else(|| format!("Null value not supported for : {name}"))?; // refused earlier
    let current = broker
        .image()
        .topic(topic.as_str())
        .map(|t| broker.config.describe_topic(&t.configs))
        .and_then(|configs| configs.into_iter().find(|c| c.name == name))
        .map(|c| c.value)
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

/// The change one resource asks for: `(set, delete, replace)`.
type ConfigChange = (BTreeMap<String, String>, Vec<String>, bool);

/// Applies one resource's change after the refusals Kafka makes before anything else: a key
/// named twice among `keys`, then a `missing_value` (the first key given without one).
async fn alter_resource(
    broker: &Arc<Broker>,
    resource_type: i8,
    name: &StrBytes,
    (keys, missing_value): (Vec<&str>, Option<&str>),
    change: Result<ConfigChange, String>,
    validate_only: bool,
) -> Result<(), ErrorReply> {
    unique_keys(keys)?;
    if let Some(key) = missing_value {
        return Err(null_value_refused(key));
    }
    if resource_type == RESOURCE_BROKER {
        return Err(ErrorReply::new(ResponseError::InvalidRequest, "broker configs are static: set them in the config file, environment or flags and restart"));
    }
    if resource_type != RESOURCE_TOPIC {
        return Err(ErrorReply::new(
            ResponseError::InvalidRequest,
            format!("Unknown resource type {resource_type}"),
        ));
    }
    let (set, delete, replace) =
        change.map_err(|message| ErrorReply::new(ResponseError::InvalidConfig, message))?;
    known_topic(broker, name, || {
        format!("The topic '{}' does not exist.", name.as_str())
    })?;
    let topic = name.as_str().to_string();
    broker
        .change_metadata(move |c| c.alter_topic_config(&topic, set, delete, replace, validate_only))
        .await
        .map_err(|error| ErrorReply::from(&error))
}

/// Replaces a topic's overrides with the given set (AlterConfigs semantics).
pub async fn alter_configs(
    broker: &Arc<Broker>,
    request: AlterConfigsRequest,
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
        let change = Ok((set, Vec::new(), true));
        let keys = resource.configs.iter().map(|c| c.name.as_str()).collect();
        let missing = resource.configs.iter().find(|c| c.value.is_none());
        let outcome = alter_resource(
            broker,
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

/// Sets or deletes individual topic overrides (IncrementalAlterConfigs semantics), or appends
/// to and subtracts from a list config's current value; a key named twice in one resource is
/// INVALID_REQUEST.
pub async fn incremental_alter_configs(
    broker: &Arc<Broker>,
    request: IncrementalAlterConfigsRequest,
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
                    match list_change(broker, &resource.resource_name, &name, op, value.as_ref()) {
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
            None => Ok((set, delete, false)),
        };
        let keys = resource.configs.iter().map(|c| c.name.as_str()).collect();
        let missing = resource
            .configs
            .iter()
            .find(|c| c.config_operation != OP_DELETE && c.value.is_none());
        let outcome = alter_resource(
            broker,
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
