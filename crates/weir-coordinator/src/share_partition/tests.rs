use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;

const LOCK: Duration = Duration::from_secs(15);

fn settings(delivery_count_limit: u16, max_record_locks: u32) -> ShareSettings {
    ShareSettings {
        record_lock_duration: LOCK,
        delivery_count_limit,
        max_record_locks,
    }
}

fn batch(first_offset: i64, last_offset: i64) -> FetchedBatch {
    FetchedBatch {
        first_offset,
        last_offset,
        deliverable: true,
    }
}

fn ack(first_offset: i64, last_offset: i64, kind: AcknowledgeType) -> Acknowledgement {
    Acknowledgement {
        first_offset,
        last_offset,
        kind,
    }
}

fn acquired(first_offset: i64, last_offset: i64, delivery_count: u16) -> AcquiredRecords {
    AcquiredRecords {
        first_offset,
        last_offset,
        delivery_count,
    }
}

#[test]
fn records_go_to_one_member_at_a_time_and_the_start_moves_over_what_is_done() {
    let now = Instant::now();
    let mut partition = SharePartition::new(0, settings(5, 100));
    assert_eq!(partition.next_fetch_offset(), Some(0));
    let log = [batch(0, 4), batch(5, 9)];
    assert_eq!(partition.acquire("a", &log, 3, now), [acquired(0, 2, 1)]);
    assert_eq!(partition.next_fetch_offset(), Some(3));
    assert_eq!(partition.acquire("b", &log, 10, now), [acquired(3, 9, 1)]);
    assert_eq!(partition.next_fetch_offset(), Some(10));
    assert!(partition.acquire("c", &log, 10, now).is_empty(), "all held");

    // b cannot acknowledge a's records; a's own acknowledgement moves the start.
    let refused = partition.acknowledge("b", &[ack(0, 0, AcknowledgeType::Accept)], now);
    assert_eq!(refused, Err(ShareError::InvalidRecordState));
    let done = partition.acknowledge("a", &[ack(0, 1, AcknowledgeType::Accept)], now);
    assert_eq!(done, Ok(vec![]));
    assert_eq!(partition.start_offset(), 2);
    assert_eq!(
        partition.acknowledge("a", &[ack(0, 0, AcknowledgeType::Accept)], now),
        Err(ShareError::InvalidRecordState),
        "acknowledged once only"
    );

    // A release makes the record available again; the next delivery counts 2.
    let released = partition.acknowledge("a", &[ack(2, 2, AcknowledgeType::Release)], now);
    assert_eq!(released, Ok(vec![]));
    assert_eq!(partition.next_fetch_offset(), Some(2));
    assert_eq!(partition.acquire("c", &log, 10, now), [acquired(2, 2, 2)]);
}

#[test]
fn a_record_past_the_delivery_limit_or_rejected_is_archived_for_the_dead_letter_topic() {
    let mut now = Instant::now();
    let mut partition = SharePartition::new(10, settings(2, 100));
    let log = [batch(10, 11)];
    partition.acquire("a", &log, 10, now);
    let rejected = partition.acknowledge("a", &[ack(11, 11, AcknowledgeType::Reject)], now);
    assert_eq!(
        rejected,
        Ok(vec![ArchivedRecord {
            offset: 11,
            reason: ArchiveReason::Rejected,
            delivery_count: 1
        }])
    );
    // Offset 10: its lock expires once (available), then after a second delivery it is
    // archived.
    now += LOCK;
    assert_eq!(partition.expire_locks(now).archived, []);
    assert_eq!(partition.acquire("b", &log, 10, now), [acquired(10, 10, 2)]);
    now += LOCK;
    assert_eq!(
        partition.expire_locks(now).archived,
        [ArchivedRecord {
            offset: 10,
            reason: ArchiveReason::DeliveryLimit,
            delivery_count: 2
        }]
    );
    assert_eq!(partition.start_offset(), 12);
    assert_eq!(partition.next_fetch_offset(), Some(12));
}

#[test]
fn renew_keeps_the_lock_and_a_leaving_member_releases_what_it_holds() {
    let mut now = Instant::now();
    let mut partition = SharePartition::new(0, settings(5, 100));
    let log = [batch(0, 1)];
    partition.acquire("a", &log, 10, now);
    now += LOCK - Duration::from_secs(1);
    let renewed = partition.acknowledge("a", &[ack(0, 0, AcknowledgeType::Renew)], now);
    assert_eq!(renewed, Ok(vec![]));
    now += Duration::from_secs(2);
    partition.expire_locks(now);
    assert_eq!(
        partition.count(RecordState::Acquired),
        1,
        "0 renewed, 1 expired"
    );
    assert_eq!(partition.count(RecordState::Available), 1);
    partition.release_member("a");
    assert_eq!(partition.count(RecordState::Available), 2);
    assert_eq!(partition.acquire("b", &log, 10, now), [acquired(0, 1, 2)]);
}

#[test]
fn gaps_and_undeliverable_batches_are_archived_and_in_flight_records_are_bounded() {
    let now = Instant::now();
    let mut partition = SharePartition::new(0, settings(5, 6));
    let log = [
        batch(0, 1),
        FetchedBatch {
            first_offset: 2,
            last_offset: 2,
            deliverable: false,
        },
        batch(5, 9),
    ];
    // 3 and 4 hold no record; at most 6 in flight (0..=5).
    assert_eq!(
        partition.acquire("a", &log, 100, now),
        [acquired(0, 1, 1), acquired(5, 5, 1)]
    );
    assert_eq!(partition.end_offset(), 6);
    assert_eq!(partition.next_fetch_offset(), None, "the window is full");
    assert!(partition.acquire("b", &log, 100, now).is_empty());
    partition
        .acknowledge("a", &[ack(0, 1, AcknowledgeType::Accept)], now)
        .expect("held by a");
    assert_eq!(partition.start_offset(), 5, "2, 3 and 4 were archived");
    assert_eq!(partition.acquire("b", &log, 100, now), [acquired(6, 9, 1)]);
    assert_eq!(
        partition.acknowledge(
            "b",
            &[
                ack(7, 8, AcknowledgeType::Accept),
                ack(6, 6, AcknowledgeType::Accept)
            ],
            now
        ),
        Err(ShareError::InvalidRange),
        "out of order"
    );
    assert_eq!(partition.count(RecordState::Acquired), 5, "nothing applied");
}

#[test]
fn the_durable_state_rebuilds_the_partition_with_its_delivery_counts() {
    let now = Instant::now();
    let mut partition = SharePartition::new(0, settings(5, 100));
    let log = [batch(0, 5)];
    partition.acquire("a", &log, 10, now);
    partition
        .acknowledge(
            "a",
            &[
                ack(1, 1, AcknowledgeType::Accept),
                ack(2, 2, AcknowledgeType::Release),
                ack(3, 3, AcknowledgeType::Reject),
            ],
            now,
        )
        .expect("held by a");
    let state = partition.state();
    assert_eq!(state.start_offset, 0);
    let rebuilt = SharePartition::restore(&state, settings(5, 100));
    assert_eq!(rebuilt.state(), state);
    assert_eq!(rebuilt.count(RecordState::Acquired), 0);
    assert_eq!(rebuilt.count(RecordState::Available), 4, "0, 2, 4, 5");
    let mut rebuilt = rebuilt;
    let again = rebuilt.acquire("b", &log, 10, now);
    assert_eq!(
        again,
        [acquired(0, 0, 2), acquired(2, 2, 2), acquired(4, 5, 2)]
    );
}

#[test]
fn the_log_start_moving_up_takes_the_start_with_it() {
    let now = Instant::now();
    let mut partition = SharePartition::new(0, settings(5, 100));
    partition.acquire("a", &[batch(0, 9)], 10, now);
    partition.advance_log_start(4);
    assert_eq!(partition.start_offset(), 4);
    assert_eq!(partition.count(RecordState::Acquired), 6);
    partition.advance_log_start(20);
    assert_eq!((partition.start_offset(), partition.end_offset()), (20, 20));
}

/// What the model knows of one record it has seen acquired.
#[derive(Debug, Clone)]
struct Modelled {
    state: RecordState,
    delivery_count: u16,
    holder: Option<(u8, Instant)>,
}

/// The obvious rules, over every record ever acquired.
#[derive(Debug, Default)]
struct Model {
    records: BTreeMap<i64, Modelled>,
    acknowledged: usize,
}

impl Model {
    fn release(&mut self, offset: i64, limit: u16) -> Option<ArchivedRecord> {
        let record = self.records.get_mut(&offset).expect("modelled");
        record.holder = None;
        if record.delivery_count >= limit {
            record.state = RecordState::Archived;
            return Some(ArchivedRecord {
                offset,
                reason: ArchiveReason::DeliveryLimit,
                delivery_count: record.delivery_count,
            });
        }
        record.state = RecordState::Available;
        None
    }

    fn held_by(&self, offset: i64, member: u8) -> bool {
        self.records.get(&offset).is_some_and(|r| {
            r.state == RecordState::Acquired && r.holder.is_some_and(|(m, _)| m == member)
        })
    }
}

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        member: u8,
        max_records: u32,
    },
    Acknowledge {
        member: u8,
        pick: usize,
        len: i64,
        kind: AcknowledgeType,
    },
    Advance {
        seconds: u64,
    },
    LeaderChange,
    Leave {
        member: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let kind = prop_oneof![
        Just(AcknowledgeType::Accept),
        Just(AcknowledgeType::Release),
        Just(AcknowledgeType::Reject),
        Just(AcknowledgeType::Renew),
        Just(AcknowledgeType::Gap),
    ];
    prop_oneof![
        4 => (0u8..4, 1u32..8).prop_map(|(member, max_records)| Op::Acquire { member, max_records }),
        5 => (0u8..4, any::<usize>(), 1i64..4, kind)
            .prop_map(|(member, pick, len, kind)| Op::Acknowledge { member, pick, len, kind }),
        2 => (0u64..20).prop_map(|seconds| Op::Advance { seconds }),
        1 => Just(Op::LeaderChange),
        1 => (0u8..4).prop_map(|member| Op::Leave { member }),
    ]
}

/// A log of batches with holes between some and some undeliverable.
fn log() -> impl Strategy<Value = Vec<FetchedBatch>> {
    proptest::collection::vec((0i64..3, 1i64..5, prop::bool::weighted(0.85)), 1..25).prop_map(
        |shapes| {
            let mut next = 0;
            shapes
                .into_iter()
                .map(|(hole, len, deliverable)| {
                    let first_offset = next + hole;
                    next = first_offset + len;
                    FetchedBatch {
                        first_offset,
                        last_offset: first_offset + len - 1,
                        deliverable,
                    }
                })
                .collect()
        },
    )
}

/// What a leader reading from `offset` gets: the batch holding it and up to two after.
fn read(log: &[FetchedBatch], offset: i64) -> Vec<FetchedBatch> {
    log.iter()
        .filter(|b| b.last_offset >= offset)
        .take(3)
        .copied()
        .collect()
}

fn member_name(member: u8) -> String {
    format!("member-{member}")
}

struct Run {
    partition: SharePartition,
    model: Model,
    settings: ShareSettings,
    now: Instant,
}

impl Run {
    fn step(&mut self, log: &[FetchedBatch], op: &Op) {
        let limit = self.settings.delivery_count_limit;
        match *op {
            Op::Acquire {
                member,
                max_records,
            } => {
                let batches = match self.partition.next_fetch_offset() {
                    Some(offset) => read(log, offset),
                    None => Vec::new(),
                };
                let available = self
                    .model
                    .records
                    .values()
                    .any(|r| r.state == RecordState::Available);
                let got =
                    self.partition
                        .acquire(&member_name(member), &batches, max_records, self.now);
                assert!(
                    !available || !got.is_empty(),
                    "an available record is acquired"
                );
                let mut count = 0;
                for range in got {
                    for offset in range.first_offset..=range.last_offset {
                        count += 1;
                        assert!(
                            log.iter().any(|b| b.deliverable
                                && (b.first_offset..=b.last_offset).contains(&offset)),
                            "{offset} is a deliverable record"
                        );
                        let record = self.model.records.entry(offset).or_insert(Modelled {
                            state: RecordState::Available,
                            delivery_count: 0,
                            holder: None,
                        });
                        assert_eq!(record.state, RecordState::Available, "{offset} was free");
                        assert_eq!(range.delivery_count, record.delivery_count + 1);
                        record.state = RecordState::Acquired;
                        record.delivery_count += 1;
                        record.holder = Some((member, self.now + LOCK));
                    }
                }
                assert!(count <= max_records);
            }
            Op::Acknowledge {
                member,
                pick,
                len,
                kind,
            } => {
                let held: Vec<i64> = self
                    .model
                    .records
                    .iter()
                    .filter(|(_, r)| r.state == RecordState::Acquired)
                    .map(|(offset, _)| *offset)
                    .collect();
                let first = match held.len() {
                    0 => self.partition.start_offset() + pick as i64 % 8,
                    n => held[pick % n],
                };
                self.acknowledge(member, (first, first + len - 1), kind);
            }
            Op::Advance { seconds } => {
                self.now += Duration::from_secs(seconds);
                let now = self.now;
                let expired: Vec<i64> = self
                    .model
                    .records
                    .iter()
                    .filter(|(_, r)| r.holder.is_some_and(|(_, until)| until <= now))
                    .map(|(offset, _)| *offset)
                    .collect();
                let count = expired.len();
                let archived: Vec<ArchivedRecord> = expired
                    .into_iter()
                    .filter_map(|offset| self.model.release(offset, limit))
                    .collect();
                let expected = LockExpiry {
                    expired: count,
                    archived,
                };
                assert_eq!(self.partition.expire_locks(now), expected);
            }
            Op::LeaderChange => {
                let state = self.partition.state();
                self.partition = SharePartition::restore(&state, self.settings);
                assert_eq!(self.partition.state(), state, "restored as stored");
                for record in self.model.records.values_mut() {
                    if record.state == RecordState::Acquired {
                        record.state = RecordState::Available;
                        record.holder = None;
                    }
                }
            }
            Op::Leave { member } => {
                let held: Vec<i64> = self
                    .model
                    .records
                    .iter()
                    .filter(|(_, r)| r.holder.is_some_and(|(m, _)| m == member))
                    .map(|(offset, _)| *offset)
                    .collect();
                let expected: Vec<ArchivedRecord> = held
                    .into_iter()
                    .filter_map(|offset| self.model.release(offset, limit))
                    .collect();
                assert_eq!(
                    self.partition.release_member(&member_name(member)),
                    expected
                );
            }
        }
        self.check(log);
    }

    /// `member` acknowledges `first..=last` with `kind`: done when the model says it holds
    /// them all, refused otherwise.
    fn acknowledge(&mut self, member: u8, (first, last): (i64, i64), kind: AcknowledgeType) {
        let limit = self.settings.delivery_count_limit;
        let valid = (first..=last).all(|o| self.model.held_by(o, member));
        let answer =
            self.partition
                .acknowledge(&member_name(member), &[ack(first, last, kind)], self.now);
        if !valid {
            assert_eq!(answer, Err(ShareError::InvalidRecordState));
            return;
        }
        let mut expected = Vec::new();
        for offset in first..=last {
            let record = self.model.records.get_mut(&offset).expect("held");
            match kind {
                AcknowledgeType::Accept => {
                    record.state = RecordState::Acknowledged;
                    record.holder = None;
                    self.model.acknowledged += 1;
                }
                AcknowledgeType::Gap => {
                    record.state = RecordState::Archived;
                    record.holder = None;
                }
                AcknowledgeType::Reject => {
                    record.state = RecordState::Archived;
                    record.holder = None;
                    expected.push(ArchivedRecord {
                        offset,
                        reason: ArchiveReason::Rejected,
                        delivery_count: record.delivery_count,
                    });
                }
                AcknowledgeType::Renew => {
                    record.holder = Some((member, self.now + LOCK));
                }
                AcknowledgeType::Release => {
                    expected.extend(self.model.release(offset, limit));
                }
            }
        }
        assert_eq!(answer, Ok(expected));
    }

    /// The partition agrees with the model on every record in flight, and nothing the
    /// model still has to deliver is below the start.
    fn check(&self, log: &[FetchedBatch]) {
        let start = self.partition.start_offset();
        let end = self.partition.end_offset();
        let accepted_records = self
            .model
            .records
            .values()
            .filter(|r| r.state == RecordState::Acknowledged)
            .count();
        assert_eq!(
            self.model.acknowledged, accepted_records,
            "each record accepted once"
        );
        assert!(end - start <= i64::from(self.settings.max_record_locks));
        for (offset, record) in &self.model.records {
            if *offset < start {
                assert!(
                    record.state.is_terminal(),
                    "{offset} below the start is done"
                );
            }
        }
        let mut offset = start;
        for batch in self.partition.state().batches {
            assert_eq!(batch.first_offset, offset, "the state covers the window");
            for o in batch.first_offset..=batch.last_offset {
                match self.model.records.get(&o) {
                    Some(record) => {
                        let state = match record.state {
                            RecordState::Acquired => RecordState::Available,
                            state => state,
                        };
                        assert_eq!(
                            (batch.state, batch.delivery_count),
                            (state, record.delivery_count),
                            "{o}"
                        );
                    }
                    None => {
                        let deliverable = log.iter().any(|b| {
                            b.deliverable && (b.first_offset..=b.last_offset).contains(&o)
                        });
                        assert!(
                            !deliverable,
                            "{o}: a deliverable record in flight is modelled"
                        );
                        assert_eq!(
                            batch.state,
                            RecordState::Archived,
                            "{o} holds nothing to deliver"
                        );
                    }
                }
            }
            offset = batch.last_offset + 1;
        }
        assert_eq!(offset, end);
    }

    /// Delivers and accepts everything left: every deliverable record ends acknowledged or
    /// archived, each accepted once, and the start reaches the log's end.
    fn drain(&mut self, log: &[FetchedBatch]) {
        let log_end = log.last().map_or(0, |b| b.last_offset + 1);
        for _ in 0..1_000 {
            if self.partition.start_offset() == log_end {
                break;
            }
            self.step(log, &Op::Advance { seconds: 60 });
            self.step(
                log,
                &Op::Acquire {
                    member: 9,
                    max_records: 50,
                },
            );
            let held: Vec<i64> = self
                .model
                .records
                .iter()
                .filter(|(_, r)| r.holder.is_some_and(|(m, _)| m == 9))
                .map(|(offset, _)| *offset)
                .collect();
            for offset in held {
                self.acknowledge(9, (offset, offset), AcknowledgeType::Accept);
                self.check(log);
            }
        }
        assert_eq!(
            self.partition.start_offset(),
            log_end,
            "everything delivered"
        );
        for batch in log.iter().filter(|b| b.deliverable) {
            for offset in batch.first_offset..=batch.last_offset {
                let record = self.model.records.get(&offset).expect("delivered");
                assert!(record.state.is_terminal(), "{offset} done");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_share_partition_loses_nothing_delivers_once_at_a_time_and_counts_exactly(
        log in log(),
        ops in proptest::collection::vec(op(), 1..80),
        delivery_count_limit in DELIVERY_COUNT_LIMIT_MIN..=4u16,
        max_record_locks in 4u32..40,
    ) {
        let settings = settings(delivery_count_limit, max_record_locks);
        let mut run = Run {
            partition: SharePartition::new(0, settings),
            model: Model::default(),
            settings,
            now: Instant::now(),
        };
        for op in &ops {
            run.step(&log, op);
        }
        run.drain(&log);
    }
}
