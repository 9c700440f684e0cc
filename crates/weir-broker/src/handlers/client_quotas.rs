//! Client quotas as Kafka's admin API manages them: AlterClientQuotas (49, v0–1) checks each
//! entity's changes (its types and names, each key one quotas of that entity have, each value)
//! and commits the good ones to the metadata together, an entity with any bad change having
//! none applied; DescribeClientQuotas (48, v0–1) answers the entities a filter selects with
//! their quotas. As in Kafka they need ALTER_CONFIGS and DESCRIBE_CONFIGS on the cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::messages::{
    alter_client_quotas_request, alter_client_quotas_response, describe_client_quotas_response,
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::ResponseError;
use weir_metadata::acl::AclOperation;
use weir_metadata::authorizer::Access;
use weir_metadata::quota::{
    check_quota, quota_key, FilterError, QuotaAlteration, QuotaEntity, QuotaFilter, QuotaKey,
};
use weir_metadata::requests::AlterClientQuotas;

use crate::broker::Broker;
use crate::handlers::errors::{ErrorReply, CLUSTER_DENIED};
use crate::handlers::str_bytes;

/// One entry of an AlterClientQuotas request, checked: its changes, or why it is refused.
fn check_entry(entry: &alter_client_quotas_request::EntryData) -> Result<QuotaAlteration, String> {
    let entity = QuotaEntity::new(
        entry
            .entity
            .iter()
            .map(|e| (e.entity_type.as_str(), e.entity_name.as_deref())),
    )?;
    let mut alteration = QuotaAlteration {
        entity,
        set: BTreeMap::new(),
        remove: Vec::new(),
    };
    let mut seen = BTreeSet::new();
    for op in &entry.ops {
        if !seen.insert(op.key.as_str()) {
            return Err(format!(
                "Duplicate quota key {} not updating quota for this entity {}",
                op.key.as_str(),
                alteration.entity
            ));
        }
        if op.remove {
            alteration
                .remove
                .push(quota_key(&alteration.entity, &op.key)?);
        } else {
            let (key, value) = check_quota(&alteration.entity, &op.key, op.value)?;
            alteration.set.insert(key, value);
        }
    }
    Ok(alteration)
}

/// The response's copy of an entry's entity, as the client sent it.
fn echo_entity(
    entry: &alter_client_quotas_request::EntryData,
) -> Vec<alter_client_quotas_response::EntityData> {
    entry
        .entity
        .iter()
        .map(|e| {
            let mut entity = alter_client_quotas_response::EntityData::default();
            entity.entity_type = e.entity_type.clone();
            entity.entity_name = e.entity_name.clone();
            entity
        })
        .collect()
}

/// AlterClientQuotas: one result per entry; the valid entries committed in one command (or,
/// with `validate_only`, only checked).
pub async fn alter(
    broker: &Arc<Broker>,
    request: AlterClientQuotasRequest,
    access: &Access,
) -> AlterClientQuotasResponse {
    let allowed = access.cluster(AclOperation::AlterConfigs);
    let mut seen = BTreeSet::new();
    let mut checked: Vec<Result<QuotaAlteration, ErrorReply>> = request
        .entries
        .iter()
        .map(|entry| {
            if !allowed {
                return Err(ErrorReply::new(
                    ResponseError::ClusterAuthorizationFailed,
                    CLUSTER_DENIED,
                ));
            }
            let alteration = check_entry(entry)
                .map_err(|why| ErrorReply::new(ResponseError::InvalidRequest, why))?;
            if !seen.insert(alteration.entity.clone()) {
                return Err(ErrorReply::new(
                    ResponseError::InvalidRequest,
                    format!("Ignoring duplicate entity {}", alteration.entity),
                ));
            }
            Ok(alteration)
        })
        .collect();
    let alterations: Vec<QuotaAlteration> = checked
        .iter()
        .filter_map(|c| c.as_ref().ok().cloned())
        .collect();
    if !alterations.is_empty() && !request.validate_only {
        let pending = broker.controller.ask(AlterClientQuotas { alterations });
        if let Err(error) = broker.change_metadata(pending).await {
            let error = ErrorReply::from(&error);
            for result in checked.iter_mut().filter(|c| c.is_ok()) {
                *result = Err(error.clone());
            }
        }
    }
    let mut response = AlterClientQuotasResponse::default();
    response.entries = request
        .entries
        .iter()
        .zip(checked)
        .map(|(entry, result)| {
            let mut answer = alter_client_quotas_response::EntryData::default();
            answer.entity = echo_entity(entry);
            if let Err(error) = result {
                answer.error_code = error.code();
                answer.error_message = Some(str_bytes(error.message));
            }
            answer
        })
        .collect();
    response
}

/// DescribeClientQuotas: the entities the filter selects, each with its quotas.
pub fn describe(
    broker: &Arc<Broker>,
    request: DescribeClientQuotasRequest,
    access: &Access,
) -> DescribeClientQuotasResponse {
    let mut response = DescribeClientQuotasResponse::default();
    let refuse = |response: &mut DescribeClientQuotasResponse, error: ResponseError, why: &str| {
        response.error_code = error.code();
        response.error_message = Some(str_bytes(why));
        response.entries = None;
    };
    if !access.cluster(AclOperation::DescribeConfigs) {
        refuse(
            &mut response,
            ResponseError::ClusterAuthorizationFailed,
            CLUSTER_DENIED,
        );
        return response;
    }
    let filter = QuotaFilter::new(
        request
            .components
            .iter()
            .map(|c| (c.entity_type.as_str(), c.match_type, c._match.as_deref())),
        request.strict,
    );
    let filter = match filter {
        Ok(filter) => filter,
        Err(FilterError::UnknownType(why)) => {
            refuse(&mut response, ResponseError::UnsupportedVersion, &why);
            return response;
        }
        Err(FilterError::Invalid(why)) => {
            refuse(&mut response, ResponseError::InvalidRequest, &why);
            return response;
        }
    };
    let image = broker.image();
    let entries = image
        .client_quotas()
        .select(&filter)
        .map(|(entity, quotas)| {
            let mut entry = describe_client_quotas_response::EntryData::default();
            entry.entity = entity
                .components()
                .map(|(kind, name)| {
                    let mut component = describe_client_quotas_response::EntityData::default();
                    component.entity_type = str_bytes(kind.name());
                    component.entity_name = name.map(str_bytes);
                    component
                })
                .collect();
            entry.values = quotas
                .iter()
                .map(|(key, value): (&QuotaKey, _)| {
                    let mut data = describe_client_quotas_response::ValueData::default();
                    data.key = str_bytes(key.name());
                    data.value = value.get();
                    data
                })
                .collect();
            entry
        })
        .collect();
    response.entries = Some(entries);
    response
}
