//! Topics: list, create, describe, delete, grow, and their configs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use weir_client::{ClientError, ConfigEntry, TopicDescription};
use weir_metadata::acl::{AclOperation, ResourceType, CLUSTER_NAME};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{JsonBody, Object, PathParams};
use crate::Gateway;

/// A topic in the list.
#[derive(Serialize)]
pub struct TopicSummary {
    name: String,
    partitions: usize,
    replication_factor: usize,
    internal: bool,
}

/// The answer of `GET /topics`.
#[derive(Serialize)]
pub struct TopicList {
    topics: Vec<TopicSummary>,
}

/// `GET /topics`: every topic, with its partition count and replication factor.
pub async fn list(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
) -> Result<Json<TopicList>, ApiError> {
    let metadata = gateway.admin.cluster().refresh(None, false).await?;
    let mut topics: Vec<TopicSummary> = metadata
        .topics
        .iter()
        .filter(|t| t.error_code == 0)
        // Those the caller may describe, as Metadata lists them to a Kafka client.
        .filter(|t| {
            t.name.as_ref().is_some_and(|name| {
                caller.may(AclOperation::Describe, ResourceType::Topic, name.0.as_str())
            })
        })
        .filter_map(|t| {
            Some(TopicSummary {
                name: t.name.as_ref()?.0.to_string(),
                partitions: t.partitions.len(),
                replication_factor: t
                    .partitions
                    .iter()
                    .map(|p| p.replica_nodes.len())
                    .max()
                    .unwrap_or(0),
                internal: t.is_internal,
            })
        })
        .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(TopicList { topics }))
}

/// The body of `POST /topics`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTopic {
    name: String,
    /// Partitions; the broker's `num.partitions` when absent.
    #[serde(default)]
    partitions: Option<i32>,
    /// Replicas per partition; the broker's `default.replication.factor` when absent.
    #[serde(default)]
    replication_factor: Option<i16>,
    /// Topic configs, by Kafka's names.
    #[serde(default)]
    configs: BTreeMap<String, String>,
}

/// One partition of a described topic.
#[derive(Serialize)]
pub struct PartitionView {
    partition: i32,
    leader: i32,
    leader_epoch: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    under_replicated: bool,
    log_start_offset: i64,
    high_watermark: i64,
    /// The following are known where this node hosts the partition (null elsewhere).
    size_bytes: Option<u64>,
    bytes_in_total: Option<u64>,
    records_in_total: Option<u64>,
    bytes_out_total: Option<u64>,
}

/// A described topic.
#[derive(Serialize)]
pub struct TopicView {
    name: String,
    topic_id: String,
    partitions: Vec<PartitionView>,
}

impl TopicView {
    fn of(gateway: &Gateway, described: TopicDescription) -> TopicView {
        let name = described.info.name.clone();
        let partitions = described
            .info
            .partitions
            .iter()
            .zip(described.offsets)
            .map(|(p, (start, end))| {
                let local = gateway
                    .node
                    .partition(&name, p.partition)
                    .filter(|l| l.leader);
                PartitionView {
                    partition: p.partition,
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    under_replicated: p.isr.len() < p.replicas.len() || p.leader < 0,
                    replicas: p.replicas.clone(),
                    isr: p.isr.clone(),
                    log_start_offset: start,
                    high_watermark: end,
                    size_bytes: local.as_ref().map(|l| l.size_bytes),
                    bytes_in_total: local.as_ref().map(|l| l.bytes_in),
                    records_in_total: local.as_ref().map(|l| l.records_in),
                    bytes_out_total: local.as_ref().map(|l| l.bytes_out),
                }
            })
            .collect();
        TopicView {
            name,
            topic_id: described.info.topic_id.to_string(),
            partitions,
        }
    }
}

/// `POST /topics`: creates a topic; 201 with the topic as described once it has leaders.
pub async fn create(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    JsonBody(Object(topic)): JsonBody<Object<NewTopic>>,
) -> Result<(StatusCode, Json<TopicView>), ApiError> {
    // CREATE on the cluster, or on the topic, as CreateTopics asks.
    if !caller.may(AclOperation::Create, ResourceType::Cluster, CLUSTER_NAME) {
        caller.require(AclOperation::Create, ResourceType::Topic, &topic.name)?;
    }
    let configs: Vec<(&str, &str)> = topic
        .configs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    gateway
        .admin
        .create_topic(
            &topic.name,
            topic.partitions.unwrap_or(-1),
            topic.replication_factor.unwrap_or(-1),
            &configs,
        )
        .await?;
    let described = describe_settled(&gateway, &topic.name).await?;
    Ok((
        StatusCode::CREATED,
        Json(TopicView::of(&gateway, described)),
    ))
}

/// Describes a topic just created or changed, waiting briefly for its metadata to reach the
/// broker answering (in a cluster it may not have applied the change yet).
async fn describe_settled(gateway: &Gateway, topic: &str) -> Result<TopicDescription, ApiError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match gateway.admin.describe_topic(topic).await {
            Ok(described) if described.info.partitions.iter().all(|p| p.leader >= 0) => {
                return Ok(described)
            }
            Ok(described) if tokio::time::Instant::now() >= deadline => return Ok(described),
            Err(ClientError::UnknownTopic(_)) if tokio::time::Instant::now() < deadline => {}
            Err(error) if !error.is_retriable() || tokio::time::Instant::now() >= deadline => {
                return Err(error.into())
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET /topics/{topic}`: partitions with leaders, replicas, ISR and offsets.
pub async fn describe(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    PathParams(topic): PathParams<String>,
) -> Result<Json<TopicView>, ApiError> {
    caller.require(AclOperation::Describe, ResourceType::Topic, &topic)?;
    let described = gateway.admin.describe_topic(&topic).await?;
    Ok(Json(TopicView::of(&gateway, described)))
}

/// `DELETE /topics/{topic}`: deletes the topic and its records; 204.
pub async fn delete(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    PathParams(topic): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    caller.require(AclOperation::Delete, ResourceType::Topic, &topic)?;
    gateway.admin.delete_topic(&topic).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The body of `POST /topics/{topic}/partitions`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewPartitions {
    /// The new total number of partitions (as in Kafka, not the number added).
    total: i32,
}

/// `POST /topics/{topic}/partitions`: grows the topic to `total` partitions.
pub async fn add_partitions(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    PathParams(topic): PathParams<String>,
    JsonBody(Object(body)): JsonBody<Object<NewPartitions>>,
) -> Result<Json<TopicView>, ApiError> {
    caller.require(AclOperation::Alter, ResourceType::Topic, &topic)?;
    gateway.admin.add_partitions(&topic, body.total).await?;
    let described = describe_settled(&gateway, &topic).await?;
    Ok(Json(TopicView::of(&gateway, described)))
}

/// One config as described.
#[derive(Serialize)]
struct ConfigView {
    name: String,
    value: Option<String>,
    source: &'static str,
}

/// Configs as described.
#[derive(Serialize)]
pub struct ConfigList {
    configs: Vec<ConfigView>,
}

fn configs_view(entries: Vec<ConfigEntry>) -> Json<ConfigList> {
    let configs: Vec<ConfigView> = entries
        .into_iter()
        .map(|c| ConfigView {
            name: c.name,
            value: c.value,
            source: c.source,
        })
        .collect();
    Json(ConfigList { configs })
}

/// `GET /topics/{topic}/configs`: every config with its value and where it comes from.
pub async fn configs(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    PathParams(topic): PathParams<String>,
) -> Result<Json<ConfigList>, ApiError> {
    caller.require(AclOperation::DescribeConfigs, ResourceType::Topic, &topic)?;
    Ok(configs_view(gateway.admin.describe_configs(&topic).await?))
}

/// The body of `PATCH /topics/{topic}/configs`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigChange {
    /// Configs to set.
    #[serde(default)]
    set: BTreeMap<String, String>,
    /// Overrides to remove (back to the broker's default).
    #[serde(default)]
    delete: Vec<String>,
}

/// `PATCH /topics/{topic}/configs`: sets and removes overrides, others untouched; answers
/// with the configs after the change.
pub async fn alter_configs(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    PathParams(topic): PathParams<String>,
    JsonBody(Object(change)): JsonBody<Object<ConfigChange>>,
) -> Result<Json<ConfigList>, ApiError> {
    caller.require(AclOperation::AlterConfigs, ResourceType::Topic, &topic)?;
    if change.set.is_empty() && change.delete.is_empty() {
        return Err(ApiError::invalid(
            "nothing to change: give `set` or `delete`",
        ));
    }
    gateway
        .admin
        .alter_configs(&topic, &change.set, &change.delete)
        .await?;
    Ok(configs_view(gateway.admin.describe_configs(&topic).await?))
}
