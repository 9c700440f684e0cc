//! `weir-log` owns one partition's storage: segment files of Kafka v2 record batches with a
//! sparse offset index and a time index, append with offset assignment, reads by offset and by
//! timestamp, time- and size-based retention, idempotent-producer state, and crash recovery
//! (recovery point, torn-tail truncation, index rebuild, clean-shutdown marker).
//!
//! It never decodes individual records, never knows about topics, networking or the Kafka
//! protocol beyond the batch header, and never decides when to fsync: the broker does, through
//! [`Log::flush_ticket`], so many appenders share one sync (group commit).
//!
//! All file access goes through [`storage::Storage`]; [`storage::PowerLossStorage`] simulates a
//! power cut to prove what is durable.

pub mod batch;
pub mod checkpoint;
pub mod clock;
pub mod index;
mod log;
pub mod producer_state;
mod segment;
pub mod storage;

pub use crate::log::{AppendInfo, FlushTicket, Log, LogConfig, RecoveryReport};
pub use batch::{BatchError, BatchHeader};
pub use clock::{Clock, ManualClock, SystemClock};
pub use segment::SEGMENT_BYTES_LIMIT;

/// Everything that can go wrong in the log; the broker maps each to a Kafka error code.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The batch failed validation (CRC, length, magic, header consistency).
    #[error(transparent)]
    Batch(#[from] BatchError),
    /// The batch is larger than `max.message.bytes`.
    #[error("record batch of {bytes} bytes exceeds max.message.bytes")]
    MessageTooLarge {
        /// Size of the refused batch.
        bytes: u64,
    },
    /// An idempotent batch whose sequence does not follow the producer's last one.
    #[error("out of order sequence number")]
    OutOfOrderSequence,
    /// An idempotent batch from an older producer epoch.
    #[error("producer epoch is older than the current one")]
    InvalidProducerEpoch,
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
    /// A batch header on disk could not be parsed where one must be.
    #[error("corrupt segment data at position {position}")]
    Corrupt {
        /// Byte position in the segment file.
        position: u64,
    },
    /// The file system failed.
    #[error("log I/O error: {0}")]
    Io(#[from] std::io::Error),
}
