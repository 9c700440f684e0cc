//! An internal topic as a coordinator runtime reads and writes it ([`CoordinatorLog`]): its
//! records appended and read through the broker's partitions like any topic's, appends as
//! durable as a producer's with `acks=all` before they count; and the topic with its runtime
//! and how it is created ([`InternalTopic`]), which `internal_topics` creates and follows.

use bytes::Bytes;
use std::sync::Arc;
use weir_coordinator::{
    Appended, CoordinatorLog, LogEntry, ProducerIdAndEpoch, RecordVisitor, RuntimeError,
    StoredRecord, TopicRuntime, TxnAppend,
};
use weir_log::batch::{
    build_keyed_batch, build_transactional_batch, parse_marker, BatchHeader, KeyValue,
    ProducerFields, TxnResult,
};
use weir_log::records::for_each_stored_record;
use weir_log::{validate, LogError, ValidBatch, ValidationLimits, VerificationGuard};
use weir_metadata::MetadataImage;

use crate::config::{InternalTopicSpec, TopicSettings};
use crate::partition::ReplicationWait;
use crate::registry::PartitionRegistry;

/// Longest a write waits for the in-sync replicas (Kafka's `offsets.commit.timeout.ms`
/// default).
const WRITE_TIMEOUT_MS: u64 = 5_000;
/// Bytes read at a time when loading a partition of the offsets topic.
const LOAD_CHUNK_BYTES: u64 = 4 * 1024 * 1024;

/// An internal topic through the broker's partitions.
pub struct PartitionCoordinatorLog {
    partitions: Arc<PartitionRegistry>,
    topic: &'static str,
}

impl PartitionCoordinatorLog {
    /// `topic` of `partitions`.
    pub fn new(partitions: Arc<PartitionRegistry>, topic: &'static str) -> PartitionCoordinatorLog {
        PartitionCoordinatorLog { partitions, topic }
    }
}

impl PartitionCoordinatorLog {
    /// Appends the batch `build` makes (given the time and the topic's settings) to
    /// `partition`, led here, and says when it is as durable as an `acks=all` write.
    fn append_batch(
        &self,
        partition: i32,
        build: impl FnOnce(i64, &TopicSettings) -> Result<ValidBatch, RuntimeError>,
    ) -> Result<Appended, RuntimeError> {
        let topic = self.topic;
        let hosted = self
            .partitions
            .get(topic, partition)
            .ok_or(RuntimeError::NotAvailable)?;
        // As for a producer's acks=all write: refused before it is appended when too few
        // replicas are in sync (Kafka answers an offset commit's NOT_ENOUGH_REPLICAS this way too).
        if let Some(in_sync) = hosted.too_few_in_sync() {
            tracing::warn!(target: "weir::coordinator", topic, partition, in_sync, min_insync_replicas = hosted.min_insync_replicas(), "an internal topic has too few in-sync replicas to accept a write");
            return Err(RuntimeError::NotAvailable);
        }
        let min_insync_replicas = hosted.min_insync_replicas();
        let settings = hosted.settings();
        let batch = build(self.partitions.clock().now_ms(), &settings)?;
        let info = hosted.append(&batch).map_err(|error| match error {
            LogError::MessageTooLarge { .. } | LogError::RecordListTooLarge { .. } => {
                RuntimeError::TooLarge
            }
            LogError::InvalidProducerEpoch => RuntimeError::ProducerFenced,
            LogError::NotInTransaction => RuntimeError::NotInTransaction,
            LogError::CoordinatorFenced { .. } => RuntimeError::CoordinatorFenced,
            LogError::NotLeader => RuntimeError::NotCoordinator,
            _ => RuntimeError::NotAvailable,
        })?;
        let sync = settings.flush_policy.sync_before_ack(-1);
        let durable: weir_coordinator::Pending = Box::pin(async move {
            // Acknowledged only once every in-sync replica has it, and those are at least
            // min.insync.replicas, so a write survives the coordinator's failover.
            let deadline =
                tokio::time::Instant::now() + std::time::Duration::from_millis(WRITE_TIMEOUT_MS);
            match hosted
                .wait_all_acked(&info, sync, min_insync_replicas, deadline)
                .await
            {
                ReplicationWait::Replicated => Ok(()),
                // (Also a partition that went away before its sync: nothing is acknowledged.)
                ReplicationWait::NotLeader => Err(RuntimeError::NotCoordinator),
                ReplicationWait::TimedOut | ReplicationWait::BelowMinIsr { .. } => {
                    Err(RuntimeError::NotAvailable)
                }
            }
        });
        Ok(Appended {
            base_offset: info.base_offset,
            durable,
        })
    }
}

impl CoordinatorLog for PartitionCoordinatorLog {
    fn append(
        &self,
        partition: i32,
        records: Vec<StoredRecord>,
        transactional: Option<TxnAppend>,
    ) -> Result<Appended, RuntimeError> {
        let topic = self.topic;
        self.append_batch(partition, |now_ms, settings| {
            let fields: Vec<KeyValue<'_>> = records
                .iter()
                .map(|(key, value)| (Some(key.as_slice()), value.as_deref()))
                .collect();
            let batch = match transactional {
                None => build_keyed_batch(&fields, now_ms, ProducerFields::NONE),
                Some(TxnAppend { producer, .. }) => build_transactional_batch(
                    &fields,
                    now_ms,
                    ProducerFields {
                        producer_id: producer.producer_id,
                        producer_epoch: producer.epoch,
                        base_sequence: 0,
                    },
                ),
            };
            if batch.len() as u64 > settings.log.max_message_bytes {
                return Err(RuntimeError::TooLarge);
            }
            let limits = ValidationLimits {
                decompressed_bytes_max: settings.decompressed_bytes_max(),
                now_ms,
                timestamp_before_max_ms: i64::MAX,
                timestamp_after_max_ms: i64::MAX,
                keys_required: true,
                log_append_time: false,
            };
            // The coordinator's own bytes pass the same validation as any producer's; its
            // transactional writes carry no sequence of their own (only the epoch is checked).
            let verification = transactional
                .and_then(|t| t.verification)
                .map(VerificationGuard::from_value);
            validate(Bytes::from(batch), &limits)
                .map(|batch| batch.from_coordinator().verified(verification))
                .map_err(|error| {
                    tracing::error!(target: "weir::coordinator", topic, %error, "built an invalid batch for an internal topic");
                    RuntimeError::NotAvailable
                })
        })
    }

    fn append_marker(
        &self,
        partition: i32,
        producer: ProducerIdAndEpoch,
        commit: bool,
        coordinator_epoch: i32,
    ) -> Result<Appended, RuntimeError> {
        self.append_batch(partition, |now_ms, _| {
            Ok(ValidBatch::marker(
                producer.producer_id,
                producer.epoch,
                TxnResult::of_commit(commit),
                coordinator_epoch,
                now_ms,
            ))
        })
    }

    fn load(&self, partition: i32, visit: &mut RecordVisitor<'_>) -> Result<(), String> {
        let hosted = self
            .partitions
            .get(self.topic, partition)
            .ok_or_else(|| format!("{}-{partition} is not hosted here", self.topic))?;
        let limit = hosted.settings().decompressed_bytes_max();
        let mut offset = hosted.log().log_start_offset();
        loop {
            let view = {
                let log = hosted.log();
                log.read_view(offset.max(log.log_start_offset()), log.log_end_offset())
            };
            let Some(view) = view.map_err(|e| e.to_string())? else {
                return Ok(());
            };
            let Some(slice) = view
                .slice(LOAD_CHUNK_BYTES, true)
                .map_err(|e| e.to_string())?
            else {
                return Ok(());
            };
            let bytes = slice.read().map_err(|e| e.to_string())?;
            let mut position = 0usize;
            let before = offset;
            while let Some(header) = BatchHeader::parse(&bytes[position..]) {
                let end = position + header.total_bytes() as usize;
                if end > bytes.len() {
                    break;
                }
                let batch = &bytes[position..end];
                if header.last_offset() < offset {
                    // Read already.
                } else if header.is_control() {
                    if let Some(marker) = parse_marker(batch) {
                        visit(LogEntry::Marker {
                            producer_id: header.producer_id,
                            commit: marker.result == TxnResult::Commit,
                        });
                    }
                } else {
                    let transactional = header.is_transactional().then_some(header.producer_id);
                    for_each_stored_record(batch, limit, &mut |at, record| {
                        if at >= offset {
                            if let Some(key) = record.key {
                                visit(LogEntry::Record {
                                    offset: at,
                                    transactional,
                                    key,
                                    value: record.value,
                                });
                            }
                        }
                    })
                    .map_err(|e| format!("batch at offset {}: {e}", header.base_offset))?;
                }
                offset = offset.max(header.last_offset() + 1);
                position = end;
            }
            if offset == before {
                return Err(format!("no progress reading at offset {offset}"));
            }
        }
    }
}

/// An internal topic and the coordinator runtime that keeps its state in it.
pub(crate) struct InternalTopic {
    /// The runtime serving the topic's partitions led here.
    pub(crate) runtime: Arc<dyn TopicRuntime>,
    /// How it is created.
    pub(crate) spec: InternalTopicSpec,
    /// Held while the topic is first loaded, and while a partition is loaded or unloaded, so
    /// these never run beside each other (never while waiting for metadata: the task applying
    /// images takes it).
    pub(crate) serial: tokio::sync::Mutex<()>,
}

impl InternalTopic {
    /// `runtime`'s topic, created as `spec` says.
    pub(crate) fn new(runtime: Arc<dyn TopicRuntime>, spec: InternalTopicSpec) -> InternalTopic {
        InternalTopic {
            runtime,
            spec,
            serial: tokio::sync::Mutex::new(()),
        }
    }

    /// The topic's name.
    pub(crate) fn name(&self) -> &'static str {
        self.runtime.topic()
    }

    /// The topic is gone from `image` while its runtime still serves it: every shard is
    /// dropped, and it is created again on the next request that needs it.
    pub(crate) fn forget_if_deleted(&self, image: &MetadataImage) {
        if image.topic(self.name()).is_none() && self.runtime.partitions() > 0 {
            tracing::warn!(target: "weir::coordinator", topic = self.name(), "an internal topic was deleted: what its coordinator kept is gone; it is created again on the next request that needs it");
            self.runtime.reset();
        }
    }
}
