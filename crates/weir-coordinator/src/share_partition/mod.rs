//! The share-partition state machine of KIP-932: what one share group has done with one
//! partition, kept by the partition's leader. Records from the share-partition start offset
//! (SPSO) up to its end offset are in flight, each Available, Acquired (by one member, until
//! its acquisition lock expires), Acknowledged or Archived; below the SPSO every record is
//! done with, from the end offset on none has been delivered. A record is delivered to one
//! member at a time, its delivery count raised each time; released or expired past
//! `group.share.delivery.count.limit` deliveries, or rejected, it is archived (and handed to
//! the caller as a dead-letter candidate); the SPSO moves up over every record at the front
//! that is acknowledged or archived.
//!
//! Synchronous and clock-free like the groups: callers pass the time and the batches they
//! read from the log. At most `group.share.partition.max.record.locks` records are in flight
//! (end − SPSO), so the window's memory is bounded whatever members do. [`SharePartition::state`]
//! is what is made durable; [`SharePartition::restore`] rebuilds the machine from it on a new
//! leader, every record acquired then available again with its delivery count kept.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(test)]
mod tests;

/// Fewest deliveries `group.share.delivery.count.limit` may allow.
pub const DELIVERY_COUNT_LIMIT_MIN: u16 = 2;
/// Most deliveries `group.share.delivery.count.limit` may allow.
pub const DELIVERY_COUNT_LIMIT_MAX: u16 = 10;

/// Settings of one share-partition, from the group's `share.*` configs or the broker's
/// `group.share.*` defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareSettings {
    /// `group.share.record.lock.duration.ms`: how long an acquired record stays with its
    /// member before it is available to others again.
    pub record_lock_duration: Duration,
    /// `group.share.delivery.count.limit`: deliveries after which a released or expired
    /// record is archived instead of delivered again.
    pub delivery_count_limit: u16,
    /// `group.share.partition.max.record.locks`: records in flight at most.
    pub max_record_locks: u32,
}

impl Default for ShareSettings {
    fn default() -> ShareSettings {
        ShareSettings {
            record_lock_duration: Duration::from_millis(30_000),
            delivery_count_limit: 5,
            max_record_locks: 2_000,
        }
    }
}

/// Where a record in flight stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecordState {
    /// May be acquired (again).
    Available,
    /// Delivered to one member, which holds it until its lock expires.
    Acquired,
    /// Accepted by the member it was delivered to: never delivered again.
    Acknowledged,
    /// Given up (rejected, delivered too often, a gap, or an aborted transaction's): never
    /// delivered again.
    Archived,
}

impl RecordState {
    /// Kafka's code of the state (share-group state's delivery state).
    pub fn code(self) -> i8 {
        match self {
            RecordState::Available => 0,
            RecordState::Acquired => 1,
            RecordState::Acknowledged => 2,
            RecordState::Archived => 4,
        }
    }

    /// The state of a Kafka code, if it names one.
    pub fn from_code(code: i8) -> Option<RecordState> {
        match code {
            0 => Some(RecordState::Available),
            1 => Some(RecordState::Acquired),
            2 => Some(RecordState::Acknowledged),
            4 => Some(RecordState::Archived),
            _ => None,
        }
    }

    /// Done with: the SPSO may move past it (its delivery is complete).
    pub fn is_terminal(self) -> bool {
        matches!(self, RecordState::Acknowledged | RecordState::Archived)
    }
}

/// What a member says about records it holds (ShareAcknowledge's and ShareFetch's
/// acknowledgement types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AcknowledgeType {
    /// The offsets hold no record (compacted away): archived.
    Gap,
    /// Processed: acknowledged.
    Accept,
    /// Not processed, for another delivery: available again (or archived past the limit).
    Release,
    /// Unprocessable: archived, a dead-letter candidate.
    Reject,
    /// Still being processed: the acquisition lock starts again (KIP-1222).
    Renew,
}

/// A batch read from the log, as the leader hands it to [`SharePartition::acquire`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchedBatch {
    /// Its first offset.
    pub first_offset: i64,
    /// Its last offset.
    pub last_offset: i64,
    /// False for what is never delivered: control batches, and under read_committed the
    /// batches of aborted transactions. Their offsets are archived as they are reached.
    pub deliverable: bool,
}

/// Records acquired by one [`SharePartition::acquire`], consecutive offsets with the same
/// delivery count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquiredRecords {
    /// First offset.
    pub first_offset: i64,
    /// Last offset.
    pub last_offset: i64,
    /// How many times these records have been delivered, this time included.
    pub delivery_count: u16,
}

/// Acknowledgement of consecutive offsets with one type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acknowledgement {
    /// First offset.
    pub first_offset: i64,
    /// Last offset.
    pub last_offset: i64,
    /// What the member says of them.
    pub kind: AcknowledgeType,
}

/// Why a record was archived instead of being acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArchiveReason {
    /// Its member rejected it.
    Rejected,
    /// It was released or its lock expired after `group.share.delivery.count.limit`
    /// deliveries.
    DeliveryLimit,
}

/// A record archived by a member's decision or the delivery-count limit: what a dead-letter
/// topic receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchivedRecord {
    /// Its offset.
    pub offset: i64,
    /// Why.
    pub reason: ArchiveReason,
    /// How many times it was delivered.
    pub delivery_count: u16,
}

/// What [`SharePartition::expire_locks`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockExpiry {
    /// Acquisition locks that expired.
    pub expired: usize,
    /// Of their records, those archived by the delivery-count limit.
    pub archived: Vec<ArchivedRecord>,
}

/// Why an acknowledgement changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    /// An offset acknowledged is not acquired by the member (never delivered to it, its lock
    /// expired, or already acknowledged): Kafka's INVALID_RECORD_STATE.
    #[error("the record is not acquired by this member")]
    InvalidRecordState,
    /// A range whose last offset is before its first, or ranges out of order or
    /// overlapping: Kafka's INVALID_REQUEST.
    #[error("invalid acknowledgement range")]
    InvalidRange,
}

/// The durable form of a share-partition: Kafka's share-group state (a start offset and
/// state batches). Acquired records are stored as available with their delivery count,
/// since their locks do not outlive the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareState {
    /// The SPSO.
    pub start_offset: i64,
    /// Consecutive records of one state and delivery count, in offset order, covering the
    /// records in flight.
    pub batches: Vec<StateBatch>,
}

/// Consecutive records in flight with one state and delivery count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateBatch {
    /// First offset.
    pub first_offset: i64,
    /// Last offset.
    pub last_offset: i64,
    /// Available, Acknowledged or Archived.
    pub state: RecordState,
    /// Deliveries so far.
    pub delivery_count: u16,
}

/// One record in flight.
#[derive(Debug, Clone)]
struct InFlight {
    state: RecordState,
    delivery_count: u16,
    /// The member holding it and until when, while it is acquired.
    lock: Option<(Arc<str>, Instant)>,
}

impl InFlight {
    fn available(delivery_count: u16) -> InFlight {
        InFlight {
            state: RecordState::Available,
            delivery_count,
            lock: None,
        }
    }

    fn held_by(&self, member: &str) -> bool {
        self.lock
            .as_ref()
            .is_some_and(|(held, _)| &**held == member)
    }
}

/// One share group's state of one partition.
#[derive(Debug)]
pub struct SharePartition {
    settings: ShareSettings,
    /// The SPSO: the offset of `in_flight[0]`.
    start_offset: i64,
    /// Records from the SPSO up to the end offset (`start_offset + len`); the front one is
    /// never acknowledged or archived (the SPSO moves past those at once).
    in_flight: VecDeque<InFlight>,
    /// No acquisition lock expires before this: lowered as locks are taken, made exact when
    /// [`SharePartition::expire_locks`] scans.
    next_expiry: Option<Instant>,
}

impl SharePartition {
    /// A share-partition starting at `start_offset` with nothing in flight (where
    /// `share.auto.offset.reset` puts a new group: the log's start or end).
    pub fn new(start_offset: i64, settings: ShareSettings) -> SharePartition {
        SharePartition {
            settings,
            start_offset,
            in_flight: VecDeque::new(),
            next_expiry: None,
        }
    }

    /// A share-partition rebuilt from its durable state: the records it covers as they were
    /// (an acquired one stored as available), the end offset after its last batch. Offsets
    /// the batches skip are available, never delivered; batches before the start offset, out
    /// of order or overlapping are ignored, as is an acquired state.
    pub fn restore(state: &ShareState, settings: ShareSettings) -> SharePartition {
        let mut partition = SharePartition::new(state.start_offset, settings);
        for batch in &state.batches {
            let end = partition.end_offset();
            if batch.last_offset < batch.first_offset || batch.last_offset < end {
                continue;
            }
            let room = i64::from(settings.max_record_locks) - partition.in_flight_len();
            let last = batch.last_offset.min(end + room - 1);
            for offset in end..=last {
                let mut record = InFlight::available(0);
                if offset >= batch.first_offset {
                    record.delivery_count = batch.delivery_count;
                    if batch.state != RecordState::Acquired {
                        record.state = batch.state;
                    }
                }
                partition.in_flight.push_back(record);
            }
        }
        partition.advance_start();
        partition
    }

    /// The SPSO.
    pub fn start_offset(&self) -> i64 {
        self.start_offset
    }

    /// The end offset: the first offset never acquired.
    pub fn end_offset(&self) -> i64 {
        self.start_offset + self.in_flight_len()
    }

    fn in_flight_len(&self) -> i64 {
        // At most max_record_locks (a u32): fits.
        self.in_flight.len() as i64
    }

    /// Where the leader should read the log for the next acquisition: the first available
    /// record in flight, else the end offset while fewer than `max_record_locks` records are
    /// in flight; `None` when nothing can be acquired until members acknowledge.
    pub fn next_fetch_offset(&self) -> Option<i64> {
        if let Some(index) = self
            .in_flight
            .iter()
            .position(|r| r.state == RecordState::Available)
        {
            return Some(self.start_offset + index as i64);
        }
        (self.in_flight_len() < i64::from(self.settings.max_record_locks))
            .then(|| self.end_offset())
    }

    /// Acquires for `member`, until `now` plus the lock duration, at most `max_records`
    /// records of `batches` (read from the log from [`SharePartition::next_fetch_offset`], in
    /// offset order): the available ones in flight, then new ones from the end offset while
    /// fewer than `max_record_locks` are in flight. Offsets between the end offset and the
    /// next batch hold no record, and an undeliverable batch's none to deliver: both are
    /// archived as the end offset passes them.
    pub fn acquire(
        &mut self,
        member: &str,
        batches: &[FetchedBatch],
        max_records: u32,
        now: Instant,
    ) -> Vec<AcquiredRecords> {
        let member: Arc<str> = Arc::from(member);
        let until = now + self.settings.record_lock_duration;
        let window_max = i64::from(self.settings.max_record_locks);
        let mut acquired: Vec<AcquiredRecords> = Vec::new();
        let mut taken = 0u32;
        'batches: for batch in batches {
            if batch.last_offset < batch.first_offset {
                continue;
            }
            let first = batch.first_offset.max(self.start_offset);
            for offset in first..=batch.last_offset {
                if taken >= max_records {
                    break 'batches;
                }
                let index = offset - self.start_offset;
                if index < self.in_flight_len() {
                    // A record in flight: only an available one is delivered again.
                    let record = &mut self.in_flight[index as usize];
                    if record.state == RecordState::Available {
                        take(record, offset, (&member, until), &mut acquired);
                        taken += 1;
                    }
                    continue;
                }
                if index >= window_max {
                    break 'batches;
                }
                // Offsets before this one that no batch held: no record there.
                while self.in_flight_len() < index {
                    self.in_flight.push_back(InFlight {
                        state: RecordState::Archived,
                        delivery_count: 0,
                        lock: None,
                    });
                }
                let mut record = InFlight::available(0);
                if batch.deliverable {
                    take(&mut record, offset, (&member, until), &mut acquired);
                    taken += 1;
                } else {
                    record.state = RecordState::Archived;
                }
                self.in_flight.push_back(record);
            }
        }
        if taken > 0 {
            self.next_expiry = Some(self.next_expiry.map_or(until, |due| due.min(until)));
        }
        self.advance_start();
        acquired
    }

    /// Applies `member`'s acknowledgements, all or none: every offset they name must be in
    /// flight and acquired by `member`, and the ranges in order without overlap. Returns the
    /// records archived by a rejection or by the delivery-count limit on release.
    pub fn acknowledge(
        &mut self,
        member: &str,
        acknowledgements: &[Acknowledgement],
        now: Instant,
    ) -> Result<Vec<ArchivedRecord>, ShareError> {
        let mut previous_last = None;
        for ack in acknowledgements {
            if ack.last_offset < ack.first_offset
                || previous_last.is_some_and(|last| ack.first_offset <= last)
            {
                return Err(ShareError::InvalidRange);
            }
            previous_last = Some(ack.last_offset);
            if ack.first_offset < self.start_offset || ack.last_offset >= self.end_offset() {
                return Err(ShareError::InvalidRecordState);
            }
            let first = (ack.first_offset - self.start_offset) as usize;
            let last = (ack.last_offset - self.start_offset) as usize;
            if !self
                .in_flight
                .range(first..=last)
                .all(|r| r.state == RecordState::Acquired && r.held_by(member))
            {
                return Err(ShareError::InvalidRecordState);
            }
        }
        let mut archived = Vec::new();
        for ack in acknowledgements {
            for offset in ack.first_offset..=ack.last_offset {
                let index = (offset - self.start_offset) as usize;
                let record = &mut self.in_flight[index];
                match ack.kind {
                    AcknowledgeType::Accept => {
                        record.state = RecordState::Acknowledged;
                        record.lock = None;
                    }
                    AcknowledgeType::Gap => {
                        record.state = RecordState::Archived;
                        record.lock = None;
                    }
                    AcknowledgeType::Reject => {
                        record.state = RecordState::Archived;
                        record.lock = None;
                        archived.push(ArchivedRecord {
                            offset,
                            reason: ArchiveReason::Rejected,
                            delivery_count: record.delivery_count,
                        });
                    }
                    AcknowledgeType::Release => {
                        archived.extend(self.release(index));
                    }
                    AcknowledgeType::Renew => {
                        let until = now + self.settings.record_lock_duration;
                        if let Some((_, deadline)) = &mut record.lock {
                            *deadline = until;
                        }
                        self.next_expiry = Some(self.next_expiry.map_or(until, |d| d.min(until)));
                    }
                }
            }
        }
        self.advance_start();
        Ok(archived)
    }

    /// Makes the records whose acquisition lock expired by `now` available again, or
    /// archives those delivered `delivery_count_limit` times.
    pub fn expire_locks(&mut self, now: Instant) -> LockExpiry {
        let mut expiry = LockExpiry::default();
        if self.next_expiry.is_none_or(|due| due > now) {
            return expiry;
        }
        let mut next_expiry: Option<Instant> = None;
        for index in 0..self.in_flight.len() {
            match &self.in_flight[index].lock {
                Some((_, until)) if *until <= now => {
                    expiry.expired += 1;
                    expiry.archived.extend(self.release(index));
                }
                Some((_, until)) => {
                    next_expiry = Some(next_expiry.map_or(*until, |due| due.min(*until)));
                }
                None => {}
            }
        }
        self.next_expiry = next_expiry;
        self.advance_start();
        expiry
    }

    /// Releases every record `member` holds (it left the group, or its share session
    /// closed), as a release by it would; returns the ones archived by the limit.
    pub fn release_member(&mut self, member: &str) -> Vec<ArchivedRecord> {
        let mut archived = Vec::new();
        for index in 0..self.in_flight.len() {
            if self.in_flight[index].held_by(member) {
                archived.extend(self.release(index));
            }
        }
        self.advance_start();
        archived
    }

    /// Follows the log's start offset moving up (retention, DeleteRecords): records below it
    /// are gone, delivered or not, and the SPSO moves to it.
    pub fn advance_log_start(&mut self, log_start_offset: i64) {
        while self.start_offset < log_start_offset {
            if self.in_flight.pop_front().is_none() {
                self.start_offset = log_start_offset;
                break;
            }
            self.start_offset += 1;
        }
        self.advance_start();
    }

    /// The durable form of this share-partition (see [`ShareState`]).
    pub fn state(&self) -> ShareState {
        let mut batches: Vec<StateBatch> = Vec::new();
        for (index, record) in self.in_flight.iter().enumerate() {
            let offset = self.start_offset + index as i64;
            let state = match record.state {
                RecordState::Acquired => RecordState::Available,
                state => state,
            };
            match batches.last_mut() {
                Some(last)
                    if last.state == state && last.delivery_count == record.delivery_count =>
                {
                    last.last_offset = offset;
                }
                _ => batches.push(StateBatch {
                    first_offset: offset,
                    last_offset: offset,
                    state,
                    delivery_count: record.delivery_count,
                }),
            }
        }
        ShareState {
            start_offset: self.start_offset,
            batches,
        }
    }

    /// How many records in flight are in `state`.
    pub fn count(&self, state: RecordState) -> usize {
        self.in_flight.iter().filter(|r| r.state == state).count()
    }

    /// Releases the acquired record at `index`: available again, or archived once it has
    /// been delivered `delivery_count_limit` times.
    fn release(&mut self, index: usize) -> Option<ArchivedRecord> {
        let limit = self.settings.delivery_count_limit;
        let record = &mut self.in_flight[index];
        record.lock = None;
        if record.delivery_count >= limit {
            record.state = RecordState::Archived;
            return Some(ArchivedRecord {
                offset: self.start_offset + index as i64,
                reason: ArchiveReason::DeliveryLimit,
                delivery_count: record.delivery_count,
            });
        }
        record.state = RecordState::Available;
        None
    }

    /// Moves the SPSO past the acknowledged and archived records at the front.
    fn advance_start(&mut self) {
        while self
            .in_flight
            .front()
            .is_some_and(|record| record.state.is_terminal())
        {
            self.in_flight.pop_front();
            self.start_offset += 1;
        }
    }
}

/// Hands `record` at `offset` to `member` until its deadline, one more delivery, and adds it
/// to `acquired` (joined to the last range when it follows it with the same count).
fn take(
    record: &mut InFlight,
    offset: i64,
    (member, until): (&Arc<str>, Instant),
    acquired: &mut Vec<AcquiredRecords>,
) {
    record.state = RecordState::Acquired;
    record.delivery_count = record.delivery_count.saturating_add(1);
    record.lock = Some((member.clone(), until));
    match acquired.last_mut() {
        Some(last)
            if last.last_offset + 1 == offset && last.delivery_count == record.delivery_count =>
        {
            last.last_offset = offset;
        }
        _ => acquired.push(AcquiredRecords {
            first_offset: offset,
            last_offset: offset,
            delivery_count: record.delivery_count,
        }),
    }
}
