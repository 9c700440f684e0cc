//! The data directory: an exclusive lock, and `meta.properties` with the cluster and node ids
//! written at first start.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use weir_metadata::Uuid;

/// An opened, locked data directory. The lock is held until this is dropped.
pub struct DataDir {
    /// The directory.
    pub path: PathBuf,
    /// The cluster id (Kafka's format: 22 characters of URL-safe base64).
    pub cluster_id: String,
    _lock: File,
}

const META_FILE: &str = "meta.properties";
const LOCK_FILE: &str = ".lock";

impl DataDir {
    /// Creates (if needed) and locks `path`, checking or writing `meta.properties`. A new
    /// directory takes `cluster_id` when given (every node of a cluster shares one), else a
    /// random one; an existing directory of another cluster is refused.
    pub fn open(path: &Path, node_id: i32, cluster_id: Option<&str>) -> anyhow::Result<DataDir> {
        std::fs::create_dir_all(path)
            .with_context(|| format!("creating data directory {}", path.display()))?;
        let lock_path = path.join(LOCK_FILE);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .with_context(|| format!("opening {}", lock_path.display()))?;
        if lock.try_lock().is_err() {
            bail!(
                "data directory {} is in use by another Weir process (it holds {})",
                path.display(),
                lock_path.display()
            );
        }
        let meta_path = path.join(META_FILE);
        let cluster_id = match std::fs::read_to_string(&meta_path) {
            Ok(text) => {
                let value = |key: &str| {
                    text.lines()
                        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                        .map(str::trim)
                        .map(String::from)
                };
                let stored_node = value("node.id").and_then(|v| v.parse::<i32>().ok());
                if stored_node != Some(node_id) {
                    bail!("data directory {} belongs to node {:?}, not node {node_id}; pass --node-id to match or use another --data-dir", path.display(), stored_node);
                }
                let stored = value("cluster.id")
                    .with_context(|| format!("{} has no cluster.id", meta_path.display()))?;
                if let Some(expected) = cluster_id.filter(|expected| *expected != stored) {
                    bail!("data directory {} belongs to cluster {stored}, not to cluster {expected} (the one this --controller-quorum names); use another --data-dir", path.display());
                }
                stored
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let cluster_id =
                    cluster_id.map_or_else(|| cluster_id_of(Uuid::new_v4()), str::to_string);
                let text = format!("version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n");
                write_durably(&meta_path, text.as_bytes())?;
                cluster_id
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", meta_path.display())),
        };
        Ok(DataDir {
            path: path.to_path_buf(),
            cluster_id,
            _lock: lock,
        })
    }
}

fn write_durably(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The cluster id of the cluster whose controllers are `quorum` (node id → address): derived
/// from the list, so every node given the same `--controller-quorum` agrees on it.
pub fn quorum_cluster_id(quorum: &std::collections::BTreeMap<i32, String>) -> String {
    let spec: Vec<String> = quorum
        .iter()
        .map(|(id, addr)| format!("{id}@{addr}"))
        .collect();
    cluster_id_of(Uuid::new_v5(
        &Uuid::NAMESPACE_URL,
        spec.join(",").as_bytes(),
    ))
}

/// A cluster id in Kafka's format: a UUID as unpadded URL-safe base64.
fn cluster_id_of(uuid: Uuid) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = uuid.into_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_and_identity() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = DataDir::open(dir.path(), 1, None).expect("open");
        assert_eq!(first.cluster_id.len(), 22);
        let err = DataDir::open(dir.path(), 1, None)
            .err()
            .expect("second open refused")
            .to_string();
        assert!(err.contains("in use"), "{err}");
        let id = first.cluster_id.clone();
        drop(first);
        assert_eq!(
            DataDir::open(dir.path(), 1, None)
                .expect("reopen")
                .cluster_id,
            id
        );
        assert!(
            DataDir::open(dir.path(), 2, None).is_err(),
            "node id mismatch"
        );
        let other = "AAAAAAAAAAAAAAAAAAAAAA";
        assert!(
            DataDir::open(dir.path(), 1, Some(other)).is_err(),
            "another cluster's directory"
        );
        assert_eq!(
            DataDir::open(dir.path(), 1, Some(&id))
                .expect("same cluster")
                .cluster_id,
            id
        );
        let fresh = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            DataDir::open(fresh.path(), 3, Some(other))
                .expect("new")
                .cluster_id,
            other
        );
        let quorum =
            std::collections::BTreeMap::from([(1, "h:1".to_string()), (2, "h:2".to_string())]);
        let derived = quorum_cluster_id(&quorum);
        assert_eq!(derived.len(), 22);
        assert_eq!(
            derived,
            quorum_cluster_id(&quorum.clone()),
            "the same list, the same id"
        );
    }
}
