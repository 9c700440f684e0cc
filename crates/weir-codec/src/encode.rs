//! Writing v2 batches, the one encoder below the log, the client and the tools: each record
//! framed as the walk reads it ([`put_record`]), then the records sealed into a batch under a
//! header ([`seal`]): compressed with the header's codec, the batch length and CRC-32C written.

use crate::compression::{compress, Levels, CODEC_NONE};
use crate::header::BatchHeader;
use crate::layout::{
    put_i32_at, put_u32_at, ATTRIBUTES_AT, BATCH_HEADER_BYTES, BATCH_LENGTH_AT, CRC_AT,
    LOG_OVERHEAD_BYTES,
};
use crate::varint::{put_varint, put_varlong, varlong_len};

/// Appends one record to `out` as a batch holds it: its length, then attributes (none), its
/// timestamp and offset deltas, key, value and headers (names may repeat, values may be null).
pub fn put_record<'h, H>(
    out: &mut Vec<u8>,
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: H,
) where
    H: ExactSizeIterator<Item = (&'h [u8], Option<&'h [u8]>)> + Clone,
{
    let header_bytes: usize = headers
        .clone()
        .map(|(name, value)| field_len(Some(name)) + field_len(value))
        .sum();
    let body = 1
        + varlong_len(timestamp_delta)
        + varlong_len(i64::from(offset_delta))
        + field_len(key)
        + field_len(value)
        + varlong_len(headers.len() as i64)
        + header_bytes;
    out.reserve(varlong_len(body as i64) + body);
    put_varlong(out, body as i64);
    out.push(0);
    put_varlong(out, timestamp_delta);
    put_varint(out, offset_delta);
    put_field(out, key);
    put_field(out, value);
    put_varlong(out, headers.len() as i64);
    for (name, value) in headers {
        put_field(out, Some(name));
        put_field(out, value);
    }
}

/// Appends a record whose body is already encoded (a walked record's `raw` bytes), framed
/// with its length as a batch holds it.
pub fn put_framed(out: &mut Vec<u8>, body: &[u8]) {
    put_field(out, Some(body));
}

/// Bytes a nullable length-prefixed field takes.
fn field_len(field: Option<&[u8]>) -> usize {
    field.map_or(1, |bytes| varlong_len(bytes.len() as i64) + bytes.len())
}

fn put_field(out: &mut Vec<u8>, field: Option<&[u8]>) {
    match field {
        Some(bytes) => {
            put_varlong(out, bytes.len() as i64);
            out.extend_from_slice(bytes);
        }
        None => put_varlong(out, -1),
    }
}

/// The batch of `records` (framed by [`put_record`], uncompressed) under `header`: the records
/// compressed with the header's codec at `levels`, after the header with the batch's length
/// and CRC-32C (the header's own are not used).
pub fn seal(header: &BatchHeader, records: &[u8], levels: Levels) -> Vec<u8> {
    let codec = header.compression();
    let compressed;
    let payload = if codec == CODEC_NONE {
        records
    } else {
        compressed = compress(codec, records, levels);
        &compressed
    };
    let mut out = Vec::with_capacity(BATCH_HEADER_BYTES + payload.len());
    header.put(&mut out);
    out.extend_from_slice(payload);
    let length = (out.len() - LOG_OVERHEAD_BYTES) as i32;
    put_i32_at(&mut out, BATCH_LENGTH_AT, length);
    write_crc(&mut out);
    out
}

/// The CRC-32C a batch carries: over everything from its attributes on.
pub fn crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[ATTRIBUTES_AT..])
}

/// Writes `batch`'s CRC-32C, after a field it covers was written.
pub fn write_crc(batch: &mut [u8]) {
    let crc = crc(batch);
    put_u32_at(batch, CRC_AT, crc);
}
