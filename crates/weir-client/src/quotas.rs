//! Client quotas through Kafka's admin API: AlterClientQuotas and DescribeClientQuotas.

use std::collections::BTreeMap;

use kafka_protocol::messages::{
    alter_client_quotas_request, describe_client_quotas_request, AlterClientQuotasRequest,
    AlterClientQuotasResponse, ApiKey, DescribeClientQuotasRequest, DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;
use weir_metadata::quota::{EntityType, NameMatch, QuotaAlteration, QuotaEntity};

use crate::admin::{check, Admin};
use crate::error::{ClientError, Result};

/// One entity's quotas as the cluster describes them: Kafka's key names and their values.
pub type EntityQuotas = (QuotaEntity, BTreeMap<String, f64>);

impl Admin {
    /// Sets and removes the quotas of one entity, as `alteration` says.
    pub async fn alter_client_quotas(&self, alteration: &QuotaAlteration) -> Result<()> {
        let mut entry = alter_client_quotas_request::EntryData::default();
        entry.entity = alteration
            .entity
            .components()
            .map(|(kind, name)| {
                let mut component = alter_client_quotas_request::EntityData::default();
                component.entity_type = StrBytes::from_static_str(kind.name());
                component.entity_name = name.map(|n| StrBytes::from_string(n.to_string()));
                component
            })
            .collect();
        let op = |key: &str, value: f64, remove: bool| {
            let mut op = alter_client_quotas_request::OpData::default();
            op.key = StrBytes::from_string(key.to_string());
            op.value = value;
            op.remove = remove;
            op
        };
        entry.ops = alteration
            .set
            .iter()
            .map(|(key, value)| op(key.name(), value.get(), false))
            .chain(
                alteration
                    .remove
                    .iter()
                    .map(|key| op(key.name(), 0.0, true)),
            )
            .collect();
        let mut request = AlterClientQuotasRequest::default();
        request.entries = vec![entry];
        let connection = self.cluster().controller().await?;
        let response: AlterClientQuotasResponse = connection
            .call(ApiKey::AlterClientQuotas, 1, &request)
            .await?;
        for entry in &response.entries {
            check(entry.error_code, entry.error_message.as_ref())?;
        }
        Ok(())
    }

    /// The entities with quotas that have every component of `filter` (with `strict`, no
    /// others), each with its quotas.
    pub async fn describe_client_quotas(
        &self,
        filter: &[(EntityType, NameMatch)],
        strict: bool,
    ) -> Result<Vec<EntityQuotas>> {
        let mut request = DescribeClientQuotasRequest::default();
        request.strict = strict;
        request.components = filter
            .iter()
            .map(|(kind, matching)| {
                let mut component = describe_client_quotas_request::ComponentData::default();
                component.entity_type = StrBytes::from_static_str(kind.name());
                (component.match_type, component._match) = match matching {
                    NameMatch::Exactly(Some(name)) => {
                        (0, Some(StrBytes::from_string(name.clone())))
                    }
                    NameMatch::Exactly(None) => (1, None),
                    NameMatch::Any => (2, None),
                };
                component
            })
            .collect();
        let connection = self.cluster().controller().await?;
        let response: DescribeClientQuotasResponse = connection
            .call(ApiKey::DescribeClientQuotas, 1, &request)
            .await?;
        check(response.error_code, response.error_message.as_ref())?;
        response
            .entries
            .unwrap_or_default()
            .into_iter()
            .map(|entry| {
                let entity = QuotaEntity::new(
                    entry
                        .entity
                        .iter()
                        .map(|e| (e.entity_type.as_str(), e.entity_name.as_deref())),
                )
                .map_err(|why| ClientError::Protocol(format!("a described quota entity: {why}")))?;
                let values = entry
                    .values
                    .into_iter()
                    .map(|v| (v.key.to_string(), v.value))
                    .collect();
                Ok((entity, values))
            })
            .collect()
    }
}
