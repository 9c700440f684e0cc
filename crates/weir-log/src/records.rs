//! Record-level validation of a v2 batch, before it is appended: every record's framing, its
//! offset delta, its timestamp, and the record count, decompressing compressed batches as a
//! stream through a small buffer. Nothing is allocated per record, and the batch's bytes are
//! only read, never changed.
//!
//! Record layout (varints are zigzag): length varint | attributes i8 | timestampDelta varlong |
//! offsetDelta varint | keyLength varint | key | valueLength varint | value | headerCount varint
//! | per header: keyLength varint | key | valueLength varint | value.

use std::cell::RefCell;
use std::io::Read;
use std::ops::ControlFlow;

use weir_codec::compression::{decompress, DecompressError, Records};
use weir_codec::varint::{read_varint, read_varlong};

use crate::batch::{BatchError, BatchHeader, RecordError, BATCH_HEADER_BYTES, RECORD_ERRORS_MAX};

/// Compressed records are decompressed into a buffer of this size, reused per thread: four
/// lz4 blocks, so a linked-block lz4 frame decompresses without copying its history around
/// (a 64 KiB buffer halves lz4's speed), and small enough to keep validation's memory low.
const STREAM_BUFFER_BYTES: usize = 256 * 1024;
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

fn invalid(message: impl Into<String>) -> BatchError {
    BatchError::Invalid(message.into())
}

fn premature_end() -> BatchError {
    invalid("records end before the record count is reached")
}

/// A forward-only source of record bytes.
trait Source {
    fn byte(&mut self) -> Result<u8, BatchError>;
    fn skip(&mut self, n: u64) -> Result<(), BatchError>;
    /// Appends the next `n` bytes to `out` (growing with the bytes actually read, so a lying
    /// length allocates nothing it cannot fill).
    fn read_into(&mut self, n: u64, out: &mut Vec<u8>) -> Result<(), BatchError>;
    /// Bytes consumed so far.
    fn consumed(&self) -> u64;
    /// True when no byte remains.
    fn at_end(&mut self) -> Result<bool, BatchError>;
}

/// Uncompressed records, read in place.
struct SliceSource<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl Source for SliceSource<'_> {
    #[inline]
    fn byte(&mut self) -> Result<u8, BatchError> {
        let b = *self.bytes.get(self.position).ok_or_else(premature_end)?;
        self.position += 1;
        Ok(b)
    }

    #[inline]
    fn skip(&mut self, n: u64) -> Result<(), BatchError> {
        let left = (self.bytes.len() - self.position) as u64;
        if n > left {
            return Err(premature_end());
        }
        self.position += n as usize;
        Ok(())
    }

    fn read_into(&mut self, n: u64, out: &mut Vec<u8>) -> Result<(), BatchError> {
        let start = self.position;
        self.skip(n)?;
        out.extend_from_slice(&self.bytes[start..self.position]);
        Ok(())
    }

    fn consumed(&self) -> u64 {
        self.position as u64
    }

    fn at_end(&mut self) -> Result<bool, BatchError> {
        Ok(self.position == self.bytes.len())
    }
}

thread_local! {
    /// The decompression buffer of this thread, taken by a [`StreamSource`] and given back.
    static STREAM_BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Decompressed records, pulled through a fixed buffer from a decoder.
struct StreamSource<R> {
    reader: R,
    buffer: Vec<u8>,
    start: usize,
    end: usize,
    consumed: u64,
    /// Bytes pulled from the decoder so far, checked against `limit`.
    pulled: u64,
    limit: u64,
}

impl<R: Read> StreamSource<R> {
    fn new(reader: R, limit: u64) -> StreamSource<R> {
        let mut buffer = STREAM_BUFFER.with(|b| std::mem::take(&mut *b.borrow_mut()));
        buffer.resize(STREAM_BUFFER_BYTES, 0);
        StreamSource {
            reader,
            buffer,
            start: 0,
            end: 0,
            consumed: 0,
            pulled: 0,
            limit,
        }
    }

    /// Refills the buffer; false at the end of the stream.
    fn fill(&mut self) -> Result<bool, BatchError> {
        loop {
            match self.reader.read(&mut self.buffer) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.pulled += n as u64;
                    if self.pulled > self.limit {
                        return Err(invalid(format!(
                            "records decompress to more than {} bytes",
                            self.limit
                        )));
                    }
                    self.start = 0;
                    self.end = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(BatchError::Corrupt(format!(
                        "compressed records do not decompress: {e}"
                    )))
                }
            }
        }
    }
}

impl<R> Drop for StreamSource<R> {
    fn drop(&mut self) {
        let buffer = std::mem::take(&mut self.buffer);
        STREAM_BUFFER.with(|b| *b.borrow_mut() = buffer);
    }
}

impl<R: Read> Source for StreamSource<R> {
    #[inline]
    fn byte(&mut self) -> Result<u8, BatchError> {
        if self.start == self.end && !self.fill()? {
            return Err(premature_end());
        }
        let b = self.buffer[self.start];
        self.start += 1;
        self.consumed += 1;
        Ok(b)
    }

    fn skip(&mut self, mut n: u64) -> Result<(), BatchError> {
        while n > 0 {
            if self.start == self.end && !self.fill()? {
                return Err(premature_end());
            }
            let take = ((self.end - self.start) as u64).min(n);
            self.start += take as usize;
            self.consumed += take;
            n -= take;
        }
        Ok(())
    }

    fn read_into(&mut self, mut n: u64, out: &mut Vec<u8>) -> Result<(), BatchError> {
        while n > 0 {
            if self.start == self.end && !self.fill()? {
                return Err(premature_end());
            }
            let take = ((self.end - self.start) as u64).min(n) as usize;
            out.extend_from_slice(&self.buffer[self.start..self.start + take]);
            self.start += take;
            self.consumed += take as u64;
            n -= take as u64;
        }
        Ok(())
    }

    fn consumed(&self) -> u64 {
        self.consumed
    }

    fn at_end(&mut self) -> Result<bool, BatchError> {
        Ok(self.start == self.end && !self.fill()?)
    }
}

/// A zigzag varint of at most 5 bytes, as Kafka reads it.
#[inline]
fn varint(source: &mut impl Source) -> Result<i32, BatchError> {
    read_varint(|| source.byte())
}

/// A zigzag varlong of at most 10 bytes.
#[inline]
fn varlong(source: &mut impl Source) -> Result<i64, BatchError> {
    read_varlong(|| source.byte())
}

/// Skips a length-prefixed field; `-1` (null) is allowed only where `nullable`.
#[inline]
fn skip_field(source: &mut impl Source, nullable: bool, what: &str) -> Result<(), BatchError> {
    let length = varint(source)?;
    match length {
        0.. => source.skip(length as u64),
        -1 if nullable => Ok(()),
        _ => Err(invalid(format!("{what} length {length} is invalid"))),
    }
}

/// A nullable length-prefixed field: where its bytes start (as counted by
/// [`Source::consumed`]) and how many there are; `None` when null.
fn field_range(source: &mut impl Source, what: &str) -> Result<Option<(u64, u64)>, BatchError> {
    let length = varint(source)?;
    match length {
        0.. => {
            let at = source.consumed();
            source.skip(length as u64)?;
            Ok(Some((at, length as u64)))
        }
        -1 => Ok(None),
        _ => Err(invalid(format!("{what} length {length} is invalid"))),
    }
}

/// One record as the walk hands it over: its offset delta, its timestamp, and — when the walk
/// was asked to read them — its key, value and whole body (`None` when null or not read).
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    /// Offset delta from the batch's base offset (its index in a batch as produced; larger
    /// once compaction removed earlier records).
    pub index: i32,
    /// Absolute timestamp.
    pub timestamp: i64,
    /// The key.
    pub key: Option<&'a [u8]>,
    /// The value.
    pub value: Option<&'a [u8]>,
    /// The record's bytes after its length prefix, as stored.
    pub raw: Option<&'a [u8]>,
    /// The record has a key (known whether or not the key was read).
    pub keyed: bool,
}

/// The fields of one record body.
struct RecordFields {
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<(u64, u64)>,
    value: Option<(u64, u64)>,
}

/// Reads a record body of `length` bytes: every field's framing, and nothing more or less.
fn record_fields(
    source: &mut impl Source,
    index: i32,
    length: i32,
) -> Result<RecordFields, BatchError> {
    let start = source.consumed();
    let _attributes = source.byte()?;
    let timestamp_delta = varlong(source)?;
    let offset_delta = varint(source)?;
    let key = field_range(source, "key")?;
    let value = field_range(source, "value")?;
    let header_count = varint(source)?;
    if header_count < 0 {
        return Err(invalid(format!(
            "record {index} has {header_count} headers"
        )));
    }
    for _ in 0..header_count {
        skip_field(source, false, "header key")?;
        skip_field(source, true, "header value")?;
        // A lying header count is caught here, not after billions of iterations.
        if source.consumed() - start > length as u64 {
            break;
        }
    }
    let read = source.consumed() - start;
    if read != length as u64 {
        return Err(invalid(format!(
            "record {index} declares {length} bytes but holds {read}"
        )));
    }
    Ok(RecordFields {
        timestamp_delta,
        offset_delta,
        key,
        value,
    })
}

/// Walks the records, checking each one's framing and handing `visit` each record (with key,
/// value and body when `KEYS_AND_VALUES`); stops early when `visit` breaks, else checks that
/// nothing follows the last record. A batch as `PRODUCED` numbers its records 0, 1, 2, …; a
/// stored one may have gaps (compaction) but its offset deltas increase and stay within the
/// header's `lastOffsetDelta`.
fn walk_records<const KEYS_AND_VALUES: bool, const PRODUCED: bool, V>(
    source: &mut impl Source,
    header: &BatchHeader,
    visit: &mut V,
) -> Result<(), BatchError>
where
    V: FnMut(RecordRef<'_>) -> Result<ControlFlow<()>, BatchError>,
{
    let mut body = Vec::new();
    let mut previous_delta = -1;
    for index in 0..header.record_count {
        let length = varint(source)?;
        if length < 0 {
            return Err(invalid(format!("record {index} has length {length}")));
        }
        let fields = if KEYS_AND_VALUES {
            body.clear();
            source.read_into(length as u64, &mut body)?;
            record_fields(
                &mut SliceSource {
                    bytes: &body,
                    position: 0,
                },
                index,
                length,
            )?
        } else {
            record_fields(source, index, length)?
        };
        let delta = fields.offset_delta;
        let in_order = match PRODUCED {
            true => delta == index,
            false => delta > previous_delta && delta <= header.last_offset_delta,
        };
        if !in_order {
            return Err(invalid(format!("record {index} has offset delta {delta}")));
        }
        previous_delta = delta;
        let timestamp = header
            .base_timestamp
            .checked_add(fields.timestamp_delta)
            .ok_or_else(|| invalid(format!("record {index} timestamp overflows")))?;
        let captured = KEYS_AND_VALUES.then_some(body.as_slice());
        let slice = |range: Option<(u64, u64)>| {
            captured
                .zip(range)
                .map(|(b, (at, len))| &b[at as usize..(at + len) as usize])
        };
        let record = RecordRef {
            index: delta,
            timestamp,
            key: slice(fields.key),
            value: slice(fields.value),
            raw: captured,
            keyed: fields.key.is_some(),
        };
        if visit(record)?.is_break() {
            return Ok(());
        }
    }
    if !source.at_end()? {
        return Err(invalid(format!(
            "bytes remain after the {} records the batch declares",
            header.record_count
        )));
    }
    Ok(())
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

/// Walks every record of `batch` (whose header passed [`crate::batch::validate_header`]),
/// decompressing as a stream, no further than `limit` decompressed bytes.
fn each_record<const KEYS_AND_VALUES: bool, const PRODUCED: bool, V>(
    batch: &[u8],
    header: &BatchHeader,
    limit: u64,
    visit: &mut V,
) -> Result<(), BatchError>
where
    V: FnMut(RecordRef<'_>) -> Result<ControlFlow<()>, BatchError>,
{
    let payload = &batch[BATCH_HEADER_BYTES..];
    let records =
        decompress(header.compression(), payload, limit).map_err(|error| match error {
            DecompressError::Corrupt { .. } => BatchError::Corrupt(error.to_string()),
            DecompressError::TooLarge { .. } | DecompressError::UnknownCodec(_) => {
                invalid(error.to_string())
            }
        })?;
    match records {
        Records::Plain(bytes) => walk_records::<KEYS_AND_VALUES, PRODUCED, _>(
            &mut SliceSource { bytes, position: 0 },
            header,
            visit,
        ),
        Records::Decompressed(plain) => walk_records::<KEYS_AND_VALUES, PRODUCED, _>(
            &mut SliceSource {
                bytes: &plain,
                position: 0,
            },
            header,
            visit,
        ),
        Records::Stream(decoder) => walk_records::<KEYS_AND_VALUES, PRODUCED, _>(
            &mut StreamSource::new(decoder, limit),
            header,
            visit,
        ),
    }
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
                return Err(invalid(format!(
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
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use bytes::Bytes;

    use super::*;
    use weir_codec::compression::{CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD};
    use weir_codec::layout::{
        put_i16_at, put_i32_at, put_u32_at, ATTRIBUTES_AT, BATCH_LENGTH_AT, CRC_AT,
        LAST_OFFSET_DELTA_AT, LOG_OVERHEAD_BYTES, RECORD_COUNT_AT,
    };
    use weir_codec::varint::put_varlong;

    use crate::batch::{batch_crc, build_batch, validate, ProducerFields};

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
