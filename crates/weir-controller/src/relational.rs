//! The metadata as relational tables in SQLite, for `weir metadata query`: brokers and their
//! listeners, topics, their partitions (leader, epochs), replicas (in sync or not) and
//! configs, the dynamic broker configs, SCRAM users (mechanisms and iterations), ACLs and
//! client quotas, with foreign keys. Every committed
//! command is applied in one transaction together with the image position it brings the
//! tables to, so the tables always show one whole image. The metadata log stays the record:
//! tables that fall behind (a write refused on a full disk, a schema from another version) are
//! rebuilt from the image, and a failure here never refuses a metadata change.
//!
//! A Raft snapshot of the metadata is a database of the same tables as well
//! ([`write_snapshot`]), holding in table `raft_snapshot` where in the log it was taken and the
//! image as the controller loads it.

use std::path::Path;

use rusqlite::{params, Connection, Transaction};
use weir_metadata::acl::AclBinding;
use weir_metadata::{
    BrokerRegistration, ConfigChange, MetadataCommand, MetadataImage, PartitionChange, TopicImage,
    Uuid, NO_LEADER,
};

/// The layout the tables are in; another value makes the store rebuild them.
const SCHEMA_VERSION: i64 = 6;

/// The tables, their keys and foreign keys.
const SCHEMA: &str = "
CREATE TABLE meta (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    schema_version INTEGER NOT NULL,
    applied_count INTEGER NOT NULL,
    next_producer_id INTEGER NOT NULL
);
CREATE TABLE brokers (
    node_id INTEGER PRIMARY KEY,
    incarnation_id TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    rack TEXT,
    fenced INTEGER NOT NULL
);
CREATE TABLE broker_listeners (
    node_id INTEGER NOT NULL REFERENCES brokers (node_id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    host TEXT NOT NULL,
    port INTEGER NOT NULL,
    PRIMARY KEY (node_id, name)
);
CREATE TABLE topics (
    topic_id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    replication_factor INTEGER NOT NULL
);
CREATE TABLE partitions (
    topic_id TEXT NOT NULL REFERENCES topics (topic_id) ON DELETE CASCADE,
    partition_index INTEGER NOT NULL,
    leader INTEGER,
    leader_epoch INTEGER NOT NULL,
    partition_epoch INTEGER NOT NULL,
    PRIMARY KEY (topic_id, partition_index)
);
CREATE TABLE replicas (
    topic_id TEXT NOT NULL,
    partition_index INTEGER NOT NULL,
    node_id INTEGER NOT NULL,
    position INTEGER NOT NULL,
    in_sync INTEGER NOT NULL,
    reassignment TEXT CHECK (reassignment IN ('adding', 'removing')),
    PRIMARY KEY (topic_id, partition_index, node_id),
    FOREIGN KEY (topic_id, partition_index)
        REFERENCES partitions (topic_id, partition_index) ON DELETE CASCADE
);
CREATE TABLE topic_configs (
    topic_id TEXT NOT NULL REFERENCES topics (topic_id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (topic_id, name)
);
CREATE TABLE broker_configs (
    node_id INTEGER,
    name TEXT NOT NULL,
    value TEXT NOT NULL
);
CREATE UNIQUE INDEX broker_configs_key ON broker_configs (ifnull(node_id, -1), name);
CREATE TABLE scram_credentials (
    user_name TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    iterations INTEGER NOT NULL,
    PRIMARY KEY (user_name, mechanism)
);
CREATE TABLE acls (
    resource_type TEXT NOT NULL,
    pattern_type TEXT NOT NULL,
    resource_name TEXT NOT NULL,
    principal TEXT NOT NULL,
    host TEXT NOT NULL,
    operation TEXT NOT NULL,
    permission TEXT NOT NULL,
    PRIMARY KEY (resource_type, pattern_type, resource_name, principal, host, operation, permission)
);
CREATE TABLE client_quotas (
    entity TEXT NOT NULL,
    quota_key TEXT NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (entity, quota_key)
);
";

/// The table a snapshot database adds: its Raft position (JSON) and the image it holds (JSON).
const SNAPSHOT_SCHEMA: &str = "
CREATE TABLE raft_snapshot (
    id INTEGER PRIMARY KEY CHECK (id = 0),
    meta TEXT NOT NULL,
    image BLOB NOT NULL
);
";

/// The tables a rebuild empties, children first.
const TABLES: &[&str] = &[
    "topic_configs",
    "replicas",
    "partitions",
    "topics",
    "broker_listeners",
    "brokers",
    "broker_configs",
    "scram_credentials",
    "acls",
    "client_quotas",
    "meta",
];

/// The relational copy of the metadata image, kept by the controller.
pub struct RelationalStore {
    conn: Connection,
}

impl RelationalStore {
    /// Opens (creating) the database at `path` and brings it in line with `image`.
    pub fn open(path: &Path, image: &MetadataImage) -> rusqlite::Result<RelationalStore> {
        let conn = Connection::open(path)?;
        // WAL lets `weir metadata query` read while commands are applied; the tables can be
        // rebuilt from the metadata log, so they need not be fsynced with every change.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        // Keep the write-ahead file small: metadata changes are few and small, and a broker
        // short of disk space should not lose it to this copy.
        conn.pragma_update(None, "wal_autocheckpoint", 64)?;
        conn.pragma_update(None, "journal_size_limit", 1_048_576)?;
        conn.pragma_update(None, "foreign_keys", true)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let mut store = RelationalStore { conn };
        if store.position()? != Some((SCHEMA_VERSION, image.applied_count)) {
            store.rebuild(image)?;
        }
        Ok(store)
    }

    /// The schema version and image position the tables show, if they exist.
    fn position(&self) -> rusqlite::Result<Option<(i64, u64)>> {
        let exists: bool = self.conn.query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
            [],
            |row| row.get(0),
        )?;
        if !exists {
            return Ok(None);
        }
        let row = self.conn.query_row(
            "SELECT schema_version, applied_count FROM meta WHERE id = 0",
            [],
            |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?)),
        );
        match row {
            Ok((version, applied)) => Ok(Some((version, applied as u64))),
            Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Applies `command`, which brought the image to `image`, to the tables; when they were
    /// not at the image just before it, rebuilds them from `image` instead. A failure is
    /// logged and repaired by a rebuild at the next command or start.
    pub fn apply(&mut self, command: &MetadataCommand, image: &MetadataImage) {
        let previous = image.applied_count.saturating_sub(1);
        let outcome = match self.position() {
            Ok(Some((SCHEMA_VERSION, at))) if at == previous => self.apply_one(command, image),
            Ok(_) => self.rebuild(image),
            Err(error) => Err(error),
        };
        if let Err(error) = outcome {
            tracing::warn!(target: "weir::controller", %error, "relational metadata not updated; it is rebuilt from the metadata log later");
        }
    }

    /// Brings the tables in line with `image` (a snapshot installed): rebuilt unless they
    /// already show it. A failure is logged and repaired as in [`RelationalStore::apply`].
    pub fn follow(&mut self, image: &MetadataImage) {
        let outcome = match self.position() {
            Ok(Some((SCHEMA_VERSION, at))) if at == image.applied_count => Ok(()),
            Ok(_) => self.rebuild(image),
            Err(error) => Err(error),
        };
        if let Err(error) = outcome {
            tracing::warn!(target: "weir::controller", %error, "relational metadata not updated; it is rebuilt from the metadata log later");
        }
    }

    fn apply_one(
        &mut self,
        command: &MetadataCommand,
        image: &MetadataImage,
    ) -> rusqlite::Result<()> {
        let tx = self.conn.transaction()?;
        match command {
            MetadataCommand::CreateTopic { topic_id, .. } => {
                if let Some(topic) = image.topic_by_id(*topic_id) {
                    insert_topic(&tx, topic)?;
                }
            }
            MetadataCommand::DeleteTopic { topic_id } => {
                tx.execute(
                    "DELETE FROM topics WHERE topic_id = ?1",
                    [topic_id.to_string()],
                )?;
            }
            MetadataCommand::CreatePartitions { topic_id, .. } => {
                if let Some(topic) = image.topic_by_id(*topic_id) {
                    insert_partitions(&tx, topic)?;
                }
            }
            MetadataCommand::AlterTopicConfig { topic_id, change } => {
                change_topic_configs(&tx, *topic_id, change)?;
            }
            MetadataCommand::AlterBrokerConfig { node_id, change } => {
                change_broker_configs(&tx, *node_id, change)?;
            }
            MetadataCommand::RegisterBroker { node_id, .. } => {
                if let Some(broker) = image.broker(*node_id) {
                    insert_broker(&tx, broker)?;
                }
            }
            MetadataCommand::FenceBroker { node_id, changes }
            | MetadataCommand::UnfenceBroker { node_id, changes } => {
                if let Some(broker) = image.broker(*node_id) {
                    insert_broker(&tx, broker)?;
                }
                change_partitions(&tx, changes, image)?;
            }
            MetadataCommand::ChangePartitions { changes } => {
                change_partitions(&tx, changes, image)?;
            }
            MetadataCommand::AlterScramCredentials { .. } => replace_scram_credentials(&tx, image)?,
            MetadataCommand::CreateAcls { .. } | MetadataCommand::DeleteAcls { .. } => {
                replace_acls(&tx, image)?;
            }
            MetadataCommand::AlterClientQuotas { .. } => replace_client_quotas(&tx, image)?,
            MetadataCommand::AllocateProducerIds { .. } => {}
        }
        set_position(&tx, image)?;
        tx.commit()
    }

    /// Replaces every table's rows with `image`, in one transaction.
    fn rebuild(&mut self, image: &MetadataImage) -> rusqlite::Result<()> {
        let tx = self.conn.transaction()?;
        let version: Option<i64> = tx
            .query_row("SELECT schema_version FROM meta WHERE id = 0", [], |row| {
                row.get(0)
            })
            .ok();
        if version != Some(SCHEMA_VERSION) {
            for table in TABLES {
                tx.execute_batch(&format!("DROP TABLE IF EXISTS {table}"))?;
            }
            tx.execute_batch(SCHEMA)?;
        } else {
            for table in TABLES {
                tx.execute(&format!("DELETE FROM {table}"), [])?;
            }
        }
        fill(&tx, image)?;
        tx.commit()?;
        tracing::info!(target: "weir::controller", commands = image.applied_count, topics = image.topics().count(), "relational metadata rebuilt");
        Ok(())
    }
}

/// Inserts every row of `image` into empty tables.
fn fill(tx: &Transaction<'_>, image: &MetadataImage) -> rusqlite::Result<()> {
    for broker in image.brokers() {
        insert_broker(tx, broker)?;
    }
    for topic in image.topics() {
        insert_topic(tx, topic)?;
    }
    for node_id in image.broker_config_levels() {
        let change = ConfigChange::setting(image.broker_configs(node_id).clone());
        change_broker_configs(tx, node_id, &change)?;
    }
    replace_scram_credentials(tx, image)?;
    replace_acls(tx, image)?;
    replace_client_quotas(tx, image)?;
    set_position(tx, image)
}

/// Rewrites `scram_credentials` from `image`: each user's mechanisms and iterations (the
/// keys stay in the image).
fn replace_scram_credentials(tx: &Transaction<'_>, image: &MetadataImage) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM scram_credentials", [])?;
    let mut insert = tx.prepare_cached(
        "INSERT INTO scram_credentials (user_name, mechanism, iterations) VALUES (?1, ?2, ?3)",
    )?;
    for (user, credentials) in image.scram_users() {
        for (hash, credential) in credentials {
            insert.execute(params![
                user,
                hash.mechanism().name(),
                credential.iterations
            ])?;
        }
    }
    Ok(())
}

/// Rewrites `acls` from `image`.
fn replace_acls(tx: &Transaction<'_>, image: &MetadataImage) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM acls", [])?;
    let mut insert = tx.prepare_cached(
        "INSERT INTO acls (resource_type, pattern_type, resource_name, principal, host, operation, permission) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for AclBinding { pattern, entry } in image.acls().iter() {
        insert.execute(params![
            pattern.resource_type.name(),
            pattern.pattern_type.name(),
            pattern.name,
            entry.principal,
            entry.host,
            entry.operation.name(),
            entry.permission.name(),
        ])?;
    }
    Ok(())
}

/// Rewrites `client_quotas` from `image`: each entity as Kafka's tools print it
/// (`user=alice,client-id=<default>`), each of its quotas.
fn replace_client_quotas(tx: &Transaction<'_>, image: &MetadataImage) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM client_quotas", [])?;
    let mut insert = tx.prepare_cached(
        "INSERT INTO client_quotas (entity, quota_key, value) VALUES (?1, ?2, ?3)",
    )?;
    for (entity, quotas) in image.client_quotas().iter() {
        for (key, value) in quotas {
            insert.execute(params![entity.to_string(), key.name(), value.get()])?;
        }
    }
    Ok(())
}

/// A Raft snapshot of `image` as the bytes of a database file: the relational tables filled
/// from the image and, in `raft_snapshot`, `meta` (the snapshot's place in the log) and
/// `image_json` (the image as the controller loads it). Built in memory.
pub fn write_snapshot(
    meta: &str,
    image: &MetadataImage,
    image_json: &[u8],
) -> rusqlite::Result<Vec<u8>> {
    let mut conn = Connection::open_in_memory()?;
    conn.pragma_update(None, "foreign_keys", true)?;
    let tx = conn.transaction()?;
    tx.execute_batch(SCHEMA)?;
    tx.execute_batch(SNAPSHOT_SCHEMA)?;
    fill(&tx, image)?;
    tx.execute(
        "INSERT INTO raft_snapshot (id, meta, image) VALUES (0, ?1, ?2)",
        params![meta, image_json],
    )?;
    tx.commit()?;
    let bytes = conn.serialize(rusqlite::MAIN_DB)?.to_vec();
    Ok(bytes)
}

/// The snapshot's place in the log (JSON) and its image (JSON) from the bytes of a snapshot
/// database, opened read-only in memory; bytes that are not one are an error.
pub fn read_snapshot(bytes: &[u8]) -> rusqlite::Result<(String, Vec<u8>)> {
    let mut conn = Connection::open_in_memory()?;
    conn.deserialize_read_exact(rusqlite::MAIN_DB, bytes, bytes.len(), true)?;
    conn.query_row(
        "SELECT meta, image FROM raft_snapshot WHERE id = 0",
        [],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
}

fn set_position(tx: &Transaction<'_>, image: &MetadataImage) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO meta (id, schema_version, applied_count, next_producer_id) VALUES (0, ?1, ?2, ?3)
         ON CONFLICT (id) DO UPDATE SET schema_version = ?1, applied_count = ?2, next_producer_id = ?3",
        params![SCHEMA_VERSION, image.applied_count as i64, image.next_producer_id],
    )?;
    Ok(())
}

fn insert_topic(tx: &Transaction<'_>, topic: &TopicImage) -> rusqlite::Result<()> {
    let id = topic.topic_id.to_string();
    tx.execute(
        "INSERT INTO topics (topic_id, name, replication_factor) VALUES (?1, ?2, ?3)",
        params![id, topic.name, topic.replication_factor],
    )?;
    insert_partitions(tx, topic)?;
    for (name, value) in &topic.configs {
        tx.execute(
            "INSERT INTO topic_configs (topic_id, name, value) VALUES (?1, ?2, ?3)",
            params![id, name, value],
        )?;
    }
    Ok(())
}

/// Writes every partition of `topic` with its replicas, replacing what the tables had.
fn insert_partitions(tx: &Transaction<'_>, topic: &TopicImage) -> rusqlite::Result<()> {
    let id = topic.topic_id.to_string();
    // Replicas go with their partitions (ON DELETE CASCADE).
    tx.execute("DELETE FROM partitions WHERE topic_id = ?1", [&id])?;
    let mut insert = tx.prepare_cached(
        "INSERT INTO partitions (topic_id, partition_index, leader, leader_epoch, partition_epoch)
         VALUES (?1, ?2, ?3, ?4, ?5)",
    )?;
    let mut insert_replica = tx.prepare_cached(
        "INSERT INTO replicas (topic_id, partition_index, node_id, position, in_sync, reassignment)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for (index, partition) in (0i32..).zip(&topic.partitions) {
        let leader = Some(partition.leader).filter(|l| *l != NO_LEADER);
        insert.execute(params![
            id,
            index,
            leader,
            partition.leader_epoch,
            partition.partition_epoch
        ])?;
        for (position, node_id) in (0i32..).zip(&partition.replicas) {
            let in_sync = partition.isr.contains(node_id);
            let reassignment = if partition.adding.contains(node_id) {
                Some("adding")
            } else if partition.removing.contains(node_id) {
                Some("removing")
            } else {
                None
            };
            insert_replica.execute(params![id, index, node_id, position, in_sync, reassignment])?;
        }
    }
    Ok(())
}

/// Rewrites the partitions of every topic `changes` touch.
fn change_partitions(
    tx: &Transaction<'_>,
    changes: &[PartitionChange],
    image: &MetadataImage,
) -> rusqlite::Result<()> {
    let topics: std::collections::BTreeSet<Uuid> = changes.iter().map(|c| c.topic_id).collect();
    for topic in topics.iter().filter_map(|id| image.topic_by_id(*id)) {
        insert_partitions(tx, topic)?;
    }
    Ok(())
}

/// Writes a broker's registration, replacing an earlier one (and its listeners).
fn insert_broker(tx: &Transaction<'_>, broker: &BrokerRegistration) -> rusqlite::Result<()> {
    tx.execute("DELETE FROM brokers WHERE node_id = ?1", [broker.node_id])?;
    tx.execute(
        "INSERT INTO brokers (node_id, incarnation_id, epoch, rack, fenced) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            broker.node_id,
            broker.incarnation_id.to_string(),
            broker.epoch as i64,
            broker.rack,
            broker.fenced
        ],
    )?;
    for listener in &broker.listeners {
        tx.execute(
            "INSERT INTO broker_listeners (node_id, name, host, port) VALUES (?1, ?2, ?3, ?4)",
            params![broker.node_id, listener.name, listener.host, listener.port],
        )?;
    }
    Ok(())
}

fn change_topic_configs(
    tx: &Transaction<'_>,
    topic_id: Uuid,
    change: &ConfigChange,
) -> rusqlite::Result<()> {
    let id = topic_id.to_string();
    if change.replace {
        tx.execute("DELETE FROM topic_configs WHERE topic_id = ?1", [&id])?;
    }
    for name in &change.delete {
        tx.execute(
            "DELETE FROM topic_configs WHERE topic_id = ?1 AND name = ?2",
            params![id, name],
        )?;
    }
    for (name, value) in &change.set {
        tx.execute(
            "INSERT INTO topic_configs (topic_id, name, value) VALUES (?1, ?2, ?3)
             ON CONFLICT (topic_id, name) DO UPDATE SET value = ?3",
            params![id, name, value],
        )?;
    }
    Ok(())
}

fn change_broker_configs(
    tx: &Transaction<'_>,
    node_id: Option<i32>,
    change: &ConfigChange,
) -> rusqlite::Result<()> {
    // `node_id IS ?1` matches NULL (the cluster-wide level) too.
    if change.replace {
        tx.execute("DELETE FROM broker_configs WHERE node_id IS ?1", [node_id])?;
    }
    for name in change.delete.iter().chain(change.set.keys()) {
        tx.execute(
            "DELETE FROM broker_configs WHERE node_id IS ?1 AND name = ?2",
            params![node_id, name],
        )?;
    }
    for (name, value) in &change.set {
        tx.execute(
            "INSERT INTO broker_configs (node_id, name, value) VALUES (?1, ?2, ?3)",
            params![node_id, name, value],
        )?;
    }
    Ok(())
}
