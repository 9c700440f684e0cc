//! ApiVersions (key 18), v0–4: what Weir serves, from `weir_proto::SUPPORTED_APIS`.

use kafka_protocol::messages::ApiVersionsResponse;
use weir_proto::api::api_versions_response;

/// Answers with every supported API and version range.
pub fn handle() -> ApiVersionsResponse {
    let mut response = api_versions_response(0);
    response.finalized_features_epoch = -1;
    response
}
