//! The Kafka RecordBatch v2 header: parsing, validation, and the validated batch the log
//! appends.
//!
//! The layout is `weir_codec::layout`'s. The CRC-32C covers `attributes` onward, so the broker
//! patches base offset and leader epoch without recomputing it: everything else is stored
//! exactly as the producer sent it.

use weir_codec::compression::Levels;
use weir_codec::encode::{put_record, seal};
pub use weir_codec::header::{BatchHeader, ProducerFields};
use weir_codec::layout::{
    put_i32_at, put_i64_at, put_u32_at, ATTRIBUTES_AT, ATTR_CONTROL, ATTR_TRANSACTIONAL,
    BASE_OFFSET_AT, CRC_AT, MAX_TIMESTAMP_AT, PARTITION_LEADER_EPOCH_AT,
};
pub use weir_codec::layout::{
    ATTR_COMPRESSION_MASK, ATTR_LOG_APPEND_TIME, BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES, MAGIC_V2,
    NO_PRODUCER_ID, NO_SEQUENCE,
};
use weir_codec::records::RecordsError;
use weir_codec::varint::{next_in, read_varint, read_varlong, VarintError};

/// Bytes at the start of a batch the broker may rewrite: baseOffset and partitionLeaderEpoch
/// always, and — only when the producer understated it, as Kafka does — maxTimestamp with the
/// CRC. Everything after them is stored exactly as sent.
pub const PATCHED_HEAD_BYTES: usize = weir_codec::layout::PRODUCER_ID_AT;

/// Why a batch was refused; each kind maps to one Kafka error code at the handler boundary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// The bytes are damaged: CRC mismatch, a length that disagrees with the bytes given, or a
    /// compressed payload that does not decompress (Kafka's CORRUPT_MESSAGE).
    #[error("corrupt record batch: {0}")]
    Corrupt(String),
    /// Intact bytes that break the format's rules: counts, offsets, record framing, codec,
    /// flags (Kafka's INVALID_RECORD).
    #[error("invalid record batch: {0}")]
    Invalid(String),
    /// A record timestamp outside the topic's accepted window (Kafka's INVALID_TIMESTAMP):
    /// the first problem, and each offending record as Kafka lists them in `record_errors`.
    #[error("invalid timestamp: {message}")]
    Timestamp {
        /// The first problem, for logs and the partition's error message.
        message: String,
        /// Each offending record (the first [`RECORD_ERRORS_MAX`]).
        records: Vec<RecordError>,
    },
}

impl From<RecordsError> for BatchError {
    fn from(error: RecordsError) -> BatchError {
        match error {
            RecordsError::Corrupt(reason) => BatchError::Corrupt(reason),
            RecordsError::Invalid(reason) => BatchError::Invalid(reason),
        }
    }
}

impl From<VarintError> for BatchError {
    fn from(error: VarintError) -> BatchError {
        BatchError::Invalid(error.to_string())
    }
}

/// Most per-record errors one refused batch reports (a batch may hold millions of records).
pub const RECORD_ERRORS_MAX: usize = 1000;

/// Why one record of a refused batch is refused, by its index in the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    /// The record's position in its batch (its offset delta).
    pub index: i32,
    /// Kafka's wording of the problem.
    pub message: String,
}

impl BatchError {
    /// A timestamp problem of the batch as a whole (no record to blame).
    pub fn timestamp(message: impl Into<String>) -> BatchError {
        BatchError::Timestamp {
            message: message.into(),
            records: Vec::new(),
        }
    }
}

pub(crate) fn invalid(message: impl Into<String>) -> BatchError {
    BatchError::Invalid(message.into())
}

/// Checks that `bytes` is exactly one well-formed v2 batch as a producer sends it: length,
/// magic, CRC-32C, and a record count that agrees with `lastOffsetDelta`. Records are not
/// looked at.
pub fn validate_header(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = validate_framing(bytes)?;
    check_header_fields(&header)?;
    Ok(header)
}

/// Like [`validate_header`] for a batch as stored: compaction may have removed records, so
/// the record count may be below `lastOffsetDelta + 1`.
pub fn validate_stored_header(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = validate_framing(bytes)?;
    check_stored_header_fields(&header)?;
    Ok(header)
}

/// Length, magic and CRC-32C of exactly one batch.
fn validate_framing(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    let Some(header) = BatchHeader::parse(bytes) else {
        return Err(BatchError::Corrupt(format!(
            "{} bytes is shorter than a batch header",
            bytes.len()
        )));
    };
    if header.batch_length < (BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32 {
        return Err(BatchError::Corrupt(format!(
            "batchLength {} is shorter than a batch header",
            header.batch_length
        )));
    }
    if header.total_bytes() != bytes.len() as u64 {
        return Err(invalid(format!(
            "batchLength {} does not match the {} bytes given: send exactly one record batch per partition",
            header.batch_length,
            bytes.len() - LOG_OVERHEAD_BYTES.min(bytes.len())
        )));
    }
    if header.magic != MAGIC_V2 {
        return Err(invalid(format!(
            "record batch magic {} is not supported; only magic 2 is",
            header.magic
        )));
    }
    if batch_crc(bytes) != header.crc {
        return Err(BatchError::Corrupt("CRC-32C mismatch".into()));
    }
    Ok(header)
}

/// The header fields that must agree with each other: magic, and a positive record count that
/// matches `lastOffsetDelta`.
pub fn check_header_fields(header: &BatchHeader) -> Result<(), BatchError> {
    if header.magic != MAGIC_V2 {
        return Err(invalid(format!(
            "record batch magic {} is not 2",
            header.magic
        )));
    }
    if header.record_count <= 0 {
        return Err(invalid(format!(
            "record count {} must be positive",
            header.record_count
        )));
    }
    if header.last_offset_delta != header.record_count - 1 {
        return Err(invalid(format!(
            "lastOffsetDelta {} disagrees with record count {}",
            header.last_offset_delta, header.record_count
        )));
    }
    Ok(())
}

/// The header fields of a stored batch that must agree: magic, a positive record count, and
/// no more records than its offset span (`lastOffsetDelta + 1`) holds.
pub fn check_stored_header_fields(header: &BatchHeader) -> Result<(), BatchError> {
    if header.magic != MAGIC_V2 || header.record_count <= 0 {
        return Err(invalid(format!(
            "stored batch with magic {} and {} records",
            header.magic, header.record_count
        )));
    }
    if header.last_offset_delta < header.record_count - 1 {
        return Err(invalid(format!(
            "lastOffsetDelta {} is below record count {} - 1",
            header.last_offset_delta, header.record_count
        )));
    }
    Ok(())
}

/// The first [`PATCHED_HEAD_BYTES`] of `batch` with the broker-assigned base offset and leader
/// epoch written in (the CRC does not cover them). When the header's maxTimestamp differs from
/// `max_timestamp` — franz-go writes the last record's, which is smaller when timestamps go
/// backwards, and a LogAppendTime topic stamps the append time — it is rewritten and the CRC
/// recomputed, as Kafka does, so stored headers can be trusted by retention and lookups; with
/// `log_append_time` the timestamp-type attribute is set too. The rest of the batch follows
/// unchanged.
pub fn patched_head(
    batch: &[u8],
    base_offset: i64,
    partition_leader_epoch: i32,
    max_timestamp: i64,
    log_append_time: bool,
) -> [u8; PATCHED_HEAD_BYTES] {
    let mut head = [0u8; PATCHED_HEAD_BYTES];
    head.copy_from_slice(&batch[..PATCHED_HEAD_BYTES]);
    put_i64_at(&mut head, BASE_OFFSET_AT, base_offset);
    put_i32_at(&mut head, PARTITION_LEADER_EPOCH_AT, partition_leader_epoch);
    let attributes = i16::from_be_bytes([head[ATTRIBUTES_AT], head[ATTRIBUTES_AT + 1]]);
    let stamped = attributes | ATTR_LOG_APPEND_TIME;
    let restamp = log_append_time && stamped != attributes;
    if restamp {
        head[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&stamped.to_be_bytes());
    }
    let claimed = &mut head[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8];
    if claimed != max_timestamp.to_be_bytes() || restamp {
        claimed.copy_from_slice(&max_timestamp.to_be_bytes());
        let crc = crc32c::crc32c_append(
            crc32c::crc32c(&head[ATTRIBUTES_AT..]),
            &batch[PATCHED_HEAD_BYTES..],
        );
        put_u32_at(&mut head, CRC_AT, crc);
    }
    head
}

/// The CRC a batch must carry; used to build batches in tests and tools.
pub use weir_codec::encode::crc as batch_crc;

/// One record to build: key and value, either may be null.
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Builds a valid uncompressed v2 batch of `values`, for tests and tools that need real bytes.
pub fn build_batch(values: &[&[u8]], base_timestamp: i64, producer: ProducerFields) -> Vec<u8> {
    let records: Vec<KeyValue<'_>> = values.iter().map(|value| (None, Some(*value))).collect();
    build_keyed_batch(&records, base_timestamp, producer)
}

/// Builds a valid uncompressed v2 batch of `(key, value)` records (a `None` value is a
/// tombstone): what the broker writes to its internal topics.
pub fn build_keyed_batch(
    records: &[KeyValue<'_>],
    base_timestamp: i64,
    producer: ProducerFields,
) -> Vec<u8> {
    keyed_batch(records, base_timestamp, producer, 0)
}

/// [`build_keyed_batch`] as a batch of `producer`'s open transaction (a coordinator's
/// TxnOffsetCommit write).
pub fn build_transactional_batch(
    records: &[KeyValue<'_>],
    base_timestamp: i64,
    producer: ProducerFields,
) -> Vec<u8> {
    keyed_batch(records, base_timestamp, producer, ATTR_TRANSACTIONAL)
}

fn keyed_batch(
    records: &[KeyValue<'_>],
    base_timestamp: i64,
    producer: ProducerFields,
    attributes: i16,
) -> Vec<u8> {
    let mut encoded = Vec::new();
    for (i, (key, value)) in records.iter().enumerate() {
        put_record(&mut encoded, i as i32, 0, *key, *value, std::iter::empty());
    }
    let count = records.len() as i32;
    let header = BatchHeader::new(count, attributes, base_timestamp, base_timestamp, producer);
    seal(&header, &encoded, Levels::DEFAULT)
}

/// How a transaction ended on a partition: what its marker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnResult {
    /// The transaction's records are discarded (control type 0).
    Abort,
    /// The transaction's records are visible to read_committed consumers (control type 1).
    Commit,
}

impl TxnResult {
    /// A commit when `commit`, else an abort.
    pub fn of_commit(commit: bool) -> TxnResult {
        if commit {
            TxnResult::Commit
        } else {
            TxnResult::Abort
        }
    }
}

/// A transaction marker as its control record says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnMarker {
    /// How the transaction ended.
    pub result: TxnResult,
    /// The epoch of the transaction coordinator that wrote it (its leader epoch of the
    /// `__transaction_state` partition); a marker of an older coordinator is fenced.
    pub coordinator_epoch: i32,
}

/// What the marker in `batch` (a control batch, never compressed) says: its control record's
/// key is `(version, type)`, type 0 an abort and 1 a commit, and its value `(version,
/// coordinator epoch)`. `None` for another control record or a key that does not parse.
pub fn parse_marker(batch: &[u8]) -> Option<TxnMarker> {
    let records = batch.get(BATCH_HEADER_BYTES..)?;
    let mut at = 0usize;
    let next = |at: &mut usize| next_in(records, at);
    read_varint(|| next(&mut at)).ok()?; // record length
    next(&mut at).ok()?; // attributes
    read_varlong(|| next(&mut at)).ok()?; // timestamp delta
    read_varint(|| next(&mut at)).ok()?; // offset delta
    let key_length = usize::try_from(read_varint(|| next(&mut at)).ok()?).ok()?;
    let key = records.get(at..at.checked_add(key_length)?)?;
    let result = match key {
        [_, _, 0, 0] => TxnResult::Abort,
        [_, _, 0, 1] => TxnResult::Commit,
        _ => return None,
    };
    at += key_length;
    // A value that does not parse leaves the epoch unknown (-1), which fences nothing.
    let coordinator_epoch = read_varint(|| next(&mut at))
        .ok()
        .and_then(|length| usize::try_from(length).ok())
        .and_then(|length| records.get(at..at.checked_add(length)?))
        .and_then(|value| match value {
            [_, _, a, b, c, d, ..] => Some(i32::from_be_bytes([*a, *b, *c, *d])),
            _ => None,
        })
        .unwrap_or(-1);
    Some(TxnMarker {
        result,
        coordinator_epoch,
    })
}

/// A transaction marker as Kafka writes it: a transactional control batch of `producer` with
/// one record, key `(version 0, control type)` and value `(version 0, coordinator epoch)`,
/// no sequence.
pub fn build_marker(
    producer_id: i64,
    producer_epoch: i16,
    result: TxnResult,
    coordinator_epoch: i32,
    timestamp: i64,
) -> Vec<u8> {
    let control_type: i16 = match result {
        TxnResult::Abort => 0,
        TxnResult::Commit => 1,
    };
    let mut key = 0i16.to_be_bytes().to_vec();
    key.extend_from_slice(&control_type.to_be_bytes());
    let mut value = 0i16.to_be_bytes().to_vec();
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let mut encoded = Vec::new();
    put_record(
        &mut encoded,
        0,
        0,
        Some(&key),
        Some(&value),
        std::iter::empty(),
    );
    let producer = ProducerFields {
        producer_id,
        producer_epoch,
        base_sequence: NO_SEQUENCE,
    };
    let attributes = ATTR_TRANSACTIONAL | ATTR_CONTROL;
    let header = BatchHeader::new(1, attributes, timestamp, timestamp, producer);
    seal(&header, &encoded, Levels::DEFAULT)
}

#[cfg(test)]
mod tests {
    use weir_codec::layout::{LAST_OFFSET_DELTA_AT, RECORD_COUNT_AT};

    use super::*;
    use crate::records::ValidationLimits;
    use crate::validate::validate;
    use bytes::Bytes;

    fn limits() -> ValidationLimits {
        ValidationLimits::unbounded_time(1 << 20)
    }

    #[test]
    fn built_batch_validates_and_patching_keeps_crc() {
        let batch = build_batch(&[b"a", b"bc"], 1000, ProducerFields::NONE);
        let valid = validate(Bytes::from(batch.clone()), &limits()).expect("valid");
        assert_eq!(valid.header().record_count, 2);
        assert_eq!(valid.max_timestamp(), 1000);
        let mut patched = patched_head(&batch, 42, 7, 1000, false).to_vec();
        patched.extend_from_slice(&batch[PATCHED_HEAD_BYTES..]);
        let header = validate_header(&patched).expect("still valid after patch");
        assert_eq!(header.base_offset, 42);
        assert_eq!(header.partition_leader_epoch, 7);
        assert_eq!(header.last_offset(), 43);
    }

    fn with_crc(mut batch: Vec<u8>) -> Vec<u8> {
        let crc = batch_crc(&batch);
        put_u32_at(&mut batch, CRC_AT, crc);
        batch
    }

    fn refusal(batch: Vec<u8>) -> BatchError {
        validate(Bytes::from(batch), &limits()).expect_err("refused")
    }

    #[test]
    fn header_corruptions_are_refused() {
        let batch = build_batch(&[b"value"], 5, ProducerFields::NONE);
        let mut flipped = batch.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        assert!(matches!(refusal(flipped), BatchError::Corrupt(_)));
        assert!(matches!(
            refusal(batch[..batch.len() - 1].to_vec()),
            BatchError::Invalid(_)
        ));
        assert!(matches!(
            refusal(batch[..20].to_vec()),
            BatchError::Corrupt(_)
        ));
        let mut magic = batch.clone();
        magic[16] = 1;
        assert!(matches!(refusal(magic), BatchError::Invalid(_)));
        let cases: [(usize, &[u8]); 5] = [
            (57, &0i32.to_be_bytes()),      // record count 0
            (57, &i32::MAX.to_be_bytes()),  // count claims 2^31-1, delta says 1
            (0, &5i64.to_be_bytes()),       // base offset not 0
            (21, &0x0020i16.to_be_bytes()), // control flag
            (21, &0x0007i16.to_be_bytes()), // unknown codec 7
        ];
        for (at, bytes) in cases {
            let mut bad = batch.clone();
            bad[at..at + bytes.len()].copy_from_slice(bytes);
            assert!(
                matches!(refusal(with_crc(bad)), BatchError::Invalid(_)),
                "field at {at}"
            );
        }
    }

    #[test]
    fn a_huge_claimed_span_with_no_records_is_refused() {
        // The 61-byte batch that once advanced the log end offset by 2^31: count and delta agree
        // but no record follows.
        let mut batch = build_batch(&[], 0, ProducerFields::NONE);
        put_i32_at(&mut batch, LAST_OFFSET_DELTA_AT, i32::MAX - 1);
        put_i32_at(&mut batch, RECORD_COUNT_AT, i32::MAX);
        assert_eq!(batch.len(), BATCH_HEADER_BYTES);
        assert!(matches!(refusal(with_crc(batch)), BatchError::Invalid(_)));
    }

    #[test]
    fn an_understated_max_timestamp_is_corrected_with_a_valid_crc() {
        let mut batch = build_batch(&[b"a"], 5000, ProducerFields::NONE);
        batch[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&10i64.to_be_bytes());
        let batch = with_crc(batch);
        let valid = validate(Bytes::from(batch.clone()), &limits()).expect("valid");
        assert_eq!(
            valid.max_timestamp(),
            5000,
            "from the records, not the header"
        );
        let mut stored = patched_head(&batch, 0, 0, valid.max_timestamp(), false).to_vec();
        stored.extend_from_slice(&batch[PATCHED_HEAD_BYTES..]);
        let header = validate_header(&stored).expect("the corrected batch keeps a valid CRC");
        assert_eq!(header.max_timestamp, 5000);
    }

    #[test]
    fn log_append_time_stamps_the_batch_with_a_valid_crc() {
        // Out of any CreateTime window, yet accepted: the broker's clock is what counts.
        let batch = build_batch(&[b"a", b"b"], 1, ProducerFields::NONE);
        let limits = ValidationLimits {
            now_ms: 1_700_000_000_000,
            timestamp_after_max_ms: 0,
            timestamp_before_max_ms: 0,
            log_append_time: true,
            ..limits()
        };
        let valid = validate(Bytes::from(batch.clone()), &limits).expect("valid");
        assert!(valid.log_append_time());
        assert_eq!(valid.max_timestamp(), 1_700_000_000_000);
        let mut stored = patched_head(&batch, 9, 2, valid.max_timestamp(), true).to_vec();
        stored.extend_from_slice(&batch[PATCHED_HEAD_BYTES..]);
        let header = validate_header(&stored).expect("the stamped batch keeps a valid CRC");
        assert!(header.is_log_append_time());
        assert_eq!(header.max_timestamp, 1_700_000_000_000);
        assert_eq!(
            header.base_timestamp, 1,
            "the producer's base timestamp stays"
        );
    }

    #[test]
    fn last_sequence_wraps() {
        let mut header = BatchHeader::parse(&build_batch(&[b"x", b"y"], 0, ProducerFields::NONE))
            .expect("parse");
        header.base_sequence = i32::MAX;
        assert_eq!(header.last_sequence(), 0);
    }
}
