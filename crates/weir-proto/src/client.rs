//! The client side of the wire: request frames out, response frames in.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// A request or response that could not be encoded or decoded at the chosen version.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct CodecError {
    what: &'static str,
    reason: String,
}

/// Encodes a complete request frame (length prefix, header, body).
pub fn encode_request<Req: Encodable>(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &str,
    body: &Req,
) -> Result<Bytes, CodecError> {
    let mut header = RequestHeader::default();
    header.request_api_key = api_key as i16;
    header.request_api_version = version;
    header.correlation_id = correlation_id;
    header.client_id = Some(StrBytes::from_string(client_id.to_string()));
    let mut buf = BytesMut::with_capacity(128);
    buf.put_i32(0);
    header
        .encode(&mut buf, api_key.request_header_version(version))
        .map_err(|e| CodecError {
            what: "request header",
            reason: e.to_string(),
        })?;
    body.encode(&mut buf, version).map_err(|e| CodecError {
        what: "request body",
        reason: e.to_string(),
    })?;
    let length = (buf.len() - 4) as i32;
    buf[0..4].copy_from_slice(&length.to_be_bytes());
    Ok(buf.freeze())
}

/// The correlation id at the start of a response frame.
pub fn response_correlation_id(frame: &[u8]) -> Option<i32> {
    Some(i32::from_be_bytes(frame.get(0..4)?.try_into().ok()?))
}

/// Decodes a response frame's header and body at `version`.
pub fn decode_response<Resp: Decodable>(
    api_key: ApiKey,
    version: i16,
    mut frame: Bytes,
) -> Result<Resp, CodecError> {
    ResponseHeader::decode(&mut frame, api_key.response_header_version(version)).map_err(|e| {
        CodecError {
            what: "response header",
            reason: e.to_string(),
        }
    })?;
    Resp::decode(&mut frame, version).map_err(|e| CodecError {
        what: "response body",
        reason: e.to_string(),
    })
}
