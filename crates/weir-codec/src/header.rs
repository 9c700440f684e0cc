//! The fixed header of a record batch, decoded: read from the layout of [`crate::layout`],
//! written back field by field, and what its fields say (the last offset and sequence, the
//! codec, the flags).

use bytes::{Buf, BufMut};

use crate::layout::{
    ATTR_COMPRESSION_MASK, ATTR_CONTROL, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL,
    BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES, MAGIC_V2, NO_PRODUCER_ID, NO_SEQUENCE,
};

/// The decoded fixed header of one record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Bytes after the `batchLength` field.
    pub batch_length: i32,
    /// Leader epoch the batch was appended under.
    pub partition_leader_epoch: i32,
    /// Format version; always 2 once validated.
    pub magic: i8,
    /// CRC-32C of the bytes from `attributes` to the end.
    pub crc: u32,
    /// Compression, timestamp type, transactional and control flags.
    pub attributes: i16,
    /// Offset of the last record relative to `base_offset`.
    pub last_offset_delta: i32,
    /// Timestamp of the first record.
    pub base_timestamp: i64,
    /// Largest timestamp in the batch, as the producer wrote it.
    pub max_timestamp: i64,
    /// Idempotent producer id, or -1.
    pub producer_id: i64,
    /// Idempotent producer epoch, or -1.
    pub producer_epoch: i16,
    /// Sequence number of the first record, or -1.
    pub base_sequence: i32,
    /// Number of records.
    pub record_count: i32,
}

/// The producer identity a batch carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerFields {
    /// Producer id, or [`NO_PRODUCER_ID`].
    pub producer_id: i64,
    /// Producer epoch, or -1.
    pub producer_epoch: i16,
    /// Sequence number of the first record, or [`NO_SEQUENCE`].
    pub base_sequence: i32,
}

impl ProducerFields {
    /// Fields of a batch from a producer without idempotence.
    pub const NONE: ProducerFields = ProducerFields {
        producer_id: NO_PRODUCER_ID,
        producer_epoch: -1,
        base_sequence: NO_SEQUENCE,
    };
}

impl BatchHeader {
    /// The header of a new batch of `record_count` records numbered from 0: base offset 0 and
    /// no leader epoch (the broker writes both), format v2, and the batch length and CRC left
    /// for [`crate::encode::seal`] to write.
    pub fn new(
        record_count: i32,
        attributes: i16,
        base_timestamp: i64,
        max_timestamp: i64,
        producer: ProducerFields,
    ) -> BatchHeader {
        BatchHeader {
            base_offset: 0,
            batch_length: 0,
            partition_leader_epoch: -1,
            magic: MAGIC_V2,
            crc: 0,
            attributes,
            last_offset_delta: record_count - 1,
            base_timestamp,
            max_timestamp,
            producer_id: producer.producer_id,
            producer_epoch: producer.producer_epoch,
            base_sequence: producer.base_sequence,
            record_count,
        }
    }

    /// Reads the header from the first [`BATCH_HEADER_BYTES`] of `bytes` without validating it;
    /// `None` when fewer bytes are given.
    pub fn parse(bytes: &[u8]) -> Option<BatchHeader> {
        let mut buf = bytes.get(..BATCH_HEADER_BYTES)?;
        Some(BatchHeader {
            base_offset: buf.get_i64(),
            batch_length: buf.get_i32(),
            partition_leader_epoch: buf.get_i32(),
            magic: buf.get_i8(),
            crc: buf.get_u32(),
            attributes: buf.get_i16(),
            last_offset_delta: buf.get_i32(),
            base_timestamp: buf.get_i64(),
            max_timestamp: buf.get_i64(),
            producer_id: buf.get_i64(),
            producer_epoch: buf.get_i16(),
            base_sequence: buf.get_i32(),
            record_count: buf.get_i32(),
        })
    }

    /// Appends the header's [`BATCH_HEADER_BYTES`], field by field.
    pub fn put(&self, out: &mut impl BufMut) {
        out.put_i64(self.base_offset);
        out.put_i32(self.batch_length);
        out.put_i32(self.partition_leader_epoch);
        out.put_i8(self.magic);
        out.put_u32(self.crc);
        out.put_i16(self.attributes);
        out.put_i32(self.last_offset_delta);
        out.put_i64(self.base_timestamp);
        out.put_i64(self.max_timestamp);
        out.put_i64(self.producer_id);
        out.put_i16(self.producer_epoch);
        out.put_i32(self.base_sequence);
        out.put_i32(self.record_count);
    }

    /// Total size of the batch on disk and on the wire, including the 12-byte log overhead.
    pub fn total_bytes(&self) -> u64 {
        LOG_OVERHEAD_BYTES as u64 + self.batch_length.max(0) as u64
    }

    /// Offset of the last record in the batch (saturating: a header read back from a damaged
    /// disk must not overflow; validated batches never come near).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .saturating_add(i64::from(self.last_offset_delta))
    }

    /// Sequence number of the last record, wrapping at `i32::MAX` as Kafka does.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence == NO_SEQUENCE {
            return NO_SEQUENCE;
        }
        let last = i64::from(self.base_sequence) + i64::from(self.last_offset_delta);
        (last % (i64::from(i32::MAX) + 1)) as i32
    }

    /// The compression codec id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
    pub fn compression(&self) -> i16 {
        self.attributes & ATTR_COMPRESSION_MASK
    }

    /// True for a batch written inside a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// True for a transaction marker batch.
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// True when the timestamp-type bit says LogAppendTime.
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_LOG_APPEND_TIME != 0
    }

    /// True when the batch comes from an idempotent producer.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn a_header_reads_back_as_it_was_written(
            base_offset in any::<i64>(),
            batch_length in any::<i32>(),
            partition_leader_epoch in any::<i32>(),
            magic in any::<i8>(),
            crc in any::<u32>(),
            attributes in any::<i16>(),
            last_offset_delta in any::<i32>(),
            (base_timestamp, max_timestamp) in (any::<i64>(), any::<i64>()),
            (producer_id, producer_epoch, base_sequence) in (any::<i64>(), any::<i16>(), any::<i32>()),
            record_count in any::<i32>(),
        ) {
            let header = BatchHeader {
                base_offset, batch_length, partition_leader_epoch, magic, crc, attributes,
                last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
                base_sequence, record_count,
            };
            let mut out = Vec::new();
            header.put(&mut out);
            prop_assert_eq!(out.len(), BATCH_HEADER_BYTES);
            prop_assert_eq!(&out[crate::layout::PRODUCER_ID_AT..crate::layout::PRODUCER_EPOCH_AT], &producer_id.to_be_bytes());
            prop_assert_eq!(BatchHeader::parse(&out), Some(header));
            prop_assert_eq!(BatchHeader::parse(&out[..BATCH_HEADER_BYTES - 1]), None);
        }
    }
}
