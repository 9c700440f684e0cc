//! ACLs through Kafka's admin API: CreateAcls, DescribeAcls and DeleteAcls (v3), in the
//! cluster metadata's own terms ([`AclBinding`], [`AclFilter`]).

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{
    ApiKey, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use weir_metadata::acl::{AclBinding, AclFilter, PatternFilter};

use crate::admin::{check, Admin};
use crate::error::{ClientError, Result};

/// The version of the ACL APIs spoken (Kafka 4's newest).
const VERSION: i16 = 3;
/// Kafka's wire code for "any" in filters.
const ANY: i8 = 1;
/// Kafka's wire code for pattern type MATCH.
const MATCH: i8 = 2;

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_string())
}

fn optional(value: &Option<String>) -> Option<StrBytes> {
    value.as_deref().map(text)
}

/// A filter's wire codes, in CreateAcls' field order: resource type, name, pattern type,
/// principal, host, operation, permission.
type FilterFields = (
    i8,
    Option<StrBytes>,
    i8,
    Option<StrBytes>,
    Option<StrBytes>,
    i8,
    i8,
);

fn filter_fields(filter: &AclFilter) -> FilterFields {
    let pattern = match filter.pattern {
        PatternFilter::Any => ANY,
        PatternFilter::Match => MATCH,
        PatternFilter::Exactly(kind) => kind.code(),
    };
    (
        filter.resource_type.map_or(ANY, |t| t.code()),
        optional(&filter.name),
        pattern,
        optional(&filter.principal),
        optional(&filter.host),
        filter.operation.map_or(ANY, |o| o.code()),
        filter.permission.map_or(ANY, |p| p.code()),
    )
}

/// A binding from the codes of a response, refused when the broker sends one Kafka lacks.
fn binding(
    (resource_type, name, pattern_type): (i8, &StrBytes, i8),
    (principal, host, operation, permission): (&StrBytes, &StrBytes, i8, i8),
) -> Result<AclBinding> {
    AclBinding::from_wire(
        (resource_type, name.as_str(), pattern_type),
        (principal.as_str(), host.as_str(), operation, permission),
    )
    .map_err(ClientError::Protocol)
}

impl Admin {
    /// Adds `acls` (those already there stay as they are).
    pub async fn create_acls(&self, acls: &[AclBinding]) -> Result<()> {
        let mut request = CreateAclsRequest::default();
        request.creations = acls
            .iter()
            .map(|acl| {
                let mut creation = AclCreation::default();
                creation.resource_type = acl.pattern.resource_type.code();
                creation.resource_name = text(&acl.pattern.name);
                creation.resource_pattern_type = acl.pattern.pattern_type.code();
                creation.principal = text(&acl.entry.principal);
                creation.host = text(&acl.entry.host);
                creation.operation = acl.entry.operation.code();
                creation.permission_type = acl.entry.permission.code();
                creation
            })
            .collect();
        let connection = self.cluster().any_broker().await?;
        let response: CreateAclsResponse = connection
            .call(ApiKey::CreateAcls, VERSION, &request)
            .await?;
        for result in &response.results {
            check(result.error_code, result.error_message.as_ref())?;
        }
        Ok(())
    }

    /// The ACLs `filter` selects.
    pub async fn describe_acls(&self, filter: &AclFilter) -> Result<Vec<AclBinding>> {
        let (resource_type, name, pattern, principal, host, operation, permission) =
            filter_fields(filter);
        let mut request = DescribeAclsRequest::default();
        request.resource_type_filter = resource_type;
        request.resource_name_filter = name;
        request.pattern_type_filter = pattern;
        request.principal_filter = principal;
        request.host_filter = host;
        request.operation = operation;
        request.permission_type = permission;
        let connection = self.cluster().any_broker().await?;
        let response: DescribeAclsResponse = connection
            .call(ApiKey::DescribeAcls, VERSION, &request)
            .await?;
        check(response.error_code, response.error_message.as_ref())?;
        let mut found = Vec::new();
        for resource in &response.resources {
            for acl in &resource.acls {
                found.push(binding(
                    (
                        resource.resource_type,
                        &resource.resource_name,
                        resource.pattern_type,
                    ),
                    (
                        &acl.principal,
                        &acl.host,
                        acl.operation,
                        acl.permission_type,
                    ),
                )?);
            }
        }
        Ok(found)
    }

    /// Removes every ACL one of `filters` selects; returns them.
    pub async fn delete_acls(&self, filters: &[AclFilter]) -> Result<Vec<AclBinding>> {
        let mut request = DeleteAclsRequest::default();
        request.filters = filters
            .iter()
            .map(|filter| {
                let (resource_type, name, pattern, principal, host, operation, permission) =
                    filter_fields(filter);
                let mut wire = DeleteAclsFilter::default();
                wire.resource_type_filter = resource_type;
                wire.resource_name_filter = name;
                wire.pattern_type_filter = pattern;
                wire.principal_filter = principal;
                wire.host_filter = host;
                wire.operation = operation;
                wire.permission_type = permission;
                wire
            })
            .collect();
        let connection = self.cluster().any_broker().await?;
        let response: DeleteAclsResponse = connection
            .call(ApiKey::DeleteAcls, VERSION, &request)
            .await?;
        let mut deleted = Vec::new();
        for result in &response.filter_results {
            check(result.error_code, result.error_message.as_ref())?;
            for acl in &result.matching_acls {
                check(acl.error_code, acl.error_message.as_ref())?;
                deleted.push(binding(
                    (acl.resource_type, &acl.resource_name, acl.pattern_type),
                    (
                        &acl.principal,
                        &acl.host,
                        acl.operation,
                        acl.permission_type,
                    ),
                )?);
            }
        }
        Ok(deleted)
    }
}
