//! One partition replica on this broker: its log, its settings, group-committed fsync and the
//! notification that wakes long-polling fetches.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::watch;
use uuid::Uuid;
use weir_log::{AppendInfo, Log, LogError};

use crate::config::TopicSettings;

/// Exit code when the disk fails under the log: the process stops rather than run on with a log
/// that may have lost acknowledged data.
pub const EXIT_CODE_STORAGE_FAILURE: i32 = 3;

/// A partition replica (the leader, on a single node).
pub struct Partition {
    /// Topic name.
    pub topic: String,
    /// Topic id.
    pub topic_id: Uuid,
    /// Partition index.
    pub index: i32,
    /// The partition's directory.
    pub dir: PathBuf,
    log: RwLock<Log>,
    settings: RwLock<TopicSettings>,
    /// Offsets below this are fsynced; waiters for durability watch it.
    synced_offset: watch::Sender<i64>,
    /// True while one task runs the group-commit fsync.
    flush_in_progress: Mutex<bool>,
    /// The high watermark; fetchers waiting for data watch it.
    high_watermark: watch::Sender<i64>,
    /// A background fsync of a rolled segment is scheduled.
    roll_flush_scheduled: AtomicBool,
}

impl Partition {
    /// Wraps an opened log.
    pub fn new(
        topic: String,
        topic_id: Uuid,
        index: i32,
        dir: PathBuf,
        log: Log,
        settings: TopicSettings,
    ) -> Partition {
        let synced = log.recovery_point();
        let high_watermark = log.high_watermark();
        Partition {
            topic,
            topic_id,
            index,
            dir,
            log: RwLock::new(log),
            settings: RwLock::new(settings),
            synced_offset: watch::Sender::new(synced),
            flush_in_progress: Mutex::new(false),
            high_watermark: watch::Sender::new(high_watermark),
            roll_flush_scheduled: AtomicBool::new(false),
        }
    }

    /// Shared access to the log. Hold it briefly and never across an await.
    pub fn log(&self) -> RwLockReadGuard<'_, Log> {
        // A poisoned lock means a panic mid-operation; the log's own invariants are checked by
        // assertions, so continuing to read is safe.
        self.log.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Exclusive access to the log. Hold it briefly and never across an await.
    pub fn log_mut(&self) -> RwLockWriteGuard<'_, Log> {
        self.log.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The topic settings in force.
    pub fn settings(&self) -> TopicSettings {
        *self.settings.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies new topic settings.
    pub fn update_settings(&self, settings: TopicSettings) {
        *self.settings.write().unwrap_or_else(|e| e.into_inner()) = settings;
        self.log_mut().set_config(settings.log);
    }

    /// Appends one batch and wakes waiting fetchers. When the append rolled a segment, the old
    /// segment is fsynced in the background, off the produce path.
    pub fn append(self: &Arc<Self>, batch: &mut [u8]) -> Result<AppendInfo, LogError> {
        let (info, high_watermark, rolled) = {
            let mut log = self.log_mut();
            let info = log.append(batch)?;
            (info, log.high_watermark(), log.has_unsynced_rolled())
        };
        if rolled && !self.roll_flush_scheduled.swap(true, Ordering::AcqRel) {
            let partition = self.clone();
            tokio::spawn(async move {
                partition.wait_durable(info.last_offset + 1).await;
                partition
                    .roll_flush_scheduled
                    .store(false, Ordering::Release);
            });
        }
        self.high_watermark.send_if_modified(|hw| {
            let moved = high_watermark > *hw;
            *hw = (*hw).max(high_watermark);
            moved
        });
        Ok(info)
    }

    /// A receiver that changes whenever the high watermark moves.
    pub fn watch_high_watermark(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    /// Returns once every offset below `end_offset` is fsynced. Appenders that arrive while a
    /// sync runs share the next one (group commit). A failed fsync stops the process.
    pub async fn wait_durable(&self, end_offset: i64) {
        let mut synced = self.synced_offset.subscribe();
        loop {
            if *synced.borrow_and_update() >= end_offset {
                return;
            }
            let lead = {
                let mut in_progress = self
                    .flush_in_progress
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                !std::mem::replace(&mut *in_progress, true)
            };
            if lead {
                self.flush().await;
                continue;
            }
            if synced.changed().await.is_err() {
                return;
            }
        }
    }

    async fn flush(&self) {
        let ticket = self.log().flush_ticket();
        let end_offset = ticket.end_offset;
        let result = tokio::task::spawn_blocking(move || ticket.sync()).await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(error)) => storage_failure(&self.dir, &error.to_string()),
            Err(error) => storage_failure(&self.dir, &error.to_string()),
        }
        self.log_mut().flush_done(end_offset);
        *self
            .flush_in_progress
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = false;
        self.synced_offset
            .send_modify(|synced| *synced = (*synced).max(end_offset));
    }
}

/// Logs an unrecoverable storage failure and stops the process.
pub fn storage_failure(dir: &std::path::Path, error: &str) -> ! {
    tracing::error!(target: "weir::storage", dir = %dir.display(), error, "storage failure; stopping so no acknowledged data is silently lost");
    std::process::exit(EXIT_CODE_STORAGE_FAILURE)
}
