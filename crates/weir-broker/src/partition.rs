//! One partition replica on this broker: its log, its settings, group-committed fsync, the
//! notification that wakes long-polling fetches, and what a failed write does.
//!
//! Writes that run out of disk space (or file descriptors) are undone by the log and refused
//! with KAFKA_STORAGE_ERROR while reads go on; they are accepted again once space returns. Any
//! other write or fsync failure stops the process: a log that may have lost acknowledged data
//! is never served.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use uuid::Uuid;
use weir_log::{AppendInfo, Log, LogError, ValidBatch};
use weir_metadata::{PartitionImage, NO_LEADER};

use crate::config::TopicSettings;
use crate::hot_partitions::AppendLoad;
use crate::metrics::PartitionCounters;
use crate::rate_limit::LineLimit;
use crate::replication::{IsrRequest, NotAReplica, Replication};
use weir_lock_order::{Rank, Ranked};

/// Shared access to a partition's log, held in lock order ([`weir_lock_order`]).
pub type LogReadGuard<'a> = Ranked<RwLockReadGuard<'a, Log>>;
/// Exclusive access to a partition's log, held in lock order ([`weir_lock_order`]).
pub type LogWriteGuard<'a> = Ranked<RwLockWriteGuard<'a, Log>>;

/// Exit code when the disk fails under the log: the process stops rather than run on with a log
/// that may have lost acknowledged data.
pub const EXIT_CODE_STORAGE_FAILURE: i32 = 3;

/// How often an `acks=all` wait checks that this broker still leads.
const LEADERSHIP_RECHECK_MS: u64 = 100;
/// Wait before trying a postponed fsync again (out of file descriptors).
const FLUSH_RETRY_MS: u64 = 100;
/// Log lines about refused writes and failed checkpoints, at most a few a second broker-wide.
static STORAGE_WARNINGS: LineLimit = LineLimit::new();

/// A partition replica on this broker: the leader, which takes writes and serves reads, or a
/// follower.
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
    /// Writes are being refused for lack of space: the transitions are logged once each.
    writes_refused: AtomicBool,
    /// Serializes checkpoint writes (maintenance and shutdown), taken without the log's lock.
    checkpoint_lock: Mutex<()>,
    /// This broker leads the partition (per the metadata image last applied).
    leader: AtomicBool,
    /// The log's leader epoch while this broker leads, else `NO_LEADER`: a write waiting for
    /// the in-sync replicas is acknowledged only while it is the epoch it was appended at.
    led_epoch: AtomicI32,
    /// This broker's node id, once the partition follows an image.
    node_id: AtomicI32,
    /// The partition's replicas and ISR, and what its leader knows of the followers. Taken
    /// before the log's lock when both are needed.
    replication: Mutex<Replication>,
    /// The log end offset; replica fetches waiting for data watch it.
    log_end: watch::Sender<i64>,
    /// Changes made to the log's end or high watermark so far, counted under its write lock.
    changes: AtomicU64,
    /// The newest change published to the watches: one published late is dropped.
    published: Mutex<u64>,
    /// Bytes and records in and out, for `/metrics`.
    pub counters: PartitionCounters,
    /// Whether producers flood it, as the last sample of the hot partitions found.
    pub(crate) load: AppendLoad,
}

/// A partition's log end and high watermark after a change to its log, and the change's
/// number ([`Partition::publish`] drops one published after a later one).
#[derive(Debug, Clone, Copy)]
struct LogPositions {
    change: u64,
    log_end: i64,
    high_watermark: i64,
}

/// Why an `acks=all` write was not answered as replicated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicationWait {
    /// Every in-sync replica has it (the high watermark passed it).
    Replicated,
    /// This broker stopped leading the partition first.
    NotLeader,
    /// The wait ran out first.
    TimedOut,
    /// The high watermark passed the write only because the ISR shrank below
    /// `min.insync.replicas` (a follower fell behind or was fenced): it is in the log, but on
    /// fewer replicas than asked for.
    BelowMinIsr {
        /// In-sync replicas when the wait ended.
        in_sync: usize,
    },
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
        let log_end = log.log_end_offset();
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
            writes_refused: AtomicBool::new(false),
            checkpoint_lock: Mutex::new(()),
            leader: AtomicBool::new(false),
            led_epoch: AtomicI32::new(NO_LEADER),
            node_id: AtomicI32::new(NO_LEADER),
            replication: Mutex::new(Replication::new(PartitionImage::new(Vec::new(), |_| false))),
            log_end: watch::Sender::new(log_end),
            changes: AtomicU64::new(0),
            published: Mutex::new(0),
            counters: PartitionCounters::default(),
            load: AppendLoad::default(),
        }
    }

    fn replication(&self) -> Ranked<MutexGuard<'_, Replication>> {
        Ranked::take(Rank::Replication, || {
            self.replication.lock().unwrap_or_else(|e| e.into_inner())
        })
    }

    /// Serializes checkpoint writes; taken before the log's lock, never under it.
    fn checkpoint_serial(&self) -> Ranked<MutexGuard<'_, ()>> {
        Ranked::take(Rank::Checkpoint, || {
            self.checkpoint_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        })
    }

    /// The partition as the last applied image has it (replicas, ISR, leader, epochs).
    pub fn state(&self) -> PartitionImage {
        self.replication().image.clone()
    }

    /// Each follower's log end as this leader last heard it (`None` before its first fetch);
    /// empty where this broker does not lead.
    pub fn follower_log_ends(&self) -> Vec<(i32, Option<i64>)> {
        if !self.is_leader() {
            return Vec::new();
        }
        self.replication().follower_log_ends()
    }

    /// Number of in-sync replicas, for `min.insync.replicas`.
    pub fn isr_count(&self) -> usize {
        self.replication().image.isr.len()
    }

    /// The topic's `min.insync.replicas` as a replica count (at least the leader).
    pub fn min_insync_replicas(&self) -> usize {
        usize::try_from(self.settings().min_insync_replicas.max(1)).unwrap_or(1)
    }

    /// The in-sync replica count when it is below `min.insync.replicas`: an `acks=all` write
    /// is then refused before it is appended.
    pub fn too_few_in_sync(&self) -> Option<usize> {
        let in_sync = self.isr_count();
        (in_sync < self.min_insync_replicas()).then_some(in_sync)
    }

    /// A receiver that changes whenever the log end moves (replica fetches wait on it).
    pub fn watch_log_end(&self) -> watch::Receiver<i64> {
        self.log_end.subscribe()
    }

    /// The log end and high watermark of `log` after a change, numbered in the order the
    /// changes were made: called under the log's write lock (hence `&mut`).
    fn positions(&self, log: &mut Log) -> LogPositions {
        LogPositions {
            change: self.changes.fetch_add(1, Ordering::AcqRel) + 1,
            log_end: log.log_end_offset(),
            high_watermark: log.high_watermark(),
        }
    }

    /// Tells those waiting on the log end and the high watermark, after the log's lock is
    /// released, what a change left: unless a later change was published first, whose newer
    /// values an older one would set back (a produce waiting for the watermark would then
    /// wait for a move that had already happened).
    fn publish(&self, positions: LogPositions) {
        let mut published = self.published.lock().unwrap_or_else(|e| e.into_inner());
        if positions.change <= *published {
            return;
        }
        *published = positions.change;
        self.log_end.send_if_modified(|end| {
            let moved = *end != positions.log_end;
            *end = positions.log_end;
            moved
        });
        self.high_watermark.send_if_modified(|hw| {
            let moved = *hw != positions.high_watermark;
            *hw = positions.high_watermark;
            moved
        });
    }

    /// Moves the high watermark to what the ISR allows, if that is further (leader only).
    fn advance_high_watermark(&self, replication: &Replication) {
        let node_id = self.node_id.load(Ordering::Acquire);
        if replication.image.leader != node_id {
            return;
        }
        let mut log = self.log_mut();
        let Some(allowed) = replication.high_watermark(node_id, log.log_end_offset()) else {
            return;
        };
        if allowed > log.high_watermark() {
            log.set_high_watermark(allowed);
            let positions = self.positions(&mut log);
            drop(log);
            self.publish(positions);
        }
    }

    /// A follower fetched from `fetch_offset`, its log starting at `log_start` (-1: unsaid),
    /// at `now`: its progress is recorded, the high watermark moves if the ISR allows, and,
    /// when it has caught up while out of the ISR, the ISR change to ask the controller for is
    /// returned.
    pub fn replica_fetched(
        &self,
        replica: i32,
        (fetch_offset, log_start): (i64, i64),
        now: Instant,
    ) -> Result<Option<IsrRequest>, NotAReplica> {
        let mut replication = self.replication();
        let (log_end, epoch_start) = {
            let log = self.log();
            let epoch = log.leader_epoch();
            let start = log
                .end_offset_for_epoch(epoch - 1)
                .map_or(0, |(_, end)| end);
            (log.log_end_offset(), start)
        };
        if !replication.record_fetch(replica, fetch_offset, log_start, log_end, now) {
            return Err(NotAReplica);
        }
        self.advance_high_watermark(&replication);
        let high_watermark = self.log().high_watermark();
        let expansion = replication.expansion(replica, high_watermark, epoch_start);
        if expansion.is_some() {
            // The replica being added counts from now on; it is caught up, so this holds.
            self.advance_high_watermark(&replication);
        }
        Ok(expansion)
    }

    /// The low watermark: the smallest log start offset over this leader and its in-sync
    /// followers, as their fetches said (DeleteRecords answers once it reaches the offset).
    pub fn low_watermark(&self) -> i64 {
        let node_id = self.node_id.load(Ordering::Acquire);
        let log_start = self.log().log_start_offset();
        self.replication().low_watermark(node_id, log_start)
    }

    /// DeleteRecords on the leader: the log starts at `offset` from now on (see
    /// [`Log::advance_log_start_offset`]); the offset must be at most the high watermark
    /// (OFFSET_OUT_OF_RANGE). Blocking: the new start is checkpointed.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64, LogError> {
        let mut log = self.log_mut();
        let high_watermark = log.high_watermark();
        if offset < 0 || offset > high_watermark {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: log.log_start_offset(),
                log_end_offset: high_watermark,
            });
        }
        log.advance_log_start_offset(offset)
    }

    /// The ISR change to ask for when some follower has been behind for `lag_max` at `now`.
    pub fn lagging_followers(&self, lag_max: Duration, now: Instant) -> Option<IsrRequest> {
        let node_id = self.node_id.load(Ordering::Acquire);
        self.replication().shrink(node_id, lag_max, now)
    }

    /// Whether `request` is still the ISR change this partition waits for.
    pub fn isr_request_pending(&self, request: &IsrRequest) -> bool {
        self.replication().is_pending(request)
    }

    /// The controller refused `request` outright: another may be asked.
    pub fn isr_request_settled(&self, request: &IsrRequest) {
        let mut replication = self.replication();
        replication.settle(request);
        self.advance_high_watermark(&replication);
    }

    /// Whether this broker leads the partition at leader epoch `epoch`.
    fn leads_at(&self, epoch: i32) -> bool {
        self.is_leader() && self.led_epoch.load(Ordering::Acquire) == epoch
    }

    /// Waits until the high watermark passes the `appended` write on at least
    /// `min_insync_replicas` in-sync replicas (the count when the write was appended), this
    /// broker stops leading at the epoch the write was appended at, or `deadline`. The
    /// leadership is checked after the watermark: a leader that lost its place truncates the
    /// write and, as a follower, takes the new leader's watermark, which may pass the write's
    /// offset with other records there.
    pub async fn wait_replicated(
        &self,
        appended: &AppendInfo,
        min_insync_replicas: usize,
        deadline: tokio::time::Instant,
    ) -> ReplicationWait {
        let end_offset = appended.last_offset + 1;
        let mut high_watermark = self.high_watermark.subscribe();
        loop {
            let reached = *high_watermark.borrow_and_update() >= end_offset;
            if !self.leads_at(appended.leader_epoch) {
                return ReplicationWait::NotLeader;
            }
            if reached {
                return match self.isr_count() {
                    in_sync if in_sync < min_insync_replicas => {
                        ReplicationWait::BelowMinIsr { in_sync }
                    }
                    _ => ReplicationWait::Replicated,
                };
            }
            tokio::select! {
                changed = high_watermark.changed() => {
                    if changed.is_err() {
                        return ReplicationWait::NotLeader;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    self.log_replication_timeout(end_offset);
                    return ReplicationWait::TimedOut;
                }
                // Leadership can go without the watermark moving.
                _ = tokio::time::sleep(Duration::from_millis(LEADERSHIP_RECHECK_MS)) => {}
            }
        }
    }

    /// Says why a write ending at `end_offset` was not replicated in time: the high
    /// watermark, the ISR, and where each follower's last fetch said its log ends.
    fn log_replication_timeout(&self, end_offset: i64) {
        let (high_watermark, log_end) = {
            let log = self.log();
            (log.high_watermark(), log.log_end_offset())
        };
        let replication = self.replication();
        tracing::warn!(target: "weir::replication", topic = %self.topic, partition = self.index, end_offset, high_watermark, log_end, isr = ?replication.image.isr, followers = ?replication.follower_log_ends(), "a write was not replicated by its deadline");
    }

    /// Waits until the `appended` write is as safe as an `acks=all` produce makes it: fsynced
    /// first when `sync` (the topic's flush policy), then held by every in-sync replica, at
    /// least `min_insync_replicas` of them, by `deadline`, this broker leading throughout. A
    /// partition that went away before its sync is `NotLeader`.
    pub async fn wait_all_acked(
        &self,
        appended: &AppendInfo,
        sync: bool,
        min_insync_replicas: usize,
        deadline: tokio::time::Instant,
    ) -> ReplicationWait {
        if sync && !self.wait_durable(appended.last_offset + 1).await {
            return ReplicationWait::NotLeader;
        }
        self.wait_replicated(appended, min_insync_replicas, deadline)
            .await
    }

    /// Appends batches fetched from the leader, as the leader stored them, and takes the
    /// leader's high watermark and log start offset (records deleted there are deleted here
    /// too), as far as this log reaches; nothing (0 batches) once this broker leads, as when a
    /// fetch sent to the old leader is answered after this broker's election. Blocking. A write
    /// failure other than a lack of space stops the process, as for a leader's append.
    pub fn append_replicated(
        &self,
        records: &[u8],
        (leader_high_watermark, leader_log_start): (i64, i64),
    ) -> Result<usize, LogError> {
        let mut log = self.log_mut();
        // Under the log's lock, as a leader's appends check the reverse.
        if self.is_leader() {
            return Ok(0);
        }
        let appended = match log.append_replicated_batches(records) {
            Err(LogError::Io(error)) => {
                drop(log);
                self.failed(&error);
                return Err(LogError::Deleted);
            }
            other => other,
        };
        let reach = leader_high_watermark.min(log.log_end_offset());
        log.set_high_watermark(reach);
        if leader_log_start > log.log_start_offset() {
            if let Err(error) = log.advance_log_start_offset(leader_log_start) {
                tracing::warn!(target: "weir::replication", topic = %self.topic, partition = self.index, %error, "could not follow the leader's log start offset; tried again at the next fetch");
            }
        }
        let positions = self.positions(&mut log);
        drop(log);
        self.publish(positions);
        appended
    }

    /// Truncates a follower whose leader says its log diverges after `epoch`, which ends at
    /// `end_offset` in the leader's log (KIP-320): to where both logs' `epoch` ends, the
    /// smaller of the two. Blocking, as [`Partition::truncate_to`].
    pub fn truncate_diverging(&self, epoch: i32, end_offset: i64) -> Result<(), LogError> {
        let own_end = self
            .log()
            .end_offset_for_epoch(epoch)
            .map_or(end_offset, |(_, end)| end);
        self.truncate_to(own_end.min(end_offset))
    }

    /// Removes every record from `offset` on (a follower diverging from its new leader).
    /// Blocking; a failure other than a lack of space stops the process.
    pub fn truncate_to(&self, offset: i64) -> Result<(), LogError> {
        let mut log = self.log_mut();
        let before = log.log_end_offset();
        match log.truncate_to(offset) {
            Ok(()) => {}
            Err(error @ LogError::OutOfResources(_)) => return Err(error),
            Err(error) => {
                drop(log);
                self.failed(&error);
                return Err(LogError::Deleted);
            }
        }
        self.publish_rewritten(
            log,
            before,
            "truncated a divergent log to follow the new leader",
        );
        Ok(())
    }

    /// Empties the log and starts it at `offset`, the leader's log start (a follower the
    /// leader's retention left behind). Blocking.
    pub fn start_over_at(&self, offset: i64) -> Result<(), LogError> {
        let mut log = self.log_mut();
        let before = log.log_end_offset();
        if let Err(error) = log.truncate_fully_and_start_at(offset) {
            drop(log);
            if !matches!(error, LogError::Deleted) {
                self.failed(&error);
            }
            return Err(LogError::Deleted);
        }
        self.publish_rewritten(
            log,
            before,
            "the leader no longer has this replica's offsets: starting over at its log start",
        );
        Ok(())
    }

    /// After a follower cut its log back (from `before`): logs `why` and wakes those waiting on
    /// the log end and high watermark, with the lock released.
    fn publish_rewritten(&self, mut log: LogWriteGuard<'_>, before: i64, why: &str) {
        let positions = self.positions(&mut log);
        drop(log);
        self.publish(positions);
        let log_end = positions.log_end;
        tracing::warn!(target: "weir::replication", topic = %self.topic, partition = self.index, from = before, to = log_end, "{why}");
    }

    /// Whether this broker leads the partition: only the leader takes writes and serves
    /// clients; a follower answers NOT_LEADER_OR_FOLLOWER.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Acquire)
    }

    /// Takes the role the metadata gives this broker (`node_id`) for the partition at `now`
    /// (when followers' progress starts afresh). Becoming
    /// leader at a newer leader epoch starts that epoch at the log end, so every batch appended
    /// from now on carries it and OffsetForLeaderEpoch can tell where the previous one ended.
    /// Blocking (the epoch checkpoint is written once per leader change); without space for
    /// it the partition is not led until a later call succeeds.
    pub fn follow(&self, image: &PartitionImage, node_id: i32, now: Instant) {
        self.node_id.store(node_id, Ordering::Release);
        let mut replication = self.replication();
        replication.update(image, node_id, now);
        {
            // A partition left without followers commits its whole log at once.
            let mut log = self.log_mut();
            log.set_replicated(image.replicas.len() > 1);
            let positions = self.positions(&mut log);
            drop(log);
            self.publish(positions);
        }
        let mut leads = image.leader == node_id;
        let mut led_epoch = NO_LEADER;
        if leads {
            let mut log = self.log_mut();
            if image.leader_epoch > log.leader_epoch() {
                match log.set_leader_epoch(image.leader_epoch) {
                    Ok(()) => {}
                    // Not leading without the epoch on disk; the next image applied tries again.
                    Err(LogError::OutOfResources(error)) => {
                        tracing::error!(target: "weir::storage", topic = %self.topic, partition = self.index, %error, "cannot record the new leader epoch for lack of space; not leading yet");
                        leads = false;
                    }
                    Err(error) => {
                        drop(log);
                        storage_failure(&self.dir, &error.to_string());
                    }
                }
            }
            if leads {
                led_epoch = log.leader_epoch();
            }
        }
        // Leading is given up before its epoch, and taken after it.
        let led = if leads {
            self.led_epoch.store(led_epoch, Ordering::Release);
            self.leader.swap(true, Ordering::AcqRel)
        } else {
            let led = self.leader.swap(false, Ordering::AcqRel);
            self.led_epoch.store(NO_LEADER, Ordering::Release);
            led
        };
        if led != leads {
            tracing::info!(target: "weir::broker", topic = %self.topic, partition = self.index, leader = image.leader, leader_epoch = image.leader_epoch, role = if leads { "leader" } else { "follower" }, "partition role");
        }
        // A smaller ISR (or leading alone) may let the high watermark move at once.
        self.advance_high_watermark(&replication);
    }

    /// Shared access to the log. Hold it briefly, never across an await or a disk read.
    pub fn log(&self) -> LogReadGuard<'_> {
        // Poisoned means an operation on the log panicked part-way; its state may be half
        // applied, so this partition is never served again (release builds abort on panic).
        Ranked::take(Rank::Log, || {
            self.log
                .read()
                .expect("partition log lock poisoned by a panic mid-operation")
        })
    }

    /// Exclusive access to the log. Hold it briefly, never across an await.
    pub fn log_mut(&self) -> LogWriteGuard<'_> {
        Ranked::take(Rank::Log, || {
            self.log
                .write()
                .expect("partition log lock poisoned by a panic mid-operation")
        })
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

    /// Appends one validated batch as the partition's leader (refused `NotLeader` on a
    /// follower) and wakes waiting fetchers. Runs on a blocking thread (the
    /// write may wait on the disk). When the append rolled a segment, the old segment is
    /// fsynced in the background, off the produce path. A write that failed for lack of space
    /// is refused (the log is unchanged); any other write failure stops the process.
    pub fn append(self: &Arc<Self>, batch: &ValidBatch) -> Result<AppendInfo, LogError> {
        let appended = {
            let mut log = self.log_mut();
            // Checked under the log's lock: a follower's copies of the new leader's records
            // take that lock too, so a write that passed its leadership check before an await
            // can never land after them, at an offset of the new leader's epoch.
            if !self.is_leader() {
                return Err(LogError::NotLeader);
            }
            log.append(batch).map(|info| {
                let flags = (log.has_unsynced_rolled(), log.is_replicated());
                (info, self.positions(&mut log), flags)
            })
        };
        let (info, positions, (rolled, replicated)) = match appended {
            Ok(appended) => appended,
            Err(LogError::Io(error)) => {
                self.failed(&error);
                return Err(LogError::Deleted);
            }
            Err(error @ LogError::OutOfResources(_)) => {
                if !self.writes_refused.swap(true, Ordering::AcqRel) {
                    tracing::error!(target: "weir::storage", topic = %self.topic, partition = self.index, %error, "writes refused until space returns; reads go on");
                }
                return Err(error);
            }
            Err(error) => return Err(error),
        };
        if self.writes_refused.swap(false, Ordering::AcqRel) {
            tracing::info!(target: "weir::storage", topic = %self.topic, partition = self.index, "space returned; writes accepted again");
        }
        if rolled && !self.roll_flush_scheduled.swap(true, Ordering::AcqRel) {
            let partition = self.clone();
            tokio::spawn(async move {
                partition.wait_durable(info.last_offset + 1).await;
                partition
                    .roll_flush_scheduled
                    .store(false, Ordering::Release);
            });
        }
        if !info.duplicate {
            let counters = &self.counters;
            counters
                .bytes_in
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            counters.records_in.fetch_add(
                u64::try_from(info.last_offset - info.base_offset + 1).unwrap_or(0),
                Ordering::Relaxed,
            );
        }
        self.publish(positions);
        // A log without followers moved its high watermark itself; with followers, an ISR of
        // the leader alone lets it move at once. Unreplicated appends skip the ISR's lock.
        if replicated && !info.duplicate {
            self.advance_high_watermark(&self.replication());
        }
        Ok(info)
    }

    /// A receiver that changes whenever the high watermark moves.
    pub fn watch_high_watermark(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    /// Returns once every offset below `end_offset` is fsynced (true), or when the partition
    /// went away first (false). Appenders that arrive while a sync runs share the next one
    /// (group commit). A failed fsync stops the process.
    pub async fn wait_durable(&self, end_offset: i64) -> bool {
        let mut synced = self.synced_offset.subscribe();
        loop {
            if *synced.borrow_and_update() >= end_offset {
                return true;
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
                return false;
            }
        }
    }

    async fn flush(&self) {
        // Whatever becomes of this future (finished or dropped mid-sync), the next waiter can
        // lead a flush: a stuck flag would leave every acks=all producer unanswered.
        let lead = FlushLead(self);
        let ticket = self.log().flush_ticket();
        let result = tokio::task::spawn_blocking(move || ticket.sync()).await;
        let done = match result {
            Ok(Ok(done)) => done,
            Ok(Err(error)) if weir_storage::is_resource_exhausted(&error) => {
                // Out of file descriptors (opening the directory to sync it): nothing is known
                // to be lost, so wait and let the next waiter try again.
                if let Some(suppressed) = STORAGE_WARNINGS.admit() {
                    tracing::warn!(target: "weir::storage", topic = %self.topic, partition = self.index, %error, suppressed, "fsync postponed");
                }
                tokio::time::sleep(std::time::Duration::from_millis(FLUSH_RETRY_MS)).await;
                return;
            }
            Ok(Err(error)) => return self.failed(&error),
            // The runtime is going away (the process stops): nothing failed on disk, and
            // nobody waits for this sync any more.
            Err(error) if error.is_cancelled() => {
                tracing::debug!(target: "weir::storage", topic = %self.topic, partition = self.index, "fsync cancelled: the runtime is stopping");
                return;
            }
            Err(error) => storage_failure(&self.dir, &error.to_string()),
        };
        self.log_mut().flush_done(done);
        self.synced_offset.send_if_modified(|synced| {
            *synced = (*synced).max(done.end_offset);
            false
        });
        drop(lead);
    }

    /// Fsyncs what is pending (a segment rolled by retention or age) outside the log's lock.
    /// Blocking: call off the async workers.
    pub fn sync_now(&self) {
        let ticket = self.log().flush_ticket();
        match ticket.sync() {
            Ok(done) => {
                self.log_mut().flush_done(done);
                self.synced_offset
                    .send_modify(|synced| *synced = (*synced).max(done.end_offset));
            }
            Err(error) if weir_storage::is_resource_exhausted(&error) => {
                if let Some(suppressed) = STORAGE_WARNINGS.admit() {
                    tracing::warn!(target: "weir::storage", topic = %self.topic, partition = self.index, %error, suppressed, "fsync postponed");
                }
            }
            Err(error) => self.failed(&error),
        }
    }

    /// Writes the recovery checkpoint and producer snapshot, taken under the lock and written
    /// outside it. Blocking. A full disk skips it with a warning (the next start scans more).
    pub fn write_checkpoint(&self) {
        let checkpoint = self.log().checkpoint();
        let _serial = self.checkpoint_serial();
        match checkpoint.write() {
            Ok(()) => {}
            Err(LogError::OutOfResources(error)) => {
                if let Some(suppressed) = STORAGE_WARNINGS.admit() {
                    tracing::warn!(target: "weir::storage", topic = %self.topic, partition = self.index, %error, suppressed, "checkpoint not written");
                }
            }
            Err(error) => self.failed(&error),
        }
    }

    /// Fsyncs and closes the log with checkpoints and a clean-shutdown marker. Blocking. A full
    /// disk leaves the marker out (the next start recovers as after a crash, losing nothing).
    pub fn close(&self) {
        let _serial = self.checkpoint_serial();
        match self.log_mut().close() {
            Ok(()) => {}
            Err(LogError::OutOfResources(error)) => {
                tracing::warn!(target: "weir::storage", topic = %self.topic, partition = self.index, %error, "clean-shutdown marker not written; the next start recovers this log");
            }
            Err(error) => self.failed(&error),
        }
    }

    /// Marks the partition deleted before its directory goes: writes are refused and
    /// maintenance skips it, so nothing fails on files removed on purpose.
    pub fn mark_deleted(&self) {
        self.log_mut().mark_deleted();
    }

    /// A write or fsync failed: the process stops (a log that may have lost acknowledged data
    /// is never served) — unless the partition was deleted meanwhile and its files are gone on
    /// purpose.
    pub(crate) fn failed(&self, error: &dyn std::fmt::Display) {
        if self.log().is_deleted() {
            tracing::debug!(target: "weir::storage", topic = %self.topic, partition = self.index, %error, "write to a deleted partition dropped");
            return;
        }
        storage_failure(&self.dir, &error.to_string())
    }
}

/// The lead of a group-commit flush. When it ends, however it ends, the "flush in progress"
/// flag is cleared and only then are the waiters woken, so one that still needs a sync leads
/// the next.
struct FlushLead<'a>(&'a Partition);

impl Drop for FlushLead<'_> {
    fn drop(&mut self) {
        *self
            .0
            .flush_in_progress
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = false;
        self.0.synced_offset.send_modify(|_| {});
    }
}

/// Logs an unrecoverable storage failure and stops the process.
pub fn storage_failure(dir: &std::path::Path, error: &str) -> ! {
    tracing::error!(target: "weir::storage", dir = %dir.display(), error, "storage failure; stopping so no acknowledged data is silently lost");
    std::process::exit(EXIT_CODE_STORAGE_FAILURE)
}
