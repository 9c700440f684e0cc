//! `weir-log` owns one partition's storage: segment files of Kafka v2 record batches with a
//! sparse offset index and a time index, validation of every batch and record before it is
//! appended, offset assignment, reads by offset and by timestamp, time- and size-based
//! retention, idempotent-producer state, the aborted-transaction index of each segment, and
//! crash recovery (recovery point, torn-tail truncation, index rebuild, clean-shutdown marker).
//!
//! It never changes a batch's bytes beyond base offset and leader epoch, never knows about
//! topics, networking or the Kafka protocol beyond the record format, and never decides when to
//! fsync: the broker does, through [`Log::flush_ticket`], so many appenders share one sync
//! (group commit). Disk reads and syncs are handed out as values to run outside the
//! partition's lock.
//!
//! All file access goes through `weir_storage`; only the active segment keeps files open, the
//! others are reopened through a bounded [`weir_storage::FileCache`].

pub mod batch;
pub mod checkpoint;
pub mod cleaner;
pub mod compress;
pub mod index;
mod log;
pub mod producer_state;
pub mod records;
mod segment;
pub mod txn_index;
pub mod validate;

pub use crate::log::{
    AppendInfo, BatchLookup, CleaningCommit, FlushDone, FlushTicket, Log, LogCheckpoint, LogConfig,
    ReadSlice, ReadView, RecoveryReport, SegmentRemoval,
};
pub use batch::{BatchError, BatchHeader, RecordError, RECORD_ERRORS_MAX};
pub use cleaner::{CleanedLog, CleaningPlan, CleaningStats, CompactionConfig};
pub use producer_state::{ActiveProducer, VerificationGuard};
pub use records::ValidationLimits;
pub use segment::{RELATIVE_OFFSET_MAX, SEGMENT_BYTES_LIMIT};
pub use txn_index::{AbortedLookup, AbortedTxn};
pub use validate::{validate, ValidBatch};
pub use weir_clock::{Clock, ManualClock, SystemClock};

/// Everything that can go wrong in the log; the broker maps each to a Kafka error code.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The batch failed validation (CRC, framing, records, timestamps).
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// The batch is larger than `max.message.bytes`.
    #[error("record batch of {bytes} bytes exceeds max.message.bytes")]
    MessageTooLarge {
        /// Size of the refused batch.
        bytes: u64,
    },
    /// The batch is larger than a whole segment (`segment.bytes`).
    #[error("record batch of {bytes} bytes is larger than segment.bytes ({segment_bytes})")]
    RecordListTooLarge {
        /// Size of the refused batch.
        bytes: u64,
        /// The topic's `segment.bytes`.
        segment_bytes: u64,
    },
    /// An idempotent batch whose sequence does not follow the producer's last one.
    #[error("out of order sequence number")]
    OutOfOrderSequence,
    /// An idempotent batch from an older producer epoch.
    #[error("producer epoch is older than the current one")]
    InvalidProducerEpoch,
    /// A transactional batch would open its producer's transaction here without the guard of
    /// a verification that the transaction holds this partition (KIP-890).
    #[error("the partition was not added to the transaction")]
    NotInTransaction,
    /// A transaction marker from an older transaction coordinator than the one that wrote
    /// the producer's last marker here.
    #[error("the marker's coordinator epoch {coordinator_epoch} is older than the partition's {current} for this producer")]
    CoordinatorFenced {
        /// The marker's coordinator epoch.
        coordinator_epoch: i32,
        /// The coordinator epoch of the producer's last marker here.
        current: i32,
    },
    /// A write for the partition's leader on a replica that does not lead it now: it checked
    /// its leadership before an await (a transaction's verification), and another broker was
    /// elected meanwhile.
    #[error("this broker no longer leads the partition")]
    NotLeader,
    /// A batch kind this version of Weir does not store yet.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// A read outside `[log_start_offset, log_end_offset]`.
    #[error("offset {offset} is outside [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        /// The requested offset.
        offset: i64,
        /// First retained offset.
        log_start_offset: i64,
        /// One past the last offset.
        log_end_offset: i64,
    },
    /// A replicated batch does not start at the log end: the follower's log does not continue
    /// there (it is behind or ahead of the fetched records, or diverged from the leader's).
    #[error("replicated batch starts at offset {got}, but the log ends at {expected}")]
    NonContiguous {
        /// The log end offset, where the next batch must start.
        expected: i64,
        /// The batch's base offset.
        got: i64,
    },
    /// The partition was deleted: it takes no more writes.
    #[error("the partition was deleted")]
    Deleted,
    /// A batch header on disk could not be parsed where one must be.
    #[error("corrupt segment data at position {position}")]
    Corrupt {
        /// Byte position in the segment file.
        position: u64,
    },
    /// A write ran out of disk space or file descriptors and was undone: the log is as it was
    /// and takes writes again once the resource returns.
    #[error("storage exhausted, write refused: {0}")]
    OutOfResources(std::io::Error),
    /// The file system failed. On a write path this is fatal: the log may have lost data.
    #[error("log I/O error: {0}")]
    Io(std::io::Error),
}

impl From<std::io::Error> for LogError {
    fn from(error: std::io::Error) -> LogError {
        if weir_storage::is_resource_exhausted(&error) {
            LogError::OutOfResources(error)
        } else {
            LogError::Io(error)
        }
    }
}
