//! The partitions this broker hosts, kept in step with the metadata image: logs are opened for
//! new partitions and deleted with their topics.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use weir_controller::{MetadataImage, TopicImage, Uuid};
use weir_log::storage::Storage;
use weir_log::{Clock, Log};

use crate::config::BrokerConfig;
use crate::partition::{storage_failure, Partition};

/// File in each partition directory naming the topic id it belongs to, so a directory left by a
/// deleted topic is never mistaken for a recreated one.
const PARTITION_METADATA_FILE: &str = "partition.metadata";
/// Threads that open (and recover) partitions at once; more would only contend for the disk.
const OPEN_THREADS_MAX: usize = 8;

/// Every hosted partition, by topic name and index.
pub struct PartitionRegistry {
    logs_dir: PathBuf,
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    config: BrokerConfig,
    partitions: RwLock<HashMap<(String, i32), Arc<Partition>>>,
    /// Held while syncing, with the `applied_count` of the newest image synced: concurrent
    /// metadata changes sync one at a time, and an older image never undoes a newer one.
    synced: Mutex<Option<u64>>,
}

fn partition_dir_name(topic: &str, index: i32) -> String {
    format!("{topic}-{index}")
}

impl PartitionRegistry {
    /// A registry over `logs_dir`; nothing is opened until [`PartitionRegistry::sync`].
    pub fn new(
        logs_dir: PathBuf,
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
        config: BrokerConfig,
    ) -> PartitionRegistry {
        PartitionRegistry {
            logs_dir,
            storage,
            clock,
            config,
            partitions: RwLock::new(HashMap::new()),
            synced: Mutex::new(None),
        }
    }

    /// The partition `index` of `topic`, if hosted here.
    pub fn get(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        let map = self.partitions.read().unwrap_or_else(|e| e.into_inner());
        map.get(&(topic.to_string(), index)).cloned()
    }

    /// Every hosted partition.
    pub fn all(&self) -> Vec<Arc<Partition>> {
        let map = self.partitions.read().unwrap_or_else(|e| e.into_inner());
        map.values().cloned().collect()
    }

    /// Brings hosted partitions in line with `image`: opens (recovering) new ones, applies
    /// config changes, deletes partitions of deleted topics and stale directories.
    pub fn sync(&self, image: &MetadataImage) {
        let mut synced = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        if synced.is_some_and(|applied| applied > image.applied_count) {
            return;
        }
        *synced = Some(image.applied_count);
        let wanted: HashMap<String, &TopicImage> =
            image.topics().map(|t| (t.name.clone(), t)).collect();
        let removed: Vec<Arc<Partition>> = {
            let mut map = self.partitions.write().unwrap_or_else(|e| e.into_inner());
            let stale: Vec<(String, i32)> = map
                .iter()
                .filter(|(_, p)| {
                    wanted
                        .get(&p.topic)
                        .is_none_or(|t| t.topic_id != p.topic_id)
                })
                .map(|(k, _)| k.clone())
                .collect();
            stale.iter().filter_map(|k| map.remove(k)).collect()
        };
        for partition in removed {
            tracing::info!(target: "weir::broker", topic = %partition.topic, partition = partition.index, "deleting partition");
            if let Err(error) = self.storage.remove_dir_all(&partition.dir) {
                storage_failure(&partition.dir, &error.to_string());
            }
        }
        self.remove_stale_dirs(&wanted);
        let mut to_open: Vec<(&TopicImage, i32)> = Vec::new();
        for topic in wanted.values() {
            let settings = self.config.topic_settings(&topic.configs);
            for index in 0..topic.partitions {
                match self.get(&topic.name, index) {
                    Some(existing) if existing.settings() != settings => {
                        existing.update_settings(settings)
                    }
                    Some(_) => {}
                    None => to_open.push((*topic, index)),
                }
            }
        }
        // Recovery reads whole segments: open partitions on several threads at once.
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, OPEN_THREADS_MAX);
        let chunk = to_open.len().div_ceil(threads).max(1);
        std::thread::scope(|scope| {
            for part in to_open.chunks(chunk) {
                scope.spawn(move || {
                    for (topic, index) in part {
                        let partition = Arc::new(self.open_partition(topic, *index));
                        let mut map = self.partitions.write().unwrap_or_else(|e| e.into_inner());
                        map.insert((topic.name.clone(), *index), partition);
                    }
                });
            }
        });
    }

    fn open_partition(&self, topic: &TopicImage, index: i32) -> Partition {
        let dir = self.logs_dir.join(partition_dir_name(&topic.name, index));
        let settings = self.config.topic_settings(&topic.configs);
        let started = std::time::Instant::now();
        let opened = self
            .write_partition_metadata(&dir, topic.topic_id)
            .and_then(|()| {
                Log::open(&dir, self.storage.clone(), self.clock.clone(), settings.log)
                    .map_err(|e| e.to_string())
            });
        let (log, report) = match opened {
            Ok(opened) => opened,
            Err(error) => storage_failure(&dir, &error),
        };
        tracing::info!(
            target: "weir::broker",
            topic = %topic.name,
            partition = index,
            log_end_offset = log.log_end_offset(),
            clean = report.clean,
            truncated_bytes = report.truncated_bytes,
            segments_scanned = report.segments_scanned,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "partition opened"
        );
        Partition::new(
            topic.name.clone(),
            topic.topic_id,
            index,
            dir,
            log,
            settings,
        )
    }

    fn write_partition_metadata(&self, dir: &Path, topic_id: Uuid) -> Result<(), String> {
        let path = dir.join(PARTITION_METADATA_FILE);
        let content = format!("version: 0\ntopic_id: {topic_id}\n");
        if self.storage.read(&path).ok().as_deref() == Some(content.as_bytes()) {
            return Ok(());
        }
        self.storage
            .create_dir_all(dir)
            .map_err(|e| e.to_string())?;
        self.storage
            .write_atomic(&path, content.as_bytes())
            .map_err(|e| e.to_string())
    }

    /// Deletes partition directories that belong to no current topic (a topic deleted while the
    /// broker was down, or a delete interrupted by a crash).
    fn remove_stale_dirs(&self, wanted: &HashMap<String, &TopicImage>) {
        let Ok(names) = self.storage.list(&self.logs_dir) else {
            return;
        };
        let expected: HashSet<String> = wanted
            .values()
            .flat_map(|t| (0..t.partitions).map(move |i| partition_dir_name(&t.name, i)))
            .collect();
        let ids: BTreeMap<String, Uuid> = wanted
            .values()
            .flat_map(|t| {
                (0..t.partitions).map(move |i| (partition_dir_name(&t.name, i), t.topic_id))
            })
            .collect();
        for name in names {
            let dir = self.logs_dir.join(&name);
            let recorded = self.storage.read(&dir.join(PARTITION_METADATA_FILE)).ok();
            let matches = expected.contains(&name)
                && ids.get(&name).is_some_and(|id| {
                    recorded
                        .as_deref()
                        .is_none_or(|r| String::from_utf8_lossy(r).contains(&id.to_string()))
                });
            if !matches {
                tracing::info!(target: "weir::broker", dir = %dir.display(), "removing directory of a deleted topic");
                if let Err(error) = self.storage.remove_dir_all(&dir) {
                    storage_failure(&dir, &error.to_string());
                }
            }
        }
    }

    /// Runs retention, segment aging and producer expiry on every partition.
    pub fn run_retention(&self) {
        let expiration_ms = self.config.producer_id_expiration_ms();
        for partition in self.all() {
            let mut log = partition.log_mut();
            let result = log.roll_if_aged().and_then(|()| log.enforce_retention());
            if let Err(error) = result {
                storage_failure(&partition.dir, &error.to_string());
            }
            if log.has_unsynced_rolled() {
                // A segment rolled by age or retention: make it durable here, off the hot path.
                let ticket = log.flush_ticket();
                if let Err(error) = ticket.sync() {
                    storage_failure(&partition.dir, &error.to_string());
                }
                log.flush_done(ticket.end_offset);
            }
            let expired = log.expire_producers(expiration_ms);
            if expired > 0 {
                tracing::debug!(target: "weir::broker", topic = %partition.topic, partition = partition.index, expired, "expired idle producers");
            }
        }
    }

    /// Writes every partition's recovery checkpoint.
    pub fn checkpoint(&self) {
        for partition in self.all() {
            if let Err(error) = partition.log().write_checkpoint() {
                storage_failure(&partition.dir, &error.to_string());
            }
        }
    }

    /// Fsyncs and closes every log with a clean-shutdown marker.
    pub fn close_all(&self) {
        let all = self.all();
        let chunk = all.len().div_ceil(OPEN_THREADS_MAX).max(1);
        // Each close is a few fsyncs: run them on several threads so thousands of partitions
        // still stop well within the shutdown deadline.
        std::thread::scope(|scope| {
            for part in all.chunks(chunk) {
                scope.spawn(move || {
                    for partition in part {
                        if let Err(error) = partition.log_mut().close() {
                            storage_failure(&partition.dir, &error.to_string());
                        }
                    }
                });
            }
        });
    }

    /// Number of hosted partitions.
    pub fn count(&self) -> usize {
        self.partitions
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}
