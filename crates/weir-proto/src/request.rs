//! Request decoding: header, API key and version checks, body.

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use kafka_protocol::protocol::Decodable;

use crate::api::supported_versions;

/// A decoded request.
#[derive(Debug)]
pub struct Request {
    /// The request header (correlation id, client id).
    pub header: RequestHeader,
    /// The API called.
    pub api_key: ApiKey,
    /// The version it was called at.
    pub version: i16,
    /// The decoded body.
    pub body: RequestKind,
}

/// Why a frame is not a request Weir can serve.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Too short for a header, or an API key Kafka does not define.
    #[error("malformed request header")]
    MalformedHeader,
    /// A known API that Weir does not implement.
    #[error("unsupported API {0:?}")]
    UnsupportedApi(ApiKey),
    /// ApiVersions at a version above Weir's: the client must be told in the v0 layout.
    #[error("ApiVersions version {version} not supported")]
    UnsupportedApiVersionsVersion {
        /// The correlation id to answer with.
        correlation_id: i32,
        /// The version the client tried.
        version: i16,
    },
    /// Another API at a version outside Weir's range.
    #[error("{api_key:?} version {version} not supported")]
    UnsupportedVersion {
        /// The API.
        api_key: ApiKey,
        /// The version the client tried.
        version: i16,
    },
    /// The body does not decode at the stated version.
    #[error("malformed {api_key:?} v{version} request: {reason}")]
    MalformedBody {
        /// The API.
        api_key: ApiKey,
        /// The stated version.
        version: i16,
        /// What the decoder reported.
        reason: String,
    },
}

/// Decodes one frame into a request Weir supports.
pub fn decode_request(mut frame: Bytes) -> Result<Request, DecodeError> {
    if frame.len() < 8 {
        return Err(DecodeError::MalformedHeader);
    }
    let api_key = ApiKey::try_from(i16::from_be_bytes([frame[0], frame[1]]))
        .map_err(|_| DecodeError::MalformedHeader)?;
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let Some(range) = supported_versions(api_key) else {
        return Err(DecodeError::UnsupportedApi(api_key));
    };
    if version < range.min || version > range.max {
        return Err(if api_key == ApiKey::ApiVersions {
            DecodeError::UnsupportedApiVersionsVersion {
                correlation_id,
                version,
            }
        } else {
            DecodeError::UnsupportedVersion { api_key, version }
        });
    }
    let header_version = api_key.request_header_version(version);
    let header = RequestHeader::decode(&mut frame, header_version)
        .map_err(|_| DecodeError::MalformedHeader)?;
    let body = RequestKind::decode(api_key, &mut frame, version).map_err(|e| {
        DecodeError::MalformedBody {
            api_key,
            version,
            reason: e.to_string(),
        }
    })?;
    // Trailing bytes are ignored, as Kafka does: librdkafka sends a few after Metadata v12.
    Ok(Request {
        header,
        api_key,
        version,
        body,
    })
}
