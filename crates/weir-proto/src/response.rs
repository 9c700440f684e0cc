//! Response encoding: length prefix, response header, body.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::Encodable;

/// A response could not be encoded at the negotiated version: a handler bug (it filled a field
/// that version cannot carry). The connection is closed.
#[derive(Debug, thiserror::Error)]
#[error("response encoding failed: {0}")]
pub struct EncodeError(String);

/// Encodes a complete response frame for `api_key` at `version`.
pub fn encode_response(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> Result<Bytes, EncodeError> {
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0);
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    header
        .encode(&mut buf, api_key.response_header_version(version))
        .map_err(|e| EncodeError(e.to_string()))?;
    body.encode(&mut buf, version)
        .map_err(|e| EncodeError(e.to_string()))?;
    let length = (buf.len() - 4) as i32;
    buf[0..4].copy_from_slice(&length.to_be_bytes());
    Ok(buf.freeze())
}
