//! The controller: validates requests, turns them into commands, makes them durable through
//! the metadata log and publishes the new image.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;
use uuid::Uuid;

use weir_metadata::broker_config::check_runtime_broker_config;
use weir_metadata::topic_config::validate_topic_config;
use weir_metadata::{
    validate_topic_name, Committed, ConfigChange, ControllerError, MetadataCommand,
    MetadataControl, MetadataImage, NewTopic, Pending, TopicImage,
};

use crate::metadata_log::{MetadataLog, MetadataLogError};
use crate::relational::RelationalStore;

/// Producer ids reserved per metadata command; the broker hands them out from memory.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;
/// Most partitions one topic may have: each costs open files and memory on every start.
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;
/// Replication factor a single-node cluster can honour.
const REPLICATION_FACTOR_MAX: i16 = 1;

fn log_error(error: MetadataLogError) -> ControllerError {
    match error {
        MetadataLogError::NotAppended(e) => ControllerError::Storage(e),
        MetadataLogError::Fatal(e) => ControllerError::Fatal(e),
        corrupt @ MetadataLogError::Corrupt { .. } => {
            ControllerError::Fatal(std::io::Error::other(corrupt.to_string()))
        }
    }
}

struct State {
    log: Box<dyn MetadataLog>,
    image: MetadataImage,
    /// The relational copy of the image, when kept (`weir server` keeps one).
    relational: Option<RelationalStore>,
}

/// The single-node controller.
pub struct Controller {
    state: Mutex<State>,
    published: watch::Sender<Arc<MetadataImage>>,
    /// Most partitions the cluster may hold in total (set from the open-file limit).
    partitions_max: AtomicUsize,
}

impl Controller {
    /// Replays `log` into a fresh image.
    pub fn open(mut log: Box<dyn MetadataLog>) -> Result<Controller, ControllerError> {
        let mut image = MetadataImage::default();
        for command in log.replay().map_err(log_error)? {
            image.apply(&command);
        }
        tracing::info!(target: "weir::controller", commands = image.applied_count, topics = image.topics().count(), "metadata replayed");
        let (published, _) = watch::channel(Arc::new(image.clone()));
        Ok(Controller {
            state: Mutex::new(State {
                log,
                image,
                relational: None,
            }),
            published,
            partitions_max: AtomicUsize::new(usize::MAX),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Poisoning means a panic while applying; the image is only swapped after a full apply.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps a relational copy of the metadata in the SQLite database at `path` (created, or
    /// brought in line with the image), updated with every command from now on.
    pub fn keep_relational(&self, path: &std::path::Path) -> rusqlite::Result<()> {
        let mut state = self.state();
        let store = RelationalStore::open(path, &state.image)?;
        state.relational = Some(store);
        Ok(())
    }

    /// Refuses topic creations and partition additions that would take the cluster past
    /// `max` partitions in total (each partition holds open files on its broker).
    pub fn limit_partitions(&self, max: usize) {
        self.partitions_max.store(max, Ordering::Relaxed);
    }

    fn check_capacity(&self, image: &MetadataImage, adding: i32) -> Result<(), ControllerError> {
        let max = self.partitions_max.load(Ordering::Relaxed);
        let current: usize = image.topics().map(|t| t.partitions as usize).sum();
        if current + adding.max(0) as usize > max {
            return Err(ControllerError::InvalidPartitions(format!(
                "the cluster would hold {} partitions, more than the {max} its open-file limit allows; raise `ulimit -n` and restart",
                current + adding.max(0) as usize
            )));
        }
        Ok(())
    }

    /// The current image.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.published.borrow().clone()
    }

    fn commit(&self, state: &mut State, command: MetadataCommand) -> Result<(), ControllerError> {
        state.log.append(&command).map_err(log_error)?;
        state.image.apply(&command);
        if let Some(store) = state.relational.as_mut() {
            store.apply(&command, &state.image);
        }
        tracing::info!(target: "weir::controller", ?command, "metadata change");
        self.published.send_replace(Arc::new(state.image.clone()));
        Ok(())
    }

    fn topic_id(state: &State, name: &str) -> Result<Uuid, ControllerError> {
        state
            .image
            .topic(name)
            .map(|t| t.topic_id)
            .ok_or_else(|| ControllerError::UnknownTopic(name.to_string()))
    }

    fn check_configs<'a>(
        configs: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<(), ControllerError> {
        for (key, value) in configs {
            validate_topic_config(key, value).map_err(ControllerError::InvalidConfig)?;
        }
        Ok(())
    }

    /// Creates a topic with a fresh random id. With `validate_only` nothing changes.
    pub fn create_topic(
        &self,
        topic: NewTopic,
        validate_only: bool,
    ) -> Result<TopicImage, ControllerError> {
        validate_topic_name(&topic.name).map_err(ControllerError::InvalidTopic)?;
        if topic.partitions < 1 {
            return Err(ControllerError::InvalidPartitions(
                "Number of partitions was set to an invalid non-positive value.".into(),
            ));
        }
        if topic.partitions > PARTITIONS_PER_TOPIC_MAX {
            return Err(ControllerError::InvalidPartitions(format!(
                "Number of partitions {} is more than the {PARTITIONS_PER_TOPIC_MAX} a topic may have.",
                topic.partitions
            )));
        }
        let replicas = topic.replication_factor;
        if replicas < 1 {
            return Err(ControllerError::InvalidReplicationFactor(
                "Replication factor must be larger than 0, or -1 to use the default value.".into(),
            ));
        }
        if replicas > REPLICATION_FACTOR_MAX {
            return Err(ControllerError::InvalidReplicationFactor(format!(
                "Unable to replicate the partition {replicas} time(s): The target replication factor of {replicas} cannot be reached because only {REPLICATION_FACTOR_MAX} broker(s) are registered or some brokers have all their log directories cordoned."
            )));
        }
        Self::check_configs(&topic.configs)?;
        let mut state = self.state();
        if state.image.topic(&topic.name).is_some() {
            return Err(ControllerError::TopicAlreadyExists(topic.name));
        }
        // Kafka's rule: '.' and '_' collide in metric names, so names differing only there clash.
        let normalized = topic.name.replace('.', "_");
        if let Some(other) = state
            .image
            .topics()
            .find(|t| t.name.replace('.', "_") == normalized)
        {
            return Err(ControllerError::InvalidTopic(format!(
                "Topic '{}' collides with existing topic: {} (names may not differ only in '.' and '_')",
                topic.name, other.name
            )));
        }
        self.check_capacity(&state.image, topic.partitions)?;
        let image = TopicImage {
            name: topic.name,
            topic_id: Uuid::new_v4(),
            partitions: topic.partitions,
            replication_factor: topic.replication_factor,
            configs: topic.configs,
        };
        if !validate_only {
            let command = MetadataCommand::CreateTopic {
                name: image.name.clone(),
                topic_id: image.topic_id,
                partitions: image.partitions,
                replication_factor: image.replication_factor,
                configs: image.configs.clone(),
            };
            self.commit(&mut state, command)?;
        }
        Ok(image)
    }

    /// Deletes a topic by name.
    pub fn delete_topic(&self, name: &str) -> Result<TopicImage, ControllerError> {
        let mut state = self.state();
        let topic_id = Self::topic_id(&state, name)?;
        let topic = state
            .image
            .topic(name)
            .cloned()
            .ok_or_else(|| ControllerError::UnknownTopic(name.to_string()))?;
        self.commit(&mut state, MetadataCommand::DeleteTopic { topic_id })?;
        Ok(topic)
    }

    /// Raises a topic's partition count to `total` (Kafka's CreatePartitions meaning).
    pub fn create_partitions(
        &self,
        name: &str,
        total: i32,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let mut state = self.state();
        let topic_id = Self::topic_id(&state, name)?;
        let current = state.image.topic(name).map_or(0, |t| t.partitions);
        if total == current {
            return Err(ControllerError::InvalidPartitions(format!(
                "Topic already has {current} partition(s)."
            )));
        }
        if total < current {
            return Err(ControllerError::InvalidPartitions(format!(
                "The topic {name} currently has {current} partition(s); {total} would not be an increase."
            )));
        }
        if total > PARTITIONS_PER_TOPIC_MAX {
            return Err(ControllerError::InvalidPartitions(format!(
                "Number of partitions {total} is more than the {PARTITIONS_PER_TOPIC_MAX} a topic may have."
            )));
        }
        self.check_capacity(&state.image, total - current)?;
        if !validate_only {
            self.commit(
                &mut state,
                MetadataCommand::CreatePartitions { topic_id, total },
            )?;
        }
        Ok(())
    }

    /// Changes a topic's config overrides.
    pub fn alter_topic_config(
        &self,
        name: &str,
        change: ConfigChange,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        // Deleting a key that is not a config deletes nothing, as in Kafka.
        Self::check_configs(&change.set)?;
        let mut state = self.state();
        let topic_id = Self::topic_id(&state, name)?;
        if !validate_only {
            let command = MetadataCommand::AlterTopicConfig { topic_id, change };
            self.commit(&mut state, command)?;
        }
        Ok(())
    }

    /// Changes dynamic broker configs: the cluster-wide defaults (`node_id` `None`) or one
    /// broker's own; `replace` drops the level's configs not in `set`. Only the broker keys of
    /// topic configs and the settings marked dynamic change at runtime; any other key is
    /// refused, as is a bad value.
    pub fn alter_broker_config(
        &self,
        node_id: Option<i32>,
        change: ConfigChange,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let fixed: Vec<&str> = change
            .set
            .iter()
            .filter(|(name, value)| check_runtime_broker_config(name, value).is_none())
            .map(|(name, _)| name.as_str())
            .collect();
        if !fixed.is_empty() {
            return Err(ControllerError::InvalidRequest(format!(
                "Cannot update these configs dynamically: [{}]",
                fixed.join(", ")
            )));
        }
        for (name, value) in &change.set {
            if let Some(Err(why)) = check_runtime_broker_config(name, value) {
                return Err(ControllerError::InvalidRequest(why));
            }
        }
        let mut state = self.state();
        if !validate_only {
            let command = MetadataCommand::AlterBrokerConfig { node_id, change };
            self.commit(&mut state, command)?;
        }
        Ok(())
    }

    /// Reserves the next block of producer ids, durably, so no id is ever handed out twice.
    pub fn allocate_producer_ids(&self) -> Result<(i64, i64), ControllerError> {
        let mut state = self.state();
        let first = state.image.next_producer_id;
        self.commit(
            &mut state,
            MetadataCommand::AllocateProducerIds {
                first,
                count: PRODUCER_ID_BLOCK_SIZE,
            },
        )?;
        Ok((first, PRODUCER_ID_BLOCK_SIZE))
    }
}

/// The controller as the broker of the same process reaches it: each change runs on a
/// blocking thread (it fsyncs) and is answered once durable and applied to the image.
#[derive(Clone)]
pub struct LocalControl(Arc<Controller>);

impl LocalControl {
    /// Serves `controller` to a broker.
    pub fn new(controller: Arc<Controller>) -> LocalControl {
        LocalControl(controller)
    }

    fn run<T, F>(&self, change: F) -> Pending<T>
    where
        T: Send + 'static,
        F: FnOnce(&Controller) -> Result<T, ControllerError> + Send + 'static,
    {
        let controller = self.0.clone();
        Box::pin(async move {
            let joined = tokio::task::spawn_blocking(move || {
                let value = change(&controller)?;
                let applied_count = controller.image().applied_count;
                Ok(Committed {
                    value,
                    applied_count,
                })
            })
            .await;
            joined.unwrap_or_else(|e| Err(ControllerError::Storage(std::io::Error::other(e))))
        })
    }
}

impl MetadataControl for LocalControl {
    fn create_topic(&self, topic: NewTopic, validate_only: bool) -> Pending<TopicImage> {
        self.run(move |c| c.create_topic(topic, validate_only))
    }

    fn delete_topic(&self, name: String) -> Pending<TopicImage> {
        self.run(move |c| c.delete_topic(&name))
    }

    fn create_partitions(&self, name: String, total: i32, validate_only: bool) -> Pending<()> {
        self.run(move |c| c.create_partitions(&name, total, validate_only))
    }

    fn alter_topic_config(
        &self,
        name: String,
        change: ConfigChange,
        validate_only: bool,
    ) -> Pending<()> {
        self.run(move |c| c.alter_topic_config(&name, change, validate_only))
    }

    fn alter_broker_config(
        &self,
        node_id: Option<i32>,
        change: ConfigChange,
        validate_only: bool,
    ) -> Pending<()> {
        self.run(move |c| c.alter_broker_config(node_id, change, validate_only))
    }

    fn allocate_producer_ids(&self) -> Pending<(i64, i64)> {
        self.run(|c| c.allocate_producer_ids())
    }

    fn images(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.0.published.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::metadata_log::FileMetadataLog;

    fn open(dir: &std::path::Path) -> Controller {
        Controller::open(Box::new(
            FileMetadataLog::open(Arc::new(weir_storage::FsStorage), &dir.join("metadata.log"))
                .expect("log"),
        ))
        .expect("controller")
    }

    fn new_topic(name: &str, partitions: i32) -> NewTopic {
        NewTopic {
            name: name.into(),
            partitions,
            replication_factor: 1,
            configs: BTreeMap::new(),
        }
    }

    #[test]
    fn changes_survive_replay_and_ids_are_fresh() {
        let dir = tempfile::tempdir().expect("tempdir");
        let controller = open(dir.path());
        let first = controller
            .create_topic(new_topic("orders", 3), false)
            .expect("create");
        controller
            .create_partitions("orders", 5, false)
            .expect("grow");
        let set = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
        controller
            .alter_topic_config("orders", ConfigChange::setting(set), false)
            .expect("alter");
        let (pid, _) = controller.allocate_producer_ids().expect("pids");
        drop(controller);
        let controller = open(dir.path());
        let image = controller.image();
        let topic = image.topic("orders").expect("topic survives");
        assert_eq!((topic.partitions, topic.topic_id), (5, first.topic_id));
        assert_eq!(
            topic.configs.get("retention.ms").map(String::as_str),
            Some("1000")
        );
        assert!(
            controller.allocate_producer_ids().expect("pids").0 > pid,
            "producer ids never reused"
        );
        controller.delete_topic("orders").expect("delete");
        let again = controller
            .create_topic(new_topic("orders", 1), false)
            .expect("recreate");
        assert_ne!(again.topic_id, first.topic_id);
    }

    #[test]
    fn broker_configs_survive_replay_and_only_dynamic_keys_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let controller = open(dir.path());
        let one = |key: &str, value: &str| BTreeMap::from([(key.to_string(), value.to_string())]);
        let set = |key: &str, value: &str| ConfigChange::setting(one(key, value));
        controller
            .alter_broker_config(None, set("log.retention.ms", "7000"), false)
            .expect("cluster default");
        controller
            .alter_broker_config(Some(1), set("message.max.bytes", "2000"), false)
            .expect("this broker");
        let before = controller.image().applied_count;
        for (key, value) in [
            ("num.partitions", "2"),
            ("log.retention.ms", "soon"),
            ("no.such.key", "1"),
            ("remote.storage.enable", "false"),
            ("retention.ms", "1000"),
        ] {
            let refused = controller.alter_broker_config(Some(1), set(key, value), false);
            assert!(
                matches!(refused, Err(ControllerError::InvalidRequest(_))),
                "{key}={value}: {refused:?}"
            );
        }
        assert_eq!(
            controller.image().applied_count,
            before,
            "refusals change nothing"
        );
        controller
            .alter_broker_config(Some(1), set("log.segment.bytes", "2097152"), true)
            .expect("validate only");
        let image = controller.image();
        assert_eq!(
            image.broker_configs(Some(1)),
            &one("message.max.bytes", "2000")
        );
        drop(controller);
        let controller = open(dir.path());
        assert_eq!(
            controller.image().broker_configs(None),
            &one("log.retention.ms", "7000")
        );
        assert_eq!(
            controller.image().broker_configs(Some(1)),
            &one("message.max.bytes", "2000")
        );
        controller
            .alter_broker_config(
                Some(1),
                ConfigChange {
                    replace: true,
                    ..ConfigChange::default()
                },
                false,
            )
            .expect("replace with nothing");
        assert!(controller.image().broker_configs(Some(1)).is_empty());
    }

    #[test]
    fn refusals_change_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let controller = open(dir.path());
        controller
            .create_topic(new_topic("t", 1), false)
            .expect("create");
        let bad_config = NewTopic {
            configs: BTreeMap::from([("cleanup.policy".into(), "shred".into())]),
            ..new_topic("u", 1)
        };
        let cases: Vec<(NewTopic, &str)> = vec![
            (new_topic("t", 1), "exists"),
            (new_topic("bad/name", 1), "name"),
            (new_topic("u", 0), "partitions"),
            (
                NewTopic {
                    replication_factor: 3,
                    ..new_topic("u", 1)
                },
                "replication",
            ),
            (bad_config, "config"),
        ];
        for (topic, what) in cases {
            assert!(controller.create_topic(topic, false).is_err(), "{what}");
        }
        assert!(controller.create_topic(new_topic("t.x", 1), false).is_ok());
        assert!(
            controller.create_topic(new_topic("t_x", 1), false).is_err(),
            "'.' and '_' collide"
        );
        controller.limit_partitions(4);
        assert!(
            controller.create_topic(new_topic("big", 3), false).is_err(),
            "over the partition limit"
        );
        assert!(
            controller.create_partitions("t", 4, false).is_err(),
            "over the partition limit"
        );
        controller.limit_partitions(usize::MAX);
        let before = controller.image().applied_count;
        assert!(controller.create_partitions("t", 1, false).is_err());
        assert!(controller
            .alter_topic_config(
                "t",
                ConfigChange::setting(BTreeMap::from([("foo.bar".into(), "1".into())])),
                false
            )
            .is_err());
        assert!(
            controller.create_topic(new_topic("v", 2), true).is_ok(),
            "validate only"
        );
        assert_eq!(controller.image().applied_count, before);
        assert!(controller.image().topic("v").is_none());
    }
}
