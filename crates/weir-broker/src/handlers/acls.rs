//! CreateAcls (key 30), DescribeAcls (key 29) and DeleteAcls (key 31), v1–3: the ACLs the
//! authorizer checks, kept in the cluster metadata (created and deleted through the controller,
//! so every broker enforces the same ones once its image has them). As in Kafka, they need
//! ALTER (create, delete) or DESCRIBE (describe) on the cluster, and without an authorizer they
//! are SECURITY_DISABLED.

use std::sync::Arc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::ResponseError;
use weir_metadata::acl::{AclBinding, AclFilter, AclOperation};
use weir_metadata::authorizer::Access;
use weir_metadata::requests::{CreateAcls, DeleteAcls};

use crate::broker::Broker;
use crate::handlers::errors::{ErrorReply, CLUSTER_DENIED};
use crate::handlers::str_bytes;

/// Kafka's message when ACLs are asked for with no authorizer configured.
const NO_AUTHORIZER: &str = "No Authorizer is configured.";

/// Why a request about ACLs is refused as a whole, if it is.
fn refusal(broker: &Broker, access: &Access, operation: AclOperation) -> Option<ErrorReply> {
    if !broker.config.authorizer.enabled {
        return Some(ErrorReply::new(
            ResponseError::SecurityDisabled,
            NO_AUTHORIZER,
        ));
    }
    (!access.cluster(operation))
        .then(|| ErrorReply::new(ResponseError::ClusterAuthorizationFailed, CLUSTER_DENIED))
}

/// CreateAcls: each creation checked as Kafka checks it, the valid ones committed together.
pub async fn create(
    broker: &Arc<Broker>,
    request: CreateAclsRequest,
    access: &Access,
) -> CreateAclsResponse {
    let refused = refusal(broker, access, AclOperation::Alter);
    let checked: Vec<Result<AclBinding, ErrorReply>> = request
        .creations
        .iter()
        .map(|c| match &refused {
            Some(refusal) => Err(refusal.clone()),
            None => AclBinding::from_wire(
                (
                    c.resource_type,
                    c.resource_name.as_str(),
                    c.resource_pattern_type,
                ),
                (
                    c.principal.as_str(),
                    c.host.as_str(),
                    c.operation,
                    c.permission_type,
                ),
            )
            .map_err(|message| ErrorReply::new(ResponseError::InvalidRequest, message)),
        })
        .collect();
    let valid: Vec<AclBinding> = checked.iter().filter_map(|c| c.clone().ok()).collect();
    let committed = match valid.is_empty() {
        true => Ok(()),
        false => {
            let pending = broker.controller.ask(CreateAcls {
                acls: valid.clone(),
            });
            broker
                .change_metadata(pending)
                .await
                .map_err(|error| ErrorReply::from(&error))
        }
    };
    if committed.is_ok() && !valid.is_empty() {
        tracing::info!(target: "weir::acl", principal = access.principal(), acls = ?valid, "ACLs created");
    }
    let mut response = CreateAclsResponse::default();
    response.results = checked
        .into_iter()
        .map(|outcome| {
            let mut result = AclCreationResult::default();
            if let Err(error) = outcome.and_then(|_| committed.clone()) {
                result.error_code = error.code();
                result.error_message = Some(str_bytes(error.message));
            }
            result
        })
        .collect();
    response
}

/// DescribeAcls: the ACLs the filter selects, grouped by resource pattern.
pub fn describe(
    broker: &Arc<Broker>,
    request: DescribeAclsRequest,
    access: &Access,
) -> DescribeAclsResponse {
    let mut response = DescribeAclsResponse::default();
    let filter = match refusal(broker, access, AclOperation::Describe) {
        Some(error) => Err(error),
        None => AclFilter::from_wire(
            (
                request.resource_type_filter,
                request.resource_name_filter.as_ref().map(|n| n.as_str()),
                request.pattern_type_filter,
            ),
            (
                request.principal_filter.as_ref().map(|p| p.as_str()),
                request.host_filter.as_ref().map(|h| h.as_str()),
                request.operation,
                request.permission_type,
            ),
        )
        .map_err(|message| ErrorReply::new(ResponseError::InvalidRequest, message)),
    };
    let filter = match filter {
        Ok(filter) => filter,
        Err(error) => {
            response.error_code = error.code();
            response.error_message = Some(str_bytes(error.message));
            return response;
        }
    };
    let image = broker.image();
    for acl in image.acls().iter().filter(|acl| filter.matches(acl)) {
        let mut description = AclDescription::default();
        description.principal = str_bytes(acl.entry.principal.clone());
        description.host = str_bytes(acl.entry.host.clone());
        description.operation = acl.entry.operation.code();
        description.permission_type = acl.entry.permission.code();
        let pattern = &acl.pattern;
        // The table is ordered by pattern: a new pattern starts a new resource.
        let same = response.resources.last().is_some_and(|r| {
            r.resource_type == pattern.resource_type.code()
                && r.pattern_type == pattern.pattern_type.code()
                && r.resource_name.as_str() == pattern.name
        });
        if !same {
            let mut resource = DescribeAclsResource::default();
            resource.resource_type = pattern.resource_type.code();
            resource.resource_name = str_bytes(pattern.name.clone());
            resource.pattern_type = pattern.pattern_type.code();
            response.resources.push(resource);
        }
        if let Some(resource) = response.resources.last_mut() {
            resource.acls.push(description);
        }
    }
    response
}

/// DeleteAcls: every ACL some filter selects is removed; each filter is answered with the
/// ACLs it matched.
pub async fn delete(
    broker: &Arc<Broker>,
    request: DeleteAclsRequest,
    access: &Access,
) -> DeleteAclsResponse {
    let refused = refusal(broker, access, AclOperation::Alter);
    let checked: Vec<Result<AclFilter, ErrorReply>> = request
        .filters
        .iter()
        .map(|f| match &refused {
            Some(refusal) => Err(refusal.clone()),
            None => AclFilter::from_wire(
                (
                    f.resource_type_filter,
                    f.resource_name_filter.as_ref().map(|n| n.as_str()),
                    f.pattern_type_filter,
                ),
                (
                    f.principal_filter.as_ref().map(|p| p.as_str()),
                    f.host_filter.as_ref().map(|h| h.as_str()),
                    f.operation,
                    f.permission_type,
                ),
            )
            .map_err(|message| ErrorReply::new(ResponseError::InvalidRequest, message)),
        })
        .collect();
    let filters: Vec<AclFilter> = checked.iter().filter_map(|c| c.clone().ok()).collect();
    let deleted = match filters.is_empty() {
        true => Ok(Vec::new()),
        false => {
            let pending = broker.controller.ask(DeleteAcls { filters });
            broker
                .change_metadata(pending)
                .await
                .map_err(|error| ErrorReply::from(&error))
        }
    };
    if let Ok(matched) = &deleted {
        let removed: Vec<&AclBinding> = matched.iter().flatten().collect();
        if !removed.is_empty() {
            tracing::info!(target: "weir::acl", principal = access.principal(), acls = ?removed, "ACLs deleted");
        }
    }
    let mut matched = deleted.as_ref().map(|m| m.iter());
    let mut response = DeleteAclsResponse::default();
    response.filter_results = checked
        .into_iter()
        .map(|filter| {
            let mut result = DeleteAclsFilterResult::default();
            let outcome = filter.and_then(|_| match &mut matched {
                Ok(each) => Ok(each.next().cloned().unwrap_or_default()),
                Err(error) => Err(error.clone()),
            });
            match outcome {
                Ok(acls) => result.matching_acls = acls.iter().map(matching_acl).collect(),
                Err(error) => {
                    result.error_code = error.code();
                    result.error_message = Some(str_bytes(error.message));
                }
            }
            result
        })
        .collect();
    response
}

fn matching_acl(acl: &AclBinding) -> DeleteAclsMatchingAcl {
    let mut matching = DeleteAclsMatchingAcl::default();
    matching.resource_type = acl.pattern.resource_type.code();
    matching.resource_name = str_bytes(acl.pattern.name.clone());
    matching.pattern_type = acl.pattern.pattern_type.code();
    matching.principal = str_bytes(acl.entry.principal.clone());
    matching.host = str_bytes(acl.entry.host.clone());
    matching.operation = acl.entry.operation.code();
    matching.permission_type = acl.entry.permission.code();
    matching
}
