//! The group coordinator's side of the data plane: `__consumer_offsets` as the coordinator's
//! [`OffsetsLog`] (its records appended and read through the partitions like any topic's), and
//! the topic's creation on the first group request and loading at startup.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use weir_coordinator::{
    Appended, GroupError, OffsetsLog, RecordVisitor, StoredRecord, OFFSETS_TOPIC,
};
use weir_log::batch::{build_keyed_batch, BatchHeader, KeyValue, ProducerFields};
use weir_log::records::for_each_stored_record;
use weir_log::{validate, LogError, ValidationLimits};
use weir_metadata::requests::CreateTopic;
use weir_metadata::{ControllerError, NewTopic};

use crate::broker::Broker;
use crate::partition::ReplicationWait;
use crate::registry::PartitionRegistry;

/// Longest an offset commit waits for the in-sync replicas (Kafka's
/// `offsets.commit.timeout.ms` default).
const OFFSET_COMMIT_TIMEOUT_MS: u64 = 5_000;
/// Bytes read at a time when loading a partition of the offsets topic.
const LOAD_CHUNK_BYTES: u64 = 4 * 1024 * 1024;

/// `__consumer_offsets` through the broker's partitions.
pub struct PartitionOffsetsLog {
    partitions: Arc<PartitionRegistry>,
}

impl PartitionOffsetsLog {
    /// The offsets topic of `partitions`.
    pub fn new(partitions: Arc<PartitionRegistry>) -> PartitionOffsetsLog {
        PartitionOffsetsLog { partitions }
    }
}

impl OffsetsLog for PartitionOffsetsLog {
    fn append(&self, partition: i32, records: Vec<StoredRecord>) -> Result<Appended, GroupError> {
        let hosted = self
            .partitions
            .get(OFFSETS_TOPIC, partition)
            .ok_or(GroupError::CoordinatorNotAvailable)?;
        // As for a producer's acks=all write: refused before it is appended when too few
        // replicas are in sync (Kafka answers a commit's NOT_ENOUGH_REPLICAS this way too).
        if let Some(in_sync) = hosted.too_few_in_sync() {
            tracing::warn!(target: "weir::groups", partition, in_sync, min_insync_replicas = hosted.min_insync_replicas(), "{OFFSETS_TOPIC} has too few in-sync replicas to accept a write");
            return Err(GroupError::CoordinatorNotAvailable);
        }
        let min_insync_replicas = hosted.min_insync_replicas();
        let settings = hosted.settings();
        let now_ms = self.partitions.clock().now_ms();
        let fields: Vec<KeyValue<'_>> = records
            .iter()
            .map(|(key, value)| (Some(key.as_slice()), value.as_deref()))
            .collect();
        let batch = build_keyed_batch(&fields, now_ms, ProducerFields::NONE);
        if batch.len() as u64 > settings.log.max_message_bytes {
            return Err(GroupError::InvalidCommitOffsetSize);
        }
        let limits = ValidationLimits {
            decompressed_bytes_max: settings.decompressed_bytes_max(),
            now_ms,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: i64::MAX,
            keys_required: true,
            log_append_time: false,
        };
        // The coordinator's own bytes pass the same validation as any producer's.
        let batch = validate(Bytes::from(batch), &limits).map_err(|error| {
            tracing::error!(target: "weir::groups", %error, "built an invalid offsets batch");
            GroupError::CoordinatorNotAvailable
        })?;
        let info = hosted.append(&batch).map_err(|error| match error {
            LogError::MessageTooLarge { .. } | LogError::RecordListTooLarge { .. } => {
                GroupError::InvalidCommitOffsetSize
            }
            _ => GroupError::CoordinatorNotAvailable,
        })?;
        let sync = settings.flush_policy.sync_before_ack(-1);
        let end = info.last_offset + 1;
        let durable: weir_coordinator::Pending = Box::pin(async move {
            // The partition went away before the sync: nothing may be acknowledged.
            if sync && !hosted.wait_durable(end).await {
                return Err(GroupError::CoordinatorNotAvailable);
            }
            // Acknowledged only once every in-sync replica has it, and those are at least
            // min.insync.replicas, so a commit survives the coordinator's failover.
            let deadline = tokio::time::Instant::now()
                + std::time::Duration::from_millis(OFFSET_COMMIT_TIMEOUT_MS);
            match hosted
                .wait_replicated(end, min_insync_replicas, deadline)
                .await
            {
                ReplicationWait::Replicated => Ok(()),
                ReplicationWait::NotLeader => Err(GroupError::NotCoordinator),
                ReplicationWait::TimedOut | ReplicationWait::BelowMinIsr { .. } => {
                    Err(GroupError::CoordinatorNotAvailable)
                }
            }
        });
        Ok(Appended {
            base_offset: info.base_offset,
            durable,
        })
    }

    fn load(&self, partition: i32, visit: &mut RecordVisitor<'_>) -> Result<(), String> {
        let hosted = self
            .partitions
            .get(OFFSETS_TOPIC, partition)
            .ok_or_else(|| format!("{OFFSETS_TOPIC}-{partition} is not hosted here"))?;
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
                if header.last_offset() >= offset && !header.is_control() {
                    for_each_stored_record(&bytes[position..end], limit, &mut |at, record| {
                        if at >= offset {
                            if let Some(key) = record.key {
                                visit(at, key, record.value);
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

/// How often `__consumer_offsets` partitions that could not open are checked again.
const OPEN_CHECK_MS: u64 = 1_000;

impl Broker {
    /// `offsets.topic.replication.factor`, at most the live brokers (a single node gets 1).
    fn offsets_replication_factor(&self) -> i16 {
        let live = self.image().brokers().filter(|b| !b.fenced).count().max(1);
        self.config
            .offsets_topic_replication_factor
            .min(i16::try_from(live).unwrap_or(i16::MAX))
    }

    /// Makes sure the group coordinator can serve: creates `__consumer_offsets` on the first
    /// group request (as Kafka does), then loads its partitions. Concurrent callers wait for
    /// the one doing it.
    pub async fn ensure_offsets_topic(self: &Arc<Self>) -> Result<(), GroupError> {
        if self.coordinator.partitions() > 0 {
            return Ok(());
        }
        let _creating = self.offsets_topic_creation.lock().await;
        if self.coordinator.partitions() > 0 {
            return Ok(());
        }
        if self.image().topic(OFFSETS_TOPIC).is_none() {
            let mut configs = BTreeMap::new();
            // Compaction keeps the latest commit per partition and the latest group state.
            configs.insert("cleanup.policy".to_string(), "compact".to_string());
            configs.insert(
                "segment.bytes".to_string(),
                self.config.offsets_topic_segment_bytes.to_string(),
            );
            let topic = NewTopic {
                name: OFFSETS_TOPIC.to_string(),
                partitions: self.config.offsets_topic_partitions,
                replication_factor: self.offsets_replication_factor(),
                configs,
                assignments: Vec::new(),
            };
            match self
                .change_metadata(self.controller.ask(CreateTopic {
                    topic,
                    validate_only: false,
                }))
                .await
            {
                Ok(topic) => {
                    tracing::info!(target: "weir::groups", partitions = topic.partition_count(), "created {OFFSETS_TOPIC}");
                }
                Err(ControllerError::TopicAlreadyExists(_)) => {}
                Err(error) => {
                    tracing::warn!(target: "weir::groups", %error, "could not create {OFFSETS_TOPIC}");
                    return Err(GroupError::CoordinatorNotAvailable);
                }
            }
        }
        self.load_offsets_topic().await;
        Ok(())
    }

    /// Loads one partition of `__consumer_offsets`: (groups, offsets). A partition that cannot
    /// be read stops the process: its groups would otherwise silently restart from nothing.
    async fn load_offsets_partition(self: &Arc<Self>, partition: i32) -> (usize, usize) {
        let broker = self.clone();
        let loaded = tokio::task::spawn_blocking(move || broker.coordinator.load(partition)).await;
        match loaded {
            Ok(Ok(counts)) => counts,
            Ok(Err(error)) => crate::partition::storage_failure(
                std::path::Path::new(&format!("{OFFSETS_TOPIC}-{partition}")),
                &error,
            ),
            Err(error) => {
                tracing::error!(target: "weir::groups", partition, %error, "loading task failed");
                (0, 0)
            }
        }
    }

    /// Loads the `waiting` partitions of `__consumer_offsets` as each opens (the registry
    /// retries partitions that could not open for lack of space), until all are loaded, the
    /// topic goes, or shutdown.
    async fn load_when_open(self: Arc<Self>, mut waiting: Vec<i32>) {
        let mut shutdown = self.shutdown.clone();
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(OPEN_CHECK_MS));
        while !waiting.is_empty() {
            tokio::select! {
                _ = tick.tick() => {}
                _ = crate::broker::stopping(&mut shutdown) => return,
            }
            if self.image().topic(OFFSETS_TOPIC).is_none() || self.coordinator.partitions() == 0 {
                return;
            }
            let mut still = Vec::new();
            for partition in waiting {
                if self.partitions.get(OFFSETS_TOPIC, partition).is_some() {
                    let (groups, offsets) = self.load_offsets_partition(partition).await;
                    tracing::info!(target: "weir::groups", partition, groups, offsets, "loaded {OFFSETS_TOPIC} partition once it opened");
                } else {
                    still.push(partition);
                }
            }
            waiting = still;
        }
    }

    /// Loads every partition of an existing `__consumer_offsets` (at startup, and after
    /// creating it). Groups of a partition are served once it is loaded; until then they get
    /// COORDINATOR_LOAD_IN_PROGRESS. A partition that cannot be read stops the process: its
    /// groups would otherwise silently restart from nothing.
    pub async fn load_offsets_topic(self: &Arc<Self>) {
        let Some(topic) = self.image().topic(OFFSETS_TOPIC).cloned() else {
            return;
        };
        self.coordinator.start(topic.partition_count());
        let started = std::time::Instant::now();
        let (mut groups, mut offsets) = (0, 0);
        let mut waiting = Vec::new();
        for partition in 0..topic.partition_count() {
            // Another broker leads it: that broker coordinates its groups.
            if topic
                .partition(partition)
                .is_some_and(|p| p.leader != self.identity.node_id)
            {
                continue;
            }
            if self.partitions.get(OFFSETS_TOPIC, partition).is_none() {
                // Not open yet (no space for its files): its groups wait until it opens.
                waiting.push(partition);
                continue;
            }
            let (g, o) = self.load_offsets_partition(partition).await;
            groups += g;
            offsets += o;
        }
        if !waiting.is_empty() {
            tracing::warn!(target: "weir::groups", partitions = waiting.len(), "{OFFSETS_TOPIC} partitions not open yet (no space); their groups get COORDINATOR_LOAD_IN_PROGRESS until they open and load");
            tokio::spawn(self.clone().load_when_open(waiting));
        }
        tracing::info!(target: "weir::groups", partitions = topic.partition_count(), groups, offsets, elapsed_ms = started.elapsed().as_millis() as u64, "group coordinator loaded {OFFSETS_TOPIC}");
    }

    /// Keeps the coordinator in step with the leadership of `__consumer_offsets`: a partition
    /// this broker now leads is loaded from its (replicated) log and its groups served here;
    /// one another broker leads is unloaded, its groups told NOT_COORDINATOR.
    pub(crate) async fn follow_offsets_leadership(self: &Arc<Self>) {
        if self.image().topic(OFFSETS_TOPIC).is_none() {
            return;
        }
        if self.coordinator.partitions() == 0 && self.ensure_offsets_topic().await.is_err() {
            return;
        }
        // One load or unload at a time, never beside the topic's creation and first load.
        let _serial = self.offsets_topic_creation.lock().await;
        let image = self.image();
        let Some(topic) = image.topic(OFFSETS_TOPIC) else {
            return;
        };
        for (index, state) in (0i32..).zip(&topic.partitions) {
            let led = state.leader == self.identity.node_id
                && self
                    .partitions
                    .get(OFFSETS_TOPIC, index)
                    .is_some_and(|p| p.is_leader());
            match (led, self.coordinator.is_loaded(index)) {
                (true, false) => {
                    let (groups, offsets) = self.load_offsets_partition(index).await;
                    tracing::info!(target: "weir::groups", partition = index, groups, offsets, leader_epoch = state.leader_epoch, "now coordinating the groups of this {OFFSETS_TOPIC} partition");
                }
                (false, _) => self.coordinator.unload(index),
                (true, true) => {}
            }
        }
    }
}
