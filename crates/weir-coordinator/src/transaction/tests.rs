//! The transaction coordinator against a `__transaction_state` in memory.

use std::sync::Arc;

use super::records::TxnValue;
use super::shard::TxnRecord;
use super::state::TxnState;
use super::*;
use crate::runtime::Shard;
use crate::test_log::MemoryLog;

const PARTITIONS: i32 = 3;
const SETTINGS: TransactionSettings = TransactionSettings {
    max_timeout_ms: 900_000,
    abort_check_interval_ms: 10_000,
    id_expiration_ms: 3_600_000,
    id_expiration_check_interval_ms: 60_000,
};

/// A coordinator serving every partition of `log`.
fn loaded(log: Arc<MemoryLog>) -> Arc<TransactionCoordinator> {
    let coordinator = Arc::new(TransactionCoordinator::new(SETTINGS, log));
    let runtime = coordinator.topic_runtime();
    runtime.start(PARTITIONS);
    for partition in 0..PARTITIONS {
        runtime.load(partition, 0).expect("load");
    }
    coordinator
}

fn request(id: &str, current: Option<(i64, i16)>) -> InitProducerId {
    InitProducerId {
        transactional_id: id.to_string(),
        timeout_ms: 60_000,
        current: current.map(|(producer_id, epoch)| ProducerIdAndEpoch { producer_id, epoch }),
    }
}

/// InitProducerId as the broker makes it: asks, and hands out `next_id` when the coordinator
/// needs a producer id.
async fn init(
    coordinator: &TransactionCoordinator,
    request: &InitProducerId,
    next_id: &mut i64,
) -> Result<(i64, i16), TxnError> {
    let mut fresh = None;
    loop {
        match coordinator.init_producer_id(request, fresh).await? {
            InitOutcome::Ready(ready) => return Ok((ready.producer_id, ready.epoch)),
            InitOutcome::NeedsProducerId => {
                assert!(fresh.is_none(), "asked for a producer id twice");
                fresh = Some(*next_id);
                *next_id += 1;
            }
            InitOutcome::Aborting(markers) => panic!("unexpected abort of {markers:?}"),
        }
    }
}

/// What the coordinator holds of every transactional id, but the epochs before the current
/// ones (kept in memory only).
fn stored(coordinator: &TransactionCoordinator) -> Vec<(String, TxnValue)> {
    let partitions = coordinator.runtime.lock();
    let mut ids: Vec<(String, TxnValue)> = partitions
        .shards()
        .flat_map(|shard| shard.ids.iter())
        .map(|(id, metadata)| (id.clone(), metadata.value.clone()))
        .collect();
    ids.sort_by(|a, b| a.0.cmp(&b.0));
    ids
}

#[tokio::test]
async fn a_new_transactional_id_gets_a_new_producer_id_and_each_init_a_new_epoch() {
    let log = Arc::new(MemoryLog::default());
    let coordinator = loaded(log.clone());
    let mut next_id = 1_000;
    assert_eq!(
        coordinator
            .init_producer_id(&request("t", None), None)
            .await,
        Ok(InitOutcome::NeedsProducerId),
        "a new transactional id needs a producer id"
    );
    assert!(log.records().is_empty(), "nothing is stored without one");
    let first = init(&coordinator, &request("t", None), &mut next_id).await;
    assert_eq!(first, Ok((1_000, 0)));
    // A second producer with the same id (a restart, or a zombie's successor) fences the first.
    let second = init(&coordinator, &request("t", None), &mut next_id).await;
    assert_eq!(second, Ok((1_000, 1)));
    let other = init(&coordinator, &request("u", None), &mut next_id).await;
    assert_eq!(other, Ok((1_001, 0)));
    assert_eq!(
        next_id, 1_002,
        "a known transactional id keeps its producer id"
    );
    assert_eq!(log.records().len(), 3, "one record per init");

    let reloaded = loaded(log);
    assert_eq!(
        stored(&reloaded),
        stored(&coordinator),
        "a coordinator loading the log holds what the writes made"
    );
    let third = init(&reloaded, &request("t", None), &mut next_id).await;
    assert_eq!(third, Ok((1_000, 2)), "epochs go on after a failover");
}

/// KIP-360: a producer naming its id and epoch bumps its own epoch; one naming an older epoch
/// is fenced, unless it retries the bump whose answer it lost.
#[tokio::test]
async fn a_producer_bumps_its_own_epoch_and_an_older_one_is_fenced() {
    let log = Arc::new(MemoryLog::default());
    let coordinator = loaded(log.clone());
    let mut next_id = 7;
    assert_eq!(
        init(&coordinator, &request("t", None), &mut next_id).await,
        Ok((7, 0))
    );
    assert_eq!(
        init(&coordinator, &request("t", Some((7, 0))), &mut next_id).await,
        Ok((7, 1))
    );
    let records = log.records().len();
    assert_eq!(
        init(&coordinator, &request("t", Some((7, 0))), &mut next_id).await,
        Ok((7, 1)),
        "a retry of the bump gets the same answer"
    );
    assert_eq!(log.records().len(), records, "and stores nothing");
    assert_eq!(
        init(&coordinator, &request("t", None), &mut next_id).await,
        Ok((7, 2)),
        "another producer fences it"
    );
    assert_eq!(
        init(&coordinator, &request("t", Some((7, 1))), &mut next_id).await,
        Err(TxnError::ProducerFenced),
        "the fenced producer cannot bump its way back"
    );
    assert_eq!(
        init(&coordinator, &request("t", Some((8, 2))), &mut next_id).await,
        Err(TxnError::ProducerFenced),
        "nor can a producer of another id"
    );
    assert_eq!(
        init(&coordinator, &request("new", Some((99, 4))), &mut next_id).await,
        Ok((8, 0)),
        "a producer whose transactional id was forgotten starts again"
    );
}

/// A producer id whose epoch is exhausted is replaced by a new one, at epoch 0; a producer
/// that retries that bump is not fenced.
#[tokio::test]
async fn an_exhausted_epoch_moves_the_producer_to_a_new_id() {
    let log = Arc::new(MemoryLog::default());
    let exhausted = TxnRecord {
        transactional_id: "t".to_string(),
        value: Some(TxnValue {
            producer_id: 5,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: EPOCH_EXHAUSTED,
            timeout_ms: 60_000,
            state: TxnState::CompleteCommit,
            partitions: TxnPartitions::new(),
            last_update_ms: 0,
            start_ms: -1,
            client_transaction_version: 0,
        }),
        last_producer_epoch: -1,
    };
    let partition = crate::partition_for("t", PARTITIONS);
    log.append(partition, vec![TransactionShard::encode(&exhausted)], None)
        .expect("appended");
    let coordinator = loaded(log);
    let mut next_id = 50;
    let asked = request("t", Some((5, EPOCH_EXHAUSTED)));
    assert_eq!(init(&coordinator, &asked, &mut next_id).await, Ok((50, 0)));
    let value = stored(&coordinator).remove(0).1;
    assert_eq!((value.producer_id, value.previous_producer_id), (50, 5));
    assert_eq!(
        init(&coordinator, &asked, &mut next_id).await,
        Ok((50, 0)),
        "the retried bump gets the same answer"
    );
}

#[tokio::test]
async fn bad_requests_are_refused_and_store_nothing() {
    let log = Arc::new(MemoryLog::default());
    let coordinator = loaded(log.clone());
    let mut next_id = 1;
    assert_eq!(
        init(&coordinator, &request("", None), &mut next_id).await,
        Err(TxnError::InvalidRequest)
    );
    for timeout_ms in [0, -1, SETTINGS.max_timeout_ms + 1] {
        let mut asked = request("t", None);
        asked.timeout_ms = timeout_ms;
        assert_eq!(
            init(&coordinator, &asked, &mut next_id).await,
            Err(TxnError::InvalidTransactionTimeout),
            "timeout {timeout_ms}"
        );
    }
    assert!(log.records().is_empty());
    log.refuse(1);
    assert_eq!(
        init(&coordinator, &request("t", None), &mut next_id).await,
        Err(TxnError::CoordinatorNotAvailable),
        "a write that fails is retried by the client"
    );
    assert!(stored(&coordinator).is_empty(), "and changes nothing");
}

/// Two InitProducerIds of one transactional id never decide from the same state: while one's
/// record is being made durable, the other is told to retry.
#[tokio::test]
async fn a_second_init_waits_for_the_first() {
    let log = Arc::new(MemoryLog::default());
    let coordinator = loaded(log.clone());
    let mut next_id = 1;
    assert_eq!(
        init(&coordinator, &request("t", None), &mut next_id).await,
        Ok((1, 0))
    );
    log.hold();
    let first = tokio::spawn({
        let coordinator = coordinator.clone();
        async move {
            coordinator
                .init_producer_id(&request("t", None), None)
                .await
        }
    });
    tokio::task::yield_now().await;
    assert_eq!(
        coordinator
            .init_producer_id(&request("t", None), None)
            .await,
        Err(TxnError::ConcurrentTransactions)
    );
    log.release();
    assert_eq!(
        first.await.expect("task"),
        Ok(InitOutcome::Ready(ProducerIdAndEpoch {
            producer_id: 1,
            epoch: 1
        }))
    );
    assert_eq!(
        init(&coordinator, &request("t", None), &mut next_id).await,
        Ok((1, 2))
    );
}

#[test]
fn a_transactional_id_is_served_only_where_its_partition_is_loaded() {
    let coordinator = TransactionCoordinator::new(SETTINGS, Arc::new(MemoryLog::default()));
    assert_eq!(
        coordinator.check_served("t"),
        Err(TxnError::CoordinatorNotAvailable)
    );
    let runtime = coordinator.topic_runtime();
    runtime.start(1);
    assert_eq!(
        coordinator.check_served("t"),
        Err(TxnError::CoordinatorLoadInProgress)
    );
    runtime.load(0, 0).expect("load");
    assert_eq!(coordinator.check_served("t"), Ok(()));
    assert_eq!(runtime.unload(0), Some(0));
    assert_eq!(coordinator.check_served("t"), Err(TxnError::NotCoordinator));
}

/// The coordinator epoch of a transactional id is the leader epoch its partition was loaded
/// at; this broker elected again takes the newer epoch, never an older one, and a partition
/// loaded anew starts from the epoch it is loaded at.
#[test]
fn a_transactional_id_is_coordinated_at_its_partitions_leader_epoch() {
    let coordinator = TransactionCoordinator::new(SETTINGS, Arc::new(MemoryLog::default()));
    let runtime = coordinator.topic_runtime();
    runtime.start(1);
    assert_eq!(
        coordinator.coordinator_epoch("t"),
        Err(TxnError::CoordinatorLoadInProgress)
    );
    runtime.load(0, 4).expect("load");
    assert_eq!(coordinator.coordinator_epoch("t"), Ok(4));
    assert_eq!(runtime.loaded_epoch(0), Some(4));
    runtime.elected_again(0, 6);
    runtime.elected_again(0, 5);
    assert_eq!(coordinator.coordinator_epoch("t"), Ok(6));
    runtime.unload(0);
    assert_eq!(
        coordinator.coordinator_epoch("t"),
        Err(TxnError::NotCoordinator)
    );
    runtime.elected_again(0, 9);
    assert_eq!(
        runtime.loaded_epoch(0),
        None,
        "not served: nothing to elect"
    );
    runtime.load(0, 8).expect("load again");
    assert_eq!(coordinator.coordinator_epoch("t"), Ok(8));
}

fn partitions(list: &[(&str, i32)]) -> TxnPartitions {
    let mut out = TxnPartitions::new();
    for (topic, partition) in list {
        out.entry(topic.to_string()).or_default().insert(*partition);
    }
    out
}

fn end(id: &str, producer: (i64, i16), commit: bool) -> EndTxn {
    EndTxn {
        transactional_id: id.to_string(),
        producer: ProducerIdAndEpoch {
            producer_id: producer.0,
            epoch: producer.1,
        },
        commit,
        bump_epoch: false,
    }
}

impl TransactionCoordinator {
    /// EndTxn of transaction protocol version 1: the markers to write, if any.
    async fn end_v1(&self, request: &EndTxn) -> Result<Option<TxnMarkers>, TxnError> {
        match self.end(request, None).await? {
            EndOutcome::Ended { markers, producer } => {
                assert_eq!(producer, request.producer, "version 1 keeps the epoch");
                Ok(markers)
            }
            EndOutcome::NeedsProducerId => panic!("version 1 never bumps the epoch"),
        }
    }
}

fn state_of(coordinator: &TransactionCoordinator, id: &str) -> (TxnState, TxnPartitions) {
    let value = stored(coordinator)
        .into_iter()
        .find(|(stored_id, _)| stored_id == id)
        .expect("stored")
        .1;
    (value.state, value.partitions)
}

/// A coordinator whose transactional id "t" has a producer (id `producer_id`, epoch 0) with
/// a transaction open on `open`: (the coordinator, the producer).
async fn open_transaction(
    producer_id: i64,
    open: &[(&str, i32)],
) -> (Arc<TransactionCoordinator>, ProducerIdAndEpoch) {
    let coordinator = loaded(Arc::new(MemoryLog::default()));
    let mut next_id = producer_id;
    let (producer_id, epoch) = init(&coordinator, &request("t", None), &mut next_id)
        .await
        .expect("init");
    let producer = ProducerIdAndEpoch { producer_id, epoch };
    coordinator
        .add_partitions("t", producer, &partitions(open))
        .await
        .expect("added");
    (coordinator, producer)
}

/// AddPartitionsToTxn for the next transaction, sent while the last one's markers are being
/// written, waits for them to be stored complete and then begins it, rather than sending the
/// client off to retry (it is refused only when they take longer than the wait, as above).
#[tokio::test]
async fn the_next_transaction_waits_for_the_last_to_complete() {
    let (coordinator, producer) = open_transaction(3, &[("a", 0)]).await;
    let markers = coordinator
        .end_v1(&end("t", (producer.producer_id, producer.epoch), true))
        .await
        .expect("prepared")
        .expect("markers to write");
    let next = partitions(&[("b", 1)]);
    let (added, completed) =
        tokio::join!(coordinator.add_partitions("t", producer, &next), async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            coordinator.complete(&markers).await
        });
    assert_eq!((added, completed), (Ok(()), Ok(true)));
    assert_eq!(
        state_of(&coordinator, "t"),
        (TxnState::Ongoing, partitions(&[("b", 1)]))
    );
}

/// A transaction's life: partitions join it (Ongoing), EndTxn prepares it and names the
/// markers to write, and once they are written it is complete; a retried EndTxn is answered
/// as the first was, and the other ending or one not begun is INVALID_TXN_STATE.
#[tokio::test]
async fn a_transaction_is_begun_prepared_and_completed() {
    let log = Arc::new(MemoryLog::default());
    let coordinator = loaded(log.clone());
    let mut next_id = 3;
    let (producer_id, epoch) = init(&coordinator, &request("t", None), &mut next_id)
        .await
        .expect("init");
    let producer = ProducerIdAndEpoch { producer_id, epoch };
    assert_eq!(
        coordinator
            .end_v1(&end("t", (producer_id, epoch), true))
            .await,
        Err(TxnError::InvalidTxnState),
        "nothing to commit"
    );
    coordinator
        .add_partitions("t", producer, &partitions(&[("a", 0), ("b", 1)]))
        .await
        .expect("added");
    let records = log.records().len();
    coordinator
        .add_partitions("t", producer, &partitions(&[("a", 0)]))
        .await
        .expect("added again");
    assert_eq!(
        log.records().len(),
        records,
        "a partition already in it stores nothing"
    );
    coordinator
        .add_partitions("t", producer, &partitions(&[("a", 2)]))
        .await
        .expect("added more");
    assert_eq!(
        state_of(&coordinator, "t"),
        (
            TxnState::Ongoing,
            partitions(&[("a", 0), ("a", 2), ("b", 1)])
        )
    );

    let markers = coordinator
        .end_v1(&end("t", (producer_id, epoch), true))
        .await
        .expect("prepared")
        .expect("markers to write");
    assert_eq!(
        markers,
        TxnMarkers {
            transactional_id: "t".to_string(),
            producer_id,
            producer_epoch: epoch,
            commit: true,
            partitions: partitions(&[("a", 0), ("a", 2), ("b", 1)]),
        }
    );
    assert_eq!(state_of(&coordinator, "t").0, TxnState::PrepareCommit);
    assert_eq!(
        coordinator
            .end_v1(&end("t", (producer_id, epoch), true))
            .await,
        Err(TxnError::ConcurrentTransactions),
        "a retry while the markers are written waits"
    );
    assert_eq!(
        coordinator
            .end_v1(&end("t", (producer_id, epoch), false))
            .await,
        Err(TxnError::InvalidTxnState),
        "a commit being made cannot become an abort"
    );
    assert_eq!(
        coordinator
            .add_partitions("t", producer, &partitions(&[("c", 0)]))
            .await,
        Err(TxnError::ConcurrentTransactions),
        "the next transaction waits for this one to complete"
    );
    assert_eq!(
        init(&coordinator, &request("t", None), &mut next_id).await,
        Err(TxnError::ConcurrentTransactions)
    );
    assert_eq!(coordinator.complete(&markers).await, Ok(true));
    assert_eq!(
        state_of(&coordinator, "t"),
        (TxnState::CompleteCommit, TxnPartitions::new())
    );
    assert_eq!(
        coordinator.complete(&markers).await,
        Ok(false),
        "completing twice stores nothing"
    );
    assert_eq!(
        coordinator
            .end_v1(&end("t", (producer_id, epoch), true))
            .await,
        Ok(None),
        "a retried commit is answered as done"
    );
    assert_eq!(
        coordinator
            .end_v1(&end("t", (producer_id, epoch), false))
            .await,
        Err(TxnError::InvalidTxnState)
    );

    // The next transaction, aborted; a reload holds what the writes made.
    coordinator
        .add_partitions("t", producer, &partitions(&[("c", 0)]))
        .await
        .expect("next transaction");
    let aborting = coordinator
        .end_v1(&end("t", (producer_id, epoch), false))
        .await
        .expect("prepared")
        .expect("markers");
    assert!(!aborting.commit);
    let reloaded = loaded(log.clone());
    assert_eq!(stored(&reloaded), stored(&coordinator));
    assert_eq!(
        reloaded.prepared(),
        vec![aborting.clone()],
        "the coordinator taking over finds the transaction it must finish"
    );
    assert_eq!(reloaded.complete(&aborting).await, Ok(true));
    assert!(reloaded.prepared().is_empty());
    assert_eq!(state_of(&reloaded, "t").0, TxnState::CompleteAbort);
}

/// Only the transactional id's current producer may add partitions or end its transaction.
#[tokio::test]
async fn only_the_current_producer_may_use_the_transaction() {
    let coordinator = loaded(Arc::new(MemoryLog::default()));
    let mut next_id = 10;
    let (producer_id, _) = init(&coordinator, &request("t", None), &mut next_id)
        .await
        .expect("init");
    let (_, epoch) = init(&coordinator, &request("t", None), &mut next_id)
        .await
        .expect("a newer producer");
    let some = partitions(&[("a", 0)]);
    let stale = ProducerIdAndEpoch {
        producer_id,
        epoch: epoch - 1,
    };
    assert_eq!(
        coordinator.add_partitions("t", stale, &some).await,
        Err(TxnError::ProducerFenced)
    );
    let stranger = ProducerIdAndEpoch {
        producer_id: producer_id + 1,
        epoch,
    };
    assert_eq!(
        coordinator.add_partitions("t", stranger, &some).await,
        Err(TxnError::InvalidProducerIdMapping)
    );
    let current = ProducerIdAndEpoch { producer_id, epoch };
    assert_eq!(
        coordinator.add_partitions("unknown", current, &some).await,
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert_eq!(
        coordinator.add_partitions("", current, &some).await,
        Err(TxnError::InvalidRequest)
    );
    coordinator
        .add_partitions("t", current, &some)
        .await
        .expect("the current producer");
    assert_eq!(
        coordinator
            .end_v1(&end("t", (producer_id, epoch - 1), true))
            .await,
        Err(TxnError::ProducerFenced)
    );
}

/// A new producer of a transactional id whose older producer left a transaction open fences
/// it: the open transaction is prepared to abort at the next epoch (the markers fence the old
/// producer on its partitions), the new producer retries until the abort is complete, then
/// gets the epoch after.
#[tokio::test]
async fn a_new_producer_aborts_the_transaction_its_predecessor_left_open() {
    let coordinator = loaded(Arc::new(MemoryLog::default()));
    let mut next_id = 20;
    let (producer_id, epoch) = init(&coordinator, &request("t", None), &mut next_id)
        .await
        .expect("init");
    let old = ProducerIdAndEpoch { producer_id, epoch };
    coordinator
        .add_partitions("t", old, &partitions(&[("a", 1)]))
        .await
        .expect("begun");
    let outcome = coordinator
        .init_producer_id(&request("t", None), None)
        .await;
    let Ok(InitOutcome::Aborting(markers)) = outcome else {
        panic!("expected an abort, got {outcome:?}");
    };
    assert_eq!(
        markers,
        TxnMarkers {
            transactional_id: "t".to_string(),
            producer_id,
            producer_epoch: epoch + 1,
            commit: false,
            partitions: partitions(&[("a", 1)]),
        }
    );
    assert_eq!(state_of(&coordinator, "t").0, TxnState::PrepareAbort);
    assert_eq!(
        coordinator
            .end_v1(&end("t", (producer_id, epoch), true))
            .await,
        Err(TxnError::ProducerFenced),
        "the old producer cannot commit"
    );
    assert_eq!(
        coordinator
            .init_producer_id(&request("t", None), None)
            .await,
        Err(TxnError::ConcurrentTransactions),
        "the new producer waits for the abort"
    );
    assert_eq!(coordinator.complete(&markers).await, Ok(true));
    assert_eq!(state_of(&coordinator, "t").0, TxnState::CompleteAbort);
    assert_eq!(
        init(&coordinator, &request("t", None), &mut next_id).await,
        Ok((producer_id, epoch + 2))
    );
}

/// A transaction open longer than its timeout is aborted by the timer at the next epoch
/// (fencing its producer), and is then among the prepared transactions whose markers the
/// broker writes; one within its timeout is left alone.
#[tokio::test]
async fn a_transaction_past_its_timeout_is_aborted() {
    let log = Arc::new(MemoryLog::default());
    let clock = Arc::new(weir_clock::ManualClock::new(0));
    let coordinator = Arc::new(TransactionCoordinator::with_clock(
        SETTINGS,
        log,
        clock.clone(),
    ));
    let runtime = coordinator.topic_runtime();
    runtime.start(PARTITIONS);
    for partition in 0..PARTITIONS {
        runtime.load(partition, 0).expect("load");
    }
    let mut next_id = 1;
    let mut begin = |id: &'static str, timeout_ms: i32| {
        let coordinator = coordinator.clone();
        let fresh = next_id;
        next_id += 1;
        async move {
            let mut asked = request(id, None);
            asked.timeout_ms = timeout_ms;
            let mut ids = fresh;
            let (producer_id, epoch) = init(&coordinator, &asked, &mut ids).await.expect("init");
            let producer = ProducerIdAndEpoch { producer_id, epoch };
            coordinator
                .add_partitions(id, producer, &partitions(&[("a", 0)]))
                .await
                .expect("begun");
            producer
        }
    };
    let slow = begin("slow", 5_000).await;
    begin("patient", 60_000).await;
    clock.advance(std::time::Duration::from_millis(10_001));
    coordinator.runtime.tick();
    // The timer's write is settled in a task of its own.
    for _ in 0..100 {
        if !coordinator.prepared().is_empty() {
            break;
        }
        tokio::task::yield_now().await;
    }
    let prepared = coordinator.prepared();
    assert_eq!(
        prepared,
        vec![TxnMarkers {
            transactional_id: "slow".to_string(),
            producer_id: slow.producer_id,
            producer_epoch: slow.epoch + 1,
            commit: false,
            partitions: partitions(&[("a", 0)]),
        }]
    );
    assert_eq!(state_of(&coordinator, "patient").0, TxnState::Ongoing);
    assert_eq!(
        coordinator
            .end_v1(&end("slow", (slow.producer_id, slow.epoch), true))
            .await,
        Err(TxnError::ProducerFenced),
        "its producer cannot commit it any more"
    );
    assert_eq!(coordinator.complete(&prepared[0]).await, Ok(true));
    assert_eq!(state_of(&coordinator, "slow").0, TxnState::CompleteAbort);
    assert!(coordinator.prepared().is_empty());
}

/// A transactional id without a transaction, unchanged for transactional.id.expiration.ms, is
/// forgotten (a tombstone): its next producer gets a new producer id. One with a transaction
/// open is kept.
#[tokio::test]
async fn an_idle_transactional_id_expires() {
    let log = Arc::new(MemoryLog::default());
    let clock = Arc::new(weir_clock::ManualClock::new(0));
    let coordinator = TransactionCoordinator::with_clock(SETTINGS, log.clone(), clock.clone());
    let runtime = coordinator.topic_runtime();
    runtime.start(PARTITIONS);
    for partition in 0..PARTITIONS {
        runtime.load(partition, 0).expect("load");
    }
    let mut next_id = 1;
    let idle = init(&coordinator, &request("idle", None), &mut next_id)
        .await
        .expect("init");
    let mut long = request("busy", None);
    long.timeout_ms = 900_000;
    let (producer_id, epoch) = init(&coordinator, &long, &mut next_id).await.expect("init");
    let busy = ProducerIdAndEpoch { producer_id, epoch };
    coordinator
        .add_partitions("busy", busy, &partitions(&[("a", 0)]))
        .await
        .expect("begun");
    clock.advance(std::time::Duration::from_millis(3_600_001));
    coordinator.runtime.tick();
    for _ in 0..100 {
        if stored(&coordinator).len() == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    let left: Vec<String> = stored(&coordinator).into_iter().map(|(id, _)| id).collect();
    assert_eq!(left, vec!["busy".to_string()]);
    assert!(
        log.records().iter().any(|(_, value)| value.is_none()),
        "a tombstone is stored"
    );
    let again = init(&coordinator, &request("idle", None), &mut next_id)
        .await
        .expect("init");
    assert_ne!(again.0, idle.0, "a new producer id");
    assert_eq!(again.1, 0);
    let reloaded = loaded(log);
    assert_eq!(stored(&reloaded), stored(&coordinator));
}

/// Verification (AddPartitionsToTxn `verify_only`) says which partitions the open transaction
/// holds and changes nothing; an unknown id or producer, an older epoch and a transaction
/// being ended are refused whole, and a transaction ended holds nothing.
#[tokio::test]
async fn verification_names_the_partitions_the_open_transaction_holds() {
    let log = Arc::new(MemoryLog::default());
    let coordinator = loaded(log.clone());
    let mut next_id = 5;
    let (producer_id, epoch) = init(&coordinator, &request("t", None), &mut next_id)
        .await
        .expect("init");
    let producer = ProducerIdAndEpoch { producer_id, epoch };
    let asked = [("a", 0), ("a", 1), ("b", 0)];
    assert_eq!(
        coordinator.verify("t", producer, &asked),
        Ok(vec![false; 3]),
        "no transaction yet"
    );
    coordinator
        .add_partitions("t", producer, &partitions(&[("a", 0), ("b", 0)]))
        .await
        .expect("added");
    let records = log.records().len();
    assert_eq!(
        coordinator.verify("t", producer, &asked),
        Ok(vec![true, false, true])
    );
    assert_eq!(log.records().len(), records, "verification stores nothing");
    let stranger = ProducerIdAndEpoch {
        producer_id: producer_id + 100,
        epoch,
    };
    assert_eq!(
        coordinator.verify("t", stranger, &asked),
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert_eq!(
        coordinator.verify("nobody", producer, &asked),
        Err(TxnError::InvalidProducerIdMapping)
    );
    assert_eq!(
        coordinator.verify("", producer, &asked),
        Err(TxnError::InvalidRequest)
    );
    let older = ProducerIdAndEpoch {
        producer_id,
        epoch: epoch - 1,
    };
    assert_eq!(
        coordinator.verify("t", older, &asked),
        Err(TxnError::ProducerFenced)
    );
    let markers = coordinator
        .end_v1(&end("t", (producer_id, epoch), true))
        .await
        .expect("prepared")
        .expect("markers");
    assert_eq!(
        coordinator.verify("t", producer, &asked),
        Err(TxnError::ConcurrentTransactions),
        "being committed"
    );
    assert!(coordinator.complete(&markers).await.expect("complete"));
    assert_eq!(
        coordinator.verify("t", producer, &asked),
        Ok(vec![false; 3]),
        "ended"
    );
}

fn end_bumping(id: &str, producer: ProducerIdAndEpoch, commit: bool) -> EndTxn {
    EndTxn {
        bump_epoch: true,
        ..end(id, (producer.producer_id, producer.epoch), commit)
    }
}

/// EndTxn `bump_epoch` (protocol version 2, KIP-890): each end bumps the epoch (markers carry
/// the new one), a retry with the old epoch is answered as done once complete, a late end of
/// the earlier transaction is fenced, an abort with nothing open bumps too, and an exhausted
/// epoch moves the producer to a new id (answered at once; stored on completion).
#[tokio::test]
async fn ending_a_transaction_bumps_the_epoch_under_protocol_version_2() {
    let (coordinator, first) = open_transaction(70, &[("a", 0)]).await;
    let (producer_id, epoch) = (first.producer_id, first.epoch);
    let EndOutcome::Ended { markers, producer } = coordinator
        .end(&end_bumping("t", first, true), None)
        .await
        .expect("prepared")
    else {
        panic!("no producer id needed yet");
    };
    let markers = markers.expect("markers");
    let second = ProducerIdAndEpoch {
        producer_id,
        epoch: epoch + 1,
    };
    assert_eq!(producer, second, "the next epoch");
    assert_eq!(
        markers.producer_epoch,
        epoch + 1,
        "markers fence the old epoch"
    );
    assert_eq!(
        coordinator.end(&end_bumping("t", first, true), None).await,
        Err(TxnError::ConcurrentTransactions),
        "a retry while the markers are written waits"
    );
    assert_eq!(
        coordinator
            .end(&end_bumping("t", second, false), None)
            .await,
        Err(TxnError::ConcurrentTransactions),
        "so does the next transaction's end"
    );
    assert!(coordinator.complete(&markers).await.expect("complete"));
    assert_eq!(
        coordinator.end(&end_bumping("t", first, true), None).await,
        Ok(EndOutcome::Ended {
            markers: None,
            producer: second
        }),
        "a retry after completion is answered as done, with the bumped epoch"
    );
    assert_eq!(
        coordinator.end(&end_bumping("t", first, false), None).await,
        Err(TxnError::InvalidTxnState),
        "the committed transaction cannot become an abort"
    );
    assert_eq!(
        coordinator.end(&end_bumping("t", second, true), None).await,
        Err(TxnError::InvalidTxnState),
        "nothing open to commit"
    );
    let EndOutcome::Ended { markers, producer } = coordinator
        .end(&end_bumping("t", second, false), None)
        .await
        .expect("an abort of nothing")
    else {
        panic!("no producer id needed yet");
    };
    let markers = markers.expect("markers");
    assert!(markers.partitions.is_empty());
    assert_eq!(producer.epoch, epoch + 2);
    assert!(coordinator.complete(&markers).await.expect("complete"));
    assert_eq!(
        coordinator.end(&end_bumping("t", first, false), None).await,
        Err(TxnError::ProducerFenced),
        "a late end of an earlier transaction is fenced"
    );

    // The epoch runs out: the next end moves the producer to a new id at epoch 0.
    let exhausted = ProducerIdAndEpoch {
        producer_id,
        epoch: EPOCH_EXHAUSTED,
    };
    {
        let mut loaded = coordinator.runtime.lock();
        let (_, shard) = loaded.served("t").expect("served");
        let metadata = shard.ids.get_mut("t").expect("known");
        metadata.value.producer_epoch = EPOCH_EXHAUSTED;
    }
    coordinator
        .add_partitions("t", exhausted, &partitions(&[("a", 0)]))
        .await
        .expect("added");
    assert_eq!(
        coordinator
            .end(&end_bumping("t", exhausted, true), None)
            .await,
        Ok(EndOutcome::NeedsProducerId)
    );
    let EndOutcome::Ended { markers, producer } = coordinator
        .end(&end_bumping("t", exhausted, true), Some(900))
        .await
        .expect("prepared")
    else {
        panic!("given an id");
    };
    let markers = markers.expect("markers");
    assert_eq!(
        (markers.producer_id, markers.producer_epoch),
        (producer_id, i16::MAX)
    );
    assert_eq!(
        producer,
        ProducerIdAndEpoch {
            producer_id: 900,
            epoch: 0
        }
    );
    // The new id, used before the markers are written, is told to wait (never
    // INVALID_PRODUCER_ID_MAPPING, fatal to the client).
    assert_eq!(
        coordinator.verify("t", producer, &[("a", 0)]),
        Err(TxnError::ConcurrentTransactions)
    );
    assert_eq!(
        coordinator
            .add_partitions("t", producer, &partitions(&[("b", 0)]))
            .await,
        Err(TxnError::ConcurrentTransactions),
        "after waiting for markers that were never written"
    );
    assert!(coordinator.complete(&markers).await.expect("complete"));
    let (state, _) = state_of(&coordinator, "t");
    assert_eq!(state, TxnState::CompleteCommit);
    let value = stored(&coordinator).remove(0).1;
    assert_eq!(
        (
            value.producer_id,
            value.producer_epoch,
            value.previous_producer_id
        ),
        (900, 0, producer_id)
    );
    assert_eq!(
        coordinator
            .end(&end_bumping("t", exhausted, true), None)
            .await,
        Ok(EndOutcome::Ended {
            markers: None,
            producer
        }),
        "a retry with the exhausted epoch of the old id is answered as done"
    );
}
