//! Record batches (Kafka's format v2) built and read by the client itself, so that repeated
//! header keys survive (Kafka allows them; a map would collapse them). The header, varints and
//! compression are `weir-codec`'s, as the broker's log uses them.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::records::Compression;
use weir_codec::compression::{compress, decompress_all, Levels, CODEC_NONE};
use weir_codec::header::BatchHeader;
use weir_codec::layout::{
    put_i16_at, put_i32_at, put_i64_at, put_u32_at, ATTRIBUTES_AT, BASE_SEQUENCE_AT,
    BATCH_HEADER_BYTES, BATCH_LENGTH_AT, CRC_AT, LOG_OVERHEAD_BYTES, MAGIC_V2, PRODUCER_EPOCH_AT,
    PRODUCER_ID_AT,
};
use weir_codec::varint::{put_varlong, read_varlong, VarintError};

use crate::error::{ClientError, Result};

/// Records larger than this after decompression are treated as corrupt, not allocated.
const RECORD_BYTES_MAX: usize = 256 * 1024 * 1024;

/// One record to be written.
#[derive(Debug, Clone)]
pub struct OutgoingRecord {
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
    /// Headers in order; names may repeat.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Timestamp (ms).
    pub timestamp: i64,
}

/// One record read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedRecord {
    /// Offset.
    pub offset: i64,
    /// Timestamp (ms).
    pub timestamp: i64,
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
    /// Headers in order.
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// Producer identity written into a batch.
#[derive(Debug, Clone, Copy)]
pub struct BatchProducer {
    /// Producer id, -1 without idempotence.
    pub producer_id: i64,
    /// Producer epoch, -1 without idempotence.
    pub producer_epoch: i16,
    /// Sequence of the first record, -1 without idempotence.
    pub base_sequence: i32,
}

fn put_bytes(buf: &mut BytesMut, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => {
            put_varlong(buf, b.len() as i64);
            buf.put_slice(b);
        }
        None => put_varlong(buf, -1),
    }
}

fn encode_records(records: &[OutgoingRecord], base_timestamp: i64) -> BytesMut {
    let mut out = BytesMut::new();
    let mut body = BytesMut::new();
    for (i, record) in records.iter().enumerate() {
        body.clear();
        body.put_i8(0);
        put_varlong(&mut body, record.timestamp - base_timestamp);
        put_varlong(&mut body, i as i64);
        put_bytes(&mut body, record.key.as_deref());
        put_bytes(&mut body, record.value.as_deref());
        put_varlong(&mut body, record.headers.len() as i64);
        for (name, value) in &record.headers {
            put_bytes(&mut body, Some(name.as_bytes()));
            put_bytes(&mut body, value.as_deref());
        }
        put_varlong(&mut out, body.len() as i64);
        out.put_slice(&body);
    }
    out
}

/// Builds one batch of `records` (at least one) with offsets 0.. and the given producer fields.
pub fn encode_batch(
    records: &[OutgoingRecord],
    producer: BatchProducer,
    compression: Compression,
) -> Result<Bytes> {
    let count = records.len();
    if count == 0 {
        return Err(ClientError::InvalidArgument(
            "a batch needs at least one record".into(),
        ));
    }
    let base_timestamp = records.iter().map(|r| r.timestamp).min().unwrap_or(0);
    let max_timestamp = records.iter().map(|r| r.timestamp).max().unwrap_or(0);
    let raw = encode_records(records, base_timestamp);
    let mut buf = BytesMut::with_capacity(BATCH_HEADER_BYTES + raw.len());
    let header = BatchHeader {
        base_offset: 0,
        batch_length: 0, // patched below
        partition_leader_epoch: -1,
        magic: MAGIC_V2,
        crc: 0, // patched below
        attributes: compression as i16,
        last_offset_delta: count as i32 - 1,
        base_timestamp,
        max_timestamp,
        producer_id: producer.producer_id,
        producer_epoch: producer.producer_epoch,
        base_sequence: producer.base_sequence,
        record_count: count as i32,
    };
    header.put(&mut buf);
    match compression {
        Compression::None => buf.put_slice(&raw),
        codec => buf.put_slice(&compress(codec as i16, &raw, Levels::DEFAULT)),
    }
    let length = (buf.len() - LOG_OVERHEAD_BYTES) as i32;
    put_i32_at(&mut buf, BATCH_LENGTH_AT, length);
    seal(&mut buf);
    Ok(buf.freeze())
}

/// Writes the CRC of a batch encoded here (it covers everything after the CRC field).
fn seal(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
    put_u32_at(batch, CRC_AT, crc);
}

/// A copy of a batch encoded by [`encode_batch`] under another producer id, epoch and base
/// sequence: what an idempotent producer sends when it retries a batch under a new producer id.
pub fn restamp_batch(encoded: &[u8], producer: BatchProducer) -> Bytes {
    let mut batch = BytesMut::from(encoded);
    put_i64_at(&mut batch, PRODUCER_ID_AT, producer.producer_id);
    put_i16_at(&mut batch, PRODUCER_EPOCH_AT, producer.producer_epoch);
    put_i32_at(&mut batch, BASE_SEQUENCE_AT, producer.base_sequence);
    seal(&mut batch);
    batch.freeze()
}

fn get_varint(buf: &mut Bytes) -> Result<i64> {
    let next = || match buf.has_remaining() {
        true => Ok(buf.get_u8()),
        false => Err(VarintError::Truncated),
    };
    read_varlong(next).map_err(|error| corrupt(&error.to_string()))
}

fn get_bytes(buf: &mut Bytes) -> Result<Option<Bytes>> {
    let length = get_varint(buf)?;
    if length < 0 {
        return Ok(None);
    }
    let length = length as usize;
    if length > buf.remaining() {
        return Err(corrupt("field longer than its record"));
    }
    Ok(Some(buf.split_to(length)))
}

fn corrupt(what: &str) -> ClientError {
    ClientError::Protocol(format!("corrupt record batch: {what}"))
}

/// Reads every record of the batches in `bytes` (a fetch's records field). A trailing partial
/// batch (a fetch may cut one) is ignored; control batches are skipped.
pub fn decode_batches(mut bytes: Bytes) -> Result<Vec<DecodedRecord>> {
    let mut records = Vec::new();
    while let Some(header) = BatchHeader::parse(&bytes) {
        let length = header.batch_length;
        if length < (BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32
            || bytes.len() < LOG_OVERHEAD_BYTES + length as usize
        {
            break;
        }
        let mut batch = bytes.split_to(LOG_OVERHEAD_BYTES + length as usize);
        batch.advance(BATCH_HEADER_BYTES);
        if header.magic != MAGIC_V2 {
            return Err(corrupt("unsupported magic"));
        }
        if header.is_control() {
            continue;
        }
        let log_append_time = header.is_log_append_time();
        let mut raw = match header.compression() {
            CODEC_NONE => batch,
            codec => decompress_all(codec, &batch, RECORD_BYTES_MAX as u64)
                .map(Bytes::from)
                .map_err(|e| corrupt(&e.to_string()))?,
        };
        for _ in 0..header.record_count.max(0) {
            let length = get_varint(&mut raw)?;
            if length < 0 || length as usize > raw.remaining() {
                return Err(corrupt("record length"));
            }
            let mut record = raw.split_to(length as usize);
            if !record.has_remaining() {
                return Err(corrupt("empty record"));
            }
            record.advance(1);
            let timestamp_delta = get_varint(&mut record)?;
            let offset_delta = get_varint(&mut record)?;
            let key = get_bytes(&mut record)?;
            let value = get_bytes(&mut record)?;
            let header_count = get_varint(&mut record)?;
            let mut headers =
                Vec::with_capacity((header_count.max(0) as usize).min(record.remaining()));
            for _ in 0..header_count.max(0) {
                let name = get_bytes(&mut record)?.ok_or_else(|| corrupt("null header name"))?;
                let value = get_bytes(&mut record)?;
                headers.push((String::from_utf8_lossy(&name).into_owned(), value));
            }
            records.push(DecodedRecord {
                offset: header.base_offset + offset_delta,
                timestamp: if log_append_time {
                    header.max_timestamp
                } else {
                    header.base_timestamp + timestamp_delta
                },
                key,
                value,
                headers,
            });
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restamped_batch_is_the_batch_encoded_under_the_new_producer() {
        let records = vec![OutgoingRecord {
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"v")),
            headers: vec![],
            timestamp: 5,
        }];
        let under = |producer_id, base_sequence| BatchProducer {
            producer_id,
            producer_epoch: 0,
            base_sequence,
        };
        for compression in [Compression::None, Compression::Lz4] {
            let first = encode_batch(&records, under(1, 40), compression).expect("encode");
            let again = encode_batch(&records, under(9, 0), compression).expect("encode");
            assert_eq!(restamp_batch(&first, under(9, 0)), again);
        }
    }

    #[test]
    fn round_trip_keeps_repeated_headers_with_every_codec() {
        let records = vec![
            OutgoingRecord {
                key: Some(Bytes::from_static(b"k")),
                value: None,
                headers: vec![
                    ("dup".into(), Some(Bytes::from_static(b"1"))),
                    ("dup".into(), Some(Bytes::from_static(b"2"))),
                    ("n".into(), None),
                ],
                timestamp: 100,
            },
            OutgoingRecord {
                key: None,
                value: Some(Bytes::from(vec![7u8; 300])),
                headers: vec![],
                timestamp: 90,
            },
        ];
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let producer = BatchProducer {
                producer_id: 5,
                producer_epoch: 0,
                base_sequence: 3,
            };
            let batch = encode_batch(&records, producer, compression).expect("encode");
            assert_eq!(
                crc32c::crc32c(&batch[ATTRIBUTES_AT..]),
                BatchHeader::parse(&batch).expect("a header").crc
            );
            let decoded = decode_batches(batch).expect("decode");
            assert_eq!(decoded.len(), 2, "{compression:?}");
            assert_eq!(decoded[0].headers, records[0].headers, "{compression:?}");
            assert_eq!((decoded[0].offset, decoded[0].timestamp), (0, 100));
            assert_eq!(
                (
                    decoded[1].offset,
                    decoded[1].timestamp,
                    decoded[1].value.clone()
                ),
                (1, 90, records[1].value.clone())
            );
        }
    }
}
