//! The cluster as a client first sees it: ApiVersions, DescribeCluster, FindCoordinator.

use std::time::Duration;

use anyhow::{bail, Result};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, DescribeClusterRequest,
    DescribeClusterResponse, FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest,
    MetadataResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{scenarios, Expect};
use crate::session::Ctx;
use crate::setup::s;

scenarios! { "cluster";
    api_versions_own_entry: Expect::Same,
        "ApiVersions v3: error code and the ApiVersions range itself";
    api_versions_v5_intended_broker: Expect::Same,
        "ApiVersions v5 naming the cluster and node meant (KIP-1242): this one, another, half of it";
    api_versions_full_list: Expect::Deliberate("advertises only the APIs and features it serves"),
        "ApiVersions v3: every advertised API and feature";
    describe_cluster: Expect::Same,
        "DescribeCluster v0 and v1 (brokers endpoint), with and without authorized operations";
    describe_cluster_controllers: Expect::Same,
        "DescribeCluster v1 asking a broker listener for controllers";
    find_coordinator_group: Expect::Same,
        "FindCoordinator v3 (one key) and v4–6 (batched) for groups";
    find_coordinator_bad_keys: Expect::Same,
        "FindCoordinator with an empty group id and an unknown key type";
    find_coordinator_transaction: Expect::Same,
        "FindCoordinator v3 and v4 for transactional ids";
}

async fn api_versions_own_entry(cx: &mut Ctx) -> Result<()> {
    let mut request = ApiVersionsRequest::default();
    request.client_software_name = s("weir-diff");
    request.client_software_version = s("1.0");
    let response: ApiVersionsResponse = cx.quietly(ApiKey::ApiVersions, 3, &request).await?;
    let own = response
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::ApiVersions as i16);
    cx.record("ApiVersions v3 error", &response.error_code);
    cx.record("ApiVersions v3 ApiVersions entry", &own);
    Ok(())
}

async fn api_versions_v5_intended_broker(cx: &mut Ctx) -> Result<()> {
    let metadata: MetadataResponse = cx
        .quietly(ApiKey::Metadata, 12, &MetadataRequest::default())
        .await?;
    let Some(cluster) = metadata.cluster_id else {
        bail!("Metadata v12 named no cluster id");
    };
    let node = metadata.brokers.first().map_or(-1, |b| b.node_id.0);
    let other = StrBytes::from_static_str("another-cluster");
    let cases = [
        ("nothing named", None, -1),
        ("this cluster and node", Some(cluster.clone()), node),
        ("this cluster, no node", Some(cluster.clone()), -1),
        ("this cluster, another node", Some(cluster), node + 6),
        ("another cluster", Some(other), node),
        ("only another node", None, node + 6),
        ("a client name Kafka refuses", None, -1),
    ];
    for (what, cluster_id, node_id) in cases {
        let mut request = ApiVersionsRequest::default();
        let refused_name = what.starts_with("a client name");
        request.client_software_name = s(if refused_name {
            "weir diff!"
        } else {
            "weir-diff"
        });
        request.client_software_version = s("1.0");
        request.cluster_id = cluster_id;
        request.node_id = node_id.into();
        let response: ApiVersionsResponse = cx.quietly(ApiKey::ApiVersions, 5, &request).await?;
        let own = response
            .api_keys
            .iter()
            .find(|k| k.api_key == ApiKey::ApiVersions as i16);
        cx.record(
            &format!("ApiVersions v5, {what}: error"),
            &response.error_code,
        );
        cx.record(
            &format!("ApiVersions v5, {what}: APIs listed"),
            &response.api_keys.len().min(1),
        );
        cx.record(&format!("ApiVersions v5, {what}: ApiVersions entry"), &own);
    }
    Ok(())
}

async fn api_versions_full_list(cx: &mut Ctx) -> Result<()> {
    let mut request = ApiVersionsRequest::default();
    request.client_software_name = s("weir-diff");
    request.client_software_version = s("1.0");
    let mut response: ApiVersionsResponse = cx.quietly(ApiKey::ApiVersions, 3, &request).await?;
    // The epoch moves with every metadata change; it says nothing about compatibility.
    response.finalized_features_epoch = 0;
    cx.record("ApiVersions v3", &response);
    Ok(())
}

async fn describe_cluster(cx: &mut Ctx) -> Result<()> {
    let mut request = DescribeClusterRequest::default();
    let _: DescribeClusterResponse = cx.answer(ApiKey::DescribeCluster, 0, &request).await?;
    request.include_cluster_authorized_operations = true;
    let _: DescribeClusterResponse = cx.answer(ApiKey::DescribeCluster, 0, &request).await?;
    request.include_cluster_authorized_operations = false;
    request.endpoint_type = 1;
    let _: DescribeClusterResponse = cx.answer(ApiKey::DescribeCluster, 1, &request).await?;
    Ok(())
}

async fn describe_cluster_controllers(cx: &mut Ctx) -> Result<()> {
    let mut request = DescribeClusterRequest::default();
    request.endpoint_type = 2;
    let _: DescribeClusterResponse = cx.answer(ApiKey::DescribeCluster, 1, &request).await?;
    request.endpoint_type = 3;
    let _: DescribeClusterResponse = cx.answer(ApiKey::DescribeCluster, 1, &request).await?;
    Ok(())
}

/// FindCoordinator key type of a group.
const KEY_TYPE_GROUP: i8 = 0;
/// FindCoordinator key type of a transactional id.
const KEY_TYPE_TRANSACTION: i8 = 1;

/// Waits (unrecorded) until the broker answers FindCoordinator for a group: Kafka makes its
/// offsets topic on the first such request and says COORDINATOR_NOT_AVAILABLE until it has.
pub async fn coordinator_ready(cx: &mut Ctx) -> Result<()> {
    key_coordinator_ready(cx, KEY_TYPE_GROUP).await
}

/// [`coordinator_ready`] for transactional ids (`__transaction_state`).
pub async fn transaction_coordinator_ready(cx: &mut Ctx) -> Result<()> {
    key_coordinator_ready(cx, KEY_TYPE_TRANSACTION).await
}

async fn key_coordinator_ready(cx: &mut Ctx, key_type: i8) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut request = FindCoordinatorRequest::default();
        request.key = s(&cx.name("warm-up"));
        request.key_type = key_type;
        let response: FindCoordinatorResponse =
            cx.quietly(ApiKey::FindCoordinator, 3, &request).await?;
        if response.error_code == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "no coordinator for key type {key_type} within 60 s (error {})",
                response.error_code
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn find_coordinator_group(cx: &mut Ctx) -> Result<()> {
    coordinator_ready(cx).await?;
    let mut request = FindCoordinatorRequest::default();
    request.key = s(&cx.name("g1"));
    let _: FindCoordinatorResponse = cx.answer(ApiKey::FindCoordinator, 3, &request).await?;
    let mut batched = FindCoordinatorRequest::default();
    batched.coordinator_keys = vec![s(&cx.name("g1")), s(&cx.name("g2"))];
    for version in [4, 6] {
        let _: FindCoordinatorResponse = cx
            .answer(ApiKey::FindCoordinator, version, &batched)
            .await?;
    }
    Ok(())
}

async fn find_coordinator_transaction(cx: &mut Ctx) -> Result<()> {
    transaction_coordinator_ready(cx).await?;
    let mut request = FindCoordinatorRequest::default();
    request.key = s(&cx.name("txn1"));
    request.key_type = KEY_TYPE_TRANSACTION;
    let _: FindCoordinatorResponse = cx.answer(ApiKey::FindCoordinator, 3, &request).await?;
    let mut batched = FindCoordinatorRequest::default();
    batched.coordinator_keys = vec![s(&cx.name("txn1")), s(&cx.name("txn2"))];
    batched.key_type = KEY_TYPE_TRANSACTION;
    let _: FindCoordinatorResponse = cx.answer(ApiKey::FindCoordinator, 4, &batched).await?;
    Ok(())
}

async fn find_coordinator_bad_keys(cx: &mut Ctx) -> Result<()> {
    coordinator_ready(cx).await?;
    let mut request = FindCoordinatorRequest::default();
    request.key = s("");
    let _: Option<FindCoordinatorResponse> = cx.ask(ApiKey::FindCoordinator, 3, &request).await?;
    let mut batched = FindCoordinatorRequest::default();
    batched.coordinator_keys = vec![s("")];
    let _: Option<FindCoordinatorResponse> = cx.ask(ApiKey::FindCoordinator, 4, &batched).await?;
    batched.coordinator_keys = vec![s(&cx.name("g1"))];
    batched.key_type = 7;
    let _: Option<FindCoordinatorResponse> = cx.ask(ApiKey::FindCoordinator, 4, &batched).await?;
    Ok(())
}
