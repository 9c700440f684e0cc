//! The log cleaner's schedule: every `log.cleaner.backoff.ms`, each compacted partition that
//! has enough dirty data is cleaned on a blocking thread (at most `log.cleaner.threads` at
//! once, throttled to `log.cleaner.io.max.bytes.per.second`). Produce and fetch never wait
//! for it: it holds a partition's lock only to plan and to swap files in.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use weir_log::LogError;

use crate::broker::Broker;
use crate::config::CleanerSettings;
use crate::partition::Partition;
use crate::shutdown::stopping;

/// Shares `log.cleaner.io.max.bytes.per.second` among cleaner threads: each accounts what it
/// read and written, and once per [`THROTTLE_WINDOW`] the bytes of that window are checked
/// against the limit and the thread that closes it sleeps off any excess. Time spent idle
/// earns no credit: a cleaning that starts after an hour without any is throttled from its
/// first window on.
pub struct IoThrottle {
    limit: u64,
    /// Start of the current window and the bytes accounted in it.
    window: Mutex<(Instant, u64)>,
}

/// How often the rate is checked (Kafka's cleaner checks every 300 ms).
const THROTTLE_WINDOW: Duration = Duration::from_millis(300);

impl IoThrottle {
    fn new(limit: u64) -> IoThrottle {
        IoThrottle {
            limit,
            window: Mutex::new((Instant::now(), 0)),
        }
    }

    /// Accounts `bytes` and sleeps for as long as the current window is above the limit.
    /// Blocking.
    fn pace(&self, bytes: u64) {
        let delay = self.delay(bytes, Instant::now());
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
    }

    /// Accounts `bytes` at `now`; how long to sleep to bring the window back to the limit.
    fn delay(&self, bytes: u64, now: Instant) -> Duration {
        let mut window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let (started, accounted) = &mut *window;
        *accounted += bytes;
        let elapsed = now.saturating_duration_since(*started);
        if elapsed < THROTTLE_WINDOW {
            return Duration::ZERO;
        }
        let due = Duration::from_secs_f64(*accounted as f64 / self.limit as f64);
        let delay = due.saturating_sub(elapsed);
        *started = now + delay;
        *accounted = 0;
        delay
    }
}

impl Partition {
    /// Cleans this partition when its log is compacted and dirty enough. Blocking. A failure
    /// to read or write leaves the log as it was (a full disk is retried later); a failure
    /// while swapping files in stops the process, and the next start finishes the swap.
    pub fn clean(&self, settings: &CleanerSettings, throttle: &IoThrottle) {
        let plan = self
            .log()
            .cleaning_plan(self.settings().decompressed_bytes_max());
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
            markers_removed = stats.markers_removed,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "cleaned"
        );
    }
}

impl Broker {
    /// Runs the cleaner until shutdown (not at all when `log.cleaner.enable` is false).
    pub async fn run_log_cleaner(self: Arc<Self>) {
        let mut runtime = self.runtime_settings();
        if !runtime.borrow().cleaner.enabled {
            return;
        }
        let mut shutdown = self.shutdown.clone();
        let mut throttle: Option<Arc<IoThrottle>> = None;
        let mut last_round: Option<tokio::time::Instant> = None;
        loop {
            // The settings change at runtime: read them for every round, and again whenever
            // they change while waiting (a shorter backoff applies at once).
            let settings = runtime.borrow_and_update().cleaner;
            let backoff = Duration::from_millis(settings.backoff_ms);
            let next = last_round.map_or_else(tokio::time::Instant::now, |last| last + backoff);
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                changed = runtime.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    continue;
                }
                _ = stopping(&mut shutdown) => return,
            }
            last_round = Some(tokio::time::Instant::now());
            let throttle = match &throttle {
                Some(kept) if kept.limit == settings.io_bytes_per_second => kept.clone(),
                _ => throttle
                    .insert(Arc::new(IoThrottle::new(settings.io_bytes_per_second)))
                    .clone(),
            };
            self.clean_round(settings, throttle).await;
        }
    }

    /// Cleans every compacted partition that needs it, at most `settings.threads` at once;
    /// returns once all are done, so no swap runs past a shutdown.
    async fn clean_round(&self, settings: CleanerSettings, throttle: Arc<IoThrottle>) {
        let threads = Arc::new(Semaphore::new(settings.threads));
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
        for task in running {
            let _ = task.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_throttle_holds_each_window_to_the_limit_and_idle_time_earns_no_credit() {
        const MB: u64 = 1_000_000;
        let throttle = IoThrottle::new(MB);
        let t0 = throttle.window.lock().expect("lock").0;
        let ms = |n: u64| Duration::from_millis(n);
        assert_eq!(
            throttle.delay(MB / 10, t0),
            Duration::ZERO,
            "inside the window"
        );
        // 1.1 MB in 400 ms at 1 MB/s: 700 ms too fast.
        assert_eq!(throttle.delay(MB, t0 + ms(400)), ms(700));
        // An hour idle, then 2 MB at once: the first window that closes pays for all of it.
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(
            throttle.delay(0, later),
            Duration::ZERO,
            "the idle window closes"
        );
        assert_eq!(throttle.delay(2 * MB, later + ms(100)), Duration::ZERO);
        assert_eq!(throttle.delay(0, later + ms(350)), ms(1650));
    }
}
