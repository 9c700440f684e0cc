//! What the log asks of a v2 batch's records, over `weir-codec`'s record walk: validation
//! before a batch is appended (every record's framing, its offset delta, its timestamp, the
//! record count), the record a ListOffsets by time names, and every record of a stored batch
//! for the readers of a topic's contents. Nothing is allocated per record, and the batch's
//! bytes are only read, never changed.

use std::ops::ControlFlow;

use weir_codec::records::{each_record, RecordsError};

pub use weir_codec::records::RecordRef;

use crate::batch::{BatchError, BatchHeader, RecordError, RECORD_ERRORS_MAX};

/// Bounds that make validation safe against hostile input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValidationLimits {
    /// Most bytes a compressed batch's records may decompress to; more is refused (a
    /// decompression bomb would otherwise cost unbounded CPU and, for raw snappy, memory).
    pub decompressed_bytes_max: u64,
    /// The broker's clock, for the timestamp window.
    pub now_ms: i64,
    /// `message.timestamp.before.max.ms`: how far in the past a record timestamp may be.
    pub timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: how far in the future a record timestamp may be.
    pub timestamp_after_max_ms: i64,
    /// Compacted topics: every record needs a key (Kafka refuses keyless ones there).
    pub keys_required: bool,
    /// `message.timestamp.type=LogAppendTime`: the broker stamps the batch with `now_ms`, so
    /// the producer's timestamps are not checked against the window.
    pub log_append_time: bool,
}

impl ValidationLimits {
    /// Limits with no timestamp window, for tests and tools.
    pub fn unbounded_time(decompressed_bytes_max: u64) -> ValidationLimits {
        ValidationLimits {
            decompressed_bytes_max,
            now_ms: 0,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: i64::MAX,
            keys_required: false,
            log_append_time: false,
        }
    }
}

/// What validation learned about the records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordsSummary {
    /// The largest record timestamp (the batch header's `maxTimestamp` is the producer's claim).
    pub max_timestamp: i64,
}

/// Kafka's CreateTime window: `message.timestamp.before.max.ms` and `.after.max.ms`. A record
/// without a timestamp (-1) is not checked. Outside the window: Weir's message and Kafka's.
fn check_timestamp(
    timestamp: i64,
    index: i32,
    limits: &ValidationLimits,
) -> Option<(String, String)> {
    if timestamp == -1 {
        return None;
    }
    let behind = limits.now_ms.saturating_sub(timestamp);
    let ours = if behind > limits.timestamp_before_max_ms {
        format!(
            "record {index} timestamp {timestamp} is more than message.timestamp.before.max.ms ({} ms) in the past",
            limits.timestamp_before_max_ms
        )
    } else if behind < 0 && behind.saturating_neg() > limits.timestamp_after_max_ms {
        format!(
            "record {index} timestamp {timestamp} is more than message.timestamp.after.max.ms ({} ms) in the future",
            limits.timestamp_after_max_ms
        )
    } else {
        return None;
    };
    let kafkas = format!(
        "Timestamp {timestamp} of message with offset {index} is out of range. The timestamp should be within [{}, {}]",
        limits.now_ms.wrapping_sub(limits.timestamp_before_max_ms),
        limits.now_ms.saturating_add(limits.timestamp_after_max_ms)
    );
    Some((ours, kafkas))
}

/// Validates every record of `batch` (whose header already passed
/// [`crate::batch::validate_header`]).
pub fn validate_records(
    batch: &[u8],
    header: &BatchHeader,
    limits: &ValidationLimits,
) -> Result<RecordsSummary, BatchError> {
    let mut max_timestamp = i64::MIN;
    let mut first_problem = None;
    let mut out_of_range = Vec::new();
    each_record::<false, true, _>(
        batch,
        header,
        limits.decompressed_bytes_max,
        &mut |record| {
            let checked = (!limits.log_append_time)
                .then(|| check_timestamp(record.timestamp, record.index, limits))
                .flatten();
            if let Some((ours, kafkas)) = checked {
                first_problem.get_or_insert(ours);
                if out_of_range.len() < RECORD_ERRORS_MAX {
                    out_of_range.push(RecordError {
                        index: record.index,
                        message: kafkas,
                    });
                }
            }
            if limits.keys_required && !record.keyed {
                return Err(RecordsError::Invalid(format!(
                    "record {} has no key: a compacted topic accepts only keyed records",
                    record.index
                )));
            }
            max_timestamp = max_timestamp.max(record.timestamp);
            Ok(ControlFlow::Continue(()))
        },
    )?;
    if let Some(message) = first_problem {
        return Err(BatchError::Timestamp {
            message,
            records: out_of_range,
        });
    }
    Ok(RecordsSummary { max_timestamp })
}

/// Which record [`find_record`] looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordTarget {
    /// The first record with a timestamp at or after this.
    AtOrAfter(i64),
    /// The first record carrying the batch's largest timestamp.
    Latest,
}

/// The offset and timestamp of the record `target` names in a stored batch, read as a stream
/// like validation (no record is materialized): what ListOffsets by time answers.
pub fn find_record(
    batch: &[u8],
    target: RecordTarget,
    decompressed_bytes_max: u64,
) -> Result<Option<(i64, i64)>, BatchError> {
    let header = crate::batch::validate_stored_header(batch)?;
    let mut found: Option<(i32, i64)> = None;
    // In a LogAppendTime batch every record carries the time the broker stamped.
    let stamped = header.is_log_append_time().then_some(header.max_timestamp);
    each_record::<false, false, _>(
        batch,
        &header,
        decompressed_bytes_max,
        &mut |RecordRef {
                  index, timestamp, ..
              }| {
            let timestamp = stamped.unwrap_or(timestamp);
            Ok(match target {
                RecordTarget::AtOrAfter(wanted) if timestamp >= wanted => {
                    found = Some((index, timestamp));
                    ControlFlow::Break(())
                }
                RecordTarget::AtOrAfter(_) => ControlFlow::Continue(()),
                RecordTarget::Latest => {
                    if found.is_none_or(|(_, best)| timestamp > best) {
                        found = Some((index, timestamp));
                    }
                    ControlFlow::Continue(())
                }
            })
        },
    )?;
    Ok(found.map(|(index, timestamp)| (header.base_offset + i64::from(index), timestamp)))
}

/// Hands `visit` every record of a stored batch (compacted ones included) with its offset,
/// key, value and body, decompressing as a stream (for readers of a topic's contents: the
/// group coordinator's load, the log cleaner). Nothing is allocated per record; the slices are
/// valid during the call only.
pub fn for_each_stored_record(
    batch: &[u8],
    decompressed_bytes_max: u64,
    visit: &mut dyn FnMut(i64, RecordRef<'_>),
) -> Result<(), BatchError> {
    let header = crate::batch::validate_stored_header(batch)?;
    each_record::<true, false, _>(batch, &header, decompressed_bytes_max, &mut |record| {
        visit(header.base_offset + i64::from(record.index), record);
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use bytes::Bytes;

    use super::*;
    use weir_codec::compression::{CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD};
    use weir_codec::layout::{
        put_i16_at, put_i32_at, put_u32_at, ATTRIBUTES_AT, BATCH_HEADER_BYTES, BATCH_LENGTH_AT,
        CRC_AT, LAST_OFFSET_DELTA_AT, LOG_OVERHEAD_BYTES, RECORD_COUNT_AT,
    };
    use weir_codec::varint::put_varlong;

    use crate::batch::{batch_crc, build_batch, ProducerFields};
    use crate::validate::validate;

    const LIMIT: u64 = 1 << 20;

    fn limits() -> ValidationLimits {
        ValidationLimits::unbounded_time(LIMIT)
    }

    /// A record in Kafka's layout with the given offset delta and body-length adjustment.
    fn record(offset_delta: i64, value: &[u8], length_lie: i64) -> Vec<u8> {
        let mut body = vec![0u8];
        put_varlong(&mut body, 0);
        put_varlong(&mut body, offset_delta);
        put_varlong(&mut body, -1);
        put_varlong(&mut body, value.len() as i64);
        body.extend_from_slice(value);
        put_varlong(&mut body, 0);
        let mut out = Vec::new();
        put_varlong(&mut out, body.len() as i64 + length_lie);
        out.extend_from_slice(&body);
        out
    }

    fn compress(codec: i16, plain: &[u8]) -> Vec<u8> {
        match codec {
            CODEC_NONE => plain.to_vec(),
            CODEC_GZIP => {
                let mut e =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(plain).expect("gzip");
                e.finish().expect("gzip")
            }
            CODEC_SNAPPY => snap::raw::Encoder::new()
                .compress_vec(plain)
                .expect("snappy"),
            CODEC_LZ4 => {
                let mut e = lz4::EncoderBuilder::new().build(Vec::new()).expect("lz4");
                e.write_all(plain).expect("lz4");
                let (out, result) = e.finish();
                result.expect("lz4");
                out
            }
            CODEC_ZSTD => zstd::encode_all(plain, 3).expect("zstd"),
            _ => unreachable!("test codec"),
        }
    }

    /// A batch around `payload` (records, compressed or not) claiming `count` records.
    fn batch_of(codec: i16, payload: &[u8], count: i32, base_timestamp: i64) -> Vec<u8> {
        let mut out = build_batch(&[], base_timestamp, ProducerFields::NONE);
        out.truncate(BATCH_HEADER_BYTES);
        out.extend_from_slice(payload);
        let length = (out.len() - LOG_OVERHEAD_BYTES) as i32;
        put_i32_at(&mut out, BATCH_LENGTH_AT, length);
        put_i16_at(&mut out, ATTRIBUTES_AT, codec);
        put_i32_at(&mut out, LAST_OFFSET_DELTA_AT, count - 1);
        put_i32_at(&mut out, RECORD_COUNT_AT, count);
        let crc = batch_crc(&out);
        put_u32_at(&mut out, CRC_AT, crc);
        out
    }

    fn check(batch: Vec<u8>) -> Result<i64, BatchError> {
        validate(Bytes::from(batch), &limits()).map(|b| b.max_timestamp())
    }

    const CODECS: [i16; 5] = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD];

    #[test]
    fn every_codec_validates_good_records() {
        let plain: Vec<u8> = (0..50).flat_map(|i| record(i, &[i as u8; 30], 0)).collect();
        for codec in CODECS {
            let batch = batch_of(codec, &compress(codec, &plain), 50, 7);
            assert_eq!(check(batch), Ok(7), "codec {codec}");
        }
    }

    #[test]
    fn lying_records_are_refused_for_every_codec() {
        let good = |i: i64| record(i, b"value", 0);
        let cases: Vec<(&str, Vec<u8>, i32)> = vec![
            ("length too long", [good(0), record(1, b"v", 3)].concat(), 2),
            (
                "length too short",
                [good(0), record(1, b"value", -2)].concat(),
                2,
            ),
            (
                "offset delta skips",
                [good(0), record(2, b"v", 0)].concat(),
                2,
            ),
            ("fewer records than counted", [good(0), good(1)].concat(), 3),
            (
                "more records than counted",
                [good(0), good(1), good(2)].concat(),
                2,
            ),
            (
                "trailing garbage",
                [good(0), vec![0xff, 0xff, 0xff]].concat(),
                1,
            ),
            ("negative length", [vec![0x01], good(0)].concat(), 1),
        ];
        for codec in CODECS {
            for (what, plain, count) in &cases {
                let batch = batch_of(codec, &compress(codec, plain), *count, 0);
                assert!(
                    matches!(check(batch), Err(BatchError::Invalid(_))),
                    "{what}, codec {codec}"
                );
            }
        }
    }

    #[test]
    fn bad_codecs_and_undecodable_payloads_are_refused() {
        let plain = record(0, b"v", 0);
        for codec in [5, 6, 7] {
            assert!(matches!(
                check(batch_of(codec, &plain, 1, 0)),
                Err(BatchError::Invalid(_))
            ));
        }
        for codec in [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD] {
            // The codec flag on uncompressed bytes.
            let refused = check(batch_of(codec, &plain, 1, 0));
            assert!(
                matches!(
                    refused,
                    Err(BatchError::Corrupt(_) | BatchError::Invalid(_))
                ),
                "codec {codec}: {refused:?}"
            );
        }
    }

    #[test]
    fn decompression_bombs_stop_at_the_limit() {
        // One record whose value is 2 MiB of zeros: tiny compressed, over the 1 MiB limit.
        let plain = record(0, &vec![0u8; 2 << 20], 0);
        for codec in [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD] {
            let compressed = compress(codec, &plain);
            assert!(
                compressed.len() < 200 * 1024,
                "codec {codec} compresses zeros"
            );
            assert!(
                matches!(
                    check(batch_of(codec, &compressed, 1, 0)),
                    Err(BatchError::Invalid(_))
                ),
                "codec {codec}"
            );
        }
    }

    #[test]
    fn a_compacted_topic_refuses_records_without_a_key() {
        let keyed = crate::batch::build_keyed_batch(
            &[(Some(b"k".as_slice()), Some(b"v".as_slice()))],
            0,
            ProducerFields::NONE,
        );
        let keyless = build_batch(&[b"v"], 0, ProducerFields::NONE);
        let compacted = ValidationLimits {
            keys_required: true,
            ..limits()
        };
        assert!(validate(Bytes::from(keyed), &compacted).is_ok());
        assert!(matches!(
            validate(Bytes::from(keyless.clone()), &compacted),
            Err(BatchError::Invalid(m)) if m.contains("no key")
        ));
        assert!(validate(Bytes::from(keyless), &limits()).is_ok());
    }

    #[test]
    fn timestamps_outside_the_window_are_refused() {
        let now = 1_700_000_000_000;
        let limits = ValidationLimits {
            decompressed_bytes_max: LIMIT,
            now_ms: now,
            timestamp_before_max_ms: 1000,
            timestamp_after_max_ms: 3_600_000,
            keys_required: false,
            log_append_time: false,
        };
        let at = |ts: i64| {
            validate(
                Bytes::from(batch_of(0, &record(0, b"v", 0), 1, ts)),
                &limits,
            )
        };
        assert!(at(now).is_ok());
        assert!(at(now - 1000).is_ok());
        assert!(
            at(-1).is_ok(),
            "records without a timestamp are not checked"
        );
        assert!(matches!(at(now - 1001), Err(BatchError::Timestamp { .. })));
        assert!(at(now + 3_600_000).is_ok());
        assert!(matches!(
            at(now + 2 * 3_600_000),
            Err(BatchError::Timestamp { .. })
        ));
        assert!(matches!(at(i64::MAX), Err(BatchError::Timestamp { .. })));
    }

    #[test]
    fn max_timestamp_comes_from_the_records() {
        let mut plain = Vec::new();
        for (i, delta) in [5i64, -3, 40, 2].iter().enumerate() {
            let mut body = vec![0u8];
            put_varlong(&mut body, *delta);
            put_varlong(&mut body, i as i64);
            put_varlong(&mut body, -1);
            put_varlong(&mut body, 0);
            put_varlong(&mut body, 0);
            put_varlong(&mut plain, body.len() as i64);
            plain.extend_from_slice(&body);
        }
        assert_eq!(check(batch_of(0, &plain, 4, 1000)), Ok(1040));
    }
}
