//! A producer's batch checked whole before the log takes it: its header ([`crate::batch`]),
//! then every record ([`crate::records`]); and the transaction markers the broker writes.

use bytes::Bytes;

use crate::batch::{build_marker, invalid, validate_header, BatchError, BatchHeader, TxnResult};
use crate::producer_state::VerificationGuard;
use crate::records::{validate_records, ValidationLimits};

/// A batch that passed every check, with the facts about it the log needs. Only
/// [`validate`] makes one, so [`crate::Log::append`] never sees unchecked bytes.
#[derive(Debug, Clone)]
pub struct ValidBatch {
    bytes: Bytes,
    header: BatchHeader,
    max_timestamp: i64,
    log_append_time: bool,
    /// Written by a coordinator of this broker (TxnOffsetCommit's transactional batch): its
    /// producer's sequences are not checked, only its epoch, as Kafka appends with origin
    /// `COORDINATOR`.
    from_coordinator: bool,
    /// The guard of the verification that its transaction holds the partition.
    verification: Option<VerificationGuard>,
}

impl ValidBatch {
    /// The batch as a coordinator of this broker writes it to its internal topic: its
    /// producer's epoch is checked, its sequence is not (the coordinator's writes for one
    /// producer carry no sequence of their own).
    pub fn from_coordinator(mut self) -> ValidBatch {
        self.from_coordinator = true;
        self
    }

    /// The batch with the guard of the verification that its producer's transaction holds
    /// the partition ([`crate::Log::start_txn_verification`]): a transactional batch that
    /// opens its transaction on the partition is appended only with it.
    pub fn verified(mut self, guard: Option<VerificationGuard>) -> ValidBatch {
        self.verification = guard;
        self
    }

    /// The guard [`ValidBatch::verified`] gave it.
    pub fn verification(&self) -> Option<VerificationGuard> {
        self.verification
    }

    /// Whether [`ValidBatch::from_coordinator`] made it.
    pub fn is_from_coordinator(&self) -> bool {
        self.from_coordinator
    }

    /// The bytes as the producer sent them.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The batch header as the producer sent it.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The batch's timestamp as stored: the largest record timestamp, computed from the
    /// records themselves, or the broker's clock when the topic stamps append time.
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }

    /// True when the stored batch is stamped with the append time (LogAppendTime).
    pub fn log_append_time(&self) -> bool {
        self.log_append_time
    }

    /// A transaction marker the broker writes for the transaction coordinator
    /// ([`build_marker`]): the one batch with the control flag the log takes from a leader.
    pub fn marker(
        producer_id: i64,
        producer_epoch: i16,
        result: TxnResult,
        coordinator_epoch: i32,
        now_ms: i64,
    ) -> ValidBatch {
        let bytes = Bytes::from(build_marker(
            producer_id,
            producer_epoch,
            result,
            coordinator_epoch,
            now_ms,
        ));
        let header = BatchHeader::parse(&bytes).expect("a built marker has a header");
        ValidBatch {
            bytes,
            header,
            max_timestamp: now_ms,
            log_append_time: false,
            from_coordinator: false,
            verification: None,
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always false: a valid batch holds at least its header.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// Validates one batch a producer sent, as Kafka does before appending: the header checks of
/// [`crate::batch::validate_header`], then base offset 0, no control or LogAppendTime flags, a valid sequence
/// for idempotent producers, a known codec, and every record (framing, count, offset deltas,
/// timestamps), decompressing compressed batches as a stream. The bytes are not changed.
pub fn validate(bytes: Bytes, limits: &ValidationLimits) -> Result<ValidBatch, BatchError> {
    let header = validate_header(&bytes)?;
    if header.base_offset != 0 {
        return Err(invalid(format!(
            "baseOffset of a produced batch must be 0, not {}",
            header.base_offset
        )));
    }
    if header.is_control() {
        return Err(invalid("clients may not write control batches"));
    }
    if header.is_log_append_time() {
        return Err(BatchError::timestamp(
            "producers may not set the LogAppendTime timestamp type",
        ));
    }
    if header.has_producer_id() && header.base_sequence < 0 {
        return Err(invalid(format!(
            "producer id {} with invalid base sequence {}",
            header.producer_id, header.base_sequence
        )));
    }
    let summary = validate_records(&bytes, &header, limits)?;
    Ok(ValidBatch {
        bytes,
        header,
        max_timestamp: if limits.log_append_time {
            limits.now_ms
        } else {
            summary.max_timestamp
        },
        log_append_time: limits.log_append_time,
        from_coordinator: false,
        verification: None,
    })
}
