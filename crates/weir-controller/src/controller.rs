//! The controller: validates requests, turns them into commands, makes them durable through
//! the metadata log and publishes the new image.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;
use uuid::Uuid;

use weir_metadata::broker_config::check_runtime_broker_config;
use weir_metadata::topic_config::validate_topic_config;
use weir_metadata::{
    validate_topic_name, BrokerListener, BrokerRegistration, Committed, ConfigChange,
    ControllerError, MetadataCommand, MetadataControl, MetadataImage, NewTopic, Pending,
    TopicImage,
};

use crate::metadata_log::{MetadataLog, MetadataLogError};
use crate::placement::place;
use crate::relational::RelationalStore;

/// Producer ids reserved per metadata command; the broker hands them out from memory.
pub const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;
/// Most partitions one topic may have: each costs open files and memory on every start.
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;
/// Most listeners one broker may register.
const LISTENERS_PER_BROKER_MAX: usize = 16;

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

/// Gives a command written before replicas were recorded its replicas: every partition on
/// `node_id`, the node that wrote it (such logs come from a single node).
fn with_replicas(command: MetadataCommand, node_id: i32, image: &MetadataImage) -> MetadataCommand {
    match command {
        MetadataCommand::CreateTopic {
            name,
            topic_id,
            partitions,
            replication_factor,
            configs,
            assignments,
        } if assignments.is_empty() => MetadataCommand::CreateTopic {
            name,
            topic_id,
            partitions,
            replication_factor,
            configs,
            assignments: vec![vec![node_id]; partitions.max(0) as usize],
        },
        MetadataCommand::CreatePartitions {
            topic_id,
            total,
            assignments,
        } if assignments.is_empty() => {
            let current = image
                .topic_by_id(topic_id)
                .map_or(total, |t| t.partition_count());
            MetadataCommand::CreatePartitions {
                topic_id,
                total,
                assignments: vec![vec![node_id]; (total - current).max(0) as usize],
            }
        }
        other => other,
    }
}

/// One partition's manual replica list, checked as Kafka checks it: not empty, no broker
/// twice, only registered brokers.
fn check_replica_list(image: &MetadataImage, replicas: &[i32]) -> Result<(), ControllerError> {
    let refuse = |why: String| Err(ControllerError::InvalidReplicaAssignment(why));
    if replicas.is_empty() {
        return refuse("The manual partition assignment includes an empty replica list.".into());
    }
    for (i, node_id) in replicas.iter().enumerate() {
        if replicas[..i].contains(node_id) {
            return refuse(format!(
                "The manual partition assignment includes the broker {node_id} more than once."
            ));
        }
    }
    if let Some(unknown) = replicas.iter().find(|b| image.broker(**b).is_none()) {
        return refuse(format!(
            "The manual partition assignment includes broker {unknown}, but no such broker is registered."
        ));
    }
    Ok(())
}

impl Controller {
    /// Replays `log` into a fresh image. `node_id` is this node's: commands written before
    /// replicas were recorded are read as placing every replica here.
    pub fn open(
        mut log: Box<dyn MetadataLog>,
        node_id: i32,
    ) -> Result<Controller, ControllerError> {
        let mut image = MetadataImage::default();
        for command in log.replay().map_err(log_error)? {
            let command = with_replicas(command, node_id, &image);
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
        let current = image.partition_total();
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
        // A manual assignment is checked list by list below (an empty list has its own error).
        if replicas < 1 && topic.assignments.is_empty() {
            return Err(ControllerError::InvalidReplicationFactor(
                "Replication factor must be larger than 0, or -1 to use the default value.".into(),
            ));
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
        let assignments = if topic.assignments.is_empty() {
            Self::place(&state.image, topic.partitions, replicas)?
        } else {
            if topic.assignments.len() != topic.partitions as usize {
                return Err(ControllerError::InvalidReplicaAssignment(format!(
                    "The manual partition assignment names {} partition(s), not {}.",
                    topic.assignments.len(),
                    topic.partitions
                )));
            }
            for assigned in &topic.assignments {
                check_replica_list(&state.image, assigned)?;
                if assigned.len() != replicas as usize {
                    return Err(ControllerError::InvalidReplicaAssignment(
                        "All partitions in the manual partition assignment must have the same number of replicas.".into(),
                    ));
                }
            }
            topic.assignments
        };
        let topic_id = Uuid::new_v4();
        let command = MetadataCommand::CreateTopic {
            name: topic.name,
            topic_id,
            partitions: topic.partitions,
            replication_factor: replicas,
            configs: topic.configs,
            assignments,
        };
        if validate_only {
            let mut preview = state.image.clone();
            preview.apply(&command);
            return Self::created(&preview, topic_id);
        }
        self.commit(&mut state, command)?;
        Self::created(&state.image, topic_id)
    }

    /// Replicas for `count` new partitions over the registered brokers, continuing the
    /// cluster's stripe so leaders spread across topics.
    fn place(
        image: &MetadataImage,
        count: i32,
        replication_factor: i16,
    ) -> Result<Vec<Vec<i32>>, ControllerError> {
        let brokers: Vec<i32> = image.brokers().map(|b| b.node_id).collect();
        place(&brokers, count, replication_factor, image.partition_total())
    }

    /// The topic just created, as `image` holds it.
    fn created(image: &MetadataImage, topic_id: Uuid) -> Result<TopicImage, ControllerError> {
        image.topic_by_id(topic_id).cloned().ok_or_else(|| {
            ControllerError::Fatal(std::io::Error::other(
                "created topic missing from the image",
            ))
        })
    }

    /// Registers a broker (at each of its starts) with a fresh incarnation id; its epoch is
    /// the registration's position in the log.
    pub fn register_broker(
        &self,
        node_id: i32,
        listeners: Vec<BrokerListener>,
        rack: Option<String>,
    ) -> Result<BrokerRegistration, ControllerError> {
        if node_id < 0 {
            return Err(ControllerError::InvalidRequest(format!(
                "Invalid node id {node_id}: node ids are non-negative"
            )));
        }
        if listeners.is_empty() || listeners.len() > LISTENERS_PER_BROKER_MAX {
            return Err(ControllerError::InvalidRequest(format!(
                "A broker registers between 1 and {LISTENERS_PER_BROKER_MAX} listeners, not {}",
                listeners.len()
            )));
        }
        let mut state = self.state();
        let command = MetadataCommand::RegisterBroker {
            node_id,
            incarnation_id: Uuid::new_v4(),
            listeners,
            rack,
        };
        self.commit(&mut state, command)?;
        state.image.broker(node_id).cloned().ok_or_else(|| {
            ControllerError::Fatal(std::io::Error::other(
                "registered broker missing from the image",
            ))
        })
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

    /// Raises a topic's partition count to `total` (Kafka's CreatePartitions meaning), with
    /// the new partitions on `assignments` (one replica list each) or, without them, placed
    /// over the registered brokers.
    pub fn create_partitions(
        &self,
        name: &str,
        total: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), ControllerError> {
        let mut state = self.state();
        let topic_id = Self::topic_id(&state, name)?;
        let topic = state.image.topic(name);
        let current = topic.map_or(0, |t| t.partition_count());
        let replication_factor = topic.map_or(1, |t| t.replication_factor);
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
        let assignments = if let Some(assignments) = assignments {
            let added = total - current;
            if assignments.len() != added as usize {
                return Err(ControllerError::InvalidReplicaAssignment(format!(
                    "Attempted to add {added} additional partition(s), but only {} assignment(s) were specified.",
                    assignments.len()
                )));
            }
            for assigned in &assignments {
                check_replica_list(&state.image, assigned)?;
                if assigned.len() != replication_factor as usize {
                    return Err(ControllerError::InvalidReplicaAssignment(format!(
                        "The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {replication_factor} replica(s).",
                        assigned.len()
                    )));
                }
            }
            assignments
        } else {
            Self::place(&state.image, total - current, replication_factor)?
        };
        if !validate_only {
            let command = MetadataCommand::CreatePartitions {
                topic_id,
                total,
                assignments,
            };
            self.commit(&mut state, command)?;
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

    fn create_partitions(
        &self,
        name: String,
        total: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Pending<()> {
        self.run(move |c| c.create_partitions(&name, total, assignments, validate_only))
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

    fn register_broker(
        &self,
        node_id: i32,
        listeners: Vec<BrokerListener>,
        rack: Option<String>,
    ) -> Pending<BrokerRegistration> {
        self.run(move |c| c.register_broker(node_id, listeners, rack))
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

    fn open_log(dir: &std::path::Path) -> Controller {
        Controller::open(
            Box::new(
                FileMetadataLog::open(Arc::new(weir_storage::FsStorage), &dir.join("metadata.log"))
                    .expect("log"),
            ),
            1,
        )
        .expect("controller")
    }

    fn listener(port: u16) -> BrokerListener {
        BrokerListener {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port,
        }
    }

    /// The controller over `dir`'s log, with broker 1 registered (as at every start).
    fn open(dir: &std::path::Path) -> Controller {
        let controller = open_log(dir);
        controller
            .register_broker(1, vec![listener(9092)], None)
            .expect("register");
        controller
    }

    fn new_topic(name: &str, partitions: i32) -> NewTopic {
        NewTopic {
            name: name.into(),
            partitions,
            replication_factor: 1,
            ..NewTopic::default()
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
            .create_partitions("orders", 5, None, false)
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
        assert_eq!(
            (topic.partition_count(), topic.topic_id),
            (5, first.topic_id)
        );
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
    fn partitions_spread_over_registered_brokers_with_leaders_and_epochs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let controller = open(dir.path());
        let three = NewTopic {
            replication_factor: 3,
            ..new_topic("orders", 6)
        };
        assert!(
            matches!(
                controller.create_topic(three.clone(), false),
                Err(ControllerError::InvalidReplicationFactor(_))
            ),
            "one broker cannot hold three replicas"
        );
        for node_id in [2, 3] {
            controller
                .register_broker(
                    node_id,
                    vec![listener(9092 + node_id as u16)],
                    Some("r1".into()),
                )
                .expect("register");
        }
        let first_epoch = controller.image().broker(1).expect("broker 1").epoch;
        let created = controller.create_topic(three, false).expect("create");
        let mut leaders = std::collections::BTreeMap::<i32, usize>::new();
        for partition in &created.partitions {
            assert_eq!(partition.replicas.len(), 3);
            assert_eq!(partition.isr, partition.replicas);
            assert_eq!(partition.leader, partition.replicas[0]);
            assert_eq!((partition.leader_epoch, partition.partition_epoch), (0, 0));
            *leaders.entry(partition.leader).or_default() += 1;
        }
        assert_eq!(leaders.values().collect::<Vec<_>>(), vec![&2, &2, &2]);
        controller
            .create_partitions("orders", 9, None, false)
            .expect("grow");
        drop(controller);
        let controller = open(dir.path());
        let image = controller.image();
        let topic = image.topic("orders").expect("topic");
        assert_eq!(topic.partitions[..6], created.partitions[..]);
        assert!(topic.partitions[6..].iter().all(|p| p.replicas.len() == 3));
        assert_eq!(image.broker(2).and_then(|b| b.rack.as_deref()), Some("r1"));
        assert!(
            image.broker(1).expect("broker 1").epoch > first_epoch,
            "a new start has a new broker epoch"
        );
        assert!(controller
            .register_broker(-1, vec![listener(1)], None)
            .is_err());
        assert!(controller.register_broker(4, Vec::new(), None).is_err());
    }

    #[test]
    fn commands_written_before_replicas_were_recorded_place_them_on_this_node() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage: Arc<dyn weir_storage::Storage> = Arc::new(weir_storage::FsStorage);
        let mut log =
            FileMetadataLog::open(storage.clone(), &dir.path().join("metadata.log")).expect("log");
        for stored in [
            r#"{"type":"create_topic","name":"old","topic_id":"00000000-0000-0000-0000-000000000007","partitions":2,"replication_factor":1,"configs":{}}"#,
            r#"{"type":"create_partitions","topic_id":"00000000-0000-0000-0000-000000000007","total":3}"#,
        ] {
            let command: MetadataCommand = serde_json::from_str(stored).expect("old command");
            log.append(&command).expect("append");
        }
        drop(log);
        let controller = Controller::open(
            Box::new(
                FileMetadataLog::open(storage, &dir.path().join("metadata.log")).expect("log"),
            ),
            5,
        )
        .expect("controller");
        let image = controller.image();
        let topic = image.topic("old").expect("topic");
        assert_eq!(topic.partition_count(), 3);
        for partition in &topic.partitions {
            assert_eq!(
                (partition.replicas.as_slice(), partition.leader),
                (&[5][..], 5)
            );
        }
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
            controller.create_partitions("t", 4, None, false).is_err(),
            "over the partition limit"
        );
        controller.limit_partitions(usize::MAX);
        let before = controller.image().applied_count;
        assert!(controller.create_partitions("t", 1, None, false).is_err());
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
