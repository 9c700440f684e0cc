//! Health checks and the cluster's status (brokers, controller, quorum, partitions that are
//! not fully replicated, client quotas).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;
use weir_metadata::acl::{AclOperation, ResourceType, CLUSTER_NAME};
use weir_metadata::MetadataImage;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::Gateway;

/// `GET /health/live`: the process is up and answering.
pub async fn live() -> Json<Health> {
    Json(Health {
        status: "live",
        reason: None,
    })
}

/// The answer of a health check.
#[derive(Serialize)]
pub struct Health {
    /// `live`, `ready` or `not_ready`.
    status: &'static str,
    /// Why the node is not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
}

/// `GET /health/ready`: 200 once this node's broker is registered with the metadata quorum
/// and its Kafka listener accepts connections, 503 (with the reason) before that and while
/// it shuts down.
pub async fn ready(State(gateway): State<Arc<Gateway>>) -> (StatusCode, Json<Health>) {
    let reason = if !gateway.node.is_registered() {
        Some("the broker is not registered with the metadata quorum")
    } else if !*gateway.serving.borrow() {
        Some("the Kafka listener is not accepting connections yet")
    } else {
        None
    };
    match reason {
        None => (
            StatusCode::OK,
            Json(Health {
                status: "ready",
                reason: None,
            }),
        ),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Health {
                status: "not_ready",
                reason: Some(reason),
            }),
        ),
    }
}

/// A registered broker.
#[derive(Serialize)]
struct BrokerView {
    node_id: i32,
    address: Option<String>,
    rack: Option<String>,
    /// Fenced: registered but not heartbeating (down, cut off, or shutting down).
    fenced: bool,
}

/// A partition whose ISR is smaller than its replica set, or that has no leader.
#[derive(Serialize)]
struct PartitionHealthView {
    topic: String,
    partition: i32,
    leader: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
}

/// A transaction open at a partition whose producer has been idle there for longer than the
/// leader's `transaction.max.timeout.ms` ([`weir_client::HungTransaction`]).
#[derive(Serialize)]
struct HungTransactionView {
    topic: String,
    partition: i32,
    leader: i32,
    producer_id: i64,
    producer_epoch: i32,
    start_offset: i64,
    idle_ms: i64,
    max_timeout_ms: i64,
}

/// The metadata quorum as its leader describes it.
#[derive(Serialize)]
struct QuorumView {
    leader: i32,
    epoch: i32,
    high_watermark: i64,
    voters: Vec<VoterView>,
}

#[derive(Serialize)]
struct VoterView {
    node_id: i32,
    log_end_offset: i64,
}

/// The quotas of one client quota entity.
#[derive(Serialize)]
struct ClientQuotaView {
    /// The entity as Kafka's tools print it: `user=alice,client-id=<default>`.
    entity: String,
    /// Each quota by Kafka's key (`producer_byte_rate`, …).
    quotas: BTreeMap<&'static str, f64>,
}

/// The responses one kind of quota throttled on the node that answered.
#[derive(Serialize)]
struct ThrottleView {
    /// `produce`, `fetch`, `request` or `controller_mutation`.
    quota: &'static str,
    responses: u64,
    seconds: f64,
}

/// A partition the answering node found hot: its appends run at a lower priority.
#[derive(Serialize)]
struct HotPartitionView {
    topic: String,
    partition: i32,
    bytes_per_second: u64,
}

/// The answer of `GET /cluster`.
#[derive(Serialize)]
pub struct ClusterView {
    cluster_id: String,
    /// The active controller: the metadata quorum's leader.
    controller: i32,
    /// `healthy`, `degraded` (a broker fenced, a partition under-replicated or a transaction
    /// hung) or `partitions_offline` (a partition has no leader).
    health: &'static str,
    brokers: Vec<BrokerView>,
    topics: usize,
    partitions: usize,
    under_replicated: Vec<PartitionHealthView>,
    offline_partitions: usize,
    /// Transactions holding read_committed consumers back until aborted.
    hung_transactions: Vec<HungTransactionView>,
    /// Leaders that could not be asked for hung transactions, with why.
    leaders_not_asked: Vec<String>,
    /// Null when the quorum could not be described.
    quorum: Option<QuorumView>,
    /// The client quotas set; null for a caller that may not describe the cluster's configs.
    client_quotas: Option<Vec<ClientQuotaView>>,
    /// The throttling of clients above their quotas on the node that answered.
    throttling: Vec<ThrottleView>,
    /// The partitions the node that answered found hot, hottest first, of the topics the
    /// caller may describe.
    hot_partitions: Vec<HotPartitionView>,
    /// The node whose gateway answered.
    served_by: i32,
}

/// `GET /cluster`: brokers with their health, the controller, the metadata quorum, the
/// partitions that are under-replicated or offline, hung transactions, client quotas with
/// the throttling they caused on this node, and the partitions this node found hot.
pub async fn status(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
) -> Result<Json<ClusterView>, ApiError> {
    caller.require_cluster(AclOperation::Describe)?;
    let status = gateway.admin.cluster_status().await?;
    let hung = gateway.admin.hung_transactions().await?;
    let image = gateway.node.image();
    let brokers: Vec<BrokerView> = image
        .brokers()
        .map(|b| BrokerView {
            node_id: b.node_id,
            address: b
                .listeners
                .first()
                .map(|l| format!("{}:{}", l.host, l.port)),
            rack: b.rack.clone(),
            fenced: b.fenced,
        })
        .collect();
    let offline = status
        .under_replicated
        .iter()
        .filter(|p| p.leader < 0)
        .count();
    let health = if offline > 0 {
        "partitions_offline"
    } else if !status.under_replicated.is_empty()
        || brokers.iter().any(|b| b.fenced)
        || !hung.found.is_empty()
    {
        "degraded"
    } else {
        "healthy"
    };
    let quorum = gateway
        .admin
        .describe_quorum()
        .await
        .ok()
        .map(|q| QuorumView {
            leader: q.leader,
            epoch: q.epoch,
            high_watermark: q.high_watermark,
            voters: q
                .voters
                .iter()
                .map(|v| VoterView {
                    node_id: v.node_id,
                    log_end_offset: v.log_end_offset,
                })
                .collect(),
        });
    let under_replicated: Vec<PartitionHealthView> = status
        .under_replicated
        .into_iter()
        .map(|p| PartitionHealthView {
            topic: p.topic,
            partition: p.partition,
            leader: p.leader,
            replicas: p.replicas,
            isr: p.isr,
        })
        .collect();
    let stats = gateway.node.broker_stats();
    Ok(Json(ClusterView {
        cluster_id: status.cluster_id,
        // Metadata names any live broker as the controller, as Kafka's KRaft brokers do;
        // the quorum's leader is the active one.
        controller: quorum.as_ref().map_or(status.controller, |q| q.leader),
        health,
        brokers,
        topics: status.topics,
        partitions: status.partitions,
        under_replicated,
        offline_partitions: offline,
        hung_transactions: hung
            .found
            .into_iter()
            .map(|t| HungTransactionView {
                topic: t.topic,
                partition: t.partition,
                leader: t.leader,
                producer_id: t.producer_id,
                producer_epoch: t.producer_epoch,
                start_offset: t.start_offset,
                idle_ms: t.idle_ms,
                max_timeout_ms: t.max_timeout_ms,
            })
            .collect(),
        leaders_not_asked: hung
            .unasked
            .into_iter()
            .map(|(leader, why)| format!("{leader}: {why}"))
            .collect(),
        quorum,
        client_quotas: caller
            .may(
                AclOperation::DescribeConfigs,
                ResourceType::Cluster,
                CLUSTER_NAME,
            )
            .then(|| client_quotas(&image)),
        throttling: stats
            .throttling
            .into_iter()
            .map(|t| ThrottleView {
                quota: t.quota,
                responses: t.responses,
                seconds: t.ms as f64 / 1000.0,
            })
            .collect(),
        hot_partitions: stats
            .hot_partitions
            .into_iter()
            .filter(|hot| caller.may(AclOperation::Describe, ResourceType::Topic, &hot.topic))
            .map(|hot| HotPartitionView {
                topic: hot.topic,
                partition: hot.partition,
                bytes_per_second: hot.bytes_per_second,
            })
            .collect(),
        served_by: gateway.node.node_id(),
    }))
}

/// Every client quota entity of the metadata, with its quotas.
fn client_quotas(image: &MetadataImage) -> Vec<ClientQuotaView> {
    image
        .client_quotas()
        .iter()
        .map(|(entity, quotas)| ClientQuotaView {
            entity: entity.to_string(),
            quotas: quotas
                .iter()
                .map(|(key, value)| (key.name(), value.get()))
                .collect(),
        })
        .collect()
}
