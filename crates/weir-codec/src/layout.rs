//! The RecordBatch v2 header (big-endian), each field at a named position:
//!
//! baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32 |
//! attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 |
//! producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32 | records…
//!
//! The CRC-32C covers `attributes` onward, so a broker rewrites the base offset and the leader
//! epoch without computing it again.

/// Position of baseOffset (i64).
pub const BASE_OFFSET_AT: usize = 0;
/// Position of batchLength (i32): the bytes after it.
pub const BATCH_LENGTH_AT: usize = 8;
/// Position of partitionLeaderEpoch (i32).
pub const PARTITION_LEADER_EPOCH_AT: usize = 12;
/// Position of magic (i8).
pub const MAGIC_AT: usize = 16;
/// Position of crc (u32).
pub const CRC_AT: usize = 17;
/// Position of attributes (i16), where the CRC's coverage starts.
pub const ATTRIBUTES_AT: usize = 21;
/// Position of lastOffsetDelta (i32).
pub const LAST_OFFSET_DELTA_AT: usize = 23;
/// Position of baseTimestamp (i64).
pub const BASE_TIMESTAMP_AT: usize = 27;
/// Position of maxTimestamp (i64).
pub const MAX_TIMESTAMP_AT: usize = 35;
/// Position of producerId (i64).
pub const PRODUCER_ID_AT: usize = 43;
/// Position of producerEpoch (i16).
pub const PRODUCER_EPOCH_AT: usize = 51;
/// Position of baseSequence (i32).
pub const BASE_SEQUENCE_AT: usize = 53;
/// Position of recordCount (i32).
pub const RECORD_COUNT_AT: usize = 57;
/// Size of the fixed header; the records start here.
pub const BATCH_HEADER_BYTES: usize = 61;
/// Bytes before `batchLength`'s payload starts: baseOffset and batchLength.
pub const LOG_OVERHEAD_BYTES: usize = 12;

/// The record batch format this codec reads and writes.
pub const MAGIC_V2: i8 = 2;
/// Producer id of a batch written without idempotence.
pub const NO_PRODUCER_ID: i64 = -1;
/// Sequence of a batch written without idempotence.
pub const NO_SEQUENCE: i32 = -1;

/// Attribute bits 0–2: the compression codec.
pub const ATTR_COMPRESSION_MASK: i16 = 0x07;
/// Attribute bit 3: the timestamp type is LogAppendTime (the broker's, in maxTimestamp).
pub const ATTR_LOG_APPEND_TIME: i16 = 0x08;
/// Attribute bit 4: the batch is part of a transaction.
pub const ATTR_TRANSACTIONAL: i16 = 0x10;
/// Attribute bit 5: a control batch (transaction markers).
pub const ATTR_CONTROL: i16 = 0x20;

/// Writes `value` big-endian at `at` of `batch`.
///
/// # Panics
/// When `batch` is shorter than `at` plus the value's size: positions are the header's, so
/// callers write only into a header they sized.
pub fn put_i16_at(batch: &mut [u8], at: usize, value: i16) {
    batch[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

/// Writes `value` big-endian at `at` of `batch` (see [`put_i16_at`]).
pub fn put_i32_at(batch: &mut [u8], at: usize, value: i32) {
    batch[at..at + 4].copy_from_slice(&value.to_be_bytes());
}

/// Writes `value` big-endian at `at` of `batch` (see [`put_i16_at`]).
pub fn put_u32_at(batch: &mut [u8], at: usize, value: u32) {
    batch[at..at + 4].copy_from_slice(&value.to_be_bytes());
}

/// Writes `value` big-endian at `at` of `batch` (see [`put_i16_at`]).
pub fn put_i64_at(batch: &mut [u8], at: usize, value: i64) {
    batch[at..at + 8].copy_from_slice(&value.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_field_follows_the_one_before() {
        let fields = [
            (BASE_OFFSET_AT, 8),
            (BATCH_LENGTH_AT, 4),
            (PARTITION_LEADER_EPOCH_AT, 4),
            (MAGIC_AT, 1),
            (CRC_AT, 4),
            (ATTRIBUTES_AT, 2),
            (LAST_OFFSET_DELTA_AT, 4),
            (BASE_TIMESTAMP_AT, 8),
            (MAX_TIMESTAMP_AT, 8),
            (PRODUCER_ID_AT, 8),
            (PRODUCER_EPOCH_AT, 2),
            (BASE_SEQUENCE_AT, 4),
            (RECORD_COUNT_AT, 4),
        ];
        let mut next = 0;
        for (at, size) in fields {
            assert_eq!(at, next, "a field at {at}, the one before ends at {next}");
            next = at + size;
        }
        assert_eq!(next, BATCH_HEADER_BYTES);
        assert_eq!(BATCH_LENGTH_AT + 4, LOG_OVERHEAD_BYTES);
    }
}
