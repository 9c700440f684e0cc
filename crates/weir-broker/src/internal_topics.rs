//! The coordinators' internal topics (`__consumer_offsets` for the group coordinator,
//! `__transaction_state` for the transaction coordinator, `__share_group_state` for the share
//! coordinator): each topic's creation on the first
//! request that needs it, as Kafka creates them, and the loading and unloading of its
//! partitions as their leadership moves (their records are appended and read through
//! [`crate::coordinator_log`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use weir_coordinator::RuntimeError;
use weir_metadata::requests::CreateTopic;
use weir_metadata::{ControllerError, NewTopic};

use crate::broker::Broker;
use crate::config::InternalTopicSpec;
use crate::coordinator_log::InternalTopic;

/// How often partitions of an internal topic that could not open are checked again.
const OPEN_CHECK_MS: u64 = 1_000;

impl Broker {
    /// The replicas an internal topic is created with: as `spec` asks, at most the live
    /// brokers (a single node gets 1).
    fn internal_replication_factor(&self, spec: &InternalTopicSpec) -> i16 {
        let live = self.image().brokers().filter(|b| !b.fenced).count().max(1);
        spec.replication_factor
            .min(i16::try_from(live).unwrap_or(i16::MAX))
    }

    /// Makes sure `topic`'s coordinator can serve: creates the topic on the first request
    /// that needs it (as Kafka does), then loads its partitions. Concurrent callers wait for
    /// the one loading them.
    ///
    /// The creation holds no lock: it waits until this broker applies the image holding it,
    /// and the task applying images takes `topic.serial` to follow the topic's leadership, so
    /// a creation under that lock would stall every later image here until the wait expired
    /// (brokers creating the topic at once, one refused as it already exists, saw 30 s).
    pub(crate) async fn ensure_internal_topic(
        self: &Arc<Self>,
        topic: &Arc<InternalTopic>,
    ) -> Result<(), RuntimeError> {
        if topic.runtime.partitions() > 0 {
            return Ok(());
        }
        self.create_internal_topic(topic).await?;
        let _loading = topic.serial.lock().await;
        if topic.runtime.partitions() > 0 {
            return Ok(());
        }
        self.load_internal_topic(topic).await;
        Ok(())
    }

    /// Creates `topic` unless the image applied here holds it; already existing is fine.
    async fn create_internal_topic(
        self: &Arc<Self>,
        topic: &Arc<InternalTopic>,
    ) -> Result<(), RuntimeError> {
        let name = topic.name();
        if self.image().topic(name).is_none() {
            let spec = &topic.spec;
            let replication_factor = self.internal_replication_factor(spec);
            let mut configs = BTreeMap::new();
            // Compaction keeps the latest record of each key: what the coordinator needs.
            configs.insert("cleanup.policy".to_string(), "compact".to_string());
            configs.insert("segment.bytes".to_string(), spec.segment_bytes.to_string());
            if let Some(min_insync_replicas) = spec.min_insync_replicas {
                configs.insert(
                    "min.insync.replicas".to_string(),
                    min_insync_replicas.min(replication_factor).to_string(),
                );
            }
            let new_topic = NewTopic {
                name: name.to_string(),
                partitions: spec.partitions,
                replication_factor,
                configs,
                assignments: Vec::new(),
            };
            match self
                .change_metadata(self.controller.ask(CreateTopic {
                    topic: new_topic,
                    validate_only: false,
                    quota: None,
                }))
                .await
                .map(|created| created.value)
            {
                Ok(created) => {
                    tracing::info!(target: "weir::coordinator", topic = name, partitions = created.partition_count(), replication_factor, "created an internal topic");
                }
                Err(ControllerError::TopicAlreadyExists(_)) => {}
                Err(error) => {
                    tracing::warn!(target: "weir::coordinator", topic = name, %error, "could not create an internal topic");
                    return Err(RuntimeError::NotAvailable);
                }
            }
        }
        Ok(())
    }

    /// Loads one partition of `topic`, led here at `leader_epoch`. A partition that cannot be read stops the process:
    /// what its coordinator kept would otherwise silently restart from nothing.
    async fn load_internal_partition(
        self: &Arc<Self>,
        topic: &Arc<InternalTopic>,
        partition: i32,
        leader_epoch: i32,
    ) -> String {
        let runtime = topic.runtime.clone();
        let loaded =
            tokio::task::spawn_blocking(move || runtime.load(partition, leader_epoch)).await;
        match loaded {
            Ok(Ok(held)) => held,
            Ok(Err(error)) => crate::partition::storage_failure(
                std::path::Path::new(&format!("{}-{partition}", topic.name())),
                &error,
            ),
            Err(error) => {
                tracing::error!(target: "weir::coordinator", topic = topic.name(), partition, %error, "loading task failed");
                String::new()
            }
        }
    }

    /// Loads the `waiting` partitions of `topic` as each opens (the registry retries
    /// partitions that could not open for lack of space), until all are loaded, the topic
    /// goes, or shutdown.
    async fn load_when_open(self: Arc<Self>, topic: Arc<InternalTopic>, mut waiting: Vec<i32>) {
        let mut shutdown = self.shutdown.clone();
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(OPEN_CHECK_MS));
        let name = topic.name();
        while !waiting.is_empty() {
            tokio::select! {
                _ = tick.tick() => {}
                _ = crate::shutdown::stopping(&mut shutdown) => return,
            }
            if self.image().topic(name).is_none() || topic.runtime.partitions() == 0 {
                return;
            }
            let mut still = Vec::new();
            for partition in waiting {
                if self.partitions.get(name, partition).is_some() {
                    let leader_epoch = self
                        .image()
                        .topic(name)
                        .and_then(|t| t.partition(partition))
                        .map_or(0, |p| p.leader_epoch);
                    let held = self
                        .load_internal_partition(&topic, partition, leader_epoch)
                        .await;
                    tracing::info!(target: "weir::coordinator", topic = name, partition, held, "loaded an internal topic's partition once it opened");
                } else {
                    still.push(partition);
                }
            }
            waiting = still;
        }
    }

    /// Loads every partition of `topic` led here (at startup, and after creating it). Keys of
    /// a partition are served once it is loaded; until then they get
    /// COORDINATOR_LOAD_IN_PROGRESS.
    async fn load_internal_topic(self: &Arc<Self>, topic: &Arc<InternalTopic>) {
        let name = topic.name();
        let Some(image_topic) = self.image().topic(name).cloned() else {
            return;
        };
        topic.runtime.start(image_topic.partition_count());
        let started = std::time::Instant::now();
        let mut loaded = 0;
        let mut waiting = Vec::new();
        for partition in 0..image_topic.partition_count() {
            let state = image_topic.partition(partition);
            // Another broker leads it: that broker coordinates its keys.
            if state.is_some_and(|p| p.leader != self.identity.node_id) {
                continue;
            }
            if self.partitions.get(name, partition).is_none() {
                // Not open yet (no space for its files): its keys wait until it opens.
                waiting.push(partition);
                continue;
            }
            let leader_epoch = state.map_or(0, |p| p.leader_epoch);
            let held = self
                .load_internal_partition(topic, partition, leader_epoch)
                .await;
            tracing::debug!(target: "weir::coordinator", topic = name, partition, held, "loaded an internal topic's partition");
            loaded += 1;
        }
        if !waiting.is_empty() {
            tracing::warn!(target: "weir::coordinator", topic = name, partitions = waiting.len(), "partitions of an internal topic not open yet (no space); their keys get COORDINATOR_LOAD_IN_PROGRESS until they open and load");
            tokio::spawn(self.clone().load_when_open(topic.clone(), waiting));
        }
        tracing::info!(target: "weir::coordinator", topic = name, partitions = image_topic.partition_count(), loaded, elapsed_ms = started.elapsed().as_millis() as u64, "coordinator loaded the partitions of its internal topic led here");
    }

    /// Keeps every coordinator in step with the leadership of its internal topic: a
    /// partition this broker now leads is loaded from its (replicated) log and its keys
    /// served here; one another broker leads is unloaded, its keys told NOT_COORDINATOR.
    pub(crate) async fn follow_internal_topics(self: &Arc<Self>) {
        for topic in [
            &self.offsets_topic,
            &self.transaction_topic,
            &self.share_state_topic,
        ] {
            self.follow_leadership(topic).await;
        }
    }

    /// [`Broker::follow_internal_topics`] for one topic.
    async fn follow_leadership(self: &Arc<Self>, topic: &Arc<InternalTopic>) {
        let name = topic.name();
        if self.image().topic(name).is_none() {
            return;
        }
        if topic.runtime.partitions() == 0 && self.ensure_internal_topic(topic).await.is_err() {
            return;
        }
        let _serial = topic.serial.lock().await;
        let image = self.image();
        let Some(image_topic) = image.topic(name) else {
            return;
        };
        for (index, state) in (0i32..).zip(&image_topic.partitions) {
            let led = state.leader == self.identity.node_id
                && self
                    .partitions
                    .get(name, index)
                    .is_some_and(|p| p.is_leader());
            match (led, topic.runtime.loaded_epoch(index)) {
                (true, None) => {
                    let held = self
                        .load_internal_partition(topic, index, state.leader_epoch)
                        .await;
                    tracing::info!(target: "weir::coordinator", topic = name, partition = index, held, leader_epoch = state.leader_epoch, "now coordinating the keys of this internal topic partition");
                }
                (false, _) => {
                    if let Some(keys) = topic.runtime.unload(index) {
                        tracing::info!(target: "weir::coordinator", topic = name, partition = index, keys, "no longer coordinating the keys of this internal topic partition");
                    }
                }
                (true, Some(epoch)) if epoch < state.leader_epoch => {
                    topic.runtime.elected_again(index, state.leader_epoch);
                }
                (true, Some(_)) => {}
            }
        }
    }
}
