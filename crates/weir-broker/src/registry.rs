//! The partition replicas this broker hosts, kept in step with the metadata image: logs are
//! opened for partitions assigned here, each takes the role (leader or follower) the image
//! gives it, replicas are deleted with their topics or when a reassignment moves them away, and
//! directories the metadata does not know at startup are moved aside, never deleted.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use weir_log::{Clock, Log, LogError};
use weir_metadata::{MetadataImage, TopicImage, Uuid};
use weir_storage::FileCache;

use crate::config::{BrokerConfig, DynamicConfigs, TopicSettings};
use crate::partition::{storage_failure, Partition};
use crate::rate_limit::LineLimit;

/// File in each partition directory naming the topic id it belongs to, so a directory left by a
/// deleted topic is never mistaken for a recreated one.
const PARTITION_METADATA_FILE: &str = "partition.metadata";
/// Threads that open (and recover) partitions at once; more would only contend for the disk.
const OPEN_THREADS_MAX: usize = 8;
/// Suffix of a partition directory being deleted (its topic was deleted); finished at startup.
const DELETE_SUFFIX: &str = "-delete";
/// Suffix of a directory the metadata does not know, moved aside for an operator to inspect.
const STRAY_SUFFIX: &str = "-stray";
/// Longest file name the file system allows.
const FILE_NAME_BYTES_MAX: usize = 255;

/// Lines about partitions that cannot open for lack of space.
static OPEN_WARNINGS: LineLimit = LineLimit::new();

/// Every hosted partition, by topic name and index.
pub struct PartitionRegistry {
    logs_dir: PathBuf,
    files: Arc<FileCache>,
    clock: Arc<dyn Clock>,
    config: BrokerConfig,
    /// This broker's id, whose dynamic configs apply.
    node_id: i32,
    partitions: RwLock<HashMap<(String, i32), Arc<Partition>>>,
    /// Held while syncing, with the `applied_count` of the newest image synced: concurrent
    /// metadata changes sync one at a time, and an older image never undoes a newer one.
    synced: Mutex<Option<Arc<MetadataImage>>>,
}

/// Whether broker `node_id` holds a replica of partition `index` of `topic`.
fn hosts(topic: &TopicImage, index: i32, node_id: i32) -> bool {
    topic
        .partition(index)
        .is_some_and(|p| p.replicas.contains(&node_id))
}

/// The partitions of `topic` broker `node_id` holds a replica of.
fn hosted_indexes(topic: &TopicImage, node_id: i32) -> impl Iterator<Item = i32> + '_ {
    (0i32..)
        .zip(&topic.partitions)
        .filter(move |(_, p)| p.replicas.contains(&node_id))
        .map(|(index, _)| index)
}

fn partition_dir_name(topic: &str, index: i32) -> String {
    format!("{topic}-{index}")
}

/// `name.<random id><suffix>`, cut so the whole fits a file name (as Kafka names them).
fn aside_name(name: &str, suffix: &str) -> String {
    let tag = format!(".{}{suffix}", Uuid::new_v4().simple());
    let mut keep = name.len().min(FILE_NAME_BYTES_MAX - tag.len());
    while !name.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{tag}", &name[..keep])
}

impl PartitionRegistry {
    /// A registry over `logs_dir`; nothing is opened until [`PartitionRegistry::sync`].
    pub fn new(
        logs_dir: PathBuf,
        files: Arc<FileCache>,
        clock: Arc<dyn Clock>,
        config: BrokerConfig,
        node_id: i32,
    ) -> PartitionRegistry {
        PartitionRegistry {
            node_id,
            logs_dir,
            files,
            clock,
            config,
            partitions: RwLock::new(HashMap::new()),
            synced: Mutex::new(None),
        }
    }

    /// The node's clock: what its logs, produce checks and group coordinator read the time
    /// from.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The directory holding every partition's log (Kafka's one log dir).
    pub fn logs_dir(&self) -> &Path {
        &self.logs_dir
    }

    /// Bytes free for the logs, if the file system says.
    pub fn available_bytes(&self) -> Option<u64> {
        self.files.storage().available_bytes(&self.logs_dir).ok()
    }

    /// The partition `index` of `topic`, if hosted here.
    pub fn get(&self, topic: &str, index: i32) -> Option<Arc<Partition>> {
        let map = self.partitions.read().unwrap_or_else(|e| e.into_inner());
        map.get(&(topic.to_string(), index)).cloned()
    }

    /// Calls `f` with every hosted partition under the registry's read lock, cloning no
    /// `Arc` (cheap at any count); `f` must not open, delete or look up partitions.
    pub fn visit<R>(&self, f: impl FnOnce(&mut dyn Iterator<Item = &Partition>) -> R) -> R {
        let map = self.partitions.read().unwrap_or_else(|e| e.into_inner());
        f(&mut map.values().map(Arc::as_ref))
    }

    /// Every hosted partition.
    pub fn all(&self) -> Vec<Arc<Partition>> {
        let map = self.partitions.read().unwrap_or_else(|e| e.into_inner());
        map.values().cloned().collect()
    }

    /// Brings hosted partitions in line with `image`: opens (recovering) new ones, applies
    /// config changes, deletes partitions of deleted topics, and moves unknown directories
    /// aside. Partitions that cannot open for lack of space are retried on the next call.
    /// Blocking.
    pub fn sync(&self, image: &Arc<MetadataImage>) {
        let mut synced = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        if synced
            .as_ref()
            .is_some_and(|s| s.applied_count > image.applied_count)
        {
            return;
        }
        let previous = synced.replace(image.clone());
        let wanted: HashMap<String, &TopicImage> =
            image.topics().map(|t| (t.name.clone(), t)).collect();
        let node_id = self.node_id;
        let removed: Vec<(Arc<Partition>, bool)> = {
            let mut map = self.partitions.write().unwrap_or_else(|e| e.into_inner());
            let stale: Vec<((String, i32), bool)> = map
                .iter()
                .filter_map(|(key, p)| match wanted.get(&p.topic) {
                    Some(t) if t.topic_id == p.topic_id => {
                        (!hosts(t, p.index, node_id)).then(|| (key.clone(), false))
                    }
                    _ => Some((key.clone(), true)),
                })
                .collect();
            stale
                .into_iter()
                .filter_map(|(key, deleted)| map.remove(&key).map(|p| (p, deleted)))
                .collect()
        };
        for (partition, topic_deleted) in removed {
            partition.mark_deleted();
            if topic_deleted {
                tracing::info!(target: "weir::broker", topic = %partition.topic, partition = partition.index, "deleting partition of a deleted topic");
                self.delete_dir(&partition.dir);
            } else {
                // A reassignment moved the replica away: the new replicas were in sync before
                // this one was removed, so its copy is no longer needed.
                tracing::info!(target: "weir::broker", topic = %partition.topic, partition = partition.index, "deleting a replica reassigned to other brokers");
                self.delete_dir(&partition.dir);
            }
        }
        self.tidy_dirs(&wanted);
        let dynamic = DynamicConfigs::of(image, node_id);
        // A topic's settings are resolved again only when its overrides or a dynamic level
        // changed since the last image synced (most images change partitions only).
        let levels_changed = previous
            .as_ref()
            .is_none_or(|previous| DynamicConfigs::of(previous, node_id) != dynamic);
        let mut to_open: Vec<(&TopicImage, i32, TopicSettings)> = Vec::new();
        for topic in wanted.values() {
            let resolved = !levels_changed
                && previous
                    .as_ref()
                    .and_then(|previous| previous.topic(&topic.name))
                    .is_some_and(|t| t.topic_id == topic.topic_id && t.configs == topic.configs);
            let mut settings = None;
            let mut settings = || {
                *settings.get_or_insert_with(|| self.config.topic_settings(dynamic, &topic.configs))
            };
            for index in hosted_indexes(topic, node_id) {
                match self.get(&topic.name, index) {
                    Some(_) if resolved => {}
                    Some(existing) => {
                        let settings = settings();
                        if existing.settings() != settings {
                            existing.update_settings(settings)
                        }
                    }
                    None => to_open.push((*topic, index, settings())),
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
                    for (topic, index, settings) in part {
                        let Some(partition) = self.open_partition(topic, *index, *settings) else {
                            continue;
                        };
                        let mut map = self.partitions.write().unwrap_or_else(|e| e.into_inner());
                        map.insert((topic.name.clone(), *index), Arc::new(partition));
                    }
                });
            }
        });
        for topic in wanted.values() {
            for (index, assigned) in (0i32..).zip(&topic.partitions) {
                if let Some(partition) = self.get(&topic.name, index) {
                    partition.follow(assigned, node_id, std::time::Instant::now());
                }
            }
        }
    }

    /// Opens every partition of the last image synced that is not open yet, and takes up
    /// leaderships not taken yet (after a failure for lack of space). Blocking.
    pub fn retry_pending(&self) {
        let image = self
            .synced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(image) = image else { return };
        let node_id = self.node_id;
        let pending = image.topics().any(|t| {
            hosted_indexes(t, node_id).any(|i| {
                self.get(&t.name, i).is_none_or(|p| {
                    t.partition(i).is_some_and(|a| a.leader == node_id) && !p.is_leader()
                })
            })
        });
        if pending {
            // Force a resync of the same image.
            *self.synced.lock().unwrap_or_else(|e| e.into_inner()) = None;
            self.sync(&image);
        }
    }

    fn open_partition(
        &self,
        topic: &TopicImage,
        index: i32,
        settings: TopicSettings,
    ) -> Option<Partition> {
        let dir = self.logs_dir.join(partition_dir_name(&topic.name, index));
        let started = std::time::Instant::now();
        let opened = self
            .write_partition_metadata(&dir, topic.topic_id)
            .map_err(LogError::from)
            .and_then(|()| Log::open(&dir, self.files.clone(), self.clock.clone(), settings.log));
        let (log, report) = match opened {
            Ok(opened) => opened,
            Err(LogError::OutOfResources(error)) => {
                if let Some(suppressed) = OPEN_WARNINGS.admit() {
                    tracing::error!(target: "weir::storage", topic = %topic.name, partition = index, %error, suppressed, "partition cannot open for lack of space; retrying");
                }
                return None;
            }
            Err(error) => storage_failure(&dir, &error.to_string()),
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
        Some(Partition::new(
            topic.name.clone(),
            topic.topic_id,
            index,
            dir,
            log,
            settings,
        ))
    }

    fn write_partition_metadata(&self, dir: &Path, topic_id: Uuid) -> std::io::Result<()> {
        let storage = self.files.storage();
        let path = dir.join(PARTITION_METADATA_FILE);
        let content = format!("version: 0\ntopic_id: {topic_id}\n");
        if storage.read(&path).ok().as_deref() == Some(content.as_bytes()) {
            return Ok(());
        }
        storage.create_dir_all(dir)?;
        storage.write_atomic(&path, content.as_bytes())
    }

    /// Deletes a partition directory crash-safely: renamed to `*-delete` first (atomic), so an
    /// interrupted delete is finished at the next start instead of looking like a stray.
    fn delete_dir(&self, dir: &Path) {
        self.files.forget_dir(dir);
        let storage = self.files.storage();
        let name = dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let doomed = self.logs_dir.join(aside_name(&name, DELETE_SUFFIX));
        let result = storage
            .rename(dir, &doomed)
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(e),
            })
            .and_then(|()| storage.remove_dir_all(&doomed));
        self.files.forget_dir(dir);
        if let Err(error) = result {
            storage_failure(dir, &error.to_string());
        }
    }

    /// Finishes interrupted deletes and moves directories that belong to no current topic
    /// aside as `*-stray` (a topic deleted while this data was elsewhere, a copy from another
    /// broker): data the metadata does not know is kept for an operator, never deleted.
    fn tidy_dirs(&self, wanted: &HashMap<String, &TopicImage>) {
        let storage = self.files.storage();
        let Ok(names) = storage.list(&self.logs_dir) else {
            return;
        };
        let hosted: HashSet<String> = {
            let map = self.partitions.read().unwrap_or_else(|e| e.into_inner());
            map.keys().map(|(t, i)| partition_dir_name(t, *i)).collect()
        };
        let expected: HashMap<String, Uuid> = wanted
            .values()
            .flat_map(|t| {
                hosted_indexes(t, self.node_id)
                    .map(move |i| (partition_dir_name(&t.name, i), t.topic_id))
            })
            .collect();
        let mut strays = BTreeSet::new();
        for name in names {
            let dir = self.logs_dir.join(&name);
            if name.ends_with(DELETE_SUFFIX) {
                tracing::info!(target: "weir::broker", dir = %dir.display(), "finishing an interrupted partition delete");
                if let Err(error) = storage.remove_dir_all(&dir) {
                    storage_failure(&dir, &error.to_string());
                }
                continue;
            }
            if name.ends_with(STRAY_SUFFIX) || hosted.contains(&name) {
                continue;
            }
            let recorded = storage.read(&dir.join(PARTITION_METADATA_FILE)).ok();
            let belongs = expected.get(&name).is_some_and(|id| {
                recorded
                    .as_deref()
                    .is_none_or(|r| String::from_utf8_lossy(r).contains(&id.to_string()))
            });
            if !belongs {
                strays.insert(name);
            }
        }
        for name in strays {
            self.move_aside(&self.logs_dir.join(&name));
        }
    }

    /// Renames a partition directory the metadata does not assign here to `*-stray`.
    fn move_aside(&self, dir: &Path) {
        let name = dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let aside = self.logs_dir.join(aside_name(&name, STRAY_SUFFIX));
        tracing::warn!(target: "weir::broker", dir = %dir.display(), moved_to = %aside.display(), "the metadata assigns this broker no such partition; moved aside, not deleted");
        self.files.forget_dir(dir);
        if let Err(error) = self.files.storage().rename(dir, &aside) {
            storage_failure(dir, &error.to_string());
        }
        self.files.forget_dir(dir);
    }

    /// Runs retention, segment aging and producer expiry (of producers idle for
    /// `expiration_ms`) on every partition. Segment files are deleted and rolled segments
    /// fsynced after the partition's lock is released. Blocking.
    pub fn run_retention(&self, expiration_ms: i64) {
        for partition in self.all() {
            let (removals, rolled, expired) = {
                let mut log = partition.log_mut();
                let removals = log.roll_if_aged().and_then(|()| log.enforce_retention());
                let expired = log.expire_producers(expiration_ms);
                (removals, log.has_unsynced_rolled(), expired)
            };
            match removals {
                Ok(removals) => {
                    for removal in removals {
                        if let Err(error) = removal.remove() {
                            storage_failure(&partition.dir, &error.to_string());
                        }
                    }
                }
                Err(LogError::OutOfResources(error)) => {
                    tracing::warn!(target: "weir::storage", topic = %partition.topic, partition = partition.index, %error, "segment roll for retention postponed");
                }
                Err(error) => storage_failure(&partition.dir, &error.to_string()),
            }
            if rolled {
                partition.sync_now();
            }
            if expired > 0 {
                tracing::debug!(target: "weir::broker", topic = %partition.topic, partition = partition.index, expired, "expired idle producers");
            }
        }
    }

    /// Writes every partition's recovery checkpoint. Blocking.
    pub fn checkpoint(&self) {
        for partition in self.all() {
            partition.write_checkpoint();
        }
    }

    /// Fsyncs and closes every log with a clean-shutdown marker. Blocking.
    pub fn close_all(&self) {
        let all = self.all();
        let chunk = all.len().div_ceil(OPEN_THREADS_MAX).max(1);
        // Each close is a few fsyncs: run them on several threads so thousands of partitions
        // still stop well within the shutdown deadline.
        std::thread::scope(|scope| {
            for part in all.chunks(chunk) {
                scope.spawn(move || part.iter().for_each(|p| p.close()));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aside_names_fit_a_file_name() {
        let long = "t".repeat(249) + "-12";
        let name = aside_name(&long, STRAY_SUFFIX);
        assert!(name.len() <= FILE_NAME_BYTES_MAX);
        assert!(name.ends_with(STRAY_SUFFIX));
        assert!(aside_name("orders-0", DELETE_SUFFIX).starts_with("orders-0."));
    }
}
