//! The coordinator runtime, generic over what it coordinates (Kafka 4's `CoordinatorRuntime`
//! is the model): an internal topic's partitions, each served by a shard this broker loaded by
//! replaying the partition's records while it leads it; the one lock every operation takes;
//! the clock it is given; and the timer that runs each shard's due work.
//!
//! A shard is one partition's state ([`Shard`]). The group coordinator is the first kind;
//! the transaction coordinator and share-group state are meant to be others.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use weir_clock::{Clock, Now};
use weir_lock_order::{Rank, Ranked};

/// Records appended in one batch at most, well inside an internal topic's
/// `max.message.bytes`: a larger write is appended as several batches.
pub(crate) const BATCH_BYTES: usize = 256 * 1024;

/// The timer wakes at least this often, whatever the shards' deadlines.
const TIMER_IDLE: Duration = Duration::from_secs(1);

/// One record of the internal topic: key and value (`None`: a tombstone).
pub type StoredRecord = (Vec<u8>, Option<Vec<u8>>);

/// What [`CoordinatorLog::load`] hands each entry of the log to.
pub type RecordVisitor<'a> = dyn FnMut(LogEntry<'_>) + 'a;

/// One entry of an internal topic as a load reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogEntry<'a> {
    /// A record with a key.
    Record {
        /// Its offset.
        offset: i64,
        /// The producer whose transaction wrote it (a transactional batch), if any: it counts
        /// only once that transaction commits.
        transactional: Option<i64>,
        /// Its key.
        key: &'a [u8],
        /// Its value (`None`: a tombstone).
        value: Option<&'a [u8]>,
    },
    /// A transaction marker: `producer_id`'s transaction on this partition ends.
    Marker {
        /// The producer whose transaction it ends.
        producer_id: i64,
        /// Commit (else abort).
        commit: bool,
    },
}

/// A producer id with an epoch of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdAndEpoch {
    /// The producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub epoch: i16,
}

/// A batch of a producer's open transaction: the producer, and the guard of the verification
/// that its transaction holds the partition (the log's `VerificationGuard`, as its number),
/// which the batch that opens the transaction on the partition needs (KIP-890).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnAppend {
    /// The producer and its epoch.
    pub producer: ProducerIdAndEpoch,
    /// The verification's guard; `None` when the transaction is open on the partition.
    pub verification: Option<u64>,
}

/// Why the runtime cannot serve a key, or store a write, now; each shard's error type says
/// it in its own protocol's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    /// The internal topic is not there yet, or a write to it failed: try again.
    #[error("the coordinator is not available")]
    NotAvailable,
    /// Another broker leads the key's partition of the internal topic.
    #[error("this broker is not the coordinator")]
    NotCoordinator,
    /// The key's partition is still loading.
    #[error("the coordinator is loading the partition")]
    LoadInProgress,
    /// The records do not fit in one batch of the internal topic.
    #[error("the write is larger than the internal topic takes")]
    TooLarge,
    /// A transactional write or marker of a producer epoch older than the partition knows.
    #[error("the producer's epoch is fenced")]
    ProducerFenced,
    /// A transactional write that would open its transaction on the partition without a
    /// current verification that the transaction holds it.
    #[error("the partition is not in the producer's transaction")]
    NotInTransaction,
    /// A marker from an older transaction coordinator than the one that wrote the
    /// producer's last marker on the partition.
    #[error("the marker's transaction coordinator is fenced")]
    CoordinatorFenced,
}

/// A future the runtime awaits.
pub type Pending = Pin<Box<dyn Future<Output = Result<(), RuntimeError>> + Send>>;

/// An append to the internal topic: where it landed, and when it is safe.
pub struct Appended {
    /// Offset of the batch's first record.
    pub base_offset: i64,
    /// Resolves once the records are as durable as the topic's policy makes a produce with
    /// `acks=all` (the commit is acknowledged only then).
    pub durable: Pending,
}

/// A runtime's access to its internal topic (`__consumer_offsets` for the group
/// coordinator): the broker's partition API.
pub trait CoordinatorLog: Send + Sync + 'static {
    /// Appends `records` as one batch to `partition`; a batch of the producer's open
    /// transaction when `transactional` is given (its records count once a commit marker follows). Called under
    /// the coordinator's lock, so records land in the order the coordinator decided them;
    /// must not wait for the disk beyond a write to the page cache.
    fn append(
        &self,
        partition: i32,
        records: Vec<StoredRecord>,
        transactional: Option<TxnAppend>,
    ) -> Result<Appended, RuntimeError>;

    /// Appends the marker that ends `producer`'s transaction on `partition` (a commit, else
    /// an abort), written by the transaction coordinator of `coordinator_epoch`. As
    /// [`CoordinatorLog::append`], under the coordinator's lock.
    fn append_marker(
        &self,
        partition: i32,
        producer: ProducerIdAndEpoch,
        commit: bool,
        coordinator_epoch: i32,
    ) -> Result<Appended, RuntimeError>;

    /// Reads every record and transaction marker of `partition` in offset order, handing
    /// each to `visit`. Blocking: called off the async workers.
    fn load(&self, partition: i32, visit: &mut RecordVisitor<'_>) -> Result<(), String>;
}

/// Kafka's placement of a key (a group id, a transactional id) on its internal topic:
/// `abs(key.hashCode()) % partitions`, with Java's `String.hashCode` over UTF-16 code units
/// and Kafka's `Utils.abs`: the absolute value, 0 for `i32::MIN` (not the partitioner's
/// `& 0x7fffffff`, which differs for every negative hash).
pub fn partition_for(key: &str, partitions: i32) -> i32 {
    let mut hash: i32 = 0;
    for unit in key.encode_utf16() {
        hash = hash.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    hash.checked_abs().unwrap_or(0) % partitions.max(1)
}

/// The state of one partition of an internal topic.
pub(crate) trait Shard: Send + 'static {
    /// The internal topic, for log lines.
    const TOPIC: &'static str;

    /// A record of the topic, decoded.
    type Record: Send;

    /// Why an operation is refused, in the shard's protocol.
    type Error: From<RuntimeError> + Send;

    /// Reads a stored record: `Ok(None)` for a kind this shard does not keep, an error for
    /// one that does not parse (skipped, and counted in the load's log line).
    fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<Self::Record>, String>;

    /// The record as stored.
    fn encode(record: &Self::Record) -> StoredRecord;

    /// Applies one durable record at `offset`, at time `now` (when what a record starts, a
    /// session, begins): every record of the partition in offset order while it loads, and
    /// each record of a [`Runtime::write`] once it is durable, so the state a restart loads
    /// is the state the writes made.
    fn apply(&mut self, offset: i64, record: Self::Record, now: Now);

    /// Applies a durable record of `producer_id`'s open transaction, which counts only once a
    /// commit marker for it follows ([`Shard::apply_marker`]). A shard whose records are never
    /// transactional applies it as any record.
    fn apply_transactional(
        &mut self,
        offset: i64,
        producer_id: i64,
        record: Self::Record,
        now: Now,
    ) {
        let _ = producer_id;
        self.apply(offset, record, now);
    }

    /// A durable marker ends `producer_id`'s transaction on the partition: its records
    /// count from now on (`commit`), or never.
    fn apply_marker(&mut self, producer_id: i64, commit: bool) {
        let _ = (producer_id, commit);
    }

    /// A [`Runtime::write`] for `key` appended `records`, which are not durable yet.
    fn writing(&mut self, key: &str, records: &[Self::Record]);

    /// The write of `records` for `key` ended: they are applied next if durable, else the
    /// write failed.
    fn written(&mut self, key: &str, records: &[Self::Record]);

    /// Records of a [`Runtime::write_applied`] for `key`, which changed the shard before they
    /// were stored, are not stored (or not all): the shard must store them again.
    fn unwritten(&mut self, key: &str, records: &[Self::Record]);

    /// How many bytes `record` takes in a batch, about (batches are cut at [`BATCH_BYTES`]).
    fn size(record: &Self::Record) -> usize;

    /// Every record is applied; the shard serves from now on. Says what it holds, for the
    /// log line ("3 groups, 12 committed offsets").
    fn finish_load(&mut self, now: Now) -> String;

    /// When [`Shard::tick`] next has work, at the latest.
    fn next_deadline(&self) -> Option<Instant>;

    /// Work the timer does for a shard without the lock (computing a large assignment).
    type Work: Send;
    /// What such work gives back to its shard.
    type Done: Send;

    /// Does the work due by `now` (sessions that expired, rebalances whose time is up,
    /// retention), adding what it stores to `writes`; returns work too large to do under the
    /// lock.
    fn tick(&mut self, now: Now, writes: &mut Vec<TimerWrite<Self::Record>>) -> Vec<Self::Work>;

    /// Does work [`Shard::tick`] returned, without the lock (on the timer's thread).
    fn work(work: Self::Work) -> Self::Done;

    /// Takes back what [`Shard::work`] gave, under the lock, adding what it stores to
    /// `writes`.
    fn finish(&mut self, done: Self::Done, now: Now, writes: &mut Vec<TimerWrite<Self::Record>>);

    /// How many things (groups) it holds.
    fn len(&self) -> usize;
}

/// One partition as this broker serves it.
enum Slot<S> {
    /// Not loaded yet: requests wait (COORDINATOR_LOAD_IN_PROGRESS).
    Loading,
    /// Loaded and served, as the coordinator of `epoch`: the partition's leader epoch when
    /// this broker took it over, which the markers it writes carry.
    Loaded { shard: S, epoch: i32 },
    /// Another broker leads it (NOT_COORDINATOR).
    Elsewhere,
}

/// Every partition of the internal topic and the shards loaded here: what the runtime's lock
/// guards.
pub(crate) struct Partitions<S> {
    /// Partitions of the topic (0 until it exists).
    count: i32,
    slots: Vec<Slot<S>>,
}

impl<S> Partitions<S> {
    /// Partitions of the topic, or 0 before it exists.
    pub(crate) fn count(&self) -> i32 {
        self.count
    }

    /// The partition serving `key`, if this broker serves it now.
    pub(crate) fn served_partition(&self, key: &str) -> Result<i32, RuntimeError> {
        if self.count == 0 {
            return Err(RuntimeError::NotAvailable);
        }
        let partition = partition_for(key, self.count);
        match self.slots.get(partition as usize) {
            Some(Slot::Loaded { .. }) => Ok(partition),
            Some(Slot::Elsewhere) => Err(RuntimeError::NotCoordinator),
            Some(Slot::Loading) | None => Err(RuntimeError::LoadInProgress),
        }
    }

    /// The coordinator epoch of the partition serving `key`, if this broker serves it now.
    pub(crate) fn served_epoch(&self, key: &str) -> Result<i32, RuntimeError> {
        let partition = self.served_partition(key)?;
        match self.slot(partition) {
            Some(Slot::Loaded { epoch, .. }) => Ok(*epoch),
            _ => Err(RuntimeError::LoadInProgress),
        }
    }

    /// The shard serving `key`, with its partition.
    pub(crate) fn served(&mut self, key: &str) -> Result<(i32, &mut S), RuntimeError> {
        let partition = self.served_partition(key)?;
        match self.slots.get_mut(partition as usize) {
            Some(Slot::Loaded { shard, .. }) => Ok((partition, shard)),
            _ => Err(RuntimeError::LoadInProgress),
        }
    }

    /// The slot of `partition`, if the topic has it.
    fn slot(&self, partition: i32) -> Option<&Slot<S>> {
        usize::try_from(partition)
            .ok()
            .and_then(|index| self.slots.get(index))
    }

    /// [`Partitions::slot`], to change.
    fn slot_mut(&mut self, partition: i32) -> Option<&mut Slot<S>> {
        usize::try_from(partition)
            .ok()
            .and_then(|index| self.slots.get_mut(index))
    }

    /// The shard of `partition` if it is loaded here.
    fn loaded_shard(&mut self, partition: i32) -> Option<&mut S> {
        match self.slot_mut(partition) {
            Some(Slot::Loaded { shard, .. }) => Some(shard),
            _ => None,
        }
    }

    /// Checks that `partition` is loaded and served here.
    pub(crate) fn loaded(&self, partition: i32) -> Result<(), RuntimeError> {
        if self.count == 0 {
            return Err(RuntimeError::NotAvailable);
        }
        match self.slot(partition) {
            Some(Slot::Loaded { .. }) => Ok(()),
            Some(Slot::Elsewhere) | None => Err(RuntimeError::NotCoordinator),
            Some(Slot::Loading) => Err(RuntimeError::LoadInProgress),
        }
    }

    /// [`Partitions::served`], to read.
    pub(crate) fn served_ref(&self, key: &str) -> Result<(i32, &S), RuntimeError> {
        let partition = self.served_partition(key)?;
        match self.slots.get(partition as usize) {
            Some(Slot::Loaded { shard, .. }) => Ok((partition, shard)),
            _ => Err(RuntimeError::LoadInProgress),
        }
    }

    /// Every loaded shard.
    pub(crate) fn shards(&self) -> impl Iterator<Item = &S> {
        self.slots.iter().filter_map(|slot| match slot {
            Slot::Loaded { shard, .. } => Some(shard),
            _ => None,
        })
    }

    /// Every loaded shard, with its partition, to change.
    pub(crate) fn shards_mut(&mut self) -> impl Iterator<Item = (i32, &mut S)> {
        (0i32..)
            .zip(&mut self.slots)
            .filter_map(|(p, slot)| match slot {
                Slot::Loaded { shard, .. } => Some((p, shard)),
                _ => None,
            })
    }
}

/// What a shard operation decided: the answer to give, and the records that make it so.
pub(crate) struct Decision<R, Record> {
    /// The answer, given once the records are durable.
    pub(crate) answer: R,
    /// The records to append (none: nothing to store, the answer is given at once).
    pub(crate) records: Vec<Record>,
}

/// Records a shard's timer work appends for `key`, with nobody waiting for them.
pub(crate) struct TimerWrite<Record> {
    /// What the records are about (a group id).
    pub(crate) key: String,
    /// The records.
    pub(crate) records: Vec<Record>,
    /// The work changed the shard already ([`Runtime::write_applied`]); otherwise the records
    /// are applied once durable ([`Runtime::write`]).
    pub(crate) applied: bool,
}

/// What a [`Runtime::write`] gives back.
pub(crate) struct Written<R, E> {
    /// The answer `decide` gave.
    pub(crate) answer: R,
    /// Whether its records are appended and durable (and applied).
    pub(crate) stored: Result<(), E>,
}

/// The runtime: shards of one internal topic behind one lock, a clock, and a timer.
pub(crate) struct Runtime<S> {
    log: Arc<dyn CoordinatorLog>,
    clock: Arc<dyn Clock>,
    /// A shard with nothing in it yet, to load a partition into.
    new_shard: Box<dyn Fn(Now) -> S + Send + Sync>,
    partitions: Mutex<Partitions<S>>,
    /// Wakes the timer's thread when a deadline may have moved earlier, or to stop.
    alarm: Mutex<Alarm>,
    bell: Condvar,
}

/// Stops the timer's thread when dropped.
struct StopOnDrop<'a, S>(&'a Runtime<S>);

impl<S> Drop for StopOnDrop<'_, S> {
    fn drop(&mut self) {
        let runtime = self.0;
        runtime
            .alarm
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stopped = true;
        runtime.bell.notify_one();
    }
}

/// What the timer's thread is woken for.
#[derive(Default)]
struct Alarm {
    /// A deadline may have moved earlier since the timer last looked.
    woken: bool,
    /// The timer ends.
    stopped: bool,
    /// When the timer looks next on its own, while it waits.
    planned: Option<Instant>,
}

impl<S: Shard> Runtime<S> {
    /// A runtime with no partitions yet: requests get COORDINATOR_NOT_AVAILABLE until
    /// [`Runtime::start`].
    pub(crate) fn new(
        log: Arc<dyn CoordinatorLog>,
        clock: Arc<dyn Clock>,
        new_shard: impl Fn(Now) -> S + Send + Sync + 'static,
    ) -> Runtime<S> {
        Runtime {
            log,
            clock,
            new_shard: Box::new(new_shard),
            partitions: Mutex::new(Partitions {
                count: 0,
                slots: Vec::new(),
            }),
            alarm: Mutex::new(Alarm::default()),
            bell: Condvar::new(),
        }
    }

    /// The one lock: every operation on a shard runs under it. First in the lock order
    /// ([`weir_lock_order`]): a shard appends to `__consumer_offsets` while it holds it.
    pub(crate) fn lock(&self) -> Ranked<MutexGuard<'_, Partitions<S>>> {
        // A panic here aborts the process (release builds); tests see the state as it was.
        Ranked::take(Rank::Coordinator, || {
            self.partitions.lock().unwrap_or_else(|e| e.into_inner())
        })
    }

    /// The time now, from the clock the runtime was given.
    pub(crate) fn now(&self) -> Now {
        self.clock.now()
    }

    /// The write path of every operation that changes what a shard stores: under the lock,
    /// `decide` looks at the shard serving `key` and returns its answer with the records that
    /// make it so; they are appended under the same lock (so records land in the order they
    /// were decided), and once they are durable they are applied to the shard with
    /// [`Shard::apply`], the function loading uses, before the answer is given. A refusal
    /// of `decide` is the error; a failed append or durability leaves the shard as it was and
    /// is [`Written::stored`]. The records go in one batch.
    pub(crate) async fn write<R: Send>(
        &self,
        key: &str,
        decide: impl FnOnce(&S, Now) -> Result<Decision<R, S::Record>, S::Error> + Send,
    ) -> Result<Written<R, S::Error>, S::Error> {
        self.write_as(key, None, decide).await
    }

    /// [`Runtime::write`] of records in `producer`'s open transaction: one transactional
    /// batch, applied once durable with [`Shard::apply_transactional`], so they count only
    /// once the transaction's commit marker follows. A producer epoch the partition knows a
    /// newer one of is refused ([`RuntimeError::ProducerFenced`]), as is a batch that would
    /// open the transaction without the guard of a current verification
    /// ([`RuntimeError::NotInTransaction`]).
    pub(crate) async fn write_transactional<R: Send>(
        &self,
        key: &str,
        transactional: TxnAppend,
        decide: impl FnOnce(&S, Now) -> Result<Decision<R, S::Record>, S::Error> + Send,
    ) -> Result<Written<R, S::Error>, S::Error> {
        self.write_as(key, Some(transactional), decide).await
    }

    async fn write_as<R: Send>(
        &self,
        key: &str,
        transactional: Option<TxnAppend>,
        decide: impl FnOnce(&S, Now) -> Result<Decision<R, S::Record>, S::Error> + Send,
    ) -> Result<Written<R, S::Error>, S::Error> {
        let (answer, records, appended) = {
            let mut partitions = self.lock();
            let now = self.clock.now();
            let (partition, shard) = partitions.served(key)?;
            let Decision { answer, records } = decide(shard, now)?;
            if records.is_empty() {
                return Ok(Written {
                    answer,
                    stored: Ok(()),
                });
            }
            match self.append_decided(partition, shard, key, &records, transactional) {
                Ok(appended) => (answer, records, appended),
                Err(error) => {
                    return Ok(Written {
                        answer,
                        stored: Err(error.into()),
                    })
                }
            }
        };
        let stored = appended.durable.await;
        let producer_id = transactional.map(|t| t.producer.producer_id);
        self.settle(
            key,
            records,
            appended.base_offset,
            producer_id,
            stored.is_ok(),
        );
        Ok(Written {
            answer,
            stored: stored.map_err(S::Error::from),
        })
    }

    /// Ends `producer`'s transaction on `partition` (served here): appends its marker (a
    /// commit, else an abort) under the lock, and once it is durable tells the shard
    /// ([`Shard::apply_marker`]). Refused with the runtime's error while the partition is
    /// not served here, so the marker's writer tries again.
    pub(crate) async fn complete_transaction(
        &self,
        partition: i32,
        producer: ProducerIdAndEpoch,
        commit: bool,
        coordinator_epoch: i32,
    ) -> Result<(), RuntimeError> {
        let appended = {
            let partitions = self.lock();
            partitions.loaded(partition)?;
            self.log
                .append_marker(partition, producer, commit, coordinator_epoch)?
        };
        appended.durable.await?;
        let mut partitions = self.lock();
        // A shard unloaded meanwhile takes nothing; one loaded again read the marker.
        if let Some(shard) = partitions.loaded_shard(partition) {
            shard.apply_marker(producer.producer_id, commit);
        }
        Ok(())
    }

    /// The write path of an operation that changes the shards itself before its records are
    /// stored (Kafka writes its classic groups so, with `replayRecords` false; Weir's
    /// consumer groups apply each record as they make it, with the function loading applies
    /// it with): under the lock, `op` makes its change and returns its answer with the
    /// records that make the log hold it, which are appended under the same lock in batches
    /// of at most [`BATCH_BYTES`]; the answer waits until they are durable. When they are not,
    /// the shard is told ([`Shard::unwritten`]) so its next write stores them again.
    pub(crate) async fn write_applied<R: Send>(
        &self,
        key: &str,
        op: impl FnOnce(&mut Partitions<S>, Now) -> Result<Decision<R, S::Record>, S::Error> + Send,
    ) -> Result<Written<R, S::Error>, S::Error> {
        let (answer, records, durable) = {
            let mut partitions = self.lock();
            let now = self.clock.now();
            let Decision { answer, records } = op(&mut partitions, now)?;
            if records.is_empty() {
                return Ok(Written {
                    answer,
                    stored: Ok(()),
                });
            }
            let (partition, shard) = partitions.served(key)?;
            match self.append_applied(partition, shard, key, &records) {
                Ok(durable) => (answer, records, durable),
                Err(error) => {
                    return Ok(Written {
                        answer,
                        stored: Err(error.into()),
                    })
                }
            }
        };
        let stored = durable.await;
        if stored.is_err() {
            self.unwritten(key, &records);
        }
        Ok(Written {
            answer,
            stored: stored.map_err(S::Error::from),
        })
    }

    /// Appends a decision's records for `key` as one batch (under the lock) and tells the
    /// shard a write is under way; they are applied once durable ([`Runtime::settle`]).
    fn append_decided(
        &self,
        partition: i32,
        shard: &mut S,
        key: &str,
        records: &[S::Record],
        transactional: Option<TxnAppend>,
    ) -> Result<Appended, RuntimeError> {
        let appended = self.log.append(
            partition,
            records.iter().map(S::encode).collect(),
            transactional,
        )?;
        shard.writing(key, records);
        Ok(appended)
    }

    /// Appends records that changed `shard` already, in batches of at most [`BATCH_BYTES`];
    /// the future resolves once all are durable. A failed append tells the shard at once.
    fn append_applied(
        &self,
        partition: i32,
        shard: &mut S,
        key: &str,
        records: &[S::Record],
    ) -> Result<Pending, RuntimeError> {
        let mut durable = Vec::new();
        let mut rest = records;
        while !rest.is_empty() {
            let mut bytes = 0usize;
            let cut = rest
                .iter()
                .position(|record| {
                    bytes += S::size(record);
                    bytes > BATCH_BYTES
                })
                .unwrap_or(rest.len())
                .max(1);
            let (batch, after) = rest.split_at(cut);
            match self
                .log
                .append(partition, batch.iter().map(S::encode).collect(), None)
            {
                Ok(appended) => durable.push(appended.durable),
                Err(error) => {
                    shard.unwritten(key, records);
                    return Err(error);
                }
            }
            rest = after;
        }
        Ok(Box::pin(async move {
            for wait in durable {
                wait.await?;
            }
            Ok(())
        }))
    }

    /// A write for `key` ended: its records, from `base_offset` on, are applied if `durable`
    /// (as records of `transactional`'s open transaction when given).
    fn settle(
        &self,
        key: &str,
        records: Vec<S::Record>,
        base_offset: i64,
        transactional: Option<i64>,
        durable: bool,
    ) {
        let mut partitions = self.lock();
        // A shard unloaded meanwhile takes nothing; one loaded again read the records from
        // the log, and applying one twice changes nothing.
        let now = self.clock.now();
        if let Ok((_, shard)) = partitions.served(key) {
            shard.written(key, &records);
            if durable {
                for (offset, record) in (base_offset..).zip(records) {
                    match transactional {
                        Some(producer_id) => {
                            shard.apply_transactional(offset, producer_id, record, now)
                        }
                        None => shard.apply(offset, record, now),
                    }
                }
            }
        }
    }

    /// Records of a [`Runtime::write_applied`] were not made durable: the shard serving
    /// `key`, if it still does, stores them again.
    fn unwritten(&self, key: &str, records: &[S::Record]) {
        if let Ok((_, shard)) = self.lock().served(key) {
            shard.unwritten(key, records);
        }
    }

    /// Tells the timer to look at every shard now.
    pub(crate) fn wake(&self) {
        self.wake_by(Some(self.clock.now().instant));
    }

    /// Tells the timer that something is due at `deadline`: it is woken only when that is
    /// earlier than it planned to look, so a request that pushes deadlines later (most
    /// heartbeats) costs it nothing.
    pub(crate) fn wake_by(&self, deadline: Option<Instant>) {
        let Some(deadline) = deadline else {
            return;
        };
        let mut alarm = self.alarm.lock().unwrap_or_else(|e| e.into_inner());
        if alarm.planned.is_none_or(|planned| deadline < planned) {
            alarm.woken = true;
            self.bell.notify_one();
        }
    }

    /// Runs the work every shard has due now: under the lock, then what is too large for it
    /// without the lock, then its results under the lock again. The writes the work makes
    /// are applied once durable, on the broker's Tokio runtime.
    pub(crate) fn tick(self: &Arc<Self>) {
        let now = self.clock.now();
        let mut work = Vec::new();
        {
            let mut partitions = self.lock();
            for (partition, shard) in partitions.shards_mut() {
                if shard.next_deadline().is_some_and(|due| due <= now.instant) {
                    let mut writes = Vec::new();
                    work.extend(
                        shard
                            .tick(now, &mut writes)
                            .into_iter()
                            .map(|w| (partition, w)),
                    );
                    for write in writes {
                        self.write_detached(partition, shard, write);
                    }
                }
            }
        }
        if work.is_empty() {
            return;
        }
        let done: Vec<(i32, S::Done)> = work
            .into_iter()
            .map(|(partition, work)| (partition, S::work(work)))
            .collect();
        let now = self.clock.now();
        let mut partitions = self.lock();
        for (partition, done) in done {
            // A shard unloaded meanwhile takes nothing back; one loaded again checks.
            if let Some(shard) = partitions.loaded_shard(partition) {
                let mut writes = Vec::new();
                shard.finish(done, now, &mut writes);
                for write in writes {
                    self.write_detached(partition, shard, write);
                }
            }
        }
    }

    /// Appends a timer's write (under the lock) and settles it once durable, in a task of
    /// its own: applies it, or for a write that changed the shard already, tells the shard
    /// when it failed. A failure is logged; the shard decides or stores it again later.
    fn write_detached(
        self: &Arc<Self>,
        partition: i32,
        shard: &mut S,
        TimerWrite {
            key,
            records,
            applied,
        }: TimerWrite<S::Record>,
    ) {
        if records.is_empty() {
            return;
        }
        let appended = if applied {
            self.append_applied(partition, shard, &key, &records)
                .map(|durable| (durable, None))
        } else {
            self.append_decided(partition, shard, &key, &records, None)
                .map(|appended| (appended.durable, Some(appended.base_offset)))
        };
        let (durable, base_offset) = match appended {
            Ok(appended) => appended,
            Err(error) => {
                tracing::warn!(target: "weir::coordinator", topic = S::TOPIC, partition, key, %error, "a timer's write was not appended; it is stored again later");
                return;
            }
        };
        let runtime = self.clone();
        tokio::spawn(async move {
            let stored = durable.await;
            if let Err(error) = &stored {
                tracing::warn!(target: "weir::coordinator", topic = S::TOPIC, partition, key, %error, "a timer's write was not made durable; it is stored again later");
            }
            match base_offset {
                Some(base_offset) => {
                    runtime.settle(&key, records, base_offset, None, stored.is_ok())
                }
                None if stored.is_err() => runtime.unwritten(&key, &records),
                None => {}
            }
        });
    }

    /// Runs each shard's due work when it is due, on a thread of its own (so a large
    /// group's work never holds up a request's worker), until `stop` resolves.
    pub(crate) async fn run_timers(self: Arc<Self>, stop: impl Future<Output = ()>) {
        let tokio = tokio::runtime::Handle::current();
        let runtime = self.clone();
        let thread = std::thread::Builder::new()
            .name("weir-coordinator-timer".to_string())
            .spawn(move || {
                // Writes nobody waits for are awaited on the broker's runtime.
                let _tokio = tokio.enter();
                runtime.timer_loop();
            });
        let thread = match thread {
            Ok(thread) => thread,
            Err(error) => {
                tracing::error!(target: "weir::coordinator", %error, "the coordinator's timer thread did not start; sessions and rebalance deadlines are not enforced");
                return;
            }
        };
        // The thread ends with this future, however it ends.
        let stopping = StopOnDrop(&self);
        stop.await;
        drop(stopping);
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }

    /// The timer's thread: runs the due work, then sleeps until the next deadline (at most
    /// [`TIMER_IDLE`]) or until woken.
    fn timer_loop(self: &Arc<Self>) {
        loop {
            self.tick();
            let next = self.lock().shards().filter_map(S::next_deadline).min();
            let now = self.clock.now().instant;
            let idle = now + TIMER_IDLE;
            let wait = next
                .map_or(idle, |next| next.min(idle))
                .saturating_duration_since(now);
            let mut alarm = self.alarm.lock().unwrap_or_else(|e| e.into_inner());
            if !alarm.woken && !alarm.stopped {
                alarm.planned = Some(now + wait);
                alarm = self
                    .bell
                    .wait_timeout(alarm, wait)
                    .map(|(alarm, _)| alarm)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            if alarm.stopped {
                return;
            }
            // Running: anything due from now on wakes it again.
            alarm.planned = None;
            alarm.woken = false;
        }
    }
}

/// What the broker does with the runtime of an internal topic, whatever it coordinates: start
/// it once the topic exists, load the partitions this broker leads and unload those another
/// leads as leadership moves, and forget everything when the topic is deleted.
pub trait TopicRuntime: Send + Sync {
    /// The internal topic.
    fn topic(&self) -> &'static str;

    /// The topic exists with `count` partitions: each must be loaded before it serves.
    fn start(&self, count: i32);

    /// Partitions of the topic, or 0 before [`TopicRuntime::start`].
    fn partitions(&self) -> i32;

    /// Loads `partition` into a new shard by applying its records, then serves it as the
    /// coordinator of `epoch`, the partition's leader epoch (a partition already served keeps
    /// the shard it has, which is at least as new as the log, and takes a newer epoch); says
    /// what it holds. Blocking. A record that does not parse is skipped with a warning.
    fn load(&self, partition: i32, epoch: i32) -> Result<String, String>;

    /// Another broker leads `partition` now (or this one stopped leading it): its shard is
    /// dropped and its keys get NOT_COORDINATOR, so clients find the new coordinator, which
    /// loads them from the replicated log. Returns how many keys the shard held, if it was
    /// loaded.
    fn unload(&self, partition: i32) -> Option<usize>;

    /// The coordinator epoch `partition` is served at, if it is loaded and served here.
    fn loaded_epoch(&self, partition: i32) -> Option<i32>;

    /// This broker, which serves `partition`, was elected its leader again at `epoch` (as
    /// when the controller moved on without another leader in between): the shard stays,
    /// the markers it writes from now on carry the newer epoch.
    fn elected_again(&self, partition: i32, epoch: i32);

    /// The topic was deleted: every shard is dropped, and requests get
    /// COORDINATOR_NOT_AVAILABLE until it is created and loaded again.
    fn reset(&self);
}

impl<S: Shard> TopicRuntime for Runtime<S> {
    fn topic(&self) -> &'static str {
        S::TOPIC
    }

    fn partitions(&self) -> i32 {
        self.lock().count()
    }

    fn start(&self, count: i32) {
        let mut partitions = self.lock();
        if partitions.count == 0 {
            partitions.count = count;
            partitions.slots = (0..count.max(0)).map(|_| Slot::Loading).collect();
        }
    }

    fn load(&self, partition: i32, epoch: i32) -> Result<String, String> {
        let mut shard = (self.new_shard)(self.clock.now());
        let mut skipped = 0u64;
        let now = self.clock.now();
        self.log.load(partition, &mut |entry| match entry {
            LogEntry::Record {
                offset,
                transactional,
                key,
                value,
            } => match (S::decode(key, value), transactional) {
                (Ok(Some(record)), None) => shard.apply(offset, record, now),
                (Ok(Some(record)), Some(producer_id)) => {
                    shard.apply_transactional(offset, producer_id, record, now)
                }
                (Ok(None), _) => {}
                (Err(_), _) => skipped += 1,
            },
            LogEntry::Marker {
                producer_id,
                commit,
            } => shard.apply_marker(producer_id, commit),
        })?;
        if skipped > 0 {
            tracing::warn!(target: "weir::coordinator", topic = S::TOPIC, partition, skipped, "records of an internal topic that do not parse were skipped");
        }
        let loaded = shard.finish_load(self.clock.now());
        let mut partitions = self.lock();
        match partitions.slot_mut(partition) {
            Some(slot @ (Slot::Loading | Slot::Elsewhere)) => *slot = Slot::Loaded { shard, epoch },
            // Served here all along: its shard is at least as new as the log; a newer leader
            // epoch (elected again) is taken.
            Some(Slot::Loaded { epoch: served, .. }) => *served = (*served).max(epoch),
            None => {
                tracing::warn!(target: "weir::coordinator", partition, partitions = partitions.count, "a partition the coordinator does not know was loaded; it is not served");
            }
        }
        drop(partitions);
        self.wake();
        Ok(loaded)
    }

    fn unload(&self, partition: i32) -> Option<usize> {
        let mut partitions = self.lock();
        let slot = partitions.slot_mut(partition)?;
        match std::mem::replace(slot, Slot::Elsewhere) {
            Slot::Loaded { shard, .. } => Some(shard.len()),
            Slot::Loading | Slot::Elsewhere => None,
        }
    }

    fn loaded_epoch(&self, partition: i32) -> Option<i32> {
        match self.lock().slot(partition) {
            Some(Slot::Loaded { epoch, .. }) => Some(*epoch),
            _ => None,
        }
    }

    fn elected_again(&self, partition: i32, epoch: i32) {
        if let Some(Slot::Loaded { epoch: served, .. }) = self.lock().slot_mut(partition) {
            *served = (*served).max(epoch);
        }
    }

    fn reset(&self) {
        let mut partitions = self.lock();
        partitions.count = 0;
        partitions.slots.clear();
    }
}
