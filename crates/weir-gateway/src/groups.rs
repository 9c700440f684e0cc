//! Consumer groups: the list, and one group's members, assignments and lag.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use weir_client::GroupDescription;
use weir_metadata::acl::{AclOperation, ResourceType, CLUSTER_NAME};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::PathParams;
use crate::Gateway;

/// A group in the list.
#[derive(Serialize)]
pub struct GroupSummary {
    group_id: String,
    state: String,
    protocol_type: String,
}

/// The answer of `GET /groups`.
#[derive(Serialize)]
pub struct GroupList {
    groups: Vec<GroupSummary>,
}

/// `GET /groups`: every group of the cluster, sorted by id.
pub async fn list(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
) -> Result<Json<GroupList>, ApiError> {
    // Every group to who may describe the cluster, else those the caller may describe.
    let all = caller.may(AclOperation::Describe, ResourceType::Cluster, CLUSTER_NAME);
    let groups: Vec<GroupSummary> = gateway
        .admin
        .list_groups()
        .await?
        .into_iter()
        .filter(|g| all || caller.may(AclOperation::Describe, ResourceType::Group, &g.group_id))
        .map(|g| GroupSummary {
            group_id: g.group_id,
            state: g.state,
            protocol_type: g.protocol_type,
        })
        .collect();
    Ok(Json(GroupList { groups }))
}

/// A member and what it is assigned.
#[derive(Serialize)]
struct MemberView {
    member_id: String,
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    assignment: Vec<AssignedTopic>,
}

#[derive(Serialize)]
struct AssignedTopic {
    topic: String,
    partitions: Vec<i32>,
}

/// A partition's committed offset, end and lag.
#[derive(Serialize)]
struct LagView {
    topic: String,
    partition: i32,
    member_id: Option<String>,
    committed_offset: Option<i64>,
    log_end_offset: i64,
    lag: Option<i64>,
}

/// A described group.
#[derive(Serialize)]
pub struct GroupView {
    group_id: String,
    state: String,
    protocol_type: String,
    protocol: String,
    members: Vec<MemberView>,
    partitions: Vec<LagView>,
    /// The sum of the partitions' lag.
    total_lag: i64,
}

impl From<GroupDescription> for GroupView {
    fn from(group: GroupDescription) -> GroupView {
        GroupView {
            total_lag: group.partitions.iter().filter_map(|p| p.lag).sum(),
            group_id: group.group_id,
            state: group.state,
            protocol_type: group.protocol_type,
            protocol: group.protocol,
            members: group
                .members
                .into_iter()
                .map(|m| MemberView {
                    member_id: m.member_id,
                    group_instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    assignment: m
                        .assignment
                        .into_iter()
                        .map(|(topic, partitions)| AssignedTopic { topic, partitions })
                        .collect(),
                })
                .collect(),
            partitions: group
                .partitions
                .into_iter()
                .map(|p| LagView {
                    topic: p.topic,
                    partition: p.partition,
                    member_id: p.member,
                    committed_offset: p.committed,
                    log_end_offset: p.log_end_offset,
                    lag: p.lag,
                })
                .collect(),
        }
    }
}

/// `GET /groups/{group}`: state, members with assignments, and lag per partition; 404 for a
/// group that does not exist.
pub async fn describe(
    State(gateway): State<Arc<Gateway>>,
    caller: Caller,
    PathParams(group): PathParams<String>,
) -> Result<Json<GroupView>, ApiError> {
    caller.require(AclOperation::Describe, ResourceType::Group, &group)?;
    let described = gateway.admin.describe_group(&group).await?;
    if described.state == "Dead" {
        return Err(ApiError::not_found(
            "unknown_group",
            format!("no group {group}"),
        ));
    }
    Ok(Json(described.into()))
}
