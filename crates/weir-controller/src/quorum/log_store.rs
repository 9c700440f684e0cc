//! The Raft log on disk: entries, truncations, purges and the commit point as records of one
//! [`RecordFile`], each fsynced before it is acknowledged, and the vote in its own small file
//! replaced atomically. The whole live log is also held in memory (metadata is small; snapshots
//! bound it), so reads never touch the disk. Disk work runs on blocking threads, never on the
//! Raft core's task.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;
use serde::{Deserialize, Serialize};
use weir_storage::Storage;

use super::reserve::SpaceReserve;

use super::{Entry, LogId, TypeConfig, Vote};
use crate::record_file::{RecordFile, RecordFileError};

/// File of log records, in the quorum directory.
const LOG_FILE: &str = "raft-log";
/// File holding the last vote, in the quorum directory.
const VOTE_FILE: &str = "raft-vote.json";
/// The log file is rewritten with only its live records once it holds this many more than
/// that: purged entries stop costing disk space and replay time.
const DEAD_RECORDS_MAX: usize = 1000;

/// One change to the log, in the order made.
#[derive(Debug, Serialize, Deserialize)]
enum LogRecord {
    /// An entry appended (replacing any at its index or later).
    Entry(Entry),
    /// Every entry after this one (all, for `None`) removed.
    TruncateAfter(Option<LogId>),
    /// Every entry up to and including this one removed: a snapshot holds them.
    Purge(LogId),
    /// The last entry known committed.
    Committed(Option<LogId>),
}

/// The log as it stands, in memory.
#[derive(Debug, Default)]
struct Live {
    entries: BTreeMap<u64, Entry>,
    last_purged: Option<LogId>,
    committed: Option<LogId>,
    vote: Option<Vote>,
}

impl Live {
    fn apply(&mut self, record: LogRecord) {
        match record {
            LogRecord::Entry(entry) => {
                self.entries.split_off(&entry.log_id.index);
                self.entries.insert(entry.log_id.index, entry);
            }
            LogRecord::TruncateAfter(last) => {
                let from = last.map_or(0, |l| l.index + 1);
                self.entries.split_off(&from);
            }
            LogRecord::Purge(upto) => {
                self.entries = self.entries.split_off(&(upto.index + 1));
                self.last_purged = Some(upto);
            }
            LogRecord::Committed(committed) => self.committed = committed,
        }
    }

    /// The records that rebuild this log, for a rewrite.
    fn records(&self) -> Vec<LogRecord> {
        let purge = self.last_purged.map(LogRecord::Purge);
        let entries = self.entries.values().cloned().map(LogRecord::Entry);
        purge
            .into_iter()
            .chain(entries)
            .chain(std::iter::once(LogRecord::Committed(self.committed)))
            .collect()
    }
}

/// What the blocking writer holds.
struct Files {
    storage: Arc<dyn Storage>,
    log: RecordFile<LogRecord>,
    vote_path: PathBuf,
    /// Records in the file beyond those a rewrite would keep.
    dead_records: usize,
    /// Space given up for an append that found the disk full.
    reserve: Arc<SpaceReserve>,
}

/// The Raft log store; clones share it (the log readers are clones).
#[derive(Clone)]
pub struct LogStore {
    live: Arc<tokio::sync::Mutex<Live>>,
    files: Arc<Mutex<Files>>,
}

fn storage_error(error: RecordFileError) -> io::Error {
    match error {
        RecordFileError::NotAppended(e) | RecordFileError::Fatal(e) => e,
        corrupt @ RecordFileError::Corrupt { .. } => io::Error::other(corrupt.to_string()),
    }
}

impl LogStore {
    /// Opens the log in `dir` (creating it), replaying its records. Blocking.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
        reserve: Arc<SpaceReserve>,
    ) -> io::Result<LogStore> {
        storage.create_dir_all(dir)?;
        let mut log = RecordFile::open(storage.clone(), &dir.join(LOG_FILE))?;
        let records = log.replay().map_err(storage_error)?;
        let count = records.len();
        let mut live = Live::default();
        for record in records {
            live.apply(record);
        }
        let vote_path = dir.join(VOTE_FILE);
        if storage.exists(&vote_path) {
            let bytes = storage.read(&vote_path)?;
            live.vote = Some(serde_json::from_slice(&bytes).map_err(io::Error::other)?);
        }
        let dead_records = count.saturating_sub(live.entries.len() + 2);
        Ok(LogStore {
            live: Arc::new(tokio::sync::Mutex::new(live)),
            files: Arc::new(Mutex::new(Files {
                storage,
                log,
                vote_path,
                dead_records,
                reserve,
            })),
        })
    }

    /// The last entry known committed when the log was opened or since.
    pub async fn committed(&self) -> Option<LogId> {
        self.live.lock().await.committed
    }

    /// Runs `write` on the files on a blocking thread. Callers hold the `live` lock, so writes
    /// reach the disk in the order Raft made them.
    async fn write<T, F>(&self, write: F) -> io::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Files) -> io::Result<T> + Send + 'static,
    {
        let files = self.files.clone();
        tokio::task::spawn_blocking(move || {
            let mut files = files.lock().unwrap_or_else(|e| e.into_inner());
            write(&mut files)
        })
        .await
        .map_err(io::Error::other)?
    }

    async fn append_records(&self, live: &mut Live, records: Vec<LogRecord>) -> io::Result<()> {
        let count = records.len();
        let records = self
            .write(move |files| {
                for record in &records {
                    let Files { log, reserve, .. } = &mut *files;
                    // Only an append undone for want of space is tried again.
                    reserve.retry_released(|| match log.append(record) {
                        Err(RecordFileError::NotAppended(error)) => Err(error),
                        other => other.map_err(|error| io::Error::other(storage_error(error))),
                    })?;
                }
                files.dead_records += count;
                Ok(records)
            })
            .await?;
        for record in records {
            live.apply(record);
        }
        Ok(())
    }

    /// Rewrites the file with only the live records when enough are dead.
    async fn shed_dead_records(&self, live: &Live) -> io::Result<()> {
        let records = live.records();
        let keep = records.len();
        self.write(move |files| {
            if files.dead_records <= keep + DEAD_RECORDS_MAX {
                return Ok(());
            }
            files.log.rewrite(&records).map_err(storage_error)?;
            files.dead_records = 0;
            Ok(())
        })
        .await
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let live = self.live.lock().await;
        Ok(live.entries.range(range).map(|(_, e)| e.clone()).collect())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.live.lock().await.vote)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let live = self.live.lock().await;
        let last = live
            .entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(live.last_purged);
        Ok(LogState {
            last_purged_log_id: live.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let mut live = self.live.lock().await;
        let bytes = serde_json::to_vec(vote).map_err(io::Error::other)?;
        self.write(move |files| files.storage.write_atomic(&files.vote_path, &bytes))
            .await?;
        live.vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        let mut live = self.live.lock().await;
        if live.committed == committed {
            return Ok(());
        }
        self.append_records(&mut live, vec![LogRecord::Committed(committed)])
            .await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.live.lock().await.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut live = self.live.lock().await;
        let records: Vec<LogRecord> = entries.into_iter().map(LogRecord::Entry).collect();
        match self.append_records(&mut live, records).await {
            Ok(()) => {
                callback.io_completed(Ok(()));
                Ok(())
            }
            Err(error) => {
                callback.io_completed(Err(io::Error::new(error.kind(), error.to_string())));
                Err(error)
            }
        }
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let mut live = self.live.lock().await;
        self.append_records(&mut live, vec![LogRecord::TruncateAfter(last_log_id)])
            .await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let mut live = self.live.lock().await;
        self.append_records(&mut live, vec![LogRecord::Purge(log_id)])
            .await?;
        self.shed_dead_records(&live).await
    }
}
