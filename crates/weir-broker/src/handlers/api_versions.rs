//! ApiVersions (key 18), v0–5: what Weir serves, from `weir_proto::SUPPORTED_APIS`, and from
//! v3 the `transaction.version` feature.

use kafka_protocol::messages::api_versions_response::{FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;
use weir_proto::api::api_versions_response;

use crate::broker::Broker;

/// REBOOTSTRAP_REQUIRED (KIP-1242): the client reached a broker other than the one it meant.
const REBOOTSTRAP_REQUIRED: i16 = 129;
/// INVALID_REQUEST.
const INVALID_REQUEST: i16 = 42;

/// Kafka's rule for client software names and versions (v3+): letters, digits, '-' and '.',
/// starting and ending with a letter or digit.
fn valid_software_text(text: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    edge(text.chars().next())
        && edge(text.chars().last())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
}

/// Whether the request is well formed as Kafka checks it: from v3 the client's software name
/// and version follow [`valid_software_text`]; from v5 the cluster and node meant are named
/// together or not at all.
fn is_valid(request: &ApiVersionsRequest, version: i16) -> bool {
    let software = version < 3
        || (valid_software_text(request.client_software_name.as_str())
            && valid_software_text(request.client_software_version.as_str()));
    let intended = version < 5 || request.cluster_id.is_some() == (request.node_id.0 != -1);
    software && intended
}

/// An answer carrying only an error code, as Kafka sends for a refused ApiVersions.
fn refusal(error_code: i16) -> ApiVersionsResponse {
    let mut response = ApiVersionsResponse::default();
    response.error_code = error_code;
    response
}

/// Answers with every supported API and version range; from v5, a client that names the
/// cluster it means (and the node) and has reached another is told to rebootstrap instead,
/// as Kafka does, so a client whose addresses now lead to another cluster finds out.
pub fn handle(broker: &Broker, request: &ApiVersionsRequest, version: i16) -> ApiVersionsResponse {
    if !is_valid(request, version) {
        return refusal(INVALID_REQUEST);
    }
    let identity = &broker.identity;
    let elsewhere = version >= 5
        && request.cluster_id.as_ref().is_some_and(|cluster| {
            cluster.as_str() != identity.cluster_id || request.node_id.0 != identity.node_id
        });
    if elsewhere {
        return refusal(REBOOTSTRAP_REQUIRED);
    }
    let mut response = api_versions_response(0);
    response.finalized_features_epoch = -1;
    if version >= 3 {
        add_features(&mut response, broker.config.transaction_version);
    }
    response
}

/// Kafka's feature flag for the transaction protocol.
const TRANSACTION_VERSION: &str = "transaction.version";
/// The highest transaction protocol version Weir serves.
const TRANSACTION_VERSION_MAX: i16 = 2;
/// The epoch of the finalized features: they never change while a broker runs.
const FEATURES_EPOCH: i64 = 1;

/// The features (v3+): `transaction.version` supported up to 2 and finalized at `level`
/// (`transaction.version`; a level of 0 is not finalized, as Kafka reports it), which is what
/// makes a Kafka 4 client choose transaction protocol version 2.
fn add_features(response: &mut ApiVersionsResponse, level: i16) {
    let mut supported = SupportedFeatureKey::default();
    supported.name = StrBytes::from_static_str(TRANSACTION_VERSION);
    supported.min_version = 0;
    supported.max_version = TRANSACTION_VERSION_MAX;
    response.supported_features = vec![supported];
    response.finalized_features_epoch = FEATURES_EPOCH;
    if level > 0 {
        let mut finalized = FinalizedFeatureKey::default();
        finalized.name = StrBytes::from_static_str(TRANSACTION_VERSION);
        finalized.min_version_level = level;
        finalized.max_version_level = level;
        response.finalized_features = vec![finalized];
    }
}

#[cfg(test)]
mod tests {
    use super::valid_software_text;

    #[test]
    fn software_names_follow_kafkas_rule() {
        for good in [
            "librdkafka",
            "2.3.0",
            "kafka-python",
            "a",
            "apache-kafka-java",
        ] {
            assert!(valid_software_text(good), "{good}");
        }
        for bad in ["", "-x", "x-", "two words", "name!", ".1"] {
            assert!(!valid_software_text(bad), "{bad:?}");
        }
    }
}
