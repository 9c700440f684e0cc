//! `__consumer_offsets` for the group coordinator: the topic's creation on the first group
//! request and the loading of its partitions (its records are appended and read through
//! [`crate::coordinator_log`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use weir_coordinator::{GroupError, OFFSETS_TOPIC};
use weir_metadata::requests::CreateTopic;
use weir_metadata::{ControllerError, NewTopic};

use crate::broker::Broker;

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
                _ = crate::shutdown::stopping(&mut shutdown) => return,
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
