//! The quorum's state machine: committed commands applied to the metadata image in log
//! order, each new image published to whoever follows it (the broker of this process) and
//! copied into the relational tables. A snapshot is a SQLite database of those tables as of
//! its place in the log, which also holds the image as the controller loads it
//! (`relational::write_snapshot`); it is kept in one file, sent whole to a controller that is
//! too far behind, and with it the log before it is purged.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine, Snapshot};
use openraft::type_config::alias::{SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft::{EntryPayload, OptionalSend, StoredMembership};
use tokio::sync::watch;
use weir_metadata::{MetadataCommand, MetadataImage};
use weir_storage::Storage;

use super::{LogId, TypeConfig};
use crate::relational::RelationalStore;

/// File holding the latest snapshot (a SQLite database), in the quorum directory.
const SNAPSHOT_FILE: &str = "raft-snapshot.db";
/// The snapshot file of earlier versions: a line of JSON with the snapshot's place in the
/// log, then the image as JSON. Read once and replaced by a database.
const LEGACY_SNAPSHOT_FILE: &str = "raft-snapshot.json";

/// The snapshot in the database `bytes`: its place in the log and its image.
fn read_snapshot(bytes: &[u8]) -> io::Result<(SnapshotMetaOf<TypeConfig>, MetadataImage)> {
    let (meta, image) = crate::relational::read_snapshot(bytes).map_err(io::Error::other)?;
    let meta = serde_json::from_str(&meta).map_err(io::Error::other)?;
    let image = serde_json::from_slice(&image).map_err(io::Error::other)?;
    Ok((meta, image))
}

/// The snapshot of an earlier version's JSON file.
fn parse_legacy_snapshot(bytes: &[u8]) -> io::Result<(SnapshotMetaOf<TypeConfig>, MetadataImage)> {
    let newline = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| io::Error::other("snapshot file without its header line"))?;
    let meta = serde_json::from_slice(&bytes[..newline]).map_err(io::Error::other)?;
    let image = serde_json::from_slice(&bytes[newline + 1..]).map_err(io::Error::other)?;
    Ok((meta, image))
}

/// What applying the log has built.
struct Applied {
    image: MetadataImage,
    last_applied: Option<LogId>,
    membership: StoredMembershipOf<TypeConfig>,
    snapshot: Option<(SnapshotMetaOf<TypeConfig>, Vec<u8>)>,
}

/// What every clone shares besides the applied state.
struct Shared {
    storage: Arc<dyn Storage>,
    /// The quorum directory.
    dir: PathBuf,
    published: watch::Sender<Arc<MetadataImage>>,
    /// The relational copy of the image, once kept.
    relational: Mutex<Option<RelationalStore>>,
    /// Set once the log committed before this start is applied again: later commands are new
    /// and logged as they apply; those before are only counted.
    recovered: AtomicBool,
}

impl Shared {
    /// The snapshot kept in the quorum directory, if any, as its place in the log and the
    /// database's bytes; an earlier version's JSON snapshot is turned into a database first.
    /// Blocking.
    fn load_snapshot(&self) -> io::Result<Option<(SnapshotMetaOf<TypeConfig>, Vec<u8>)>> {
        let path = self.dir.join(SNAPSHOT_FILE);
        if self.storage.exists(&path) {
            let bytes = self.storage.read(&path)?;
            let (meta, _) = read_snapshot(&bytes)?;
            return Ok(Some((meta, bytes)));
        }
        let legacy = self.dir.join(LEGACY_SNAPSHOT_FILE);
        if !self.storage.exists(&legacy) {
            return Ok(None);
        }
        let (meta, image) = parse_legacy_snapshot(&self.storage.read(&legacy)?)?;
        let bytes = self.persist(&meta, &image)?;
        self.storage.remove(&legacy)?;
        tracing::info!(target: "weir::controller", "metadata snapshot of an earlier version turned into a database");
        Ok(Some((meta, bytes)))
    }

    /// Writes the snapshot of `image` at `meta` as a database replacing the last one, and
    /// answers with its bytes. Blocking.
    fn persist(
        &self,
        meta: &SnapshotMetaOf<TypeConfig>,
        image: &MetadataImage,
    ) -> io::Result<Vec<u8>> {
        let meta_json = serde_json::to_string(meta).map_err(io::Error::other)?;
        let image_json = serde_json::to_vec(image).map_err(io::Error::other)?;
        let bytes = crate::relational::write_snapshot(&meta_json, image, &image_json)
            .map_err(io::Error::other)?;
        self.keep(&bytes)?;
        Ok(bytes)
    }

    /// Replaces the snapshot file with `bytes`, atomically. Blocking.
    fn keep(&self, bytes: &[u8]) -> io::Result<()> {
        let path = self.dir.join(SNAPSHOT_FILE);
        self.storage.write_atomic(&path, bytes)
    }

    /// Keeps the snapshot database `bytes` another controller sent, once it reads as one, and
    /// answers with its image. Blocking.
    fn receive(&self, bytes: &[u8]) -> io::Result<MetadataImage> {
        let (_, image) = read_snapshot(bytes)?;
        self.keep(bytes)?;
        Ok(image)
    }
}

/// The state machine; clones share it (the snapshot builder is a clone).
#[derive(Clone)]
pub struct StateMachine {
    applied: Arc<tokio::sync::Mutex<Applied>>,
    shared: Arc<Shared>,
}

impl StateMachine {
    /// A state machine over the quorum directory `dir`, holding its last snapshot (Raft installs
    /// it at start, then applies the committed log after it). Blocking.
    pub fn open(storage: Arc<dyn Storage>, dir: &Path) -> io::Result<StateMachine> {
        let (published, _) = watch::channel(Arc::new(MetadataImage::default()));
        let shared = Shared {
            storage,
            dir: dir.to_path_buf(),
            published,
            relational: Mutex::new(None),
            recovered: AtomicBool::new(false),
        };
        let snapshot = shared.load_snapshot()?;
        Ok(StateMachine {
            applied: Arc::new(tokio::sync::Mutex::new(Applied {
                image: MetadataImage::default(),
                last_applied: None,
                membership: StoredMembership::default(),
                snapshot,
            })),
            shared: Arc::new(shared),
        })
    }

    /// Marks the log committed before this start as applied again.
    pub fn recovered(&self) {
        self.shared.recovered.store(true, Ordering::Release);
    }

    /// The images as they are applied, newest available.
    pub fn images(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.shared.published.subscribe()
    }

    /// Keeps the relational copy in the SQLite database at `path`, brought in line with the
    /// current image now and updated with every command from now on. Blocking.
    pub fn keep_relational(&self, path: &Path) -> rusqlite::Result<()> {
        let image = self.shared.published.borrow().clone();
        let store = RelationalStore::open(path, &image)?;
        *self.relational() = Some(store);
        Ok(())
    }

    fn relational(&self) -> std::sync::MutexGuard<'_, Option<RelationalStore>> {
        self.shared
            .relational
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Copies `changes` (each command with the image it made) into the relational tables, on
    /// a blocking thread.
    async fn copy_to_relational(&self, changes: Vec<(MetadataCommand, MetadataImage)>) {
        let machine = self.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(store) = machine.relational().as_mut() {
                for (command, image) in &changes {
                    store.apply(command, image);
                }
            }
        })
        .await;
    }

    /// Runs `work` on the shared state, on a blocking thread.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Shared) -> io::Result<T> + Send + 'static,
    ) -> io::Result<T> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || work(&shared))
            .await
            .map_err(io::Error::other)?
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    type SnapshotData = Vec<u8>;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf<TypeConfig, Vec<u8>>, io::Error> {
        let mut applied = self.applied.lock().await;
        let meta = SnapshotMetaOf::<TypeConfig> {
            last_log_id: applied.last_applied,
            last_membership: applied.membership.clone(),
        };
        let (kept_meta, image) = (meta.clone(), applied.image.clone());
        let bytes = self
            .blocking(move |shared| shared.persist(&kept_meta, &image))
            .await?;
        tracing::info!(target: "weir::controller", last_log_index = meta.last_log_id.map(|l| l.index), commands = applied.image.applied_count, bytes = bytes.len(), "metadata snapshot taken");
        applied.snapshot = Some((meta.clone(), bytes.clone()));
        Ok(Snapshot {
            meta,
            snapshot: bytes,
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId>, StoredMembershipOf<TypeConfig>), io::Error> {
        let applied = self.applied.lock().await;
        Ok((applied.last_applied, applied.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        let mut applied = self.applied.lock().await;
        let keep_copy = self.relational().is_some();
        let mut changes = Vec::new();
        let mut responders = Vec::new();
        while let Some((entry, responder)) = entries.try_next().await? {
            applied.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(command) => {
                    applied.image.apply(&command);
                    if self.shared.recovered.load(Ordering::Acquire) {
                        tracing::info!(target: "weir::controller", ?command, "metadata change");
                    } else {
                        tracing::debug!(target: "weir::controller", ?command, "metadata change replayed");
                    }
                    if keep_copy {
                        changes.push((command, applied.image.clone()));
                    }
                }
                EntryPayload::Membership(membership) => {
                    tracing::info!(target: "weir::controller", %membership, "controller quorum membership");
                    applied.membership = StoredMembership::new(Some(entry.log_id), membership);
                }
            }
            responders.push((responder, applied.image.applied_count));
        }
        if !changes.is_empty() {
            self.copy_to_relational(changes).await;
        }
        self.shared
            .published
            .send_replace(Arc::new(applied.image.clone()));
        for (responder, applied_count) in responders {
            if let Some(responder) = responder {
                responder.send(applied_count);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<TypeConfig>,
        snapshot: Vec<u8>,
    ) -> Result<(), io::Error> {
        let mut applied = self.applied.lock().await;
        let received = snapshot.clone();
        let image = self
            .blocking(move |shared| shared.receive(&received))
            .await?;
        tracing::info!(target: "weir::controller", last_log_index = meta.last_log_id.map(|l| l.index), commands = image.applied_count, "metadata snapshot installed");
        applied.image = image.clone();
        applied.last_applied = meta.last_log_id;
        applied.membership = meta.last_membership.clone();
        applied.snapshot = Some((meta.clone(), snapshot));
        let machine = self.clone();
        let copy = image.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(store) = machine.relational().as_mut() {
                store.follow(&copy);
            }
        })
        .await;
        self.shared.published.send_replace(Arc::new(image));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<TypeConfig, Vec<u8>>>, io::Error> {
        let applied = self.applied.lock().await;
        Ok(applied.snapshot.as_ref().map(|(meta, image)| Snapshot {
            meta: meta.clone(),
            snapshot: image.clone(),
        }))
    }
}
