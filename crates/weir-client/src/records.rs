//! Record batches (Kafka's format v2) built and read by the client itself, so that repeated
//! header keys survive (Kafka allows them; a map would collapse them), with `weir-codec`'s
//! encoder and record walk, as the broker's log uses them.

use std::ops::ControlFlow;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::Compression;
use weir_codec::compression::Levels;
use weir_codec::encode::{crc, put_record, seal, write_crc};
use weir_codec::header::{BatchHeader, ProducerFields};
use weir_codec::layout::{
    put_i16_at, put_i32_at, put_i64_at, BASE_SEQUENCE_AT, BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES,
    MAGIC_V2, PRODUCER_EPOCH_AT, PRODUCER_ID_AT,
};
use weir_codec::records::each_record;

use crate::error::{ClientError, Result};

/// Records larger than this after decompression are treated as corrupt, not allocated.
const RECORD_BYTES_MAX: u64 = 256 * 1024 * 1024;

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

/// Builds one batch of `records` (at least one) with offsets 0.. and the given producer fields.
pub fn encode_batch(
    records: &[OutgoingRecord],
    producer: ProducerFields,
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
    let mut raw = Vec::new();
    for (i, record) in records.iter().enumerate() {
        put_record(
            &mut raw,
            i as i32,
            record.timestamp - base_timestamp,
            record.key.as_deref(),
            record.value.as_deref(),
            record
                .headers
                .iter()
                .map(|(name, value)| (name.as_bytes(), value.as_deref())),
        );
    }
    let header = BatchHeader::new(
        count as i32,
        compression as i16,
        base_timestamp,
        max_timestamp,
        producer,
    );
    Ok(Bytes::from(seal(&header, &raw, Levels::DEFAULT)))
}

/// A copy of a batch encoded by [`encode_batch`] under another producer id, epoch and base
/// sequence: what an idempotent producer sends when it retries a batch under a new producer id.
pub fn restamp_batch(encoded: &[u8], producer: ProducerFields) -> Bytes {
    let mut batch = BytesMut::from(encoded);
    put_i64_at(&mut batch, PRODUCER_ID_AT, producer.producer_id);
    put_i16_at(&mut batch, PRODUCER_EPOCH_AT, producer.producer_epoch);
    put_i32_at(&mut batch, BASE_SEQUENCE_AT, producer.base_sequence);
    write_crc(&mut batch);
    batch.freeze()
}

fn corrupt(what: &str) -> ClientError {
    ClientError::Protocol(format!("corrupt record batch: {what}"))
}

/// `part` as `Bytes`: a view of `batch` when it lies inside it (uncompressed records are read
/// in place), else a copy (decompressed ones are not).
fn shared(batch: &Bytes, part: &[u8]) -> Bytes {
    let inside = batch.as_ptr_range();
    let range = part.as_ptr_range();
    if inside.start <= range.start && range.end <= inside.end {
        batch.slice_ref(part)
    } else {
        Bytes::copy_from_slice(part)
    }
}

/// What a fetch's records field holds: its records, and where the next fetch starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedBatches {
    /// Every record of the complete batches, in order; control batches left out.
    pub records: Vec<DecodedRecord>,
    /// The offset after the last complete batch, or `None` without one. A batch ends at its
    /// last offset, not its last record: records compaction removed from its end, and control
    /// batches, are passed over as Kafka's consumer passes them.
    pub next_offset: Option<i64>,
}

/// Reads every record of the batches in `bytes` (a fetch's records field) with `weir-codec`'s
/// record walk, as the broker's log reads them. A trailing partial batch (a fetch may cut one)
/// is ignored; control batches are skipped; a batch whose CRC does not match its bytes is an
/// error, as the Java consumer's `check.crcs` makes it.
pub fn decode_batches(mut bytes: Bytes) -> Result<DecodedBatches> {
    let mut records = Vec::new();
    let mut next_offset = None;
    while let Some(header) = BatchHeader::parse(&bytes) {
        let length = header.batch_length;
        if length < (BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32
            || bytes.len() < LOG_OVERHEAD_BYTES + length as usize
        {
            break;
        }
        let batch = bytes.split_to(LOG_OVERHEAD_BYTES + length as usize);
        if header.magic != MAGIC_V2 {
            return Err(corrupt("unsupported magic"));
        }
        if crc(&batch) != header.crc {
            return Err(corrupt(&format!(
                "the CRC of the batch at offset {} does not match its bytes",
                header.base_offset
            )));
        }
        next_offset = Some(header.last_offset().saturating_add(1));
        if header.is_control() {
            continue;
        }
        let stamped = header.is_log_append_time().then_some(header.max_timestamp);
        each_record::<true, false, _>(&batch, &header, RECORD_BYTES_MAX, &mut |record| {
            records.push(DecodedRecord {
                offset: header.base_offset + i64::from(record.index),
                timestamp: stamped.unwrap_or(record.timestamp),
                key: record.key.map(|key| shared(&batch, key)),
                value: record.value.map(|value| shared(&batch, value)),
                headers: record
                    .headers()
                    .map(|(name, value)| {
                        (
                            String::from_utf8_lossy(name).into_owned(),
                            value.map(|value| shared(&batch, value)),
                        )
                    })
                    .collect(),
            });
            Ok(ControlFlow::Continue(()))
        })
        .map_err(|error| corrupt(&error.to_string()))?;
    }
    Ok(DecodedBatches {
        records,
        next_offset,
    })
}

#[cfg(test)]
mod tests {
    use bytes::BufMut;
    use proptest::prelude::*;

    use super::*;

    fn bytes() -> impl Strategy<Value = Option<Bytes>> {
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300).prop_map(Bytes::from))
    }

    fn record() -> impl Strategy<Value = OutgoingRecord> {
        let header = ("[a-c]{0,3}", bytes());
        (
            bytes(),
            bytes(),
            proptest::collection::vec(header, 0..4),
            0..1_000_000i64,
        )
            .prop_map(|(key, value, headers, timestamp)| OutgoingRecord {
                key,
                value,
                headers,
                timestamp,
            })
    }

    fn compression() -> impl Strategy<Value = Compression> {
        prop_oneof![
            Just(Compression::None),
            Just(Compression::Gzip),
            Just(Compression::Snappy),
            Just(Compression::Lz4),
            Just(Compression::Zstd),
        ]
    }

    proptest! {
        /// What the client encodes, the shared record walk reads back as it was written: every
        /// key, value, header (repeated and null ones included) and timestamp, in order, batch
        /// after batch, whatever the codec; a batch cut short at the end is left for the next
        /// fetch.
        #[test]
        fn batches_read_back_as_they_were_written(
            batches in proptest::collection::vec(
                (proptest::collection::vec(record(), 1..20), compression()),
                1..4,
            ),
            cut in 1..60usize,
        ) {
            let mut fetched = BytesMut::new();
            let mut written = Vec::new();
            for (records, compression) in &batches {
                let producer = ProducerFields { producer_id: -1, producer_epoch: -1, base_sequence: -1 };
                let mut batch = BytesMut::from(&encode_batch(records, producer, *compression).expect("encode")[..]);
                // Place the batch after the ones before it, as a log would.
                put_i64_at(&mut batch, 0, written.len() as i64);
                fetched.put_slice(&batch);
                written.extend(records.iter().cloned());
            }
            let whole = fetched.clone().freeze();
            let partial_tail = BatchHeader::parse(&whole).expect("a header").total_bytes() as usize;
            fetched.put_slice(&whole[..cut.min(partial_tail - 1)]);
            let decoded = decode_batches(fetched.freeze()).expect("decode");
            prop_assert_eq!(decoded.next_offset, Some(written.len() as i64));
            let decoded = decoded.records;
            prop_assert_eq!(decoded.len(), written.len());
            for (offset, (read, record)) in decoded.iter().zip(&written).enumerate() {
                prop_assert_eq!(read.offset, offset as i64);
                prop_assert_eq!(read.timestamp, record.timestamp);
                prop_assert_eq!(&read.key, &record.key);
                prop_assert_eq!(&read.value, &record.value);
                prop_assert_eq!(&read.headers, &record.headers);
            }
        }
    }

    /// Records with distinct header names: kafka-protocol keeps headers in a map.
    fn records_with_distinct_headers() -> impl Strategy<Value = Vec<OutgoingRecord>> {
        proptest::collection::vec(
            (
                bytes(),
                bytes(),
                proptest::collection::btree_map("[a-e]{1,3}", bytes(), 0..4),
                0..1_000_000i64,
            )
                .prop_map(|(key, value, headers, timestamp)| OutgoingRecord {
                    key,
                    value,
                    headers: headers.into_iter().collect(),
                    timestamp,
                }),
            1..20,
        )
    }

    /// The same record as kafka-protocol reads and writes it.
    fn as_kafka_protocol(record: &OutgoingRecord, offset: i64) -> kafka_protocol::records::Record {
        kafka_protocol::records::Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: kafka_protocol::records::TimestampType::Creation,
            offset,
            // A batch without a producer has base sequence -1; each record's is counted on.
            sequence: (offset as i32).wrapping_sub(1),
            timestamp: record.timestamp,
            key: record.key.clone(),
            value: record.value.clone(),
            headers: record
                .headers
                .iter()
                .map(|(name, value)| (name.clone().into(), value.clone()))
                .collect(),
        }
    }

    proptest! {
        /// Against an independent codec (kafka-protocol's, which Weir does not use to read or
        /// write records): what `weir-codec` encodes it decodes, and what it encodes
        /// `weir-codec` reads, record for record, with every codec.
        #[test]
        fn batches_agree_with_kafka_protocols_codec(
            records in records_with_distinct_headers(),
            compression in compression(),
        ) {
            let producer = ProducerFields { producer_id: -1, producer_epoch: -1, base_sequence: -1 };
            let ours = encode_batch(&records, producer, compression).expect("encode");
            let expected: Vec<_> = records
                .iter()
                .enumerate()
                .map(|(i, r)| as_kafka_protocol(r, i as i64))
                .collect();
            let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut ours.clone())
                .expect("kafka-protocol reads the batch");
            prop_assert_eq!(&set.records, &expected);

            let mut theirs = BytesMut::new();
            kafka_protocol::records::RecordBatchEncoder::encode(
                &mut theirs,
                &expected,
                &kafka_protocol::records::RecordEncodeOptions { version: 2, compression },
            )
            .expect("kafka-protocol writes the batch");
            let decoded = decode_batches(theirs.freeze()).expect("the walk reads the batch").records;
            prop_assert_eq!(decoded.len(), records.len());
            for (read, record) in decoded.iter().zip(&records) {
                prop_assert_eq!(read.timestamp, record.timestamp);
                prop_assert_eq!(&read.key, &record.key);
                prop_assert_eq!(&read.value, &record.value);
                prop_assert_eq!(&read.headers, &record.headers);
            }
        }
    }

    #[test]
    fn the_next_fetch_starts_after_a_batch_whose_last_records_were_compacted_away() {
        // What the cleaner leaves of a batch of offsets 10..=12 whose last two records were
        // superseded: one record, the header's last offset still 12.
        let mut kept = Vec::new();
        put_record(&mut kept, 0, 0, Some(b"k"), Some(b"v"), std::iter::empty());
        let mut header = BatchHeader::new(1, 0, 5, 5, ProducerFields::NONE);
        header.base_offset = 10;
        header.last_offset_delta = 2;
        let compacted = Bytes::from(seal(&header, &kept, Levels::DEFAULT));
        let decoded = decode_batches(compacted).expect("decode");
        assert_eq!(decoded.records.len(), 1);
        assert_eq!(decoded.records[0].offset, 10);
        assert_eq!(decoded.next_offset, Some(13));
        assert_eq!(
            decode_batches(Bytes::new()).expect("decode").next_offset,
            None
        );
    }

    #[test]
    fn uncompressed_records_are_read_in_place_and_compressed_ones_copied() {
        let records = vec![OutgoingRecord {
            key: Some(Bytes::from_static(b"key")),
            value: Some(Bytes::from(vec![3u8; 100])),
            headers: vec![("h".into(), Some(Bytes::from_static(b"v")))],
            timestamp: 1,
        }];
        for (compression, in_place) in [(Compression::None, true), (Compression::Lz4, false)] {
            let batch = encode_batch(&records, ProducerFields::NONE, compression).expect("encode");
            let decoded = decode_batches(batch.clone()).expect("decode").records;
            assert_eq!(decoded[0].value, records[0].value);
            let value = decoded[0].value.as_ref().expect("a value");
            assert_eq!(
                batch.as_ptr_range().contains(&value.as_ptr()),
                in_place,
                "{compression:?}"
            );
        }
    }

    #[test]
    fn a_batch_whose_crc_does_not_match_is_an_error() {
        let records = vec![OutgoingRecord {
            key: None,
            value: Some(Bytes::from_static(b"value")),
            headers: vec![],
            timestamp: 1,
        }];
        let producer = ProducerFields {
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        };
        let batch = encode_batch(&records, producer, Compression::None).expect("encode");
        assert_eq!(
            decode_batches(batch.clone()).expect("decode").records.len(),
            1
        );
        let mut damaged = BytesMut::from(&batch[..]);
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        let error = decode_batches(damaged.freeze()).expect_err("a damaged batch");
        assert!(error.to_string().contains("CRC"), "{error}");
    }

    #[test]
    fn a_restamped_batch_is_the_batch_encoded_under_the_new_producer() {
        let records = vec![OutgoingRecord {
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"v")),
            headers: vec![],
            timestamp: 5,
        }];
        let under = |producer_id, base_sequence| ProducerFields {
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
            let producer = ProducerFields {
                producer_id: 5,
                producer_epoch: 0,
                base_sequence: 3,
            };
            let batch = encode_batch(&records, producer, compression).expect("encode");
            assert_eq!(
                crc(&batch),
                BatchHeader::parse(&batch).expect("a header").crc
            );
            let decoded = decode_batches(batch).expect("decode").records;
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
