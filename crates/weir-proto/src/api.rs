//! The APIs Weir serves and their version ranges: exactly what ApiVersions advertises.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};

/// One supported API and its inclusive version range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRange {
    /// The API.
    pub key: ApiKey,
    /// Lowest version served.
    pub min: i16,
    /// Highest version served.
    pub max: i16,
}

const fn range(key: ApiKey, min: i16, max: i16) -> ApiRange {
    ApiRange { key, min, max }
}

/// Every API Weir implements, with the versions current clients (librdkafka 2.x, kafka-python,
/// KafkaJS, the Java client) negotiate. Adding an entry here is a promise: its handler must
/// serve every version in the range.
pub const SUPPORTED_APIS: &[ApiRange] = &[
    range(ApiKey::Produce, 3, 12),
    range(ApiKey::Fetch, 4, 16),
    range(ApiKey::ListOffsets, 1, 8),
    range(ApiKey::Metadata, 1, 12),
    range(ApiKey::ApiVersions, 0, 5),
    range(ApiKey::CreateTopics, 2, 7),
    range(ApiKey::DeleteTopics, 1, 6),
    range(ApiKey::DeleteRecords, 0, 2),
    range(ApiKey::InitProducerId, 0, 4),
    range(ApiKey::AddPartitionsToTxn, 0, 5),
    range(ApiKey::AddOffsetsToTxn, 0, 4),
    range(ApiKey::EndTxn, 0, 5),
    range(ApiKey::TxnOffsetCommit, 0, 5),
    range(ApiKey::WriteTxnMarkers, 1, 1),
    range(ApiKey::DescribeProducers, 0, 0),
    range(ApiKey::DescribeTransactions, 0, 0),
    range(ApiKey::ListTransactions, 0, 2),
    range(ApiKey::OffsetForLeaderEpoch, 2, 4),
    range(ApiKey::DescribeConfigs, 1, 4),
    range(ApiKey::AlterConfigs, 0, 2),
    range(ApiKey::CreatePartitions, 0, 3),
    range(ApiKey::IncrementalAlterConfigs, 0, 1),
    range(ApiKey::DescribeCluster, 0, 1),
    range(ApiKey::DescribeQuorum, 0, 2),
    range(ApiKey::FindCoordinator, 0, 6),
    range(ApiKey::JoinGroup, 0, 9),
    range(ApiKey::SyncGroup, 0, 5),
    range(ApiKey::Heartbeat, 0, 4),
    range(ApiKey::LeaveGroup, 0, 5),
    range(ApiKey::OffsetCommit, 2, 9),
    range(ApiKey::OffsetFetch, 1, 9),
    range(ApiKey::ListGroups, 0, 5),
    range(ApiKey::DescribeGroups, 0, 6),
    range(ApiKey::DeleteGroups, 0, 2),
    range(ApiKey::OffsetDelete, 0, 0),
    range(ApiKey::ConsumerGroupHeartbeat, 0, 1),
    range(ApiKey::ConsumerGroupDescribe, 0, 1),
    range(ApiKey::ShareGroupHeartbeat, 1, 1),
    range(ApiKey::ShareGroupDescribe, 1, 1),
    range(ApiKey::ShareFetch, 1, 1),
    range(ApiKey::ShareAcknowledge, 1, 1),
    range(ApiKey::InitializeShareGroupState, 0, 0),
    range(ApiKey::ReadShareGroupState, 0, 0),
    range(ApiKey::WriteShareGroupState, 0, 0),
    range(ApiKey::DeleteShareGroupState, 0, 0),
    range(ApiKey::ReadShareGroupStateSummary, 0, 1),
    range(ApiKey::DescribeShareGroupOffsets, 0, 1),
    range(ApiKey::DescribeLogDirs, 1, 4),
    range(ApiKey::ElectLeaders, 0, 2),
    range(ApiKey::AlterPartitionReassignments, 0, 1),
    range(ApiKey::ListPartitionReassignments, 0, 0),
    range(ApiKey::SaslHandshake, 0, 1),
    range(ApiKey::SaslAuthenticate, 0, 2),
    range(ApiKey::DescribeUserScramCredentials, 0, 0),
    range(ApiKey::AlterUserScramCredentials, 0, 0),
    range(ApiKey::AlterClientQuotas, 0, 1),
    range(ApiKey::DescribeClientQuotas, 0, 1),
    range(ApiKey::CreateAcls, 1, 3),
    range(ApiKey::DescribeAcls, 1, 3),
    range(ApiKey::DeleteAcls, 1, 3),
];

/// The version range Weir serves for `key`, if any.
pub fn supported_versions(key: ApiKey) -> Option<ApiRange> {
    SUPPORTED_APIS.iter().copied().find(|r| r.key == key)
}

/// An ApiVersions response listing [`SUPPORTED_APIS`] with the given error code.
pub fn api_versions_response(error_code: i16) -> ApiVersionsResponse {
    let mut response = ApiVersionsResponse::default();
    response.error_code = error_code;
    response.api_keys = SUPPORTED_APIS
        .iter()
        .map(|r| {
            let mut v = ApiVersion::default();
            v.api_key = r.key as i16;
            v.min_version = r.min;
            v.max_version = r.max;
            v
        })
        .collect();
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_range(key: ApiKey) -> (i16, i16) {
        let r = key.valid_versions();
        (r.min, r.max)
    }

    #[test]
    fn advertised_ranges_are_within_what_the_codec_knows() {
        for api in SUPPORTED_APIS {
            let (min, max) = crate_range(api.key);
            assert!(
                api.min >= min && api.max <= max && api.min <= api.max,
                "{:?}",
                api.key
            );
        }
    }
}
