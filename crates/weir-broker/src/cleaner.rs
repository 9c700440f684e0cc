//! The log cleaner's schedule: every `log.cleaner.backoff.ms`, each compacted partition that
//! has enough dirty data is cleaned on a blocking thread (at most `log.cleaner.threads` at
//! once, throttled to `log.cleaner.io.max.bytes.per.second`). Produce and fetch never wait
//! for it: it holds a partition's lock only to plan and to swap files in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use weir_log::LogError;

use crate::broker::{stopping, Broker};
use crate::config::CleanerSettings;
use crate::handlers::decompressed_bytes_max;
use crate::partition::Partition;

/// Shares `log.cleaner.io.max.bytes.per.second` among cleaner threads: each accounts what it
/// read and written and sleeps when the broker-wide rate would pass the limit.
pub struct IoThrottle {
    limit: u64,
    started: Instant,
    bytes: AtomicU64,
}

impl IoThrottle {
    fn new(limit: u64) -> IoThrottle {
        IoThrottle {
            limit,
            started: Instant::now(),
            bytes: AtomicU64::new(0),
        }
    }

    /// Accounts `bytes` and sleeps for as long as the rate is above the limit. Blocking.
    fn pace(&self, bytes: u64) {
        let total = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let due = Duration::from_secs_f64(total as f64 / self.limit as f64);
        if let Some(ahead) = due.checked_sub(self.started.elapsed()) {
            std::thread::sleep(ahead);
        }
    }
}

impl Partition {
    /// Cleans this partition when its log is compacted and dirty enough. Blocking. A failure
    /// to read or write leaves the log as it was (a full disk is retried later); a failure
    /// while swapping files in stops the process, and the next start finishes the swap.
    pub fn clean(&self, settings: &CleanerSettings, throttle: &IoThrottle) {
        let plan = self
            .log()
            .cleaning_plan(decompressed_bytes_max(&self.settings()));
        let Some(plan) = plan else {
            return;
        };
        let started = Instant::now();
        let cleaned = match plan.clean(settings.key_map_entries, &mut |bytes| throttle.pace(bytes))
        {
            Ok(Some(cleaned)) => cleaned,
            Ok(None) => return,
            // The topic was deleted meanwhile: the cleaning withdrew what it wrote.
            Err(LogError::Deleted) => return,
            Err(LogError::OutOfResources(error)) => {
                tracing::warn!(target: "weir::cleaner", topic = %self.topic, partition = self.index, %error, "cleaning postponed: no space");
                return;
            }
            Err(error) => {
                tracing::error!(target: "weir::cleaner", topic = %self.topic, partition = self.index, %error, "cleaning failed; the log is unchanged");
                return;
            }
        };
        let stats = cleaned.stats;
        let commit = match self.log_mut().finish_cleaning(cleaned) {
            Ok(commit) => commit,
            Err(error) => return self.failed(&error),
        };
        if let Err(error) = commit.complete() {
            return self.failed(&error);
        }
        self.write_checkpoint();
        tracing::info!(
            target: "weir::cleaner",
            topic = %self.topic,
            partition = self.index,
            segments = stats.segments,
            read_bytes = stats.bytes_read,
            written_bytes = stats.bytes_written,
            records = stats.records_read,
            dropped = stats.records_dropped,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "cleaned"
        );
    }
}

impl Broker {
    /// Runs the cleaner until shutdown (not at all when `log.cleaner.enable` is false).
    pub async fn run_log_cleaner(self: Arc<Self>) {
        let settings = self.config.cleaner;
        if !settings.enabled {
            return;
        }
        let throttle = Arc::new(IoThrottle::new(settings.io_bytes_per_second));
        let threads = Arc::new(Semaphore::new(settings.threads));
        let mut shutdown = self.shutdown.clone();
        let mut tick = tokio::time::interval(Duration::from_millis(settings.backoff_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stopping(&mut shutdown) => return,
            }
            let compacted: Vec<Arc<Partition>> = self
                .partitions
                .all()
                .into_iter()
                .filter(|p| p.settings().log.compaction.is_some())
                .collect();
            let mut running = Vec::with_capacity(compacted.len());
            for partition in compacted {
                let Ok(permit) = threads.clone().acquire_owned().await else {
                    return;
                };
                let throttle = throttle.clone();
                running.push(tokio::task::spawn_blocking(move || {
                    let _permit = permit;
                    partition.clean(&settings, &throttle);
                }));
            }
            // A round finishes before shutdown proceeds, so no swap runs past the close.
            for task in running {
                let _ = task.await;
            }
        }
    }
}
