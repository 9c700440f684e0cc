//! The Kafka RecordBatch v2 header: parsing, validation and the two fields the broker patches.
//!
//! Layout (big-endian): baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 |
//! crc u32 | attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 |
//! producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32 | records…
//! The CRC-32C covers `attributes` onward, so patching base offset and leader epoch keeps it valid.

use bytes::Buf;

/// Size of the fixed RecordBatch v2 header in bytes.
pub const BATCH_HEADER_BYTES: usize = 61;
/// Bytes before `batchLength`'s payload starts: baseOffset (8) + batchLength (4).
pub const LOG_OVERHEAD_BYTES: usize = 12;
/// The only record batch format Weir stores.
pub const MAGIC_V2: i8 = 2;
/// Producer id of a batch written without idempotence.
pub const NO_PRODUCER_ID: i64 = -1;
/// Sequence of a batch written without idempotence.
pub const NO_SEQUENCE: i32 = -1;

const CRC_START: usize = 21;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// Why a batch was refused; each maps to one Kafka error code at the handler boundary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Shorter than a header, or `batchLength` disagrees with the bytes given.
    #[error("record batch is truncated or its length field is wrong")]
    Malformed,
    /// The stored CRC-32C does not match the bytes.
    #[error("record batch CRC mismatch")]
    CorruptCrc,
    /// Magic byte other than 2.
    #[error("unsupported record batch magic {0}")]
    UnsupportedMagic(i8),
    /// Header fields that contradict each other (record count, offset delta).
    #[error("invalid record batch: {0}")]
    Invalid(&'static str),
}

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
    /// Largest timestamp in the batch.
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

impl BatchHeader {
    /// Reads the header from the first [`BATCH_HEADER_BYTES`] of `bytes` without validating it.
    pub fn parse(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
        if bytes.len() < BATCH_HEADER_BYTES {
            return Err(BatchError::Malformed);
        }
        let mut buf = &bytes[..BATCH_HEADER_BYTES];
        Ok(BatchHeader {
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

    /// Total size of the batch on disk and on the wire, including the 12-byte log overhead.
    pub fn total_bytes(&self) -> usize {
        LOG_OVERHEAD_BYTES + self.batch_length.max(0) as usize
    }

    /// Offset of the last record in the batch.
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    /// Sequence number of the last record, wrapping at `i32::MAX` as Kafka does.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence == NO_SEQUENCE {
            return NO_SEQUENCE;
        }
        let last = i64::from(self.base_sequence) + i64::from(self.last_offset_delta);
        (last % (i64::from(i32::MAX) + 1)) as i32
    }

    /// True for a batch written inside a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// True for a transaction marker batch.
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// True when the batch comes from an idempotent producer.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }
}

/// Validates that `bytes` holds exactly one well-formed v2 batch with a correct CRC.
pub fn validate_batch(bytes: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(bytes)?;
    if header.batch_length < (BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32
        || header.total_bytes() != bytes.len()
    {
        return Err(BatchError::Malformed);
    }
    if header.magic != MAGIC_V2 {
        return Err(BatchError::UnsupportedMagic(header.magic));
    }
    if crc32c::crc32c(&bytes[CRC_START..]) != header.crc {
        return Err(BatchError::CorruptCrc);
    }
    if header.record_count <= 0 || header.last_offset_delta != header.record_count - 1 {
        return Err(BatchError::Invalid(
            "record count and last offset delta disagree",
        ));
    }
    Ok(header)
}

/// Writes the broker-assigned base offset and leader epoch into a batch's header in place.
pub fn patch_batch(bytes: &mut [u8], base_offset: i64, partition_leader_epoch: i32) {
    assert!(
        bytes.len() >= BATCH_HEADER_BYTES,
        "patching a batch shorter than its header"
    );
    bytes[0..8].copy_from_slice(&base_offset.to_be_bytes());
    bytes[12..16].copy_from_slice(&partition_leader_epoch.to_be_bytes());
}

/// Computes the CRC a batch must carry; used to build batches in tests and tools.
pub fn batch_crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(&bytes[CRC_START..])
}

/// Builds a valid uncompressed v2 batch of `values`, for tests and tools that need real bytes.
pub fn build_batch(values: &[&[u8]], base_timestamp: i64, producer: ProducerFields) -> Vec<u8> {
    let mut records = Vec::new();
    for (i, value) in values.iter().enumerate() {
        let mut body = Vec::new();
        body.push(0u8); // attributes
        put_varlong(&mut body, 0); // timestamp delta
        put_varlong(&mut body, i as i64); // offset delta
        put_varlong(&mut body, -1); // null key
        put_varlong(&mut body, value.len() as i64);
        body.extend_from_slice(value);
        put_varlong(&mut body, 0); // no headers
        put_varlong(&mut records, body.len() as i64);
        records.extend_from_slice(&body);
    }
    let count = values.len() as i32;
    let mut out = Vec::with_capacity(BATCH_HEADER_BYTES + records.len());
    out.extend_from_slice(&0i64.to_be_bytes());
    out.extend_from_slice(
        &((BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES + records.len()) as i32).to_be_bytes(),
    );
    out.extend_from_slice(&(-1i32).to_be_bytes());
    out.push(MAGIC_V2 as u8);
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&0i16.to_be_bytes());
    out.extend_from_slice(&(count - 1).to_be_bytes());
    out.extend_from_slice(&base_timestamp.to_be_bytes());
    out.extend_from_slice(&base_timestamp.to_be_bytes());
    out.extend_from_slice(&producer.producer_id.to_be_bytes());
    out.extend_from_slice(&producer.producer_epoch.to_be_bytes());
    out.extend_from_slice(&producer.base_sequence.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(&records);
    let crc = batch_crc(&out);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Producer identity fields written into a batch built by [`build_batch`].
#[derive(Debug, Clone, Copy)]
pub struct ProducerFields {
    /// Producer id, or [`NO_PRODUCER_ID`].
    pub producer_id: i64,
    /// Producer epoch, or -1.
    pub producer_epoch: i16,
    /// First sequence number, or [`NO_SEQUENCE`].
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

fn put_varlong(out: &mut Vec<u8>, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        out.push((zigzag as u8) | 0x80);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_batch_validates_and_patching_keeps_crc() {
        let mut batch = build_batch(&[b"a", b"bc"], 1000, ProducerFields::NONE);
        let header = validate_batch(&batch).expect("valid");
        assert_eq!(header.record_count, 2);
        assert_eq!(header.last_offset_delta, 1);
        patch_batch(&mut batch, 42, 7);
        let header = validate_batch(&batch).expect("still valid after patch");
        assert_eq!(header.base_offset, 42);
        assert_eq!(header.partition_leader_epoch, 7);
        assert_eq!(header.last_offset(), 43);
    }

    #[test]
    fn corruptions_are_refused() {
        let batch = build_batch(&[b"value"], 5, ProducerFields::NONE);
        let mut flipped = batch.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        assert_eq!(validate_batch(&flipped), Err(BatchError::CorruptCrc));
        assert_eq!(
            validate_batch(&batch[..batch.len() - 1]),
            Err(BatchError::Malformed)
        );
        assert_eq!(validate_batch(&batch[..20]), Err(BatchError::Malformed));
        let mut magic = batch.clone();
        magic[16] = 1;
        assert_eq!(validate_batch(&magic), Err(BatchError::UnsupportedMagic(1)));
    }

    #[test]
    fn last_sequence_wraps() {
        let mut header = BatchHeader::parse(&build_batch(&[b"x", b"y"], 0, ProducerFields::NONE))
            .expect("parse");
        header.base_sequence = i32::MAX;
        assert_eq!(header.last_sequence(), 0);
    }
}
